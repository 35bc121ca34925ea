//! The Doris client: the FE's REST and SQL APIs, the TSO, query plans, Stream Load with two-phase
//! commit, Arrow Flight SQL scans, and the body formats. No pipeline logic lives here.

pub mod config;
mod connection;
mod error;
pub mod fe;
pub mod format;
mod ids;
pub mod scan;
mod text;
pub mod tls;

pub use connection::DorisConnection;
pub use error::{DorisError, ERR_INCR_VISIBLE_WAIT_TIMEOUT, ERR_INCR_WINDOW_NOT_READY, TxnState};
pub use fe::{Credentials, FeClient, LoadResponse, LoadStatus, TableInfo, TxnOutcome};
pub use ids::{Label, TxnId};
