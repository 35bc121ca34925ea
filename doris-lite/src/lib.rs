//! doris-lite: a single-process emulator of the Apache Doris surfaces that clients use —
//! Stream Load and 2PC over HTTP, the FE REST endpoints and the MySQL protocol — over an
//! in-memory store with Doris' key-model semantics. For local runs and tests only.

pub mod ddl;
pub mod discard;
pub mod engine;
pub mod faults;
pub mod flight;
pub mod http;
mod json_fields;
pub mod load;
pub mod mysql;
pub mod net;
pub mod persist;
pub mod sql;
pub mod storage;
#[cfg(feature = "test-ca")]
pub mod test_ca;
pub mod types;

pub use sql::{changelog, functions, keyed_scan, table_refs};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::engine::{Engine, EngineConfig};
pub use crate::faults::{DebugPoint, DebugPointError, DebugPoints};
pub use crate::net::TlsFiles;
use crate::persist::WriteAheadLog;
use crate::sql::{Executor, ServerInfo};

/// How to start doris-lite.
#[derive(Debug, Clone)]
pub struct Config {
    /// FE HTTP port (0 = ephemeral).
    pub fe_http_port: u16,
    /// BE HTTP port (0 = ephemeral).
    pub be_http_port: u16,
    /// MySQL protocol port (0 = ephemeral).
    pub query_port: u16,
    /// Arrow Flight SQL port (0 = ephemeral).
    pub arrow_flight_sql_port: u16,
    /// Run on a manual clock that only [`Handle::advance_clock`] (or
    /// `POST /api/debug/clock/advance`) moves.
    pub manual_clock: bool,
    /// Directory for the commit log; None = in memory only.
    pub data_dir: Option<PathBuf>,
    /// Users and passwords (default `root` with an empty password).
    pub users: Vec<(String, String)>,
    /// Address to bind and advertise.
    pub host: String,
    /// Pre-committed transactions abort after this long (`stream_load_default_precommit_timeout_second`).
    pub precommit_timeout: Duration,
    /// Finished labels are kept this long (`streaming_label_keep_max_second`).
    pub label_keep: Duration,
    /// `max_running_txn_num_per_db`.
    pub max_running_txn_per_db: usize,
    /// `streaming_load_max_mb`, in bytes (default 10 GiB).
    pub max_load_bytes: u64,
    /// Answer every Stream Load without storing it: the body is read to the end and its rows
    /// counted, the transaction (2PC too) commits nothing. For measuring clients; the debug
    /// point `StreamLoad.discard` does the same per load.
    pub discard_stream_loads: bool,
    /// Serve the FE and BE HTTP ports and Arrow Flight SQL over TLS with this certificate
    /// (Doris' `enable_https` and Flight SQL's TLS), and offer it on the MySQL protocol
    /// (`enable_ssl`: a client that asks for SSL gets it).
    pub tls: Option<TlsFiles>,
}

impl Default for Config {
    fn default() -> Self {
        let e = EngineConfig::default();
        Config {
            fe_http_port: 8030,
            be_http_port: 8040,
            query_port: 9030,
            arrow_flight_sql_port: 8070,
            manual_clock: false,
            data_dir: None,
            users: vec![("root".into(), String::new())],
            host: "127.0.0.1".into(),
            precommit_timeout: e.precommit_timeout,
            label_keep: e.label_keep,
            max_running_txn_per_db: e.max_running_txn_per_db,
            max_load_bytes: e.max_load_bytes,
            discard_stream_loads: false,
            tls: None,
        }
    }
}

impl Config {
    /// Every listener on an ephemeral port, in memory.
    pub fn ephemeral() -> Config {
        Config { fe_http_port: 0, be_http_port: 0, query_port: 0, arrow_flight_sql_port: 0, ..Default::default() }
    }
}

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A port could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The data dir could not be opened or replayed.
    #[error("data dir: {0}")]
    DataDir(String),
    /// The TLS certificate or key could not be read.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The entry point.
pub struct DorisLite;

/// A running instance.
#[derive(Debug)]
pub struct Handle {
    fe: SocketAddr,
    be: SocketAddr,
    query: SocketAddr,
    flight: SocketAddr,
    supervisor: JoinHandle<()>,
    engine: Arc<Engine>,
    debug_points: DebugPoints,
}

/// What every listener serves; kept to serve again after a listener restart.
#[derive(Clone)]
struct Services {
    fe: axum::Router,
    be: axum::Router,
    flight: axum::Router,
    exec: Executor,
    users: Arc<HashMap<String, String>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The MySQL protocol's: the same certificate, never asking for a client's.
    mysql_tls: Option<Arc<rustls::ServerConfig>>,
}

impl Services {
    /// Serves `[fe, be, query, flight]` in `set`.
    fn spawn(&self, set: &mut JoinSet<()>, listeners: Vec<TcpListener>) {
        let mut it = listeners.into_iter();
        let (Some(fe), Some(be), Some(q), Some(fl)) = (it.next(), it.next(), it.next(), it.next()) else {
            return;
        };
        let acceptor = self.tls.clone().map(net::TlsAcceptor::from);
        set.spawn(net::serve_http(fe, self.fe.clone(), acceptor.clone()));
        set.spawn(net::serve_http(be, self.be.clone(), acceptor.clone()));
        let mysql_acceptor = self.mysql_tls.clone().map(net::TlsAcceptor::from);
        set.spawn(mysql::serve(q, self.exec.clone(), self.users.clone(), mysql_acceptor));
        set.spawn(net::serve_http(fl, self.flight.clone(), acceptor));
    }
}

/// Serves until dropped; on a restart request closes every listener and connection, waits,
/// and binds the same addresses again.
async fn supervise(
    services: Services,
    addrs: Vec<SocketAddr>,
    first: Vec<TcpListener>,
    mut restart: mpsc::UnboundedReceiver<Duration>,
) {
    let mut listeners = first;
    loop {
        let mut set = JoinSet::new();
        services.spawn(&mut set, listeners);
        let Some(pause) = restart.recv().await else {
            return std::future::pending().await;
        };
        // Let the reply to the request that asked for the restart leave first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        set.shutdown().await;
        tracing::info!(pause_ms = pause.as_millis() as u64, "listeners closed by Server.restart_listeners");
        tokio::time::sleep(pause).await;
        listeners = Vec::new();
        for a in &addrs {
            let mut tries = 0;
            loop {
                match TcpListener::bind(a).await {
                    Ok(l) => {
                        listeners.push(l);
                        break;
                    }
                    Err(e) if tries < 100 => {
                        tries += 1;
                        tracing::debug!(addr = %a, error = %e, "rebind failed, retrying");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => {
                        tracing::error!(addr = %a, error = %e, "cannot listen again after a restart");
                        return;
                    }
                }
            }
        }
    }
}

async fn bind(host: &str, port: u16, what: &'static str) -> Result<TcpListener, StartError> {
    let addr = format!("{host}:{port}");
    TcpListener::bind(&addr).await.map_err(|source| StartError::Bind { what, addr, source })
}

impl DorisLite {
    /// Binds the listeners, replays the data dir, and serves until [`Handle::stop`].
    pub async fn start(config: Config) -> Result<Handle, StartError> {
        let (tls, mysql_tls) = match &config.tls {
            Some(files) => {
                let mysql = net::TlsFiles { client_ca: None, ..files.clone() };
                (
                    Some(Arc::new(net::server_config(files).map_err(StartError::Tls)?)),
                    Some(Arc::new(net::server_config(&mysql).map_err(StartError::Tls)?)),
                )
            }
            None => (None, None),
        };
        let wal = match &config.data_dir {
            Some(d) => Some(WriteAheadLog::open(d).map_err(|e| StartError::DataDir(e.to_string()))?),
            None => None,
        };
        let engine = Arc::new(
            Engine::new(
                EngineConfig {
                    precommit_timeout: config.precommit_timeout,
                    label_keep: config.label_keep,
                    max_running_txn_per_db: config.max_running_txn_per_db,
                    max_load_bytes: config.max_load_bytes,
                    manual_clock: config.manual_clock,
                    ..EngineConfig::default()
                },
                wal,
            )
            .map_err(|e| StartError::DataDir(e.to_string()))?,
        );
        let fe = bind(&config.host, config.fe_http_port, "fe_http").await?;
        let be = bind(&config.host, config.be_http_port, "be_http").await?;
        let q = bind(&config.host, config.query_port, "query").await?;
        let fl = bind(&config.host, config.arrow_flight_sql_port, "arrow_flight_sql").await?;
        let local = |l: &TcpListener| {
            l.local_addr().map_err(|source| StartError::Bind { what: "local_addr", addr: config.host.clone(), source })
        };
        let (fe_addr, be_addr, q_addr, fl_addr) = (local(&fe)?, local(&be)?, local(&q)?, local(&fl)?);
        let info = Arc::new(ServerInfo {
            fe_http_port: fe_addr.port(),
            be_http_port: be_addr.port(),
            query_port: q_addr.port(),
            flight_port: fl_addr.port(),
            host: config.host.clone(),
            tls: tls.is_some(),
        });
        let users: Arc<HashMap<String, String>> = Arc::new(config.users.iter().cloned().collect());
        let exec = Executor { engine: engine.clone(), info: info.clone() };
        let (restart_tx, restart_rx) = mpsc::unbounded_channel();
        let debug_points = DebugPoints::new(engine.clone(), restart_tx);
        let state = http::HttpState {
            engine: engine.clone(),
            exec: exec.clone(),
            users: users.clone(),
            info: info.clone(),
            debug: debug_points.clone(),
            is_fe: true,
            discard_stream_loads: config.discard_stream_loads,
        };
        let services = Services {
            fe: http::router(state.clone()),
            be: http::router(http::HttpState { is_fe: false, ..state }),
            flight: flight::router(flight::FlightSql::new(exec.clone(), users.clone(), debug_points.clone())),
            exec,
            users,
            tls,
            mysql_tls,
        };
        let addrs = vec![fe_addr, be_addr, q_addr, fl_addr];
        let supervisor = tokio::spawn(supervise(services, addrs, vec![fe, be, q, fl], restart_rx));
        Ok(Handle { fe: fe_addr, be: be_addr, query: q_addr, flight: fl_addr, supervisor, engine, debug_points })
    }
}

impl Handle {
    /// FE HTTP address.
    pub fn fe_http_addr(&self) -> SocketAddr {
        self.fe
    }
    /// BE HTTP address.
    pub fn be_http_addr(&self) -> SocketAddr {
        self.be
    }
    /// MySQL address.
    pub fn query_addr(&self) -> SocketAddr {
        self.query
    }
    /// Arrow Flight SQL address.
    pub fn flight_sql_addr(&self) -> SocketAddr {
        self.flight
    }
    /// The engine (for embedding hosts).
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.clone()
    }
    /// The debug points (fault injection), as `/api/debug_point/…` controls them.
    pub fn debug_points(&self) -> &DebugPoints {
        &self.debug_points
    }
    /// Moves the manual clock forward by `secs` seconds; returns the new time (ms since the
    /// epoch). Fails on the system clock.
    pub fn advance_clock(&self, secs: f64) -> Result<i64, engine::EngineError> {
        self.engine.clock.advance((secs * 1000.0).round() as i64, None)
    }
    /// Current time of the engine's clock (ms since the epoch).
    pub fn now_ms(&self) -> i64 {
        self.engine.clock.now_ms()
    }
    /// Stops the listeners and closes every connection.
    pub async fn stop(self) {
        self.supervisor.abort();
        let _ = self.supervisor.await;
    }
}
