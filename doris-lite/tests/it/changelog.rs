//! Changelog tables and `@incr` reads (§5) on the manual clock: the worked example of §5.4 in
//! all three modes, TTL per mode, the visibility wait, `/api/tso` and `FROM_UNIXTIME` — through
//! the mysql CLI, pymysql and pyarrow Flight SQL.

use serde_json::{Value, json};

use crate::common::{Server, args, curl_json, run_python};
use crate::flight::PRELUDE;
use doris_lite::Config;

/// 2030-01-01 10:00:00 UTC.
const T10_00: i64 = 1_893_492_000_000;
const MIN: i64 = 60_000;

fn server() -> Server {
    Server::start_with(Config { manual_clock: true, ..Config::ephemeral() })
}

fn set_clock(s: &Server, ms: i64) {
    let r = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "POST",
        &format!("http://{}/api/debug/clock/advance?to_ms={ms}", s.fe()),
    ]));
    assert_eq!(r["code"], 0, "{r}");
    assert_eq!(r["data"]["now_ms"], ms);
}

const ORDERS: &str = r#"CREATE TABLE test.orders (id INT, status VARCHAR(20)) UNIQUE KEY(id)
DISTRIBUTED BY HASH(id) BUCKETS 2
PROPERTIES ("changelog.enable" = "true", "changelog.need_historical_value" = "true")"#;

/// §5.4: rows 1, 2, 3 at 10:00; at 10:05 update 1, delete 2, insert 4, insert and delete 5.
fn worked_example(s: &Server) {
    s.sql("CREATE DATABASE test");
    s.sql(ORDERS);
    set_clock(s, T10_00);
    s.sql("INSERT INTO test.orders VALUES (1, 'created'), (2, 'created'), (3, 'created')");
    set_clock(s, T10_00 + 5 * MIN);
    s.sql("INSERT INTO test.orders VALUES (1, 'paid')");
    s.sql("DELETE FROM test.orders WHERE id = 2");
    s.sql("INSERT INTO test.orders VALUES (4, 'created')");
    s.sql("INSERT INTO test.orders VALUES (5, 'created')");
    s.sql("DELETE FROM test.orders WHERE id = 5");
    set_clock(s, T10_00 + 10 * MIN);
}

fn incr_sql(table: &str, params: &str) -> String {
    format!(
        "/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT `id`, `status`, __DORIS_BINLOG_TSO__, \
         __DORIS_BINLOG_LSN__, __DORIS_BINLOG_OP__ FROM `test`.`{table}`@incr({params}) ORDER BY \
         __DORIS_BINLOG_TSO__, __DORIS_BINLOG_LSN__, __DORIS_BINLOG_OP__"
    )
}

fn window(mode: &str) -> String {
    format!(
        "'startTimestamp' = '2030-01-01 10:03:00', 'endTimestamp' = '2030-01-01 10:10:00', 'incrementType' = '{mode}'"
    )
}

/// (id, status, op) of an @incr read through the mysql CLI.
fn mysql_rows(s: &Server, sql: &str) -> Vec<(String, String, String)> {
    s.sql(sql).into_iter().map(|r| (r[0].clone(), r[1].clone(), r[4].clone())).collect()
}

fn rows(v: &[(i32, &str, i32)]) -> Vec<(String, String, String)> {
    v.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect()
}

#[test]
fn worked_example_in_all_three_modes() {
    let s = server();
    worked_example(&s);
    let min_delta = rows(&[(1, "created", 2), (1, "paid", 3), (2, "created", 1), (4, "created", 0)]);
    let append_only = rows(&[(4, "created", 0), (5, "created", 0)]);
    let detail = rows(&[
        (1, "created", 2),
        (1, "paid", 3),
        (2, "created", 1),
        (4, "created", 0),
        (5, "created", 0),
        (5, "created", 1),
    ]);
    assert_eq!(mysql_rows(&s, &incr_sql("orders", &window("MIN_DELTA"))), min_delta);
    assert_eq!(mysql_rows(&s, &incr_sql("orders", &window("APPEND_ONLY"))), append_only);
    assert_eq!(mysql_rows(&s, &incr_sql("orders", &window("DETAIL"))), detail);
    // MIN_DELTA is the default; no start = every key starts absent.
    let default_mode =
        incr_sql("orders", "'startTimestamp' = '2030-01-01 10:03:00', 'endTimestamp' = '2030-01-01 10:10:00'");
    assert_eq!(mysql_rows(&s, &default_mode), min_delta);
    assert_eq!(mysql_rows(&s, &incr_sql("orders", "")), rows(&[(3, "created", 0), (1, "paid", 0), (4, "created", 0)]));
    // The window is [start, end): a window ending at 10:05:00 does not see the 10:05 commits.
    let early =
        "'startTimestamp' = '2030-01-01 10:00:00', 'endTimestamp' = '2030-01-01 10:05:00', 'incrementType' = 'DETAIL'";
    assert_eq!(mysql_rows(&s, &incr_sql("orders", early)).len(), 3);
    // TSO and LSN order the records; one commit shares a TSO.
    let detail_rows = s.sql(&incr_sql("orders", &window("DETAIL")));
    assert_eq!(detail_rows[0][2], detail_rows[1][2], "update before/after share the commit TSO");
    assert_eq!((detail_rows[0][3].as_str(), detail_rows[1][3].as_str()), ("0", "1"));
    let tso: i64 = detail_rows[0][2].parse().unwrap();
    assert_eq!(tso >> 18, T10_00 + 5 * MIN, "TSO = physical ms << 18 | logical");

    // The same through Flight SQL, in a +08:00 session (the window is local time).
    let r: Value = {
        let script = format!(
            "{PRELUDE}\nport = sys.argv[1]\n{}",
            r#"
c, o = connect(port)
query(c, o, "SET time_zone = '+08:00'")
res = {}
for mode in ["MIN_DELTA", "APPEND_ONLY", "DETAIL"]:
    t = query(c, o, sys.argv[2].replace("MODE", mode))
    res[mode] = [[r["id"], r["status"], r["__DORIS_BINLOG_OP__"]] for r in t.to_pylist()]
    res["types"] = [str(f.type) for f in t.schema][2:]
import pymysql
db = pymysql.connect(host="127.0.0.1", port=int(sys.argv[3]), user="root", password="")
cur = db.cursor()
for mode in ["MIN_DELTA", "APPEND_ONLY", "DETAIL"]:
    cur.execute(sys.argv[4].replace("MODE", mode))
    res["pymysql_" + mode] = [[r[0], r[1], r[4]] for r in cur.fetchall()]
out(res)
"#
        );
        let sql = incr_sql(
            "orders",
            "'startTimestamp' = '2030-01-01 18:03:00', 'endTimestamp' = '2030-01-01 18:10:00', 'incrementType' = 'MODE'",
        );
        let utc = incr_sql("orders", &window("MODE"));
        let out = run_python(&script, &[s.flight_port().to_string(), sql, s.query_port().to_string(), utc]);
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    assert_eq!(r["MIN_DELTA"], json!([[1, "created", 2], [1, "paid", 3], [2, "created", 1], [4, "created", 0]]));
    assert_eq!(r["APPEND_ONLY"], json!([[4, "created", 0], [5, "created", 0]]));
    assert_eq!(
        r["DETAIL"],
        json!([
            [1, "created", 2],
            [1, "paid", 3],
            [2, "created", 1],
            [4, "created", 0],
            [5, "created", 0],
            [5, "created", 1]
        ])
    );
    assert_eq!(r["types"], json!(["int64", "int64", "int8"]));
    for mode in ["MIN_DELTA", "APPEND_ONLY", "DETAIL"] {
        assert_eq!(r[format!("pymysql_{mode}")], r[mode], "pymysql reads the same {mode} rows");
    }
}

/// `UPDATE` is an upsert of the changed rows, so the changelog records update-before/after for
/// each matched row (and nothing for the others), as for the INSERT of the worked example.
#[test]
fn update_is_recorded_as_update_before_and_after() {
    let s = server();
    s.sql("CREATE DATABASE test");
    s.sql(ORDERS);
    set_clock(&s, T10_00);
    s.sql("INSERT INTO test.orders VALUES (1, 'created'), (2, 'created'), (3, 'created')");
    set_clock(&s, T10_00 + 5 * MIN);
    s.sql("UPDATE test.orders o SET o.status = concat(o.status, '+paid') WHERE o.id IN (1, 3)");
    set_clock(&s, T10_00 + 10 * MIN);
    assert_eq!(
        mysql_rows(&s, &incr_sql("orders", &window("DETAIL"))),
        rows(&[(1, "created", 2), (1, "created+paid", 3), (3, "created", 2), (3, "created+paid", 3)])
    );
    assert_eq!(
        s.sql("SELECT id, status FROM test.orders ORDER BY id"),
        vec![vec!["1", "created+paid"], vec!["2", "created"], vec!["3", "created+paid"]]
    );
}

#[test]
fn incr_validation_errors() {
    let s = server();
    s.sql("CREATE DATABASE test");
    s.sql(ORDERS);
    s.sql("CREATE TABLE test.plain (id INT, status VARCHAR(20)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1");
    s.sql(
        "CREATE TABLE test.nohist (id INT, status VARCHAR(20)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 \
         PROPERTIES (\"binlog.enable\" = \"true\", \"binlog.format\" = \"ROW\")",
    );
    let e = |sql: &str| s.sql_err(sql);
    for (table, params, detail) in [
        ("orders", "'incrementType' = 'ALL'", "Unsupported parameter in incr query"),
        ("orders", "'start' = '2030-01-01 10:00:00'", "Unsupported parameter in incr query"),
        ("orders", "'startTimestamp' = '2030-01-01'", "Invalid TIMESTAMP format in incr clause"),
        ("plain", "", "INCR query requires ROW binlog enabled on base table."),
        ("nohist", "", "MIN_DELTA INCR query requires base table to enable binlog.need_historical_value=true"),
    ] {
        assert_eq!(
            e(&incr_sql(table, params)),
            format!("ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = {detail}")
        );
    }
    assert!(s.sql(&incr_sql("nohist", "'incrementType' = 'DETAIL'")).is_empty());
    assert!(
        e("CREATE TABLE test.z (id INT) DUPLICATE KEY(id) PROPERTIES (\"changelog.enable\" = \"true\", \"changelog.ttl_seconds\" = \"0\")")
            .ends_with("ROW changelog.ttl_seconds must be greater than 0")
    );
    // A start after the end reads nothing.
    let backwards = "'startTimestamp' = '2030-01-01 10:00:00', 'endTimestamp' = '2029-01-01 10:00:00'";
    set_clock(&s, T10_00);
    s.sql("INSERT INTO test.orders VALUES (1, 'a')");
    assert!(s.sql(&incr_sql("orders", backwards)).is_empty());
    assert_eq!(s.sql(&incr_sql("orders", "'incrementType' = 'DETAIL'")).len(), 1);
}

#[test]
fn ttl_per_mode() {
    let s = server();
    s.sql("CREATE DATABASE test");
    for (name, prefix) in [("c", "changelog"), ("b", "binlog")] {
        let extra = if prefix == "binlog" { ", \"binlog.format\" = \"ROW\"" } else { "" };
        s.sql(&format!(
            "CREATE TABLE test.{name} (id INT, status VARCHAR(20)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 \
             PROPERTIES (\"{prefix}.enable\" = \"true\"{extra}, \"{prefix}.need_historical_value\" = \"true\", \
             \"{prefix}.ttl_seconds\" = \"60\")"
        ));
    }
    set_clock(&s, T10_00);
    s.sql("INSERT INTO test.c VALUES (1, 'old')");
    s.sql("INSERT INTO test.b VALUES (1, 'old')");
    set_clock(&s, T10_00 + 2 * MIN);
    s.sql("INSERT INTO test.c VALUES (2, 'new')");
    s.sql("INSERT INTO test.b VALUES (2, 'new')");
    set_clock(&s, T10_00 + 2 * MIN + 30_000);
    let expired_start = |mode: &str| format!("'startTimestamp' = '2030-01-01 10:00:00', 'incrementType' = '{mode}'");
    for mode in ["DETAIL", "APPEND_ONLY"] {
        // An expired start silently begins at the first retained record.
        assert_eq!(mysql_rows(&s, &incr_sql("c", &expired_start(mode))), rows(&[(2, "new", 0)]), "{mode}");
        assert_eq!(mysql_rows(&s, &incr_sql("c", &format!("'incrementType' = '{mode}'"))), rows(&[(2, "new", 0)]));
    }
    assert_eq!(
        s.sql_err(&incr_sql("c", &expired_start("MIN_DELTA"))),
        "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Changelog offset has expired according to \
         changelog.ttl_seconds"
    );
    assert_eq!(
        s.sql_err(&incr_sql("b", &expired_start("MIN_DELTA"))),
        "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Row binlog offset has expired according to \
         binlog.ttl_seconds"
    );
    // Without a start, MIN_DELTA reads only what is retained.
    assert_eq!(mysql_rows(&s, &incr_sql("c", "")), rows(&[(2, "new", 0)]));
    // A retained start is fine.
    let recent = "'startTimestamp' = '2030-01-01 10:01:45', 'incrementType' = 'MIN_DELTA'";
    assert_eq!(mysql_rows(&s, &incr_sql("c", recent)), rows(&[(2, "new", 0)]));
    // TTL can be raised later; then the old record is back in reach.
    s.sql("ALTER TABLE test.c SET (\"changelog.ttl_seconds\" = \"86400\")");
    assert_eq!(mysql_rows(&s, &incr_sql("c", &expired_start("DETAIL"))), rows(&[(1, "old", 0), (2, "new", 0)]));
}

#[test]
fn visibility_wait_times_out_with_5101_and_future_end_is_5100() {
    let s = server();
    worked_example(&s);
    // Long enough to outlast a slow interpreter start on a loaded machine: the reads below
    // must all run while the transaction is in flight.
    let hold = "Txn.hold_in_flight?table=test.orders&ms=60000";
    let r = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "POST",
        &format!("http://{}/api/debug_point/add/{hold}", s.fe()),
    ]));
    assert_eq!(r["code"], 0, "{r}");
    let script = format!(
        "{PRELUDE}\nport = sys.argv[1]\n{}",
        r#"
import time, pymysql
sql, future = sys.argv[3], sys.argv[4]
db = pymysql.connect(host="127.0.0.1", port=int(sys.argv[2]), user="root", password="")
cur = db.cursor()
cur.execute("SET change_visible_timeout_ms = 300")
res = {}
t0 = time.time()
try:
    cur.execute(sql)
except pymysql.err.OperationalError as e:
    res["mysql"] = [e.args[0], e.args[1]]
res["waited_ms"] = int((time.time() - t0) * 1000)
c, o = connect(port)
query(c, o, "SET change_visible_timeout_ms = 300")
try:
    query(c, o, sql)
except fl.FlightUnavailableError as e:
    res["flight"] = msg(e)
try:
    cur.execute(future)
except pymysql.err.OperationalError as e:
    res["future"] = [e.args[0], e.args[1]]
try:
    query(c, o, future)
except fl.FlightUnavailableError as e:
    res["future_flight"] = msg(e)
res["in_flight_s"] = time.time() - t0
deadline = time.time() + 120
while True:
    try:
        cur.execute(sql)
        res["after"] = len(cur.fetchall())
        break
    except pymysql.err.OperationalError as e:
        if time.time() > deadline:
            raise
res["total_s"] = time.time() - t0
out(res)
"#
    );
    let future = incr_sql(
        "orders",
        "'startTimestamp' = '2030-01-01 10:03:00', 'endTimestamp' = '2030-01-01 10:11:00', 'incrementType' = 'DETAIL'",
    );
    let out = run_python(
        &script,
        &[s.flight_port().to_string(), s.query_port().to_string(), incr_sql("orders", &window("DETAIL")), future],
    );
    let r: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(r["mysql"][0], 5101);
    let m = r["mysql"][1].as_str().unwrap();
    assert!(
        m.starts_with(
            "errCode = 2, detailMessage = ERR_INCR_VISIBLE_WAIT_TIMEOUT: reason=VISIBLE_WAIT_TIMEOUT, timeout waiting \
             previous transactions finish for time-based read, txnIdWatermark="
        ),
        "{m}"
    );
    assert!(m.ends_with("timeoutMs=300"), "{m}");
    let waited = r["waited_ms"].as_i64().unwrap();
    // It waited for the visibility timeout (300 ms), not for the transaction (60 s).
    assert!((300..30_000).contains(&waited), "waited {waited} ms");
    assert!(r["flight"].as_str().unwrap().contains("ERR_INCR_VISIBLE_WAIT_TIMEOUT"), "{r}");
    assert_eq!(r["future"][0], 5100);
    assert!(
        r["future"][1].as_str().unwrap().contains(&format!(
            "reason=END_AFTER_CURRENT_TSO, endTimestamp exceeds the maximum supported time for an INCR read: \
             requestedEndTimestampMs={}, CURRENT_TSO_PHYSICAL_TIME={}",
            T10_00 + 11 * MIN,
            T10_00 + 10 * MIN
        )),
        "{r}"
    );
    assert!(r["future_flight"].as_str().unwrap().contains("ERR_INCR_WINDOW_NOT_READY"), "{r}");
    assert_eq!(r["after"], 6, "once the transaction is gone the window reads");
    // The reads that must meet the transaction in flight did (it is released after 60 s).
    assert!(r["in_flight_s"].as_f64().unwrap() < 60.0, "{r}");
}

#[test]
fn tso_api_tso_status_and_from_unixtime_follow_the_clock() {
    let s = server();
    s.sql("CREATE DATABASE test");
    s.sql(ORDERS);
    set_clock(&s, T10_00);
    s.sql("INSERT INTO test.orders VALUES (1, 'a')");
    set_clock(&s, T10_00 + 90_000);
    let tso = curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}/api/tso", s.fe())]));
    assert_eq!(tso["code"], 0);
    assert_eq!(tso["data"]["current_tso_physical_time"], T10_00 + 90_000);
    assert_eq!(tso["data"]["current_tso"], json!((T10_00 + 90_000) << 18));
    let status = s.sql(
        "SELECT CURRENT_TSO_PHYSICAL_TIME, COMMITTED_TSO_PHYSICAL_TIME, CURRENT_TSO_LOGICAL_COUNTER FROM \
         information_schema.tso_status",
    );
    assert_eq!(status, vec![vec![(T10_00 + 90_000).to_string(), T10_00.to_string(), "0".to_string()]]);
    // The Flink reader formats the TSO time through the HTTP query API.
    let q = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        &json!({"stmt": format!("SELECT FROM_UNIXTIME({} / 1000, '%Y-%m-%d %H:%i:%s')", T10_00 + 90_999)}).to_string(),
        &format!("http://{}/api/query/default_cluster/test", s.fe()),
    ]));
    assert_eq!(q["data"]["data"], json!([["2030-01-01 10:01:30"]]));
    // SHOW FRONTENDS names the Flight SQL port.
    let fe = s.mysql_raw(&["-B"], "SHOW FRONTENDS");
    let text = String::from_utf8_lossy(&fe.stdout).to_string();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let row: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let i = header.iter().position(|h| *h == "ArrowFlightSqlPort").unwrap();
    assert_eq!(row[i], s.flight_port().to_string());
    // The clock only moves forward.
    let back = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "POST",
        &format!("http://{}/api/debug/clock/advance?to_ms={T10_00}", s.fe()),
    ]));
    assert_eq!(back["code"], 1);
}
