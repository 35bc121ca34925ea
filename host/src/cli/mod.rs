//! The command line: `sluice plugin inspect`, `sluice plugin test`.

mod plugin;

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
    /// Work with plugins (WebAssembly transforms and decoders).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
}

/// Run the command line and return the process exit code. Errors are one clear line on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
}
