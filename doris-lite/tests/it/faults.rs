//! Debug points (`/api/debug_point/…`) and what each does to a real client (curl, mysql).

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Server, args, curl, curl_json};

fn setup(s: &Server) {
    s.sql("CREATE DATABASE IF NOT EXISTS test");
    s.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
}

/// `POST /api/debug_point/<op>` on the FE with `root:`.
fn debug_point(s: &Server, op: &str) -> Value {
    curl_json(&args(&["-sS", "-X", "POST", "-u", "root:", &format!("http://{}/api/debug_point/{op}", s.fe())]))
}

fn ok_reply() -> Value {
    json!({"msg": "OK", "code": 0, "data": null, "count": 0})
}

/// A stream load through the FE that may fail at the transport: (curl exit code, stdout).
fn load_raw(s: &Server, label: &str, extra: &[&str], body: &str) -> (i32, String) {
    let f = s.file(&format!("{label}.csv"), body.as_bytes());
    let mut a = args(&["-sS", "--location-trusted", "-u", "root:", "-H", &format!("label:{label}")]);
    a.extend(args(&["-H", "column_separator:,"]));
    for h in extra {
        a.extend(args(&["-H", h]));
    }
    a.extend(args(&["-T", &f.display().to_string(), &format!("http://{}/api/test/t/_stream_load", s.fe())]));
    let out = Command::new("curl").args(&a).output().expect("curl");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn load(s: &Server, label: &str, extra: &[&str], body: &str) -> Value {
    let (code, out) = load_raw(s, label, extra, body);
    assert_eq!(code, 0, "curl failed: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn two_pc(s: &Server, txn_id: i64, op: &str) -> Value {
    curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "-u",
        "root:",
        "-H",
        &format!("txn_id:{txn_id}"),
        "-H",
        &format!("txn_operation:{op}"),
        &format!("http://{}/api/test/_stream_load_2pc", s.fe()),
    ]))
}

fn load_state(s: &Server, label: &str) -> Value {
    curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}/api/test/get_load_state?label={label}", s.fe())]))["data"]
        .clone()
}

fn count(s: &Server) -> String {
    s.sql("SELECT count(*) FROM test.t")[0][0].clone()
}

#[test]
fn api_envelope_unknown_names_and_auth() {
    let s = Server::start();
    assert_eq!(debug_point(&s, "add/StreamLoad.fail?execute=1"), ok_reply());
    assert_eq!(debug_point(&s, "remove/StreamLoad.fail"), ok_reply());
    assert_eq!(debug_point(&s, "clear"), ok_reply());
    let bad = debug_point(&s, "add/StreamLoad.explode");
    assert_eq!(bad["code"], 1);
    assert_eq!(
        bad["msg"],
        "unknown debug point [StreamLoad.explode]; valid names: StreamLoad.fail, StreamLoad.publish_timeout, \
         StreamLoad.close_mid_body, StreamLoad.stall, StreamLoad.drop_response, StreamLoad.discard, Txn.commit_fail, \
         Txn.abort_fail, Txn.hold_in_flight, Flight.drop_stream, Flight.stall, Server.restart_listeners"
    );
    assert_eq!(debug_point(&s, "add/StreamLoad.stall?probability=2")["code"], 1);
    let noauth = curl_json(&args(&["-sS", "-X", "POST", &format!("http://{}/api/debug_point/clear", s.fe())]));
    assert_eq!(noauth["code"], 401);
}

#[test]
fn stream_load_fail_leaves_the_label_free() {
    let s = Server::start();
    setup(&s);
    debug_point(&s, "add/StreamLoad.fail?execute=1&message=disk%20full");
    let r = load(&s, "f1", &[], "1,a\n2,b\n");
    assert_eq!(r["Status"], "Fail");
    assert_eq!(r["Message"], "disk full");
    assert_eq!(r["TxnId"], -1);
    assert_eq!(count(&s), "0");
    // execute=1: the retry with the same label goes through.
    let r = load(&s, "f1", &[], "1,a\n2,b\n");
    assert_eq!(r["Status"], "Success");
    assert_eq!(count(&s), "2");
    // Defaults and a custom status, until removed.
    debug_point(&s, "add/StreamLoad.fail?status=Label%20Already%20Exists");
    assert_eq!(load(&s, "f2", &[], "3,c\n")["Status"], "Label Already Exists");
    debug_point(&s, "add/StreamLoad.fail");
    let r = load(&s, "f2", &[], "3,c\n");
    assert_eq!((r["Status"].as_str(), r["Message"].as_str()), (Some("Fail"), Some("debug point StreamLoad.fail")));
    debug_point(&s, "remove/StreamLoad.fail");
    assert_eq!(load(&s, "f2", &[], "3,c\n")["Status"], "Success");
}

#[test]
fn publish_timeout_commits_and_says_so() {
    let s = Server::start();
    setup(&s);
    debug_point(&s, "add/StreamLoad.publish_timeout?execute=1");
    let r = load(&s, "p1", &[], "1,a\n");
    assert_eq!(r["Status"], "Publish Timeout");
    assert_eq!(r["Message"], "[PUBLISH_TIMEOUT]transaction commit successfully, BUT data will be visible later");
    assert_eq!(count(&s), "1");
    assert_eq!(load_state(&s, "p1"), "VISIBLE");
    // 2PC: the pre-commit is unaffected, the commit call answers Publish Timeout.
    debug_point(&s, "add/StreamLoad.publish_timeout?execute=1");
    let r = load(&s, "p2", &["two_phase_commit:true"], "2,b\n");
    assert_eq!(r["Status"], "Success");
    let c = two_pc(&s, r["TxnId"].as_i64().unwrap(), "commit");
    assert_eq!(c["status"], "Publish Timeout");
    assert_eq!(count(&s), "2");
}

#[test]
fn close_mid_body_drops_the_connection_and_loads_nothing() {
    let s = Server::start();
    setup(&s);
    debug_point(&s, "add/StreamLoad.close_mid_body?execute=1&after_bytes=4");
    let (code, out) = load_raw(&s, "c1", &[], "1,a\n2,b\n3,c\n");
    // 52: empty reply from server; 55/56: the connection was reset while sending.
    assert!([52, 55, 56].contains(&code), "curl exit {code}: {out}");
    assert_eq!(out, "");
    assert_eq!(count(&s), "0");
    assert_eq!(load(&s, "c1", &[], "1,a\n2,b\n3,c\n")["Status"], "Success");
    assert_eq!(count(&s), "3");
}

#[test]
fn stall_delays_the_answer() {
    let s = Server::start();
    setup(&s);
    debug_point(&s, "add/StreamLoad.stall?execute=1&ms=800");
    let t = Instant::now();
    assert_eq!(load(&s, "s1", &[], "1,a\n")["Status"], "Success");
    assert!(t.elapsed() >= Duration::from_millis(800), "{:?}", t.elapsed());
    assert_eq!(count(&s), "1");
    // `execute=1`: the point disarmed itself after that one load.
    assert!(!s.handle().debug_points().is_armed("StreamLoad.stall"));
}

#[test]
fn drop_response_commits_then_the_retry_sees_the_label() {
    let s = Server::start();
    setup(&s);
    debug_point(&s, "add/StreamLoad.drop_response?execute=1");
    let (code, out) = load_raw(&s, "d1", &[], "1,a\n2,b\n");
    assert_eq!((code, out.as_str()), (52, ""), "curl must see an empty reply");
    assert_eq!(count(&s), "2");
    let r = load(&s, "d1", &[], "1,a\n2,b\n");
    assert_eq!(r["Status"], "Label Already Exists");
    assert_eq!(r["ExistingJobStatus"], "FINISHED");
    // With 2PC the lost reply leaves a pre-committed transaction behind.
    debug_point(&s, "add/StreamLoad.drop_response?execute=1");
    let (code, _) = load_raw(&s, "d2", &["two_phase_commit:true"], "3,c\n");
    assert_eq!(code, 52);
    let r = load(&s, "d2", &["two_phase_commit:true"], "3,c\n");
    assert_eq!(r["ExistingJobStatus"], "PRECOMMITTED");
    let msg = r["Message"].as_str().unwrap();
    let txn: i64 = msg.rsplit('[').next().unwrap().trim_end_matches(']').parse().unwrap();
    assert_eq!(two_pc(&s, txn, "commit")["status"], "Success");
    assert_eq!(count(&s), "3");
}

#[test]
fn txn_commit_and_abort_fail_keep_the_transaction_precommitted() {
    let s = Server::start();
    setup(&s);
    let r = load(&s, "t1", &["two_phase_commit:true"], "1,a\n");
    let txn = r["TxnId"].as_i64().unwrap();
    debug_point(&s, "add/Txn.commit_fail?execute=1");
    assert_eq!(two_pc(&s, txn, "commit"), json!({"status": "ANALYSIS_ERROR", "msg": "debug point Txn.commit_fail"}));
    assert_eq!(load_state(&s, "t1"), "PRECOMMITTED");
    debug_point(&s, "add/Txn.abort_fail?execute=1&status=Fail&msg=nope");
    assert_eq!(two_pc(&s, txn, "abort"), json!({"status": "Fail", "msg": "nope"}));
    assert_eq!(load_state(&s, "t1"), "PRECOMMITTED");
    assert_eq!(count(&s), "0");
    assert_eq!(two_pc(&s, txn, "commit")["status"], "Success");
    assert_eq!(count(&s), "1");
}

#[test]
fn restart_listeners_closes_connections_and_keeps_data() {
    let s = Server::start();
    setup(&s);
    load(&s, "r1", &[], "1,a\n");
    // An open MySQL connection: read the handshake, then wait for the close.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", s.query_port())).unwrap();
    let mut buf = [0u8; 512];
    assert!(conn.read(&mut buf).unwrap() > 0);
    // A generous deadline: a read that times out means the connection was left open.
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // Down for 5 s: long enough for the refused connection below on a busy machine.
    assert_eq!(debug_point(&s, "add/Server.restart_listeners?ms=5000"), ok_reply());
    match conn.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the open connection was not closed: {other:?}"),
    }
    // While the listeners are down, connections are refused.
    let out = Command::new("curl")
        .args(args(&["-sS", "-u", "root:", &format!("http://{}/api/health", s.fe())]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "connection refused: {}", String::from_utf8_lossy(&out.stderr));
    // Then the same ports serve again, with the data.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("curl")
            .args(args(&["-sS", "-u", "root:", &format!("http://{}/api/health", s.fe())]))
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "listeners did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(count(&s), "1");
    let health = curl(&args(&["-sS", "-u", "root:", &format!("http://{}/api/health", s.fe())]));
    assert!(health.contains("\"online_backend_num\":1"), "{health}");
}
