//! The Doris source against doris-lite: `_query_plan` tablets, splits read over Arrow Flight SQL,
//! projection and filter pushdown, parallel workers.

use crate::common::{Doris, pipeline_file, plugin_wasm};

fn pipeline(doris: &Doris, parallelism: u32, target: &str, source_extra: &str) -> String {
    format!(
        r#"
[pipeline]
name = "scan-{target}"
parallelism = {parallelism}
checkpoint_interval = "200ms"

[doris]
fenodes = {fenodes}

[[source]]
type = "doris"
table = "test.student"
{source_extra}

[[transform]]
type = "wasm"
plugin = "{plugin}"

[[sink]]
type = "doris"
table = "test.{target}"
"#,
        fenodes = doris.fenodes(),
        plugin = plugin_wasm("student-trans").display(),
    )
}

/// `test.student` as a changelog-enabled UNIQUE table.
fn changelog_table(doris: &Doris, buckets: u32) {
    doris.sql(&format!(
        "CREATE TABLE test.student (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS {buckets} \
         PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\", \"changelog.need_historical_value\" = \"true\")"
    ));
}

type Running = (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<anyhow::Result<sluice::runtime::RunReport>>);

/// Start the pipeline at `path` in the background; send `true` on the sender to stop it.
async fn launch(path: &std::path::Path) -> anyhow::Result<Running> {
    let p = sluice::pipeline::load_file(path)?;
    let fenodes = p.doris.as_ref().expect("a [doris] section").fenodes.addresses();
    let prepared = sluice::runtime::prepare(path, p, fenodes).await?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        sluice::runtime::run(&prepared, &sluice::runtime::RunOptions { quiet: true, status_interval: None }, rx).await
    });
    Ok((stop, task))
}

/// Run the pipeline at `path` until its sources are exhausted.
async fn run(path: &std::path::Path) -> sluice::runtime::RunReport {
    let (_stop, task) = launch(path).await.unwrap_or_else(|e| panic!("{e:#}"));
    task.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_reads_every_tablet_once_at_any_parallelism_with_pushdown() {
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.student (id INT, name VARCHAR(32), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8");
    let values: Vec<String> = (1..=1000).map(|i| format!("({i}, 'n{i}', {})", i % 60)).collect();
    doris.sql(&format!("INSERT INTO test.student VALUES {}", values.join(",")));
    let dir = tempfile::tempdir().unwrap();
    for (parallelism, extra) in [(1, "request.tablet.size = 3"), (4, "")] {
        let target = format!("student_trans_{parallelism}");
        doris.sql(&format!(
            "CREATE TABLE test.{target} (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2"
        ));
        let path = pipeline_file(&dir.path().join(&target), &pipeline(&doris, parallelism, &target, extra));
        let report = run(&path).await;
        assert!(report.finished, "{report:?}");
        assert_eq!(
            doris.sql(&format!("SELECT count(*), count(distinct id), min(id), max(id) FROM test.{target}")),
            ["1000\t1000\t1\t1000"],
            "parallelism {parallelism}"
        );
        assert_eq!(doris.sql(&format!("SELECT name, age FROM test.{target} WHERE id = 7")), ["prefix_n7\t8"]);
    }
    // Projection and filter are pushed into the scan.
    doris.sql("CREATE TABLE test.adults (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let path = pipeline_file(
        &dir.path().join("adults"),
        &pipeline(&doris, 2, "adults", "read.field = \"id, name, age\"\nfilter.query = \"age >= 50\""),
    );
    run(&path).await;
    let expected = doris.sql("SELECT count(*) FROM test.student WHERE age >= 50");
    assert_eq!(doris.sql("SELECT count(*) FROM test.adults"), expected);
    assert_eq!(doris.sql("SELECT min(age) FROM test.adults"), ["51"]);
}

#[test]
fn the_quick_start_runs_on_embedded_doris_and_shows_the_seeds_result() {
    let dir = tempfile::tempdir().unwrap();
    let repo = crate::common::repo_root();
    let toml = std::fs::read_to_string(repo.join("pipelines/quickstart.toml")).unwrap();
    let toml = toml.replace("../plugins/student-trans", &plugin_wasm("student-trans").display().to_string());
    std::fs::write(dir.path().join("quickstart.toml"), toml).unwrap();
    std::fs::copy(repo.join("pipelines/quickstart.sql"), dir.path().join("quickstart.sql")).unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet"])
            .arg(dir.path().join("quickstart.toml"))
            .output()
            .unwrap()
    };
    for attempt in ["first run", "second run (nothing left to do)"] {
        let out = run();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{attempt}: {}", String::from_utf8_lossy(&out.stderr));
        let expected = "\
mysql> select * from test.student_trans;
+----+--------------+-----+
| id | name         | age |
+----+--------------+-----+
|  1 | prefix_James |  19 |
|  2 | prefix_Emily |  29 |
+----+--------------+-----+
2 rows in set
";
        assert_eq!(stdout, expected, "{attempt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_changelog_pipeline_converges_on_inserts_updates_and_deletes() {
    let doris = Doris::start().await;
    changelog_table(&doris, 4);
    doris.sql(
        "CREATE TABLE test.mirror (id INT, name VARCHAR(40), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    doris.sql("INSERT INTO test.student VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)");
    let dir = tempfile::tempdir().unwrap();
    let extra = "scan.mode = \"initial\"\nchangelog.poll_interval = \"1s\"";
    let text = pipeline(&doris, 2, "mirror", extra)
        .replace("checkpoint_interval = \"200ms\"", "checkpoint_interval = \"500ms\"");
    let path = pipeline_file(dir.path(), &text);
    let (stop, running) = launch(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    doris.sql("INSERT INTO test.student VALUES (4, 'd', 40), (5, 'e', 50)");
    doris.sql("INSERT INTO test.student VALUES (2, 'b2', 21)");
    doris.sql("DELETE FROM test.student WHERE id = 3");
    // Converges within a few poll intervals.
    let expected = doris.sql("SELECT id, concat('prefix_', name), age + 1 FROM test.student ORDER BY id");
    assert_eq!(expected.len(), 4);
    let mut got = Vec::new();
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        got = doris.sql("SELECT id, name, age FROM test.mirror ORDER BY id");
        if got == expected {
            break;
        }
    }
    assert_eq!(got, expected);
    stop.send(true).unwrap();
    let report = running.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!report.finished);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_stream_dropped_mid_split_is_read_again_without_duplicates() {
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.student (id INT, name VARCHAR(32), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 8");
    let values: Vec<String> = (1..=3000).map(|i| format!("({i}, 'n{i}', {})", i % 60)).collect();
    doris.sql(&format!("INSERT INTO test.student VALUES {}", values.join(",")));
    doris.sql("CREATE TABLE test.copy (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let drop = doris_lite::DebugPoint::times(3).param("after_batches", 1);
    doris.h().debug_points().add(doris_lite::faults::FLIGHT_DROP_STREAM, drop).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = pipeline_file(dir.path(), &pipeline(&doris, 2, "copy", "request.tablet.size = 4"));
    assert!(run(&path).await.finished);
    assert_eq!(doris.sql("SELECT count(*), count(distinct id) FROM test.copy"), ["3000\t3000"]);
}

/// Changelog pipelines that start where `scan.mode` says, into a DUPLICATE table that shows every
/// change event it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_and_from_timestamp_start_where_asked_and_append_only_keeps_inserts() {
    let doris = Doris::start().await;
    changelog_table(&doris, 2);
    doris.sql("INSERT INTO test.student VALUES (1, 'old', 10)");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let since = doris.client("").tso_time().await.unwrap();
    doris.sql("INSERT INTO test.student VALUES (2, 'new', 20)");
    // Window bounds are whole seconds: `latest` must start in a later second than row 2.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("latest", "scan.mode = \"latest\"".to_string()),
        ("from_ts", format!("scan.mode = \"from-timestamp\"\nscan.timestamp = \"{since}\"")),
        (
            "append",
            format!(
                "scan.mode = \"from-timestamp\"\nscan.timestamp = \"{since}\"\nchangelog.increment_type = \"append_only\""
            ),
        ),
    ];
    let mut running = Vec::new();
    for (target, extra) in &cases {
        doris.sql(&format!(
            "CREATE TABLE test.{target} (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
        ));
        let text = pipeline(&doris, 1, target, &format!("{extra}\nchangelog.poll_interval = \"1s\""));
        let path = pipeline_file(&dir.path().join(target), &text);
        let (stop, task) = launch(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
        running.push((stop, task));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    doris.sql("INSERT INTO test.student VALUES (3, 'later', 30)");
    doris.sql("INSERT INTO test.student VALUES (2, 'changed', 21)");
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    for (stop, task) in running {
        stop.send(true).unwrap();
        task.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    }
    let rows = |t: &str| doris.sql(&format!("SELECT id, name FROM test.{t} ORDER BY id, name"));
    // latest: only what happened after the start; the update arrives as its after-image (the
    // before-image is dropped by `ignore.update_before`).
    assert_eq!(rows("latest"), ["2\tprefix_changed", "3\tprefix_later"]);
    // from-timestamp: the insert of 2 at `since` is included, row 1 before it is not.
    assert_eq!(rows("from_ts"), ["2\tprefix_changed", "2\tprefix_new", "3\tprefix_later"]);
    // append_only: inserts only; the update of 2 is not an insert.
    assert_eq!(rows("append"), ["2\tprefix_new", "3\tprefix_later"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_table_records_progress_and_a_new_consumer_run_resumes_from_it() {
    let doris = Doris::start().await;
    changelog_table(&doris, 2);
    doris.sql("CREATE DATABASE ops");
    doris.sql(
        "CREATE TABLE ops.offsets (consumer_id VARCHAR(256) NOT NULL, offset_timestamp DATETIME NOT NULL, update_time DATETIME(3) NOT NULL) \
         UNIQUE KEY(consumer_id) DISTRIBUTED BY HASH(consumer_id) BUCKETS 1",
    );
    doris.sql("INSERT INTO test.student VALUES (1, 'snap', 10)");
    let jdbc = format!("jdbc:mysql://127.0.0.1:{}", doris.h().query_addr().port());
    let extra = "scan.mode = \"initial\"\nchangelog.poll_interval = \"1s\"\nchangelog.offset_table = \"ops.offsets\"\nchangelog.consumer_id = \"c1\"";
    let dir = tempfile::tempdir().unwrap();
    let start = |target: &'static str, sub: &str| {
        doris.sql(&format!(
            "CREATE TABLE IF NOT EXISTS test.{target} (id INT, name VARCHAR(40), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
        ));
        let text = pipeline(&doris, 1, target, extra)
            .replace("[doris]\n", &format!("[doris]\njdbc_url = \"{jdbc}\"\n"))
            .replace("checkpoint_interval = \"200ms\"", "checkpoint_interval = \"500ms\"");
        pipeline_file(&dir.path().join(sub), &text)
    };
    let (stop, task) = launch(&start("first", "a")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    doris.sql("INSERT INTO test.student VALUES (2, 'seen by first', 20)");
    tokio::time::sleep(std::time::Duration::from_millis(3000)).await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(doris.sql("SELECT id FROM test.first ORDER BY id"), ["1", "2"]);
    // The offset is written after the checkpoint, asynchronously: wait for the last one.
    let cp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("a/.sluice/scan-first/checkpoint.json")).unwrap(),
    )
    .unwrap();
    let last = cp["sources"][0]["start"].as_str().unwrap().to_string();
    let mut recorded = Vec::new();
    for _ in 0..50 {
        recorded = doris.sql("SELECT consumer_id, offset_timestamp FROM ops.offsets");
        if recorded == [format!("c1\t{last}")] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(recorded, [format!("c1\t{last}")]);

    // A new run (new state dir) of consumer c1 skips the snapshot and starts at the recorded offset.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    doris.sql("INSERT INTO test.student VALUES (3, 'after the offset', 30)");
    let (stop, task) = launch(&start("second", "b")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3000)).await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(doris.sql("SELECT id FROM test.second ORDER BY id"), ["3"]);

    // Two rows for one consumer, or no offset table at all: the start fails, no fallback.
    doris.sql("CREATE TABLE ops.dup (consumer_id VARCHAR(256), offset_timestamp DATETIME, update_time DATETIME(3)) DUPLICATE KEY(consumer_id) DISTRIBUTED BY HASH(consumer_id) BUCKETS 1");
    doris.sql("INSERT INTO ops.dup VALUES ('c1', '2026-01-01 00:00:00', '2026-01-01 00:00:00'), ('c1', '2026-01-02 00:00:00', '2026-01-02 00:00:00')");
    for (table, expected) in
        [("ops.dup", "2 rows for consumer `c1`"), ("ops.missing", "cannot read the offset of consumer `c1`")]
    {
        let path = start("third", &format!("c-{table}"));
        std::fs::write(&path, std::fs::read_to_string(&path).unwrap().replace("ops.offsets", table)).unwrap();
        let err = match launch(&path).await {
            Err(e) => format!("{e:#}"),
            Ok((_, task)) => format!("{:#}", task.await.unwrap().unwrap_err()),
        };
        assert!(err.contains(expected), "{table}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_behind_an_open_transaction_is_retried_then_given_up_after_the_visible_wait() {
    let doris = Doris::start().await;
    changelog_table(&doris, 2);
    let dir = tempfile::tempdir().unwrap();
    for (target, wait, hold, gives_up) in [("patient", "20s", 2500, false), ("impatient", "1s", 20_000, true)] {
        doris.sql(&format!(
            "CREATE TABLE test.{target} (id INT, name VARCHAR(40), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
        ));
        let extra = format!(
            "scan.mode = \"latest\"\nchangelog.poll_interval = \"1s\"\nchangelog.visible_wait_timeout = \"{wait}\""
        );
        let path = pipeline_file(&dir.path().join(target), &pipeline(&doris, 1, target, &extra));
        let (stop, task) = launch(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
        let held = doris_lite::DebugPoint::times(1).param("table", "test.student").param("ms", hold);
        doris.h().debug_points().add(doris_lite::faults::TXN_HOLD_IN_FLIGHT, held).unwrap();
        doris.sql(&format!("INSERT INTO test.student VALUES (1, '{target}', 1)"));
        if gives_up {
            let err = format!(
                "{:#}",
                tokio::time::timeout(std::time::Duration::from_secs(30), task).await.unwrap().unwrap().unwrap_err()
            );
            assert!(err.contains("timeout waiting previous transactions finish"), "{err}");
            assert!(err.contains("reading the changelog of `test.student` window ["), "{err}");
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(hold + 3000)).await;
            stop.send(true).unwrap();
            task.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
            assert_eq!(doris.sql(&format!("SELECT name FROM test.{target}")), [format!("prefix_{target}")]);
        }
    }
}
