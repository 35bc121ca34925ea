//! The Stream Load client against doris-lite: FE redirect, 2PC, labels, errors.

use std::time::Duration;

use sluice::doris::{Credentials, DorisError, FeClient, LoadStatus, TxnOutcome};

use crate::common::Doris;

fn headers(label: &str, two_phase: bool) -> Vec<(String, String)> {
    vec![
        ("label".into(), label.into()),
        ("column_separator".into(), ",".into()),
        ("two_phase_commit".into(), two_phase.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phase_load_is_invisible_until_committed_and_commit_is_idempotent() {
    let doris = Doris::start().await;
    let client = doris.client("");
    let reply = client.load("test", "t", &headers("l1", true), "1,a\n2,b\n".into(), None).await.unwrap();
    assert_eq!(reply.load_status(), LoadStatus::Success);
    assert_eq!(reply.two_phase_commit.as_deref(), Some("true"));
    assert_eq!(reply.number_loaded_rows, 2);
    assert_eq!(doris.sql("SELECT count(*) FROM test.t"), ["0"], "pre-committed rows are not visible");

    assert_eq!(client.commit("test", reply.txn_id).await.unwrap(), TxnOutcome::Done);
    assert_eq!(doris.sql("SELECT id, name FROM test.t ORDER BY id"), ["1\ta", "2\tb"]);
    // A commit repeated after a crash is answered "already visible" and counts as done.
    assert_eq!(client.commit("test", reply.txn_id).await.unwrap(), TxnOutcome::AlreadyDone);

    // The label is spent: reusing it says FINISHED and names the transaction.
    let again = client.load("test", "t", &headers("l1", true), "3,c\n".into(), None).await.unwrap();
    assert_eq!(again.load_status(), LoadStatus::LabelAlreadyExists { existing: "FINISHED".into() });
    assert_eq!(again.existing_txn_id(), Some(reply.txn_id));
    assert_eq!(doris.sql("SELECT count(*) FROM test.t"), ["2"]);
    doris.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_transactions_stay_invisible_and_a_late_commit_says_why() {
    let doris = Doris::start().await;
    let client = doris.client("");
    let reply = client.load("test", "t", &headers("l2", true), "1,a\n".into(), None).await.unwrap();
    assert_eq!(client.abort("test", reply.txn_id).await.unwrap(), TxnOutcome::Done);
    assert_eq!(client.abort("test", reply.txn_id).await.unwrap(), TxnOutcome::AlreadyDone);
    let err = client.commit("test", reply.txn_id).await.unwrap_err();
    assert!(matches!(err, DorisError::Txn { operation: "commit", .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("transaction {} in database `test`: commit failed", reply.txn_id)), "{text}");
    assert!(text.contains("pre-commit timeout"), "{text}");
    assert_eq!(doris.sql("SELECT count(*) FROM test.t"), ["0"]);
    // An aborted label may be used again.
    let reuse = client.load("test", "t", &headers("l2", false), "5,e\n".into(), None).await.unwrap();
    assert!(reuse.is_success(), "{reuse:?}");
    assert_eq!(doris.sql("SELECT id FROM test.t"), ["5"]);
    doris.handle.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_carry_dorises_words_and_never_the_password() {
    let doris = Doris::start().await;
    let err =
        doris.client("s3cret-pw").load("test", "t", &headers("l3", false), "1,a\n".into(), None).await.unwrap_err();
    assert!(matches!(err, DorisError::Unauthorized { .. }), "{err}");
    assert!(!err.to_string().contains("s3cret-pw") && !format!("{err:?}").contains("s3cret-pw"), "{err:?}");

    let bad = doris.client("").load("test", "t", &headers("l4", false), "1,a,extra\nx,y\n".into(), None).await.unwrap();
    assert_eq!(bad.load_status(), LoadStatus::Fail);
    assert!(bad.message.contains("too many filtered rows"), "{}", bad.message);
    let log = doris.client("").error_log(bad.error_url.as_deref().expect("an ErrorURL"), 5).await;
    assert!(log.contains("Reason:"), "{log}");

    let unreachable = FeClient::new(
        vec!["127.0.0.1:1".into()],
        Credentials::new("root", ""),
        Duration::from_secs(2),
        Duration::from_secs(2),
    )
    .unwrap();
    let err = unreachable.load("test", "t", &headers("l5", false), "1,a\n".into(), None).await.unwrap_err();
    assert!(err.to_string().starts_with("Doris at http://127.0.0.1:1/api/test/t/_stream_load: "), "{err}");
    doris.handle.unwrap().stop().await;
}
