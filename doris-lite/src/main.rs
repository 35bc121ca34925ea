//! The `doris-lite` binary: serves the Doris client protocols until SIGTERM / Ctrl-C.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use doris_lite::{Config, DorisLite};

/// A single-process emulator of the Apache Doris client protocols, for local runs and tests.
/// Not a database for production data.
#[derive(Debug, Parser)]
#[command(name = "doris-lite", version)]
struct Args {
    /// FE HTTP port (Stream Load redirect, REST API); 0 = ephemeral.
    #[arg(long, default_value_t = 8030)]
    fe_http_port: u16,
    /// BE HTTP port (Stream Load); 0 = ephemeral.
    #[arg(long, default_value_t = 8040)]
    be_http_port: u16,
    /// MySQL protocol port; 0 = ephemeral.
    #[arg(long, default_value_t = 9030)]
    query_port: u16,
    /// Arrow Flight SQL port; 0 = ephemeral.
    #[arg(long, default_value_t = 8070)]
    arrow_flight_sql_port: u16,
    /// `system`, or `manual`: commit times, the TSO and changelog TTLs follow a clock that only
    /// `POST /api/debug/clock/advance?secs=N` moves.
    #[arg(long, default_value = "system", value_parser = ["system", "manual"])]
    clock: String,
    /// Keep committed data in this directory (append-only, fsynced commit log).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A user as NAME:PASSWORD (repeatable); default `root` with an empty password.
    #[arg(long = "user", value_name = "NAME:PASSWORD")]
    users: Vec<String>,
    /// Address to bind and advertise.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Seconds before a pre-committed transaction is aborted.
    #[arg(long, default_value_t = 3600)]
    precommit_timeout_secs: u64,
    /// Seconds a finished label is kept.
    #[arg(long, default_value_t = 43200)]
    label_keep_secs: u64,
    /// Answer Stream Loads without storing them: bodies are read and discarded, rows counted,
    /// labels and 2PC work as usual (to measure a client, not doris-lite).
    #[arg(long)]
    discard_stream_loads: bool,
    /// Serve the HTTP ports and Arrow Flight SQL over TLS with this PEM certificate chain
    /// (with `--tls-key`).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA on the HTTP ports and Arrow Flight SQL
    /// (with `--tls-cert`).
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut users = Vec::new();
    for u in &args.users {
        let (n, p) = u.split_once(':').unwrap_or((u.as_str(), ""));
        users.push((n.to_string(), p.to_string()));
    }
    if users.is_empty() {
        users.push(("root".to_string(), String::new()));
    }
    let config = Config {
        fe_http_port: args.fe_http_port,
        be_http_port: args.be_http_port,
        query_port: args.query_port,
        arrow_flight_sql_port: args.arrow_flight_sql_port,
        manual_clock: args.clock == "manual",
        data_dir: args.data_dir,
        users,
        host: args.host,
        precommit_timeout: std::time::Duration::from_secs(args.precommit_timeout_secs),
        label_keep: std::time::Duration::from_secs(args.label_keep_secs),
        discard_stream_loads: args.discard_stream_loads,
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(doris_lite::TlsFiles { cert, key, client_ca: args.tls_client_ca }),
            _ => None,
        },
        ..Config::default()
    };
    let handle = DorisLite::start(config).await.context("starting doris-lite")?;
    println!("fe_http {}", handle.fe_http_addr());
    println!("be_http {}", handle.be_http_addr());
    println!("query {}", handle.query_addr());
    println!("flight_sql {}", handle.flight_sql_addr());
    println!("ready");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    handle.stop().await;
    Ok(())
}
