//! Sluice: a stream processor for Apache Doris whose user logic runs as sandboxed WebAssembly.

pub mod cli;
pub mod doris;
pub mod error;
pub mod metrics;
pub mod pipeline;
pub mod retry;
pub mod runtime;
pub mod server;
pub mod sinks;
pub mod sources;
pub mod state;
pub mod transforms;
pub mod verify;
pub mod wasm;

/// The unit of data inside Sluice: an Arrow record batch for one table plus a row kind per row.
pub use sluice_guest::batch::{Batch, RowKind};
