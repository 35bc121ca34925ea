//! FE REST endpoints in the v2 envelope.

use serde_json::json;

use crate::common::{Server, args, curl_json};

#[test]
fn schema_backends_health_tso_and_query() {
    let s = Server::start();
    s.sql("CREATE DATABASE test");
    s.sql("CREATE TABLE test.t (k1 INT COMMENT 'key', d DECIMAL(10,2), v VARCHAR(8)) UNIQUE KEY(k1) DISTRIBUTED BY HASH(k1) BUCKETS 1");
    let get = |path: &str| curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}{path}", s.fe())]));
    assert_eq!(
        get("/api/test/t/_schema"),
        json!({"msg": "success", "code": 0, "data": {"properties": [
            {"name": "k1", "type": "INT", "comment": "key", "aggregation_type": ""},
            {"name": "d", "type": "DECIMAL64", "comment": "", "aggregation_type": "", "precision": "10", "scale": "2"},
            {"name": "v", "type": "VARCHAR", "comment": "", "aggregation_type": ""}
        ], "keysType": "UNIQUE_KEYS", "status": 200}, "count": 0})
    );
    let be_port: u16 = s.be().rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        get("/api/backends?is_alive=true"),
        json!({"msg": "success", "code": 0, "data": {"backends": [{"ip": "127.0.0.1", "http_port": be_port, "is_alive": true}]}, "count": 0})
    );
    assert_eq!(get("/api/health")["data"], json!({"total_backend_num": 1, "online_backend_num": 1}));
    let tso = get("/api/tso")["data"].clone();
    let cur = tso["current_tso"].as_i64().unwrap();
    assert_eq!(cur >> 18, tso["current_tso_physical_time"].as_i64().unwrap());
    assert_eq!(get("/api/bootstrap"), json!({"msg": "success", "code": 0, "data": null, "count": 0}));
    assert_eq!(get("/api/test/nope/_schema")["code"], 1);
    // The query API, as the Flink connector uses it.
    s.sql("INSERT INTO test.t VALUES (1, 2.5, 'a'), (2, NULL, 'b')");
    let q = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"stmt": "select k1, v from t order by k1", "is_sync": true}"#,
        &format!("http://{}/api/query/default_cluster/test", s.fe()),
    ]));
    assert_eq!(q["code"], 0);
    assert_eq!(q["data"]["type"], "result_set");
    assert_eq!(q["data"]["meta"], json!([{"name": "k1", "type": "INT"}, {"name": "v", "type": "VARCHAR"}]));
    assert_eq!(q["data"]["data"], json!([[1, "a"], [2, "b"]]));
    let f = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-d",
        r#"{"stmt": "show frontends"}"#,
        &format!("http://{}/api/query/default_cluster/test", s.fe()),
    ]));
    assert!(f["data"]["meta"].as_array().unwrap().iter().any(|m| m["name"] == "ArrowFlightSqlPort"));
    // Auth failures.
    let bad = curl_json(&args(&["-sS", "-u", "root:nope", &format!("http://{}/api/health", s.fe())]));
    assert_eq!(bad["code"], 401);
    assert_eq!(bad["msg"], "Unauthorized");
    let none = curl_json(&args(&["-sS", &format!("http://{}/api/test/t/_schema", s.fe())]));
    assert_eq!(none, json!({"msg": "Unauthorized", "code": 401, "data": "Need auth information.", "count": 0}));
    let st = curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}/api/test/get_load_state", s.fe())]));
    assert_eq!(st["code"], 403);
    let st =
        curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}/api/test/get_load_state?label=never", s.fe())]));
    assert_eq!(st["data"], "UNKNOWN");
}
