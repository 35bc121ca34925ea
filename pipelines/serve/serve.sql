-- The tenants' databases in the embedded doris-lite of pipelines/serve/server.toml.
CREATE DATABASE IF NOT EXISTS analytics;
CREATE DATABASE IF NOT EXISTS marketing;
CREATE TABLE IF NOT EXISTS analytics.students (id BIGINT, name VARCHAR(64), age INT)
  UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2;
CREATE TABLE IF NOT EXISTS marketing.students (id BIGINT, name VARCHAR(64), age INT)
  UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2;
