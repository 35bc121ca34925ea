//! The Doris client: the FE's REST and SQL APIs, the TSO, query plans, Stream Load with two-phase
//! commit, Arrow Flight SQL scans, and the body formats. No pipeline logic lives here.

mod connection;
mod error;
pub mod format;
pub mod scan;
pub mod stream_load;

pub use connection::DorisConnection;
pub use error::DorisError;
pub use stream_load::{Credentials, LoadResponse, LoadStatus, StreamLoadClient, TableInfo, TxnOutcome};
