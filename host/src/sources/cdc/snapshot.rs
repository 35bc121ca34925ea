//! A CDC source's run: the enumerator that cuts the tables into key chunks and deals them to the
//! workers, and each worker's reader — its chunks page by page, then (worker 0) the log.
//!
//! Worker `w` of `n` reads the chunks whose start falls to it, with keyset pages (`WHERE key >=
//! cursor … ORDER BY key LIMIT …`), so its position is the chunk and the next key, and a restart
//! reads nothing twice. The key values a table is cut at (a key that is not one integer, or a
//! `chunk_key_column`) are read by a task of the enumerator while the workers read: each takes its
//! next chunk of the table as soon as the chunk's end is read. With several workers, `initial`
//! follows the log only once every worker's part of the snapshot is in a completed checkpoint, so
//! no snapshot row can land after a newer change.
//!
//! A table the log position does not know — found by a restart after the snapshot (the patterns
//! cover it since, it was created or renamed into them; a follower that sees one restarts the run
//! for it) — is read by worker 0 alone, in `initial`, before it goes on with the log from where it
//! stood (its *late* snapshot): the log's changes of that table since then are replayed over rows
//! read later, which a UNIQUE table absorbs.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_guest::batch::{Batch, BatchBuilder, RowKind, Value};
use tokio::sync::watch;

use super::chunks::{Bound, Chunk, ChunkCursor, Cuts, Cutting, Kept, Keyset, Literal, Next, resume, rows_per_cut};
use super::{CdcTable, Dialect, LogFollower, LogState, PAGE_ROWS};
use crate::error::{Restartable, is_restartable};
use crate::runtime::{AbortOnDrop, Event, Position, SourceReader, SplitEnumerator, TableId};
use crate::sources::StartupMode;

/// A reader's position: where it stands in its chunks and, for worker 0, in the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(serialize = "L: Serialize, D: Serialize", deserialize = "L: LogState, D: serde::de::DeserializeOwned"))]
pub(crate) struct CdcPosition<L, D> {
    #[serde(flatten)]
    pub chunk: ChunkCursor,
    #[serde(flatten)]
    pub log: L,
    /// Worker 0, once a table changed in the log: every table followed, with its columns as of
    /// the log position (the rows after it are read with these).
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<D>>,
    /// Worker 0: the server the log position is of ([`Dialect::server`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl<L: Default, D> Default for CdcPosition<L, D> {
    fn default() -> Self {
        CdcPosition { chunk: ChunkCursor::default(), log: L::default(), tables: None, server: None }
    }
}

impl<L: LogState, D: Serialize + serde::de::DeserializeOwned> Position for CdcPosition<L, D> {}

type PositionOf<D> = CdcPosition<<D as Dialect>::Log, <D as Dialect>::Def>;
type At<D> = <<D as Dialect>::Log as LogState>::At;

/// A run of a CDC source, before its chunks are cut.
pub(crate) struct Enumerator<D: Dialect> {
    pub dialect: Arc<D>,
    pub tables: Arc<Vec<D::Table>>,
    /// `scan.startup.mode` (or `schema-only`).
    pub mode: StartupMode,
    pub chunk_size: u64,
    /// Where worker 0 starts following the log on a fresh run (none: it does not follow).
    pub log_start: Option<At<D>>,
    /// The snapshot the log exported for this run, which a reader starting afresh reads in.
    pub snapshot: Option<String>,
}

impl<D: Dialect> Enumerator<D> {
    /// The positions of a restored run (none for a reader that has none).
    pub fn restore(restored: &[Option<serde_json::Value>]) -> anyhow::Result<Vec<Option<PositionOf<D>>>> {
        restored.iter().map(|p| p.as_ref().map(|v| PositionOf::<D>::restore(Some(v), D::KIND)).transpose()).collect()
    }

    /// The enumerator of a run of `positions.len()` readers: the chunks of every table (none
    /// once every reader's are read, or when only the log is read).
    pub async fn start(self, positions: &[Option<PositionOf<D>>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        let fresh = positions.iter().all(Option::is_none);
        let snapshot_done =
            !fresh && positions.iter().all(|p| p.as_ref().is_some_and(|p| p.chunk.done || p.chunk.late));
        let gate = (self.mode == StartupMode::Initial && positions.len() > 1).then(|| watch::channel(snapshot_done).0);
        // The chunk widths, and key values chunks are cut at, of a snapshot under way stay as it
        // began.
        let mut steps = ChunkCursor::restored_steps(positions.iter().flatten().map(|p| &p.chunk));
        let kept_cuts = ChunkCursor::restored_cuts(positions.iter().flatten().map(|p| &p.chunk));
        let mut cuts = BTreeMap::new();
        // The server the log is read from, and where its log goes on when the position is of
        // another one.
        let first = positions.first().and_then(Option::as_ref);
        let follows = self.log_start.is_some() || first.is_some_and(|p| p.log.at().is_some());
        let server = if follows { Some(self.dialect.server().await?) } else { None };
        let mut relocated = None;
        if let (Some(p), Some(found)) = (first, &server)
            && let (Some(kept), Some(at)) = (&p.server, p.log.at())
            && kept != found
        {
            relocated = Some(self.dialect.elsewhere(kept, found, at).await?);
        }
        let kept = first.and_then(|p| p.tables.as_deref());
        let (tables, known) = as_of_position(&*self.dialect, kept, &self.tables)?;
        let tables = Arc::new(tables);
        let (mut chunks, mut late, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
        if !self.mode.log_only() && !snapshot_done {
            let all: Vec<usize> = (0..tables.len()).collect();
            let kept = (!fresh).then_some(&kept_cuts);
            chunks = self.cut(&tables, &all, &mut steps, (kept, &mut cuts, &mut jobs)).await?;
        } else if let (Some(known), StartupMode::Initial) = (known, self.mode) {
            let new: Vec<usize> = (0..tables.len()).filter(|&i| !known.contains(tables[i].id())).collect();
            for &i in &new {
                tracing::info!("`{}` is new to the log's position: worker 0 reads it before the log", tables[i].id());
            }
            // Cut afresh unless worker 0 was reading them.
            let kept = first.is_some_and(|p| p.chunk.late).then_some(&kept_cuts);
            late = self.cut(&tables, &new, &mut steps, (kept, &mut cuts, &mut jobs)).await?;
        }
        let cutter = (!jobs.is_empty()).then(|| AbortOnDrop(tokio::spawn(cut_all(self.dialect.clone(), jobs))));
        Ok(Box::new(Chunks {
            dialect: self.dialect,
            tables,
            chunks,
            late,
            server,
            relocated,
            readers: positions.len(),
            steps,
            cuts,
            log_start: self.log_start,
            snapshot: self.snapshot,
            schema_only: self.mode == StartupMode::SchemaOnly,
            gate,
            _cutter: cutter,
        }))
    }
}

impl<D: Dialect> Enumerator<D> {
    /// The chunks of `which` of `tables` (the widths in `steps`, new ones added). A table cut at
    /// key values is cut where `kept` says (a restored run's: a table it has none of is read
    /// whole), else at values read from now on by the run's cutter ([`cut_all`], its `jobs`), the
    /// rest of them where `kept` has the first only; the values kept go to `cuts` (those the
    /// cutter reads are added as it reads them).
    async fn cut(
        &self,
        tables: &[D::Table],
        which: &[usize],
        steps: &mut BTreeMap<String, u64>,
        plan: (Option<&Kept>, &mut Cuts, &mut Vec<CutJob<D>>),
    ) -> anyhow::Result<Vec<Chunk>> {
        let (kept, cuts, jobs) = plan;
        let mut chunks = Vec::new();
        let mut session = None;
        for &i in which {
            let t = &tables[i];
            if self.mode == StartupMode::SchemaOnly {
                chunks.push(Chunk::whole(i));
                continue;
            }
            if session.is_none() {
                session = Some(self.dialect.session(None).await?);
            }
            let open = session.as_mut().expect("opened above");
            let split = match self.cut_table(open, i, t, steps, (kept, cuts, jobs)).await {
                Ok(split) => split,
                Err(e) => {
                    self.dialect.close(session.take().expect("opened above")).await;
                    return Err(e);
                }
            };
            chunks.extend(split);
        }
        if let Some(session) = session {
            self.dialect.close(session).await;
        }
        Ok(chunks)
    }

    /// The chunks of table `i`, `t` (see [`Enumerator::cut`]).
    async fn cut_table(
        &self,
        open: &mut D::Session,
        i: usize,
        t: &D::Table,
        steps: &mut BTreeMap<String, u64>,
        (kept, cuts, jobs): (Option<&Kept>, &mut Cuts, &mut Vec<CutJob<D>>),
    ) -> anyhow::Result<Vec<Chunk>> {
        let estimated = self.dialect.estimated_rows(open, t).await;
        let progress = self.dialect.progress();
        if let Some(by) = cut_by(&*self.dialect, t)? {
            let (first, all) = match kept {
                Some(kept) => match kept.get(t.name()) {
                    Some((values, all)) => (values.clone(), *all),
                    None => {
                        progress.planned(t.id().as_str(), 1, estimated);
                        return Ok(vec![Chunk::whole(i)]);
                    }
                },
                None => (Vec::new(), false),
            };
            cuts.insert(t.name().to_string(), first.clone());
            if all {
                let split = Chunk::between(i, &first);
                progress.planned(t.id().as_str(), split.len() as u64, estimated);
                return Ok(split);
            }
            let rows = rows_per_cut(self.chunk_size, estimated);
            progress.planned(t.id().as_str(), estimated.map_or(1, |e| e.div_ceil(rows).max(1)), estimated);
            let (tx, feed) = watch::channel(Cutting { values: first, ..Cutting::default() });
            jobs.push(CutJob { table: t.clone(), by, rows, tx });
            return Ok(vec![Chunk::lazy(i, feed)]);
        }
        let Some(key) = t.integer_key() else {
            self.dialect.progress().planned(t.id().as_str(), 1, estimated);
            return Ok(vec![Chunk::whole(i)]);
        };
        let bounds = self.dialect.bounds(open, t, key).await?;
        let step = *steps.entry(t.name().to_string()).or_insert_with(|| Chunk::step_for(bounds, self.chunk_size));
        let split = Chunk::split(i, bounds, step);
        self.dialect.progress().planned(t.id().as_str(), split.len() as u64, estimated);
        Ok(split)
    }
}

/// A table whose key values the run's cutter reads ([`cut_all`]), out to the readers through `tx`
/// (which holds those read before, if any).
struct CutJob<D: Dialect> {
    table: D::Table,
    by: Keyset,
    rows: u64,
    tx: watch::Sender<Cutting>,
}

/// Reads the key values of the tables of `jobs`, one table after another, each value out to the
/// readers as soon as it is read: a table's first chunks are read while the rest of it is cut.
/// A failure stops the tables after it too (the readers return it, and the run restarts).
async fn cut_all<D: Dialect>(dialect: Arc<D>, jobs: Vec<CutJob<D>>) {
    let mut session = None;
    let mut failed: Option<(String, bool)> = None;
    for job in jobs {
        if failed.is_none() {
            let began = std::time::Instant::now();
            let cut = async {
                if session.is_none() {
                    session = Some(dialect.session(None).await?);
                }
                let open = session.as_mut().expect("opened above");
                let last = job.tx.borrow().values.last().cloned();
                let found = |v| job.tx.send_modify(|c: &mut Cutting| c.values.push(v));
                cut_values_after(&*dialect, open, &job.table, &job.by, job.rows, last, found).await
            };
            match cut.await {
                Ok(()) => {
                    let (n, by) = (job.tx.borrow().values.len() as u64 + 1, job.by.names.join(", "));
                    let secs = began.elapsed().as_secs_f64();
                    tracing::info!("cut `{}` into {n} chunks at values of ({by}) in {secs:.1} s", job.table.id());
                    dialect.progress().planned(job.table.id().as_str(), n, None);
                    job.tx.send_modify(|c| c.done = true);
                    continue;
                }
                Err(e) => {
                    let why = format!("cutting `{}` into snapshot chunks: {e:#}", job.table.id());
                    failed = Some((why, is_restartable(&e)));
                }
            }
        }
        job.tx.send_modify(|c| c.failed = failed.clone());
    }
    if let Some(session) = session {
        dialect.close(session).await;
    }
}

/// The values of `by` that cut `t` into pieces of about `rows` rows: each the value `rows` rows
/// after the one before, read from the table's index (`… ORDER BY key LIMIT 1 OFFSET rows`), so
/// cutting costs one pass over the keys whatever their type and spread. (`sluice verify`'s
/// ranges; snapshot chunks through [`cut_values_after`].)
pub(crate) async fn cut_values<D: Dialect>(
    dialect: &D,
    session: &mut D::Session,
    t: &D::Table,
    by: &Keyset,
    rows: u64,
) -> anyhow::Result<Vec<Vec<String>>> {
    let mut values = Vec::new();
    cut_values_after(dialect, session, t, by, rows, None, |v| values.push(v)).await?;
    Ok(values)
}

/// [`cut_values`] after `last` (one of them, read before), each given to `found` as it is read.
async fn cut_values_after<D: Dialect>(
    dialect: &D,
    session: &mut D::Session,
    t: &D::Table,
    by: &Keyset,
    rows: u64,
    mut last: Option<Vec<String>>,
    mut found: impl FnMut(Vec<String>) + Send,
) -> anyhow::Result<()> {
    let at: Vec<usize> = by.names.iter().filter_map(|c| t.column(c)).collect();
    let not_null = format!("{} IS NOT NULL", by.columns[0]);
    loop {
        let from = last.as_ref().map(|v| format!(" AND {}", by.compare(v, Bound::From))).unwrap_or_default();
        let sql = format!("{} WHERE {not_null}{from} ORDER BY {} LIMIT 1 OFFSET {rows}", dialect.select(t), by.order());
        let Some(mut next) = first_key(dialect, session, t, &at, &sql).await? else { break };
        if last.as_ref() == Some(&next) {
            // A value of a column that is not a key, on more rows than a piece: on after it.
            let after = by.compare(&next, Bound::After);
            let sql = format!("{} WHERE {not_null} AND {after} ORDER BY {} LIMIT 1", dialect.select(t), by.order());
            match first_key(dialect, session, t, &at, &sql).await? {
                Some(after) => next = after,
                None => break,
            }
        }
        found(next.clone());
        last = Some(next);
    }
    Ok(())
}

/// The values of columns `at` in the first row of `sql`, a query of `t`.
async fn first_key<D: Dialect>(
    dialect: &D,
    session: &mut D::Session,
    t: &D::Table,
    at: &[usize],
    sql: &str,
) -> anyhow::Result<Option<Vec<String>>> {
    let found = dialect.rows(session, t, sql).await?;
    Ok(found.first().map(|row| at.iter().map(|&i| row[i].clone().unwrap_or_default()).collect()))
}

/// What `t`'s chunks are cut at when not at multiples of an integer key: its `chunk_key_column`
/// where one is set, else its key when that is not one integer (none: by the integer key, or read
/// whole: a table without a key, or whose key's text does not compare as the server compares it).
/// An error names a chunk key column the table does not have, or cannot be cut at.
fn cut_by<D: Dialect>(dialect: &D, t: &D::Table) -> anyhow::Result<Option<Keyset>> {
    let chosen = dialect.scope().chunk_key(t.id().as_str(), t.name()).map(str::to_string);
    let names = match &chosen {
        Some(c) => vec![c.clone()],
        None if t.integer_key().is_some() || t.primary_key().is_empty() => return Ok(None),
        None => t.primary_key().to_vec(),
    };
    if let Some(c) = &chosen
        && t.column(c).is_none()
    {
        anyhow::bail!(
            "source.chunk_key_column: `{}` has no column `{c}`; name one of its columns for it, or leave it out of the pattern",
            t.id()
        );
    }
    let literals = dialect.key_literal(t, &names);
    if let (Some(c), None) = (&chosen, &literals) {
        anyhow::bail!(
            "source.chunk_key_column: `{}` cannot be cut at `{c}`: its values do not compare as their text (choose an integer, text, date, datetime or decimal column)",
            t.id()
        );
    }
    let columns = names.iter().map(|n| dialect.quote(n)).collect();
    Ok(literals.map(|literals| Keyset { columns, names, literals }))
}

/// The tables a log position knows.
type Known = HashSet<TableId>;

/// The tables a restored run reads its chunks with: each as the log position knows it (worker 0's
/// position keeps them) while the server still has every column of it — a column added since
/// reaches Doris with the change that added it, replayed from the log, and the rows read now
/// match the Doris table as it stands — else as found now (a column dropped since cannot be read).
/// With them, the tables the position knows.
fn as_of_position<D: Dialect>(
    dialect: &D,
    kept: Option<&[D::Def]>,
    found: &[D::Table],
) -> anyhow::Result<(Vec<D::Table>, Option<Known>)> {
    let Some(kept) = kept else { return Ok((found.to_vec(), None)) };
    let kept = kept.iter().map(|d| dialect.table(d)).collect::<anyhow::Result<Vec<_>>>()?;
    let tables = found
        .iter()
        .map(|t| match kept.iter().find(|k| k.id() == t.id()) {
            Some(k) if k.schema().fields().iter().all(|f| t.schema().field_with_name(f.name()).is_ok()) => k.clone(),
            _ => t.clone(),
        })
        .collect();
    Ok((tables, Some(kept.iter().map(|k| k.id().clone()).collect())))
}

/// The chunks of a run, dealt to the readers.
struct Chunks<D: Dialect> {
    dialect: Arc<D>,
    tables: Arc<Vec<D::Table>>,
    chunks: Vec<Chunk>,
    /// The chunks of the tables the log position does not know, all worker 0's.
    late: Vec<Chunk>,
    /// The server the log is read from, and worker 0's log position as its log names it when
    /// the restored one is of another server.
    server: Option<String>,
    relocated: Option<At<D>>,
    readers: usize,
    /// The chunk width of each table, kept in every position.
    steps: BTreeMap<String, u64>,
    /// The key values each table cut at them is cut at (each reader keeps those of its tables).
    cuts: BTreeMap<String, Vec<Vec<String>>>,
    log_start: Option<At<D>>,
    snapshot: Option<String>,
    schema_only: bool,
    /// See the module's documentation: turns true once every reader's chunks are checkpointed.
    gate: Option<watch::Sender<bool>>,
    /// The task reading the key values of the tables still being cut ([`cut_all`]).
    _cutter: Option<AbortOnDrop<()>>,
}

#[async_trait]
impl<D: Dialect> SplitEnumerator for Chunks<D> {
    async fn on_checkpoint_complete(&mut self, _id: u64, positions: &[serde_json::Value]) -> anyhow::Result<()> {
        if let Some(gate) = &self.gate
            && positions.iter().all(|p| p.get("done").and_then(|d| d.as_bool()) == Some(true))
        {
            gate.send_replace(true);
        }
        self.dialect.on_checkpoint_complete(positions).await
    }

    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let restored = position.is_some();
        let mut position = PositionOf::<D>::restore(position, D::KIND)?;
        let names = |t: usize| self.tables[t].name().to_string();
        let (chunks, inside) = match (worker, self.late.is_empty(), position.chunk.late) {
            // Late tables, read since a checkpoint.
            (0, false, true) => resume(&self.late, 1, 0, &position.chunk, names),
            // Late tables, from their start.
            (0, false, false) => {
                position.chunk = ChunkCursor { late: true, ..ChunkCursor::default() };
                (self.late.iter().cloned().collect(), false)
            }
            _ => resume(&self.chunks, self.readers, worker, &position.chunk, names),
        };
        let resumed = position.chunk.table.is_some() || position.chunk.done;
        if !inside && !position.chunk.done {
            position.chunk = ChunkCursor { late: position.chunk.late && !chunks.is_empty(), ..ChunkCursor::default() };
        }
        position.chunk.steps = self.steps.clone();
        let cut: HashSet<&str> =
            chunks.iter().filter(|c| c.cut.is_some()).map(|c| self.tables[c.table].name()).collect();
        let cuts: BTreeMap<String, Vec<Vec<String>>> =
            self.cuts.iter().filter(|(t, _)| cut.contains(t.as_str())).map(|(t, v)| (t.clone(), v.clone())).collect();
        position.chunk.cuts = (!cuts.is_empty()).then_some(cuts);
        // Of the tables still being cut, the values read so far go in each position taken.
        position.chunk.cutting = BTreeSet::new();
        let feeds = chunks.iter().filter_map(|c| Some((self.tables[c.table].name().to_string(), c.feed.clone()?)));
        let feeds = feeds.collect();
        let log_start = if worker == 0 { self.log_start.clone() } else { None };
        if worker == 0 {
            position.log.begin(log_start.clone());
            if let Some(at) = self.relocated.clone() {
                position.log.relocate(at);
            }
            position.server = self.server.clone();
            // The tables as of the log position, kept from the start of a run that follows the
            // log: a restart replays the log, and reads the chunks left, with these.
            if position.tables.is_none() && (log_start.is_some() || position.log.at().is_some()) {
                position.tables = Some(self.tables.iter().map(|t| self.dialect.def(t)).collect());
            }
        } else {
            position.log = D::Log::default();
            position.tables = None;
            position.server = None;
        }
        Ok(Box::new(Reader::<D> {
            dialect: self.dialect.clone(),
            tables: self.tables.clone(),
            follows: log_start.is_some() || position.log.at().is_some(),
            log_start,
            chunks,
            position,
            snapshot: if resumed { None } else { self.snapshot.clone() },
            session: None,
            schema_only: self.schema_only,
            announced: HashSet::new(),
            restored,
            gate: if worker == 0 { self.gate.as_ref().map(|g| g.subscribe()) } else { None },
            follower: None,
            feeds,
        }))
    }
}

/// One worker's share: its chunks, then (worker 0) the log.
struct Reader<D: Dialect> {
    dialect: Arc<D>,
    tables: Arc<Vec<D::Table>>,
    /// Chunks still to read, the current one first.
    chunks: VecDeque<Chunk>,
    position: PositionOf<D>,
    /// The exported snapshot this reader's session reads in.
    snapshot: Option<String>,
    session: Option<D::Session>,
    /// Announce the tables only.
    schema_only: bool,
    /// Tables whose schema this run has sent.
    announced: HashSet<TableId>,
    /// The position came from a checkpoint: the tables are announced as of it.
    restored: bool,
    /// Whether this reader follows the log after its chunks, and from where on a fresh run.
    follows: bool,
    log_start: Option<At<D>>,
    gate: Option<watch::Receiver<bool>>,
    follower: Option<D::Follower>,
    /// The key values of this reader's tables still being cut, by table name.
    feeds: BTreeMap<String, watch::Receiver<Cutting>>,
}

impl<D: Dialect> Reader<D> {
    /// The next page of `chunk` of `t`: `SELECT … FROM t` and its range, order and limit, and the
    /// most rows it gives (none: the rest of the chunk).
    fn page(&self, t: &D::Table, chunk: &Chunk) -> (String, Option<u64>) {
        let names = t.primary_key().to_vec();
        let order: Vec<String> = names.iter().map(|k| self.dialect.quote(k)).collect();
        let keyset = self.keyset(t, chunk).map(|literals| Keyset { columns: order.clone(), names, literals });
        let cut_by = chunk.cut.as_ref().and_then(|_| cut_by(&*self.dialect, t).ok().flatten());
        let order =
            if order.is_empty() { self.dialect.keyless_order().map(str::to_string) } else { Some(order.join(", ")) };
        let key = t.integer_key().map(|k| self.dialect.quote(k));
        let by = (keyset.as_ref(), cut_by.as_ref());
        let (tail, limit) = self.position.chunk.page(chunk, key.as_deref(), by, order.as_deref(), PAGE_ROWS);
        (format!("{}{tail}", self.dialect.select(t)), limit)
    }

    /// How `t` is paged by its key in `chunk`: a key of other than one integer that compares as
    /// its text says, or any such key in a chunk cut at values (of a `chunk_key_column`).
    fn keyset(&self, t: &D::Table, chunk: &Chunk) -> Option<Vec<Literal>> {
        if t.primary_key().is_empty() || (t.integer_key().is_some() && chunk.cut.is_none()) {
            return None;
        }
        self.dialect.key_literal(t, t.primary_key())
    }

    /// The lazy entry `lazy` in front of the chunks ([`Chunk::feed`]): replaced by its next chunk
    /// (and the entry after that) once the chunk's end is read, or done with when its table has
    /// no more chunks of this reader (then true).
    async fn take_cut(&mut self, lazy: Chunk) -> anyhow::Result<bool> {
        let tables = self.tables.clone();
        let name = |i: usize| tables[i].name().to_string();
        let mut feed = lazy.feed.clone().expect("a lazy entry");
        let k = lazy.start().max(0) as usize;
        let next = {
            let cutting =
                feed.wait_for(|c| c.values.len() > k || c.done || c.failed.is_some()).await.map_err(|_| {
                    Restartable::error(format!("`{}`: its snapshot chunks stopped being cut", name(lazy.table)))
                })?;
            if let Some((why, restartable)) = &cutting.failed {
                return Err(if *restartable { Restartable::error(why.clone()) } else { anyhow::anyhow!("{why}") });
            }
            lazy.next_cut(&cutting.values, cutting.done)
        };
        match next {
            Next::Chunk(chunk, after) => {
                self.chunks.pop_front();
                if let Some(after) = after {
                    self.chunks.push_front(after);
                }
                self.chunks.push_front(chunk);
            }
            Next::Spent => {
                self.position.chunk.next_chunk(&mut self.chunks, name);
                return Ok(true);
            }
            Next::Wait => unreachable!("waited for its end"),
        }
        Ok(false)
    }

    /// Tables whose key values are all read: kept in the position as they are.
    fn settle_feeds(&mut self) {
        let position = &mut self.position.chunk;
        self.feeds.retain(|name, feed| {
            let cutting = feed.borrow();
            if !cutting.done {
                return true;
            }
            if let Some(values) = position.cuts.as_mut().and_then(|c| c.get_mut(name)) {
                values.clone_from(&cutting.values);
            }
            false
        });
    }

    /// `t`'s schema, as of the restored position when there is one.
    fn announce(&self, t: &D::Table) -> crate::runtime::SchemaChange {
        let change = t.announce();
        if self.restored { change.resumed() } else { change }
    }

    /// Every chunk is read: the log's next event (worker 0 of a mode that follows it), else the end.
    async fn follow(&mut self) -> anyhow::Result<Option<Event>> {
        if let Some(session) = self.session.take() {
            self.dialect.close(session).await;
        }
        if !self.follows {
            return Ok(None);
        }
        if self.follower.is_none() {
            // The tables as of the log position (as kept with it), and those found at the start
            // that it does not know (a table the patterns cover since the restart).
            let mut tables = match &self.position.tables {
                Some(defs) => defs.iter().map(|d| self.dialect.table(d)).collect::<anyhow::Result<Vec<_>>>()?,
                None => Vec::new(),
            };
            let known: HashSet<TableId> = tables.iter().map(|t| t.id().clone()).collect();
            tables.extend(self.tables.iter().filter(|t| !known.contains(t.id())).cloned());
            // Kept with the position from now on: after a restart the log is read again from
            // there with these tables, not with the tables as a later change left them.
            self.position.tables = Some(tables.iter().map(|t| self.dialect.def(t)).collect());
            if let Some(t) = tables.iter().find(|t| !self.announced.contains(t.id())) {
                self.announced.insert(t.id().clone());
                return Ok(Some(Event::SchemaChange(self.announce(t))));
            }
            if let Some(mut gate) = self.gate.take() {
                tracing::debug!("waiting for every worker's part of the snapshot to be checkpointed");
                if gate.wait_for(|done| *done).await.is_err() {
                    return Ok(None);
                }
            }
            let at = self.position.log.at().or_else(|| self.log_start.clone());
            let Some(at) = at else { return Ok(None) };
            let follower = self.dialect.follow(at, self.position.log.skip(), tables).await?;
            self.dialect.progress().following();
            self.follower = Some(follower);
        }
        let follower = self.follower.as_mut().expect("opened above");
        let (event, after) = follower.next().await?;
        match after {
            Some(after) => {
                self.position.log.advance(after);
                if let Some(defs) = follower.take_changed_tables() {
                    self.position.tables = Some(defs);
                }
            }
            None => self.position.log.step(),
        }
        Ok(Some(event))
    }
}

#[async_trait]
impl<D: Dialect> SourceReader for Reader<D> {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        if !self.feeds.is_empty() {
            self.settle_feeds();
        }
        while let Some(lazy) = self.chunks.front().filter(|c| c.feed.is_some()).cloned() {
            if self.take_cut(lazy.clone()).await? && self.chunks.is_empty() {
                // The last chunk read was this reader's last: its position says so before it
                // goes on to the log (which may wait for every reader's position to say so).
                let t = &self.tables[lazy.table];
                if self.announced.insert(t.id().clone()) {
                    return Ok(Some(Event::SchemaChange(self.announce(t))));
                }
                return Ok(Some(t.nothing()));
            }
        }
        let Some(chunk) = self.chunks.front().cloned() else {
            if !self.position.chunk.done {
                self.position.chunk.finish();
            }
            return self.follow().await;
        };
        let tables = self.tables.clone();
        let t = &tables[chunk.table];
        self.position.chunk.enter(t.name(), &chunk);
        if !self.announced.contains(t.id()) {
            self.announced.insert(t.id().clone());
            return Ok(Some(Event::SchemaChange(self.announce(t))));
        }
        if self.schema_only {
            self.chunks.pop_front();
            return Ok(Some(t.nothing()));
        }
        let (sql, limit) = self.page(t, &chunk);
        if self.session.is_none() {
            self.session = Some(self.dialect.session(self.snapshot.as_deref()).await?);
        }
        let session = self.session.as_mut().expect("opened above");
        let rows = self.dialect.rows(session, t, &sql).await?;
        let batch = batch_of(t, &rows)?;
        let key = t.integer_key().and_then(|k| t.column(k));
        let last_key = key.and_then(|k| rows.last()?[k].as_deref()?.parse::<i64>().ok());
        let last_values = self.keyset(t, &chunk).and_then(|_| {
            let last = rows.last()?;
            t.primary_key().iter().map(|k| last[t.column(k)?].clone()).collect::<Option<Vec<String>>>()
        });
        let names = |i: usize| tables[i].name().to_string();
        let page = (rows.len() as u64, limit.unwrap_or(u64::MAX));
        self.position.chunk.advance(&mut self.chunks, page, last_key, last_values, names);
        let chunk_done = page.0 < page.1;
        self.dialect.progress().read(t.id().as_str(), rows.len() as u64, chunk_done);
        Ok(Some(Event::data(t.id(), batch)))
    }

    fn position(&self) -> serde_json::Value {
        if self.feeds.is_empty() {
            return self.position.to_value();
        }
        let mut p = self.position.clone();
        for (name, feed) in &self.feeds {
            if let Some(values) = p.chunk.cuts.as_mut().and_then(|c| c.get_mut(name)) {
                let cutting = feed.borrow();
                values.clone_from(&cutting.values);
                if !cutting.done {
                    p.chunk.cutting.insert(name.clone());
                }
            }
        }
        p.to_value()
    }
}

/// `rows` of `t` (each value as the text Doris gets) as a batch of inserts.
pub(crate) fn batch_of<T: CdcTable>(t: &T, rows: &[Vec<Option<String>>]) -> anyhow::Result<Batch> {
    let mut builder = BatchBuilder::new(t.schema().clone()).map_err(|e| anyhow::anyhow!(e.message))?;
    for texts in rows {
        let values: Vec<Value<'_>> = texts.iter().map(|v| v.as_deref().map_or(Value::Null, Value::Str)).collect();
        builder.push(RowKind::Insert, &values).map_err(|e| anyhow::anyhow!("reading `{}`: {}", t.id(), e.message))?;
    }
    builder.finish().map_err(|e| anyhow::anyhow!(e.message))
}
