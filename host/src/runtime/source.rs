//! Sources: where batches come from. A source runs in one worker, returns batches, and can say
//! where it is (its checkpoint position) and start again from such a position.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::array::{ArrayRef, BooleanArray, Float32Array, Float64Array, Int64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_guest::types::{ColumnDef, DorisType, arrow_schema, parse_columns};

use crate::doris::StreamLoadClient;
use crate::doris::scan::{FlightReader, quote, tablet_sql};
use crate::pipeline::IncrementType;
use crate::pipeline::{
    DatagenField, DatagenKind, DatagenSource, DorisSource as DorisSourceConfig, FileFormat, FileSource, ScanMode,
    SourceConfig,
};
use crate::{Batch, RowKind};

/// What every source does. A source belongs to one worker (`worker` of `parallelism`).
#[async_trait]
pub trait Source: Send {
    /// The schema of the batches it returns.
    fn schema(&self) -> SchemaRef;
    /// The next batch, or `None` once the source is exhausted (bounded sources only).
    async fn next(&mut self) -> anyhow::Result<Option<Batch>>;
    /// Where the source stands after the last batch it returned.
    fn position(&self) -> serde_json::Value;
    /// Total rows this source will produce, when known (for progress bars).
    fn total_rows(&self) -> Option<u64> {
        None
    }
    /// State kept beside the position, taken at each checkpoint barrier (see [`SourceState`]).
    fn state(&self) -> Option<Arc<dyn SourceState>> {
        None
    }
}

/// State a source keeps that is too large to serialise after every batch: it is taken only at a
/// checkpoint barrier (when it matches the position last reported) and stored in the position
/// under `"state"`, where the source finds it again on restore.
pub trait SourceState: Send + Sync {
    fn snapshot(&self) -> serde_json::Value;
}

/// Tablets of the snapshot scans of one run: known and read (for the progress bar).
#[derive(Debug, Default)]
pub struct TabletProgress {
    pub total: std::sync::atomic::AtomicU64,
    pub done: std::sync::atomic::AtomicU64,
}

impl TabletProgress {
    /// Back to nothing known, at the start of a run.
    pub fn reset(&self) {
        self.total.store(0, std::sync::atomic::Ordering::Relaxed);
        self.done.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// `total` more tablets to read, `done` of them already read.
    fn planned(&self, total: u64, done: u64) {
        self.total.fetch_add(total, std::sync::atomic::Ordering::Relaxed);
        self.read(done);
    }

    fn read(&self, tablets: u64) {
        self.done.fetch_add(tablets, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What sources need of the pipeline's `[doris]` connection.
#[derive(Debug, Clone)]
pub struct DorisContext {
    pub client: StreamLoadClient,
    /// The FE's Arrow Flight SQL address (`host:port`), when known.
    pub flight_addr: Option<String>,
    pub timeout: Duration,
    /// `request_retries`: how often a dropped scan stream is re-opened.
    pub retries: u32,
    /// The changelog offset table, when the source has one.
    pub offsets: Option<crate::doris::offsets::OffsetTable>,
    /// Tablets scanned so far in this run.
    pub tablets: Arc<TabletProgress>,
    /// With several workers, `initial` follows the changelog only once this turns true: every
    /// worker's part of the snapshot is in a completed checkpoint, so no snapshot row can land
    /// after a newer change.
    pub snapshot_done: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Build the source of worker `worker`, resuming at `position` when given.
pub async fn build(
    config: &SourceConfig,
    base_dir: &Path,
    worker: u32,
    parallelism: u32,
    position: Option<&serde_json::Value>,
    doris: Option<&DorisContext>,
) -> anyhow::Result<Box<dyn Source>> {
    Ok(match config {
        SourceConfig::Datagen(d) => Box::new(Datagen::new(d, worker, parallelism, position)?),
        SourceConfig::File(f) => Box::new(FileReader::new(f, base_dir, worker, position)?),
        SourceConfig::Doris(d) => {
            let ctx = doris.context("a Doris source needs a [doris] section")?;
            if d.scan.mode == ScanMode::Snapshot {
                Box::new(DorisScan::new(d, ctx, worker, parallelism, position).await?)
            } else {
                Box::new(DorisChangelog::new(d, ctx, worker, parallelism, position).await?)
            }
        }
    })
}

/// The schema of a source's batches: declared in the file, or asked of Doris.
pub async fn declared_schema(config: &SourceConfig, doris: Option<&DorisContext>) -> anyhow::Result<SchemaRef> {
    let text = match config {
        SourceConfig::Datagen(d) => &d.schema,
        SourceConfig::File(f) => &f.schema,
        SourceConfig::Doris(d) => {
            let ctx = doris.context("a Doris source needs a [doris] section")?;
            let (db, table) = d.table.split_once('.').context("source.table: expected `db.table`")?;
            let mut reader = flight(ctx).await?;
            let sql = format!("SELECT {} FROM {}.{} LIMIT 0", fields(d), quote(db), quote(table));
            let (schema, _) =
                reader.execute(&sql).await.with_context(|| format!("reading the schema of `{}`", d.table))?;
            return Ok(schema);
        }
    };
    Ok(arrow_schema(&parse_columns(text).map_err(|e| anyhow::anyhow!(e.message))?))
}

async fn flight(ctx: &DorisContext) -> anyhow::Result<FlightReader> {
    let addr = ctx.flight_addr.as_deref().context(
        "the Doris FE reports no Arrow Flight SQL port (`SHOW FRONTENDS`); set `flight_sql_port` on the source",
    )?;
    Ok(FlightReader::connect(addr, ctx.client.credentials(), ctx.timeout).await?)
}

/// `read.field` as a quoted select list (`*` when absent).
fn fields(d: &DorisSourceConfig) -> String {
    match &d.read.field {
        Some(f) if !f.trim().is_empty() => {
            f.split(',').map(|c| quote(c.trim().trim_matches('`'))).collect::<Vec<_>>().join(", ")
        }
        _ => "*".to_string(),
    }
}

/// `type = "doris"`: a snapshot of a Doris table. `_query_plan` names the tablets; they are cut
/// into splits of `request.tablet.size`, worker `w` of `n` reads splits `w`, `w + n`, … over Arrow
/// Flight SQL (`SELECT … TABLET(…)`). The position is the split and the rows of it already
/// delivered, so a restart re-reads only what no checkpoint covers; a stream that breaks is
/// re-opened (up to `request_retries` times) and skips the rows already delivered.
pub struct DorisScan {
    schema: SchemaRef,
    reader: FlightReader,
    table: String,
    statements: Vec<String>,
    /// Tablets of each split (for progress).
    split_tablets: Vec<u64>,
    tablets: Arc<TabletProgress>,
    split: usize,
    /// Rows of the current split delivered so far (across re-opens and restarts).
    delivered: u64,
    /// Rows of the current split seen on the open stream.
    seen: u64,
    stream: Option<(arrow_flight::decode::FlightRecordBatchStream, Vec<arrow_flight::Ticket>)>,
    retries_left: u32,
    max_retries: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ScanPosition {
    split: usize,
    rows: u64,
}

impl DorisScan {
    pub async fn new(
        d: &DorisSourceConfig,
        ctx: &DorisContext,
        worker: u32,
        parallelism: u32,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let (db, table) = d.table.split_once('.').context("source.table: expected `db.table`")?;
        let fields = fields(d);
        let filter = d.filter.query.as_deref();
        let mut plan_sql = format!("SELECT {fields} FROM {}.{}", quote(db), quote(table));
        if let Some(f) = filter.filter(|f| !f.trim().is_empty()) {
            plan_sql.push_str(&format!(" WHERE {f}"));
        }
        let tablets = ctx.client.query_plan(db, table, &plan_sql).await?;
        let (statements, split_tablets): (Vec<String>, Vec<u64>) = tablets
            .chunks(d.request.tablet.size.max(1) as usize)
            .enumerate()
            .filter(|(i, _)| *i % parallelism as usize == worker as usize)
            .map(|(_, ids)| (tablet_sql(&fields, db, table, ids, filter), ids.len() as u64))
            .unzip();
        let mut reader = flight(ctx).await?;
        let sql = format!("{plan_sql} LIMIT 0");
        let (schema, _) = reader.execute(&sql).await?;
        let pos: ScanPosition = match position {
            Some(p) => serde_json::from_value(p.clone())
                .with_context(|| format!("source position {p} is not a scan position"))?,
            None => ScanPosition::default(),
        };
        ctx.tablets.planned(split_tablets.iter().sum(), split_tablets.iter().take(pos.split).sum());
        Ok(Self {
            schema,
            reader,
            table: d.table.clone(),
            statements,
            split_tablets,
            tablets: ctx.tablets.clone(),
            split: pos.split,
            delivered: pos.rows,
            seen: 0,
            stream: None,
            retries_left: ctx.retries,
            max_retries: ctx.retries,
        })
    }

    async fn open(&mut self) -> anyhow::Result<()> {
        let sql = &self.statements[self.split];
        let (_, mut tickets) = self.reader.execute(sql).await.with_context(|| format!("scanning `{}`", self.table))?;
        tickets.reverse();
        let first = tickets.pop().with_context(|| format!("scanning `{}`: Doris returned no ticket", self.table))?;
        let stream = self.reader.stream(first).await?;
        self.stream = Some((stream, tickets));
        self.seen = 0;
        Ok(())
    }
}

#[async_trait]
impl Source for DorisScan {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next(&mut self) -> anyhow::Result<Option<Batch>> {
        use futures::StreamExt;
        loop {
            if self.split >= self.statements.len() {
                return Ok(None);
            }
            if self.stream.is_none() {
                self.open().await?;
            }
            let (stream, tickets) = self.stream.as_mut().expect("opened above");
            match stream.next().await {
                Some(Ok(batch)) => {
                    let start = self.seen;
                    self.seen += batch.num_rows() as u64;
                    if self.seen <= self.delivered {
                        continue; // delivered before a restart or a broken stream
                    }
                    let skip = self.delivered.saturating_sub(start) as usize;
                    let batch = batch.slice(skip, batch.num_rows() - skip);
                    self.delivered = self.seen;
                    let columns = batch
                        .columns()
                        .iter()
                        .zip(self.schema.fields())
                        .map(
                            |(c, f)| {
                                if c.data_type() == f.data_type() { Ok(c.clone()) } else { cast(c, f.data_type()) }
                            },
                        )
                        .collect::<Result<Vec<_>, _>>();
                    let batch =
                        columns.and_then(|c| RecordBatch::try_new(self.schema.clone(), c)).with_context(|| {
                            format!("scanning `{}`: the table's columns changed during the scan", self.table)
                        })?;
                    return Ok(Some(Batch::new(batch)));
                }
                Some(Err(e)) => {
                    if self.retries_left == 0 {
                        bail!(
                            "scanning `{}` (split {}): the stream broke {} times; last: {e}",
                            self.table,
                            self.split,
                            self.max_retries + 1
                        );
                    }
                    self.retries_left -= 1;
                    tracing::warn!(table = %self.table, split = self.split, "scan stream broke, re-reading the split: {e}");
                    self.stream = None;
                }
                None => {
                    if let Some(next) = tickets.pop() {
                        let s = self.reader.stream(next).await?;
                        self.stream.as_mut().expect("open").0 = s;
                        continue;
                    }
                    self.tablets.read(self.split_tablets[self.split]);
                    self.split += 1;
                    self.delivered = 0;
                    self.stream = None;
                    self.retries_left = self.max_retries;
                }
            }
        }
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "split": self.split, "rows": self.delivered })
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RowPosition {
    rows: u64,
}

fn restore(position: Option<&serde_json::Value>) -> anyhow::Result<u64> {
    match position {
        None => Ok(0),
        Some(p) => Ok(serde_json::from_value::<RowPosition>(p.clone())
            .with_context(|| format!("source position {p} is not a row count"))?
            .rows),
    }
}

/// `type = "datagen"`: rows at a steady rate, like Flink's datagen connector. Sequence columns
/// are spread over the workers (worker `w` of `n` produces `start + w`, `start + w + n`, …), so
/// together they produce every value once.
pub struct Datagen {
    schema: SchemaRef,
    columns: Vec<(ColumnDef, DatagenField)>,
    worker: u64,
    parallelism: u64,
    /// Rows this worker produces in all; `None` = unbounded.
    limit: Option<u64>,
    rows: u64,
    rate: f64,
    batch_rows: u64,
    started: Instant,
    started_rows: u64,
    rng: fastrand::Rng,
}

impl Datagen {
    pub fn new(
        cfg: &DatagenSource,
        worker: u32,
        parallelism: u32,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let defs = parse_columns(&cfg.schema).map_err(|e| anyhow::anyhow!(e.message))?;
        let schema = arrow_schema(&defs);
        let mut total = cfg.number_of_rows;
        for (name, f) in &cfg.fields {
            if f.kind == DatagenKind::Sequence
                && let Some(end) = f.end
            {
                let start = f.start.unwrap_or(0);
                if end < start {
                    bail!("source.fields.{name}: sequence end {end} is before its start {start}");
                }
                let n = (end - start) as u64 + 1;
                total = Some(total.map_or(n, |t| t.min(n)));
            }
        }
        let (w, p) = (u64::from(worker), u64::from(parallelism));
        let limit = total.map(|t| if t > w { (t - w).div_ceil(p) } else { 0 });
        let columns =
            defs.into_iter().map(|c| (c.clone(), cfg.fields.get(&c.name).cloned().unwrap_or_default())).collect();
        let rate = cfg.rows_per_second as f64 / p as f64;
        let rows = restore(position)?;
        Ok(Self {
            schema,
            columns,
            worker: w,
            parallelism: p,
            limit,
            rows,
            rate,
            batch_rows: ((rate / 20.0) as u64).clamp(1, 8192),
            started: Instant::now(),
            started_rows: rows,
            rng: fastrand::Rng::with_seed(w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ rows),
        })
    }

    fn column(&mut self, def: &ColumnDef, field: &DatagenField, n: usize) -> anyhow::Result<ArrayRef> {
        let target = def.doris_type.arrow_type();
        let first = self.rows;
        let array: ArrayRef = if field.kind == DatagenKind::Sequence {
            let start = field.start.unwrap_or(0);
            let values: Int64Array = (0..n as u64)
                .map(|i| start + ((first + i) * self.parallelism + self.worker) as i64)
                .map(Some)
                .collect();
            Arc::new(values)
        } else {
            match &def.doris_type {
                DorisType::Boolean => Arc::new((0..n).map(|_| Some(self.rng.bool())).collect::<BooleanArray>()),
                DorisType::Float | DorisType::Double => {
                    let (lo, hi) = (field.min.unwrap_or(0) as f64, field.max.unwrap_or(1) as f64);
                    let v: Float64Array = (0..n).map(|_| Some(lo + self.rng.f64() * (hi - lo))).collect();
                    if matches!(def.doris_type, DorisType::Float) {
                        Arc::new(v.iter().map(|x| x.map(|x| x as f32)).collect::<Float32Array>())
                    } else {
                        Arc::new(v)
                    }
                }
                DorisType::Char(_) | DorisType::Varchar(_) | DorisType::String => {
                    let len = field.length.unwrap_or(10) as usize;
                    let len = match def.doris_type {
                        DorisType::Char(Some(l)) | DorisType::Varchar(Some(l)) => len.min(l as usize),
                        _ => len,
                    };
                    let mut s = String::with_capacity(len);
                    let v: StringArray = (0..n)
                        .map(|_| {
                            s.clear();
                            s.extend((0..len).map(|_| self.rng.alphanumeric()));
                            Some(s.clone())
                        })
                        .collect();
                    Arc::new(v)
                }
                DorisType::Date => {
                    // 2000-01-01 .. 2030-12-31 unless min/max (days since 1970) say otherwise.
                    let (lo, hi) = (field.min.unwrap_or(10_957), field.max.unwrap_or(22_279));
                    let v: Int64Array = (0..n).map(|_| Some(self.rng.i64(lo..=hi))).collect();
                    cast(&cast(&v, &DataType::Int32)?, &DataType::Date32)?
                }
                DorisType::DateTime { .. } => {
                    let (lo, hi) = (field.min.unwrap_or(946_684_800), field.max.unwrap_or(1_924_991_999));
                    let v: Int64Array = (0..n).map(|_| Some(self.rng.i64(lo..=hi))).collect();
                    cast(&v, &DataType::Timestamp(arrow::datatypes::TimeUnit::Second, None))?
                }
                other => {
                    let (lo, hi) = integer_range(other, field);
                    let v: Int64Array = (0..n).map(|_| Some(self.rng.i64(lo..=hi))).collect();
                    Arc::new(v)
                }
            }
        };
        if array.data_type() == &target {
            Ok(array)
        } else {
            cast(&array, &target).with_context(|| format!("generating column `{}`", def.name))
        }
    }
}

fn integer_range(t: &DorisType, field: &DatagenField) -> (i64, i64) {
    let (lo, hi) = match t {
        DorisType::TinyInt => (i8::MIN as i64, i8::MAX as i64),
        DorisType::SmallInt => (i16::MIN as i64, i16::MAX as i64),
        DorisType::Int => (i32::MIN as i64, i32::MAX as i64),
        DorisType::Decimal { precision, scale } => {
            let whole = 10i64.saturating_pow(u32::from(precision.saturating_sub(*scale as u8)).min(18)) - 1;
            (-whole, whole)
        }
        _ => (i64::MIN, i64::MAX),
    };
    (field.min.unwrap_or(lo).max(lo), field.max.unwrap_or(hi).min(hi))
}

#[async_trait]
impl Source for Datagen {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next(&mut self) -> anyhow::Result<Option<Batch>> {
        let mut n = self.batch_rows;
        if let Some(limit) = self.limit {
            if self.rows >= limit {
                return Ok(None);
            }
            n = n.min(limit - self.rows);
        }
        // Keep to the rate: the batch is due when its last row is.
        let due = self.started + Duration::from_secs_f64((self.rows + n - self.started_rows) as f64 / self.rate);
        tokio::time::sleep_until(due.into()).await;
        let columns = self.columns.clone();
        let arrays = columns
            .iter()
            .map(|(def, field)| self.column(def, field, n as usize))
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.rows += n;
        Ok(Some(Batch::new(RecordBatch::try_new(self.schema.clone(), arrays)?)))
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "rows": self.rows })
    }

    fn total_rows(&self) -> Option<u64> {
        self.limit
    }
}

/// `type = "file"`: a CSV or JSON-lines file, read once by worker 0.
pub struct FileReader {
    schema: SchemaRef,
    path: PathBuf,
    rows: u64,
    inner: Option<FileBatches>,
}

enum FileBatches {
    Csv(Box<arrow::csv::Reader<BufReader<File>>>),
    Json(arrow::json::Reader<BufReader<File>>),
}

const FILE_BATCH_ROWS: usize = 8192;

impl FileReader {
    pub fn new(
        cfg: &FileSource,
        base_dir: &Path,
        worker: u32,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let defs = parse_columns(&cfg.schema).map_err(|e| anyhow::anyhow!(e.message))?;
        let schema = arrow_schema(&defs);
        let path = base_dir.join(&cfg.path);
        let rows = restore(position)?;
        if worker != 0 {
            return Ok(Self { schema, path, rows, inner: None });
        }
        let file = File::open(&path).with_context(|| format!("source.path: cannot open {}", path.display()))?;
        let mut reader = BufReader::new(file);
        // Skip the rows already delivered before the checkpoint.
        let mut line = Vec::new();
        for _ in 0..rows {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
        }
        let offset = reader.stream_position()?;
        let mut file = reader.into_inner();
        file.seek(std::io::SeekFrom::Start(offset))?;
        let reader = BufReader::new(file);
        let inner = match cfg.format {
            FileFormat::Csv => {
                let sep = match cfg.column_separator.as_bytes() {
                    [b] => *b,
                    _ => bail!("source.column_separator: expected one character, got {:?}", cfg.column_separator),
                };
                let nulls = regex::Regex::new(r"^(\\N)?$").expect("valid regex");
                FileBatches::Csv(Box::new(
                    arrow::csv::ReaderBuilder::new(schema.clone())
                        .with_delimiter(sep)
                        .with_header(false)
                        .with_null_regex(nulls)
                        .with_batch_size(FILE_BATCH_ROWS)
                        .build(reader)?,
                ))
            }
            FileFormat::Json => FileBatches::Json(
                arrow::json::ReaderBuilder::new(schema.clone()).with_batch_size(FILE_BATCH_ROWS).build(reader)?,
            ),
        };
        Ok(Self { schema, path, rows, inner: Some(inner) })
    }
}

#[async_trait]
impl Source for FileReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next(&mut self) -> anyhow::Result<Option<Batch>> {
        let next = match &mut self.inner {
            None => return Ok(None),
            Some(FileBatches::Csv(r)) => r.next(),
            Some(FileBatches::Json(r)) => r.next(),
        };
        match next {
            None => Ok(None),
            Some(Ok(b)) => {
                self.rows += b.num_rows() as u64;
                Ok(Some(Batch::new(b)))
            }
            Some(Err(e)) => {
                bail!("{}: after row {}: {e}", self.path.display(), self.rows)
            }
        }
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "rows": self.rows })
    }
}

/// `scan.mode = "initial" | "latest" | "from-timestamp"`: a changelog-enabled Doris table followed
/// with `@incr` windows `[start, end)` whose end is the FE's clock (`/api/tso`), one window every
/// `changelog.poll_interval`, rows in TSO, LSN, op order with their row kinds from the op column.
/// `initial` first reads the snapshot (all workers) and then follows from the time it started;
/// the changelog itself is read by worker 0. A checkpoint records the window and the rows of it
/// already delivered; a window whose transactions are still in flight (error 5101) is retried
/// as it is for up to `changelog.visible_wait_timeout`.
pub struct DorisChangelog {
    snapshot: Option<DorisScan>,
    follows: bool,
    client: StreamLoadClient,
    reader: FlightReader,
    schema: SchemaRef,
    table: String,
    select: String,
    increment: IncrementType,
    poll: Duration,
    visible_wait: Duration,
    start: String,
    window: Option<Window>,
    next_poll: tokio::time::Instant,
    /// `dedup = true`: the per-key state that drops replayed events.
    dedup: Option<super::dedup::SharedNormalizer>,
    /// See [`DorisContext::snapshot_done`].
    gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// `changelog.ttl_seconds` of the table, for the gap warning of `detail` / `append_only`.
    ttl_seconds: Option<i64>,
}

struct Window {
    end: String,
    delivered: u64,
    seen: u64,
    stream: Option<arrow_flight::decode::FlightRecordBatchStream>,
    since: Instant,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChangelogPosition {
    /// The snapshot's position while `initial` is still reading it.
    snapshot: Option<serde_json::Value>,
    /// Start (inclusive) of the window being read or next.
    start: String,
    /// End of the window being read, if one is.
    end: Option<String>,
    /// Rows of that window delivered.
    rows: u64,
    /// The `dedup` state, added at checkpoint barriers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<serde_json::Value>,
}

const META: [&str; 3] = ["__DORIS_BINLOG_TSO__", "__DORIS_BINLOG_LSN__", "__DORIS_BINLOG_OP__"];

fn visibility_error(text: &str) -> bool {
    text.contains("5101")
        || text.contains("5100")
        || text.contains("timeout waiting previous transactions finish")
        || text.contains("INCR_WINDOW_NOT_READY")
}

impl DorisChangelog {
    pub async fn new(
        d: &DorisSourceConfig,
        ctx: &DorisContext,
        worker: u32,
        parallelism: u32,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let (db, table) = d.table.split_once('.').context("source.table: expected `db.table`")?;
        let mut reader = flight(ctx).await?;
        let (schema, _) =
            reader.execute(&format!("SELECT {} FROM {}.{} LIMIT 0", fields(d), quote(db), quote(table))).await?;
        let restored: Option<ChangelogPosition> = match position {
            Some(p) => Some(
                serde_json::from_value(p.clone())
                    .with_context(|| format!("source position {p} is not a changelog position"))?,
            ),
            None => None,
        };
        // Where to start: the checkpoint, else the offset table's record, else `scan.mode`.
        let recorded = match (&restored, &ctx.offsets) {
            (None, Some(offsets)) => offsets.read().await?,
            _ => None,
        };
        let start = match (&restored, &recorded) {
            (Some(r), _) => r.start.clone(),
            (None, Some(ts)) => {
                tracing::info!(table = %d.table, start = %ts, "resuming the changelog from the offset table");
                ts.clone()
            }
            (None, None) => match d.scan.mode {
                ScanMode::FromTimestamp => d.scan.timestamp.clone().context("source.scan.timestamp is required")?,
                _ => ctx.client.tso_time().await?,
            },
        };
        let snapshot = match (&d.scan.mode, &restored) {
            (ScanMode::Initial, None) if recorded.is_none() => {
                Some(DorisScan::new(d, ctx, worker, parallelism, None).await?)
            }
            (ScanMode::Initial, Some(ChangelogPosition { snapshot: Some(p), .. })) => {
                Some(DorisScan::new(d, ctx, worker, parallelism, Some(p)).await?)
            }
            _ => None,
        };
        let window = restored.as_ref().and_then(|r| {
            r.end.clone().map(|end| Window { end, delivered: r.rows, seen: 0, stream: None, since: Instant::now() })
        });
        let names: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
        let select = format!("SELECT {}, {} FROM {}.{}", names.join(", "), META.join(", "), quote(db), quote(table));
        let dedup = if d.dedup {
            let saved = restored.as_ref().and_then(|r| r.state.as_ref());
            let n = super::dedup::Normalizer::new(&d.table, &schema, &d.primary_key_columns(), saved)?;
            Some(super::dedup::SharedNormalizer(Arc::new(std::sync::Mutex::new(n))))
        } else {
            None
        };
        let ttl_seconds = match d.changelog.increment_type {
            IncrementType::Detail | IncrementType::AppendOnly if worker == 0 => {
                changelog_ttl(&ctx.client, db, table).await
            }
            _ => None,
        };
        let this = Self {
            snapshot,
            follows: worker == 0,
            client: ctx.client.clone(),
            reader,
            schema,
            table: d.table.clone(),
            select,
            increment: d.changelog.increment_type,
            poll: d.changelog.poll_interval.0,
            visible_wait: d.changelog.visible_wait_timeout.0,
            start,
            window,
            next_poll: tokio::time::Instant::now(),
            dedup,
            gate: if worker == 0 { ctx.snapshot_done.clone() } else { None },
            ttl_seconds,
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
    async fn window_failed(&mut self, e: String) -> anyhow::Result<()> {
        let w = self.window.as_mut().expect("a window is open");
        if visibility_error(&e) && w.since.elapsed() < self.visible_wait {
            tracing::info!(table = %self.table, start = %self.start, end = %w.end, "window not visible yet, retrying: {e}");
            w.stream = None;
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(());
        }
        if e.contains("has expired") {
            bail!(
                "reading the changelog of `{}` from {}: {e}; the changes after that point are gone and this start cannot be resumed: start over with `scan.mode = \"initial\"` and a new `pipeline.state_dir` to rebuild the target from a new snapshot (with an offset table, also use a new `changelog.consumer_id` or remove `changelog.offset_table` and `changelog.consumer_id`, or the old record wins over `initial`)",
                self.table,
                self.start
            );
        }
        bail!("reading the changelog of `{}` window [{}, {}): {e}", self.table, self.start, w.end)
    }

    fn to_batch(&self, batch: RecordBatch) -> anyhow::Result<Batch> {
        let op = batch
            .column_by_name("__DORIS_BINLOG_OP__")
            .with_context(|| format!("`{}`@incr returned no __DORIS_BINLOG_OP__ column", self.table))?;
        let op = cast(op, &arrow::datatypes::DataType::Int8)?;
        let op = op.as_any().downcast_ref::<arrow::array::Int8Array>().expect("cast to Int8");
        let kinds = op
            .iter()
            .map(|o| match o {
                Some(1) => RowKind::Delete,
                Some(2) => RowKind::UpdateBefore,
                Some(3) => RowKind::UpdateAfter,
                _ => RowKind::Insert,
            })
            .collect();
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

impl DorisChangelog {
    /// The next batch of changes, before `dedup`.
    async fn next_change(&mut self) -> anyhow::Result<Option<Batch>> {
        use futures::StreamExt;
        if let Some(scan) = &mut self.snapshot {
            match scan.next().await? {
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
                let now = self.client.tso_time().await?;
                if now == self.start {
                    continue;
                }
                if now < self.start {
                    // A start ahead of Doris' clock (from-timestamp): wait for the clock to reach it.
                    continue;
                }
                self.check_gap(&now);
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
                        self.window_failed(e.to_string()).await?;
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
                    let batch = batch.slice(skip, batch.num_rows() - skip);
                    w.delivered = w.seen;
                    return Ok(Some(self.to_batch(batch)?));
                }
                Some(Err(e)) => self.window_failed(e.to_string()).await?,
                None => {
                    let w = self.window.take().expect("open");
                    self.start = w.end;
                    // An empty batch marks the window done, so the next checkpoint records it.
                    return Ok(Some(Batch::new(RecordBatch::new_empty(self.schema.clone()))));
                }
            }
        }
    }
}

/// `changelog.ttl_seconds` (or `binlog.ttl_seconds`) from `SHOW CREATE TABLE`; Doris' default
/// (86400) when the table does not set it; `None` when it cannot be read.
async fn changelog_ttl(client: &StreamLoadClient, db: &str, table: &str) -> Option<i64> {
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
impl Source for DorisChangelog {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next(&mut self) -> anyhow::Result<Option<Batch>> {
        let batch = self.next_change().await?;
        match (&self.dedup, batch) {
            (Some(n), Some(b)) => Ok(Some(n.0.lock().expect("dedup state lock").apply(b)?)),
            (_, b) => Ok(b),
        }
    }

    fn position(&self) -> serde_json::Value {
        let pos = ChangelogPosition {
            snapshot: self.snapshot.as_ref().map(|s| s.position()),
            start: self.start.clone(),
            end: self.window.as_ref().map(|w| w.end.clone()),
            rows: self.window.as_ref().map_or(0, |w| w.delivered),
            state: None,
        };
        serde_json::to_value(pos).unwrap_or_default()
    }

    fn state(&self) -> Option<Arc<dyn SourceState>> {
        self.dedup.clone().map(|d| Arc::new(d) as Arc<dyn SourceState>)
    }
}
