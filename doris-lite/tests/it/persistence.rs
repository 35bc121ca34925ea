//! `--data-dir`: committed data survives `kill -9` of the binary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::{args, curl_json};

struct Proc {
    child: Child,
    fe: String,
    query_port: String,
}

fn spawn(dir: &Path) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_doris-lite"))
        .args(["--fe-http-port", "0", "--be-http-port", "0", "--query-port", "0", "--arrow-flight-sql-port", "0"])
        .arg("--data-dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn doris-lite");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut fe, mut query_port) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.expect("read stdout");
        if let Some(a) = line.strip_prefix("fe_http ") {
            fe = a.to_string();
        } else if let Some(a) = line.strip_prefix("query ") {
            query_port = a.rsplit(':').next().unwrap_or("").to_string();
        } else if line == "ready" {
            break;
        }
    }
    assert!(!fe.is_empty() && !query_port.is_empty(), "doris-lite did not print its listeners");
    Proc { child, fe, query_port }
}

fn sql(p: &Proc, q: &str) -> String {
    let out = Command::new("mysql")
        .args(["-h127.0.0.1", "-P", &p.query_port, "-uroot", "-N", "-B", "-e", q])
        .output()
        .expect("mysql");
    assert!(out.status.success(), "{q}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn committed_data_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path());
    sql(&p, "CREATE DATABASE test");
    sql(
        &p,
        "CREATE TABLE test.u (k INT, v VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES (\"changelog.enable\" = \"true\")",
    );
    let data = dir.path().join("d.csv");
    std::fs::write(&data, "1,a\n2,b\n3,c\n").unwrap();
    let r = curl_json(&args(&[
        "-sS",
        "--location-trusted",
        "-u",
        "root:",
        "-H",
        "label:persist1",
        "-H",
        "column_separator:,",
        "-T",
        &data.display().to_string(),
        &format!("http://{}/api/test/u/_stream_load", p.fe),
    ]));
    assert_eq!(r["Status"], "Success");
    sql(&p, "DELETE FROM test.u WHERE k = 2");
    sql(&p, "ALTER TABLE test.u ADD COLUMN w INT DEFAULT \"7\"");
    sql(&p, "INSERT INTO test.u VALUES (4, 'd', 8)");
    let before = sql(&p, "SELECT * FROM test.u ORDER BY k");
    let tablets_before = sql(&p, "SHOW TABLETS FROM test.u");
    p.child.kill().unwrap(); // SIGKILL
    p.child.wait().unwrap();

    let mut p2 = spawn(dir.path());
    assert_eq!(sql(&p2, "SELECT * FROM test.u ORDER BY k"), before);
    assert_eq!(before, "1\ta\t7\n3\tc\t7\n4\td\t8\n");
    // Tablet ids are stable across restarts.
    let ids = |s: &str| s.lines().map(|l| l.split('\t').next().unwrap_or("").to_string()).collect::<Vec<_>>();
    assert_eq!(ids(&sql(&p2, "SHOW TABLETS FROM test.u")), ids(&tablets_before));
    // The label survived too.
    let again = curl_json(&args(&[
        "-sS",
        "--location-trusted",
        "-u",
        "root:",
        "-H",
        "label:persist1",
        "-H",
        "column_separator:,",
        "-T",
        &data.display().to_string(),
        &format!("http://{}/api/test/u/_stream_load", p2.fe),
    ]));
    assert_eq!(again["Status"], "Label Already Exists");
    p2.child.kill().unwrap();
    p2.child.wait().unwrap();
}

#[test]
fn binary_prints_listeners_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path());
    assert!(p.fe.starts_with("127.0.0.1:"));
    assert_eq!(sql(&p, "SELECT 1"), "1\n");
    let st = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let status = p.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
}
