//! Errors of the plugin runtime. Every message names the plugin and says what to do.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::RowRejected;

/// Why loading or running a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(
        "plugin `{path}`: file not found; pass a `.wasm` component, a plugin crate directory or a plugin directory with a `plugin.toml`"
    )]
    NotFound { path: PathBuf },

    #[error("plugin `{path}`: cannot read it: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    #[error(
        "plugin `{path}`: not a WebAssembly component ({detail}); build plugins with \
         `cargo build --release --target wasm32-wasip2`"
    )]
    NotAComponent { path: PathBuf, detail: String },

    #[error(
        "plugin `{path}`: exports no Sluice world (found exports: {exports}); implement `transform` or `decoder` from wit/sluice.wit"
    )]
    UnknownWorld { path: PathBuf, exports: String },

    #[error("plugin `{path}`: it is a {actual} plugin, but a {expected} plugin is needed here")]
    WrongWorld { path: PathBuf, expected: &'static str, actual: &'static str },

    #[error(
        "plugin `{path}`: it imports `{import}`, which Sluice does not grant (plugins may import only sluice:plugin/host, sluice:plugin/types and WASI)"
    )]
    ForbiddenImport { path: PathBuf, import: String },

    #[error("plugin crate `{dir}`: the wasm32-wasip2 target is not installed; run `rustup target add wasm32-wasip2`")]
    TargetMissing { dir: PathBuf },

    #[error("plugin crate `{dir}`: `cargo` was not found on PATH; install Rust or pass the built `.wasm` file")]
    CargoMissing { dir: PathBuf },

    #[error("plugin crate `{dir}`: `cargo build --release --target wasm32-wasip2` failed:\n{stderr}")]
    BuildFailed { dir: PathBuf, stderr: String },

    #[error("plugin `{path}`: {detail}")]
    Manifest { path: PathBuf, detail: String },

    #[error(
        "plugin `{dir}`: `{tool}` was not found {looked}; install it with `{install}`, or pass the built `.wasm` file"
    )]
    ToolMissing { dir: PathBuf, tool: &'static str, looked: String, install: &'static str },

    #[error("plugin `{dir}`: `{command}` failed:\n{output}")]
    ToolFailed { dir: PathBuf, command: String, output: String },

    #[error("plugin crate `{dir}`: the build produced no `.wasm` component (is the crate a `cdylib`?)")]
    NoArtifact { dir: PathBuf },

    #[error("plugin `{plugin}`: cannot compile it: {detail}")]
    Compile { plugin: String, detail: String },

    #[error("plugin `{plugin}`: cannot start it: {detail}")]
    Instantiate { plugin: String, detail: String },

    #[error("plugin `{plugin}`: init rejected the configuration: {message}")]
    Init { plugin: String, message: String },

    #[error(
        "plugin `{plugin}`: {call}: exceeded its wall-time limit of {limit:?} per call; the plugin may loop forever — fix it or raise `limits.timeout`"
    )]
    Timeout { plugin: String, call: String, limit: Duration },

    #[error(
        "plugin `{plugin}`: {call}: exceeded its memory limit of {limit} bytes (it asked for {requested}); fix it or raise `limits.memory`"
    )]
    MemoryLimit { plugin: String, call: String, limit: u64, requested: u64 },

    #[error("plugin `{plugin}`: {call}: ran out of fuel ({limit} units per call); fix it or raise `limits.fuel`")]
    OutOfFuel { plugin: String, call: String, limit: u64 },

    #[error("plugin `{plugin}`: {call}: trapped: {detail}")]
    Trap { plugin: String, call: String, detail: String },

    #[error("plugin `{plugin}`: {call}: the plugin rejected it: {}{message}", .row.map(|r| format!("row {r}: ")).unwrap_or_default())]
    Rejected { plugin: String, call: String, row: Option<u32>, message: String },

    #[error("plugin `{plugin}`: {call}: returned malformed output: {detail}; nothing of this batch was passed on")]
    Malformed { plugin: String, call: String, detail: String },

    #[error("plugin `{plugin}`: the instance failed earlier and cannot run more batches")]
    Poisoned { plugin: String },
}

impl PluginError {
    /// A rejection of one input row (or message) becomes [`RowRejected`], which a pipeline with
    /// a dead-letter target sets aside; anything else stays as it is.
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            PluginError::Rejected { ref plugin, row: Some(row), ref message, .. } => {
                let (plugin, reason) = (plugin.clone(), message.clone());
                RowRejected { plugin, row: row as usize, reason, text: self.to_string() }.into()
            }
            other => other.into(),
        }
    }
}
