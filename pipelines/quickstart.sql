-- The Flink Doris connector quick start's tables and rows (repeatable: UNIQUE keys, IF NOT EXISTS).
CREATE DATABASE IF NOT EXISTS test;

CREATE TABLE IF NOT EXISTS test.student (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1;

INSERT INTO test.student VALUES (1, 'James', 18);
INSERT INTO test.student VALUES (2, 'Emily', 28);

CREATE TABLE IF NOT EXISTS test.student_trans (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1;
