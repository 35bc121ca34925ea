//! `[dead_letter]` end to end against doris-lite and real plugins: rows a plugin rejects and rows
//! routed to a table that is not there are set aside with their reasons, the rest is loaded, and
//! a `kill -9` anywhere duplicates nothing in either.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Doris, pipeline_file, plugin_wasm, run_file as run};

const TABLE: &str =
    "CREATE TABLE test.valid (id BIGINT, name VARCHAR(16)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2";

/// A pipeline of `rows` generated rows (ids 1..=rows) through `transform` into `test.valid`,
/// with `dead_letter` as its `[dead_letter]` section.
fn pipeline(doris: &Doris, rows: u64, per_second: u64, transform: &str, dead_letter: &str) -> String {
    format!(
        "[pipeline]\nname = \"dlq\"\nparallelism = 2\ncheckpoint_interval = \"300ms\"\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"datagen\"\nschema = \"id BIGINT, name VARCHAR(16)\"\nrows_per_second = {per_second}\nnumber_of_rows = {rows}\nfields.id = {{ kind = \"sequence\", start = 1 }}\n\n\
         {transform}\n[[sink]]\ntype = \"doris\"\ntable = \"test.valid\"\n\n{dead_letter}",
        doris.fenodes()
    )
}

fn rejecting() -> String {
    format!(
        "[[transform]]\ntype = \"wasm\"\nplugin = \"{}\"\nconfig.mode = \"reject\"\n",
        plugin_wasm("hostile").display()
    )
}

/// The dead letters in a JSON-lines file.
fn letters(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// `count(*) count(distinct id) min(id) max(id)` and how many ids are multiples of 10.
fn tally(doris: &Doris) -> String {
    doris
        .sql("SELECT count(*), count(distinct id), min(id), max(id), sum(CASE WHEN id % 10 = 0 THEN 1 ELSE 0 END) FROM test.valid")
        .join("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_plugin_rejects_go_to_the_dead_letter_file_with_its_reason_and_the_rest_to_doris() {
    let doris = Doris::start().await;
    doris.sql(TABLE);
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline(&doris, 4000, 20_000, &rejecting(), "[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n");
    let path = pipeline_file(dir.path(), &text);
    let report = run(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished && report.restarts == 0, "{report:?}");
    assert_eq!(tally(&doris), "3600\t3600\t1\t3999\t0");
    let letters = letters(&dir.path().join("dead.jsonl"));
    assert_eq!(letters.len(), 400);
    let ids: BTreeSet<i64> = letters.iter().map(|l| l["record"]["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (1..=400).map(|i| i * 10).collect::<BTreeSet<i64>>());
    let first = &letters[0];
    assert_eq!(first["pipeline"], "dlq");
    assert_eq!(first["stage"], "plugin");
    assert_eq!(first["refused_by"], "hostile");
    assert_eq!(first["component"], "wasm");
    assert_eq!(first["columns"], "id BIGINT, name VARCHAR(16)");
    assert_eq!(first["reason"], "ids that are multiples of 10 are refused");
    assert_eq!(first["row_kind"], "+I");
    assert!(first["record"]["name"].is_string(), "{first}");
    // `sluice dlq show` lists them, oldest first, and counts them by stage.
    let out =
        Command::new(env!("CARGO_BIN_EXE_sluice")).args(["dlq", "show", "--limit", "2"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown.lines().count(), 2, "{shown}");
    let line = shown.lines().next().unwrap();
    assert!(
        line.contains(" plugin wasm (hostile)  ")
            && line.contains(": ids that are multiples of 10 are refused  +I {\"id\":"),
        "{line}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "2 dead letters (2 plugin)");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dlq", "show"])
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Nothing is left staged once the run has finished.
    assert_eq!(std::fs::read_dir(dir.path().join("dead.jsonl.staged")).unwrap().count(), 0);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// `sluice dlq <args> <path>`: whether it succeeded, and its stderr.
fn dlq(args: &[&str], path: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).arg("dlq").args(args).arg(path).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sends_the_chosen_letters_through_the_fixed_pipeline_each_once() {
    let doris = Doris::start().await;
    doris.sql(TABLE);
    let dir = tempfile::tempdir().unwrap();
    let dead = "[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n";
    let path = pipeline_file(dir.path(), &pipeline(&doris, 1000, 20_000, &rejecting(), dead));
    run(&path).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tally(&doris), "900\t900\t1\t999\t0");
    let key = |l: &serde_json::Value| {
        format!("{}/{}/{}/{}", l["pipeline"].as_str().unwrap(), l["checkpoint"], l["worker"], l["seq"])
    };
    let keys: Vec<String> = letters(&dir.path().join("dead.jsonl")).iter().map(key).collect();
    assert_eq!(keys.len(), 100);

    let (ok, _, err) = dlq(&["replay"], &path);
    assert!(!ok && err.contains("say which dead letters to replay: --all, or --component"), "{err}");
    // Replayed before the fix, a letter is refused again: marked replayed, and a new letter of
    // the pipeline `dlq.replay` takes its place.
    let (ok, _, err) = dlq(&["replay", "--quiet", "--letter", &keys[0]], &path);
    assert!(ok, "{err}");
    assert!(
        err.contains("replayed 1 dead letters refused by `wasm`")
            && err.contains(": 0 rows written, 1 dead letters again"),
        "{err}"
    );
    let now = letters(&dir.path().join("dead.jsonl"));
    assert_eq!(now.len(), 101);
    assert_eq!((now[100]["pipeline"].as_str(), &now[100]["record"]), (Some("dlq.replay"), &now[0]["record"]));

    // The fix: the plugin lets every row through. Two chosen letters, then the rest of the plugin's.
    std::fs::write(&path, pipeline(&doris, 1000, 20_000, &rejecting().replace("\"reject\"", "\"ok\""), dead)).unwrap();
    let (ok, _, err) = dlq(&["replay", "--quiet", "--letter", &keys[1], "--letter", &keys[2]], &path);
    assert!(
        ok && err.contains("replayed 2 dead letters refused by `wasm`")
            && err.contains(": 2 rows written, 0 dead letters again"),
        "{err}"
    );
    assert_eq!(tally(&doris), "902\t902\t1\t999\t2");
    let (ok, _, err) = dlq(&["replay", "--quiet", "--component", "wasm"], &path);
    assert!(ok && err.contains("replayed 98 dead letters refused by `wasm`"), "{err}");
    assert_eq!(tally(&doris), "1000\t1000\t1\t1000\t100");
    // Nothing is sent twice.
    let (ok, _, err) = dlq(&["replay", "--all"], &path);
    assert!(ok && err.contains("no dead letters to replay (0 chosen"), "{err}");
    assert_eq!(tally(&doris), "1000\t1000\t1\t1000\t100");
    let (ok, out, _) = dlq(&["show", "--json"], &path);
    assert!(ok);
    let shown: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(shown.len(), 101);
    assert!(shown.iter().all(|l| l["replayed"] == true), "{out}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_table_in_doris_is_created_and_filled_in_the_same_checkpoints() {
    let doris = Doris::start().await;
    doris.sql(TABLE);
    let dir = tempfile::tempdir().unwrap();
    let text =
        pipeline(&doris, 2000, 20_000, &rejecting(), "[dead_letter]\ntype = \"doris\"\ntable = \"ops.dead_letters\"\n");
    let report = run(&pipeline_file(dir.path(), &text)).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(tally(&doris), "1800\t1800\t1\t1999\t0");
    assert_eq!(
        doris
            .sql("SELECT count(*), count(distinct concat(checkpoint, '/', worker, '/', seq)), min(stage), max(refused_by) FROM ops.dead_letters")
            .join(""),
        "200\t200\tplugin\thostile"
    );
    let rows = doris.sql("SELECT record FROM ops.dead_letters");
    let ids: BTreeSet<i64> =
        rows.iter().map(|r| serde_json::from_str::<serde_json::Value>(r).unwrap()["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (1..=200).map(|i| i * 10).collect::<BTreeSet<i64>>());
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_routed_to_a_table_that_is_not_there_are_set_aside_with_doris_reason() {
    let doris = Doris::start().await;
    doris.sql(TABLE);
    let dir = tempfile::tempdir().unwrap();
    let routing = format!(
        "[[transform]]\ntype = \"wasm\"\nplugin = \"{}\"\nconfig.table = \"test.missing\"\n",
        plugin_wasm("route-even").display()
    );
    let text = pipeline(&doris, 1000, 20_000, &routing, "[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n");
    let report = run(&pipeline_file(dir.path(), &text)).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(doris.sql("SELECT count(*), sum(id % 2) FROM test.valid").join(""), "500\t500");
    let letters = letters(&dir.path().join("dead.jsonl"));
    assert_eq!(letters.len(), 500);
    assert!(letters.iter().all(|l| l["stage"] == "route"
        && l["component"] == "doris"
        && l["refused_by"] == "test.missing"
        && l["record"]["id"].as_i64().unwrap() % 2 == 0));
    let reason = letters[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("table `test.missing`: "), "{reason}");

    // Without a [dead_letter], the same pipeline stops with that reason.
    doris.sql("TRUNCATE TABLE test.valid");
    let text = pipeline(&doris, 1000, 20_000, &routing, "");
    let other = tempfile::tempdir().unwrap();
    let e = format!("{:#}", run(&pipeline_file(other.path(), &text)).await.unwrap_err());
    assert!(e.contains("table `test.missing`: "), "{e}");

    // Replayed while the table is still missing, they are set aside again (as `dlq.replay`'s);
    // once it is there, they are replayed into it, from the sink on.
    let path = dir.path().join("pipeline.toml");
    let (ok, _, err) = dlq(&["replay", "--quiet", "--stage", "route"], &path);
    assert!(ok && err.contains(": 0 rows written, 500 dead letters again"), "{err}");
    doris.sql(&TABLE.replace("test.valid", "test.missing"));
    let (ok, _, err) = dlq(&["replay", "--quiet", "--stage", "route"], &path);
    assert!(
        ok && err.contains("replayed 500 dead letters refused by `doris`")
            && err.contains(": 500 rows written, 0 dead letters again"),
        "{err}"
    );
    assert_eq!(doris.sql("SELECT count(*), count(distinct id), sum(id % 2) FROM test.missing").join(""), "500\t500\t0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_way_duplicates_nothing_in_the_target_or_the_dead_letters() {
    let doris = Doris::start().await;
    doris.sql(TABLE);
    let dir = tempfile::tempdir().unwrap();
    let text =
        pipeline(&doris, 60_000, 10_000, &rejecting(), "[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n")
            .replace("checkpoint_interval = \"300ms\"", "checkpoint_interval = \"1s\"");
    let path = pipeline_file(dir.path(), &text);
    let start = move || {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet"])
            .arg(&path)
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sluice starts")
    };
    let seed = std::env::var("SLUICE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    eprintln!("dead letters kill -9: seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dead = dir.path().join("dead.jsonl");
    let progress = || (doris.sql("SELECT count(*) FROM test.valid")[0].clone(), letters(&dead).len());
    for round in 0..3 {
        let before = progress();
        let mut child = start();
        // Each round commits rows and dead letters before it dies.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let now = progress();
            if now.0 != before.0 && now.1 != before.1 {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!("round {round}: sluice exited early ({status}): {}", String::from_utf8_lossy(&out.stderr));
            }
            assert!(std::time::Instant::now() < deadline, "round {round} (seed {seed}): nothing committed in 120 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..1500))).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let out = tokio::task::spawn_blocking(move || start().wait_with_output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tally(&doris), "54000\t54000\t1\t59999\t0");
    let letters = letters(&dead);
    let ids: BTreeSet<i64> = letters.iter().map(|l| l["record"]["id"].as_i64().unwrap()).collect();
    assert_eq!((letters.len(), ids.len()), (6000, 6000), "seed {seed}: a dead letter was written twice or lost");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_doris_filters_out_of_a_load_become_dead_letters_with_doris_reasons_and_the_rest_is_committed() {
    let doris = Doris::start().await;
    doris.sql(
        "CREATE TABLE test.people (id BIGINT NOT NULL, name VARCHAR(5) NOT NULL, age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    );
    let dir = tempfile::tempdir().unwrap();
    // 1000 people; ids 100, 200, … are bad, in turn: an age that is not a number (strict mode),
    // a name longer than VARCHAR(5), no name for a NOT NULL column.
    let mut lines = String::new();
    for id in 1..=1000u32 {
        let (name, age) = match (id % 100, (id / 100) % 3) {
            (0, 0) => ("\"ann\"".to_string(), "\"abc\"".to_string()),
            (0, 1) => ("\"annabella\"".to_string(), "\"30\"".to_string()),
            (0, _) => ("null".to_string(), "\"30\"".to_string()),
            _ => (format!("\"p{}\"", id % 1000), format!("\"{}\"", id % 90)),
        };
        lines.push_str(&format!("{{\"id\": {id}, \"name\": {name}, \"age\": {age}}}\n"));
    }
    std::fs::write(dir.path().join("people.jsonl"), lines).unwrap();
    let text = format!(
        "[pipeline]\nname = \"filtered\"\ncheckpoint_interval = \"300ms\"\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"file\"\npath = \"people.jsonl\"\nformat = \"json\"\nschema = \"id BIGINT, name STRING, age STRING\"\n\n\
         [[sink]]\ntype = \"doris\"\ntable = \"test.people\"\nproperties.strict_mode = \"true\"\nproperties.max_filter_ratio = \"0.1\"\n\n\
         [dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n",
        doris.fenodes()
    );
    let report = run(&pipeline_file(dir.path(), &text)).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(
        doris
            .sql("SELECT count(*), count(distinct id), sum(CASE WHEN id % 100 = 0 THEN 1 ELSE 0 END) FROM test.people")
            .join(""),
        "990\t990\t0"
    );
    let letters = letters(&dir.path().join("dead.jsonl"));
    let mut got: Vec<(i64, String)> = letters
        .iter()
        .map(|l| {
            assert_eq!((l["stage"].as_str(), l["source_table"].as_str()), (Some("doris"), Some("test.people")), "{l}");
            (l["record"]["id"].as_i64().unwrap(), l["reason"].as_str().unwrap().to_string())
        })
        .collect();
    got.sort();
    let want: Vec<(i64, String)> = (1..=10)
        .map(|i| {
            let reason = match i % 3 {
                0 => "'abc' is not a valid INT".to_string(),
                1 => "the length of input is too long than schema. input: annabella, schema length: 5".to_string(),
                _ => "null value for not null column, column=name".to_string(),
            };
            (i * 100, reason)
        })
        .collect();
    assert_eq!(got, want);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());

    // Above `max_filter_ratio` the load fails as Doris says, dead-letter target or not.
    doris.sql("TRUNCATE TABLE test.people");
    let strict = text.replace("max_filter_ratio = \"0.1\"", "max_filter_ratio = \"0.001\"");
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join("people.jsonl"), other.path().join("people.jsonl")).unwrap();
    let e = format!("{:#}", run(&pipeline_file(other.path(), &strict)).await.unwrap_err());
    assert!(e.contains("[DATA_QUALITY_ERROR]too many filtered rows"), "{e}");
    assert_eq!(doris.sql("SELECT count(*) FROM test.people"), ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_bad_rows_than_dorises_error_log_shows_are_all_set_aside_with_2pc_and_counted_without() {
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.named (id BIGINT NOT NULL, name VARCHAR(5)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let dir = tempfile::tempdir().unwrap();
    // 1000 rows, every 10th name too long: 100 bad rows in one load, twice what Doris logs.
    let lines: String = (1..=1000)
        .map(|id| format!("{{\"id\": {id}, \"name\": \"{}\"}}\n", if id % 10 == 0 { "waytoolong" } else { "ok" }))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), lines).unwrap();
    let text = |sink_extra: &str| {
        format!(
            "[pipeline]\nname = \"many\"\ncheckpoint_interval = \"10s\"\n\n[doris]\nfenodes = {}\n\n\
             [[source]]\ntype = \"file\"\npath = \"rows.jsonl\"\nformat = \"json\"\nschema = \"id BIGINT, name STRING\"\n\n\
             [[sink]]\ntype = \"doris\"\ntable = \"test.named\"\nproperties.max_filter_ratio = \"0.2\"\n{sink_extra}\n\
             [dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\n",
            doris.fenodes()
        )
    };
    let report = run(&pipeline_file(dir.path(), &text(""))).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(
        doris.sql("SELECT count(*), sum(CASE WHEN id % 10 = 0 THEN 1 ELSE 0 END) FROM test.named").join(""),
        "900\t0"
    );
    let set_aside = letters(&dir.path().join("dead.jsonl"));
    let ids: BTreeSet<i64> = set_aside.iter().map(|l| l["record"]["id"].as_i64().unwrap()).collect();
    assert_eq!((set_aside.len(), ids), (100, (1..=100).map(|i| i * 10).collect::<BTreeSet<i64>>()));
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());

    // Without 2PC the load is committed before anything can be set aside: the 50 rows its error
    // log shows are dead letters as Doris logged them, and one more counts the rest.
    doris.sql("TRUNCATE TABLE test.named");
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join("rows.jsonl"), other.path().join("rows.jsonl")).unwrap();
    let report = run(&pipeline_file(other.path(), &text("enable.batch_mode = true\n")))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    assert_eq!(doris.sql("SELECT count(*) FROM test.named"), ["900"]);
    let logged = letters(&other.path().join("dead.jsonl"));
    assert_eq!(logged.len(), 51);
    assert!(
        logged[..50].iter().all(|l| l["reason"]
            .as_str()
            .unwrap()
            .starts_with("the length of input is too long than schema")
            && l["record"]["src_line"].as_str().unwrap().contains("waytoolong")),
        "{:?}",
        &logged[..2]
    );
    assert_eq!(
        logged[50]["reason"],
        "Doris filtered 100 rows of this load and its error log shows 50; the others cannot be named without two-phase commit (`enable_2pc = true`)"
    );
}
