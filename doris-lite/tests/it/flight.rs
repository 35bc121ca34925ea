//! Arrow Flight SQL with pyarrow.flight and ADBC (`adbc_driver_flightsql`), tablet reads,
//! `_query_plan` and the `Flight.drop_stream` debug point.

use serde_json::{Value, json};

use crate::common::{Server, args, curl_json, run_python};

/// pyarrow has no Flight SQL messages: the few used are encoded by hand.
pub const PRELUDE: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.flight as fl

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)

def _field(num, data):
    return bytes([num << 3 | 2]) + _varint(len(data)) + data

def command(sql):
    return _field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery") + _field(2, _field(1, sql.encode()))

def connect(port, user="root", password=""):
    c = fl.FlightClient("grpc://127.0.0.1:%s" % port)
    tok = c.authenticate_basic_token(user, password)
    return c, fl.FlightCallOptions(headers=[tok])

def info(c, o, sql):
    return c.get_flight_info(fl.FlightDescriptor.for_command(command(sql)), o)

def query(c, o, sql):
    return c.do_get(info(c, o, sql).endpoints[0].ticket, o).read_all()

def msg(e):
    return str(e).split("with message: ", 1)[-1].split(". gRPC client debug context")[0]

def out(v):
    print(json.dumps(v, default=str))
"#;

fn py(s: &Server, body: &str) -> Value {
    let script = format!("{PRELUDE}\nport = sys.argv[1]\n{body}");
    let stdout = run_python(&script, &[s.flight_port().to_string()]);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn load_csv(s: &Server, table: &str, csv: &str) {
    let f = s.file(&format!("{table}.csv"), csv.as_bytes());
    let r = s.stream_load("test", table, &["column_separator:|"], &f);
    assert_eq!(r["Status"], "Success", "{r}");
}

#[test]
fn a_user_with_a_password_reads_and_a_wrong_or_empty_one_is_refused() {
    let s = Server::start_with(doris_lite::Config {
        users: vec![("root".into(), String::new()), ("etl".into(), "s3cret-pw".into())],
        ..doris_lite::Config::ephemeral()
    });
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.p (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    load_csv(&s, "p", "1|a\n2|b\n");
    let r = py(
        &s,
        r#"
c, o = connect(port, "etl", "s3cret-pw")
rows = query(c, o, "SELECT k, v FROM test.p ORDER BY k").to_pylist()
refused = {}
for name, pw in [("wrong", "s3cret-pX"), ("empty", "")]:
    try:
        connect(port, "etl", pw)
        refused[name] = False
    except fl.FlightUnauthenticatedError:
        refused[name] = True
out({"rows": rows, "refused": refused})
"#,
    );
    assert_eq!(r["rows"], json!([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]));
    assert_eq!(r["refused"], json!({"wrong": true, "empty": true}));
}

#[test]
fn pyarrow_auth_sessions_and_types() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql(
        "CREATE TABLE test.ty (id INT, b BOOLEAN, ti TINYINT, bi BIGINT, li LARGEINT, f FLOAT, d DOUBLE, \
         dec DECIMAL(10,2), dt DATE, ts DATETIME, ts3 DATETIME(3), s VARCHAR(20), j JSON) \
         DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    load_csv(
        &s,
        "ty",
        "1|1|7|9000000000|170141183460469231731687303715884105727|1.5|2.25|12.34|2024-01-02|2024-01-02 03:04:05|2024-01-02 03:04:05.678|hi|{\"a\":1}\n\
         2|\\N|\\N|\\N|\\N|\\N|\\N|\\N|\\N|\\N|\\N|\\N|\\N\n",
    );
    let r = py(
        &s,
        r#"
c, o = connect(port)
use = query(c, o, "USE test")
setv = query(c, o, "SET time_zone = '+08:00'")
t = query(c, o, "SELECT * FROM ty ORDER BY id")
tz = query(c, o, "SELECT @@time_zone AS tz").column(0).to_pylist()
errs = {}
try:
    connect(port, "root", "wrong")
except fl.FlightUnauthenticatedError as e:
    errs["password"] = "unauthenticated"
try:
    bad = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer nope")])
    c.get_flight_info(fl.FlightDescriptor.for_command(command("SELECT 1")), bad)
except fl.FlightUnauthenticatedError as e:
    errs["token"] = "invalid bearer token" in str(e)
try:
    query(c, o, "SELECT * FROM nosuch")
except fl.FlightInternalError as e:
    errs["sql"] = msg(e)
out({"use": [use.schema.names, use.column(0).to_pylist()], "set": setv.column(0).to_pylist(),
     "types": [str(f.type) for f in t.schema], "names": t.schema.names,
     "meta": {f.name: {k.decode(): v.decode() for k, v in (f.metadata or {}).items()} for f in t.schema},
     "rows": t.to_pylist(), "tz": tz, "errs": errs})
"#,
    );
    assert_eq!(r["use"], json!([["StatusResult"], ["0"]]));
    assert_eq!(r["set"], json!(["0"]));
    assert_eq!(r["tz"], json!(["+08:00"]), "SET persists in the token's session");
    assert_eq!(
        r["types"],
        json!([
            "int32",
            "bool",
            "int8",
            "int64",
            "string",
            "float",
            "double",
            "decimal128(10, 2)",
            "date32[day]",
            "timestamp[s]",
            "timestamp[ms]",
            "string",
            "string"
        ])
    );
    assert_eq!(r["names"][0], "id");
    assert_eq!(r["meta"]["li"], json!({"doris_type": "LARGEINT"}));
    assert_eq!(r["meta"]["j"], json!({"doris_type": "JSON"}));
    let row = &r["rows"][0];
    assert_eq!(row["li"], "170141183460469231731687303715884105727");
    assert_eq!(row["dec"], "12.34");
    assert_eq!(row["ts"], "2024-01-02 03:04:05");
    assert_eq!(row["ts3"], "2024-01-02 03:04:05.678000");
    assert_eq!(row["j"], "{\"a\":1}");
    assert_eq!(r["rows"][1]["li"], Value::Null);
    assert_eq!(r["errs"]["password"], "unauthenticated");
    assert_eq!(r["errs"]["token"], true);
    assert_eq!(
        r["errs"]["sql"],
        "get flight info statement failed, errCode = 2, detailMessage = Table [nosuch] does not exist in database \
         [test]., error code: 1146, error msg: errCode = 2, detailMessage = Table [nosuch] does not exist in \
         database [test]."
    );
}

fn tablet_ids(s: &Server, table: &str) -> Vec<String> {
    s.sql(&format!("SHOW TABLETS FROM test.{table}")).into_iter().map(|r| r[0].clone()).collect()
}

#[test]
fn tablet_reads_in_the_flink_form_union_to_the_table() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    let csv: String = (0..1000).map(|i| format!("{i}|v{i}\n")).collect();
    load_csv(&s, "t", &csv);
    let ids = tablet_ids(&s, "t");
    assert_eq!(ids.len(), 4);
    // `_query_plan` names the same tablets.
    let plan = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"sql": "select k, v from test.t where k > 5"}"#,
        &format!("http://{}/api/test/t/_query_plan", s.fe()),
    ]));
    assert_eq!(plan["code"], 0);
    assert_eq!(plan["data"]["status"], 200);
    let mut planned: Vec<String> = plan["data"]["partitions"].as_object().unwrap().keys().cloned().collect();
    planned.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(planned, sorted);
    assert_eq!(plan["data"]["partitions"][&ids[0]]["routings"], json!(["127.0.0.1:9060"]));
    assert!(plan["data"]["opaqued_query_plan"].as_str().is_some_and(|p| !p.is_empty()));
    let r = py(
        &s,
        &format!(
            r#"
ids = {ids:?}
c, o = connect(port)
per = []
keys = []
for i in ids:
    t = query(c, o, "/* ApplicationName=Flink ArrowFlightSQL Query */ SELECT `k`, `v` FROM `test`.`t`  TABLET(%s)  WHERE k >= 0 LIMIT 100000" % i)
    per.append(t.num_rows)
    keys += t.column(0).to_pylist()
two = query(c, o, "SELECT k FROM test.t TABLET(%s, %s) WHERE k < 10" % (ids[0], ids[1])).num_rows
full = query(c, o, "SELECT k FROM test.t").num_rows
limited = query(c, o, "SELECT k FROM test.t TABLET(%s) LIMIT 3" % ids[0]).num_rows
try:
    query(c, o, "SELECT k FROM test.t TABLET(1)")
    missing = None
except fl.FlightInternalError as e:
    missing = "tablet [1] does not exist in table [t]" in str(e)
out({{"per": per, "keys": sorted(keys), "two": two, "full": full, "limited": limited, "missing": missing}})
"#
        ),
    );
    let per: Vec<i64> = r["per"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert!(per.iter().all(|n| *n > 0), "every tablet holds rows: {per:?}");
    assert_eq!(per.iter().sum::<i64>(), 1000);
    assert_eq!(r["keys"], json!((0..1000).collect::<Vec<_>>()));
    assert_eq!(r["full"], 1000);
    assert_eq!(r["limited"], 3);
    assert_eq!(r["missing"], true);
    assert!(r["two"].as_i64().unwrap() < 10);
    // The MySQL protocol reads tablets the same way.
    let n: i64 = ids
        .iter()
        .map(|i| s.sql(&format!("SELECT count(*) FROM test.t TABLET({i})"))[0][0].parse::<i64>().unwrap())
        .sum();
    assert_eq!(n, 1000);
}

#[test]
fn query_plan_restrictions() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    let plan = |sql: &str| {
        curl_json(&args(&[
            "-sS",
            "-u",
            "root:",
            "-X",
            "POST",
            "-d",
            &json!({ "sql": sql }).to_string(),
            &format!("http://{}/api/test/t/_query_plan", s.fe()),
        ]))["data"]
            .clone()
    };
    assert_eq!(plan("select k from test.t")["status"], 200);
    assert_eq!(plan("select `k` from `t`")["status"], 200);
    for bad in ["select count(*) from test.t", "select k from test.t order by k", "select k from test.t limit 1"] {
        let d = plan(bad);
        assert_eq!(d["status"], 400, "{bad}");
        assert!(d["exception"].as_str().unwrap().starts_with("only support single table select"), "{d}");
    }
    assert_eq!(
        plan("select k from test.other")["exception"],
        "requested database and table must consistent with sql: request [test.t], but found [test.other]"
    );
}

#[test]
fn adbc_driver_flightsql() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3");
    load_csv(&s, "t", "1|a\n2|b\n3|c\n");
    let r = py(
        &s,
        r#"
import warnings
import adbc_driver_manager
import adbc_driver_flightsql.dbapi as flight_sql
warnings.simplefilter("ignore")
conn = flight_sql.connect(uri="grpc://127.0.0.1:%s" % port, db_kwargs={
    adbc_driver_manager.DatabaseOptions.USERNAME.value: "root",
    adbc_driver_manager.DatabaseOptions.PASSWORD.value: "",
})
cur = conn.cursor()
cur.execute("USE test")
status = cur.fetchall()
cur.execute("SELECT k, v FROM t ORDER BY k")
rows = cur.fetchall()
cur.execute("SELECT count(*) AS n FROM test.t WHERE k > 1")
n = cur.fetch_arrow_table().column(0).to_pylist()
schema = cur.adbc_prepare("SELECT v FROM t WHERE k = 2")
cur.execute("SELECT v FROM t WHERE k = 2")
prepared = cur.fetchall()
try:
    cur.execute("SELECT * FROM nosuch")
    err = None
except Exception as e:
    err = type(e).__name__
info = conn.adbc_get_info()
cur.close()
conn.close()
out({"status": status, "rows": rows, "n": n, "prepared": prepared, "err": err,
     "vendor": info.get("vendor_name")})
"#,
    );
    assert_eq!(r["status"], json!([["0"]]));
    assert_eq!(r["rows"], json!([[1, "a"], [2, "b"], [3, "c"]]));
    assert_eq!(r["n"], json!([2]));
    assert_eq!(r["prepared"], json!([["b"]]));
    assert_eq!(r["err"], "InternalError");
    assert_eq!(r["vendor"], "DorisFE");
}

#[test]
fn drop_stream_debug_point_cuts_a_doget() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3");
    let csv: String = (0..300).map(|i| format!("{i}|v{i}\n")).collect();
    load_csv(&s, "t", &csv);
    let ids = tablet_ids(&s, "t").join(",");
    s.handle()
        .debug_points()
        .add("Flight.drop_stream", doris_lite::DebugPoint::times(1).param("after_batches", 1))
        .unwrap();
    let r = py(
        &s,
        &format!(
            r#"
c, o = connect(port)
sql = "SELECT k FROM test.t TABLET({ids})"
r = c.do_get(info(c, o, sql).endpoints[0].ticket, o)
got = r.read_chunk().data.num_rows
try:
    r.read_chunk()
    err = None
except fl.FlightInternalError as e:
    err = msg(e)
again = query(c, o, sql).num_rows
out({{"first": got, "err": err, "again": again}})
"#
        ),
    );
    assert!(r["first"].as_i64().unwrap() > 0);
    assert_eq!(r["err"], "debug point Flight.drop_stream: stream dropped after 1 batches");
    assert_eq!(r["again"], 300, "execute=1: the next read is whole");
}

#[test]
fn restart_listeners_keeps_flight_sessions() {
    let s = Server::start();
    let add = format!("http://{}/api/debug_point/add/Server.restart_listeners?ms=3000", s.fe());
    let r = py(
        &s,
        &format!(
            r#"
import subprocess, time
c, o = connect(port)
query(c, o, "SET time_zone = '+08:00'")
subprocess.run(["curl", "-sS", "-u", "root:", "-X", "POST", "{add}"], check=True, capture_output=True)
time.sleep(0.2)
errors = []
deadline = time.time() + 60
while True:
    try:
        tz = query(c, o, "SELECT @@time_zone AS tz").column(0).to_pylist()
        break
    except fl.FlightError as e:
        errors.append(type(e).__name__)
        if time.time() > deadline:
            raise
        time.sleep(0.1)
out({{"tz": tz, "saw_outage": len(errors) > 0}})
"#
        ),
    );
    assert_eq!(r["tz"], json!(["+08:00"]), "the Bearer session outlives the restart");
    assert_eq!(r["saw_outage"], true, "{r}");
}
