-- A changelog-enabled source table and the table that mirrors it (repeatable: IF NOT EXISTS, UNIQUE keys).
CREATE DATABASE IF NOT EXISTS shop;

CREATE TABLE IF NOT EXISTS shop.orders (
    `id` BIGINT,
    `customer` VARCHAR(64),
    `amount` DECIMAL(10, 2),
    `status` VARCHAR(16)
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 4
PROPERTIES (
    "enable_unique_key_merge_on_write" = "true",
    "changelog.enable" = "true",
    "changelog.need_historical_value" = "true",
    "changelog.ttl_seconds" = "86400"
);

INSERT INTO shop.orders VALUES (1, 'ada', 12.50, 'paid'), (2, 'grace', 99.00, 'new');

CREATE TABLE IF NOT EXISTS shop.orders_mirror (
    `id` BIGINT,
    `customer` VARCHAR(64),
    `amount` DECIMAL(10, 2),
    `status` VARCHAR(16)
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 2;
