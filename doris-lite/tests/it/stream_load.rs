//! Stream Load with curl exactly as the Doris manual uses it.

use std::io::Write;

use serde_json::json;

use crate::common::{Server, args, curl, curl_json, keys, two_pc};

fn setup(s: &Server, ddl: &str) {
    s.sql("CREATE DATABASE IF NOT EXISTS test");
    s.sql(ddl);
}

#[test]
fn csv_load_reply_shape_and_reused_label() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    let f = s.file("data.csv", b"1,a\n2,b\n3,c\n");
    let r = s.stream_load("test", "t", &["label:l1", "column_separator:,"], &f);
    assert_eq!(
        keys(&r),
        [
            "TxnId",
            "Label",
            "Comment",
            "TwoPhaseCommit",
            "Status",
            "Message",
            "NumberTotalRows",
            "NumberLoadedRows",
            "NumberFilteredRows",
            "NumberUnselectedRows",
            "LoadBytes",
            "LoadTimeMs",
            "BeginTxnTimeMs",
            "StreamLoadPutTimeMs",
            "ReadDataTimeMs",
            "WriteDataTimeMs",
            "ReceiveDataTimeMs",
            "CommitAndPublishTimeMs"
        ]
    );
    assert_eq!(r["Status"], "Success");
    assert_eq!(r["Message"], "OK");
    assert_eq!(r["Label"], "l1");
    assert_eq!(r["TwoPhaseCommit"], json!("false"));
    assert_eq!(r["NumberTotalRows"], 3);
    assert_eq!(r["NumberLoadedRows"], 3);
    assert_eq!(r["LoadBytes"], 12);
    let txn = r["TxnId"].as_i64().unwrap();
    assert!(txn > 0);
    assert_eq!(s.sql("SELECT k, v FROM test.t ORDER BY k"), vec![vec!["1", "a"], vec!["2", "b"], vec!["3", "c"]]);

    // The same label again: nothing loaded, the existing job is FINISHED.
    let again = s.stream_load("test", "t", &["label:l1", "column_separator:,"], &f);
    assert_eq!(again["Status"], "Label Already Exists");
    assert_eq!(again["ExistingJobStatus"], "FINISHED");
    assert_eq!(again["TxnId"], -1);
    assert_eq!(
        again["Message"],
        format!(
            "[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = Label [l1] has already been used, relate to txn [{txn}]"
        )
    );
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["3"]]);

    // The FE redirects with the Doris Location form and without reading the body.
    let out = curl(&args(&[
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-u",
        "root:",
        "-H",
        "Expect: 100-continue",
        "-T",
        &f.display().to_string(),
        &format!("http://{}/api/test/t/_stream_load", s.fe()),
    ]));
    assert!(out.starts_with("HTTP/1.1 307"), "{out}");
    let location = out
        .lines()
        .find_map(|l| l.strip_prefix("location: ").or_else(|| l.strip_prefix("Location: ")))
        .expect("Location header")
        .trim();
    assert_eq!(
        location,
        format!(
            "http://root%40default_cluster:@127.0.0.1:{}/api/test/t/_stream_load?",
            s.be().rsplit(':').next().unwrap()
        )
    );
    // Without an Expect header the FE refuses.
    let out = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "-X",
        "PUT",
        "-H",
        "Expect:",
        &format!("http://{}/api/test/t/_stream_load", s.fe()),
    ]));
    assert_eq!(out, json!({"status": "FAILED", "msg": "There is no 100-continue header"}));

    // A trailing slash, as some clients write the URL: the same load, through the FE's redirect
    // (`--data-binary`: `-T` would append the file's name to a URL ending in `/`).
    let f2 = s.file("more.csv", b"4,d\n");
    let r = curl_json(&args(&[
        "-sS",
        "--location-trusted",
        "-u",
        "root:",
        "-H",
        "Expect: 100-continue",
        "-H",
        "label:slash",
        "-H",
        "column_separator:,",
        "-X",
        "PUT",
        "--data-binary",
        &format!("@{}", f2.display()),
        &format!("http://{}/api/test/t/_stream_load/", s.fe()),
    ]));
    assert_eq!((r["Status"].as_str(), r["Label"].as_str()), (Some("Success"), Some("slash")), "{r}");
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["4"]]);
}

#[test]
fn two_phase_commit_precommit_then_commit() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v VARCHAR(20)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    let f = s.file("data.csv", b"1,a\n2,b\n");
    let r = s.stream_load("test", "t", &["label:p1", "column_separator:,", "two_phase_commit:true"], &f);
    assert_eq!(r["Status"], "Success");
    assert_eq!(r["TwoPhaseCommit"], "true");
    assert_eq!(r["CommitAndPublishTimeMs"], 0);
    let txn = r["TxnId"].as_i64().unwrap();
    // Pre-committed data is invisible.
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["0"]]);
    let state =
        curl_json(&args(&["-sS", "-u", "root:", &format!("http://{}/api/test/get_load_state?label=p1", s.fe())]));
    assert_eq!(state, json!({"msg": "success", "code": 0, "data": "PRECOMMITTED", "count": 0}));
    let again = s.stream_load("test", "t", &["label:p1", "column_separator:,", "two_phase_commit:true"], &f);
    assert_eq!(again["Status"], "Label Already Exists");
    assert_eq!(again["ExistingJobStatus"], "PRECOMMITTED");

    let commit = |op: &str| two_pc(&s.fe(), &format!("txn_id:{txn}"), op);
    assert_eq!(
        commit("commit"),
        json!({"status": "Success", "msg": format!("transaction [{txn}] commit successfully.")})
    );
    assert_eq!(s.sql("SELECT k, v FROM test.t ORDER BY k"), vec![vec!["1", "a"], vec!["2", "b"]]);
    assert_eq!(
        commit("commit"),
        json!({"status": "ANALYSIS_ERROR", "msg": format!("TStatus: errCode = 2, detailMessage = transaction [{txn}] is already visible, not pre-committed.")})
    );

    // Abort by label, then the label is reusable.
    let r2 = s.stream_load(
        "test",
        "t",
        &["label:p2", "column_separator:,", "two_phase_commit:true"],
        &s.file("d2.csv", b"3,c\n"),
    );
    let txn2 = r2["TxnId"].as_i64().unwrap();
    let abort = curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "-u",
        "root:",
        "-H",
        "label:p2",
        "-H",
        "txn_operation:abort",
        &format!("http://{}/api/test/t/_stream_load_2pc", s.be()),
    ]));
    assert_eq!(abort, json!({"status": "Success", "msg": "label [p2] abort successfully."}));
    let commit_aborted = curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "-u",
        "root:",
        "-H",
        &format!("txn_id:{txn2}"),
        "-H",
        "txn_operation:commit",
        &format!("http://{}/api/test/_stream_load_2pc", s.fe()),
    ]));
    assert_eq!(
        commit_aborted["msg"],
        format!(
            "TStatus: errCode = 2, detailMessage = transaction [{txn2}] is already aborted. abort reason: User Abort"
        )
    );
    let r3 = s.stream_load("test", "t", &["label:p2", "column_separator:,"], &s.file("d3.csv", b"3,c\n"));
    assert_eq!(r3["Status"], "Success");
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["3"]]);
    let missing = curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "-u",
        "root:",
        "-H",
        "txn_operation:commit",
        &format!("http://{}/api/test/_stream_load_2pc", s.fe()),
    ]));
    assert_eq!(missing, json!({"status": "FAILED", "msg": "No transaction id or label selected."}));
}

#[test]
fn unique_upsert_delete_sign_sequence_and_partial_update() {
    let s = Server::start();
    setup(
        &s,
        "CREATE TABLE test.u (id INT, name VARCHAR(32), age INT, score INT) UNIQUE KEY(id) \
         DISTRIBUTED BY HASH(id) BUCKETS 3 PROPERTIES (\"function_column.sequence_col\" = \"age\")",
    );
    let load = |name: &str, body: &[u8], headers: &[&str]| {
        let f = s.file(name, body);
        let mut h = vec!["column_separator:,"];
        h.extend_from_slice(headers);
        let r = s.stream_load("test", "u", &h, &f);
        assert_eq!(r["Status"], "Success", "{r}");
        r
    };
    // Within one load later rows win; across loads the larger sequence (age) wins.
    load("a.csv", b"1,a,10,100\n1,b,11,101\n2,c,20,200\n3,d,30,300\n", &[]);
    load("b.csv", b"1,old,5,1\n2,new,25,2\n", &[]);
    assert_eq!(
        s.sql("SELECT id, name, age, score FROM test.u ORDER BY id"),
        vec![vec!["1", "b", "11", "101"], vec!["2", "new", "25", "2"], vec!["3", "d", "30", "300"]]
    );
    // Delete sign through hidden_columns; a delete with a lower sequence is ignored.
    load("c.csv", b"3,d,31,0,1\n1,x,1,0,1\n", &["hidden_columns:__DORIS_DELETE_SIGN__"]);
    assert_eq!(s.sql("SELECT id FROM test.u ORDER BY id"), vec![vec!["1"], vec!["2"]]);
    // merge_type DELETE and MERGE with a delete condition.
    load("d.csv", b"2,z,99,0\n", &["merge_type:DELETE"]);
    assert_eq!(s.sql("SELECT id FROM test.u ORDER BY id"), vec![vec!["1"]]);
    load("e.csv", b"1,q,50,7\n4,w,40,8\n", &["merge_type:MERGE", "delete:score=7"]);
    assert_eq!(s.sql("SELECT id, name FROM test.u ORDER BY id"), vec![vec!["4", "w"]]);
    // Partial update keeps the columns not supplied.
    load("f.csv", b"4,41,999\n", &["partial_columns:true", "columns:id,age,score"]);
    assert_eq!(s.sql("SELECT id, name, age, score FROM test.u"), vec![vec!["4", "w", "41", "999"]]);
    // Hidden columns show only on request.
    let hidden = s.sql("SET show_hidden_columns = true; SELECT __DORIS_DELETE_SIGN__ FROM test.u");
    assert_eq!(hidden, vec![vec!["0"]]);
    let err = s.sql_err("SELECT __DORIS_DELETE_SIGN__ FROM test.u");
    assert!(err.contains("ERROR 1054"), "{err}");
}

#[test]
fn hidden_sequence_type_via_header() {
    let s = Server::start();
    setup(
        &s,
        "CREATE TABLE test.h (k INT, v VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 \
         PROPERTIES (\"function_column.sequence_type\" = \"int\")",
    );
    let f1 = s.file("1.csv", b"1,new,9\n");
    let f2 = s.file("2.csv", b"1,old,3\n");
    for f in [&f1, &f2] {
        let r = s.stream_load(
            "test",
            "h",
            &["column_separator:,", "columns:k,v,seq", "function_column.sequence_col:seq"],
            f,
        );
        assert_eq!(r["Status"], "Success", "{r}");
    }
    assert_eq!(s.sql("SELECT k, v FROM test.h"), vec![vec!["1", "new"]]);
    let r = s.stream_load("test", "h", &["column_separator:,"], &f1);
    assert_eq!(r["Status"], "Fail");
    assert!(r["Message"].as_str().unwrap().contains("need to specify the sequence column"), "{r}");
}

#[test]
fn aggregate_merge() {
    let s = Server::start();
    setup(
        &s,
        "CREATE TABLE test.a (k INT, s BIGINT SUM DEFAULT \"0\", mx INT MAX, mn INT MIN, r VARCHAR(8) REPLACE, \
         rn VARCHAR(8) REPLACE_IF_NOT_NULL) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2",
    );
    let f = s.file("a.csv", b"1,10,5,5,a,x\n1,20,9,2,b,\\N\n2,1,1,1,c,y\n");
    assert_eq!(s.stream_load("test", "a", &["column_separator:,"], &f)["Status"], "Success");
    let f = s.file("b.csv", b"1,5,7,1,z,\\N\n");
    assert_eq!(s.stream_load("test", "a", &["column_separator:,"], &f)["Status"], "Success");
    assert_eq!(
        s.sql("SELECT k, s, mx, mn, r, rn FROM test.a ORDER BY k"),
        vec![vec!["1", "35", "9", "1", "z", "x"], vec!["2", "1", "1", "1", "c", "y"]]
    );
    s.sql("INSERT INTO test.a VALUES (2, 4, 0, 0, 'i', NULL)");
    assert_eq!(s.sql("SELECT s, r, rn FROM test.a WHERE k = 2"), vec![vec!["5", "i", "y"]]);
}

#[test]
fn filter_ratio_and_error_url() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT NOT NULL, v VARCHAR(5)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let f = s.file("bad.csv", b"1,a\n2\nx,b\n3,c\n4,toolong\n");
    let r = s.stream_load("test", "t", &["column_separator:,", "label:bad1"], &f);
    assert_eq!(r["Status"], "Fail");
    assert_eq!(r["Message"], "[DATA_QUALITY_ERROR]too many filtered rows");
    assert_eq!(r["NumberTotalRows"], 5);
    assert_eq!(r["NumberFilteredRows"], 3);
    assert_eq!(r["NumberLoadedRows"], 2);
    let url = r["ErrorURL"].as_str().expect("ErrorURL").to_string();
    assert!(url.starts_with(&format!("http://{}/api/_load_error_log?file=__shard_", s.be())), "{url}");
    let log = curl(&args(&["-sS", &url]));
    assert!(log.contains("actual column number in csv file is  less than  schema column number.actual number: 1, schema column number: 2"), "{log}");
    assert!(log.contains("src line [2]"), "{log}");
    assert!(log.contains("the length of input is too long than schema"), "{log}");
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["0"]]);
    // The failed label was aborted, so it can be reused; with a ratio the good rows load.
    let r = s.stream_load("test", "t", &["column_separator:,", "label:bad1", "max_filter_ratio:0.8"], &f);
    assert_eq!(r["Status"], "Success", "{r}");
    assert_eq!(r["NumberLoadedRows"], 2);
    assert_eq!(r["NumberFilteredRows"], 3);
    assert!(r.get("ErrorURL").is_some());
    assert_eq!(s.sql("SELECT k, v FROM test.t ORDER BY k"), vec![vec!["1", "a"], vec!["3", "c"]]);
    // strict_mode filters conversion failures instead of loading NULL.
    s.sql("CREATE TABLE test.n (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let f = s.file("n.csv", b"1,abc\n");
    assert_eq!(s.stream_load("test", "n", &["column_separator:,", "strict_mode:true"], &f)["NumberFilteredRows"], 1);
    assert_eq!(s.stream_load("test", "n", &["column_separator:,"], &f)["NumberLoadedRows"], 1);
    assert_eq!(s.sql("SELECT k, v FROM test.n"), vec![vec!["1", "NULL"]]);
}

#[test]
fn the_error_log_shows_the_first_50_rejected_rows_and_the_count_stays_exact() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT NOT NULL, v VARCHAR(5)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let body: String = (1..=200).map(|k| format!("{k},{}\n", if k % 2 == 0 { "waytoolong" } else { "ok" })).collect();
    let f = s.file("many.csv", body.as_bytes());
    let r = s.stream_load("test", "t", &["column_separator:,", "max_filter_ratio:0.6"], &f);
    assert_eq!(
        (r["Status"].as_str(), r["NumberFilteredRows"].as_i64(), r["NumberLoadedRows"].as_i64()),
        (Some("Success"), Some(100), Some(100))
    );
    let log = curl(&args(&["-sS", r["ErrorURL"].as_str().unwrap()]));
    assert_eq!(log.lines().count(), 50, "{log}");
    assert!(log.lines().all(|l| l.starts_with("Reason: the length of input is too long than schema")), "{log}");
}

#[test]
fn gzip_chunked_json_and_separators() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v VARCHAR(20), d DATE) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3");
    // gz body.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"1,a,2024-01-01\n2,b,2024-01-02\n").unwrap();
    let f = s.file("d.csv.gz", &gz.finish().unwrap());
    let r = s.stream_load("test", "t", &["column_separator:,", "compress_type:gz"], &f);
    assert_eq!((r["Status"].as_str(), r["NumberLoadedRows"].as_i64()), (Some("Success"), Some(2)), "{r}");
    // Chunked body, \x01 separator and a multi-char line delimiter.
    let f = s.file("c.txt", b"3\x01c\x012024-01-03||4\x01d\x012024-01-04||");
    let r =
        s.stream_load("test", "t", &["Transfer-Encoding: chunked", "column_separator:\\x01", "line_delimiter:||"], &f);
    assert_eq!(r["NumberLoadedRows"], 2, "{r}");
    // JSON lines, outer array, jsonpaths.
    let f = s.file("j1.json", b"{\"k\":5,\"v\":\"e\",\"d\":\"2024-01-05\"}\n{\"k\":6,\"v\":\"f\"}\n");
    let r = s.stream_load("test", "t", &["format:json", "read_json_by_line:true"], &f);
    assert_eq!(r["NumberLoadedRows"], 2, "{r}");
    let f = s.file("j2.json", b"[{\"k\":7,\"v\":\"g\"},{\"k\":8,\"v\":\"h\"}]");
    let r = s.stream_load("test", "t", &["format:json", "strip_outer_array:true"], &f);
    assert_eq!(r["NumberLoadedRows"], 2, "{r}");
    let f = s.file("j3.json", b"{\"a\":{\"id\":9},\"name\":\"i\"}");
    let r = s.stream_load("test", "t", &["format:json", "jsonpaths:[\"$.a.id\",\"$.name\"]", "columns:k,v"], &f);
    assert_eq!(r["NumberLoadedRows"], 1, "{r}");
    assert_eq!(
        s.sql("SELECT k, v, d FROM test.t ORDER BY k"),
        vec![
            vec!["1", "a", "2024-01-01"],
            vec!["2", "b", "2024-01-02"],
            vec!["3", "c", "2024-01-03"],
            vec!["4", "d", "2024-01-04"],
            vec!["5", "e", "2024-01-05"],
            vec!["6", "f", "NULL"],
            vec!["7", "g", "NULL"],
            vec!["8", "h", "NULL"],
            vec!["9", "i", "NULL"],
        ]
    );
    // Malformed JSON is a data-quality failure with the Doris reason in the error log.
    let f = s.file("bad.json", b"{\"k\":1,\"v\":\"unterminated}\n");
    let r = s.stream_load("test", "t", &["format:json"], &f);
    assert_eq!(r["Message"], "[DATA_QUALITY_ERROR]too many filtered rows");
    let log = curl(&args(&["-sS", r["ErrorURL"].as_str().unwrap()]));
    assert!(log.contains("Reason: Parse json data for JsonDoc failed. code: 14"), "{log}");
}

#[test]
fn columns_expressions_and_where() {
    let s = Server::start();
    setup(
        &s,
        "CREATE TABLE test.t (k INT, v BIGINT, label VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
    );
    let f = s.file("e.csv", b"1,10,x\n2,20,y\n3,30,z\n");
    let r = s.stream_load(
        "test",
        "t",
        &["column_separator:,", "columns:k,tmp,name,v=tmp*2,label=concat('n_',name)", "where:k>1"],
        &f,
    );
    assert_eq!(r["Status"], "Success", "{r}");
    assert_eq!(r["NumberUnselectedRows"], 1);
    assert_eq!(r["NumberLoadedRows"], 2);
    assert_eq!(
        s.sql("SELECT k, v, label FROM test.t ORDER BY k"),
        vec![vec!["2", "40", "n_y"], vec!["3", "60", "n_z"]]
    );
}

#[test]
fn bad_input_gets_doris_errors_and_server_keeps_serving() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let f = s.file("d.csv", b"1,1\n");
    let r = s.stream_load("test", "t", &["column_separator:,", "format:xml"], &f);
    assert_eq!((r["Status"].as_str(), r["TxnId"].as_i64()), (Some("Fail"), Some(-1)));
    assert_eq!(r["Message"], "[INVALID_ARGUMENT]unknown data format, format=xml");
    let r = s.stream_load("test", "t", &["column_separator:,", "strict_mode:maybe"], &f);
    assert_eq!(r["Message"], "[INVALID_ARGUMENT]Invalid strict mode format. Must be bool type");
    let r = s.stream_load("test", "t", &["label:x", "group_commit:async_mode"], &f);
    assert_eq!(r["Message"], "[INVALID_ARGUMENT]label and group_commit can't be set at the same time");
    let r = s.stream_load("test", "t", &["column_separator:,", "group_commit:sync_mode"], &f);
    assert_eq!(r["Status"], "Success");
    assert_eq!(r["GroupCommit"], true);
    assert!(r.get("TwoPhaseCommit").is_none() && r.get("BeginTxnTimeMs").is_none());
    assert!(r["Label"].as_str().unwrap().starts_with("group_commit_"));
    let r = s.stream_load("test", "nope", &["column_separator:,"], &f);
    assert_eq!(r["Status"], "Fail");
    assert_eq!(
        r["Message"],
        "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = Table [nope] does not exist in database [test]."
    );
    let r = s.stream_load("test", "t", &["column_separator:,", "merge_type:DELETE"], &f);
    assert!(r["Message"].as_str().unwrap().contains("only supported in unique tables"), "{r}");
    // Wrong password on the BE; no credentials on the FE.
    let r = curl_json(&args(&[
        "-sS",
        "-u",
        "root:wrong",
        "-T",
        &f.display().to_string(),
        &format!("http://{}/api/test/t/_stream_load", s.be()),
    ]));
    assert_eq!(r["Status"], "Fail");
    assert!(r["Message"].as_str().unwrap().contains("Access denied for user 'root"), "{r}");
    let r = curl_json(&args(&[
        "-sS",
        "-T",
        &f.display().to_string(),
        &format!("http://{}/api/test/t/_stream_load", s.fe()),
    ]));
    assert_eq!(r, json!({"msg": "Unauthorized", "code": 401, "data": "Need auth information.", "count": 0}));
    // A large body of garbage: filtered, not a crash.
    let junk: Vec<u8> = (0..2_000_000u32).map(|i| if i % 97 == 0 { b'\n' } else { b'z' }).collect();
    let r = s.stream_load("test", "t", &["column_separator:,"], &s.file("junk.csv", &junk));
    assert_eq!(r["Message"], "[DATA_QUALITY_ERROR]too many filtered rows");
    // Still serving.
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["1"]]);
    assert_eq!(s.stream_load("test", "t", &["column_separator:,"], &f)["Status"], "Success");
}

#[test]
fn arrow_ipc_stream_body() {
    use std::sync::Arc;

    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    // Columns are matched by name, whatever their order in the stream.
    let schema =
        Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, true), Field::new("k", DataType::Int32, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(vec![Some("a"), None])), Arc::new(Int32Array::from(vec![1, 2]))],
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    drop(w);
    let r = s.stream_load("test", "t", &["format:arrow"], &s.file("d.arrow", &buf));
    assert_eq!(r["NumberLoadedRows"], 2, "{r}");
    assert_eq!(s.sql("SELECT k, v FROM test.t ORDER BY k"), vec![vec!["1", "a"], vec!["2", "NULL"]]);
    let r = s.stream_load("test", "t", &["format:arrow"], &s.file("bad.arrow", b"not arrow"));
    assert_eq!(r["Status"], "Fail");
    assert!(r["Message"].as_str().unwrap().starts_with("[DATA_QUALITY_ERROR]failed to read the arrow stream"), "{r}");
}

#[test]
fn precommit_timeout_and_running_txn_limit() {
    let s = Server::start_with(doris_lite::Config {
        precommit_timeout: std::time::Duration::from_millis(300),
        max_running_txn_per_db: 1,
        ..doris_lite::Config::ephemeral()
    });
    setup(&s, "CREATE TABLE test.t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let f = s.file("d.csv", b"1,1\n");
    let r = s.stream_load("test", "t", &["label:a", "column_separator:,", "two_phase_commit:true"], &f);
    let txn = r["TxnId"].as_i64().unwrap();
    // One pre-committed txn occupies the only slot.
    let r2 = s.stream_load("test", "t", &["label:b", "column_separator:,", "two_phase_commit:true"], &f);
    assert_eq!(r2["Status"], "Fail");
    assert!(
        r2["Message"].as_str().unwrap().contains("current running txns on db ")
            && r2["Message"].as_str().unwrap().contains("larger than limit 1"),
        "{r2}"
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    let commit = curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "-u",
        "root:",
        "-H",
        &format!("txn_id:{txn}"),
        "-H",
        "txn_operation:commit",
        &format!("http://{}/api/test/_stream_load_2pc", s.fe()),
    ]));
    assert_eq!(
        commit["msg"],
        format!(
            "TStatus: errCode = 2, detailMessage = transaction [{txn}] is already aborted. abort reason: timeout by txn manager"
        )
    );
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["0"]]);
    assert_eq!(s.stream_load("test", "t", &["label:b", "column_separator:,"], &f)["Status"], "Success");
}

#[test]
fn oversized_bodies_are_refused() {
    let s = Server::start_with(doris_lite::Config { max_load_bytes: 1 << 20, ..doris_lite::Config::ephemeral() });
    setup(&s, "CREATE TABLE test.t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let big: Vec<u8> = b"1,1\n".iter().copied().cycle().take(2 << 20).collect();
    let f = s.file("big.csv", &big);
    let r = s.stream_load("test", "t", &["column_separator:,"], &f);
    assert_eq!(r["Status"], "Fail");
    assert!(r["Message"].as_str().unwrap().starts_with("[EXCEEDED_LIMIT]"), "{r}");
    let r = s.stream_load("test", "t", &["column_separator:,", "Transfer-Encoding: chunked"], &f);
    assert!(r["Message"].as_str().unwrap().starts_with("[EXCEEDED_LIMIT]"), "{r}");
    assert_eq!(s.stream_load("test", "t", &["column_separator:,"], &s.file("ok.csv", b"1,1\n"))["Status"], "Success");
    assert_eq!(s.sql("SELECT count(*) FROM test.t"), vec![vec!["1"]]);
}

#[test]
fn csv_with_names_enclose_and_trim() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.t (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let f = s.file("h.csv", b"k,v\r\n1,\"a,b\"\r\n2,\\N\r\n");
    let r = s.stream_load("test", "t", &["format:csv_with_names", "column_separator:,", "enclose:\""], &f);
    assert_eq!(r["NumberLoadedRows"], 2, "{r}");
    let f = s.file("q.csv", b"3,\"x\"\n");
    let r = s.stream_load("test", "t", &["column_separator:,", "trim_double_quotes:true"], &f);
    assert_eq!(r["NumberLoadedRows"], 1, "{r}");
    assert_eq!(s.sql("SELECT k, v FROM test.t ORDER BY k"), vec![vec!["1", "a,b"], vec!["2", "NULL"], vec!["3", "x"]]);
}

#[test]
fn concurrent_loads_and_queries() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.u (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    let files: Vec<_> = (0..6)
        .map(|i| {
            let body: String = (0..500).map(|k| format!("{},{}\n", i * 1000 + k, i)).collect();
            s.file(&format!("c{i}.csv"), body.as_bytes())
        })
        .collect();
    std::thread::scope(|scope| {
        for (i, f) in files.iter().enumerate() {
            let s = &s;
            scope.spawn(move || {
                let r = s.stream_load("test", "u", &[&format!("label:c{i}"), "column_separator:,"], f);
                assert_eq!(r["Status"], "Success", "{r}");
                s.sql("SELECT count(*) FROM test.u");
            });
        }
    });
    assert_eq!(s.sql("SELECT count(*), count(DISTINCT v) FROM test.u"), vec![vec!["3000", "6"]]);
}

#[test]
fn large_body_is_parsed_in_parallel_in_order() {
    let s = Server::start();
    setup(&s, "CREATE TABLE test.u (k INT, v VARCHAR(40)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    // > 16 MiB: the parallel path. Keys repeat, so the last occurrence (in file order) must win.
    let mut body = String::from("k,v\n");
    for i in 0..560_000u32 {
        body.push_str(&format!("{},value_{:025}\n", i % 1000, i));
    }
    assert!(body.len() > 16 << 20);
    let f = s.file("big.csv", body.as_bytes());
    let r = s.stream_load("test", "u", &["column_separator:,", "format:csv_with_names"], &f);
    assert_eq!((r["Status"].as_str(), r["NumberLoadedRows"].as_i64()), (Some("Success"), Some(560_000)), "{r}");
    assert_eq!(s.sql("SELECT count(*) FROM test.u"), vec![vec!["1000"]]);
    assert_eq!(s.sql("SELECT v FROM test.u WHERE k = 7"), vec![vec![format!("value_{:025}", 559_007)]]);
}
