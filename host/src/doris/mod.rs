//! The Doris client: Stream Load (with two-phase commit) over HTTP, and the Doris sink.

mod error;
pub mod format;
pub mod offsets;
pub mod scan;
pub mod sink;
pub mod stream_load;

pub use error::DorisError;
pub use stream_load::{Credentials, LoadResponse, LoadStatus, StreamLoadClient, TableInfo, TxnOutcome};
