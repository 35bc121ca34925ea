//! The Doris source against doris-lite: `_query_plan` tablets, splits read over Arrow Flight SQL,
//! projection and filter pushdown, parallel workers.

use crate::common::Background;
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
    let prepared = sluice::pipeline::prepare(path, sluice::pipeline::load_file(path)?).await?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        sluice::runtime::run(
            &prepared,
            &sluice::runtime::RunOptions { quiet: true, status_interval: None, ..Default::default() },
            rx,
        )
        .await
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
    // doris-lite's audit log: every tablet read of that pipeline carried the projection and the
    // filter, and only the matching rows crossed the wire.
    let reads: Vec<_> = doris
        .h()
        .engine()
        .audit_log()
        .into_iter()
        .filter(|e| e.protocol == "arrow_flight_sql" && e.stmt.contains("TABLET(") && e.stmt.contains("age >= 50"))
        .collect();
    assert!(!reads.is_empty(), "no filtered tablet read in the audit log");
    for read in &reads {
        assert!(read.stmt.contains("SELECT `id`, `name`, `age` FROM `test`.`student` TABLET("), "{}", read.stmt);
        assert_eq!(read.state, "EOF", "{}", read.stmt);
    }
    let sent: u64 = reads.iter().map(|e| e.return_rows).sum();
    assert_eq!(sent.to_string(), expected[0], "rows sent by the filtered reads");
}

/// What the quick start prints: the seed's result table.
pub const QUICK_START_RESULT: &str = "\
mysql> select * from test.student_trans;
+----+--------------+-----+
| id | name         | age |
+----+--------------+-----+
|  1 | prefix_James |  19 |
|  2 | prefix_Emily |  29 |
+----+--------------+-----+
2 rows in set
";

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
        assert_eq!(stdout, QUICK_START_RESULT, "{attempt}");
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
    started(&dir.path().join(".sluice/scan-mirror")).await;
    doris.sql("INSERT INTO test.student VALUES (4, 'd', 40), (5, 'e', 50)");
    doris.sql("INSERT INTO test.student VALUES (2, 'b2', 21)");
    doris.sql("DELETE FROM test.student WHERE id = 3");
    // Converges.
    let expected = doris.sql("SELECT id, concat('prefix_', name), age + 1 FROM test.student ORDER BY id");
    assert_eq!(expected.len(), 4);
    let mirror = || doris.sql("SELECT id, name, age FROM test.mirror ORDER BY id");
    eventually("the mirror equal to the source", || mirror() == expected).await;
    stop.send(true).unwrap();
    let report = running.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!report.finished);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// `sluice verify` of a changelog mirror of one Doris table in another: equal once it converged,
/// and a row changed in the mirror behind the pipeline's back is named with both values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changelog_mirror_is_verified_against_its_source_table() {
    let doris = Doris::start().await;
    changelog_table(&doris, 2);
    doris.sql(
        "CREATE TABLE test.copy (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    doris.sql("INSERT INTO test.student VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"copy\"\ncheckpoint_interval = \"300ms\"\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"doris\"\ntable = \"test.student\"\nprimary_key = \"id\"\nscan.mode = \"initial\"\n\
         changelog.poll_interval = \"1s\"\n\n[[sink]]\ntype = \"doris\"\ntable = \"test.copy\"\n",
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let (stop, running) = launch(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
    started(&dir.path().join(".sluice/copy")).await;
    doris.sql("INSERT INTO test.student VALUES (4, 'd', 40), (2, 'b2', 21)");
    doris.sql("DELETE FROM test.student WHERE id = 3");
    let source = || doris.sql("SELECT * FROM test.student ORDER BY id");
    eventually("the copy equal to the source", || doris.sql("SELECT * FROM test.copy ORDER BY id") == source()).await;
    let (ok, out) = crate::common::verify(&path, &[]).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("test.student → test.copy: 3 rows compared, 3 equal, 0 differing, 0 missing, 0 extra"),
        "{out}"
    );
    stop.send(true).unwrap();
    running.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    doris.sql("UPDATE test.copy SET age = 99 WHERE id = 4");
    let (ok, out) = crate::common::verify(&path, &["--recheck-after", "0s"]).await;
    assert!(!ok, "{out}");
    assert!(out.lines().any(|l| l == "  differing id=4: age: source \"40\", doris \"99\""), "{out}");
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
        started(&dir.path().join(target).join(format!(".sluice/scan-{target}"))).await;
        running.push((stop, task));
    }
    doris.sql("INSERT INTO test.student VALUES (3, 'later', 30)");
    doris.sql("INSERT INTO test.student VALUES (2, 'changed', 21)");
    // A last insert after the update: a pipeline that delivered it has read past the update too.
    doris.sql("INSERT INTO test.student VALUES (4, 'last', 40)");
    let rows = |t: &str| doris.sql(&format!("SELECT id, name FROM test.{t} ORDER BY id, name"));
    // Every pipeline has seen row 4, the last change; then they stop, and nothing more arrives.
    eventually("row 4 in every target", || cases.iter().all(|(t, _)| rows(t).iter().any(|r| r == "4\tprefix_last")))
        .await;
    for (stop, task) in running {
        stop.send(true).unwrap();
        task.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    }
    // latest: only what happened after the start; the update arrives as its after-image (the
    // before-image is dropped by `ignore.update_before`).
    assert_eq!(rows("latest"), ["2\tprefix_changed", "3\tprefix_later", "4\tprefix_last"]);
    // from-timestamp: the insert of 2 at `since` is included, row 1 before it is not.
    assert_eq!(rows("from_ts"), ["2\tprefix_changed", "2\tprefix_new", "3\tprefix_later", "4\tprefix_last"]);
    // append_only: inserts only; the update of 2 is not an insert.
    assert_eq!(rows("append"), ["2\tprefix_new", "3\tprefix_later", "4\tprefix_last"]);
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
    started(&dir.path().join("a/.sluice/scan-first")).await;
    doris.sql("INSERT INTO test.student VALUES (2, 'seen by first', 20)");
    eventually("row 2 in test.first", || doris.sql("SELECT id FROM test.first ORDER BY id") == ["1", "2"]).await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(doris.sql("SELECT id FROM test.first ORDER BY id"), ["1", "2"]);
    // The offset is written after the checkpoint, asynchronously: wait for the last one.
    let cp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("a/.sluice/scan-first/checkpoint.json")).unwrap(),
    )
    .unwrap();
    let last = cp["sources"]["doris"][0]["start"].as_str().unwrap().to_string();
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
    // Row 3 comes after the offset; a snapshot (rows 1 and 2) would have come before it.
    eventually("row 3 in test.second", || doris.sql("SELECT id FROM test.second").contains(&"3".to_string())).await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(doris.sql("SELECT id FROM test.second ORDER BY id"), ["3"]);

    // Two rows for one consumer, no offset table at all, or a bad offset: the start fails, no fallback.
    doris.sql("CREATE TABLE ops.dup (consumer_id VARCHAR(256), offset_timestamp DATETIME, update_time DATETIME(3)) DUPLICATE KEY(consumer_id) DISTRIBUTED BY HASH(consumer_id) BUCKETS 1");
    doris.sql("INSERT INTO ops.dup VALUES ('c1', '2026-01-01 00:00:00', '2026-01-01 00:00:00'), ('c1', '2026-01-02 00:00:00', '2026-01-02 00:00:00')");
    doris.sql("CREATE TABLE ops.bad (consumer_id VARCHAR(256), offset_timestamp VARCHAR(32), update_time DATETIME(3)) UNIQUE KEY(consumer_id) DISTRIBUTED BY HASH(consumer_id) BUCKETS 1");
    doris.sql("INSERT INTO ops.bad VALUES ('c1', 'yesterday', '2026-01-01 00:00:00')");
    for (table, expected) in [
        ("ops.dup", "2 rows for consumer `c1`"),
        ("ops.missing", "cannot read the offset of consumer `c1`"),
        ("ops.bad", "consumer `c1` has an invalid offset \"yesterday\""),
    ] {
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
        started(&dir.path().join(target).join(format!(".sluice/scan-{target}"))).await;
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
            let name = format!("SELECT name FROM test.{target}");
            eventually("the held row in the target", || doris.sql(&name) == [format!("prefix_{target}")]).await;
            stop.send(true).unwrap();
            task.await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
            assert_eq!(doris.sql(&name), [format!("prefix_{target}")]);
        }
    }
}

/// The changes a changelog source returns in its first window, as `id kind name`.
async fn first_window(doris: &Doris, dir: &std::path::Path, extra: &str) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    use arrow::array::{Int32Array, StringArray};
    let path = dir.join("pipeline.toml");
    let file = sluice::pipeline::load_str(&path, &pipeline(doris, 1, "unused", extra))?;
    let prepared = sluice::pipeline::prepare(&path, file).await?;
    let mut splits = prepared.source.component.enumerator(&[None]).await?;
    let mut src = splits.reader(0, None).await?;
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(std::time::Duration::from_secs(20), src.next());
        let event = next.await.context("no window within 20 s")??.context("the changelog ended")?;
        let sluice::runtime::Event::Data { batch, .. } = event else { anyhow::bail!("a schema change: {event:?}") };
        if batch.num_rows() == 0 {
            return Ok(out);
        }
        let ids = batch.typed::<Int32Array>("id").unwrap();
        let names = batch.typed::<StringArray>("name").unwrap();
        for row in 0..batch.num_rows() {
            out.push(format!("{} {:?} {}", ids.value(row), batch.row_kind(row), names.value(row)));
        }
    }
}

/// The seed's worked example on a manual clock: rows 1, 2, 3 at 10:00; at 10:05 1 is updated, 2
/// deleted, 4 inserted, 5 inserted and deleted; read from 10:03 in each increment type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_increment_type_reads_the_worked_example() {
    let doris = Doris::start_with(doris_lite::Config { manual_clock: true, ..doris_lite::Config::ephemeral() }).await;
    changelog_table(&doris, 2);
    doris.sql("INSERT INTO test.student VALUES (1, 'created', 1), (2, 'created', 2), (3, 'created', 3)");
    doris.h().advance_clock(180.0).unwrap();
    let since = doris.client("").tso_time().await.unwrap();
    doris.h().advance_clock(120.0).unwrap();
    doris.sql("INSERT INTO test.student VALUES (1, 'paid', 1)");
    doris.sql("DELETE FROM test.student WHERE id = 2");
    doris.sql("INSERT INTO test.student VALUES (4, 'created', 4)");
    doris.sql("INSERT INTO test.student VALUES (5, 'created', 5)");
    doris.sql("DELETE FROM test.student WHERE id = 5");
    doris.h().advance_clock(300.0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let read = |kind: &str| {
        format!(
            "scan.mode = \"from-timestamp\"\nscan.timestamp = \"{since}\"\nchangelog.poll_interval = \"1s\"\nchangelog.increment_type = \"{kind}\""
        )
    };
    // Each read has its own state dir: a reader's background tasks may still hold the last one's
    // lock for a moment after it returns.
    let got = |kind: &'static str| {
        let (doris, dir, extra) = (&doris, dir.path().join(kind), read(kind));
        async move { first_window(doris, &dir, &extra).await.unwrap_or_else(|e| panic!("{kind}: {e:#}")) }
    };
    assert_eq!(
        got("detail").await,
        [
            "1 UpdateBefore created",
            "1 UpdateAfter paid",
            "2 Delete created",
            "4 Insert created",
            "5 Insert created",
            "5 Delete created"
        ]
    );
    assert_eq!(
        got("min_delta").await,
        ["1 UpdateBefore created", "1 UpdateAfter paid", "2 Delete created", "4 Insert created"]
    );
    assert_eq!(got("append_only").await, ["4 Insert created", "5 Insert created"]);
}

/// An expired start, per the seed's table: `min_delta` fails with Doris' error and what to do;
/// `detail` and `append_only` go on from the oldest change kept, and Sluice warns of the gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_start_fails_min_delta_and_warns_for_detail_and_append_only() {
    let doris = Doris::start_with(doris_lite::Config { manual_clock: true, ..doris_lite::Config::ephemeral() }).await;
    doris.sql(
        "CREATE TABLE test.student (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2 \
         PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\", \
         \"changelog.need_historical_value\" = \"true\", \"changelog.ttl_seconds\" = \"600\")",
    );
    doris.sql("INSERT INTO test.student VALUES (1, 'expired', 1)");
    let since = doris.client("").tso_time().await.unwrap();
    doris.h().advance_clock(700.0).unwrap();
    doris.sql("INSERT INTO test.student VALUES (2, 'kept', 2)");
    doris.h().advance_clock(1.0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for kind in ["detail", "append_only", "min_delta"] {
        doris.sql(&format!(
            "CREATE TABLE test.{kind} (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
        ));
        let extra = format!(
            "scan.mode = \"from-timestamp\"\nscan.timestamp = \"{since}\"\nchangelog.poll_interval = \"1s\"\nchangelog.increment_type = \"{kind}\""
        );
        let path = pipeline_file(&dir.path().join(kind), &pipeline(&doris, 1, kind, &extra));
        let mut run = Background::start(&path);
        if kind == "min_delta" {
            let (code, log) = run.exit(30).await;
            assert_eq!(code, Some(1), "{log}");
            assert!(log.contains("Changelog offset has expired according to changelog.ttl_seconds"), "{log}");
            assert!(log.contains("start over with `scan.mode = \"initial\"` and a new `pipeline.state_dir`"), "{log}");
            assert!(doris.sql("SELECT count(*) FROM test.min_delta") == ["0"]);
            continue;
        }
        let count = format!("SELECT count(*) FROM test.{kind}");
        run.until(30, "the kept row in the target", |_| doris.sql(&count) == ["1"]).await;
        let (code, log) = run.stop().await;
        assert_eq!(code, Some(0), "{log}");
        assert_eq!(doris.sql(&format!("SELECT id, name FROM test.{kind}")), ["2\tprefix_kept"]);
        assert!(log.contains("keeps 600 s of changes (changelog.ttl_seconds)"), "{log}");
        assert!(
            log.contains(&format!("Doris skips the expired changes without an error (increment_type = {kind})")),
            "{log}"
        );
    }
}

/// Wait up to 60 s (a generous deadline for a busy machine) for `done`, polling.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Wait until the pipeline whose state dir is `state` has written a checkpoint (it has opened its
/// sources, so a `latest` start is fixed).
async fn started(state: &std::path::Path) {
    eventually(&format!("a checkpoint in {}", state.display()), || checkpoint(state).is_some()).await;
}

/// The state dir's last checkpoint.
fn checkpoint(dir: &std::path::Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("checkpoint.json")).ok()?).ok()
}

/// Does the checkpoint have a source whose snapshot is not finished?
fn snapshot_pending(cp: &serde_json::Value) -> bool {
    cp["sources"]["doris"].as_array().unwrap().iter().any(|s| !s["snapshot"].is_null())
}

/// Run the `initial` pipeline at `path` with every split (one tablet) starting 600 ms late, so its
/// snapshot spans many checkpoints, and `kill -9` it once a checkpoint holds part of the snapshot.
async fn kill_9_in_the_snapshot(doris: &Doris, path: &std::path::Path, state: &std::path::Path) {
    let stall = doris_lite::DebugPoint::always().param("ms", 600);
    doris.h().debug_points().add(doris_lite::faults::FLIGHT_STALL, stall).unwrap();
    let mut run = Background::start(path);
    // The first start may compile the plugin: a generous deadline.
    run.until(180, "a checkpoint with part of the snapshot", |_| {
        checkpoint(state).is_some_and(|cp| {
            snapshot_pending(&cp)
                && cp["sources"]["doris"].as_array().unwrap().iter().any(|s| s["snapshot"]["split"].as_u64() > Some(0))
        })
    })
    .await;
    run.kill_9();
    doris.h().debug_points().clear();
}

/// `kill -9` while `initial` reads its snapshot (slowed down by doris-lite) and again while it
/// follows the changelog: after restarts the target equals the source, every load committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_snapshot_and_in_the_changelog_phase_converges_with_dedup() {
    let doris = Doris::start().await;
    changelog_table(&doris, 8);
    for chunk in 0..4 {
        let values: Vec<String> =
            (chunk * 5000 + 1..=chunk * 5000 + 5000).map(|i| format!("({i}, 'n{i}', {})", i % 90)).collect();
        doris.sql(&format!("INSERT INTO test.student VALUES {}", values.join(",")));
    }
    doris.sql(
        "CREATE TABLE test.mirror (id INT, name VARCHAR(40), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    let dir = tempfile::tempdir().unwrap();
    let extra = "scan.mode = \"initial\"\nchangelog.poll_interval = \"1s\"\nprimary_key = \"id\"\ndedup = true";
    let path = pipeline_file(dir.path(), &pipeline(&doris, 2, "mirror", extra));
    let state = dir.path().join(".sluice/scan-mirror");
    kill_9_in_the_snapshot(&doris, &path, &state).await;
    let partial: u64 = doris.sql("SELECT count(*) FROM test.mirror")[0].parse().unwrap();
    assert!(partial < 20_000, "the snapshot was not cut: {partial} rows");

    // Restart: the snapshot finishes, then changes flow; killed again while they do.
    let mut run = Background::start(&path);
    run.until(60, "the snapshot in a checkpoint", |_| checkpoint(&state).is_some_and(|cp| !snapshot_pending(&cp)))
        .await;
    doris.sql("INSERT INTO test.student VALUES (20001, 'new', 1), (20002, 'new', 2), (20003, 'new', 3)");
    doris.sql("INSERT INTO test.student VALUES (1, 'changed', 50), (2, 'changed', 50)");
    doris.sql("DELETE FROM test.student WHERE id IN (3, 4, 20003)");
    // Killed once the changes are flowing: the first of them is in the mirror.
    run.until(60, "the first change in the mirror", |_| {
        doris.sql("SELECT name FROM test.mirror WHERE id = 20001") == ["prefix_new"]
    })
    .await;
    run.kill_9();
    doris.sql("INSERT INTO test.student VALUES (5, 'changed again', 7), (20004, 'newer', 4)");
    doris.sql("DELETE FROM test.student WHERE id = 20001");

    let mut run = Background::start(&path);
    let expected = doris.sql("SELECT id, concat('prefix_', name), age + 1 FROM test.student ORDER BY id");
    assert_eq!(expected.len(), 20_000);
    run.until(60, "the mirror equal to the source", |_| {
        doris.sql("SELECT id, name, age FROM test.mirror ORDER BY id") == expected
    })
    .await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    // The dedup state is the normalize transform's, per worker and table: worker 0's holds its
    // part of the snapshot and every change since.
    let cp = checkpoint(&state).unwrap();
    let saved = &cp["transforms"]["normalize"][0]["test.student"];
    let keys = saved["keys"].as_u64().unwrap_or(0);
    assert!(keys > 5_000, "dedup state of worker 0 holds {keys} keys");
    let schema = sluice_guest::types::arrow_schema(
        &sluice_guest::types::parse_columns("id INT, name VARCHAR(32), age INT").unwrap(),
    );
    assert!(sluice::transforms::normalize::state_has_deleted(saved, &schema, &["id".into()], &["20001"]).unwrap());
}

/// `kill -9` during the snapshot and again while changes stream, into a DUPLICATE table, which keeps
/// every row it is given: a change delivered twice would show twice, so the target proves each
/// snapshot row and each change landed exactly once (no dedup transform to absorb replays). The
/// second kill lands while a writer is still making changes and the target lags behind them.
/// (The snapshot's rows are committed just before the pipeline starts, often in the same second:
/// the first changelog window must not deliver them again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_changes_in_flight_lands_each_change_once_in_a_duplicate_table() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const SNAPSHOT: usize = 4000;
    const CHANGES: usize = 150;
    let doris = Doris::start().await;
    changelog_table(&doris, 8);
    let values: Vec<String> = (1..=SNAPSHOT).map(|i| format!("({i}, 'n{i}', {})", i % 90)).collect();
    doris.sql(&format!("INSERT INTO test.student VALUES {}", values.join(",")));
    doris.sql("CREATE TABLE test.events (id INT, name VARCHAR(40), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let dir = tempfile::tempdir().unwrap();
    let extra = "scan.mode = \"initial\"\nchangelog.poll_interval = \"1s\"";
    let path = pipeline_file(dir.path(), &pipeline(&doris, 2, "events", extra));
    let state = dir.path().join(".sluice/scan-events");
    let count = |filter: &str| -> usize {
        doris.sql(&format!("SELECT count(*) FROM test.events WHERE {filter}"))[0].parse().unwrap()
    };
    kill_9_in_the_snapshot(&doris, &path, &state).await;
    assert!(count("true") < SNAPSHOT, "the snapshot was not cut");

    // Restart; once the snapshot is checkpointed a writer makes CHANGES changes (an insert, and
    // every third an update of a snapshot row), 20 ms apart, pausing after 2/3 until released.
    let mut run = Background::start(&path);
    run.until(60, "the snapshot in a checkpoint", |_| checkpoint(&state).is_some_and(|cp| !snapshot_pending(&cp)))
        .await;
    let port = doris.h().query_addr().port();
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let released = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (written, released) = (written.clone(), released.clone());
        std::thread::spawn(move || {
            for n in 0..CHANGES {
                while n == CHANGES * 2 / 3 && !released.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let sql = if n % 3 == 2 {
                    format!("UPDATE test.student SET name = 'u{n}' WHERE id = {}", n + 1)
                } else {
                    format!("INSERT INTO test.student VALUES ({}, 'c{n}', {})", 100_000 + n, n % 90)
                };
                crate::common::mysql(port, &sql);
                written.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    // Kill 2: once changes reach the target, while the writer is still writing.
    let changes = "id >= 100000 OR name LIKE 'prefix_u%'";
    run.until(60, "the first change in the target", |_| count(changes) > 0).await;
    let made = written.load(Ordering::SeqCst);
    run.kill_9();
    let landed = count(changes);
    assert!(landed < made && made < CHANGES, "changes in flight at the kill: {landed} landed of {made} made");
    released.store(true, Ordering::SeqCst);
    writer.join().unwrap();

    // Every snapshot row once, and every change once: inserts as rows, updates as after-images.
    let mut expected: Vec<(usize, String, usize)> =
        (1..=SNAPSHOT).map(|i| (i, format!("prefix_n{i}"), i % 90 + 1)).collect();
    for n in 0..CHANGES {
        expected.push(if n % 3 == 2 {
            (n + 1, format!("prefix_u{n}"), (n + 1) % 90 + 1)
        } else {
            (100_000 + n, format!("prefix_c{n}"), n % 90 + 1)
        });
    }
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(i, n, a)| format!("{i}\t{n}\t{a}")).collect();
    let rows = || doris.sql("SELECT id, name, age FROM test.events ORDER BY id, name");
    let before = (count("true"), expected.len());
    assert!(before.0 < before.1, "the target holds {} of {} rows before the last run", before.0, before.1);
    let mut run = Background::start(&path);
    // Polled until the target holds each row once; a duplicate never goes away, so it fails here.
    run.until(120, "the target equal to every row and change, each once", |_| rows() == expected).await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(rows(), expected);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// `pipelines/changelog.toml` as shipped: embedded doris-lite, `initial`, then changes made
/// through the MySQL port it prints reach the mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changelog_example_pipeline_mirrors_inserts_updates_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let repo = crate::common::repo_root();
    for f in ["changelog.toml", "changelog.sql"] {
        std::fs::copy(repo.join("pipelines").join(f), dir.path().join(f)).unwrap();
    }
    let mut run = Background::start(&dir.path().join("changelog.toml"));
    let port = std::cell::Cell::new(0u16);
    run.until(60, "the embedded doris-lite's MySQL port", |r| {
        let log = r.log();
        let found = log.lines().find_map(|l| l.split(" -P ").nth(1)?.split_whitespace().next()?.parse().ok());
        port.set(found.unwrap_or(0));
        found.is_some()
    })
    .await;
    let sql = |q: &str| crate::common::mysql(port.get(), q);
    let mirror = "SELECT * FROM shop.orders_mirror ORDER BY id";
    let source = "SELECT * FROM shop.orders ORDER BY id";
    // The example creates the mirror as it starts: until then the query fails.
    run.until(60, "the snapshot in the mirror", |_| {
        crate::common::try_mysql(port.get(), mirror).is_ok_and(|rows| rows.len() == 2)
    })
    .await;
    sql("INSERT INTO shop.orders VALUES (3, 'linus', 5.00, 'new')");
    sql("INSERT INTO shop.orders VALUES (2, 'grace', 99.00, 'paid')");
    sql("DELETE FROM shop.orders WHERE id = 1");
    let expected = ["2\tgrace\t99.00\tpaid", "3\tlinus\t5.00\tnew"];
    assert_eq!(sql(source), expected);
    run.until(60, "the mirror equal to the source", |_| sql(mirror) == expected).await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// Every Doris type of the seed's mapping table: the Arrow type the source reads it as, and a
/// snapshot copied through the Doris sink into a table of the same columns equals the original.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_doris_type_reads_as_the_connector_maps_it_and_writes_back_unchanged() {
    use arrow::datatypes::{DataType, TimeUnit};
    let doris = Doris::start().await;
    let columns = "id INT, b BOOLEAN, ti TINYINT, si SMALLINT, bi BIGINT, li LARGEINT, f FLOAT, d DOUBLE, \
                   dc DECIMAL(10, 2), dv DECIMALV2(10, 2), dt DATE, ts DATETIME, ts3 DATETIME(3), c CHAR(4), \
                   v VARCHAR(20), s STRING, j JSON, vr VARIANT, ip4 IPV4, ip6 IPV6, a ARRAY<INT>, m MAP<STRING, INT>";
    for t in ["types", "types_copy"] {
        doris.sql(&format!("CREATE TABLE test.{t} ({columns}) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2"));
    }
    doris.sql(
        "INSERT INTO test.types VALUES (1, true, -8, -16, -64, '170141183460469231731687303715884105727', 1.5, 2.25, \
         12345678.91, 123.45, '2026-11-30', '2026-11-30 12:34:56', '2026-11-30 12:34:56.789', 'abcd', 'varchar', \
         'a string', '{\"k\":[1,2]}', '{\"v\":1}', '192.168.0.1', '::1', '[1, 2, 3]', '{\"a\":1}')",
    );
    doris.sql("INSERT INTO test.types (id) VALUES (2)");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"types\"\n\n[doris]\nfenodes = {}\n\n[[source]]\ntype = \"doris\"\ntable = \"test.types\"\n\n[[sink]]\ntype = \"doris\"\ntable = \"test.types_copy\"\n",
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let file = sluice::pipeline::load_file(&path).unwrap();
    let prepared = sluice::pipeline::prepare(&path, file).await.unwrap();
    let schema = prepared.source.component.schema().expect("a Doris table's schema is known");
    let read: Vec<(String, DataType)> =
        schema.fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect();
    let text_type = DataType::Utf8;
    let expected = [
        ("id", DataType::Int32),
        ("b", DataType::Boolean),
        ("ti", DataType::Int8),
        ("si", DataType::Int16),
        ("bi", DataType::Int64),
        ("li", text_type.clone()),
        ("f", DataType::Float32),
        ("d", DataType::Float64),
        ("dc", DataType::Decimal128(10, 2)),
        ("dv", DataType::Decimal128(10, 2)),
        ("dt", DataType::Date32),
        ("ts", DataType::Timestamp(TimeUnit::Second, None)),
        ("ts3", DataType::Timestamp(TimeUnit::Millisecond, None)),
        ("c", text_type.clone()),
        ("v", text_type.clone()),
        ("s", text_type.clone()),
        ("j", text_type.clone()),
        ("vr", text_type.clone()),
        ("ip4", text_type.clone()),
        ("ip6", text_type.clone()),
        ("a", text_type.clone()),
        ("m", text_type.clone()),
    ];
    let expected: Vec<(String, DataType)> = expected.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    assert_eq!(read, expected);
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let opts = sluice::runtime::RunOptions { quiet: true, status_interval: None, ..Default::default() };
    let report = sluice::runtime::run(&prepared, &opts, stop_rx).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished);
    let original = doris.sql("SELECT * FROM test.types ORDER BY id");
    assert_eq!(original.len(), 2);
    assert!(original[0].contains("170141183460469231731687303715884105727"), "{original:?}");
    assert_eq!(doris.sql("SELECT * FROM test.types_copy ORDER BY id"), original);
}

/// How old a changelog source's position is — from the start of the window read to the FE's clock
/// when it was opened — in what `/metrics` and `sluice serve`'s API show: an hour for a source
/// that starts an hour back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changelog_positions_age_is_shown() {
    let doris = Doris::start().await;
    changelog_table(&doris, 2);
    doris.sql("INSERT INTO test.student VALUES (1, 'a', 10)");
    // Window ends are whole seconds: the first window must end after the row's second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let now = doris.client("").tso_time().await.unwrap();
    let hour_ago =
        chrono::NaiveDateTime::parse_from_str(&now, "%Y-%m-%d %H:%M:%S").unwrap() - chrono::Duration::hours(1);
    let source = format!(
        "name = \"student\"\nscan.mode = \"from-timestamp\"\nscan.timestamp = \"{}\"\nchangelog.poll_interval = \"1s\"",
        hour_ago.format("%Y-%m-%d %H:%M:%S")
    );
    let text = pipeline(&doris, 1, "aged", &source)
        .replace("[[sink]]\ntype = \"doris\"\ntable = \"test.aged\"", "[[sink]]\ntype = \"blackhole\"");
    let dir = tempfile::tempdir().unwrap();
    let crate::common::FirstReader { prepared, splits: _splits, mut reader } =
        crate::common::first_reader(dir.path(), &text).await;
    crate::common::read_rows_of(&mut reader, 1).await;
    let sources = prepared.stats.sources();
    let age = sources.iter().find(|s| s["source"] == "student").and_then(|s| s["position_age_seconds"].as_f64());
    assert!(age.is_some_and(|a| (3600.0..3700.0).contains(&a)), "{sources:?}");
}
