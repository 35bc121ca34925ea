//! The Doris client: Stream Load (with two-phase commit) over HTTP, and the Doris sink.

mod error;
pub mod format;
pub mod offsets;
pub mod scan;
pub mod sink;
pub mod stream_load;

pub use error::{DorisError, ERR_INCR_VISIBLE_WAIT_TIMEOUT, ERR_INCR_WINDOW_NOT_READY, TxnState};
pub use stream_load::{Credentials, LoadResponse, LoadStatus, StreamLoadClient, TableInfo, TxnOutcome};
