//! The command line: `sluice plugin inspect`, `sluice plugin test`.

mod dlq;
mod embedded;
mod plugin;
mod run;
mod scaffold;
mod serve;
mod sync;
mod verify;

pub use crate::metrics::metrics_text;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice: stream processing for Apache Doris, with user logic as sandboxed WebAssembly.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline: until its sources are exhausted, or until SIGINT/SIGTERM.
    Run {
        /// The pipeline file.
        file: std::path::PathBuf,
        /// No status lines.
        #[arg(long, short)]
        quiet: bool,
        /// Log format: `text` or `json`.
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
        /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9249).
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Run the pipeline in a cluster coordinated by these etcd members,
        /// `etcd://host:2379[,host:2379…]` (in place of `[cluster] etcd`).
        #[arg(long, value_name = "ETCD_URL")]
        cluster: Option<String>,
        /// This process's name in the cluster (in place of `[cluster] member`; default $HOSTNAME).
        #[arg(long)]
        member: Option<String>,
        /// Units this process takes relative to the others (in place of `[cluster] capacity`;
        /// default 1); `SLUICE_CAPACITY` sets it too.
        #[arg(long, env = "SLUICE_CAPACITY", value_parser = clap::value_parser!(u32).range(1..))]
        capacity: Option<u32>,
    },
    /// Compare every table a pipeline mirrors (mysql, postgres and the sync commands) with its
    /// Doris copy: rows equal, differing, missing and extra, and the first differences. Exits 0
    /// only when every table agrees.
    Verify {
        /// The pipeline file.
        file: std::path::PathBuf,
        #[command(flatten)]
        args: verify::VerifyArgs,
    },
    /// Check a pipeline without moving data: the file, the plugins, the Doris tables.
    Check {
        /// The pipeline file.
        file: std::path::PathBuf,
    },
    /// Work with plugins (WebAssembly transforms and decoders).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// The rows a pipeline set aside in its `[dead_letter]` target.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Mirror a MySQL/MariaDB database into Doris: the Flink connector's CdcTools command, with its
    /// flags.
    MysqlSyncDatabase(sync::SyncArgs),
    /// Mirror a PostgreSQL schema into Doris: the Flink connector's CdcTools command, with its
    /// flags.
    PostgresSyncDatabase(sync::SyncArgs),
    /// Mirror a whole database into Doris: `sluice sync-database mysql|postgres …`.
    #[command(subcommand)]
    SyncDatabase(SyncDatabase),
    /// Run many tenants' pipelines in one process, with a REST API, `/metrics` and a live view.
    Serve {
        /// The server file: tenants, their tokens, grants and quotas, the connections.
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// Submit a pipeline file to a `sluice serve` (prints its id).
    Submit {
        file: std::path::PathBuf,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// List your pipelines on a `sluice serve`.
    List {
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Show a pipeline of a `sluice serve`: state, last checkpoint, rows, lag, last error.
    Status {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Pause a pipeline of a `sluice serve` after a final checkpoint.
    Pause {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Resume a paused or stopped pipeline of a `sluice serve` from its last checkpoint.
    Resume {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Stop a pipeline of a `sluice serve` after a final checkpoint.
    Stop {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Take a checkpoint of a pipeline of a `sluice serve` now.
    Savepoint {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
    /// Delete a pipeline of a `sluice serve`, with its state.
    Delete {
        id: String,
        #[command(flatten)]
        to: ServerArgs,
    },
}

/// Where a `sluice serve` is, and the token to show it.
#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// The server's address, e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    server: String,
    /// The environment variable holding your API token.
    #[arg(long, default_value = "SLUICE_TOKEN")]
    token_env: String,
}

/// `sluice dlq …`
#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// List the dead letters of a pipeline, oldest first: where and why each row was refused.
    Show {
        /// The pipeline file.
        file: std::path::PathBuf,
        /// Show at most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// One JSON object per dead letter, as stored (and whether it was replayed).
        #[arg(long)]
        json: bool,
    },
    /// Send chosen dead letters back through the pipeline (after a fix), from the transform or
    /// sink that refused each on; each once. The pipeline must be stopped.
    Replay {
        /// The pipeline file.
        file: std::path::PathBuf,
        /// Every dead letter not replayed yet.
        #[arg(long)]
        all: bool,
        /// Those refused by this transform or sink (its name in the pipeline).
        #[arg(long)]
        component: Option<String>,
        /// Those of this stage: plugin, route or doris.
        #[arg(long)]
        stage: Option<String>,
        /// Those of this source table.
        #[arg(long)]
        table: Option<String>,
        /// This letter, as `pipeline/checkpoint/worker/seq` (repeatable).
        #[arg(long = "letter")]
        letters: Vec<String>,
        /// No status lines.
        #[arg(long)]
        quiet: bool,
    },
}

/// The databases `sync-database` mirrors.
#[derive(Debug, Subcommand)]
enum SyncDatabase {
    /// MySQL or MariaDB (the same as `sluice mysql-sync-database`).
    Mysql(sync::SyncArgs),
    /// PostgreSQL (the same as `sluice postgres-sync-database`).
    Postgres(sync::SyncArgs),
}

/// Run the command line and return the process exit code. Errors are one clear line on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(&cli.command, Command::Run { log_format, .. } if log_format == "json");
    init_logging(json);
    crate::doris::tls::install_provider();
    let result = match cli.command {
        Command::Run { file, quiet, metrics_addr, cluster, member, capacity, .. } => {
            run::run(file, quiet, metrics_addr, crate::pipeline::ClusterArgs { etcd: cluster, member, capacity })
        }
        Command::Check { file } => run::check(file),
        Command::Verify { file, args } => verify::run(file, args),
        Command::Plugin(cmd) => plugin::run(cmd),
        Command::Dlq(DlqCommand::Show { file, limit, json }) => dlq::show(file, limit, json),
        Command::Dlq(DlqCommand::Replay { file, all, component, stage, table, letters, quiet }) => {
            dlq::replay(file, dlq::Selection { all, component, stage, table, letters }, quiet)
        }
        Command::MysqlSyncDatabase(args) | Command::SyncDatabase(SyncDatabase::Mysql(args)) => {
            sync::run(sync::Origin::Mysql, args, false)
        }
        Command::PostgresSyncDatabase(args) | Command::SyncDatabase(SyncDatabase::Postgres(args)) => {
            sync::run(sync::Origin::Postgres, args, false)
        }
        Command::Serve { config } => serve::serve(config),
        Command::Submit { file, to } => serve::client(&to.server, &to.token_env, serve::Request::Submit(file)),
        Command::List { to } => serve::client(&to.server, &to.token_env, serve::Request::List),
        Command::Status { id, to } => serve::client(&to.server, &to.token_env, serve::Request::Status(id)),
        Command::Pause { id, to } => serve::client(&to.server, &to.token_env, serve::Request::Action(id, "pause")),
        Command::Resume { id, to } => serve::client(&to.server, &to.token_env, serve::Request::Action(id, "resume")),
        Command::Stop { id, to } => serve::client(&to.server, &to.token_env, serve::Request::Action(id, "stop")),
        Command::Savepoint { id, to } => {
            serve::client(&to.server, &to.token_env, serve::Request::Action(id, "savepoint"))
        }
        Command::Delete { id, to } => serve::client(&to.server, &to.token_env, serve::Request::Delete(id)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn,doris_lite=warn"));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if json { fmt.json().try_init() } else { fmt.try_init() };
}
