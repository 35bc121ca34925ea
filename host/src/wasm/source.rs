//! Finding a plugin's component: a `.wasm` file as given, or a plugin crate directory built
//! for `wasm32-wasip2` (cargo rebuilds it when stale and does nothing when it is fresh).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::PluginError;

/// The component file for `path`, building the crate first when `path` is a crate directory.
pub fn resolve(path: &Path) -> Result<PathBuf, PluginError> {
    if path.is_dir() {
        if path.join("Cargo.toml").is_file() {
            return build_crate(path);
        }
        return Err(PluginError::NotFound { path: path.to_path_buf() });
    }
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    Err(PluginError::NotFound { path: path.to_path_buf() })
}

/// Build a plugin crate with `cargo build --release --target wasm32-wasip2` and return its `.wasm`.
pub fn build_crate(dir: &Path) -> Result<PathBuf, PluginError> {
    // cargo runs inside the crate (so its `.cargo/config.toml` applies): every path handed to it
    // must be absolute, or it would be read relative to the crate instead of to the caller.
    let dir = &std::path::absolute(dir).map_err(|source| PluginError::Io { path: dir.to_path_buf(), source })?;
    let manifest = dir.join("Cargo.toml");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--release", "--target", "wasm32-wasip2", "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .current_dir(dir);
    // A plugin is its own build: settings of a cargo that runs Sluice (tests, `cargo run`) must
    // not leak into it, and sharing that cargo's target dir would deadlock on its lock.
    for var in
        ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"]
    {
        cmd.env_remove(var);
    }
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PluginError::CargoMissing { dir: dir.to_path_buf() });
        }
        Err(source) => return Err(PluginError::Io { path: dir.to_path_buf(), source }),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("target may not be installed")
            || stderr.contains("can't find crate for `core`")
            || stderr.contains("can't find crate for `std`")
        {
            return Err(PluginError::TargetMissing { dir: dir.to_path_buf() });
        }
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        return Err(PluginError::BuildFailed {
            dir: dir.to_path_buf(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    let manifest = manifest.canonicalize().unwrap_or(manifest);
    let mut artifact = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let from_this_crate = msg["manifest_path"].as_str().is_some_and(|p| Path::new(p) == manifest);
        if let Some(files) = msg["filenames"].as_array().filter(|_| from_this_crate) {
            artifact = files.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm")).map(PathBuf::from);
        }
    }
    artifact.ok_or_else(|| PluginError::NoArtifact { dir: dir.to_path_buf() })
}
