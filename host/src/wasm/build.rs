//! Finding a plugin's component: a `.wasm` file as given, a plugin crate directory built for
//! `wasm32-wasip2` (cargo rebuilds it when stale and does nothing when it is fresh), or a plugin
//! directory in another language (`plugin.toml`), built with that language's component tool when
//! its sources, its manifest or the guest SDK changed.

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
        if path.join(MANIFEST).is_file() {
            return build_plugin_dir(path);
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

/// The environment variable naming one target dir for every plugin crate Sluice builds.
pub const PLUGIN_TARGET_DIR_VAR: &str = "SLUICE_PLUGIN_TARGET_DIR";

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
    // `SLUICE_PLUGIN_TARGET_DIR`: one target dir for every plugin crate built (their common
    // dependencies — the guest SDK's arrow — are then compiled once); else each crate's own.
    if let Some(dir) = std::env::var_os(PLUGIN_TARGET_DIR_VAR).filter(|d| !d.is_empty()) {
        cmd.env("CARGO_TARGET_DIR", dir);
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

/// The manifest of a plugin directory in a language other than Rust.
pub const MANIFEST: &str = "plugin.toml";

/// `plugin.toml`: the plugin's language and world.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    plugin: ManifestPlugin,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestPlugin {
    /// `python` or `js`.
    language: String,
    /// `transform` or `decoder`.
    world: String,
    /// The module holding the exports (`app`: `app.py`, `app.js`).
    #[serde(default)]
    module: Option<String>,
}

/// The Python guest SDK, as this build of Sluice knows it: written next to each Python build, so
/// a plugin always builds against the host's own SDK and contract.
const PYTHON_SDK: &[(&str, &str)] = &[
    ("sluice_guest/__init__.py", include_str!("../../../guest-sdk/python/sluice_guest/__init__.py")),
    ("sluice_guest/ipc.py", include_str!("../../../guest-sdk/python/sluice_guest/ipc.py")),
    ("sluice_guest/plugin.py", include_str!("../../../guest-sdk/python/sluice_guest/plugin.py")),
    ("sluice_guest/types.py", include_str!("../../../guest-sdk/python/sluice_guest/types.py")),
];

/// The JavaScript guest SDK (one module, `sluice-guest`), as this build of Sluice knows it.
const JS_SDK: &[(&str, &str)] = &[("sluice-guest.js", include_str!("../../../guest-sdk/js/sluice-guest.js"))];

/// The WIT contract of this build of Sluice.
pub const WIT: &str = include_str!("../../../wit/sluice.wit");

/// The componentize-py this build is tested with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The npm packages a JavaScript plugin builds with, as this build is tested with them.
pub const JS_TOOLS: &str = "@bytecodealliance/componentize-js@0.23.0 esbuild@0.28.2 apache-arrow@21.2.0";

/// A language a `plugin.toml` directory can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Python,
    Js,
}

impl Language {
    fn sdk(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Language::Python => PYTHON_SDK,
            Language::Js => JS_SDK,
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Language::Python => COMPONENTIZE_PY,
            Language::Js => JS_TOOLS,
        }
    }
}

/// Build the plugin directory `given` (`plugin.toml` + sources) into `<dir>/target/<dir>.wasm`
/// (`-` as `_`, as cargo names a crate's component),
/// unless that is newer than every source and was built with this SDK.
pub fn build_plugin_dir(given: &Path) -> Result<PathBuf, PluginError> {
    let dir = &std::path::absolute(given).map_err(|source| PluginError::Io { path: given.to_path_buf(), source })?;
    let manifest_path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&manifest_path).map_err(io_err(&manifest_path))?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| PluginError::Manifest {
        path: manifest_path.clone(),
        detail: e.to_string().trim_end().replace('\n', " "),
    })?;
    let m = manifest.plugin;
    if !matches!(m.world.as_str(), "transform" | "decoder") {
        return Err(PluginError::Manifest {
            path: manifest_path,
            detail: format!("`plugin.world` is `{}`; it must be `transform` or `decoder`", m.world),
        });
    }
    let language = match m.language.as_str() {
        "python" => Language::Python,
        "js" | "javascript" => Language::Js,
        other => {
            return Err(PluginError::Manifest {
                path: manifest_path,
                detail: format!(
                    "`plugin.language` is `{other}`; plugins are built from `python` or `js` here, or from a Rust crate (Cargo.toml)"
                ),
            });
        }
    };
    let module = m.module.unwrap_or_else(|| "app".to_string());
    let target = dir.join("target");
    let name = dir.file_name().map_or_else(|| m.world.clone(), |n| n.to_string_lossy().replace('-', "_"));
    let output = target.join(format!("{name}.wasm"));
    let stamp_path = target.join("sdk.stamp");
    let stamp = sdk_stamp(language, &m.world, &module);
    let fresh = std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
        && modified(&output).is_some_and(|built| newest_source(dir).is_none_or(|src| src <= built));
    if fresh {
        return Ok(output);
    }
    let sdk = target.join("sdk");
    for (file, text) in language.sdk() {
        let path = sdk.join(file);
        std::fs::create_dir_all(path.parent().expect("a file in a directory")).map_err(io_err(&path))?;
        std::fs::write(&path, text).map_err(io_err(&path))?;
    }
    let wit = target.join("wit");
    std::fs::create_dir_all(&wit).map_err(io_err(&wit))?;
    std::fs::write(wit.join("sluice.wit"), WIT).map_err(io_err(&wit))?;
    match language {
        Language::Python => {
            eprintln!("building Python plugin {} ({} world) with componentize-py", given.display(), m.world);
            let tool = std::env::var_os("SLUICE_COMPONENTIZE_PY").unwrap_or_else(|| "componentize-py".into());
            let mut cmd = Command::new(&tool);
            cmd.arg("-d").arg(&wit).args(["-w", &m.world, "componentize", &module, "-p"]).arg(dir).arg("-p").arg(&sdk);
            cmd.arg("-o").arg(&output);
            let missing = || PluginError::ToolMissing {
                dir: dir.clone(),
                tool: "componentize-py",
                looked: "on PATH (or at $SLUICE_COMPONENTIZE_PY)".into(),
                install: concat!("pip install ", "componentize-py==0.25.1"),
            };
            run_tool(dir, cmd, missing, &format!("componentize-py -w {} componentize {module}", m.world))?;
        }
        Language::Js => {
            eprintln!("building JavaScript plugin {} ({} world) with componentize-js", given.display(), m.world);
            let modules = js_tools(dir)?;
            let bin = modules.join(".bin");
            let bundle = target.join("bundle.js");
            let missing = || js_tools_missing(dir);
            // componentize-js takes one module: the plugin, the SDK and apache-arrow are bundled
            // first, leaving only the host's imports (`sluice:plugin/host`) outside.
            let mut esbuild = Command::new(bin.join("esbuild"));
            esbuild
                .arg(dir.join(format!("{module}.js")))
                .args(["--bundle", "--format=esm", "--platform=neutral", "--main-fields=module,main"])
                .args(["--external:sluice:*", "--sourcemap=external", "--log-level=warning"])
                .arg(format!("--alias:sluice-guest={}", sdk.join("sluice-guest.js").display()))
                .arg(format!("--outfile={}", bundle.display()))
                .env("NODE_PATH", &modules);
            run_tool(dir, esbuild, missing, &format!("esbuild {module}.js --bundle"))?;
            embed_source_map(&bundle)?;
            let mut componentize = Command::new(bin.join("componentize-js"));
            componentize
                .arg(&bundle)
                .arg("--wit")
                .arg(&wit)
                .args(["--world-name", &m.world, "--disable", "http", "fetch-event", "-o"])
                .arg(&output);
            run_tool(dir, componentize, missing, &format!("componentize-js --world-name {} bundle.js", m.world))?;
        }
    }
    std::fs::write(&stamp_path, stamp).map_err(io_err(&stamp_path))?;
    Ok(output)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PluginError {
    let path = path.to_path_buf();
    move |source| PluginError::Io { path, source }
}

/// Run a build tool in `dir`; its output becomes the error when it fails.
fn run_tool(
    dir: &Path,
    mut cmd: Command,
    missing: impl FnOnce() -> PluginError,
    command: &str,
) -> Result<(), PluginError> {
    let out = match cmd.current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::piped()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(source) => return Err(PluginError::Io { path: dir.to_path_buf(), source }),
    };
    if !out.status.success() {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        return Err(PluginError::ToolFailed {
            dir: dir.to_path_buf(),
            command: command.to_string(),
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(())
}

/// The `node_modules` holding esbuild, componentize-js and apache-arrow: the plugin's own (after
/// `npm install` in it), else `$SLUICE_JS_TOOLS/node_modules`.
fn js_tools(dir: &Path) -> Result<PathBuf, PluginError> {
    let own = dir.join("node_modules");
    let shared = std::env::var_os("SLUICE_JS_TOOLS").map(|d| PathBuf::from(d).join("node_modules"));
    [Some(own), shared]
        .into_iter()
        .flatten()
        .find(|m| m.join(".bin/componentize-js").is_file() && m.join(".bin/esbuild").is_file())
        .ok_or_else(|| js_tools_missing(dir))
}

fn js_tools_missing(dir: &Path) -> PluginError {
    PluginError::ToolMissing {
        dir: dir.to_path_buf(),
        tool: "componentize-js",
        looked: "in the plugin's node_modules (or in $SLUICE_JS_TOOLS/node_modules); it needs Node.js".into(),
        install: concat!("npm install ", "@bytecodealliance/componentize-js@0.23.0 esbuild@0.28.2 apache-arrow@21.2.0"),
    }
}

/// Append to the bundle, as `globalThis.__SLUICE_SOURCE_MAP__`, where each of its lines that
/// comes from the plugin's own files (not the SDK, not a package) came from: `{sources, lines}`
/// with `lines[<bundle line>] = [<source index>, <source line>]`, both lines 1-based. The SDK
/// names the plugin's file and line with it when the plugin throws; appending leaves every
/// earlier line of the bundle where it was.
fn embed_source_map(bundle: &Path) -> Result<(), PluginError> {
    let map_path = bundle.with_extension("js.map");
    let bad = |detail: String| PluginError::Io { path: map_path.clone(), source: std::io::Error::other(detail) };
    let text = std::fs::read_to_string(&map_path).map_err(io_err(&map_path))?;
    let map: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let sources: Vec<&str> = map["sources"].as_array().into_iter().flatten().filter_map(|s| s.as_str()).collect();
    let own = |i: usize| sources.get(i).is_some_and(|s| !s.contains("node_modules") && !s.ends_with("sluice-guest.js"));
    let mappings = map["mappings"].as_str().ok_or_else(|| bad("no `mappings`".into()))?;
    let mut lines = serde_json::Map::new();
    for (line, source, source_line) in first_mapping_per_line(mappings).map_err(bad)? {
        if own(source) {
            lines.insert((line + 1).to_string(), serde_json::json!([source, source_line + 1]));
        }
    }
    let kept = serde_json::json!({ "sources": sources, "lines": lines });
    let mut js = std::fs::read_to_string(bundle).map_err(io_err(bundle))?;
    js.push_str(&format!("\nglobalThis.__SLUICE_SOURCE_MAP__ = {kept};\n"));
    std::fs::write(bundle, js).map_err(io_err(bundle))
}

/// `(generated line, source index, source line)` (0-based) of the first segment of each line of a
/// source map's `mappings` (Base64 VLQ, fields relative to the previous segment's).
fn first_mapping_per_line(mappings: &str) -> Result<Vec<(usize, usize, usize)>, String> {
    const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state = [0i64; 5]; // generated column, source, source line, source column, name
    let mut out = Vec::new();
    for (line, segments) in mappings.split(';').enumerate() {
        state[0] = 0;
        let mut first = true;
        for segment in segments.split(',').filter(|s| !s.is_empty()) {
            let (mut field, mut value, mut shift) = (0usize, 0i64, 0u32);
            for c in segment.bytes() {
                let digit = BASE64.iter().position(|&b| b == c).ok_or(format!("`{}` in mappings", c as char))? as i64;
                value += (digit & 31) << shift;
                if digit & 32 != 0 {
                    shift += 5;
                    continue;
                }
                let delta = if value & 1 == 1 { -(value >> 1) } else { value >> 1 };
                *state.get_mut(field).ok_or("a segment with more than five fields")? += delta;
                (field, value, shift) = (field + 1, 0, 0);
            }
            if first && field >= 4 {
                out.push((line, state[1].max(0) as usize, state[2].max(0) as usize));
                first = false;
            }
        }
    }
    Ok(out)
}

/// What a build depends on besides the plugin's own files: the SDK, the WIT, tools, world and module.
fn sdk_stamp(language: Language, world: &str, module: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (language.sdk(), WIT, world, module, language.tool()).hash(&mut h);
    format!("{:016x}\n", h.finish())
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time of the plugin's files (everything but `target/` and
/// `node_modules/`).
fn newest_source(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if d != dir || (entry.file_name() != "target" && entry.file_name() != "node_modules") {
                    stack.push(path);
                }
            } else if let Some(t) = modified(&path) {
                newest = newest.max(Some(t));
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::first_mapping_per_line;

    #[test]
    fn source_map_lines_come_from_the_first_segment_of_each_line() {
        // Line 0 → source 0 line 0; line 1 → line 1 (a second segment ignored); line 2 has no
        // segment; line 3 → back to line 0; line 4 → source 1, line 3.
        let got = first_mapping_per_line("AAAA;AACA,EAAE;;AADA;ACGA").unwrap();
        assert_eq!(got, [(0, 0, 0), (1, 0, 1), (3, 0, 0), (4, 1, 3)]);
        assert_eq!(first_mapping_per_line("AA!A").unwrap_err(), "`!` in mappings");
    }
}
