//! Integration tests of the plugin runtime against real WebAssembly components from `plugins/`.
//! One test binary keeps link time down.

mod architecture;
mod cli;
mod cluster;
mod common;
mod credentials;
mod dead_letter;
mod decoders;
mod doris_client;
mod doris_source;
mod fuzz;
mod kafka;
mod lookup;
mod mysql;
mod pipeline;
mod plugin_languages;
mod postgres;
mod sandbox;
mod serve;
mod sink;
mod stream_load;
mod tls;
mod transforms;
