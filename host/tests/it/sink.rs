//! The Doris sink writer against doris-lite: row kinds and the delete sign, body formats,
//! compression, partial columns and group commit.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice::pipeline::load_str;
use sluice::runtime::WriterContext;
use sluice::sinks::doris::DorisSink;
use sluice::sinks::doris::committer::Txn;
use sluice::sinks::doris::writer::{DorisWriter, SinkMetrics, SinkSettings};
use sluice::state::StateDir;
use sluice::{Batch, RowKind};
use sluice_guest::batch::{BatchBuilder, Value};
use sluice_guest::types::{arrow_schema, parse_columns};

use crate::common::Doris;

/// A writer for the `[[sink]]` whose extra lines are `sink`.
fn writer(doris: &Doris, state: &Path, table: &str, sink: &str) -> DorisWriter {
    let text = format!(
        "[pipeline]\nname = \"w\"\n[doris]\nfenodes = {}\n[[source]]\ntype = \"datagen\"\nschema = \"id INT\"\n[[sink]]\ntype = \"doris\"\ntable = \"{table}\"\n{sink}\n",
        doris.fenodes()
    );
    let file = load_str(Path::new("sink.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let cfg: &DorisSink = file.sink[0].config.as_any().downcast_ref().expect("a doris sink");
    let settings = SinkSettings::new(cfg, "sinktest", Duration::from_secs(10)).unwrap();
    let journal = Arc::new(StateDir::open(state).unwrap().journal("doris").unwrap());
    // Each writer is its own run, as each start of a pipeline is.
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ctx = WriterContext { worker: 0, run, checkpoint: 1 };
    DorisWriter::new(Arc::new(settings), doris.client(""), journal, Arc::new(SinkMetrics::default()), ctx)
}

fn rows(columns: &str, rows: &[(RowKind, Vec<Value<'_>>)]) -> Batch {
    let mut b = BatchBuilder::new(arrow_schema(&parse_columns(columns).unwrap())).unwrap();
    for (kind, values) in rows {
        b.push(*kind, values).unwrap();
    }
    b.finish().unwrap()
}

async fn commit(doris: &Doris, txns: Vec<Txn>) -> usize {
    let client = doris.client("");
    for t in &txns {
        client.commit(&t.db, t.txn_id).await.unwrap();
    }
    txns.len()
}

const PEOPLE: &str = "id INT, name VARCHAR(32)";

fn person(kind: RowKind, id: i64, name: &str) -> (RowKind, Vec<Value<'_>>) {
    (kind, vec![Value::Int(id), Value::Str(name)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_reach_unique_tables_as_the_delete_sign_and_update_befores_are_dropped() {
    use RowKind::*;
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.u (id INT, name VARCHAR(32)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&doris, dir.path(), "test.u", "");
    w.write(&rows(PEOPLE, &[person(Insert, 1, "a"), person(Insert, 2, "b"), person(Insert, 4, "d")])).await.unwrap();
    // A key change: the before-image of 4 is ignored (upsert semantics), 2 is deleted.
    let changes =
        [person(Delete, 2, "b"), person(UpdateBefore, 4, "d"), person(UpdateAfter, 5, "e"), person(Insert, 3, "c")];
    w.write(&rows(PEOPLE, &changes)).await.unwrap();
    // The first load carried no delete sign, so the deletes went into a second load.
    assert_eq!(commit(&doris, w.prepare_commit().await.unwrap()).await, 2);
    assert_eq!(doris.sql("SELECT id, name FROM test.u ORDER BY id"), ["1\ta", "3\tc", "4\td", "5\te"]);

    // With `ignore.update_before = false` the before-image deletes the old key.
    let mut w = writer(&doris, &dir.path().join("2"), "test.u", "ignore.update_before = false");
    w.write(&rows(PEOPLE, &[person(UpdateBefore, 4, "d"), person(UpdateAfter, 6, "f")])).await.unwrap();
    assert_eq!(commit(&doris, w.prepare_commit().await.unwrap()).await, 1);
    assert_eq!(doris.sql("SELECT id FROM test.u ORDER BY id"), ["1", "3", "5", "6"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deletes_off_or_on_duplicate_tables_delete_rows_are_dropped_not_upserted() {
    use RowKind::*;
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.u (id INT, name VARCHAR(32)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&doris, dir.path(), "test.u", "enable_delete = false");
    w.write(&rows(PEOPLE, &[person(Insert, 1, "a"), person(Insert, 2, "b")])).await.unwrap();
    w.write(&rows(PEOPLE, &[person(Delete, 2, "gone")])).await.unwrap();
    commit(&doris, w.prepare_commit().await.unwrap()).await;
    assert_eq!(doris.sql("SELECT id, name FROM test.u ORDER BY id"), ["1\ta", "2\tb"]);

    let mut w = writer(&doris, &dir.path().join("dup"), "test.t", "");
    w.write(&rows(PEOPLE, &[person(Insert, 7, "x"), person(Delete, 8, "y")])).await.unwrap();
    commit(&doris, w.prepare_commit().await.unwrap()).await;
    assert_eq!(doris.sql("SELECT id, name FROM test.t"), ["7\tx"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_json_arrow_and_gzip_bodies_load_the_same_rows() {
    let doris = Doris::start().await;
    let columns = "id INT, name VARCHAR(32), price DECIMAL(10,2), day DATE, at DATETIME, ok BOOLEAN";
    let batch = {
        let values: Vec<(RowKind, Vec<Value<'_>>)> = vec![
            (
                RowKind::Insert,
                vec![
                    Value::Int(1),
                    Value::Str("tab\there? no: ünïcode"),
                    Value::Decimal(1250, 2),
                    Value::Date(19_782),
                    Value::DateTime(1_709_251_198_000_000),
                    Value::Bool(true),
                ],
            ),
            (RowKind::Insert, vec![Value::Int(2), Value::Null, Value::Null, Value::Null, Value::Null, Value::Null]),
        ];
        rows(columns, &values)
    };
    let formats = [
        "properties.column_separator = \"\\\\x01\"",
        "properties.format = \"json\"",
        "properties.format = \"arrow\"\nenable_delete = false",
        "properties.compress_type = \"gz\"\nproperties.column_separator = \"|\"",
        "properties.format = \"json\"\nproperties.compress_type = \"gz\"",
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut expected: Option<Vec<String>> = None;
    for (i, format) in formats.iter().enumerate() {
        let table = format!("f{i}");
        doris
            .sql(&format!("CREATE TABLE test.{table} ({columns}) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"));
        let mut w = writer(&doris, &dir.path().join(&table), &format!("test.{table}"), format);
        w.write(&batch).await.unwrap_or_else(|e| panic!("{format}: {e:#}"));
        commit(&doris, w.prepare_commit().await.unwrap_or_else(|e| panic!("{format}: {e:#}"))).await;
        let got = doris.sql(&format!("SELECT * FROM test.{table} ORDER BY id"));
        assert_eq!(got.len(), 2, "{format}: {got:?}");
        assert!(got[0] == "1\ttab\\there? no: ünïcode\t12.50\t2024-02-29\t2024-02-29 23:59:58\t1", "{format}: {got:?}");
        match &expected {
            None => expected = Some(got),
            Some(e) => assert_eq!(&got, e, "{format}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_columns_update_only_what_they_name_and_group_commit_sends_no_label() {
    let doris = Doris::start().await;
    doris.sql(
        "CREATE TABLE test.p (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&doris, &dir.path().join("full"), "test.p", "");
    let full = [(RowKind::Insert, vec![Value::Int(1), Value::Str("ann"), Value::Int(30)])];
    w.write(&rows("id INT, name VARCHAR(32), age INT", &full)).await.unwrap();
    commit(&doris, w.prepare_commit().await.unwrap()).await;
    let mut w = writer(&doris, &dir.path().join("partial"), "test.p", "properties.partial_columns = \"true\"");
    w.write(&rows("id INT, age INT", &[(RowKind::Insert, vec![Value::Int(1), Value::Int(31)])])).await.unwrap();
    commit(&doris, w.prepare_commit().await.unwrap()).await;
    assert_eq!(doris.sql("SELECT id, name, age FROM test.p"), ["1\tann\t31"]);

    let mut w = writer(&doris, &dir.path().join("gc"), "test.t", "properties.group_commit = \"sync_mode\"");
    w.write(&rows(PEOPLE, &[person(RowKind::Insert, 9, "g")])).await.unwrap();
    // Group commit loads carry no label, so they are not two-phase: nothing to commit.
    assert_eq!(w.prepare_commit().await.unwrap(), []);
    assert_eq!(doris.sql("SELECT id, name FROM test.t"), ["9\tg"]);
    let labels: Vec<String> = doris.h().engine().lock().txns.values().map(|t| t.label.clone()).collect();
    assert!(labels.iter().any(|l| l.starts_with("group_commit_")), "{labels:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_routed_to_another_table_get_their_own_load() {
    let doris = Doris::start().await;
    doris.sql("CREATE TABLE test.other (id INT, name VARCHAR(32)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1");
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&doris, dir.path(), "test.t", "");
    w.write(&rows(PEOPLE, &[person(RowKind::Insert, 1, "default")])).await.unwrap();
    w.write(&rows(PEOPLE, &[person(RowKind::Insert, 2, "routed")]).with_table("test.other")).await.unwrap();
    let txns = w.prepare_commit().await.unwrap();
    let mut tables: Vec<&str> = txns.iter().map(|t| t.table.as_str()).collect();
    tables.sort();
    assert_eq!(tables, ["other", "t"]);
    commit(&doris, txns).await;
    assert_eq!(doris.sql("SELECT name FROM test.t"), ["default"]);
    assert_eq!(doris.sql("SELECT name FROM test.other"), ["routed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_open_loads_the_least_recently_written_load_is_ended_and_joins_the_checkpoint() {
    let doris = Doris::start().await;
    for t in ["a", "b", "c"] {
        doris.sql(&format!(
            "CREATE TABLE test.{t} (id INT, name VARCHAR(32)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&doris, dir.path(), "test.a", "max_open_loads = 2");
    for (i, t) in ["test.a", "test.b", "test.c", "test.a"].iter().enumerate() {
        w.write(&rows(PEOPLE, &[person(RowKind::Insert, i as i64, t)]).with_table(*t)).await.unwrap();
        let open: Vec<String> = doris.open_txns().into_iter().filter(|t| t.contains("Prepare")).collect();
        assert!(open.len() <= 2, "write {i}: {open:?}");
    }
    // a (ended when c opened), b (ended when a opened again), then c and the second a at the barrier.
    let txns = w.prepare_commit().await.unwrap();
    let mut tables: Vec<&str> = txns.iter().map(|t| t.table.as_str()).collect();
    tables[2..].sort_unstable();
    assert_eq!(tables, ["a", "b", "a", "c"], "the two ended early first, then the barrier's (any order)");
    commit(&doris, txns).await;
    assert_eq!(doris.sql("SELECT id FROM test.a ORDER BY id"), ["0", "3"]);
    assert_eq!(doris.sql("SELECT id FROM test.b UNION ALL SELECT id FROM test.c ORDER BY id"), ["1", "2"]);
}

/// A schema change reaching the Doris sink: a table it has never seen is created, a new column
/// is added, and rows of each schema land in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_creates_a_missing_table_and_alters_it_when_columns_change() {
    use sluice::runtime::{Alter, SchemaChange, TableId};
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"ddl\"\n[doris]\nfenodes = {}\n[[source]]\ntype = \"datagen\"\nschema = \"id INT\"\n[[sink]]\ntype = \"doris\"\ntable = \"test.users\"\n",
        doris.fenodes()
    );
    let path = crate::common::pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let sink = &prepared.sinks[0].component;
    let mut w = sink.writer(WriterContext { worker: 0, run: 1, checkpoint: 1 }).await.unwrap();
    let table = TableId::new("app.users");
    let change = |columns: &str, alter: Vec<Alter>| SchemaChange {
        table: table.clone(),
        schema: arrow_schema(&parse_columns(columns).unwrap()),
        primary_key: vec!["id".into()],
        ddl: None,
        alter,
        resumed: false,
    };
    w.schema_change(&change("id INT NOT NULL, name VARCHAR(32)", vec![])).await.unwrap();
    let info = doris.sql("SHOW CREATE TABLE test.users").join(" ");
    assert!(info.contains("UNIQUE KEY(`id`)"), "{info}");
    w.write(&table, &rows(PEOPLE, &[person(RowKind::Insert, 1, "ann")])).await.unwrap();
    // The runtime commits what came before a schema change first (Doris aborts a pre-committed
    // load whose table changes).
    let committables = w.prepare_commit(1).await.unwrap();
    assert_eq!(sink.committer().commit(1, &[committables]).await.unwrap(), 1);
    let age = Alter::AddColumn { name: "age".into(), default: None, comment: None };
    w.schema_change(&change("id INT NOT NULL, name VARCHAR(32), age INT", vec![age])).await.unwrap();
    let mut b = BatchBuilder::new(arrow_schema(&parse_columns("id INT, name VARCHAR(32), age INT").unwrap())).unwrap();
    b.push(RowKind::Insert, &[Value::Int(2), Value::Str("bob"), Value::Int(40)]).unwrap();
    w.write(&table, &b.finish().unwrap()).await.unwrap();
    let committables = w.prepare_commit(2).await.unwrap();
    assert_eq!(sink.committer().commit(2, &[committables]).await.unwrap(), 1);
    assert_eq!(doris.sql("SELECT id, name, age FROM test.users ORDER BY id"), ["1\tann\tNULL", "2\tbob\t40"]);
    // A type change, then the same change replayed (a crash before its checkpoint): Doris refuses
    // a change that changes nothing, so the replay must not send it again.
    let widen = Alter::ModifyColumn { name: "name".into(), from: "VARCHAR(32)".into() };
    let wider = change("id INT NOT NULL, name VARCHAR(64), age INT", vec![widen]);
    let name_type = || doris.sql("DESC test.users").into_iter().find(|r| r.starts_with("name\t")).unwrap();
    let before = name_type();
    w.schema_change(&wider).await.unwrap();
    let after = name_type();
    assert_ne!(after, before);
    w.schema_change(&wider).await.unwrap();
    assert_eq!(name_type(), after);
    assert_eq!(doris.sql("SELECT id, name, age FROM test.users ORDER BY id"), ["1\tann\tNULL", "2\tbob\t40"]);
}
