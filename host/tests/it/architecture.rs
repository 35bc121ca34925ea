//! What the component architecture promises, end to end against doris-lite: each batch goes to
//! one sink, named connections, pipelines without Doris, FE failover, and a source that restarts
//! from its checkpoint when Doris goes away for a while.

use std::time::Duration;

use sluice::runtime::{self, RunOptions};
use tokio::sync::watch;

use crate::common::{Doris, accepts, pipeline_file, plugin_wasm, run_file as run, wait_for};

fn datagen(rows: u64) -> String {
    format!(
        "[[source]]\ntype = \"datagen\"\nschema = \"id BIGINT, name VARCHAR(16)\"\nrows_per_second = 20000\nnumber_of_rows = {rows}\nfields.id = {{ kind = \"sequence\", start = 1 }}\n"
    )
}

/// `count(*) count(distinct id) min(id) max(id)` of `table`, and how many ids have the wrong parity.
fn tally(doris: &Doris, table: &str, parity: u8) -> String {
    doris
        .sql(&format!(
            "SELECT count(*), count(distinct id), min(id), max(id), sum(CASE WHEN id % 2 = {parity} THEN 0 ELSE 1 END) FROM {table}"
        ))
        .join("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_routing_half_the_rows_to_a_second_sink_lands_each_row_once() {
    let doris = Doris::start().await;
    for t in ["odds", "evens"] {
        doris.sql(&format!(
            "CREATE TABLE test.{t} (id BIGINT, name VARCHAR(16)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"routed\"\nparallelism = 2\ncheckpoint_interval = \"200ms\"\n\n[doris]\nfenodes = {}\n\n{}\n\
         [[transform]]\ntype = \"wasm\"\nplugin = \"{}\"\nconfig.table = \"test.evens\"\n\n\
         [[sink]]\ntype = \"doris\"\ntable = \"test.odds\"\n\n[[sink]]\ntype = \"doris\"\ntable = \"test.evens\"\n",
        doris.fenodes(),
        datagen(4000),
        plugin_wasm("route-even").display()
    );
    let report = run(&pipeline_file(dir.path(), &text)).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(tally(&doris, "test.odds", 1), "2000\t2000\t1\t3999\t0");
    assert_eq!(tally(&doris, "test.evens", 0), "2000\t2000\t2\t4000\t0");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    // Each sink committed its own loads under its own name.
    let cp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(".sluice/routed/checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(cp["sinks"].as_object().unwrap().keys().collect::<Vec<_>>(), ["doris", "doris-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_names_its_doris_connection_and_a_dead_first_fe_is_skipped() {
    let doris = Doris::start().await;
    doris.sql(
        "CREATE TABLE test.named (id BIGINT, name VARCHAR(16)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    // A loopback port nothing listens on, before the live FE.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"named\"\ncheckpoint_interval = \"200ms\"\n\n[connections.warehouse]\ntype = \"doris\"\nfenodes = [\"{dead}\", \"{}\"]\n\n{}\n\
         [[sink]]\ntype = \"doris\"\nconnection = \"warehouse\"\ntable = \"test.named\"\n",
        doris.h().fe_http_addr(),
        datagen(1000),
    );
    let report = run(&pipeline_file(dir.path(), &text)).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished && report.restarts == 0, "{report:?}");
    assert_eq!(doris.sql("SELECT count(*), count(distinct id) FROM test.named").join(""), "1000\t1000");

    // A connection that is not defined, or of another type, is an error naming the key.
    let missing = text.replace("connection = \"warehouse\"", "connection = \"lake\"");
    let e = sluice::pipeline::load_str(&dir.path().join("p.toml"), &missing).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "sink.connection: there is no connection `lake`; define it as [connections.lake] with type = \"doris\""
        ),
        "{e}"
    );
    let mysql = text
        .replace(
            "[connections.warehouse]\ntype = \"doris\"",
            "[connections.db]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\n\n[connections.warehouse]\ntype = \"doris\"",
        )
        .replace("connection = \"warehouse\"", "connection = \"db\"");
    let e = sluice::pipeline::load_str(&dir.path().join("p.toml"), &mysql).unwrap_err().to_string();
    assert!(e.contains("sink.connection: connection `db` is a mysql connection, not a Doris one"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_without_doris_needs_no_doris_section() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("[pipeline]\nname = \"local\"\n\n{}\n[[sink]]\ntype = \"blackhole\"\n", datagen(3000));
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (_stop, rx) = watch::channel(false);
    let report = runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx)
        .await
        .unwrap();
    assert!(report.finished);
    assert_eq!(prepared.stats.rows_written.load(std::sync::atomic::Ordering::Relaxed), 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changelog_pipeline_survives_the_fe_going_away_for_3_seconds() {
    let doris = Doris::start().await;
    doris.sql(
        "CREATE TABLE test.student (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2 \
         PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\")",
    );
    doris.sql(
        "CREATE TABLE test.mirror (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    doris.sql("INSERT INTO test.student VALUES (1, 'a', 10), (2, 'b', 20)");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"follow\"\ncheckpoint_interval = \"300ms\"\n\n[doris]\nfenodes = {}\nrequest_connect_timeout = \"1s\"\n\n\
         [[source]]\ntype = \"doris\"\ntable = \"test.student\"\nscan.mode = \"initial\"\nchangelog.poll_interval = \"1s\"\n\n\
         [[sink]]\ntype = \"doris\"\ntable = \"test.mirror\"\n",
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let report =
            runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await;
        (report, prepared)
    });
    let d = &doris;
    let mirrored = |want: &[&str]| {
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        async move {
            for _ in 0..200 {
                if d.sql("SELECT id, name FROM test.mirror ORDER BY id") == want {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }
    };
    assert!(mirrored(&["1\ta", "2\tb"]).await, "the snapshot reached the mirror");
    // Every listener (HTTP, MySQL, Flight) closes for 3 s.
    let point = doris_lite::DebugPoint::times(1).param("ms", 3000);
    doris.h().debug_points().add(doris_lite::faults::SERVER_RESTART_LISTENERS, point).unwrap();
    let query = doris.h().query_addr();
    wait_for("the listeners to close", || !accepts(query)).await;
    wait_for("the listeners to open again", || accepts(query)).await;
    doris.sql("INSERT INTO test.student VALUES (3, 'c', 30), (1, 'a2', 11)");
    assert!(mirrored(&["1\ta2", "2\tb", "3\tc"]).await, "changes after the outage reached the mirror");
    stop.send(true).unwrap();
    let (report, prepared) = task.await.unwrap();
    let report = report.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.restarts >= 1, "the outage restarted the pipeline from its checkpoint: {report:?}");
    assert_eq!(prepared.stats.restarts.load(std::sync::atomic::Ordering::Relaxed), report.restarts);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// Where `source` (a file of `host/src/runtime/`) names a component module: the runtime knows
/// components only by their traits, so a line naming `crate::sources`, `sinks`, `transforms` or
/// `doris` (or importing one of them from `crate::{…}`) is a component reached around them.
fn component_imports(source: &str) -> Vec<String> {
    let path = regex::Regex::new(r"crate::(sources|sinks|transforms|doris)\b").unwrap();
    let grouped = regex::Regex::new(r"(?s)use crate::\{[^}]*\b(sources|sinks|transforms|doris)\b").unwrap();
    let mut found: Vec<String> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//") && path.is_match(l))
        .map(|(i, l)| format!("{}: {}", i + 1, l.trim()))
        .collect();
    found.extend(grouped.find_iter(source).map(|m| m.as_str().replace('\n', " ")));
    found
}

#[test]
fn the_runtime_imports_no_component() {
    // The check itself finds what it looks for.
    assert_eq!(component_imports("use crate::sinks::file::json_objects;\n").len(), 1);
    assert_eq!(component_imports("use crate::{\n    metrics,\n    doris::DorisError,\n};\n").len(), 1);
    assert!(component_imports("// crate::sinks in a comment\nuse crate::state::Journal;\n").is_empty());

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut offending = Vec::new();
    for file in files {
        // The runtime's own tests build components to run.
        if file.extension().is_none_or(|e| e != "rs") || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        offending.extend(component_imports(&text).into_iter().map(|l| format!("{}:{l}", file.display())));
    }
    assert!(offending.is_empty(), "the runtime names components:\n{}", offending.join("\n"));
}
