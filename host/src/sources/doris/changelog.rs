//! `scan.mode = "initial" | "latest" | "from-timestamp"`: a changelog-enabled Doris table followed
//! with `@incr` windows `[start, end)` whose end is the FE's clock (`/api/tso`), one window every
//! `changelog.poll_interval`, rows in TSO, LSN, op order with their row kinds from the op column.
//! `initial` first reads the snapshot (all workers) and then follows from the time it started;
//! the changelog itself is read by worker 0. A checkpoint records the window and the rows of it
//! already delivered; a window whose transactions are still in flight (error 5101) is retried
//! as it is for up to `changelog.visible_wait_timeout`.
//!
//! `@incr` bounds are whole seconds, so the first window after an `initial` snapshot starts at
//! the second the snapshot's start falls in, and would repeat the commits of that second that the
//! snapshot already holds. The start's TSO is kept with it (and in the checkpoint) and rows of the
//! first window at or below it are skipped: every change is delivered once, by the snapshot or by
//! the changelog. (A change committed after the start while the snapshot is still being read can
//! show in both, as in the Flink connector: the snapshot is not pinned to a version.)

use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::offsets::OffsetPublisher;
use super::snapshot::{DorisScan, ScanPlan, ScanPosition};
use super::{DorisTable, IncrementType, ScanMode, transient};
use crate::doris::scan::{FlightReader, quote};
use crate::doris::{DorisError, FeClient};
use crate::runtime::{Event, Position, Restartable, SourceReader, SplitEnumerator, TableId};
use crate::{Batch, RowKind};

/// The coordinator's side of a changelog source: where a new run starts, the `initial`
/// snapshot's splits, the gate that holds the changelog back until the snapshot is checkpointed,
/// and the offset table published after each checkpoint.
pub struct ChangelogEnumerator {
    source: DorisTable,
    /// Where a reader without a position starts.
    start: String,
    /// The snapshot's splits, while one is (to be) read.
    plan: Option<ScanPlan>,
    /// Readers without a position read the snapshot from its start.
    fresh_snapshot: bool,
    /// The TSO of `start` when a fresh snapshot is read: see [`ChangelogPosition::snapshot_tso`].
    snapshot_tso: Option<i64>,
    /// With several workers, `initial` follows the changelog only once this turns true: every
    /// worker's part of the snapshot is in a completed checkpoint, so no snapshot row can land
    /// after a newer change.
    gate: Option<watch::Sender<bool>>,
    offsets: Option<OffsetPublisher>,
}

impl ChangelogEnumerator {
    pub async fn new(source: &DorisTable, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Self> {
        let d = &source.config;
        let positions = restored
            .iter()
            .map(|p| p.as_ref().map(|v| ChangelogPosition::restore(Some(v), &d.table)).transpose())
            .collect::<anyhow::Result<Vec<Option<ChangelogPosition>>>>()?;
        let resumed = positions.iter().any(Option::is_some);
        // Where to start: the checkpoint, else the offset table's record, else `scan.mode`.
        let recorded = match (&source.offsets, resumed) {
            (Some(offsets), false) => offsets.read().await?,
            _ => None,
        };
        let (start_tso, start) = match &recorded {
            Some(ts) => {
                tracing::info!(table = %d.table, start = %ts, "resuming the changelog from the offset table");
                (None, ts.clone())
            }
            None if d.scan.mode == ScanMode::FromTimestamp => {
                (None, d.scan.timestamp.clone().context("source.scan.timestamp is required")?)
            }
            None => source.conn.client.tso_now().await.map_err(transient)?,
        };
        let initial = d.scan.mode == ScanMode::Initial;
        let fresh_snapshot = initial && !resumed && recorded.is_none();
        let snapshot_tso = if fresh_snapshot { start_tso } else { None };
        if fresh_snapshot && snapshot_tso.is_none() {
            tracing::warn!(table = %d.table, "the FE's /api/tso reports no current_tso: the changes committed in the second the snapshot starts can be delivered twice, by the snapshot and by the changelog");
        }
        let snapshot_pending = positions.iter().any(|p| p.as_ref().is_some_and(|p| p.snapshot.is_some()));
        let plan = if fresh_snapshot || snapshot_pending {
            Some(super::snapshot::plan(source, restored.len()).await?)
        } else {
            None
        };
        let gate = (initial && restored.len() > 1).then(|| watch::channel(!fresh_snapshot && !snapshot_pending).0);
        let offsets = source.offsets.clone().map(|o| o.publisher());
        Ok(Self { source: source.clone(), start, plan, fresh_snapshot, snapshot_tso, gate, offsets })
    }
}

#[async_trait]
impl SplitEnumerator for ChangelogEnumerator {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let position = position.map(|p| ChangelogPosition::restore(Some(p), &self.source.config.table)).transpose()?;
        Ok(Box::new(DorisChangelog::new(self, worker, position).await?))
    }

    async fn on_checkpoint_complete(&mut self, _id: u64, positions: &[serde_json::Value]) -> anyhow::Result<()> {
        let positions: Vec<ChangelogPosition> =
            positions.iter().filter_map(|p| serde_json::from_value(p.clone()).ok()).collect();
        if let Some(gate) = &self.gate
            && positions.iter().all(|p| p.snapshot.is_none())
        {
            gate.send_replace(true);
        }
        if let (Some(offsets), Some(first)) = (&self.offsets, positions.first()) {
            offsets.publish(&first.start);
        }
        Ok(())
    }
}

/// How old the changelog position is: from the start of the window read to the FE's clock when
/// it was opened (Doris' seed asks users to watch it: a position older than the changelog's TTL
/// has lost changes). Shown once a window was opened.
#[derive(Debug)]
pub struct PositionAge {
    pub source: String,
    /// Milliseconds, plus one (0: no window opened yet).
    age: std::sync::atomic::AtomicU64,
}

impl PositionAge {
    pub fn new(source: &str) -> PositionAge {
        PositionAge { source: source.to_string(), age: Default::default() }
    }

    /// A window from `start` to `end` (FE wall times, `%Y-%m-%d %H:%M:%S`) was opened.
    fn window(&self, start: &str, end: &str) {
        let parse = |t: &str| {
            chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f")
                .or_else(|_| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S"))
                .ok()
        };
        if let (Some(a), Some(b)) = (parse(start), parse(end)) {
            let ms = (b - a).num_milliseconds().max(0) as u64;
            self.age.store(ms + 1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl crate::metrics::MetricSource for PositionAge {
    fn metrics(&self) -> Vec<crate::metrics::Metric> {
        let age = self.age.load(std::sync::atomic::Ordering::Relaxed);
        if age == 0 {
            return Vec::new();
        }
        vec![crate::metrics::Metric {
            kind: crate::metrics::MetricKind::Milliseconds,
            ..crate::metrics::Metric::gauge(
                "source_position_age_seconds",
                "From the start of the changelog window read to the FE's clock when it was opened.",
                vec![("source", self.source.clone())],
                age - 1,
            )
        }]
    }
}

/// A worker's reader: its part of the `initial` snapshot, then (worker 0) the changelog.
pub struct DorisChangelog {
    snapshot: Option<DorisScan>,
    follows: bool,
    client: FeClient,
    reader: FlightReader,
    schema: SchemaRef,
    table: String,
    id: TableId,
    select: String,
    increment: IncrementType,
    poll: Duration,
    visible_wait: Duration,
    start: String,
    window: Option<Window>,
    next_poll: tokio::time::Instant,
    /// See [`ChangelogEnumerator::gate`].
    gate: Option<watch::Receiver<bool>>,
    /// `changelog.ttl_seconds` of the table, for the gap warning of `detail` / `append_only`.
    ttl_seconds: Option<i64>,
    /// See [`ChangelogPosition::snapshot_tso`].
    snapshot_tso: Option<i64>,
    age: std::sync::Arc<PositionAge>,
}

struct Window {
    end: String,
    delivered: u64,
    seen: u64,
    stream: Option<arrow_flight::decode::FlightRecordBatchStream>,
    since: Instant,
}

/// Where a changelog reader stands.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ChangelogPosition {
    /// The snapshot's position while `initial` is still reading it.
    pub snapshot: Option<ScanPosition>,
    /// Start (inclusive) of the window being read or next.
    pub start: String,
    /// End of the window being read, if one is.
    pub end: Option<String>,
    /// Rows of that window read (delivered or skipped).
    pub rows: u64,
    /// After an `initial` snapshot, until its first window is read: the TSO the snapshot started
    /// at. Changes at or below it are in the snapshot, so the window skips them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_tso: Option<i64>,
}

impl Position for ChangelogPosition {}

const META: [&str; 3] = ["__DORIS_BINLOG_TSO__", "__DORIS_BINLOG_LSN__", "__DORIS_BINLOG_OP__"];

impl DorisChangelog {
    async fn new(e: &ChangelogEnumerator, worker: usize, position: Option<ChangelogPosition>) -> anyhow::Result<Self> {
        let source = &e.source;
        let d = &source.config;
        let reader = source.flight().await?;
        let start = position.as_ref().map_or_else(|| e.start.clone(), |p| p.start.clone());
        let snapshot_tso = match &position {
            Some(p) => p.snapshot_tso,
            None if e.fresh_snapshot => e.snapshot_tso,
            None => None,
        };
        let snapshot = match (&e.plan, &position) {
            (Some(plan), None) if e.fresh_snapshot => {
                Some(DorisScan::new(plan, worker, ScanPosition::default()).await?)
            }
            (Some(plan), Some(ChangelogPosition { snapshot: Some(p), .. })) => {
                Some(DorisScan::new(plan, worker, p.clone()).await?)
            }
            _ => None,
        };
        let window = position.as_ref().and_then(|r| {
            r.end.clone().map(|end| Window { end, delivered: r.rows, seen: 0, stream: None, since: Instant::now() })
        });
        let names: Vec<String> = source.schema.fields().iter().map(|f| quote(f.name())).collect();
        let select = format!("SELECT {}, {} FROM {}", names.join(", "), META.join(", "), source.quoted());
        let ttl_seconds = match d.changelog.increment_type {
            IncrementType::Detail | IncrementType::AppendOnly if worker == 0 => {
                changelog_ttl(&source.conn.client, &source.db, &source.name).await
            }
            _ => None,
        };
        let this = Self {
            snapshot,
            follows: worker == 0,
            client: source.conn.client.clone(),
            reader,
            schema: source.schema.clone(),
            table: d.table.clone(),
            id: source.table.clone(),
            select,
            increment: d.changelog.increment_type,
            poll: d.changelog.poll_interval.0,
            visible_wait: d.changelog.visible_wait_timeout.0,
            start,
            window,
            next_poll: tokio::time::Instant::now(),
            gate: if worker == 0 { e.gate.as_ref().map(|g| g.subscribe()) } else { None },
            ttl_seconds,
            snapshot_tso,
            age: source.age.clone(),
        };
        if let Some(end) = this.window.as_ref().map(|w| w.end.clone()) {
            this.check_gap(&end);
        }
        Ok(this)
    }

    /// For `detail` and `append_only` Doris moves an expired start to the oldest change it keeps
    /// and says nothing: warn when `[start, end)` begins before what `changelog.ttl_seconds` keeps.
    fn check_gap(&self, end: &str) {
        let Some(ttl) = self.ttl_seconds else { return };
        let parse = |t: &str| sluice_guest::batch::parse_datetime_micros(t).ok();
        let (Some(start), Some(end_us)) = (parse(&self.start), parse(end)) else { return };
        let oldest = end_us - ttl * 1_000_000;
        if start < oldest {
            let secs = (oldest - start) / 1_000_000;
            tracing::warn!(
                table = %self.table,
                "the changelog of `{}` keeps {ttl} s of changes (changelog.ttl_seconds) and this read starts at {}, {secs} s before the oldest change still kept: Doris skips the expired changes without an error (increment_type = {}), so up to {secs} s of changes are missing from the output; to rebuild the target, start over with `scan.mode = \"initial\"` and a new `pipeline.state_dir` (and a new `changelog.consumer_id`, or no offset table)",
                self.table,
                self.start,
                self.increment.sql().to_lowercase(),
            );
        }
    }

    fn sql(&self, end: &str) -> String {
        format!(
            "/* ApplicationName=Sluice ArrowFlightSQL Query */ {}@incr('startTimestamp' = '{}', 'endTimestamp' = '{end}', 'incrementType' = '{}') ORDER BY {}",
            self.select,
            self.start,
            self.increment.sql(),
            META.join(", ")
        )
    }

    /// A failed read of the current window: wait and retry it while Doris says its transactions
    /// are still in flight, else fail.
    async fn window_failed(&mut self, e: DorisError) -> anyhow::Result<()> {
        let w = self.window.as_mut().expect("a window is open");
        let not_ready = e.is_window_not_ready();
        if not_ready && w.since.elapsed() < self.visible_wait {
            tracing::info!(table = %self.table, start = %self.start, end = %w.end, "window not visible yet, retrying: {e}");
            w.stream = None;
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(());
        }
        // Doris gives the expiry no code of its own: its words are all there is.
        if e.to_string().contains("has expired") {
            anyhow::bail!(
                "reading the changelog of `{}` from {}: {e}; the changes after that point are gone and this start cannot be resumed: start over with `scan.mode = \"initial\"` and a new `pipeline.state_dir` to rebuild the target from a new snapshot (with an offset table, also use a new `changelog.consumer_id` or remove `changelog.offset_table` and `changelog.consumer_id`, or the old record wins over `initial`)",
                self.table,
                self.start
            );
        }
        let failed = format!("reading the changelog of `{}` window [{}, {}): {e}", self.table, self.start, w.end);
        // Waited `changelog.visible_wait_timeout` already: a restart would only wait again.
        if not_ready || !e.is_transient() { Err(anyhow::anyhow!(failed)) } else { Err(Restartable::error(failed)) }
    }

    fn to_batch(&self, batch: RecordBatch) -> anyhow::Result<Batch> {
        let op = batch
            .column_by_name("__DORIS_BINLOG_OP__")
            .with_context(|| format!("`{}`@incr returned no __DORIS_BINLOG_OP__ column", self.table))?;
        let kinds = row_kinds(op, &self.table)?;
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f| {
                let c = batch
                    .column_by_name(f.name())
                    .with_context(|| format!("`{}`@incr has no column `{}`", self.table, f.name()))?;
                Ok(if c.data_type() == f.data_type() { c.clone() } else { cast(c, f.data_type())? })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Batch { table: None, data: RecordBatch::try_new(self.schema.clone(), columns)?, row_kinds: kinds })
    }
}

/// The row kinds of a window from its `__DORIS_BINLOG_OP__` column: 0 insert, 1 delete,
/// 2 update-before, 3 update-after. Anything else is an error naming the value, never a guess.
fn row_kinds(op: &arrow::array::ArrayRef, table: &str) -> anyhow::Result<Vec<RowKind>> {
    let op = cast(op, &arrow::datatypes::DataType::Int8)
        .with_context(|| format!("`{table}`@incr returned a __DORIS_BINLOG_OP__ column of type {}", op.data_type()))?;
    let op = op.as_any().downcast_ref::<arrow::array::Int8Array>().context("__DORIS_BINLOG_OP__ as Int8")?;
    op.iter()
        .map(|o| match o {
            Some(0) => Ok(RowKind::Insert),
            Some(1) => Ok(RowKind::Delete),
            Some(2) => Ok(RowKind::UpdateBefore),
            Some(3) => Ok(RowKind::UpdateAfter),
            other => anyhow::bail!(
                "`{table}`@incr returned __DORIS_BINLOG_OP__ = {}, which is none of 0 (insert), 1 (delete), 2 (update-before), 3 (update-after); this Doris writes a changelog Sluice does not know",
                other.map_or("NULL".to_string(), |v| v.to_string())
            ),
        })
        .collect()
}

impl DorisChangelog {
    /// The next batch of changes, before `dedup`.
    async fn next_change(&mut self) -> anyhow::Result<Option<Batch>> {
        use futures::StreamExt;
        if let Some(scan) = &mut self.snapshot {
            match scan.next_batch().await? {
                Some(b) => return Ok(Some(b)),
                None => {
                    // An empty batch, so that the next checkpoint records the snapshot as read.
                    self.snapshot = None;
                    return Ok(Some(Batch::new(RecordBatch::new_empty(self.schema.clone()))));
                }
            }
        }
        if !self.follows {
            return Ok(None);
        }
        if let Some(mut gate) = self.gate.take() {
            tracing::debug!(table = %self.table, "waiting for every worker's part of the snapshot to be checkpointed");
            if gate.wait_for(|done| *done).await.is_err() {
                return Ok(None);
            }
        }
        loop {
            if self.window.is_none() {
                tokio::time::sleep_until(self.next_poll).await;
                self.next_poll = tokio::time::Instant::now() + self.poll;
                let now = self.client.tso_time().await.map_err(transient)?;
                if now == self.start {
                    continue;
                }
                if now < self.start {
                    // A start ahead of Doris' clock (from-timestamp): wait for the clock to reach it.
                    continue;
                }
                self.check_gap(&now);
                self.age.window(&self.start, &now);
                self.window = Some(Window { end: now, delivered: 0, seen: 0, stream: None, since: Instant::now() });
            }
            if self.window.as_ref().is_some_and(|w| w.stream.is_none()) {
                let end = self.window.as_ref().expect("open").end.clone();
                let sql = self.sql(&end);
                let opened = match self.reader.execute(&sql).await {
                    Ok((_, mut tickets)) if !tickets.is_empty() => self.reader.stream(tickets.remove(0)).await,
                    Ok(_) => Err(crate::doris::DorisError::Protocol {
                        url: self.reader.url().into(),
                        detail: "no ticket".into(),
                    }),
                    Err(e) => Err(e),
                };
                match opened {
                    Ok(stream) => {
                        let w = self.window.as_mut().expect("open");
                        w.stream = Some(stream);
                        w.seen = 0;
                    }
                    Err(e) => {
                        self.window_failed(e).await?;
                        continue;
                    }
                }
            }
            let w = self.window.as_mut().expect("open");
            match w.stream.as_mut().expect("opened").next().await {
                Some(Ok(batch)) => {
                    let start = w.seen;
                    w.seen += batch.num_rows() as u64;
                    if w.seen <= w.delivered {
                        continue;
                    }
                    let skip = w.delivered.saturating_sub(start) as usize;
                    let mut batch = batch.slice(skip, batch.num_rows() - skip);
                    w.delivered = w.seen;
                    if let Some(tso) = self.snapshot_tso {
                        batch = after_tso(&batch, tso, &self.table)?;
                        if batch.num_rows() == 0 {
                            continue;
                        }
                    }
                    return Ok(Some(self.to_batch(batch)?));
                }
                Some(Err(e)) => self.window_failed(crate::doris::scan::flight_error(self.reader.url(), e)).await?,
                None => {
                    let w = self.window.take().expect("open");
                    self.start = w.end;
                    // Windows from here on start a whole second after the snapshot's start.
                    self.snapshot_tso = None;
                    // An empty batch marks the window done, so the next checkpoint records it.
                    return Ok(Some(Batch::new(RecordBatch::new_empty(self.schema.clone()))));
                }
            }
        }
    }
}

/// The rows of a window batch committed after `tso` (`__DORIS_BINLOG_TSO__ > tso`).
fn after_tso(batch: &RecordBatch, tso: i64, table: &str) -> anyhow::Result<RecordBatch> {
    let column = batch
        .column_by_name("__DORIS_BINLOG_TSO__")
        .with_context(|| format!("`{table}`@incr returned no __DORIS_BINLOG_TSO__ column"))?;
    let column = cast(column, &arrow::datatypes::DataType::Int64).with_context(|| {
        format!("`{table}`@incr returned a __DORIS_BINLOG_TSO__ column of type {}", column.data_type())
    })?;
    let newer = arrow::compute::kernels::cmp::gt(&column, &arrow::array::Int64Array::new_scalar(tso))?;
    Ok(arrow::compute::filter_record_batch(batch, &newer)?)
}

/// `changelog.ttl_seconds` (or `binlog.ttl_seconds`) from `SHOW CREATE TABLE`; Doris' default
/// (86400) when the table does not set it; `None` when it cannot be read.
async fn changelog_ttl(client: &FeClient, db: &str, table: &str) -> Option<i64> {
    let (_, rows) = match client.query(db, &format!("SHOW CREATE TABLE {}", quote(table))).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("cannot read the changelog TTL of `{db}.{table}`: {e}");
            return None;
        }
    };
    let ddl = rows.first()?.get(1)?;
    let re = regex::Regex::new(r#""(?:changelog|binlog)\.ttl_seconds"\s*=\s*"(\d+)""#).expect("valid regex");
    Some(re.captures(ddl).and_then(|c| c[1].parse().ok()).unwrap_or(86_400))
}

#[async_trait]
impl SourceReader for DorisChangelog {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        Ok(self.next_change().await?.map(|b| Event::data(&self.id, b)))
    }

    fn position(&self) -> serde_json::Value {
        ChangelogPosition {
            snapshot: self.snapshot.as_ref().map(DorisScan::position),
            start: self.start.clone(),
            end: self.window.as_ref().map(|w| w.end.clone()),
            rows: self.window.as_ref().map_or(0, |w| w.delivered),
            snapshot_tso: self.snapshot_tso,
        }
        .to_value()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int32Array};

    use super::*;

    #[test]
    fn op_codes_are_row_kinds_and_an_unknown_one_is_an_error_naming_it() {
        let ops: ArrayRef = Arc::new(Int32Array::from(vec![0, 1, 2, 3]));
        let kinds = row_kinds(&ops, "test.t").unwrap();
        assert_eq!(kinds, [RowKind::Insert, RowKind::Delete, RowKind::UpdateBefore, RowKind::UpdateAfter]);
        let bad: ArrayRef = Arc::new(Int32Array::from(vec![Some(0), Some(7)]));
        let e = row_kinds(&bad, "test.t").unwrap_err().to_string();
        assert!(e.starts_with("`test.t`@incr returned __DORIS_BINLOG_OP__ = 7, which is none of 0 (insert)"), "{e}");
        let null: ArrayRef = Arc::new(Int32Array::from(vec![None]));
        assert!(row_kinds(&null, "test.t").unwrap_err().to_string().contains("__DORIS_BINLOG_OP__ = NULL"));
    }

    #[test]
    fn the_first_window_after_a_snapshot_keeps_only_rows_committed_after_its_tso() {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("__DORIS_BINLOG_TSO__", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int32Array::from(vec![1, 2, 3, 4])), Arc::new(Int64Array::from(vec![5, 9, 10, 11]))],
        )
        .unwrap();
        let kept = after_tso(&batch, 9, "test.t").unwrap();
        let ids = kept.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(ids.values(), &[3, 4]);
        let no_tso = batch.project(&[0]).unwrap();
        let e = after_tso(&no_tso, 9, "test.t").unwrap_err().to_string();
        assert_eq!(e, "`test.t`@incr returned no __DORIS_BINLOG_TSO__ column");
    }
}
