//! One worker: its source reader's task, and the task that runs its transforms and sink writers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::dead_letter::{self, DeadLetter, Refusal};
use super::event::{Event, SchemaChange, TableId};
use super::sink::SinkWriter;
use super::source::SourceReader;
use super::transform::{Transform, TransformInstance};
use super::{Named, Stats};
use crate::Batch;

/// What a reader's task sends its worker.
pub(super) enum Message {
    Event(Event),
    Barrier { id: u64, position: serde_json::Value, exhausted: bool },
}

/// A worker's acknowledgement of a barrier (clustered: its unit's state of the checkpoint).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Ack {
    pub worker: usize,
    pub id: u64,
    pub position: serde_json::Value,
    pub exhausted: bool,
    /// Per transform: the worker's state (`{table: state}`), when it keeps one.
    pub transform_states: Vec<Option<serde_json::Value>>,
    /// Per sink: what its committer must commit.
    pub committables: Vec<serde_json::Value>,
}

/// A barrier request: checkpoint `id`; `last` = the sources stop after it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Trigger {
    pub id: u64,
    pub last: bool,
}

/// What a reader's task talks to.
pub(super) struct Feed {
    pub worker: usize,
    /// The checkpoint the run resumes from: barriers after it are answered.
    pub resumed_from: u64,
    pub tx: mpsc::Sender<Message>,
    pub triggers: watch::Receiver<Trigger>,
    /// The last checkpoint completed (committed).
    pub completed: watch::Receiver<u64>,
    pub exhausted: mpsc::UnboundedSender<usize>,
    /// Asks the coordinator for a checkpoint now (before a schema change).
    pub checkpoint_now: mpsc::UnboundedSender<()>,
    pub stats: Arc<Stats>,
}

type Fetch = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = (Box<dyn SourceReader>, anyhow::Result<Option<Event>>, serde_json::Value)>
            + Send,
    >,
>;

/// Ask the reader for its next event; the reader travels with the request, so a barrier can be
/// answered while a slow request (a poll interval, a server-side wait) is still pending.
fn fetch(mut reader: Box<dyn SourceReader>) -> Fetch {
    Box::pin(async move {
        let event = reader.next().await;
        let position = reader.position();
        (reader, event, position)
    })
}

/// A schema change a reader returned, held until every row before it is committed.
struct Held {
    change: SchemaChange,
    reader: Box<dyn SourceReader>,
    /// The reader's position after the change.
    after: serde_json::Value,
    /// The checkpoint whose barrier went out before the change.
    barrier: Option<u64>,
}

/// Feeds one worker: events, and a barrier with the position after the last event sent whenever
/// the coordinator asks for a checkpoint.
///
/// A schema change is aligned to a checkpoint: the task asks for one at once, answers its barrier
/// with the position before the change, and passes the change on only once that checkpoint is
/// committed. So a sink alters a table with none of its loads pending (Doris aborts a
/// pre-committed load whose table changed), and a crash before the change is applied replays it.
pub(super) async fn source_task(reader: Box<dyn SourceReader>, mut feed: Feed) -> anyhow::Result<()> {
    // Not the trigger's current value: a checkpoint may have been asked for (by another reader's
    // schema change) before this task first ran, and its barrier must be answered too.
    let mut answered = feed.resumed_from;
    let mut notified = *feed.completed.borrow();
    let mut exhausted = false;
    let mut position = reader.position();
    let mut pending = Some(fetch(reader));
    let mut held: Option<Held> = None;
    loop {
        let t = *feed.triggers.borrow_and_update();
        if t.id > answered {
            answered = t.id;
            let barrier = Message::Barrier { id: t.id, position: position.clone(), exhausted };
            if feed.tx.send(barrier).await.is_err() || t.last {
                return Ok(());
            }
            if let Some(h) = held.as_mut() {
                h.barrier.get_or_insert(t.id);
            }
            continue;
        }
        if let Some(h) = held.take_if(|h| h.barrier.is_some_and(|id| *feed.completed.borrow() >= id)) {
            if feed.tx.send(Message::Event(Event::SchemaChange(h.change))).await.is_err() {
                return Ok(());
            }
            position = h.after;
            pending = Some(fetch(h.reader));
            continue;
        }
        if held.is_some() {
            tokio::select! {
                changed = feed.triggers.changed() => if changed.is_err() { return Ok(()) },
                changed = feed.completed.changed() => if changed.is_err() { return Ok(()) },
            }
            continue;
        }
        if exhausted {
            if feed.triggers.changed().await.is_err() {
                return Ok(());
            }
            continue;
        }
        let fetching = pending.as_mut().expect("a request is out unless a change is held");
        tokio::select! {
            biased;
            changed = feed.triggers.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            (mut reader, event, after) = fetching => {
                pending = None;
                let completed = *feed.completed.borrow();
                if completed > notified {
                    notified = completed;
                    reader.on_checkpoint_complete(completed).await?;
                }
                match event? {
                    Some(Event::SchemaChange(change)) => {
                        let _ = feed.checkpoint_now.send(());
                        held = Some(Held { change, reader, after, barrier: None });
                        continue;
                    }
                    Some(event) => {
                        if let Event::Data { batch, .. } = &event {
                            feed.stats.rows_arrived(batch.num_rows() as u64);
                        }
                        if feed.tx.send(Message::Event(event)).await.is_err() {
                            return Ok(());
                        }
                    }
                    None => {
                        exhausted = true;
                        let _ = feed.exhausted.send(feed.worker);
                    }
                }
                position = after;
                pending = Some(fetch(reader));
            }
        }
    }
}

/// One table's transform instances, made for its current schema.
struct Chain {
    input: SchemaRef,
    instances: Vec<Box<dyn TransformInstance>>,
}

impl Chain {
    /// The first instance whose work may overlap the next batches', if any.
    fn concurrent_at(&self) -> Option<usize> {
        self.instances.iter().position(|i| i.concurrent().is_some())
    }

    fn output_schema(&self) -> SchemaRef {
        self.instances.last().map_or_else(|| self.input.clone(), |i| i.output_schema().clone())
    }
}

/// Batches of one table whose overlapping transform is at work, in input order.
type InFlight = futures::stream::FuturesOrdered<BoxFuture<'static, (TableId, usize, anyhow::Result<Vec<Batch>>)>>;

/// The worker: transforms per table, then each batch to exactly one sink.
pub(super) struct Worker {
    pub worker: usize,
    pub transforms: Arc<[Named<Arc<dyn Transform>>]>,
    /// Per transform: its state for this worker in the last checkpoint (`{table: state}`).
    pub restored: Vec<Option<serde_json::Value>>,
    /// One per sink, in the pipeline's order.
    pub writers: Vec<Box<dyn SinkWriter>>,
    /// Per sink: the table it claims for routing.
    pub routes: Vec<Option<String>>,
    /// Per sink (the dead-letter target last): its name in the pipeline.
    pub sink_names: Vec<String>,
    pub acks: mpsc::UnboundedSender<Ack>,
    /// Asks the coordinator for a checkpoint now (a sink wants to commit what it holds).
    pub checkpoint_now: mpsc::UnboundedSender<()>,
    /// The checkpoints the coordinator has begun.
    pub triggers: watch::Receiver<Trigger>,
    /// The last barrier this worker answered.
    pub answered: u64,
    pub stats: Arc<Stats>,
    /// Where rows that cannot be delivered go, when the pipeline has a `[dead_letter]`.
    pub dead_letter: Option<DeadLetters>,
}

/// The worker's side of the dead-letter target: its writer (the last of `writers`) and the
/// letters of the current checkpoint interval, written at the barrier.
pub(super) struct DeadLetters {
    pub pipeline: String,
    pub letters: Vec<DeadLetter>,
    /// Whether the target has been told its columns in this run (a Doris table is created then).
    pub announced: bool,
}

/// What a worker does next.
enum Step {
    Message(Option<Message>),
    /// The oldest batch in flight is done.
    Joined((TableId, usize, anyhow::Result<Vec<Batch>>)),
    Tick,
}

impl Worker {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Message>) -> anyhow::Result<()> {
        let ticks = self.writers.iter().any(|w| w.wants_ticks());
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut chains: HashMap<TableId, Chain> = HashMap::new();
        let mut in_flight: InFlight = futures::stream::FuturesOrdered::new();
        let mut max_in_flight = 1;
        loop {
            let (joined_ready, room) = (!in_flight.is_empty(), in_flight.len() < max_in_flight);
            let step = tokio::select! {
                Some(joined) = in_flight.next(), if joined_ready => Step::Joined(joined),
                m = rx.recv(), if room => Step::Message(m),
                _ = tick.tick(), if ticks => Step::Tick,
            };
            match step {
                Step::Tick => {
                    for w in &mut self.writers {
                        w.tick().await?;
                    }
                }
                Step::Joined((table, at, batches)) => self.finish(&mut chains, &table, at + 1, batches?).await?,
                Step::Message(None) => return Ok(()),
                Step::Message(Some(Message::Event(Event::Data { table, batch }))) => {
                    // An empty batch is a source's way of saying "nothing new, but I moved on".
                    if batch.num_rows() == 0 {
                        continue;
                    }
                    if !chains.get(&table).is_some_and(|c| c.input == batch.data.schema()) {
                        let chain = self.chain(&table, &batch.data.schema(), chains.remove(&table))?;
                        chains.insert(table.clone(), chain);
                    }
                    let chain = chains.get_mut(&table).expect("made above");
                    let Some(at) = chain.concurrent_at() else {
                        let end = chain.instances.len();
                        let letters = self.dead_letter.as_mut().map(|d| &mut d.letters);
                        let names = &self.transforms[..end];
                        let out = run_chain(&mut chain.instances[..end], names, &table, vec![batch], letters).await?;
                        self.write(&table, out).await?;
                        continue;
                    };
                    let letters = self.dead_letter.as_mut().map(|d| &mut d.letters);
                    let names = &self.transforms[..at];
                    let batches = run_chain(&mut chain.instances[..at], names, &table, vec![batch], letters).await?;
                    let concurrent = chain.instances[at].concurrent().expect("concurrent_at");
                    max_in_flight = concurrent.max_in_flight().max(1);
                    for b in batches {
                        let work = concurrent.start(b);
                        let table = table.clone();
                        in_flight.push_back(Box::pin(async move { (table, at, work.await) }));
                    }
                }
                Step::Message(Some(Message::Event(Event::SchemaChange(change)))) => {
                    self.drain(&mut chains, &mut in_flight).await?;
                    let chain = self.chain(&change.table, &change.schema, chains.remove(&change.table))?;
                    let out = SchemaChange { schema: chain.output_schema(), ..change };
                    chains.insert(out.table.clone(), chain);
                    let sink = self.route(Some(out.table.as_str()));
                    self.writers[sink].schema_change(&out).await?;
                }
                Step::Message(Some(Message::Barrier { id, position, exhausted })) => {
                    self.answered = id;
                    self.drain(&mut chains, &mut in_flight).await?;
                    let transform_states = self.snapshot(&chains);
                    let committables = self.prepare_commits(id).await?;
                    let ack = Ack { worker: self.worker, id, position, exhausted, transform_states, committables };
                    if self.acks.send(ack).is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Instances of every transform for `table` with columns `input`. Each starts from the state
    /// of the instance it replaces, else from the checkpoint.
    fn chain(&self, table: &TableId, input: &SchemaRef, old: Option<Chain>) -> anyhow::Result<Chain> {
        let mut schema = input.clone();
        let mut instances = Vec::with_capacity(self.transforms.len());
        for (i, t) in self.transforms.iter().enumerate() {
            let state = match old.as_ref().and_then(|c| c.instances.get(i)) {
                Some(inst) => inst.snapshot(),
                None => self.restored[i].as_ref().and_then(|s| s.get(table.as_str())).cloned(),
            };
            let inst =
                tokio::task::block_in_place(|| t.component.instance(self.worker, table, &schema, state.as_ref()))
                    .with_context(|| format!("transform `{}` for `{table}`", t.name))?;
            schema = inst.output_schema().clone();
            instances.push(inst);
        }
        Ok(Chain { input: input.clone(), instances })
    }

    /// Every transform's state: its instances' snapshots, and the checkpoint's state of tables
    /// this run has not seen yet (so it is not lost).
    fn snapshot(&self, chains: &HashMap<TableId, Chain>) -> Vec<Option<serde_json::Value>> {
        (0..self.transforms.len())
            .map(|i| {
                let mut states = match self.restored[i].as_ref() {
                    Some(serde_json::Value::Object(m)) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                for (table, chain) in chains {
                    if let Some(s) = chain.instances[i].snapshot() {
                        states.insert(table.to_string(), s);
                    }
                }
                (!states.is_empty()).then_some(serde_json::Value::Object(states))
            })
            .collect()
    }

    /// Wait for the batches in flight and pass them on.
    async fn drain(&mut self, chains: &mut HashMap<TableId, Chain>, in_flight: &mut InFlight) -> anyhow::Result<()> {
        while let Some((table, at, batches)) = in_flight.next().await {
            self.finish(chains, &table, at + 1, batches?).await?;
        }
        Ok(())
    }

    /// `batches` of `table` through its transforms from `from` on, then to the sinks.
    async fn finish(
        &mut self,
        chains: &mut HashMap<TableId, Chain>,
        table: &TableId,
        from: usize,
        batches: Vec<Batch>,
    ) -> anyhow::Result<()> {
        let chain = chains.get_mut(table).context("a batch came back for a table without transforms")?;
        let letters = self.dead_letter.as_mut().map(|d| &mut d.letters);
        let out = run_chain(&mut chain.instances[from..], &self.transforms[from..], table, batches, letters).await?;
        self.write(table, out).await
    }

    /// The writers that take rows: all but the dead-letter target's.
    fn row_writers(&self) -> usize {
        self.writers.len() - usize::from(self.dead_letter.is_some())
    }

    /// At the barrier of checkpoint `id`: every sink prepares its commit, then the dead-letter
    /// target takes the letters of the interval (those the sinks found while preparing too)
    /// and prepares its own. One committable per writer.
    async fn prepare_commits(&mut self, id: u64) -> anyhow::Result<Vec<serde_json::Value>> {
        let rows = self.row_writers();
        let mut committables = Vec::with_capacity(self.writers.len());
        for w in &mut self.writers[..rows] {
            committables.push(w.prepare_commit(id).await?);
        }
        let Some(dl) = self.dead_letter.as_mut() else { return Ok(committables) };
        for (w, name) in self.writers[..rows].iter_mut().zip(&self.sink_names) {
            dl.letters.extend(w.take_dead_letters().into_iter().map(|l| DeadLetter { component: name.clone(), ..l }));
        }
        let letters = std::mem::take(&mut dl.letters);
        let target = self.writers.last_mut().expect("the dead-letter writer");
        if !letters.is_empty() {
            self.stats.dead_letters.fetch_add(letters.len() as u64, Ordering::Relaxed);
            let time = dead_letter::now_micros();
            let stamp = dead_letter::Stamp { pipeline: &dl.pipeline, checkpoint: id, worker: self.worker, time };
            let batch = dead_letter::to_batch(&letters, &stamp)?;
            let table = TableId::new(dead_letter::TABLE);
            if !std::mem::replace(&mut dl.announced, true) {
                target.schema_change(&SchemaChange::announce(&table, batch.schema(), Vec::new())).await?;
            }
            target.write(&table, &batch).await?;
        }
        committables.push(target.prepare_commit(id).await?);
        Ok(committables)
    }

    /// The sink of a batch routed to `target`: the one that claims it, else the first.
    fn route(&self, target: Option<&str>) -> usize {
        target.and_then(|t| self.routes.iter().position(|r| r.as_deref() == Some(t))).unwrap_or(0)
    }

    /// A sink wants a checkpoint: ask for one, and take no more rows until one beyond the last
    /// barrier answered is under way (the batches before its barrier are then few). A pending
    /// one counts: its barrier is still on its way here.
    async fn await_checkpoint(&mut self) {
        let _ = self.checkpoint_now.send(());
        while self.triggers.borrow_and_update().id <= self.answered {
            if self.triggers.changed().await.is_err() {
                return;
            }
        }
    }

    async fn write(&mut self, table: &TableId, batches: Vec<Batch>) -> anyhow::Result<()> {
        let rows: usize = batches.iter().map(Batch::num_rows).sum();
        self.stats.rows_transformed.fetch_add(rows as u64, Ordering::Relaxed);
        let mut refused = 0;
        for b in &batches {
            let sink = self.route(b.table.as_deref());
            let written = self.writers[sink].write(table, b).await;
            if self.writers[sink].wants_checkpoint() {
                self.await_checkpoint().await;
            }
            let Err(e) = written else { continue };
            // A sink that refuses a batch's table: with a dead-letter target, its rows go there.
            let (Some(dl), Some(why)) = (self.dead_letter.as_mut(), dead_letter::refused_batch(&e)) else {
                return Err(e);
            };
            let (reason, target) = (why.reason.clone(), b.table.clone().unwrap_or_default());
            let component = &self.sink_names[sink];
            dl.letters.extend((0..b.num_rows()).map(|r| {
                let refusal = Refusal::Route { target: target.clone() };
                DeadLetter {
                    component: component.clone(),
                    ..dead_letter::letter(table.as_str(), b, r, refusal, &reason)
                }
            }));
            refused += b.num_rows();
        }
        self.stats.rows_written.fetch_add((rows - refused) as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// `batches` of `table` through `instances`, one after another. With `letters` (a dead-letter
/// target), a row a plugin rejects is set aside there and the rest of its batch goes on.
async fn run_chain(
    instances: &mut [Box<dyn TransformInstance>],
    names: &[Named<Arc<dyn Transform>>],
    table: &TableId,
    mut batches: Vec<Batch>,
    mut letters: Option<&mut Vec<DeadLetter>>,
) -> anyhow::Result<Vec<Batch>> {
    for (t, named) in instances.iter_mut().zip(names) {
        let mut next = Vec::with_capacity(batches.len());
        for b in batches {
            match letters.as_deref_mut() {
                Some(letters) => process_setting_aside(t.as_mut(), &named.name, table, b, letters, &mut next).await?,
                None => next.extend(t.process(b).await?),
            }
        }
        batches = next;
    }
    Ok(batches)
}

/// `batch` through `t`; each row it rejects becomes a dead letter, and the rows before and after
/// it are tried again (in order) without it. A plugin that stops at its first bad row is called
/// about twice per rejected row.
async fn process_setting_aside(
    t: &mut dyn TransformInstance,
    name: &str,
    table: &TableId,
    batch: Batch,
    letters: &mut Vec<DeadLetter>,
    out: &mut Vec<Batch>,
) -> anyhow::Result<()> {
    let mut todo = vec![batch];
    while let Some(b) = todo.pop() {
        let n = b.num_rows();
        let e = match t.process(b.clone()).await {
            Ok(batches) => {
                out.extend(batches);
                continue;
            }
            Err(e) => e,
        };
        let Some(rejected) = dead_letter::rejected_row(&e, n) else { return Err(e) };
        let (row, plugin) = (rejected.row, rejected.plugin.clone());
        let letter = dead_letter::letter(table.as_str(), &b, row, Refusal::Plugin { plugin }, &rejected.reason);
        letters.push(DeadLetter { component: name.to_string(), ..letter });
        if row + 1 < n {
            todo.push(dead_letter::slice(&b, row + 1, n - row - 1));
        }
        if row > 0 {
            todo.push(dead_letter::slice(&b, 0, row));
        }
    }
    Ok(())
}
