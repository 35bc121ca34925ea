//! The Doris client's edges against doris-lite: several FEs in `fenodes` (a dead one is skipped,
//! the one that answered is remembered, an FE that answers with an error is believed), names that
//! need escaping in URLs, and errors typed by what Doris' reply says.

use std::time::Duration;

use sluice::doris::scan::FlightReader;
use sluice::doris::{
    Credentials, DorisError, ERR_INCR_WINDOW_NOT_READY, FeClient, LoadStatus, TxnId, TxnOutcome, TxnState,
};

use crate::common::Doris;

/// A loopback port nothing listens on: bound, then released.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("bound").to_string();
    drop(listener);
    addr
}

fn client(fenodes: Vec<String>) -> FeClient {
    FeClient::new(fenodes, Credentials::new("root", ""), Duration::from_secs(2), Duration::from_secs(30)).unwrap()
}

fn headers(label: &str) -> Vec<(String, String)> {
    vec![
        ("label".into(), label.into()),
        ("column_separator".into(), ",".into()),
        ("two_phase_commit".into(), "true".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_fe_is_skipped_for_loads_commits_and_queries() {
    let doris = Doris::start().await;
    let live = doris.h().fe_http_addr().to_string();
    let dead = closed_port();
    let client = client(vec![dead.clone(), live.clone()]);
    assert_eq!(client.fe_node(), dead, "before any answer the first FE is tried first");

    let info = client.table_info("test", "t").await.unwrap();
    assert_eq!(info.columns, ["id", "name"]);
    assert_eq!(client.fe_node(), live, "the FE that answered is remembered");

    // A clone (one per worker) shares what the client learnt; its own failover works too.
    let worker = client.clone();
    let reply = worker.load("test", "t", &headers("failover_1"), "1,a\n2,b\n".into(), None).await.unwrap();
    assert_eq!(reply.load_status(), LoadStatus::Success);
    assert_eq!(doris.sql("SELECT count(*) FROM test.t"), ["0"], "pre-committed rows are not visible");
    assert_eq!(client.commit("test", reply.txn_id).await.unwrap(), TxnOutcome::Done);
    let (_, rows) = client.query("test", "SELECT id, name FROM t ORDER BY id").await.unwrap();
    assert_eq!(rows, [["1", "a"], ["2", "b"]]);

    let aborted = worker.load("test", "t", &headers("failover_2"), "3,c\n".into(), None).await.unwrap();
    assert_eq!(worker.abort_label("test", "failover_2").await.unwrap(), TxnOutcome::Done);
    assert_eq!(worker.abort("test", aborted.txn_id).await.unwrap(), TxnOutcome::AlreadyDone);

    assert!(!client.tso_time().await.unwrap().is_empty());
    let tablets = client.query_plan("test", "t", "SELECT * FROM `test`.`t`").await.unwrap();
    assert_eq!(tablets.len(), 2, "{tablets:?}");
    assert_eq!(client.fe_hosts(), ["127.0.0.1", "127.0.0.1"]);

    // A client that has not learnt it yet starts at the dead FE again and fails over per request.
    let fresh = self::client(vec![dead, live.clone()]);
    let again = fresh.load("test", "t", &headers("failover_3"), "4,d\n".into(), None).await.unwrap();
    assert_eq!(fresh.fe_node(), live);
    assert_eq!(fresh.commit("test", again.txn_id).await.unwrap(), TxnOutcome::Done);
    assert_eq!(doris.sql("SELECT id FROM test.t ORDER BY id"), ["1", "2", "4"]);
    doris.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_no_fe_answers_the_error_names_each_and_what_it_said() {
    let (a, b) = (closed_port(), closed_port());
    let err = client(vec![a.clone(), b.clone()]).commit("test", TxnId(42)).await.unwrap_err();
    assert!(matches!(err, DorisError::Connect { .. }), "{err:?}");
    let text = err.to_string();
    for fe in [&a, &b] {
        assert!(text.contains(&format!("http://{fe}/api/test/_stream_load_2pc: ")), "{text}");
    }
    assert!(text.starts_with(&format!("Doris at {a}, {b}: none of the 2 FEs answered (http://")), "{text}");
    assert!(text.to_lowercase().contains("connection refused"), "{text}");
    assert!(text.ends_with("check `fenodes` / `benodes` and that Doris is up"), "{text}");

    let flight =
        FlightReader::connect_any(&[a.clone(), b.clone()], &Credentials::new("root", ""), Duration::from_secs(2), None)
            .await
            .err()
            .expect("nothing listens");
    let text = flight.to_string();
    assert!(text.starts_with(&format!("Doris at {a}, {b}: none of the 2 FEs answered (http://{a}: ")), "{text}");
    assert!(text.contains(&format!("; http://{b}: ")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fe_that_answers_with_an_error_is_not_failed_over() {
    let first = Doris::start().await;
    let second = Doris::start().await;
    second.sql("CREATE TABLE test.only_second (id INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1");
    let client = client(vec![first.h().fe_http_addr().to_string(), second.h().fe_http_addr().to_string()]);
    let err = client.table_info("test", "only_second").await.unwrap_err();
    assert!(matches!(err, DorisError::Table { .. }), "the first FE's answer stands: {err}");
    assert_eq!(client.fe_node(), first.h().fe_http_addr().to_string());

    let wrong = FeClient::new(
        vec![first.h().fe_http_addr().to_string(), second.h().fe_http_addr().to_string()],
        Credentials::new("root", "wrong"),
        Duration::from_secs(2),
        Duration::from_secs(30),
    )
    .unwrap();
    let err = wrong.load("test", "t", &headers("denied"), "1,a\n".into(), None).await.unwrap_err();
    assert!(matches!(err, DorisError::Unauthorized { .. }), "{err}");
    assert!(err.to_string().contains(&first.h().fe_http_addr().to_string()), "{err}");
    first.handle.unwrap().stop().await;
    second.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_named_with_url_characters_is_loaded_committed_and_described() {
    let doris = Doris::start().await;
    let name = "we ird/ta?ble#1";
    doris.sql(&format!(
        "CREATE TABLE test.`{name}` (id INT, name VARCHAR(32)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
    ));
    let client = doris.client("");
    assert_eq!(client.table_info("test", name).await.unwrap().columns, ["id", "name"]);
    let reply = client.load("test", name, &headers("weird_1"), "1,a\n".into(), None).await.unwrap();
    assert_eq!(reply.load_status(), LoadStatus::Success, "{reply:?}");
    assert_eq!(client.commit("test", reply.txn_id).await.unwrap(), TxnOutcome::Done);
    assert_eq!(doris.sql(&format!("SELECT id, name FROM test.`{name}`")), ["1\ta"]);
    assert_eq!(doris.sql("SELECT count(*) FROM test.t"), ["0"], "nothing went to another table");
    doris.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_an_aborted_transaction_says_so_in_its_type() {
    let doris = Doris::start().await;
    let client = doris.client("");
    let reply = client.load("test", "t", &headers("typed_1"), "1,a\n".into(), None).await.unwrap();
    assert_eq!(client.abort("test", reply.txn_id).await.unwrap(), TxnOutcome::Done);
    let err = client.commit("test", reply.txn_id).await.unwrap_err();
    assert!(err.is_txn_gone(), "{err:?}");
    assert_eq!(err.txn_state(), Some(TxnState::Aborted));
    assert!(matches!(&err, DorisError::Txn { status, .. } if status == "ANALYSIS_ERROR"), "{err:?}");
    let err = client.commit("test", TxnId(987_654)).await.unwrap_err();
    assert_eq!(err.txn_state(), Some(TxnState::NotFound), "{err:?}");
    assert!(err.is_txn_gone());
    doris.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changelog_window_past_the_fes_clock_is_typed_by_dorises_code() {
    let doris = Doris::start().await;
    doris.sql(
        "CREATE TABLE test.changes (id INT, name VARCHAR(32)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 \
         PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\")",
    );
    let addr = doris.h().flight_sql_addr().to_string();
    let mut reader =
        FlightReader::connect_any(&[closed_port(), addr], &Credentials::new("root", ""), Duration::from_secs(2), None)
            .await
            .unwrap();
    let err = reader
        .execute(
            "SELECT id FROM `test`.`changes`@incr('startTimestamp' = '2000-01-01 00:00:00', \
             'endTimestamp' = '2999-01-01 00:00:00', 'incrementType' = 'DETAIL')",
        )
        .await
        .expect_err("the window ends in the future");
    assert_eq!(err.doris_code(), Some(ERR_INCR_WINDOW_NOT_READY), "{err:?}");
    assert!(err.is_window_not_ready(), "{err}");
    assert!(matches!(&err, DorisError::Flight { status: tonic::Code::Unavailable, .. }), "{err:?}");

    let err = reader.execute("SELECT * FROM `test`.`no_such_table`").await.expect_err("no such table");
    assert!(matches!(&err, DorisError::Flight { code: None, .. }), "{err:?}");
    assert!(!err.is_window_not_ready());
    doris.handle.unwrap().stop().await;
}
