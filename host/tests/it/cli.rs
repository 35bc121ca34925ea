//! The `sluice plugin` commands, run as a user would.

use std::process::Command;

use crate::common::{plugin_dir, plugin_wasm, repo_root};

fn sluice(args: &[&str]) -> (bool, String, String) {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_CACHE_DIR", cache)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("sluice runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_file(contents: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), contents).unwrap();
    f
}

#[test]
fn plugin_test_runs_the_quick_start_transform() {
    plugin_wasm("student-trans");
    let rows = temp_file("{\"name\":\"James\",\"age\":18}\n{\"name\":\"Emily\",\"age\":28}\n");
    let dir = plugin_dir("student-trans");
    let (ok, stdout, stderr) =
        sluice(&["plugin", "test", dir.to_str().unwrap(), "--input", rows.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "prefix_James 19\nprefix_Emily 29\n");
}

#[test]
fn plugin_test_runs_a_decoder_and_shows_row_kinds() {
    let messages = temp_file(
        "{\"op_type\":\"delete\",\"data\":{\"id\":1,\"name\":\"zhangsan\"}}\n{\"op_type\":\"insert\",\"data\":{\"id\":2,\"name\":\"lisi\"}}\n",
    );
    let wasm = plugin_wasm("op-type-delete-sign");
    let (ok, stdout, stderr) = sluice(&[
        "plugin",
        "test",
        wasm.to_str().unwrap(),
        "--input",
        messages.path().to_str().unwrap(),
        "--format",
        "jsonl",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout,
        "{\"__row_kind\":\"-D\",\"id\":1,\"name\":\"zhangsan\"}\n{\"__row_kind\":\"+I\",\"id\":2,\"name\":\"lisi\"}\n"
    );
}

#[test]
fn plugin_inspect_shows_world_config_and_schemas() {
    let wasm = plugin_wasm("student-trans");
    let (ok, stdout, stderr) =
        sluice(&["plugin", "inspect", wasm.to_str().unwrap(), "--schema", "id INT, name VARCHAR(256), age INT"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("world:       sluice:plugin/transform@0.1.0\n"), "{stdout}");
    assert!(stdout.contains("exports:     sluice:plugin/transformer@0.1.0\n"), "{stdout}");
    assert!(stdout.contains("  prefix (default \"prefix_\"): text put in front of every name\n"), "{stdout}");
    assert!(stdout.contains("output schema: id INT, name VARCHAR(256), age INT\n"), "{stdout}");
    assert!(!stdout.contains("wasi:filesystem") && !stdout.contains("wasi:sockets"), "{stdout}");
}

/// Each bad input is one line on stderr that says what to do, a non-zero exit, and no panic.
#[test]
fn bad_input_gets_one_clear_line() {
    let rows = temp_file("{\"name\":\"James\",\"age\":18}\n");
    let not_wasm = temp_file("hello");
    let student = plugin_wasm("student-trans");
    let decoder = plugin_wasm("op-type-delete-sign");
    let rows_path = rows.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["plugin", "test", "/nonexistent/x.wasm", "--input", rows_path],
            "file not found; pass a `.wasm` component, a plugin crate directory or a plugin directory with a `plugin.toml`",
        ),
        (
            vec!["plugin", "test", not_wasm.path().to_str().unwrap(), "--input", rows_path],
            "not a WebAssembly component (no `\\0asm` header)",
        ),
        (
            vec!["plugin", "test", student.to_str().unwrap(), "--input", "/nonexistent/rows.jsonl"],
            "--input /nonexistent/rows.jsonl: cannot open it",
        ),
        (
            vec!["plugin", "test", student.to_str().unwrap(), "--input", rows_path, "--config", "prefix"],
            "--config \"prefix\": expected KEY=VALUE",
        ),
        (
            vec!["plugin", "test", student.to_str().unwrap(), "--input", rows_path, "--config", "colour=red"],
            "init rejected the configuration: unknown config key `colour`",
        ),
        (
            vec!["plugin", "test", student.to_str().unwrap(), "--input", rows_path, "--schema", "name FOO"],
            "unknown Doris type `FOO`",
        ),
        (
            vec!["plugin", "test", decoder.to_str().unwrap(), "--input", rows_path],
            "the plugin rejected it: row 0: message has no `data` object",
        ),
    ];
    for (args, expected) in cases {
        let (ok, _, stderr) = sluice(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in {stderr:?}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_crate_without_a_build_target_says_how_to_fix_it() {
    // A directory that is not a plugin crate at all.
    let (ok, _, stderr) = sluice(&["plugin", "inspect", repo_root().join("wit").to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("file not found; pass a `.wasm` component, a plugin crate directory or a plugin directory with a `plugin.toml`"), "{stderr}");
}

#[test]
fn an_unknown_sync_flag_is_named_with_a_hint() {
    let (ok, _, err) = sluice(&["mysql-sync-database", "--database", "d", "--mysql-confx", "hostname=h"]);
    assert!(!ok);
    assert!(err.contains("unexpected argument '--mysql-confx' found"), "{err}");
    assert!(err.contains("a similar argument exists: '--mysql-conf'"), "{err}");
    let (ok, _, err) = sluice(&["mysql-sync-database", "--database", "d", "--schema-change-mode", "regex"]);
    assert!(!ok);
    assert!(err.contains("[possible values: debezium_structure, sql_parser]"), "{err}");
}
