-- A small shop database for pipelines/mysql-sync.toml (repeatable: it drops and creates `shop`).
SET NAMES utf8mb4;
DROP DATABASE IF EXISTS shop;
CREATE DATABASE shop CHARACTER SET utf8mb4;

CREATE TABLE shop.customers (
    id INT PRIMARY KEY,
    name VARCHAR(40) NOT NULL,
    email VARCHAR(80),
    joined TIMESTAMP NULL
);
INSERT INTO shop.customers VALUES
    (1, 'Ann', 'ann@example.com', '2026-01-05 09:30:00'),
    (2, 'Bao 😀', NULL, '2026-03-17 18:02:11'),
    (3, 'Chidi', 'chidi@example.com', NULL);

CREATE TABLE shop.orders (
    id BIGINT UNSIGNED PRIMARY KEY,
    customer_id INT NOT NULL,
    amount DECIMAL(12,2) NOT NULL,
    status ENUM('new', 'paid', 'shipped') NOT NULL,
    placed DATETIME(3) NOT NULL
);
INSERT INTO shop.orders VALUES
    (1001, 1, 19.90, 'paid', '2026-11-30 10:00:00.125'),
    (1002, 2, 5.00, 'new', '2026-11-30 11:15:42.000'),
    (1003, 1, 250.00, 'shipped', '2026-12-01 08:01:02.999'),
    (18446744073709551615, 3, 0.01, 'new', '2026-12-01 09:00:00.000');

-- No primary key: a DUPLICATE KEY table in Doris.
CREATE TABLE shop.events (
    at DATETIME NOT NULL,
    kind VARCHAR(20) NOT NULL,
    payload JSON
);
INSERT INTO shop.events VALUES
    ('2026-12-01 08:00:00', 'login', '{"customer": 1}'),
    ('2026-12-01 08:01:02', 'checkout', '{"order": 1003, "items": [1, 2]}'),
    ('2026-12-01 09:00:00', 'logout', NULL);
