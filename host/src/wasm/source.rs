//! Finding a plugin's component: a `.wasm` file as given, or a plugin crate directory built
//! for `wasm32-wasip2` (cargo rebuilds it when stale and does nothing when it is fresh).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// The Rust target plugins are built for.
pub const PLUGIN_TARGET: &str = "wasm32-wasip2";

/// Build a plugin crate with `cargo build --release --target wasm32-wasip2` and return its `.wasm`.
/// A missing `wasm32-wasip2` target is added with rustup first (saying so); when cargo has
/// something to compile, one line says what it builds.
pub fn build_crate(given: &Path) -> Result<PathBuf, PluginError> {
    // cargo runs inside the crate (so its `.cargo/config.toml` applies): every path handed to it
    // must be absolute, or it would be read relative to the crate instead of to the caller.
    let dir = &std::path::absolute(given).map_err(|source| PluginError::Io { path: given.to_path_buf(), source })?;
    ensure_target(dir)?;
    let manifest = dir.join("Cargo.toml");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--release", "--target", PLUGIN_TARGET, "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A plugin is its own build: settings of a cargo that runs Sluice (tests, `cargo run`) must
    // not leak into it, and sharing that cargo's target dir would deadlock on its lock.
    for var in
        ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"]
    {
        cmd.env_remove(var);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PluginError::CargoMissing { dir: dir.to_path_buf() });
        }
        Err(source) => return Err(PluginError::Io { path: dir.to_path_buf(), source }),
    };
    let io_err = |source| PluginError::Io { path: dir.to_path_buf(), source };
    // stderr is drained on its own thread so a chatty build cannot block on a full pipe.
    let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let mut messages = Vec::new();
    let mut announced = false;
    for line in BufReader::new(child.stdout.take().expect("stdout is piped")).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line.map_err(io_err)?) else { continue };
        if !announced && msg["reason"] == "compiler-artifact" && msg["fresh"] == false {
            announced = true;
            eprintln!(
                "building plugin crate {} for {PLUGIN_TARGET} (the first build takes about a minute)",
                given.display()
            );
        }
        messages.push(msg);
    }
    let status = child.wait().map_err(io_err)?;
    let stderr = stderr_reader.join().unwrap_or_default();
    if !status.success() {
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
    for msg in messages {
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

/// Add the `wasm32-wasip2` target with rustup when the toolchain that builds `dir` lacks it.
fn ensure_target(dir: &Path) -> Result<(), PluginError> {
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).current_dir(dir).output();
    let Ok(sysroot) = sysroot else { return Ok(()) }; // no rustc: cargo's own error says so
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(PLUGIN_TARGET).is_dir() {
        return Ok(());
    }
    eprintln!("the Rust target {PLUGIN_TARGET} is missing: adding it with `rustup target add {PLUGIN_TARGET}`");
    let added = Command::new("rustup")
        .args(["target", "add", PLUGIN_TARGET])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status();
    match added {
        Ok(s) if s.success() => Ok(()),
        _ => Err(PluginError::TargetMissing { dir: dir.to_path_buf() }),
    }
}
