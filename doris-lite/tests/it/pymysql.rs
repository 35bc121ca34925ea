//! pymysql (from PyPI, in a virtualenv made on first use) against the query port.

use std::path::PathBuf;
use std::process::Command;

use crate::common::Server;

/// `$SLUICE_TEST_VENV`, else `<target dir>/../doris-lite-venv`.
fn venv_dir() -> PathBuf {
    if let Ok(v) = std::env::var("SLUICE_TEST_VENV") {
        return PathBuf::from(v);
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| {
        // target/<profile>/deps/it-<hash>
        std::env::current_exe()
            .ok()
            .and_then(|p| p.ancestors().nth(3).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("target"))
    });
    target.join("..").join("doris-lite-venv")
}

fn python_with_pymysql() -> PathBuf {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let has_pymysql =
        |py: &PathBuf| Command::new(py).args(["-c", "import pymysql"]).status().is_ok_and(|s| s.success());
    if python.exists() && has_pymysql(&python) {
        return python;
    }
    let st = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 is required for the pymysql test");
    assert!(st.success(), "python3 -m venv {} failed (install python3-venv)", venv.display());
    let st = Command::new(venv.join("bin").join("pip")).args(["install", "--quiet", "pymysql"]).status().expect("pip");
    assert!(st.success(), "pip install pymysql failed");
    assert!(has_pymysql(&python));
    python
}

#[test]
fn pymysql_quick_start() {
    let python = python_with_pymysql();
    let s = Server::start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymysql_client.py");
    let out =
        Command::new(python).arg(script).arg(s.query_port().to_string()).output().expect("run the pymysql script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("OK"),
        "pymysql script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rows it wrote are visible to another client.
    assert_eq!(s.sql("SELECT count(*) FROM test.student_trans"), vec![vec!["2"]]);
}
