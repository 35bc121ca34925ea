//! Integration tests: doris-lite driven by the clients Doris users run — curl as the Stream
//! Load manual uses it, the mysql CLI and pymysql. One test binary with modules keeps link
//! time down.

mod changelog;
mod clients;
mod common;
mod discard;
mod faults;
mod flight;
mod mysql_async_driver;
mod mysql_cli;
mod persistence;
mod pymysql;
mod rest;
mod stream_load;
mod tls;
