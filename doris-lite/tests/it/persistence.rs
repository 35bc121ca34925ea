//! `--data-dir`: committed data survives `kill -9` of the binary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::curl_load;

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
    let r = curl_load(&p.fe, "test", "u", "persist1", &["column_separator:,"], &data);
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
    let again = curl_load(&p2.fe, "test", "u", "persist1", &["column_separator:,"], &data);
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

/// A 2PC Stream Load into the process at `fe`, pre-committed with the rows of `data`.
fn precommit(fe: &str, label: &str, data: &Path) -> serde_json::Value {
    curl_load(fe, "test", "d", label, &["two_phase_commit:true", "column_separator:,"], data)
}

/// `kill -9` with rows in pre-committed transactions: after the restart each is still
/// PRECOMMITTED, its rows invisible until committed and then all there; an aborted one stays
/// aborted; one never committed is aborted by name and its rows never show.
#[test]
fn precommitted_rows_survive_kill_9_and_are_committed_or_aborted_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path());
    sql(&p, "CREATE DATABASE test");
    sql(&p, "CREATE TABLE test.d (k INT, v VARCHAR(10)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    let file = |name: &str, rows: std::ops::RangeInclusive<u32>| {
        let path = dir.path().join(name);
        std::fs::write(&path, rows.map(|k| format!("{k},{name}\n")).collect::<String>()).unwrap();
        path
    };
    let keep = precommit(&p.fe, "keep", &file("keep", 1..=300));
    assert_eq!((keep["Status"].as_str(), keep["NumberLoadedRows"].as_u64()), (Some("Success"), Some(300)), "{keep}");
    let undo = precommit(&p.fe, "undo", &file("undo", 301..=310));
    assert_eq!(undo["NumberLoadedRows"], 10, "{undo}");
    let drop = precommit(&p.fe, "drop", &file("drop", 311..=320));
    assert_eq!(crate::common::two_pc(&p.fe, "label:drop", "abort")["status"], "Success");
    let states = |p: &Proc| sql(p, "SHOW TRANSACTION FROM test WHERE status = 'precommitted'");
    let labels = |out: String| out.lines().map(|l| l.split('\t').nth(1).unwrap_or("").to_string()).collect::<Vec<_>>();
    assert_eq!(labels(states(&p)), ["keep", "undo"]);
    assert_eq!(sql(&p, "SELECT count(*) FROM test.d"), "0\n", "pre-committed rows are not visible");
    p.child.kill().unwrap(); // SIGKILL
    p.child.wait().unwrap();

    let mut p2 = spawn(dir.path());
    assert_eq!(labels(states(&p2)), ["keep", "undo"], "both are still pre-committed");
    assert_eq!(sql(&p2, "SELECT count(*) FROM test.d"), "0\n");
    let committed = crate::common::two_pc(&p2.fe, &format!("txn_id:{}", keep["TxnId"]), "commit");
    assert_eq!(committed["status"], "Success", "{committed}");
    assert_eq!(crate::common::two_pc(&p2.fe, "label:undo", "abort")["status"], "Success");
    let gone = crate::common::two_pc(&p2.fe, &format!("txn_id:{}", drop["TxnId"]), "commit");
    assert_eq!(gone["status"], "ANALYSIS_ERROR", "{gone}");
    assert!(gone["msg"].as_str().unwrap_or("").contains("is already aborted"), "{gone}");
    assert_eq!(sql(&p2, "SELECT count(*), min(k), max(k), count(DISTINCT v) FROM test.d"), "300\t1\t300\t1\n");
    assert_eq!(states(&p2), "");
    let status = |l: &str| sql(&p2, &format!("SHOW TRANSACTION FROM test WHERE label = '{l}'"));
    assert!(status("keep").contains("\tVISIBLE\t") && status("undo").contains("\tABORTED\t"), "{}", status("undo"));
    let err = Command::new("mysql")
        .args(["-h127.0.0.1", "-P", &p2.query_port, "-uroot", "-e", "SHOW TRANSACTION FROM test WHERE db = 'test'"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&err.stderr).contains("Where clause should looks like one of them"), "{err:?}");
    p2.child.kill().unwrap();
    p2.child.wait().unwrap();
}
