//! The Doris sink's writer: one per worker, one Stream Load per target table at a time.
//!
//! Streaming mode (default): the first batch of a checkpoint interval opens a chunked Stream Load
//! whose body is fed from `buffer_count` buffers of `buffer_size` bytes, so a slow Doris slows the
//! pipeline instead of filling memory. At the checkpoint barrier the body is ended; with 2PC the
//! load is then pre-committed and its label and transaction id go into the checkpoint, to be
//! committed once the checkpoint is durable. Every label is appended to the sink's journal when
//! its load starts, and the journal is made durable (one fsync for all of them) before any body
//! ends, so no load can be pre-committed without recovery knowing its label. At most
//! `max_open_loads` loads are open per writer: opening one more ends the least recently written
//! (its transaction joins the checkpoint's), and a table not written for a whole checkpoint
//! interval is forgotten.
//!
//! Batch mode (`enable.batch_mode`): rows are buffered and loaded when `buffer_flush.max_rows`,
//! `max_bytes` or `interval` is reached, with at most `flush.queue_size` loads in flight. A retry
//! reuses its label, so a retry after a lost reply is answered `Label Already Exists` and loads
//! nothing twice.

mod load;
mod metrics;
mod settings;

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use bytes::Bytes;
use flate2::write::GzEncoder;
use futures::{StreamExt as _, TryStreamExt as _};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use super::committer::{LabelEntry, Txn};
use crate::doris::fe::{FeClient, LoadResponse, TableInfo};
use crate::doris::format::BodyEncoder;
use crate::doris::{DorisError, Label};
use crate::runtime::Restartable;
use crate::runtime::dead_letter::{self, BatchRefused, DeadLetter, Refusal};
use crate::state::Journal;
use crate::{Batch, RowKind};
use load::{
    Finished, PART_LOADS_AT_ONCE, Part, batch_load, finish_load, gzip, load_failure, load_headers, log_reason,
    send_chunk,
};
pub use metrics::SinkMetrics;
pub use settings::{BatchMode, SinkSettings, is_valid_label};

/// A failure a restart cannot mend (a bad row, a broken promise of Doris').
fn fatal(message: impl Into<String>) -> anyhow::Error {
    anyhow::anyhow!(message.into())
}

/// A failure a restart from the last checkpoint may mend (a load that broke off).
fn retry(message: impl Into<String>) -> anyhow::Error {
    Restartable::error(message)
}

/// A Doris client error: restartable when Doris was unreachable or a load failed.
pub fn from_doris(e: DorisError) -> anyhow::Error {
    if e.is_transient() || matches!(e, DorisError::LoadFailed { .. }) { Restartable::caused_by(e) } else { e.into() }
}

type LoadTask = JoinHandle<Result<LoadResponse, DorisError>>;

/// A Stream Load whose body is still being written.
struct OpenLoad {
    label: Option<Label>,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    /// Set when the body is complete; until then a closed channel breaks the body off.
    ended: Arc<std::sync::atomic::AtomicBool>,
    /// Taken when the reply is awaited; a load dropped with its task still here is cut off, so
    /// Doris aborts it instead of loading a partial body.
    task: Option<LoadTask>,
    started: Instant,
    buf: Vec<u8>,
    gz: Option<GzEncoder<Vec<u8>>>,
    encoder: BodyEncoder,
    with_sign: bool,
    /// With 2PC and a dead-letter target: the rows sent, so that rows Doris filters out can be
    /// found (see [`DorisWriter::set_aside`]).
    sent: Option<Vec<(arrow::record_batch::RecordBatch, Vec<u8>)>>,
}

/// Rows waiting for a batch-mode flush.
impl Drop for OpenLoad {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

struct Pending {
    body: Vec<u8>,
    encoder: BodyEncoder,
    rows: u64,
    since: Instant,
    with_sign: bool,
    columns: Vec<String>,
}

struct TableState {
    db: String,
    table: String,
    info: TableInfo,
    open: Option<OpenLoad>,
    /// Loads opened for this table in the current checkpoint interval.
    seq: u32,
    pending: Option<Pending>,
    /// When it was last written (for closing the least recently written load).
    last_write: Instant,
    /// Written in the current checkpoint interval.
    active: bool,
}

/// The sink of one worker.
pub struct DorisWriter {
    settings: Arc<SinkSettings>,
    client: FeClient,
    journal: Arc<Journal>,
    metrics: Arc<SinkMetrics>,
    worker: u32,
    run: u64,
    /// The checkpoint the rows being written now belong to.
    checkpoint: u64,
    tables: HashMap<String, TableState>,
    /// Pre-committed in this interval, waiting for the barrier.
    precommitted: Vec<Txn>,
    /// Batch-mode loads in flight.
    flushing: JoinSet<anyhow::Result<Option<Finished>>>,
    batch_seq: u64,
    /// Rows Doris filtered out of this interval's loads, for the dead-letter target.
    letters: Vec<DeadLetter>,
}

impl DorisWriter {
    pub fn new(
        settings: Arc<SinkSettings>,
        client: FeClient,
        journal: Arc<Journal>,
        metrics: Arc<SinkMetrics>,
        ctx: crate::runtime::WriterContext,
    ) -> Self {
        let (worker, run, checkpoint) = (ctx.worker as u32, ctx.run, ctx.checkpoint);
        Self {
            settings,
            client,
            journal,
            metrics,
            worker,
            run,
            checkpoint,
            tables: HashMap::new(),
            precommitted: Vec::new(),
            flushing: JoinSet::new(),
            batch_seq: 0,
            letters: Vec::new(),
        }
    }

    async fn table_state(&mut self, target: &str) -> anyhow::Result<&mut TableState> {
        if !self.tables.contains_key(target) {
            let (db, table) = match target.split_once('.') {
                Some((d, t)) => (d.to_string(), t.to_string()),
                None => (self.settings.default_db.clone(), target.to_string()),
            };
            let info = self.client.table_info(&db, &table).await.map_err(|e| match e {
                // Rows routed to a table that is not there.
                DorisError::Table { .. } => BatchRefused::error(e.to_string()),
                e => from_doris(e),
            })?;
            let ts = TableState {
                db,
                table,
                info,
                open: None,
                seq: 0,
                pending: None,
                last_write: Instant::now(),
                active: true,
            };
            self.tables.insert(target.to_string(), ts);
        }
        let ts = self.tables.get_mut(target).expect("inserted above");
        ts.last_write = Instant::now();
        ts.active = true;
        Ok(ts)
    }

    /// Make every label journaled so far durable: before any body ends, since a load whose body
    /// ended may be pre-committed. One fsync however many loads end.
    async fn sync_journal(&self) -> anyhow::Result<()> {
        if !self.settings.two_phase {
            return Ok(());
        }
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || journal.sync()).await??;
        Ok(())
    }

    /// Pre-commit the open load of `target` now (its transaction joins this checkpoint's).
    async fn end_load(&mut self, target: &str) -> anyhow::Result<()> {
        let settings = self.settings.clone();
        let Some(ts) = self.tables.get_mut(target) else { return Ok(()) };
        let Some(open) = ts.open.take() else { return Ok(()) };
        let (db, table) = (ts.db.clone(), ts.table.clone());
        self.sync_journal().await?;
        self.finish(target, &db, &table, open, &settings).await
    }

    /// End `open`'s body and settle its reply: its transaction joins the checkpoint's, unless
    /// Doris filtered rows out of it and they can be set aside.
    async fn finish(
        &mut self,
        target: &str,
        db: &str,
        table: &str,
        mut open: OpenLoad,
        settings: &SinkSettings,
    ) -> anyhow::Result<()> {
        let sent = open.sent.take();
        let with_sign = open.with_sign;
        let mut done = finish_load(&self.client, &self.metrics, settings, db, table, open).await?;
        match (done.txn.take(), sent) {
            (Some(txn), Some(sent)) if done.filtered > 0 => self.set_aside(target, txn, sent, with_sign).await,
            (txn, _) => {
                if txn.is_none() {
                    // Committed (or refused) as it ended: its transaction is over.
                    settings.txns.release(db, self.checkpoint, 1);
                }
                if done.filtered > 0 && settings.dead_letters {
                    self.letters_from_log(&done).await;
                }
                self.precommitted.extend(txn);
                Ok(())
            }
        }
    }

    /// Doris filtered rows out of the pre-committed load `txn`, whose rows were `sent`: abort
    /// it and load the rows again in halves, each with `max_filter_ratio: 0`, so that a part
    /// with a bad row fails as a whole; parts that load are pre-committed (their transactions
    /// join the checkpoint's), a part of one bad row is a dead letter with Doris' reason. About
    /// 2 × log2(rows / bad rows) loads per bad row, and none unless Doris filtered something.
    async fn set_aside(
        &mut self,
        target: &str,
        txn: Txn,
        sent: Vec<(arrow::record_batch::RecordBatch, Vec<u8>)>,
        with_sign: bool,
    ) -> anyhow::Result<()> {
        self.client.abort(&txn.db, txn.txn_id).await.map_err(from_doris)?;
        let Some(schema) = sent.first().map(|(b, _)| b.schema()) else { return Ok(()) };
        let rows = arrow::compute::concat_batches(&schema, sent.iter().map(|(b, _)| b))?;
        let signs: Vec<u8> = sent.iter().flat_map(|(_, s)| s.iter().copied()).collect();
        drop(sent);
        let (db, table) = (txn.db.clone(), txn.table.clone());
        // Round by round: the parts of a round are labelled and journaled together (one
        // fsync), then loaded a few at a time; each part refused is split for the next round.
        let mut round = vec![(0, rows.num_rows())];
        while !round.is_empty() {
            let labels: Vec<Label> = round.iter().map(|_| self.journal_label(target)).collect::<anyhow::Result<_>>()?;
            self.sync_journal().await?;
            let this = &*self;
            let loads: Vec<_> = round
                .iter()
                .zip(labels)
                .map(|(&(at, len), label)| {
                    this.part_load(&db, &table, label, rows.slice(at, len), &signs[at..at + len], with_sign)
                })
                .collect();
            let answers: Vec<Part> = futures::stream::iter(loads).buffered(PART_LOADS_AT_ONCE).try_collect().await?;
            let mut next = Vec::new();
            for ((at, len), answer) in round.into_iter().zip(answers) {
                match answer {
                    Part::Loaded(txn) => self.precommitted.push(txn),
                    Part::Refused { label, reason } if len == 1 => {
                        let kind = if signs[at] == 1 { RowKind::Delete } else { RowKind::Insert };
                        let one = Batch { table: None, data: rows.slice(at, 1), row_kinds: vec![kind] };
                        let refusal = Refusal::Doris { label: label.into() };
                        self.letters.push(dead_letter::letter(&format!("{db}.{table}"), &one, 0, refusal, reason));
                    }
                    Part::Refused { .. } => {
                        let half = len / 2;
                        next.push((at, half));
                        next.push((at + half, len - half));
                    }
                }
            }
            round = next;
        }
        Ok(())
    }

    /// A new label for a load of `target` in this checkpoint, journaled (not yet synced).
    fn journal_label(&mut self, target: &str) -> anyhow::Result<Label> {
        let ts = self.tables.get_mut(target).expect("a table with a load");
        let label = self.settings.label(&ts.db, &ts.table, self.worker, self.checkpoint, self.run, ts.seq);
        ts.seq += 1;
        let entry = LabelEntry {
            db: ts.db.clone(),
            table: ts.table.clone(),
            label: label.clone(),
            checkpoint: self.checkpoint,
            run: self.run,
        };
        self.journal.append(&entry).map_err(|e| fatal(e.to_string()))?;
        Ok(label)
    }

    /// Load `rows` into `db.table` alone, under the journaled `label`, pre-committed, refusing
    /// any bad row.
    async fn part_load(
        &self,
        db: &str,
        table: &str,
        label: Label,
        rows: arrow::record_batch::RecordBatch,
        signs: &[u8],
        with_sign: bool,
    ) -> anyhow::Result<Part> {
        let settings = &self.settings;
        let (db, table) = (db.to_string(), table.to_string());
        let columns: Vec<String> = rows.schema().fields().iter().map(|f| f.name().clone()).collect();
        let mut headers = load_headers(settings, Some(&label), &columns, with_sign, true);
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case("max_filter_ratio"));
        headers.push(("max_filter_ratio".into(), "0".into()));
        let mut body = Vec::new();
        let mut encoder = BodyEncoder::new(settings.format.clone());
        encoder.write(&rows, with_sign.then_some(signs), &mut body).map_err(fatal)?;
        encoder.finish(&mut body).map_err(fatal)?;
        let body = if settings.gzip { gzip(&body)? } else { body };
        let timeout = settings.read_timeout + Duration::from_secs(body.len() as u64 / (1 << 20));
        let reply = self
            .client
            .load(&db, &table, &headers, reqwest::Body::from(body), Some(timeout))
            .await
            .map_err(from_doris)?;
        if reply.is_success() && reply.number_filtered_rows == 0 {
            if reply.two_phase_commit.as_deref() != Some("true") {
                return Err(fatal(format!(
                    "stream load of `{db}.{table}` (label `{label}`) was not pre-committed although `two_phase_commit: true` was sent"
                )));
            }
            return Ok(Part::Loaded(Txn { db, table, label: reply.label, txn_id: reply.txn_id }));
        }
        if reply.is_success() {
            // Filtered although `max_filter_ratio` is 0: not Doris as documented; do not keep it.
            self.client.abort(&db, reply.txn_id).await.map_err(from_doris)?;
        } else if !reply.is_data_quality() {
            return Err(load_failure(&self.client, &db, &table, &reply).await);
        }
        let reason = match reply.error_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => self.client.error_log(url, 1).await,
            None => String::new(),
        };
        let reason = log_reason(&reason).unwrap_or(reply.message.as_str()).to_string();
        Ok(Part::Refused { label, reason })
    }

    /// Without 2PC the load is committed already: set aside the rows its error log shows (as
    /// the lines Doris logged), and say how many more it filtered than it logged.
    async fn letters_from_log(&mut self, done: &Finished) {
        let target = format!("{}.{}", done.db, done.table);
        let refusal = Refusal::Doris { label: done.label.to_string() };
        let log = match done.error_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => self.client.error_log(url, usize::MAX).await,
            None => String::new(),
        };
        let letter = |reason: String, row: serde_json::Map<String, serde_json::Value>| DeadLetter {
            table: target.clone(),
            refusal: refusal.clone(),
            reason,
            row,
            kind: String::new(),
            columns: String::new(),
            component: String::new(),
        };
        let mut letters = Vec::new();
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            let reason = log_reason(line).unwrap_or(line).to_string();
            let src = line
                .split_once(". src line [")
                .or_else(|| line.split_once(". Row: "))
                .map(|(_, s)| s.trim_end().trim_end_matches(';').trim_end().trim_end_matches(']').to_string());
            let row = [("src_line".to_string(), src.map_or(serde_json::Value::Null, Into::into))].into_iter().collect();
            letters.push(letter(reason, row));
        }
        let logged = letters.len() as u64;
        if done.filtered > logged {
            let reason = format!(
                "Doris filtered {} rows of this load and its error log shows {logged}; the others cannot be named without two-phase commit (`enable_2pc = true`)",
                done.filtered
            );
            letters.push(letter(reason, Default::default()));
        }
        self.letters.extend(letters);
    }

    /// The rows Doris filtered out since the last call.
    pub fn take_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.letters)
    }

    /// Before a load is opened: at `max_open_loads`, end the least recently written one.
    async fn make_room(&mut self) -> anyhow::Result<()> {
        let open: Vec<(&String, Instant)> =
            self.tables.iter().filter(|(_, t)| t.open.is_some()).map(|(k, t)| (k, t.last_write)).collect();
        if open.len() < self.settings.max_open_loads {
            return Ok(());
        }
        let oldest = open.iter().min_by_key(|(_, at)| *at).map(|(k, _)| (*k).clone()).expect("at least one open");
        self.end_load(&oldest).await
    }

    /// The sink's default table, `db.table`.
    pub fn default_target(&self) -> String {
        format!("{}.{}", self.settings.default_db, self.settings.default_table)
    }

    /// Write one batch to its table (`batch.table`, else the sink's `table`).
    pub async fn write(&mut self, batch: &Batch) -> anyhow::Result<()> {
        let target = batch.table.clone().unwrap_or_else(|| self.default_target());
        let settings = self.settings.clone();
        let ts = self.table_state(&target).await?;
        let deletes = settings.enable_delete && ts.info.is_unique();
        let (data, signs) = shape_rows(batch, deletes, settings.ignore_update_before)?;
        if data.num_rows() == 0 {
            return Ok(());
        }
        let needs_sign = signs.contains(&1);
        if settings.batch_mode.is_some() {
            return self.buffer_rows(&target, data, signs, needs_sign).await;
        }
        let ts = self.tables.get_mut(&target).expect("looked up above");
        if ts.open.as_ref().is_some_and(|o| needs_sign && !o.with_sign) {
            // The open load has no delete sign column: finish it and open one that has.
            self.end_load(&target).await?;
        }
        if self.tables[&target].open.is_none() {
            self.make_room().await?;
            let permit = self.load_permit().await?;
            self.open_load(&target, &data, needs_sign, permit).await?;
        }
        let ts = self.tables.get_mut(&target).expect("looked up above");
        let open = ts.open.as_mut().expect("opened above");
        let mut encoded = Vec::new();
        open.encoder.write(&data, open.with_sign.then_some(signs.as_slice()), &mut encoded).map_err(fatal)?;
        if let Some(sent) = open.sent.as_mut() {
            sent.push((data, signs));
        }
        match &mut open.gz {
            Some(gz) => {
                gz.write_all(&encoded)?;
                open.buf.append(gz.get_mut());
            }
            None => open.buf.append(&mut encoded),
        }
        if open.buf.len() >= settings.buffer_size {
            let chunk = Bytes::from(std::mem::take(&mut open.buf));
            send_chunk(open, chunk, &settings, &ts.db, &ts.table).await?;
        }
        Ok(())
    }

    /// A turn among the tenant's open Stream Loads, when it has a limit. While it waits, this
    /// writer holds none: its own open loads are ended first.
    async fn load_permit(&mut self) -> anyhow::Result<Option<tokio::sync::OwnedSemaphorePermit>> {
        let Some(permits) = self.settings.load_permits.clone() else { return Ok(None) };
        if let Ok(p) = permits.clone().try_acquire_owned() {
            return Ok(Some(p));
        }
        let open: Vec<String> = self.tables.iter().filter(|(_, t)| t.open.is_some()).map(|(k, _)| k.clone()).collect();
        for target in open {
            self.end_load(&target).await?;
        }
        Ok(Some(permits.acquire_owned().await?))
    }

    async fn open_load(
        &mut self,
        target: &str,
        data: &arrow::record_batch::RecordBatch,
        with_sign: bool,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> anyhow::Result<()> {
        let settings = self.settings.clone();
        let db = self.tables[target].db.clone();
        settings.txns.take(&db, self.checkpoint).await?;
        let ts = self.tables.get_mut(target).expect("looked up before");
        let label = (!settings.group_commit)
            .then(|| settings.label(&ts.db, &ts.table, self.worker, self.checkpoint, self.run, ts.seq));
        ts.seq += 1;
        // A pre-committed load outlives a crash; the journal is how recovery finds it. Loads
        // without 2PC die with their connection.
        if let Some(label) = label.as_ref().filter(|_| settings.two_phase) {
            let entry = LabelEntry {
                db: ts.db.clone(),
                table: ts.table.clone(),
                label: label.clone(),
                checkpoint: self.checkpoint,
                run: self.run,
            };
            self.journal.append(&entry).map_err(|e| fatal(e.to_string()))?;
        }
        let columns: Vec<String> = data.schema().fields().iter().map(|f| f.name().clone()).collect();
        let headers = load_headers(&settings, label.as_deref(), &columns, with_sign, settings.two_phase);
        let (tx, mut rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(settings.buffer_count);
        // The body ends only when the writer says so: a writer dropped mid-load (its worker
        // cancelled, the process stopping) breaks the body off, so Doris aborts the load instead
        // of taking what it got for all of it.
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let body_ended = ended.clone();
        let stream = futures::stream::poll_fn(move |cx| match rx.poll_recv(cx) {
            std::task::Poll::Ready(None) if !body_ended.load(Ordering::Acquire) => {
                std::task::Poll::Ready(Some(Err(std::io::Error::other("the load was abandoned before its body ended"))))
            }
            other => other,
        });
        let body = reqwest::Body::wrap_stream(stream);
        let client = self.client.clone();
        let (db, table) = (ts.db.clone(), ts.table.clone());
        let task = tokio::spawn(async move {
            let _permit = permit;
            client.load(&db, &table, &headers, body, None).await
        });
        let keep_rows = settings.dead_letters && settings.two_phase && label.is_some();
        ts.open = Some(OpenLoad {
            label,
            tx,
            ended,
            task: Some(task),
            started: Instant::now(),
            buf: Vec::with_capacity(settings.buffer_size),
            gz: settings.gzip.then(|| GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            encoder: BodyEncoder::new(settings.format.clone()),
            with_sign,
            sent: keep_rows.then(Vec::new),
        });
        Ok(())
    }

    async fn buffer_rows(
        &mut self,
        target: &str,
        data: arrow::record_batch::RecordBatch,
        signs: Vec<u8>,
        needs_sign: bool,
    ) -> anyhow::Result<()> {
        let settings = self.settings.clone();
        let mode = settings.batch_mode.clone().expect("batch mode");
        let ts = self.tables.get_mut(target).expect("looked up before");
        if ts.pending.as_ref().is_some_and(|p| needs_sign && !p.with_sign) {
            self.flush_table(target).await?;
        }
        let ts = self.tables.get_mut(target).expect("looked up before");
        let pending = ts.pending.get_or_insert_with(|| Pending {
            body: Vec::new(),
            encoder: BodyEncoder::new(settings.format.clone()),
            rows: 0,
            since: Instant::now(),
            with_sign: needs_sign,
            columns: data.schema().fields().iter().map(|f| f.name().clone()).collect(),
        });
        let signs = pending.with_sign.then_some(signs.as_slice());
        pending.encoder.write(&data, signs, &mut pending.body).map_err(fatal)?;
        pending.rows += data.num_rows() as u64;
        if pending.rows >= mode.max_rows || pending.body.len() as u64 >= mode.max_bytes {
            self.flush_table(target).await?;
        }
        Ok(())
    }

    /// Batch mode: flush buffers older than `buffer_flush.interval`. Call it now and then.
    pub async fn tick(&mut self) -> anyhow::Result<()> {
        let Some(mode) = self.settings.batch_mode.clone() else { return Ok(()) };
        let due: Vec<String> = self
            .tables
            .iter()
            .filter(|(_, t)| t.pending.as_ref().is_some_and(|p| p.since.elapsed() >= mode.interval))
            .map(|(k, _)| k.clone())
            .collect();
        for target in due {
            self.flush_table(&target).await?;
        }
        // Surface failures of finished loads promptly.
        while let Some(done) = self.flushing.try_join_next() {
            self.flushed(done?).await?;
        }
        Ok(())
    }

    /// A batch-mode load is done: with a dead-letter target, the rows Doris filtered out of it
    /// are set aside as its error log shows them.
    async fn flushed(&mut self, done: anyhow::Result<Option<Finished>>) -> anyhow::Result<()> {
        if let Some(f) = done?.filter(|f| f.filtered > 0 && self.settings.dead_letters) {
            self.letters_from_log(&f).await;
        }
        Ok(())
    }

    async fn flush_table(&mut self, target: &str) -> anyhow::Result<()> {
        let settings = self.settings.clone();
        let mode = settings.batch_mode.clone().expect("batch mode");
        let ts = self.tables.get_mut(target).expect("looked up before");
        let Some(mut pending) = ts.pending.take() else { return Ok(()) };
        pending.encoder.finish(&mut pending.body).map_err(fatal)?;
        while self.flushing.len() >= mode.queue_size.max(1) {
            if let Some(done) = self.flushing.join_next().await {
                self.flushed(done?).await?;
            }
        }
        let ts = self.tables.get_mut(target).expect("looked up before");
        self.batch_seq += 1;
        let label = (!settings.group_commit).then(|| {
            settings.label(&ts.db, &ts.table, self.worker, self.run, self.batch_seq, 0).replacen(
                &settings.label_prefix,
                &format!("{}_b", settings.label_prefix),
                1,
            )
        });
        let headers = load_headers(&settings, label.as_deref(), &pending.columns, pending.with_sign, false);
        let body = if settings.gzip { gzip(&pending.body)? } else { pending.body };
        let body = Bytes::from(body);
        let (client, metrics, db, table) = (self.client.clone(), self.metrics.clone(), ts.db.clone(), ts.table.clone());
        self.flushing.spawn(async move {
            batch_load(&client, &metrics, &settings, &db, &table, label.as_deref(), &headers, body).await
        });
        Ok(())
    }

    /// The checkpoint the rows written now belong to.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }

    pub fn settings(&self) -> &SinkSettings {
        &self.settings
    }

    /// Rows written from now on belong to checkpoint `checkpoint` at the earliest (a cluster's
    /// checkpoint numbers grow but are not always consecutive).
    pub fn resume_at(&mut self, checkpoint: u64) {
        self.checkpoint = self.checkpoint.max(checkpoint);
    }

    /// The checkpoint barrier: end every open load and return the transactions to commit once
    /// checkpoint `checkpoint` is durable. Rows written after this belong to the next checkpoint.
    pub async fn prepare_commit(&mut self) -> anyhow::Result<Vec<Txn>> {
        let settings = self.settings.clone();
        let targets: Vec<String> = self.tables.keys().cloned().collect();
        if self.tables.values().any(|t| t.open.is_some()) {
            self.sync_journal().await?;
        }
        for target in &targets {
            if settings.batch_mode.is_some() {
                self.flush_table(target).await?;
                continue;
            }
            let ts = self.tables.get_mut(target).expect("listed above");
            if let Some(open) = ts.open.take() {
                let (db, table) = (ts.db.clone(), ts.table.clone());
                self.finish(target, &db, &table, open, &settings).await?;
            }
            // Labels count from 0 again in the next checkpoint.
            self.tables.get_mut(target).expect("listed above").seq = 0;
        }
        while let Some(done) = self.flushing.join_next().await {
            self.flushed(done?).await?;
        }
        // Tables not written in this interval are forgotten (looked up again when they are).
        self.tables.retain(|_, t| std::mem::take(&mut t.active) || t.pending.is_some());
        self.checkpoint += 1;
        Ok(std::mem::take(&mut self.precommitted))
    }

    /// Whether the sink buffers for batch-mode flushes.
    pub fn wants_ticks(&self) -> bool {
        self.settings.batch_mode.is_some()
    }

    /// `db.table` is about to change its schema: end its open load first, so that no load spans
    /// the change.
    pub async fn before_schema_change(&mut self, target: &str) -> anyhow::Result<()> {
        if self.settings.batch_mode.is_some() {
            return if self.tables.contains_key(target) { self.flush_table(target).await } else { Ok(()) };
        }
        self.end_load(target).await
    }

    /// `target`'s columns changed: read its key model and columns again. Its loads of this
    /// checkpoint keep counting, so no label repeats.
    pub async fn after_schema_change(&mut self, target: &str) -> anyhow::Result<()> {
        if let Some(ts) = self.tables.get_mut(target) {
            ts.info = self.client.table_info(&ts.db, &ts.table).await.map_err(from_doris)?;
        }
        Ok(())
    }
}

/// Which rows go to Doris, and their delete signs: inserts and update-afters as 0; deletes as 1
/// when the table takes deletes, else dropped; update-befores dropped unless
/// `ignore.update_before = false`, then as deletes.
fn shape_rows(
    batch: &Batch,
    deletes: bool,
    ignore_update_before: bool,
) -> anyhow::Result<(arrow::record_batch::RecordBatch, Vec<u8>)> {
    let n = batch.num_rows();
    if batch.row_kinds.is_empty() || batch.row_kinds.iter().all(|k| matches!(k, RowKind::Insert | RowKind::UpdateAfter))
    {
        return Ok((batch.data.clone(), vec![0; n]));
    }
    let mut keep = Vec::with_capacity(n);
    let mut signs = Vec::with_capacity(n);
    for k in &batch.row_kinds {
        let sign = match k {
            RowKind::Insert | RowKind::UpdateAfter => Some(0),
            RowKind::Delete if deletes => Some(1),
            RowKind::UpdateBefore if deletes && !ignore_update_before => Some(1),
            _ => None,
        };
        keep.push(sign.is_some());
        signs.extend(sign);
    }
    let data = filter_record_batch(&batch.data, &BooleanArray::from(keep))?;
    Ok((data, signs))
}
