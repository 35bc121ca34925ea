//! The runtime: workers, bounded channels, checkpoint barriers and the coordinator.
//!
//! Each of `parallelism` workers owns a source, its own plugin instances and its own sink writers.
//! The source feeds its worker through a channel of [`CHANNEL_BATCHES`] batches, and each sink
//! writer holds at most `buffer_count × buffer_size` bytes per table, so a slow Doris slows the
//! sources instead of filling memory.
//!
//! Checkpoint *n*: the coordinator asks every source for a barrier; a source sends it after its
//! current batch together with its position; the worker finishes its open loads (pre-committing
//! them) and acknowledges with the transactions. Once every worker has acknowledged, the
//! checkpoint is written to the state dir, and only then are its transactions committed.

pub mod dedup;
pub mod source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::datatypes::SchemaRef;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::Batch;
use crate::doris::sink::{DorisWriter, SinkError, SinkMetrics, SinkSettings};
use crate::doris::{Credentials, StreamLoadClient, TxnOutcome};
use crate::lookup::{LookupJoin, LookupMetrics, LookupTable};
use crate::pipeline::{PipelineFile, SinkConfig, TransformConfig};
use crate::state::{CHECKPOINT_VERSION, Checkpoint, StateDir, Txn};
use crate::wasm::{ComponentCache, Plugin, PluginRuntime, TransformInstance};

/// Batches that may wait between a source and its worker.
pub const CHANNEL_BATCHES: usize = 4;

/// How `sluice run` behaves around the pipeline.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// No status lines.
    pub quiet: bool,
    /// Time between status lines (default 5s).
    pub status_interval: Option<Duration>,
}

/// Counters of one run, shared with status lines and `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub rows_read: AtomicU64,
    pub rows_transformed: AtomicU64,
    pub rows_written: AtomicU64,
    pub checkpoints: AtomicU64,
    pub txns_committed: AtomicU64,
    pub restarts: AtomicU64,
    /// Commits tried again after a failure.
    pub commit_retries: AtomicU64,
    pub sink: Arc<SinkMetrics>,
    /// Each lookup transform's dimension table and counters.
    pub lookups: Vec<(String, Arc<LookupMetrics>)>,
    /// Tablets of the current run's snapshot scans.
    pub tablets: Arc<source::TabletProgress>,
}

/// What a finished run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The last completed checkpoint.
    pub checkpoint: u64,
    /// Whether every source was exhausted (else the run was stopped).
    pub finished: bool,
    /// Restarts from the last checkpoint after failures.
    pub restarts: u64,
    /// Commits tried again after a failure.
    pub commit_retries: u64,
    /// Batch-mode loads tried again under their label.
    pub load_retries: u64,
}

enum Message {
    Data(Batch),
    Barrier { id: u64, position: serde_json::Value, exhausted: bool },
}

struct Ack {
    worker: usize,
    id: u64,
    position: serde_json::Value,
    exhausted: bool,
    txns: Vec<Txn>,
}

/// A barrier request: checkpoint `id`; `last` = the sources stop after it.
#[derive(Debug, Clone, Copy, Default)]
struct Trigger {
    id: u64,
    last: bool,
}

/// A transform of the pipeline, ready for each worker to make its own instance.
pub enum PreparedTransform {
    /// A WebAssembly plugin and the settings for its `init`.
    Wasm(Plugin, Vec<(String, String)>),
    /// A lookup join; its connection pool, cache and counters are shared by the workers.
    Lookup(Arc<LookupTable>),
}

impl PreparedTransform {
    /// An instance for batches of `input`. Blocks while a plugin is instantiated.
    pub fn instance(&self, input: &SchemaRef) -> anyhow::Result<RunningTransform> {
        Ok(match self {
            PreparedTransform::Wasm(plugin, config) => RunningTransform::Wasm(plugin.transform(config, input)?),
            PreparedTransform::Lookup(t) => RunningTransform::Lookup(LookupJoin::new(t.clone(), input)?),
        })
    }

    /// What it is, for `sluice check`.
    pub fn describe(&self) -> String {
        match self {
            PreparedTransform::Wasm(plugin, _) => plugin.name().to_string(),
            PreparedTransform::Lookup(t) => format!("lookup: {}", t.describe()),
        }
    }
}

/// One worker's instance of a transform.
pub enum RunningTransform {
    Wasm(TransformInstance),
    Lookup(LookupJoin),
}

impl RunningTransform {
    pub fn output_schema(&self) -> &SchemaRef {
        match self {
            RunningTransform::Wasm(t) => t.output_schema(),
            RunningTransform::Lookup(l) => l.output_schema(),
        }
    }

    /// The lookup join, if this is one.
    pub fn lookup(&self) -> Option<&LookupJoin> {
        match self {
            RunningTransform::Lookup(l) => Some(l),
            RunningTransform::Wasm(_) => None,
        }
    }

    /// Transform one batch: a plugin runs on this thread, a lookup awaits its queries.
    pub async fn process(&mut self, batch: &Batch) -> anyhow::Result<Vec<Batch>> {
        Ok(match self {
            RunningTransform::Wasm(t) => tokio::task::block_in_place(|| t.process(batch))?,
            RunningTransform::Lookup(l) => vec![l.process(batch).await?],
        })
    }
}

/// Everything a run needs that outlives a restart.
pub struct Prepared {
    pub file: PathBuf,
    pub pipeline: PipelineFile,
    pub base_dir: PathBuf,
    pub state: Arc<Mutex<StateDir>>,
    pub client: StreamLoadClient,
    pub transforms: Vec<PreparedTransform>,
    pub sinks: Vec<Arc<SinkSettings>>,
    pub source_schema: SchemaRef,
    /// The Doris connection as sources see it.
    pub doris: source::DorisContext,
    /// Writes the changelog's next start to the offset table after each checkpoint.
    pub offsets: Option<crate::doris::offsets::OffsetPublisher>,
    pub stats: Arc<Stats>,
    pub read_timeout: Duration,
}

/// The state dir of a pipeline file: `pipeline.state_dir`, else `.sluice/<name>` beside the file.
pub fn state_dir_of(file: &Path, pipeline: &PipelineFile) -> PathBuf {
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match &pipeline.pipeline.state_dir {
        Some(d) => base.join(d),
        None => base.join(".sluice").join(&pipeline.pipeline.name),
    }
}

/// TOML values as the text a plugin's `init` receives.
pub fn plugin_config(config: &BTreeMap<String, toml::Value>) -> Vec<(String, String)> {
    config
        .iter()
        .map(|(k, v)| match v {
            toml::Value::String(s) => (k.clone(), s.clone()),
            other => (k.clone(), other.to_string()),
        })
        .collect()
}

/// Open the state dir, load the plugins and resolve the sinks: everything short of moving data.
pub async fn prepare(file: &Path, pipeline: PipelineFile, fenodes: Vec<String>) -> anyhow::Result<Prepared> {
    let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let state_path = state_dir_of(file, &pipeline);
    let state = StateDir::open(&state_path)?;
    let pipeline_id = state.pipeline_id()?;
    let doris = pipeline.doris.clone().context("a Doris source or sink needs a [doris] section")?;
    let password = match (&doris.password, &doris.password_env) {
        (Some(p), _) => p.clone(),
        (None, Some(var)) => std::env::var(var).with_context(|| {
            format!("{}: doris.password_env: the environment variable `{var}` is not set", file.display())
        })?,
        (None, None) => String::new(),
    };
    let read_timeout = doris.request_read_timeout.0;
    let client = StreamLoadClient::new(
        fenodes,
        Credentials::new(doris.username.clone(), password.clone()),
        doris.request_connect_timeout.0,
        read_timeout,
    )?;
    let client = if doris.auto_redirect {
        client
    } else if !doris.benodes.is_empty() {
        client.with_backends(doris.benodes.clone())
    } else {
        let bes = client.discover_backends().await?;
        if bes.is_empty() {
            bail!("`auto_redirect = false` and no `benodes`: the FE lists no alive BE in /api/backends");
        }
        client.with_backends(bes)
    };
    let default_prefix = format!("sluice_{}_{pipeline_id}", pipeline.pipeline.name);
    let default_prefix: String = default_prefix.chars().take(64).collect();
    let sinks = pipeline
        .sink
        .iter()
        .filter_map(|s| match s {
            SinkConfig::Doris(d) => Some(d),
            SinkConfig::Blackhole(_) => None,
        })
        .map(|d| {
            SinkSettings::new(d, &default_prefix, read_timeout)
                .map(Arc::new)
                .map_err(|(key, msg)| anyhow::anyhow!("{}: {key}: {msg}", file.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let runtime = PluginRuntime::new(ComponentCache::default_location())?;
    let mut transforms = Vec::new();
    let mut lookups = Vec::new();
    for t in &pipeline.transform {
        match t {
            TransformConfig::Wasm(w) => {
                let plugin = runtime.load(&base_dir.join(&w.plugin), w.limits.clone())?;
                transforms.push(PreparedTransform::Wasm(plugin, plugin_config(&w.config)));
            }
            TransformConfig::Lookup(l) => {
                let connections = l.jdbc.read.thread_size as usize * pipeline.pipeline.parallelism as usize;
                let table = LookupTable::connect(l, &doris, &password, connections)
                    .await
                    .with_context(|| format!("{}: transform", file.display()))?;
                lookups.push((l.table.clone(), table.metrics.clone()));
                transforms.push(PreparedTransform::Lookup(table));
            }
        }
    }
    let flight_addr = match pipeline.source.first() {
        Some(crate::pipeline::SourceConfig::Doris(d)) if d.flight_sql_port > 0 => {
            Some(format!("{}:{}", client.fe_host(), d.flight_sql_port))
        }
        Some(crate::pipeline::SourceConfig::Doris(_)) => {
            client.flight_sql_port().await?.map(|port| format!("{}:{port}", client.fe_host()))
        }
        _ => None,
    };
    let offsets = match pipeline.source.first() {
        Some(crate::pipeline::SourceConfig::Doris(d)) => match (&d.changelog.offset_table, &d.changelog.consumer_id) {
            (Some(table), Some(consumer)) => {
                let url = doris.jdbc_url.as_deref().context("changelog.offset_table needs doris.jdbc_url")?;
                Some(crate::doris::offsets::OffsetTable::new(url, &doris.username, &password, table, consumer)?)
            }
            _ => None,
        },
        _ => None,
    };
    let tablets = Arc::new(source::TabletProgress::default());
    let doris_ctx = source::DorisContext {
        client: client.clone(),
        flight_addr,
        timeout: doris.request_connect_timeout.0,
        retries: doris.request_retries,
        offsets: offsets.clone(),
        tablets: tablets.clone(),
        snapshot_done: None,
    };
    let source_schema = source::declared_schema(&pipeline.source[0], Some(&doris_ctx))
        .await
        .with_context(|| format!("{}: source", file.display()))?;
    Ok(Prepared {
        file: file.to_path_buf(),
        pipeline,
        base_dir,
        state: Arc::new(Mutex::new(state)),
        client,
        transforms,
        sinks,
        source_schema,
        doris: doris_ctx,
        offsets: offsets.map(|o| o.publisher()),
        stats: Arc::new(Stats { lookups, tablets, ..Stats::default() }),
        read_timeout,
    })
}

fn is_retryable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<SinkError>().is_some_and(|s| s.retryable))
}

/// Run the pipeline until its sources are exhausted or `stop` turns true. A retryable failure
/// (Doris unreachable, a failed load) restarts it from its last checkpoint, up to the sinks'
/// `max_retries` times in a row.
pub async fn run(p: &Prepared, opts: &RunOptions, stop: watch::Receiver<bool>) -> anyhow::Result<RunReport> {
    if p.pipeline.source.len() != 1 {
        bail!("{}: a pipeline reads one [[source]] (found {})", p.file.display(), p.pipeline.source.len());
    }
    let max_retries = p.sinks.iter().map(|s| s.max_retries).max().unwrap_or(3);
    let mut failures = 0u32;
    loop {
        let started = p.stats.checkpoints.load(Ordering::Relaxed);
        match run_once(p, opts, stop.clone()).await {
            Ok((checkpoint, finished)) => {
                let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
                return Ok(RunReport {
                    checkpoint,
                    finished,
                    restarts: g(&p.stats.restarts),
                    commit_retries: g(&p.stats.commit_retries),
                    load_retries: g(&p.stats.sink.load_retries),
                });
            }
            Err(e) if is_retryable(&e) => {
                if p.stats.checkpoints.load(Ordering::Relaxed) > started {
                    failures = 0;
                }
                if failures >= max_retries {
                    return Err(e.context(format!("gave up after {failures} restarts (`max_retries`)")));
                }
                failures += 1;
                p.stats.restarts.fetch_add(1, Ordering::Relaxed);
                let wait = Duration::from_millis(500) * 2u32.pow(failures.min(6) - 1);
                tracing::warn!(
                    "{e:#}; restarting from the last checkpoint in {wait:?} (attempt {failures} of {max_retries})"
                );
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Commit the last checkpoint's transactions and abort every other labelled load; returns the
/// checkpoint to resume from.
async fn recover(p: &Prepared) -> anyhow::Result<(u64, Option<Checkpoint>)> {
    let (run, checkpoint, journal) = {
        let state = p.state.lock().expect("state lock");
        (state.next_run()?, state.checkpoint()?, state.journaled_labels()?)
    };
    if let Some(cp) = &checkpoint
        && cp.pipeline != p.pipeline.pipeline.name
    {
        bail!(
            "state dir {} belongs to pipeline `{}`, not `{}`; give this pipeline its own `pipeline.state_dir`",
            p.state.lock().expect("state lock").path().display(),
            cp.pipeline,
            p.pipeline.pipeline.name
        );
    }
    if let Some(cp) = &checkpoint
        && !cp.committed
    {
        commit_all(p, &cp.transactions).await?;
        let mut done = cp.clone();
        done.committed = true;
        p.state.lock().expect("state lock").write_checkpoint(&done)?;
    }
    let committed: Vec<&str> =
        checkpoint.iter().flat_map(|c| c.transactions.iter().map(|t| t.label.as_str())).collect();
    let mut aborted = 0;
    for entry in journal.iter().filter(|e| !committed.contains(&e.label.as_str())) {
        match p.client.abort_label(&entry.db, &entry.label).await {
            Ok(TxnOutcome::Done) => aborted += 1,
            Ok(TxnOutcome::AlreadyDone) => {}
            Err(e) => return Err(SinkError { message: e.to_string(), retryable: true }.into()),
        }
    }
    if aborted > 0 {
        tracing::info!("aborted {aborted} load(s) left open by an earlier run");
    }
    p.state.lock().expect("state lock").retain_labels(|_| false)?;
    Ok((run, checkpoint))
}

/// Commit `txns`: the loads of one table one after another in the order they were written (a
/// later load of a checkpoint may change rows an earlier one wrote), different tables at once.
async fn commit_all(p: &Prepared, txns: &[Txn]) -> anyhow::Result<()> {
    let mut tables: Vec<Vec<&Txn>> = Vec::new();
    for t in txns {
        match tables.iter_mut().find(|g| g[0].db == t.db && g[0].table == t.table) {
            Some(group) => group.push(t),
            None => tables.push(vec![t]),
        }
    }
    let groups = tables.into_iter().map(|group| async move {
        for t in group {
            commit_one(p, t).await?;
        }
        Ok::<(), SinkError>(())
    });
    for r in futures::future::join_all(groups).await {
        r?;
    }
    Ok(())
}

/// Commit one transaction, retrying what may pass on a second try.
async fn commit_one(p: &Prepared, t: &Txn) -> Result<(), SinkError> {
    let mut attempt = 0;
    loop {
        match p.client.commit(&t.db, t.txn_id).await {
            Ok(_) => return Ok(()),
            Err(e @ crate::doris::DorisError::Txn { .. })
                if e.to_string().contains("aborted") || e.to_string().contains("not found") =>
            {
                return Err(SinkError {
                    message: format!(
                        "cannot commit `{}.{}` label `{}`: {e}; the rows of that load are not in Doris",
                        t.db, t.table, t.label
                    ),
                    retryable: false,
                });
            }
            Err(e) if attempt < 5 => {
                attempt += 1;
                p.stats.commit_retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(label = %t.label, "commit failed, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt)).await;
            }
            Err(e) => return Err(SinkError { message: e.to_string(), retryable: true }),
        }
    }
}

fn transform_instances(p: &Prepared) -> anyhow::Result<Vec<RunningTransform>> {
    let mut schema = p.source_schema.clone();
    let mut out = Vec::new();
    for t in &p.transforms {
        let inst = t.instance(&schema)?;
        schema = inst.output_schema().clone();
        out.push(inst);
    }
    Ok(out)
}

async fn run_once(p: &Prepared, opts: &RunOptions, mut stop: watch::Receiver<bool>) -> anyhow::Result<(u64, bool)> {
    let (run, checkpoint) = recover(p).await?;
    let last_id = checkpoint.as_ref().map_or(0, |c| c.id);
    if let Some(cp) = &checkpoint
        && cp.finished
    {
        tracing::info!("the pipeline finished at checkpoint {last_id}; nothing to do");
        return Ok((last_id, true));
    }
    let n = p.pipeline.pipeline.parallelism as usize;
    let positions: Vec<Option<serde_json::Value>> =
        (0..n).map(|w| checkpoint.as_ref().and_then(|c| c.sources.get(w).cloned())).collect();
    if let Some(cp) = &checkpoint
        && cp.sources.len() != n
    {
        bail!(
            "checkpoint {} was taken with parallelism {}, the pipeline now says {n}; keep the parallelism, or start over with a new `pipeline.state_dir`",
            cp.id,
            cp.sources.len()
        );
    }
    let (trigger_tx, trigger_rx) = watch::channel(Trigger { id: last_id, last: false });
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<Ack>();
    let (exhausted_tx, mut exhausted_rx) = mpsc::unbounded_channel::<usize>();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    let mut total_rows = Some(0u64);
    // `initial` with several workers: worker 0 follows the changelog once every worker's part of
    // the snapshot is in a completed checkpoint.
    let (snapshot_done_tx, snapshot_done_rx) =
        watch::channel(checkpoint.is_some() && !snapshot_pending(positions.iter().map(Option::as_ref)));
    let mut doris = p.doris.clone();
    let reads_a_snapshot_first = matches!(
        p.pipeline.source.first(),
        Some(crate::pipeline::SourceConfig::Doris(d)) if d.scan.mode == crate::pipeline::ScanMode::Initial
    );
    if n > 1 && reads_a_snapshot_first {
        doris.snapshot_done = Some(snapshot_done_rx);
    }
    p.stats.tablets.reset();
    for (w, position) in positions.iter().enumerate() {
        let src =
            source::build(&p.pipeline.source[0], &p.base_dir, w as u32, n as u32, position.as_ref(), Some(&doris))
                .await?;
        total_rows = total_rows.zip(src.total_rows()).map(|(a, b)| a + b);
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        tasks.spawn(source_task(src, tx, trigger_rx.clone(), exhausted_tx.clone(), w, p.stats.clone()));
        let transforms = tokio::task::block_in_place(|| transform_instances(p))?;
        let writers = p
            .sinks
            .iter()
            .map(|s| {
                DorisWriter::new(
                    s.clone(),
                    p.client.clone(),
                    p.state.clone(),
                    p.stats.sink.clone(),
                    w as u32,
                    run,
                    last_id + 1,
                )
            })
            .collect();
        tasks.spawn(worker_task(rx, transforms, writers, ack_tx.clone(), w, p.stats.clone()));
    }
    drop(ack_tx);
    let _bar = progress_bar(opts, total_rows, p.stats.clone());

    let interval = p.pipeline.pipeline.checkpoint_interval.0;
    let status_every = opts.status_interval.unwrap_or(Duration::from_secs(5));
    let mut next_checkpoint = tokio::time::Instant::now() + interval;
    let mut next_status = tokio::time::Instant::now() + status_every;
    let mut pending: Option<(u64, Vec<Option<Ack>>, bool)> = None;
    let mut exhausted = vec![false; n];
    let mut stopping = false;
    let mut completed = last_id;
    let mut last_completed_at = Instant::now();
    loop {
        let want_trigger = pending.is_none() && (stopping || exhausted.iter().all(|e| *e));
        if want_trigger || (pending.is_none() && tokio::time::Instant::now() >= next_checkpoint) {
            let id = completed + 1;
            let last = stopping || exhausted.iter().all(|e| *e);
            trigger_tx.send_replace(Trigger { id, last });
            pending = Some((id, (0..n).map(|_| None).collect(), last));
            next_checkpoint = tokio::time::Instant::now() + interval;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next_checkpoint), if pending.is_none() => {}
            _ = tokio::time::sleep_until(next_status) => {
                next_status = tokio::time::Instant::now() + status_every;
                if !opts.quiet {
                    status_line(p, completed, last_completed_at);
                }
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    tracing::info!("stopping: taking a final checkpoint");
                    stopping = true;
                }
            }
            Some(w) = exhausted_rx.recv() => exhausted[w] = true,
            Some(ack) = ack_rx.recv() => {
                let Some((id, acks, last)) = pending.as_mut() else { bail!("a barrier acknowledged without a checkpoint") };
                if ack.id != *id {
                    bail!("worker {} acknowledged checkpoint {} while {id} was pending", ack.worker, ack.id);
                }
                let worker = ack.worker;
                if ack.exhausted {
                    exhausted[worker] = true;
                }
                acks[worker] = Some(ack);
                if acks.iter().all(Option::is_some) {
                    let (id, last) = (*id, *last);
                    let acks: Vec<Ack> = pending.take().expect("pending").1.into_iter().map(|a| a.expect("all acked")).collect();
                    let finished = acks.iter().all(|a| a.exhausted);
                    let snapshot_read = !snapshot_pending(acks.iter().map(|a| Some(&a.position)));
                    complete_checkpoint(p, run, id, acks, finished).await?;
                    if snapshot_read {
                        snapshot_done_tx.send_replace(true);
                    }
                    completed = id;
                    last_completed_at = Instant::now();
                    if last {
                        drop(trigger_tx);
                        while let Some(r) = tasks.join_next().await {
                            r??;
                        }
                        if !opts.quiet {
                            status_line(p, completed, last_completed_at);
                        }
                        return Ok((completed, finished));
                    }
                }
            }
            Some(done) = tasks.join_next() => {
                match done {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(e) => return Err(anyhow::anyhow!("a worker failed: {e}")),
                }
            }
        }
    }
}

/// Whether a position is missing or still in an `initial` snapshot.
fn snapshot_pending<'a>(mut positions: impl Iterator<Item = Option<&'a serde_json::Value>>) -> bool {
    positions.any(|p| p.is_none_or(|p| p.get("snapshot").is_some_and(|s| !s.is_null())))
}

async fn complete_checkpoint(p: &Prepared, run: u64, id: u64, acks: Vec<Ack>, finished: bool) -> anyhow::Result<()> {
    let transactions: Vec<Txn> = acks.iter().flat_map(|a| a.txns.iter().cloned()).collect();
    let mut cp = Checkpoint {
        version: CHECKPOINT_VERSION,
        pipeline: p.pipeline.pipeline.name.clone(),
        id,
        run,
        sources: acks.into_iter().map(|a| a.position).collect(),
        finished,
        transactions,
        committed: false,
    };
    p.state.lock().expect("state lock").write_checkpoint(&cp)?;
    commit_all(p, &cp.transactions).await?;
    p.stats.txns_committed.fetch_add(cp.transactions.len() as u64, Ordering::Relaxed);
    let mut state = p.state.lock().expect("state lock");
    if !cp.transactions.is_empty() {
        cp.committed = true;
        state.write_checkpoint(&cp)?;
    }
    state.retain_labels(|e| e.checkpoint > id)?;
    drop(state);
    if let (Some(offsets), Some(start)) =
        (&p.offsets, cp.sources.first().and_then(|s| s.get("start")).and_then(|s| s.as_str()))
    {
        offsets.publish(start);
    }
    p.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(checkpoint = id, transactions = cp.transactions.len(), "checkpoint complete");
    Ok(())
}

/// A progress bar when stderr is a terminal: rows read of a bounded source, or tablets read of a
/// Doris snapshot scan (with the rows read beside it; the bar ends when the snapshot is read).
/// Stops with its guard.
fn progress_bar(opts: &RunOptions, total_rows: Option<u64>, stats: Arc<Stats>) -> Option<ProgressGuard> {
    use std::io::IsTerminal;
    if opts.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let tablets = stats.tablets.total.load(Ordering::Relaxed);
    let (total, template) = match total_rows {
        Some(rows) => (rows, "{bar:40} {pos}/{len} rows  {per_sec}  eta {eta}"),
        None if tablets > 0 => (tablets, "{bar:40} {pos}/{len} tablets  {msg} rows  eta {eta}"),
        None => return None,
    };
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let task = tokio::spawn(async move {
        loop {
            let rows = stats.rows_read.load(Ordering::Relaxed);
            if total_rows.is_some() {
                shown.set_position(rows);
            } else {
                shown.set_message(rows.to_string());
                shown.set_position(stats.tablets.done.load(Ordering::Relaxed));
                if shown.position() >= total {
                    shown.finish();
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Some(ProgressGuard { bar, task })
}

struct ProgressGuard {
    bar: indicatif::ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}

fn status_line(p: &Prepared, checkpoint: u64, since: Instant) {
    let s = &p.stats;
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    tracing::info!(
        "rows read {} → transformed {} → written {} | checkpoint {checkpoint} ({:.1}s ago) | loads committed {}",
        g(&s.rows_read),
        g(&s.rows_transformed),
        g(&s.rows_written),
        since.elapsed().as_secs_f64(),
        g(&s.txns_committed)
    );
}

type Fetch = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = (Box<dyn source::Source>, anyhow::Result<Option<Batch>>, serde_json::Value)>
            + Send,
    >,
>;

/// Ask the source for its next batch; the source travels with the request, so a barrier can be
/// answered while a slow request (a poll interval, a server-side wait) is still pending.
fn fetch(mut src: Box<dyn source::Source>) -> Fetch {
    Box::pin(async move {
        let batch = src.next().await;
        let position = src.position();
        (src, batch, position)
    })
}

/// Feeds one worker: batches, and a barrier with the position after the last batch sent
/// whenever the coordinator asks for a checkpoint.
async fn source_task(
    src: Box<dyn source::Source>,
    tx: mpsc::Sender<Message>,
    mut triggers: watch::Receiver<Trigger>,
    exhausted_tx: mpsc::UnboundedSender<usize>,
    worker: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let mut answered = triggers.borrow().id;
    let mut exhausted = false;
    let mut position = src.position();
    let state = src.state();
    let mut pending = fetch(src);
    loop {
        let t = *triggers.borrow_and_update();
        if t.id > answered {
            answered = t.id;
            // The source's state matches `position` here: it changes only as a batch is returned,
            // and every returned batch moved `position` before this point.
            let mut position = position.clone();
            if let (Some(state), Some(fields)) = (&state, position.as_object_mut()) {
                fields.insert("state".into(), state.snapshot());
            }
            let barrier = Message::Barrier { id: t.id, position, exhausted };
            if tx.send(barrier).await.is_err() || t.last {
                return Ok(());
            }
            continue;
        }
        if exhausted {
            if triggers.changed().await.is_err() {
                return Ok(());
            }
            continue;
        }
        tokio::select! {
            biased;
            changed = triggers.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            (src, batch, after) = &mut pending => {
                match batch? {
                    Some(b) => {
                        stats.rows_read.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                        if tx.send(Message::Data(b)).await.is_err() {
                            return Ok(());
                        }
                    }
                    None => {
                        exhausted = true;
                        let _ = exhausted_tx.send(worker);
                    }
                }
                position = after;
                pending = fetch(src);
            }
        }
    }
}

/// Batches whose lookups are in flight in a worker, in input order.
type InFlight = futures::stream::FuturesOrdered<futures::future::BoxFuture<'static, anyhow::Result<Batch>>>;

/// What a worker does next.
enum WorkerStep {
    Message(Option<Message>),
    /// The oldest batch in flight has been joined.
    Joined(anyhow::Result<Batch>),
    Tick,
}

/// The lookup of `batch` as a task of its own, so it moves on while the worker writes; the task
/// is aborted if the returned future is dropped (the worker failed).
fn spawn_lookup(join: &LookupJoin, batch: Batch) -> futures::future::BoxFuture<'static, anyhow::Result<Batch>> {
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(join.lookup(batch)));
    Box::pin(async move { Ok((&mut task.0).await.context("a lookup task failed")??) })
}

/// `batches` through `transforms`, one transform after another.
async fn run_transforms(transforms: &mut [RunningTransform], mut batches: Vec<Batch>) -> anyhow::Result<Vec<Batch>> {
    for t in transforms {
        let mut next = Vec::new();
        for b in &batches {
            next.extend(t.process(b).await?);
        }
        batches = next;
    }
    Ok(batches)
}

/// `batches` through the rest of the chain, then to every sink.
async fn finish_batches(
    transforms: &mut [RunningTransform],
    batches: Vec<Batch>,
    writers: &mut [DorisWriter],
    stats: &Stats,
) -> anyhow::Result<()> {
    let batches = run_transforms(transforms, batches).await?;
    let rows: usize = batches.iter().map(Batch::num_rows).sum();
    stats.rows_transformed.fetch_add(rows as u64, Ordering::Relaxed);
    for w in writers {
        for b in &batches {
            w.write(b).await?;
        }
    }
    stats.rows_written.fetch_add(rows as u64, Ordering::Relaxed);
    Ok(())
}

async fn worker_task(
    mut rx: mpsc::Receiver<Message>,
    mut transforms: Vec<RunningTransform>,
    mut writers: Vec<DorisWriter>,
    acks: mpsc::UnboundedSender<Ack>,
    worker: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let batch_mode = writers.iter().any(DorisWriter::is_batch_mode);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The chain runs in three stages. The transforms before the first lookup run as a batch
    // arrives; that lookup keeps up to `max_in_flight` batches' lookups in flight, which come out
    // in input order; the transforms after it run, and the rows are written, as each comes out.
    // Only the first lookup is pipelined: later ones run one batch at a time in that last stage.
    // A barrier first drains the batches in flight, so every row before it is written before the
    // loads are pre-committed.
    let first_lookup = transforms.iter().position(|t| t.lookup().is_some()).unwrap_or(transforms.len());
    let (before, rest) = transforms.split_at_mut(first_lookup);
    let lookup = rest.first().and_then(RunningTransform::lookup).cloned();
    let after = rest.get_mut(1..).unwrap_or_default();
    let max_in_flight = lookup.as_ref().map_or(1, LookupJoin::max_in_flight);
    let mut in_flight: InFlight = futures::stream::FuturesOrdered::new();
    loop {
        let (joined_ready, room) = (!in_flight.is_empty(), in_flight.len() < max_in_flight);
        let step = tokio::select! {
            Some(joined) = in_flight.next(), if joined_ready => WorkerStep::Joined(joined),
            m = rx.recv(), if room => WorkerStep::Message(m),
            _ = tick.tick(), if batch_mode => WorkerStep::Tick,
        };
        let msg = match step {
            WorkerStep::Tick => {
                for w in &mut writers {
                    w.tick().await?;
                }
                continue;
            }
            WorkerStep::Joined(joined) => {
                finish_batches(after, vec![joined?], &mut writers, &stats).await?;
                continue;
            }
            WorkerStep::Message(m) => m,
        };
        match msg {
            None => return Ok(()),
            // A source's way of saying "nothing new, but I moved on".
            Some(Message::Data(batch)) if batch.num_rows() == 0 => {}
            Some(Message::Data(batch)) => {
                let batches = run_transforms(before, vec![batch]).await?;
                match &lookup {
                    Some(l) => batches.into_iter().for_each(|b| in_flight.push_back(spawn_lookup(l, b))),
                    None => finish_batches(after, batches, &mut writers, &stats).await?,
                }
            }
            Some(Message::Barrier { id, position, exhausted }) => {
                while let Some(joined) = in_flight.next().await {
                    finish_batches(after, vec![joined?], &mut writers, &stats).await?;
                }
                let mut txns = Vec::new();
                for w in &mut writers {
                    txns.extend(w.prepare_commit().await?);
                }
                if acks.send(Ack { worker, id, position, exhausted, txns }).is_err() {
                    return Ok(());
                }
            }
        }
    }
}
