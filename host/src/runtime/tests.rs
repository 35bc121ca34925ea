//! The runtime with an in-memory source and sink: no Doris, no plugin.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use tokio::sync::watch;

use super::*;
use crate::Batch;

const ROWS: u64 = 600;
const BATCH: u64 = 10;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]))
}

/// Worker `w` of `n` produces ids `w`, `w + n`, … below [`ROWS`], a batch every 10 ms.
struct Numbers;

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Count {
    batches: u64,
}

impl Position for Count {}

struct NumbersReader {
    worker: u64,
    n: u64,
    batches: u64,
    table: TableId,
}

#[async_trait]
impl Source for Numbers {
    fn schema(&self) -> Option<SchemaRef> {
        Some(schema())
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        Ok(Box::new(NumbersSplits(restored.len() as u64)))
    }

    fn describe(&self) -> String {
        "numbers".into()
    }
}

struct NumbersSplits(u64);

#[async_trait]
impl SplitEnumerator for NumbersSplits {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let batches = Count::restore(position, "numbers")?.batches;
        Ok(Box::new(NumbersReader { worker: worker as u64, n: self.0, batches, table: TableId::new("numbers") }))
    }
}

#[async_trait]
impl SourceReader for NumbersReader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        let first = self.batches * BATCH;
        let ids: Vec<i64> = (first..first + BATCH)
            .map(|i| i * self.n + self.worker)
            .filter(|id| *id < ROWS)
            .map(|v| v as i64)
            .collect();
        if ids.is_empty() {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.batches += 1;
        let data = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(ids))])?;
        Ok(Some(Event::data(&self.table, Batch::new(data))))
    }

    fn position(&self) -> serde_json::Value {
        Count { batches: self.batches }.to_value()
    }
}

/// What the memory sink saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Committed ids by (checkpoint, worker): committing twice changes nothing.
    committed: Mutex<BTreeMap<(u64, usize), Vec<i64>>>,
    /// Commit calls, as checkpoint ids.
    commits: Mutex<Vec<u64>>,
    /// Failures still to inject: a restartable write failure at this id.
    fail_write_at: Mutex<Option<i64>>,
    /// Refuse every write (restartable).
    fail_always: AtomicBool,
    /// A fatal commit failure of this checkpoint, once.
    fail_commit_of: Mutex<Option<u64>>,
    /// Recoveries, with what they were told was committed.
    recovered: Mutex<Vec<usize>>,
    /// The state dir's checkpoint was durable at each commit.
    durable_at_commit: AtomicBool,
    state: Mutex<Option<Arc<dyn crate::state::CheckpointStore>>>,
    rows_written: AtomicU64,
}

struct MemorySink(Arc<Seen>);

struct MemoryWriter {
    seen: Arc<Seen>,
    worker: usize,
    open: Vec<i64>,
}

#[async_trait]
impl Sink for MemorySink {
    fn claims(&self) -> Option<&str> {
        None
    }

    async fn writer(&self, ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>> {
        Ok(Box::new(MemoryWriter { seen: self.0.clone(), worker: ctx.worker, open: Vec::new() }))
    }

    fn committer(&self) -> &dyn Committer {
        self
    }

    fn max_restarts(&self) -> Option<u32> {
        Some(2)
    }

    async fn check(&self, _schema: Option<&SchemaRef>) -> anyhow::Result<String> {
        Ok("memory".into())
    }
}

#[async_trait]
impl SinkWriter for MemoryWriter {
    async fn write(&mut self, _table: &TableId, batch: &Batch) -> anyhow::Result<()> {
        let ids = batch.data.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        for id in ids.iter().flatten() {
            let mut fail = self.seen.fail_write_at.lock().unwrap();
            if *fail == Some(id) || (id == 0 && self.seen.fail_always.load(Ordering::Relaxed)) {
                *fail = None;
                return Err(Restartable::error(format!("the memory sink refused id {id}")));
            }
            self.open.push(id);
        }
        self.seen.rows_written.fetch_add(ids.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn prepare_commit(&mut self, _checkpoint: u64) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::json!({ "worker": self.worker, "ids": std::mem::take(&mut self.open) }))
    }
}

#[async_trait]
impl Committer for MemorySink {
    async fn commit(&self, id: u64, committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        let seen = &self.0;
        seen.commits.lock().unwrap().push(id);
        let durable = seen.state.lock().unwrap().as_ref().unwrap().dir().unwrap().checkpoint().unwrap().map(|c| c.id);
        if durable != Some(id) {
            seen.durable_at_commit.store(false, Ordering::Relaxed);
        }
        if seen.fail_commit_of.lock().unwrap().take_if(|c| *c == id).is_some() {
            anyhow::bail!("the memory sink cannot commit checkpoint {id} (a crash)");
        }
        let mut committed = seen.committed.lock().unwrap();
        for c in committables {
            let worker = c["worker"].as_u64().unwrap() as usize;
            let ids: Vec<i64> = serde_json::from_value(c["ids"].clone())?;
            committed.insert((id, worker), ids);
        }
        Ok(committables.len() as u64)
    }

    async fn recover(&self, committed: &[serde_json::Value]) -> anyhow::Result<()> {
        self.0.recovered.lock().unwrap().push(committed.len());
        Ok(())
    }
}

fn prepared(dir: &std::path::Path, seen: &Arc<Seen>) -> Prepared {
    seen.state.lock().unwrap().take();
    let state: Arc<dyn crate::state::CheckpointStore> = Arc::new(crate::state::StateDir::open(dir).unwrap());
    *seen.state.lock().unwrap() = Some(state.clone());
    seen.durable_at_commit.store(true, Ordering::Relaxed);
    Prepared {
        file: dir.join("pipeline.toml"),
        name: "memory".into(),
        parallelism: 2,
        checkpoint_interval: Duration::from_millis(100),
        checkpoint_timeout: Duration::from_secs(600),
        state,
        source: Named { name: "numbers".into(), component: Arc::new(Numbers) },
        transforms: Vec::new(),
        sinks: vec![Named { name: "memory".into(), component: Arc::new(MemorySink(seen.clone())) }],
        dead_letter: None,
        stats: Arc::new(crate::metrics::Stats::default()),
        verify: None,
    }
}

async fn run_to_end(p: &Prepared) -> anyhow::Result<RunReport> {
    let (_stop, rx) = watch::channel(false);
    run(p, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await
}

/// Every id committed once, in all.
fn committed_once(seen: &Seen) {
    let mut all: Vec<i64> = seen.committed.lock().unwrap().values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..ROWS as i64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_checkpoint_commits_what_its_barrier_closed_after_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let p = prepared(dir.path(), &seen);
    let report = run_to_end(&p).await.unwrap();
    assert!(report.finished && report.restarts == 0, "{report:?}");
    assert!(report.checkpoint >= 2, "a run of about 300 ms takes checkpoints every 100 ms: {report:?}");
    assert!(seen.durable_at_commit.load(Ordering::Relaxed), "a commit ran before its checkpoint was written");
    committed_once(&seen);
    // Aligned barriers: what a worker committed at checkpoint n is exactly the batches its
    // position moved over since checkpoint n - 1, in order.
    let committed = seen.committed.lock().unwrap();
    for w in 0..2usize {
        let mine: Vec<i64> =
            committed.iter().filter(|((_, cw), _)| *cw == w).flat_map(|(_, ids)| ids.clone()).collect();
        let expected: Vec<i64> = (0..ROWS as i64).filter(|id| *id as usize % 2 == w).collect();
        assert_eq!(mine, expected, "worker {w}");
    }
    let cp = p.state.dir().unwrap().checkpoint().unwrap().unwrap();
    assert!(cp.finished && cp.committed);
    assert_eq!(cp.sources["numbers"].len(), 2);
    assert_eq!(seen.recovered.lock().unwrap().as_slice(), [0], "one recovery, of a fresh state dir");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_commits_the_last_checkpoint_again_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    *seen.fail_commit_of.lock().unwrap() = Some(2);
    let p = prepared(dir.path(), &seen);
    let e = run_to_end(&p).await.unwrap_err().to_string();
    assert_eq!(e, "the memory sink cannot commit checkpoint 2 (a crash)");
    let cp = p.state.dir().unwrap().checkpoint().unwrap().unwrap();
    assert_eq!((cp.id, cp.committed), (2, false), "checkpoint 2 is durable, its commit is not done");
    drop(p);

    let p = prepared(dir.path(), &seen);
    let report = run_to_end(&p).await.unwrap();
    assert!(report.finished, "{report:?}");
    let commits = seen.commits.lock().unwrap().clone();
    assert_eq!(&commits[..3], [1, 2, 2], "recovery commits checkpoint 2 again before anything else");
    assert_eq!(seen.recovered.lock().unwrap().as_slice(), [0, 2], "the second recovery knows both workers' commits");
    committed_once(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sink_restarts_from_the_last_checkpoint_without_losing_or_repeating_rows() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    *seen.fail_write_at.lock().unwrap() = Some(451);
    let p = prepared(dir.path(), &seen);
    let report = run_to_end(&p).await.unwrap();
    assert_eq!((report.finished, report.restarts), (true, 1), "{report:?}");
    assert!(seen.rows_written.load(Ordering::Relaxed) > ROWS, "rows after the checkpoint were written again");
    committed_once(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_keeps_failing_is_given_up_after_its_max_retries() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    seen.fail_always.store(true, Ordering::Relaxed);
    let p = prepared(dir.path(), &seen);
    let e = format!("{:#}", run_to_end(&p).await.unwrap_err());
    assert_eq!(e, "gave up after 2 restarts (`max_retries`): the memory sink refused id 0");
    assert_eq!(p.stats.restarts.load(Ordering::Relaxed), 2);
    assert!(!is_restartable(&anyhow::anyhow!("plain")));
    assert!(is_restartable(&Restartable::error("x").context("while writing")));
}

/// One table whose schema changes between two batches, for the schema-change test.
struct Changing;

struct ChangingReader {
    events: std::collections::VecDeque<Event>,
}

fn table_batch(columns: &[&str], rows: usize) -> Batch {
    let schema =
        Arc::new(Schema::new(columns.iter().map(|c| Field::new(*c, DataType::Int64, false)).collect::<Vec<_>>()));
    let arrays =
        columns.iter().map(|_| Arc::new(Int64Array::from(vec![1i64; rows])) as arrow::array::ArrayRef).collect();
    Batch::new(RecordBatch::try_new(schema, arrays).unwrap())
}

#[async_trait]
impl Source for Changing {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    async fn enumerator(&self, _restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        Ok(Box::new(ChangingSplits))
    }

    fn describe(&self) -> String {
        "changing".into()
    }
}

struct ChangingSplits;

#[async_trait]
impl SplitEnumerator for ChangingSplits {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        assert!(worker == 0 && position.is_none());
        let t = TableId::new("app.users");
        let change = |cols: &[&str]| {
            let b = table_batch(cols, 0);
            Event::SchemaChange(SchemaChange::announce(&t, b.data.schema(), vec!["id".into()]))
        };
        let events = [
            change(&["id"]),
            Event::data(&t, table_batch(&["id"], 3)),
            change(&["id", "x"]),
            Event::data(&t, table_batch(&["id", "x"], 2)),
        ];
        Ok(Box::new(ChangingReader { events: events.into() }))
    }
}

#[async_trait]
impl SourceReader for ChangingReader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        Ok(self.events.pop_front())
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "left": self.events.len() })
    }
}

/// Counts rows per instance and hands its count on as state.
struct Counting(Arc<Mutex<Vec<String>>>);

struct CountingInstance {
    schema: SchemaRef,
    rows: u64,
}

impl Transform for Counting {
    fn instance(
        &self,
        _worker: usize,
        table: &TableId,
        input: &SchemaRef,
        state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        let rows = state.and_then(|s| s.as_u64()).unwrap_or(0);
        self.0.lock().unwrap().push(format!("instance {table} {} columns, state {rows}", input.fields().len()));
        Ok(Box::new(CountingInstance { schema: input.clone(), rows }))
    }

    fn describe(&self) -> String {
        "counting".into()
    }
}

#[async_trait]
impl TransformInstance for CountingInstance {
    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        self.rows += batch.num_rows() as u64;
        Ok(vec![batch])
    }

    fn snapshot(&self) -> Option<serde_json::Value> {
        Some(self.rows.into())
    }
}

/// A sink that writes down what reaches it, in order.
struct Recording(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Sink for Recording {
    fn claims(&self) -> Option<&str> {
        None
    }

    async fn writer(&self, _ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>> {
        Ok(Box::new(Recording(self.0.clone())))
    }

    fn committer(&self) -> &dyn Committer {
        self
    }

    async fn check(&self, _schema: Option<&SchemaRef>) -> anyhow::Result<String> {
        Ok("recording".into())
    }
}

#[async_trait]
impl SinkWriter for Recording {
    async fn write(&mut self, table: &TableId, batch: &Batch) -> anyhow::Result<()> {
        self.0.lock().unwrap().push(format!(
            "data {table} {} rows × {} columns",
            batch.num_rows(),
            batch.data.num_columns()
        ));
        Ok(())
    }

    async fn schema_change(&mut self, change: &SchemaChange) -> anyhow::Result<()> {
        self.0.lock().unwrap().push(format!("schema {} {} columns", change.table, change.schema.fields().len()));
        Ok(())
    }

    async fn prepare_commit(&mut self, _checkpoint: u64) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::Value::Null)
    }
}

#[async_trait]
impl Committer for Recording {
    async fn commit(&self, _id: u64, _committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        Ok(0)
    }

    async fn recover(&self, _committed: &[serde_json::Value]) -> anyhow::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_reaches_the_sink_in_order_and_makes_new_transform_instances_that_keep_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let p = Prepared {
        file: dir.path().join("pipeline.toml"),
        name: "changing".into(),
        parallelism: 1,
        checkpoint_interval: Duration::from_secs(10),
        checkpoint_timeout: Duration::from_secs(600),
        state: Arc::new(crate::state::StateDir::open(dir.path()).unwrap()),
        source: Named { name: "changing".into(), component: Arc::new(Changing) },
        transforms: vec![Named { name: "counting".into(), component: Arc::new(Counting(log.clone())) }],
        sinks: vec![Named { name: "recording".into(), component: Arc::new(Recording(log.clone())) }],
        dead_letter: None,
        stats: Arc::new(crate::metrics::Stats::default()),
        verify: None,
    };
    let report = run_to_end(&p).await.unwrap();
    assert!(report.finished);
    assert!(report.checkpoint >= 3, "each schema change waits for a checkpoint of what came before it: {report:?}");
    assert_eq!(
        log.lock().unwrap().as_slice(),
        [
            "instance app.users 1 columns, state 0",
            "schema app.users 1 columns",
            "data app.users 3 rows × 1 columns",
            "instance app.users 2 columns, state 3",
            "schema app.users 2 columns",
            "data app.users 2 rows × 2 columns",
        ]
    );
    // The transform's state is checkpointed per table.
    let cp = p.state.dir().unwrap().checkpoint().unwrap().unwrap();
    assert_eq!(cp.transforms["counting"], [serde_json::json!({ "app.users": 5 })]);
}

/// Rejects the first row whose id is a multiple of 7, as a plugin naming a bad row does.
struct RejectSevens;

impl Transform for RejectSevens {
    fn instance(
        &self,
        _worker: usize,
        _table: &TableId,
        input: &SchemaRef,
        _state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        Ok(Box::new(RejectSevensInstance(input.clone())))
    }

    fn describe(&self) -> String {
        "reject-sevens".into()
    }
}

struct RejectSevensInstance(SchemaRef);

#[async_trait]
impl TransformInstance for RejectSevensInstance {
    fn output_schema(&self) -> &SchemaRef {
        &self.0
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        let ids = batch.data.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        match ids.iter().position(|id| id.is_some_and(|id| id % 7 == 0)) {
            Some(row) => Err(dead_letter::RowRejected {
                plugin: "reject-sevens".into(),
                row,
                reason: "a multiple of 7".into(),
                text: format!("plugin `reject-sevens`: row {row}: a multiple of 7"),
            }
            .into()),
            None => Ok(vec![batch]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_transform_rejects_are_committed_once_as_dead_letters_and_the_rest_once_in_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    // A restart in the middle: the rows and dead letters of the interval it cuts are found again.
    *seen.fail_write_at.lock().unwrap() = Some(451);
    let dead = crate::sinks::file::JsonLines::open(dir.path().join("dead.jsonl"), "run1").unwrap();
    let path = dead.path().to_path_buf();
    let mut p = prepared(dir.path(), &seen);
    p.transforms = vec![Named { name: "reject".into(), component: Arc::new(RejectSevens) }];
    p.dead_letter = Some(Named { name: "dead_letter".into(), component: Arc::new(dead) });
    let report = run_to_end(&p).await.unwrap();
    assert_eq!((report.finished, report.restarts), (true, 1), "{report:?}");
    let mut kept: Vec<i64> = seen.committed.lock().unwrap().values().flatten().copied().collect();
    kept.sort_unstable();
    assert_eq!(kept, (0..ROWS as i64).filter(|id| id % 7 != 0).collect::<Vec<_>>());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut letters: Vec<i64> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!((v["stage"].as_str(), v["reason"].as_str()), (Some("plugin"), Some("a multiple of 7")), "{v}");
            v["record"]["id"].as_i64().unwrap()
        })
        .collect();
    letters.sort_unstable();
    assert_eq!(letters, (0..ROWS as i64).filter(|id| id % 7 == 0).collect::<Vec<_>>());
    // Counted in /metrics (letters of the interval the restart cut are counted when found again).
    let counted = p.stats.dead_letters.load(Ordering::Relaxed);
    assert!(counted as usize >= letters.len(), "{counted}");
    let text = crate::metrics::metrics_text(&p.stats, "memory");
    assert!(text.contains(&format!("sluice_dead_letters_total{{pipeline=\"memory\"}} {counted}\n")), "{text}");
    // The dead letters are the last sink of each checkpoint.
    let cp = p.state.dir().unwrap().checkpoint().unwrap().unwrap();
    assert!(cp.sinks.contains_key("dead_letter"), "{:?}", cp.sinks.keys().collect::<Vec<_>>());
}
