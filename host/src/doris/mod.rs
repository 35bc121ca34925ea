//! The Doris client: Stream Load (with two-phase commit) over HTTP.

mod error;
pub mod stream_load;

pub use error::DorisError;
pub use stream_load::{Credentials, LoadResponse, LoadStatus, StreamLoadClient, TxnOutcome};
