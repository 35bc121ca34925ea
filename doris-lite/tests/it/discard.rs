//! Discarding Stream Loads (`--discard-stream-loads`, `Config::discard_stream_loads`, the debug
//! point `StreamLoad.discard`): curl and 2PC see a normal Doris, the table stays empty.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::common::{Server, args, curl_json, two_pc};

fn setup(s: &Server) {
    s.sql("CREATE DATABASE IF NOT EXISTS test");
    s.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
}

fn discarding() -> Server {
    Server::start_with(doris_lite::Config { discard_stream_loads: true, ..doris_lite::Config::ephemeral() })
}

/// `n` CSV rows `k,v`.
fn rows(n: usize) -> Vec<u8> {
    (0..n).map(|i| format!("{i},value_{i}\n")).collect::<String>().into_bytes()
}

fn load(s: &Server, label: &str, extra: &[&str], body: &[u8]) -> Value {
    let f = s.file(&format!("{label}.csv"), body);
    let mut headers = vec![format!("label:{label}"), "column_separator:,".to_string()];
    headers.extend(extra.iter().map(|h| h.to_string()));
    s.stream_load("test", "t", &headers.iter().map(String::as_str).collect::<Vec<_>>(), &f)
}

fn load_state(fe: &str, label: &str) -> Value {
    curl_json(&args(&["-sS", "-u", "root:", &format!("http://{fe}/api/test/get_load_state?label={label}")]))["data"]
        .clone()
}

fn count(s: &Server) -> String {
    s.sql("SELECT count(*) FROM test.t")[0][0].clone()
}

#[test]
fn a_discarded_curl_load_answers_success_with_its_rows_and_the_table_stays_empty() {
    let s = discarding();
    setup(&s);
    let body = rows(10_000);
    let r = load(&s, "d1", &[], &body);
    assert_eq!(r["Status"], "Success");
    assert_eq!(r["Message"], "OK");
    assert_eq!(r["Label"], "d1");
    assert_eq!(r["TwoPhaseCommit"], "false");
    assert_eq!(r["NumberTotalRows"], 10_000);
    assert_eq!(r["NumberLoadedRows"], 10_000);
    assert_eq!(r["NumberFilteredRows"], 0);
    assert_eq!(r["LoadBytes"], body.len());
    let txn = r["TxnId"].as_i64().unwrap();
    assert!(txn > 0);
    assert_eq!(count(&s), "0");
    // The transaction is real: the label is finished and cannot be used again.
    assert_eq!(load_state(&s.fe(), "d1"), "VISIBLE");
    let again = load(&s, "d1", &[], &body);
    assert_eq!(again["Status"], "Label Already Exists");
    assert_eq!(again["ExistingJobStatus"], "FINISHED");
    // Header lines are not rows; a last line without a newline is.
    let r = load(&s, "d2", &["format:csv_with_names"], b"k,v\n1,a\n2,b\n\n3,c");
    assert_eq!((r["Status"].as_str(), r["NumberTotalRows"].as_u64()), (Some("Success"), Some(3)));
    // Headers are still checked against the table.
    let r = load(&s, "d3", &["columns:k,nope=k+1"], b"1,a\n");
    assert_eq!(r["Status"], "Fail");
    assert_eq!(
        r["Message"],
        "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = Unknown column 'nope' in 'table list'"
    );
    assert_eq!(count(&s), "0");
}

#[test]
fn two_phase_commit_works_end_to_end_while_loads_are_discarded() {
    let s = discarding();
    setup(&s);
    let r = load(&s, "p1", &["two_phase_commit:true"], &rows(500));
    assert_eq!(r["Status"], "Success");
    assert_eq!(r["TwoPhaseCommit"], "true");
    assert_eq!(r["NumberLoadedRows"], 500);
    let txn = r["TxnId"].as_i64().unwrap();
    assert_eq!(load_state(&s.fe(), "p1"), "PRECOMMITTED");
    assert_eq!(load(&s, "p1", &["two_phase_commit:true"], b"1,a\n")["ExistingJobStatus"], "PRECOMMITTED");

    assert_eq!(
        two_pc(&s.fe(), "label:p1", "commit"),
        json!({"status": "Success", "msg": "label [p1] commit successfully."})
    );
    assert_eq!(
        two_pc(&s.fe(), &format!("txn_id:{txn}"), "commit"),
        json!({"status": "ANALYSIS_ERROR", "msg": format!("TStatus: errCode = 2, detailMessage = transaction [{txn}] is already visible, not pre-committed.")})
    );
    assert_eq!(load_state(&s.fe(), "p1"), "VISIBLE");
    assert_eq!(load(&s, "p1", &["two_phase_commit:true"], b"1,a\n")["ExistingJobStatus"], "FINISHED");

    // Abort by txn id frees the label, as without discarding.
    let r = load(&s, "p2", &["two_phase_commit:true"], &rows(3));
    let txn2 = r["TxnId"].as_i64().unwrap();
    assert_eq!(
        two_pc(&s.fe(), &format!("txn_id:{txn2}"), "abort"),
        json!({"status": "Success", "msg": format!("transaction [{txn2}] abort successfully.")})
    );
    assert_eq!(load_state(&s.fe(), "p2"), "ABORTED");
    assert_eq!(load(&s, "p2", &[], &rows(3))["Status"], "Success");
    assert_eq!(count(&s), "0");
}

#[test]
fn the_debug_point_discards_until_removed_then_loads_store_rows_again() {
    let s = Server::start();
    setup(&s);
    let add = curl_json(&args(&[
        "-sS",
        "-X",
        "POST",
        "-u",
        "root:",
        &format!("http://{}/api/debug_point/add/StreamLoad.discard", s.fe()),
    ]));
    assert_eq!(add["code"], 0);
    for label in ["x1", "x2"] {
        let r = load(&s, label, &[], &rows(100));
        assert_eq!((r["Status"].as_str(), r["NumberLoadedRows"].as_u64()), (Some("Success"), Some(100)));
    }
    let r = load(&s, "x3", &["two_phase_commit:true"], &rows(7));
    assert_eq!(two_pc(&s.fe(), "label:x3", "commit")["status"], "Success");
    assert_eq!(r["NumberLoadedRows"], 7);
    assert_eq!(count(&s), "0");

    s.handle().debug_points().remove("StreamLoad.discard").unwrap();
    let r = load(&s, "y1", &[], &rows(100));
    assert_eq!((r["Status"].as_str(), r["NumberLoadedRows"].as_u64()), (Some("Success"), Some(100)));
    let r = load(&s, "y2", &["two_phase_commit:true"], &rows(7));
    assert_eq!(r["NumberLoadedRows"], 7);
    assert_eq!(count(&s), "100");
    assert_eq!(two_pc(&s.fe(), "label:y2", "commit")["status"], "Success");
    assert_eq!(count(&s), "107");
    assert_eq!(s.sql("SELECT v FROM test.t WHERE k = 99"), vec![vec!["value_99"]]);

    // execute=1: one load is discarded, the next one is stored.
    s.handle().debug_points().add("StreamLoad.discard", doris_lite::DebugPoint::times(1)).unwrap();
    assert_eq!(load(&s, "z1", &[], &rows(10))["NumberLoadedRows"], 10);
    assert_eq!(count(&s), "107");
    assert_eq!(load(&s, "z2", &[], &rows(10))["NumberLoadedRows"], 10);
    assert_eq!(count(&s), "117");
}

/// The `doris-lite` binary on ephemeral ports; stopped on drop.
struct Binary {
    child: Child,
    fe: String,
    query_port: u16,
}

impl Binary {
    fn start(extra: &[&str]) -> Binary {
        let mut child = Command::new(env!("CARGO_BIN_EXE_doris-lite"))
            .args(["--fe-http-port", "0", "--be-http-port", "0", "--query-port", "0", "--arrow-flight-sql-port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the doris-lite binary starts");
        let (mut fe, mut query_port) = (String::new(), 0);
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        for line in out.lines() {
            let line = line.expect("stdout line");
            if let Some(a) = line.strip_prefix("fe_http ") {
                fe = a.to_string();
            } else if let Some(a) = line.strip_prefix("query ") {
                query_port = a.rsplit(':').next().and_then(|p| p.parse().ok()).expect("query port");
            } else if line == "ready" {
                break;
            }
        }
        assert!(!fe.is_empty() && query_port > 0, "doris-lite printed its listeners");
        Binary { child, fe, query_port }
    }

    fn sql(&self, sql: &str) -> String {
        let out = Command::new("mysql")
            .args(["-h127.0.0.1", "-P", &self.query_port.to_string(), "-uroot", "-N", "-B", "-e", sql])
            .output()
            .expect("the mysql CLI");
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn load(&self, dir: &std::path::Path, label: &str, body: &[u8]) -> Value {
        let f = dir.join(format!("{label}.csv"));
        std::fs::write(&f, body).expect("write");
        crate::common::curl_load(&self.fe, "test", "t", label, &["column_separator:,"], &f)
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_binary_flag_discards_and_without_it_rows_are_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (flag, stored) in [(Some("--discard-stream-loads"), "0"), (None, "1000")] {
        let b = Binary::start(flag.as_slice());
        b.sql("CREATE DATABASE test");
        b.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
        let r = b.load(dir.path(), "b1", &rows(1000));
        assert_eq!((r["Status"].as_str(), r["NumberLoadedRows"].as_u64()), (Some("Success"), Some(1000)), "{flag:?}");
        assert_eq!(b.sql("SELECT count(*) FROM test.t"), stored, "{flag:?}");
    }
}
