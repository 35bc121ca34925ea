//! Plugins written in Python (componentize-py) and JavaScript (componentize-js), built from a
//! `plugin.toml` directory, against the same WIT contract as the Rust ones: the quick start, the
//! seed's op_type decoder, the sandbox's limits with the same errors, and
//! `sluice plugin new|build|test`. Each check is written once and run for each language.
//!
//! componentize-py comes from `$SLUICE_COMPONENTIZE_PY` (the test command installs it in a
//! virtualenv) or PATH; componentize-js, esbuild and apache-arrow from
//! `$SLUICE_JS_TOOLS/node_modules` (the test command installs them with npm).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use sluice::wasm::{PluginError, PluginLimits};
use sluice_guest::batch::Value;

use crate::common::{batch, lines, repo_root, runtime};

/// The tests of one language: `plugins/<lang>/…` and the file extension of its sources.
macro_rules! language_tests {
    ($lang:ident, $ext:literal) => {
        mod $lang {
            const LANG: super::Lang = super::Lang { dir: stringify!($lang), ext: $ext };

            #[test]
            fn the_quick_start_with_student_trans_shows_the_seeds_result() {
                super::quick_start(LANG);
            }

            #[test]
            fn student_trans_reads_its_prefix_and_rejects_unknown_keys() {
                super::student_trans_prefix(LANG);
            }

            #[test]
            fn the_op_type_decoder_decodes_as_the_rust_one_does() {
                super::op_type_decoder(LANG);
            }

            #[test]
            fn a_loop_hits_the_wall_time_limit_with_the_same_error_as_rust() {
                super::a_loop(LANG);
            }

            #[test]
            fn a_memory_hog_hits_the_memory_limit_with_the_same_error_as_rust() {
                super::a_memory_hog(LANG);
            }

            #[test]
            fn an_exception_fails_the_batch_in_one_line_naming_it_and_where() {
                super::an_exception(LANG);
            }

            #[test]
            fn an_instance_whose_memory_wears_out_is_renewed_and_keeps_its_counters() {
                super::renewed_when_worn(LANG);
            }
        }
    };
}

language_tests!(python, "py");
language_tests!(js, "js");

#[derive(Clone, Copy)]
struct Lang {
    /// `python` or `js`: the directory under `plugins/`.
    dir: &'static str,
    /// The extension of its sources.
    ext: &'static str,
}

/// `plugins/<lang>/<name>`, built (once: builds of one directory must not overlap).
fn built(lang: Lang, name: &str) -> PathBuf {
    static BUILDS: Mutex<()> = Mutex::new(());
    let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = repo_root().join("plugins").join(lang.dir).join(name);
    sluice::wasm::build::resolve(&dir).unwrap_or_else(|e| panic!("building {}: {e}", dir.display()))
}

fn load(lang: Lang, name: &str, limits: PluginLimits) -> sluice::wasm::Plugin {
    runtime().load(&built(lang, name), limits).unwrap_or_else(|e| panic!("loading {} {name}: {e}", lang.dir))
}

/// `sluice <args>` in `dir`, sharing the tests' compile cache; (exit code, stdout, stderr).
fn sluice(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(dir)
        .env("SLUICE_CACHE_DIR", cache)
        .output()
        .expect("sluice runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

fn quick_start(lang: Lang) {
    let plugin = built(lang, "student-trans");
    let plugin_dir = plugin.parent().and_then(Path::parent).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let repo = repo_root();
    // The pipeline names the plugin directory, as a user would: it is fresh, so not rebuilt.
    let toml = std::fs::read_to_string(repo.join("pipelines/quickstart.toml")).unwrap();
    let toml = toml.replace("../plugins/student-trans", &plugin_dir.display().to_string());
    std::fs::write(dir.path().join("quickstart.toml"), toml).unwrap();
    std::fs::copy(repo.join("pipelines/quickstart.sql"), dir.path().join("quickstart.sql")).unwrap();
    let (code, stdout, stderr) = sluice(dir.path(), &["run", "--quiet", "quickstart.toml"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, crate::doris_source::QUICK_START_RESULT);
}

fn student_trans_prefix(lang: Lang) {
    let plugin = load(lang, "student-trans", PluginLimits::default());
    let input = batch(
        "name VARCHAR(256), age INT",
        &[vec![Value::Str("James"), Value::Int(18)], vec![Value::Null, Value::Null]],
    );
    let config = vec![("prefix".to_string(), "p_".to_string())];
    let mut inst = plugin.transform(&config, &input.schema()).unwrap();
    assert_eq!(lines(&inst.process(&input).unwrap()), ["+I p_James 19", "+I NULL NULL"]);
    let typo = vec![("prefx".to_string(), "p_".to_string())];
    let err = plugin.transform(&typo, &input.schema()).err().expect("a typo is refused").to_string();
    assert_eq!(
        err,
        "plugin `student-trans`: init rejected the configuration: unknown config key `prefx`; known keys: prefix"
    );
}

fn op_type_decoder(lang: Lang) {
    let plugin = load(lang, "op-type-delete-sign", PluginLimits::default());
    crate::decoders::decodes_op_type_messages_as_the_seed_says(&plugin, "op-type-delete-sign");
}

fn hostile(lang: Lang, mode: &str, limits: PluginLimits) -> Result<Vec<sluice::Batch>, PluginError> {
    let plugin = load(lang, "hostile", limits);
    let input = batch("id BIGINT", &[vec![Value::Int(1)]]);
    let mut inst = plugin.transform(&[("mode".into(), mode.into())], &input.schema()).unwrap();
    inst.process(&input)
}

fn limits() -> PluginLimits {
    PluginLimits { memory: 64 * 1024 * 1024, timeout: Duration::from_secs(1), fuel: None }
}

fn a_loop(lang: Lang) {
    let err = hostile(lang, "loop", limits()).unwrap_err();
    assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin `hostile`: batch 1 (1 rows): exceeded its wall-time limit of 1s per call; the plugin may loop \
         forever — fix it or raise `limits.timeout`"
    );
}

fn a_memory_hog(lang: Lang) {
    let err = hostile(lang, "memory", limits()).unwrap_err();
    assert!(matches!(err, PluginError::MemoryLimit { limit: 67_108_864, .. }), "{err}");
    assert!(
        err.to_string().starts_with("plugin `hostile`: batch 1 (1 rows): exceeded its memory limit of 67108864 bytes"),
        "{err}"
    );
}

fn an_exception(lang: Lang) {
    // A wall-time limit far from the call's time: only the loop test is about time.
    let roomy = PluginLimits { timeout: Duration::from_secs(60), ..limits() };
    let err = hostile(lang, "exception", roomy.clone()).unwrap_err();
    assert!(matches!(err, PluginError::Rejected { .. }), "{err}");
    let text = err.to_string();
    let error = if lang.dir == "python" { "ZeroDivisionError" } else { "TypeError" };
    let prefix = format!("plugin `hostile`: batch 1 (1 rows): the plugin rejected it: {error}: ");
    assert!(text.starts_with(&prefix), "{text}");
    let at = format!(" (at app.{}:", lang.ext);
    assert!(text.contains(&at) && text.ends_with(", in process)") && !text.contains('\n'), "{text}");
    // The same words as a Rust plugin's error.
    let err = hostile(lang, "error", roomy).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin `hostile`: batch 1 (1 rows): the plugin rejected it: row 0: refusing this batch"
    );
}

#[test]
fn plugin_new_in_each_language_builds_and_passes_plugin_test_as_generated() {
    let dir = tempfile::tempdir().unwrap();
    for (lang, name) in [("python", "my-py"), ("js", "my-js"), ("rust", "my-rs")] {
        let (code, stdout, stderr) = sluice(dir.path(), &["plugin", "new", name, "--lang", lang]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            stdout,
            format!("created {lang} plugin {name}; try it: sluice plugin test {name} --input {name}/rows.jsonl\n")
        );
        let (code, stdout, stderr) = sluice(dir.path(), &["plugin", "build", name]);
        assert_eq!(code, Some(0), "{lang}: {stderr}");
        let wasm = PathBuf::from(stdout.trim());
        assert!(wasm.is_file() && wasm.extension().is_some_and(|e| e == "wasm"), "{stdout}");
        let rows = format!("{name}/rows.jsonl");
        let (code, stdout, stderr) = sluice(dir.path(), &["plugin", "test", name, "--input", &rows]);
        assert_eq!(code, Some(0), "{lang}: {stderr}");
        assert_eq!(stdout, "JAMES 18\nEMILY 28\n", "{lang}");
    }
    let (code, _, stderr) = sluice(dir.path(), &["plugin", "new", "my-py", "--lang", "python"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("my-py: already exists; choose another name or remove it"), "{stderr}");
}

/// `sluice plugin build` of a new `lang` plugin with its build tool pointed at nothing: exit 1 and
/// `plugin `<dir>`: <said>` on stderr.
fn without_its_tool(lang: &str, env: &str, nowhere: &str, said: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = sluice(dir.path(), &["plugin", "new", "lonely", "--lang", lang]);
    assert_eq!(code, Some(0), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["plugin", "build", "lonely"])
        .current_dir(dir.path())
        .env(env, nowhere)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    let want = format!("plugin `{}`: {said}", dir.path().join("lonely").display());
    assert!(stderr.contains(&want), "{stderr}");
}

#[test]
fn a_python_plugin_without_componentize_py_says_how_to_install_it() {
    without_its_tool(
        "python",
        "SLUICE_COMPONENTIZE_PY",
        "/nonexistent/componentize-py",
        "`componentize-py` was not found on PATH (or at $SLUICE_COMPONENTIZE_PY); install it with \
         `pip install componentize-py==0.25.1`, or pass the built `.wasm` file",
    );
}

#[test]
fn a_js_plugin_without_componentize_js_says_how_to_install_it() {
    without_its_tool(
        "js",
        "SLUICE_JS_TOOLS",
        "/nonexistent",
        "`componentize-js` was not found in the plugin's node_modules (or in $SLUICE_JS_TOOLS/node_modules); it \
         needs Node.js; install it with `npm install @bytecodealliance/componentize-js@0.23.0 esbuild@0.28.2 \
         apache-arrow@21.2.0`, or pass the built `.wasm` file",
    );
}

/// componentize-py and componentize-js never free the buffer a call's arguments are written
/// into, so a Python or JavaScript instance grows by about one input batch per call: many calls
/// would hit the memory limit. The host replaces such an instance (same config) before that,
/// keeping its counters; every call's output is right throughout.
fn renewed_when_worn(lang: Lang) {
    let limits = PluginLimits { memory: 32 * 1024 * 1024, timeout: Duration::from_secs(30), fuel: None };
    let plugin = load(lang, "student-trans", limits);
    let long = "x".repeat(100);
    let rows: Vec<Vec<Value>> = (0..8192).map(|i| vec![Value::Str(&long), Value::Int(i % 50)]).collect();
    let input = batch("name VARCHAR(256), age INT", &rows);
    let mut inst = plugin.transform(&[("prefix".into(), "p_".into())], &input.schema()).unwrap();
    let calls = 40;
    for call in 1..=calls {
        let out = inst.process(&input).unwrap_or_else(|e| panic!("{} call {call}: {e}", lang.dir));
        let got = lines(&out);
        assert_eq!(got.len(), 8192);
        assert_eq!(got[7], format!("+I p_{long} 8"), "{} call {call}", lang.dir);
    }
    assert!(inst.renewals() >= 2, "{}: {} renewals, memory {} bytes", lang.dir, inst.renewals(), inst.memory_bytes());
    assert!(inst.memory_bytes() <= 32 * 1024 * 1024);
    assert_eq!(inst.counters().get("rows"), Some(&(calls * 8192)), "{}", lang.dir);
}
