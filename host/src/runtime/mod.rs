//! The runtime: workers, bounded channels, checkpoint barriers and the coordinator. It knows
//! components only by their traits ([`Source`], [`Transform`], [`Sink`]) and names.
//!
//! Each of `parallelism` workers owns a source reader, its own transform instances and a writer
//! of every sink. The reader feeds its worker through a channel of [`CHANNEL_BATCHES`] events, and
//! sink writers bound what they hold, so a slow sink slows the sources instead of filling memory.
//!
//! Checkpoint *n*: the coordinator asks every reader for a barrier; a reader's task sends it after
//! its current event together with the reader's position; the worker drains what is in flight,
//! takes its transforms' state, has its writers prepare their commits, and acknowledges. Once
//! every worker has acknowledged, the checkpoint is written to the state dir, and only then do
//! the sinks' committers commit it; then the source's enumerator and the committers hear that it
//! is complete. A restart commits the last checkpoint again (commits are idempotent), has each
//! committer roll back what else it left open, and resumes the readers at their positions.

pub mod dead_letter;
pub mod event;
pub mod json;
pub mod mirror;
pub mod sink;
pub mod source;
pub mod spread;
pub mod transform;
mod worker;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use crate::error::{Restartable, is_restartable};
pub use event::{Alter, Event, SchemaChange, TableId};
pub use sink::{Committer, Sink, SinkWriter, WriterContext};
pub use source::{Position, Source, SourceReader, SplitEnumerator};
pub use transform::{ConcurrentTransform, Transform, TransformInstance};

use crate::metrics::{self, Stats};
use crate::state::{CHECKPOINT_VERSION, Checkpoint, CheckpointStore};
use worker::{Ack, Trigger, Worker};

/// Events that may wait between a source reader and its worker.
pub const CHANNEL_BATCHES: usize = 4;

/// Restarts in a row when no sink says how many (`max_retries`).
const DEFAULT_MAX_RESTARTS: u32 = 3;

/// How `sluice run` behaves around the pipeline.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// No status lines.
    pub quiet: bool,
    /// Time between status lines (default 5s).
    pub status_interval: Option<Duration>,
    /// A checkpoint is taken as soon as this is notified (a savepoint).
    pub checkpoint_now: Option<Arc<tokio::sync::Notify>>,
}

/// Until `n` is notified (never, without one).
async fn notified(n: &Option<Arc<tokio::sync::Notify>>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
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
    /// Commits tried again after a failure (reported by the sinks as `commit_retries`).
    pub commit_retries: u64,
    /// Loads tried again under their label (reported by the sinks as `load_retries`).
    pub load_retries: u64,
    /// Whether this process led the pipeline: false for a member of a `[cluster]` that only ran
    /// the units another process's plans gave it.
    pub led: bool,
}

/// A component and its name in the pipeline, which is also its key in the checkpoint.
#[derive(Clone)]
pub struct Named<T> {
    pub name: String,
    pub component: T,
}

/// A task that ends when this is dropped.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A pipeline ready to run: its components built, its state dir open.
pub struct Prepared {
    /// The pipeline file (for messages).
    pub file: PathBuf,
    pub name: String,
    pub parallelism: usize,
    pub checkpoint_interval: Duration,
    /// A checkpoint not acknowledged by every worker in this long fails (a restart follows).
    pub checkpoint_timeout: Duration,
    /// Where checkpoints and journals are kept: the state dir, or the cluster's store.
    pub state: Arc<dyn CheckpointStore>,
    pub source: Named<Arc<dyn Source>>,
    /// The source's implied transforms first, then the pipeline's.
    pub transforms: Vec<Named<Arc<dyn Transform>>>,
    pub sinks: Vec<Named<Arc<dyn Sink>>>,
    /// `[dead_letter]`: where rows go that cannot be delivered (see [`dead_letter`]).
    pub dead_letter: Option<Named<Arc<dyn Sink>>>,
    pub stats: Arc<Stats>,
    /// `[verify]`: the comparison of the copy with its source the leader runs now and then.
    pub verify: Option<Arc<crate::verify::Periodic>>,
}

impl Prepared {
    /// Every sink, the dead-letter target last: what checkpoints commit.
    fn all_sinks(&self) -> impl Iterator<Item = &Named<Arc<dyn Sink>>> {
        self.sinks.iter().chain(self.dead_letter.iter())
    }
}

/// Run the pipeline until its sources are exhausted or `stop` turns true. In a `[cluster]`, this
/// process runs the units the leader's plans give it, stands by to lead, and leads once it is
/// elected (see [`spread`]).
pub async fn run(p: &Prepared, opts: &RunOptions, stop: watch::Receiver<bool>) -> anyhow::Result<RunReport> {
    match p.state.cluster() {
        None => lead(p, opts, stop).await,
        Some(c) => spread::member(p, c, opts, stop).await,
    }
}

/// Run the pipeline (clustered: lead it, while [`spread::work`] runs this process's units). A
/// restartable failure restarts it from its last checkpoint, up to the sinks' `max_retries` times
/// in a row (a completed checkpoint resets the count).
async fn lead(p: &Prepared, opts: &RunOptions, stop: watch::Receiver<bool>) -> anyhow::Result<RunReport> {
    // `[verify]` beside the run, across its restarts, until it ends.
    let _verify = p.verify.clone().map(|v| {
        let stats = p.stats.clone();
        AbortOnDrop(tokio::spawn(async move { v.run(stats).await }))
    });
    let max_restarts = p.sinks.iter().filter_map(|s| s.component.max_restarts()).max().unwrap_or(DEFAULT_MAX_RESTARTS);
    let mut failures = 0u32;
    let policy = crate::retry::backoff(Duration::from_millis(500), max_restarts as usize);
    let mut waits = policy.build();
    // Clustered: the units' last placement, kept across restarts (sticky).
    let mut placed = BTreeMap::new();
    loop {
        let started = p.stats.checkpoints.load(Ordering::Relaxed);
        let attempt = match p.state.cluster() {
            None => run_once(p, opts, stop.clone()).await,
            Some(c) => spread::lead_once(p, c, opts, stop.clone(), &mut placed).await,
        };
        match attempt {
            Ok((checkpoint, finished)) => {
                let loads = p.stats.loads();
                return Ok(RunReport {
                    checkpoint,
                    finished,
                    restarts: p.stats.restarts.load(Ordering::Relaxed),
                    commit_retries: loads.commit_retries,
                    load_retries: loads.load_retries,
                    led: true,
                });
            }
            Err(e) if is_restartable(&e) => {
                if p.stats.checkpoints.load(Ordering::Relaxed) > started {
                    failures = 0;
                    waits = policy.build();
                }
                let Some(wait) = waits.next() else {
                    return Err(e.context(format!("gave up after {failures} restarts (`max_retries`)")));
                };
                failures += 1;
                p.stats.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "{e:#}; restarting from the last checkpoint in {wait:?} (attempt {failures} of {max_restarts})"
                );
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Commit checkpoint `cp` in every sink (at once); returns the transactions committed.
async fn commit_sinks(p: &Prepared, cp: &Checkpoint) -> anyhow::Result<u64> {
    let commits = p.all_sinks().map(|s| async move {
        let committables = cp.sinks.get(&s.name).map(Vec::as_slice).unwrap_or_default();
        s.component.committer().commit(cp.id, committables).await
    });
    let mut total = 0;
    for r in futures::future::join_all(commits).await {
        total += r?;
    }
    Ok(total)
}

/// Commit the last checkpoint (again) and have each sink roll back what else it left open;
/// returns this run's number and the checkpoint to resume from.
async fn recover(p: &Prepared) -> anyhow::Result<(u64, Option<Checkpoint>)> {
    let run = p.state.next_run().await?;
    let checkpoint = p.state.latest().await?;
    if let Some(cp) = &checkpoint
        && cp.pipeline != p.name
    {
        anyhow::bail!(
            "{} belongs to pipeline `{}`, not `{}`; give this pipeline its own `pipeline.state_dir` (or `cluster.store`)",
            p.state.describe(),
            cp.pipeline,
            p.name
        );
    }
    if let Some(cp) = &checkpoint
        && !cp.committed
    {
        commit_sinks(p, cp).await?;
        p.state.mark_committed(cp).await?;
    }
    for s in p.all_sinks() {
        let committed = checkpoint.as_ref().and_then(|c| c.sinks.get(&s.name)).map(Vec::as_slice).unwrap_or_default();
        s.component.committer().recover(committed).await?;
    }
    Ok((run, checkpoint))
}

/// Each worker's position in `checkpoint` (none without one), refusing a checkpoint taken with
/// another parallelism.
fn restored_positions(p: &Prepared, checkpoint: Option<&Checkpoint>) -> anyhow::Result<Vec<Option<serde_json::Value>>> {
    let n = p.parallelism;
    let saved = checkpoint.and_then(|c| c.sources.get(&p.source.name));
    if let (Some(cp), Some(saved)) = (checkpoint, saved)
        && saved.len() != n
    {
        anyhow::bail!(
            "checkpoint {} was taken with parallelism {}, the pipeline now says {n}; keep the parallelism, or start over with a new `pipeline.state_dir`",
            cp.id,
            saved.len()
        );
    }
    Ok((0..n).map(|w| saved.and_then(|s| s.get(w)).cloned()).collect())
}

/// A run's workers and the channels the coordinator drives them by.
struct Workers {
    tasks: JoinSet<anyhow::Result<()>>,
    trigger_tx: watch::Sender<Trigger>,
    completed_tx: watch::Sender<u64>,
    ack_rx: mpsc::UnboundedReceiver<Ack>,
    exhausted_rx: mpsc::UnboundedReceiver<usize>,
    now_rx: mpsc::UnboundedReceiver<()>,
}

/// Start workers `which` (of `p.parallelism`) of run `run` from `checkpoint`: each one's reader
/// at its position, its writers, and its transforms' state.
async fn start_workers(
    p: &Prepared,
    enumerator: &mut dyn SplitEnumerator,
    checkpoint: Option<&Checkpoint>,
    run: u64,
    which: &[usize],
    positions: &[Option<serde_json::Value>],
) -> anyhow::Result<Workers> {
    let last_id = checkpoint.map_or(0, |c| c.id);
    let (trigger_tx, trigger_rx) = watch::channel(Trigger { id: last_id, last: false });
    let (completed_tx, completed_rx) = watch::channel(last_id);
    let (ack_tx, ack_rx) = mpsc::unbounded_channel::<Ack>();
    let (exhausted_tx, exhausted_rx) = mpsc::unbounded_channel::<usize>();
    let (now_tx, now_rx) = mpsc::unbounded_channel::<()>();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    let transforms: Arc<[Named<Arc<dyn Transform>>]> = p.transforms.clone().into();
    for &w in which {
        let reader = enumerator.reader(w, positions[w].as_ref()).await?;
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        let feed = worker::Feed {
            worker: w,
            resumed_from: last_id,
            tx,
            triggers: trigger_rx.clone(),
            completed: completed_rx.clone(),
            exhausted: exhausted_tx.clone(),
            checkpoint_now: now_tx.clone(),
            stats: p.stats.clone(),
        };
        tasks.spawn(worker::source_task(reader, feed));
        let ctx = WriterContext { worker: w, run, checkpoint: last_id + 1 };
        let mut writers = Vec::new();
        for s in p.all_sinks() {
            writers.push(s.component.writer(ctx).await?);
        }
        let restored = transforms
            .iter()
            .map(|t| checkpoint.and_then(|c| c.transforms.get(&t.name)).and_then(|s| s.get(w)).cloned())
            .collect();
        let worker = Worker {
            worker: w,
            transforms: transforms.clone(),
            restored,
            writers,
            routes: p.sinks.iter().map(|s| s.component.claims().map(str::to_string)).collect(),
            sink_names: p.all_sinks().map(|s| s.name.clone()).collect(),
            acks: ack_tx.clone(),
            checkpoint_now: now_tx.clone(),
            triggers: trigger_rx.clone(),
            answered: last_id,
            stats: p.stats.clone(),
            dead_letter: p.dead_letter.as_ref().map(|_| worker::DeadLetters {
                pipeline: p.name.clone(),
                letters: Vec::new(),
                announced: false,
            }),
        };
        tasks.spawn(worker.run(rx));
    }
    Ok(Workers { tasks, trigger_tx, completed_tx, ack_rx, exhausted_rx, now_rx })
}

/// A checkpoint whose barrier is out: the acknowledgements so far.
struct PendingCheckpoint {
    id: u64,
    acks: Vec<Option<Ack>>,
    /// The sources stop after it.
    last: bool,
    started: Instant,
    /// The same moment, on tokio's clock (for the timeout).
    started_at: tokio::time::Instant,
}

/// Checkpoint `id` was not acknowledged by `late` (units, with where they run) within
/// `checkpoint_timeout`: a failure that a restart from checkpoint `completed` may pass.
fn checkpoint_timed_out(p: &Prepared, id: u64, late: &[String], completed: u64) -> anyhow::Error {
    let from = if completed == 0 { "the start".to_string() } else { format!("checkpoint {completed}") };
    Restartable::error(format!(
        "checkpoint {id} timed out: {} did not acknowledge it within `checkpoint_timeout` ({}); every unit resumes from {from} (a sink waiting on Doris or a slow transform holds a checkpoint up: raise [pipeline] checkpoint_timeout if it is expected)",
        late.join(", "),
        humantime::format_duration(p.checkpoint_timeout)
    ))
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
    let n = p.parallelism;
    let positions = restored_positions(p, checkpoint.as_ref())?;
    p.stats.splits.reset();
    let mut enumerator = p.source.component.enumerator(&positions).await?;
    let all: Vec<usize> = (0..n).collect();
    let Workers { mut tasks, trigger_tx, completed_tx, mut ack_rx, mut exhausted_rx, mut now_rx } =
        start_workers(p, enumerator.as_mut(), checkpoint.as_ref(), run, &all, &positions).await?;
    let _bar = metrics::progress_bar(opts.quiet, enumerator.total_rows(), p.stats.clone());

    let interval = p.checkpoint_interval;
    let status_every = opts.status_interval.unwrap_or(Duration::from_secs(5));
    let mut next_checkpoint = tokio::time::Instant::now() + interval;
    let mut next_status = tokio::time::Instant::now() + status_every;
    let mut pending: Option<PendingCheckpoint> = None;
    let mut exhausted = vec![false; n];
    let mut stopping = false;
    let mut completed = last_id;
    let mut last_completed_at = Instant::now();
    loop {
        let all_exhausted = exhausted.iter().all(|e| *e);
        if pending.is_none() && (stopping || all_exhausted || tokio::time::Instant::now() >= next_checkpoint) {
            let id = p.state.next_checkpoint(completed).await?;
            let last = stopping || all_exhausted;
            trigger_tx.send_replace(Trigger { id, last });
            pending = Some(PendingCheckpoint {
                id,
                acks: (0..n).map(|_| None).collect(),
                last,
                started: Instant::now(),
                started_at: tokio::time::Instant::now(),
            });
            next_checkpoint = tokio::time::Instant::now() + interval;
        }
        let overdue = pending.as_ref().map_or(next_checkpoint, |cp| cp.started_at + p.checkpoint_timeout);
        tokio::select! {
            _ = tokio::time::sleep_until(next_checkpoint), if pending.is_none() => {}
            _ = tokio::time::sleep_until(overdue), if pending.is_some() => {
                let cp = pending.as_ref().expect("pending");
                let late: Vec<String> =
                    cp.acks.iter().enumerate().filter(|(_, a)| a.is_none()).map(|(w, _)| format!("w{w}")).collect();
                return Err(checkpoint_timed_out(p, cp.id, &late, completed));
            }
            _ = tokio::time::sleep_until(next_status) => {
                next_status = tokio::time::Instant::now() + status_every;
                if !opts.quiet {
                    metrics::status_line(&p.stats, completed, last_completed_at);
                }
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    tracing::info!("stopping: taking a final checkpoint");
                    stopping = true;
                }
            }
            Some(w) = exhausted_rx.recv() => exhausted[w] = true,
            // A checkpoint asked for now: the next one starts at once (or the pending one serves).
            Some(()) = now_rx.recv() => next_checkpoint = tokio::time::Instant::now(),
            _ = notified(&opts.checkpoint_now) => next_checkpoint = tokio::time::Instant::now(),
            Some(ack) = ack_rx.recv() => {
                let Some(cp) = pending.as_mut() else { anyhow::bail!("a barrier acknowledged without a checkpoint") };
                if ack.id != cp.id {
                    anyhow::bail!("worker {} acknowledged checkpoint {} while {} was pending", ack.worker, ack.id, cp.id);
                }
                if ack.exhausted {
                    exhausted[ack.worker] = true;
                }
                let worker = ack.worker;
                cp.acks[worker] = Some(ack);
                if cp.acks.iter().all(Option::is_some) {
                    let cp = pending.take().expect("pending");
                    let (id, last, started) = (cp.id, cp.last, cp.started);
                    let acks: Vec<Ack> = cp.acks.into_iter().flatten().collect();
                    let finished = acks.iter().all(|a| a.exhausted);
                    complete_checkpoint(p, enumerator.as_mut(), run, id, acks, finished, started).await?;
                    completed = id;
                    completed_tx.send_replace(id);
                    last_completed_at = Instant::now();
                    if last {
                        drop(trigger_tx);
                        while let Some(r) = tasks.join_next().await {
                            r??;
                        }
                        if !opts.quiet {
                            metrics::status_line(&p.stats, completed, last_completed_at);
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

/// Write checkpoint `id` from the workers' acknowledgements, commit it in every sink, then tell
/// the committers and the source's enumerator that it is complete.
async fn complete_checkpoint(
    p: &Prepared,
    enumerator: &mut dyn SplitEnumerator,
    run: u64,
    id: u64,
    acks: Vec<Ack>,
    finished: bool,
    started: Instant,
) -> anyhow::Result<()> {
    let cp = assemble_checkpoint(p, run, id, &acks, finished);
    // The commit point: the checkpoint durable (and, clustered, published under this leader's
    // epoch). Nothing is committed before it.
    p.state.publish(&cp).await?;
    commit_checkpoint(p, &cp, Some(enumerator), started).await
}

/// The checkpoint of the workers' acknowledgements (in worker order).
fn assemble_checkpoint(p: &Prepared, run: u64, id: u64, acks: &[Ack], finished: bool) -> Checkpoint {
    let positions: Vec<serde_json::Value> = acks.iter().map(|a| a.position.clone()).collect();
    let mut transforms = BTreeMap::new();
    for (i, t) in p.transforms.iter().enumerate() {
        let states: Vec<serde_json::Value> =
            acks.iter().map(|a| a.transform_states.get(i).cloned().flatten().unwrap_or_default()).collect();
        if states.iter().any(|s| !s.is_null()) {
            transforms.insert(t.name.clone(), states);
        }
    }
    let sinks = p
        .all_sinks()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), acks.iter().map(|a| a.committables[i].clone()).collect()))
        .collect();
    Checkpoint {
        version: CHECKPOINT_VERSION,
        pipeline: p.name.clone(),
        id,
        run,
        finished,
        sources: [(p.source.name.clone(), positions)].into(),
        transforms,
        sinks,
        committed: false,
    }
}

/// After the commit point of `cp`: commit it in every sink, record that, and tell the committers
/// and the source's enumerator (when it runs here).
async fn commit_checkpoint(
    p: &Prepared,
    cp: &Checkpoint,
    enumerator: Option<&mut dyn SplitEnumerator>,
    started: Instant,
) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(cp).map_or(0, |b| b.len() as u64);
    let commit_started = Instant::now();
    let committed = commit_sinks(p, cp).await?;
    p.stats.timings.commit.observe(commit_started.elapsed().as_secs_f64());
    p.stats.txns_committed.fetch_add(committed, Ordering::Relaxed);
    if committed > 0 {
        p.state.mark_committed(cp).await?;
    }
    for s in p.all_sinks() {
        s.component.committer().on_checkpoint_complete(cp.id).await?;
    }
    if let Some(enumerator) = enumerator {
        enumerator.on_checkpoint_complete(cp.id, &cp.sources[&p.source.name]).await?;
    }
    p.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
    p.stats.checkpoint_completed(metrics::CheckpointRecord {
        id: cp.id,
        at_ms: metrics::now_ms(),
        duration_ms: started.elapsed().as_millis() as u64,
        bytes,
        committed,
    });
    tracing::debug!(checkpoint = cp.id, committed, "checkpoint complete");
    Ok(())
}
