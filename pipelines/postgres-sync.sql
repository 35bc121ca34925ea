-- A small shop schema for pipelines/postgres-sync.toml (repeatable: it drops and creates `shop`).
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS shop CASCADE;
CREATE SCHEMA shop;

CREATE TABLE shop.customers (
    id INT PRIMARY KEY,
    name VARCHAR(40) NOT NULL,
    email TEXT,
    joined TIMESTAMPTZ
);
INSERT INTO shop.customers VALUES
    (1, 'Ann', 'ann@example.com', '2026-01-05 09:30:00+00'),
    (2, 'Bao 😀', NULL, '2026-03-17 18:02:11+00'),
    (3, 'Chidi', 'chidi@example.com', NULL);

CREATE TYPE shop.status AS ENUM ('new', 'paid', 'shipped');
CREATE TABLE shop.orders (
    id BIGINT PRIMARY KEY,
    customer_id INT NOT NULL,
    amount NUMERIC(12,2) NOT NULL,
    status shop.status NOT NULL,
    tags TEXT[],
    placed TIMESTAMP(3) NOT NULL
);
INSERT INTO shop.orders VALUES
    (1001, 1, 19.90, 'paid', '{gift}', '2026-11-30 10:00:00.125'),
    (1002, 2, 5.00, 'new', NULL, '2026-11-30 11:15:42.000'),
    (1003, 1, 250.00, 'shipped', '{bulk,"next day"}', '2026-12-01 08:01:02.999'),
    (9223372036854775807, 3, 0.01, 'new', '{}', '2026-12-01 09:00:00.000');

-- No primary key: a DUPLICATE KEY table in Doris.
CREATE TABLE shop.events (
    at TIMESTAMP NOT NULL,
    kind VARCHAR(20) NOT NULL,
    payload JSONB
);
INSERT INTO shop.events VALUES
    ('2026-12-01 08:00:00', 'login', '{"customer": 1}'),
    ('2026-12-01 08:01:02', 'checkout', '{"order": 1003, "items": [1, 2]}'),
    ('2026-12-01 09:00:00', 'logout', NULL);
