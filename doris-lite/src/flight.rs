//! Arrow Flight SQL (§4).

use std::collections::HashMap;
use std::sync::Arc;

use crate::faults::DebugPoints;
use crate::sql::Executor;

/// The Flight SQL service.
#[derive(Debug, Clone)]
pub struct FlightSql {}

impl FlightSql {
    /// A service running statements with `exec`.
    pub fn new(_exec: Executor, _users: Arc<HashMap<String, String>>, _debug: DebugPoints) -> FlightSql {
        FlightSql {}
    }
}

/// The gRPC router of the Flight SQL port.
pub fn router(_svc: FlightSql) -> axum::Router {
    axum::Router::new()
}
