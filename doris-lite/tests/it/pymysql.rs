//! pymysql (from PyPI, in a virtualenv made on first use) against the query port.

use std::process::Command;

use crate::common::{Server, python};

#[test]
fn pymysql_quick_start() {
    let python = python();
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
