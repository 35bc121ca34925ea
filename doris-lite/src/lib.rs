//! doris-lite: a single-process emulator of the Apache Doris surfaces that clients use —
//! Stream Load and 2PC over HTTP, the FE REST endpoints and the MySQL protocol — over an
//! in-memory store with Doris' key-model semantics. For local runs and tests only.

pub mod ddl;
pub mod engine;
pub mod http;
pub mod load;
pub mod mysql;
pub mod persist;
pub mod sql;
pub mod storage;
pub mod types;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::engine::{Engine, EngineConfig};
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
}

impl Default for Config {
    fn default() -> Self {
        let e = EngineConfig::default();
        Config {
            fe_http_port: 8030,
            be_http_port: 8040,
            query_port: 9030,
            data_dir: None,
            users: vec![("root".into(), String::new())],
            host: "127.0.0.1".into(),
            precommit_timeout: e.precommit_timeout,
            label_keep: e.label_keep,
            max_running_txn_per_db: e.max_running_txn_per_db,
            max_load_bytes: e.max_load_bytes,
        }
    }
}

impl Config {
    /// Every listener on an ephemeral port, in memory.
    pub fn ephemeral() -> Config {
        Config { fe_http_port: 0, be_http_port: 0, query_port: 0, ..Default::default() }
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
}

/// The entry point.
pub struct DorisLite;

/// A running instance.
#[derive(Debug)]
pub struct Handle {
    fe: SocketAddr,
    be: SocketAddr,
    query: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
    engine: Arc<Engine>,
}

async fn bind(host: &str, port: u16, what: &'static str) -> Result<TcpListener, StartError> {
    let addr = format!("{host}:{port}");
    TcpListener::bind(&addr).await.map_err(|source| StartError::Bind { what, addr, source })
}

impl DorisLite {
    /// Binds the listeners, replays the data dir, and serves until [`Handle::stop`].
    pub async fn start(config: Config) -> Result<Handle, StartError> {
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
                    ..EngineConfig::default()
                },
                wal,
            )
            .map_err(|e| StartError::DataDir(e.to_string()))?,
        );
        let fe = bind(&config.host, config.fe_http_port, "fe_http").await?;
        let be = bind(&config.host, config.be_http_port, "be_http").await?;
        let q = bind(&config.host, config.query_port, "query").await?;
        let local = |l: &TcpListener| {
            l.local_addr().map_err(|source| StartError::Bind { what: "local_addr", addr: config.host.clone(), source })
        };
        let (fe_addr, be_addr, q_addr) = (local(&fe)?, local(&be)?, local(&q)?);
        let info = Arc::new(ServerInfo {
            fe_http_port: fe_addr.port(),
            be_http_port: be_addr.port(),
            query_port: q_addr.port(),
            flight_port: 0,
            host: config.host.clone(),
        });
        let users: Arc<HashMap<String, String>> = Arc::new(config.users.iter().cloned().collect());
        let exec = Executor { engine: engine.clone(), info: info.clone() };
        let state = http::HttpState {
            engine: engine.clone(),
            exec: exec.clone(),
            users: users.clone(),
            info: info.clone(),
            is_fe: true,
        };
        let fe_router = http::router(state.clone());
        let be_router = http::router(http::HttpState { is_fe: false, ..state });
        let tasks = vec![
            tokio::spawn(async move {
                if let Err(e) = axum::serve(fe, fe_router).await {
                    tracing::error!(error = %e, "fe http listener stopped");
                }
            }),
            tokio::spawn(async move {
                if let Err(e) = axum::serve(be, be_router).await {
                    tracing::error!(error = %e, "be http listener stopped");
                }
            }),
            tokio::spawn(mysql::serve(q, exec, users)),
        ];
        Ok(Handle { fe: fe_addr, be: be_addr, query: q_addr, tasks, engine })
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
    /// The engine (for embedding hosts and part 2 surfaces).
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.clone()
    }
    /// Stops the listeners.
    pub async fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
