//! `sluice verify`: whether the Doris copy equals its source, table by table. Each table is read
//! on both sides in ranges of its range key ([`MirroredTable::range_key`]: an integer key, or a
//! first key column the source and Doris sort alike; whole, without one); the source's rows go through
//! the pipeline's own conversions ([`MirrorSource::read`]), Doris' are cast to the same Arrow
//! types, and rows are matched by primary key (as a multiset without one). A range that differs
//! is read again after `recheck_after` (a row still in flight lands with the next checkpoint)
//! before its rows count as drift.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sluice_guest::types::DorisType;

mod fingerprint;

use crate::pipeline::{PipelineFile, Placement};
use crate::runtime::mirror::{KeyRange, MirrorSource, MirrorTarget, MirroredTable};
use crate::runtime::{Named, Sink, Source};

/// How long one side may take to return one range.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// How a verification runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Differences listed per table (all are counted).
    pub samples: usize,
    /// How long to wait before reading a differing range again (zero: never; none: the
    /// pipeline's checkpoint interval).
    pub recheck_after: Option<Duration>,
    /// Source rows read per second at most (none: as fast as it goes).
    pub rate: Option<u64>,
    /// Whether ranges the source's server can fingerprint are compared by fingerprint first.
    pub fingerprints: bool,
    /// Ranges read at once (each from both sides: the source's read, Doris' and the comparison
    /// overlap).
    pub concurrency: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { samples: 10, recheck_after: Some(Duration::ZERO), rate: None, fingerprints: true, concurrency: 4 }
    }
}

/// What one table's comparison found.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TableReport {
    /// The source table, `db.table`.
    pub source: String,
    /// Its Doris table, `db.table`.
    pub target: String,
    /// Source rows compared.
    pub compared: u64,
    pub equal: u64,
    /// Of the equal rows: those of ranges whose fingerprints agreed (the source's server and
    /// Sluice hashing every row), which were not read from the source one by one.
    pub fingerprinted: u64,
    /// Rows in both whose values differ.
    pub differing: u64,
    /// Source rows Doris lacks.
    pub missing: u64,
    /// Doris rows the source lacks.
    pub extra: u64,
    /// Of a table without a primary key: Doris rows the source lacks, which its DUPLICATE KEY
    /// table keeps by design (every version of an updated or deleted row), so not drift.
    pub versions: u64,
    /// The first differences.
    pub samples: Vec<Difference>,
    /// The source's columns the copy does not have by design, each with why (not compared).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmirrored: Vec<String>,
    /// Why the table could not be compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TableReport {
    /// The copy equals the source.
    pub fn agrees(&self) -> bool {
        self.error.is_none() && self.differing == 0 && self.missing == 0 && self.extra == 0
    }

    fn add(&mut self, r: RangeReport, samples: usize) {
        self.compared += r.compared;
        self.equal += r.equal;
        self.fingerprinted += r.fingerprinted;
        self.differing += r.differing;
        self.missing += r.missing;
        self.extra += r.extra;
        self.versions += r.versions;
        let room = samples.saturating_sub(self.samples.len());
        self.samples.extend(r.samples.into_iter().take(room));
    }
}

/// A row that differs.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Difference {
    /// `differing`, `missing` (in the source, not in Doris) or `extra` (in Doris only).
    pub kind: &'static str,
    /// The key, `col=value, …` (the whole row for a table without a key).
    pub key: String,
    /// The columns that differ (all of a missing or extra row), with both values.
    pub columns: Vec<ColumnDifference>,
}

/// One column of a row that differs: its value in each (none: NULL or no such row).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ColumnDifference {
    pub column: String,
    pub source: Option<String>,
    pub doris: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct RangeReport {
    compared: u64,
    equal: u64,
    fingerprinted: u64,
    differing: u64,
    missing: u64,
    extra: u64,
    versions: u64,
    samples: Vec<Difference>,
}

impl RangeReport {
    fn agrees(&self) -> bool {
        self.differing == 0 && self.missing == 0 && self.extra == 0
    }
}

/// Compare every table the pipeline of `file` mirrors with its copy in the pipeline's Doris sink.
/// The components are built beside any running copy of the pipeline (a state dir of their own,
/// never written).
pub async fn verify_file(file: &Path, pipeline: PipelineFile, opts: &Options) -> anyhow::Result<Vec<TableReport>> {
    let shown = file.display().to_string();
    let scratch = tempfile::tempdir()?;
    let placement = Placement {
        state_dir: scratch.path().to_path_buf(),
        cluster: None,
        base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        confinement: None,
    };
    let checkpoint = pipeline.pipeline.checkpoint_interval.0;
    if let Some(why) = not_a_mirror(&pipeline) {
        anyhow::bail!("{shown}: {why}");
    }
    let prepared = crate::pipeline::prepare_in(file, pipeline, placement, Arc::default()).await?;
    let (source, target) = mirrors(&shown, &prepared.source, &prepared.sinks)?;
    let opts = Options { recheck_after: Some(opts.recheck_after.unwrap_or(checkpoint)), ..opts.clone() };
    Ok(verify(source, target, &opts).await)
}

/// Why the pipeline of `file` is not a mirror `sluice verify` can compare, if it is not.
pub fn not_a_mirror(file: &PipelineFile) -> Option<String> {
    let transforms: Vec<&str> = file.transform.iter().map(|t| t.name.as_str()).collect();
    (!transforms.is_empty()).then(|| {
        format!(
            "transforms {} change the rows between source and Doris: `sluice verify` and [verify] compare a mirror, a pipeline without transforms",
            transforms.join(", ")
        )
    })
}

/// The tables `source` mirrors, and the Doris sink among `sinks` that holds their copies.
pub fn mirrors(
    shown: &str,
    source: &Named<Arc<dyn Source>>,
    sinks: &[Named<Arc<dyn Sink>>],
) -> anyhow::Result<(Arc<dyn MirrorSource>, Arc<dyn MirrorTarget>)> {
    let mirror = source.component.mirror().with_context(|| {
        format!(
            "{shown}: source `{}` ({}) cannot be read again by key: `sluice verify` and [verify] compare the tables of mysql, postgres and doris sources",
            source.name,
            source.component.describe()
        )
    })?;
    let target = sinks
        .iter()
        .find_map(|s| s.component.mirror())
        .with_context(|| format!("{shown}: the pipeline has no Doris sink to compare with"))?;
    Ok((mirror, target))
}

/// `[verify]`: what a running pipeline compares, and how often.
pub struct Periodic {
    pub every: Duration,
    pub source: Arc<dyn MirrorSource>,
    pub target: Arc<dyn MirrorTarget>,
    pub options: Options,
}

/// The last comparison of a running pipeline, as `/metrics` and `sluice serve`'s API show it.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    /// Unix time of its start, in milliseconds.
    pub at_ms: u64,
    pub duration_ms: u64,
    /// Whether every table equals its copy.
    pub agrees: bool,
    pub tables: Vec<TableReport>,
}

impl Periodic {
    /// Compare every `every` until dropped, each result kept in `stats` and differences logged.
    pub async fn run(&self, stats: Arc<crate::metrics::Stats>) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + self.every, self.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let at_ms = crate::metrics::now_ms();
            let started = Instant::now();
            let tables = verify(self.source.clone(), self.target.clone(), &self.options).await;
            for t in tables.iter().filter(|t| !t.agrees()) {
                match &t.error {
                    Some(e) => tracing::warn!("verify: `{}` could not be compared with `{}`: {e}", t.source, t.target),
                    None => tracing::warn!(
                        "verify: `{}` differs from its copy `{}`: {} differing, {} missing, {} extra of {} rows; first: {}",
                        t.source,
                        t.target,
                        t.differing,
                        t.missing,
                        t.extra,
                        t.compared,
                        t.samples.iter().map(|d| format!("{} {}", d.kind, d.key)).collect::<Vec<_>>().join("; ")
                    ),
                }
            }
            let agrees = tables.iter().all(TableReport::agrees);
            if agrees {
                tracing::info!("verify: {} tables equal their copies", tables.len());
            }
            let duration_ms = started.elapsed().as_millis() as u64;
            stats.verified(Verified { at_ms, duration_ms, agrees, tables });
        }
    }
}

/// Compare every table of `source` with its copy in `target`.
pub async fn verify(source: Arc<dyn MirrorSource>, target: Arc<dyn MirrorTarget>, opts: &Options) -> Vec<TableReport> {
    let mut reports = Vec::new();
    let started = Instant::now();
    let mut rows_read = 0u64;
    for table in source.tables() {
        let target_table = target.target(&table.id);
        let mut report =
            TableReport { source: table.id.to_string(), target: target_table.clone(), ..Default::default() };
        let pace = Pace { rate: opts.rate, started, before: rows_read };
        match source.unmirrored(&table).await {
            Ok(columns) => report.unmirrored = columns,
            Err(e) => tracing::debug!("`{}`: which columns are not mirrored is unknown: {e:#}", table.id),
        }
        match compare_table(&source, &target, &table, &target_table, opts, &pace).await {
            Ok(ranges) => ranges.into_iter().for_each(|r| report.add(r, opts.samples)),
            Err(e) => report.error = Some(format!("{e:#}")),
        }
        rows_read += report.compared;
        reports.push(report);
    }
    reports
}

/// Keeps the source's reads under `rate` rows per second over the whole verification.
struct Pace {
    rate: Option<u64>,
    started: Instant,
    /// Rows read before this table.
    before: u64,
}

impl Pace {
    async fn wait(&self, read: u64) {
        let Some(rate) = self.rate.filter(|r| *r > 0) else { return };
        let due = Duration::from_secs_f64((self.before + read) as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            tokio::time::sleep(ahead).await;
        }
    }
}

async fn compare_table(
    source: &Arc<dyn MirrorSource>,
    target: &Arc<dyn MirrorTarget>,
    table: &MirroredTable,
    target_table: &str,
    opts: &Options,
    pace: &Pace,
) -> anyhow::Result<Vec<RangeReport>> {
    let ranges = source.ranges(table).await?;
    let ranges_of_values = ranges.iter().any(|r| matches!(r, KeyRange::Values { .. }));
    let read = std::sync::atomic::AtomicU64::new(0);
    let summed = opts.fingerprints;
    let compare = |range: KeyRange| {
        let read = &read;
        let (source, target, table, target_table) =
            (source.clone(), target.clone(), table.clone(), target_table.to_string());
        async move {
            // A task per range: the ranges' conversions and comparisons run on every core.
            let at = range.clone();
            let mut task = crate::runtime::AbortOnDrop(tokio::spawn(async move {
                compare_range(&*source, &*target, &table, &target_table, &at, summed).await
            }));
            let r = (&mut task.0).await.map_err(|e| anyhow::anyhow!("comparing {range} failed: {e}"))??;
            let total = read.fetch_add(r.compared, std::sync::atomic::Ordering::Relaxed) + r.compared;
            pace.wait(total).await;
            anyhow::Ok((range, r))
        }
    };
    let mut results: Vec<(KeyRange, RangeReport)> =
        futures::stream::iter(ranges).map(compare).buffered(opts.concurrency.max(1)).try_collect().await?;
    // Each range's report once rows that fell in other ranges on each side are paired up.
    let settled = |results: &[(KeyRange, RangeReport)]| {
        let mut reports: Vec<RangeReport> = results.iter().map(|(_, r)| r.clone()).collect();
        if ranges_of_values {
            reconcile(&mut reports);
        }
        reports
    };
    let reports = settled(&results);
    let recheck_after = opts.recheck_after.unwrap_or_default();
    if recheck_after > Duration::ZERO && reports.iter().any(|r| !r.agrees()) {
        tracing::info!(
            "`{}`: rows differ; reading them again in {} (they may still be on their way)",
            table.id,
            humantime::format_duration(recheck_after)
        );
        tokio::time::sleep(recheck_after).await;
        for ((range, report), _) in results.iter_mut().zip(&reports).filter(|(_, r)| !r.agrees()) {
            *report = compare_range(&**source, &**target, table, target_table, range, summed).await?;
        }
        return Ok(settled(&results));
    }
    Ok(reports)
}

/// Pairs the rows one range found missing and another found extra under the same key, and
/// compares them: ranges between values of a text key cut the source's rows by its collation and
/// Doris' by bytes, so a row whose text the two sort apart falls in a different range on each side
/// (one that both sort alike never does, and nothing is paired).
fn reconcile(reports: &mut [RangeReport]) {
    let mut missing: HashMap<String, (usize, usize)> = HashMap::new();
    for (r, report) in reports.iter().enumerate() {
        for (i, d) in report.samples.iter().enumerate().filter(|(_, d)| d.kind == "missing") {
            missing.insert(d.key.clone(), (r, i));
        }
    }
    if missing.is_empty() {
        return;
    }
    let mut paired: Vec<((usize, usize), (usize, usize))> = Vec::new();
    for (r, report) in reports.iter().enumerate() {
        for (i, d) in report.samples.iter().enumerate().filter(|(_, d)| d.kind == "extra") {
            if let Some(&at) = missing.get(&d.key) {
                paired.push((at, (r, i)));
            }
        }
    }
    let mut dropped: HashSet<(usize, usize)> = HashSet::new();
    for ((mr, mi), (er, ei)) in paired {
        let extra = std::mem::take(&mut reports[er].samples[ei].columns);
        let ours = &mut reports[mr].samples[mi];
        let columns: Vec<ColumnDifference> = ours
            .columns
            .iter()
            .zip(extra)
            .filter(|(a, b)| a.source != b.doris)
            .map(|(a, b)| ColumnDifference { column: a.column.clone(), source: a.source.clone(), doris: b.doris })
            .collect();
        reports[er].extra -= 1;
        dropped.insert((er, ei));
        let report = &mut reports[mr];
        report.missing -= 1;
        if columns.is_empty() {
            report.equal += 1;
            dropped.insert((mr, mi));
        } else {
            report.differing += 1;
            report.samples[mi] = Difference { kind: "differing", key: report.samples[mi].key.clone(), columns };
        }
    }
    for (r, report) in reports.iter_mut().enumerate() {
        let mut i = 0;
        report.samples.retain(|_| {
            i += 1;
            !dropped.contains(&(r, i - 1))
        });
    }
}

async fn compare_range(
    source: &dyn MirrorSource,
    target: &dyn MirrorTarget,
    table: &MirroredTable,
    target_table: &str,
    range: &KeyRange,
    fingerprints: bool,
) -> anyhow::Result<RangeReport> {
    let columns: Vec<String> = table.schema.fields().iter().map(|f| f.name().clone()).collect();
    let doris =
        || within(table, range, "Doris", target.read(target_table, &columns, table.range_key.as_deref(), range));
    // A fingerprint the server cannot compute is no reason to stop: the rows are compared.
    let summed = match fingerprints {
        true => within(table, range, "the source", source.fingerprint(table, range)).await.unwrap_or_else(|e| {
            tracing::debug!("`{}` {range}: no fingerprint from the source ({e:#}): comparing rows", table.id);
            None
        }),
        false => None,
    };
    let (ours, theirs) = match summed {
        Some(sum) => {
            let theirs = doris().await?;
            if fingerprint::of(&theirs, &table.schema, &sum) == Some((sum.rows, sum.sum)) {
                let rows = sum.rows;
                return Ok(RangeReport { compared: rows, equal: rows, fingerprinted: rows, ..Default::default() });
            }
            tracing::debug!("`{}` {range}: the fingerprints differ: comparing rows", table.id);
            (within(table, range, "the source", source.read(table, range)).await?, theirs)
        }
        None => futures::try_join!(within(table, range, "the source", source.read(table, range)), doris())?,
    };
    if let Some(rows) = same_rows(table, &ours, &theirs) {
        return Ok(RangeReport { compared: rows, equal: rows, ..Default::default() });
    }
    let source_rows = Rows::of(table, std::slice::from_ref(&ours))?;
    let doris_rows = Rows::of(table, &theirs)?;
    Ok(source_rows.compare(doris_rows, &columns, table.key.is_empty()))
}

/// How many rows both sides hold when they hold the same ones: Doris' columns cast to the
/// source's types, both sides sorted by key and compared as Arrow arrays (the common case, without
/// a string per value). None when they may differ: then [`Rows`] compares each row as text, which
/// also forgives what is stored differently but means the same (JSON's spacing, `-0`).
fn same_rows(table: &MirroredTable, ours: &RecordBatch, theirs: &[RecordBatch]) -> Option<u64> {
    use arrow::compute::{SortColumn, lexsort_to_indices, take};
    let schema = &table.schema;
    let key: Vec<usize> = table.key.iter().map(|k| schema.index_of(k).ok()).collect::<Option<_>>()?;
    let rows = ours.num_rows();
    if key.is_empty() || theirs.iter().map(RecordBatch::num_rows).sum::<usize>() != rows {
        return None;
    }
    if ours.num_columns() != schema.fields().len() || theirs.iter().any(|b| b.num_columns() != ours.num_columns()) {
        return None;
    }
    let mut doris = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let parts: Vec<&dyn Array> = theirs.iter().map(|b| b.column(i).as_ref()).collect();
        let column = match parts.as_slice() {
            [] => arrow::array::new_empty_array(field.data_type()),
            [one] => arrow::array::make_array(one.to_data()),
            many => arrow::compute::concat(many).ok()?,
        };
        doris.push(match column.data_type() == field.data_type() {
            true => column,
            false => arrow::compute::cast(&column, field.data_type()).ok()?,
        });
    }
    let by_key = |columns: &[ArrayRef]| -> Option<Vec<ArrayRef>> {
        let keys: Vec<SortColumn> =
            key.iter().map(|&k| SortColumn { values: columns[k].clone(), options: None }).collect();
        let order = lexsort_to_indices(&keys, None).ok()?;
        columns.iter().map(|c| take(c.as_ref(), &order, None).ok()).collect()
    };
    let (a, b) = (by_key(ours.columns())?, by_key(&doris)?);
    a.iter().zip(&b).all(|(x, y)| x.to_data() == y.to_data()).then_some(rows as u64)
}

/// `read`, one side's rows of `range`, within [`READ_TIMEOUT`].
async fn within<T>(
    table: &MirroredTable,
    range: &KeyRange,
    side: &str,
    read: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tracing::debug!("`{}` {range}: reading {side}", table.id);
    let rows = tokio::time::timeout(READ_TIMEOUT, read).await.map_err(|_| {
        anyhow::anyhow!(
            "`{}` {range}: {side} did not answer within {}",
            table.id,
            humantime::format_duration(READ_TIMEOUT)
        )
    })?;
    tracing::debug!("`{}` {range}: {side} read", table.id);
    rows
}

/// One side's rows of a range, by key.
struct Rows {
    by_key: HashMap<String, Vec<Vec<Option<String>>>>,
    /// Keys in the order first seen (so reports are stable).
    order: Vec<String>,
}

impl Rows {
    /// `batches` (either side's) as text in `table`'s types: Doris' columns are cast to the
    /// source's Arrow types first, JSON is compared as parsed.
    fn of(table: &MirroredTable, batches: &[RecordBatch]) -> anyhow::Result<Rows> {
        let schema = &table.schema;
        let types: Vec<Option<DorisType>> =
            schema.fields().iter().map(|f| DorisType::from_arrow_field(f).ok()).collect();
        let key_columns: Vec<usize> = table.key.iter().filter_map(|k| schema.index_of(k).ok()).collect();
        let mut rows = Rows { by_key: HashMap::new(), order: Vec::new() };
        for batch in batches {
            if batch.num_columns() != schema.fields().len() {
                anyhow::bail!("{} columns read back, {} expected", batch.num_columns(), schema.fields().len());
            }
            let texts = columns_text(batch, schema, &types)?;
            for row in 0..batch.num_rows() {
                let values: Vec<Option<String>> = texts.iter().map(|c| c[row].clone()).collect();
                let key = if key_columns.is_empty() {
                    describe(schema, &values, 0..values.len())
                } else {
                    describe(schema, &values, key_columns.iter().copied())
                };
                let entry = rows.by_key.entry(key.clone()).or_default();
                if entry.is_empty() {
                    rows.order.push(key);
                }
                entry.push(values);
            }
        }
        Ok(rows)
    }

    /// The rows of both sides matched by key; `keyless`: Doris' rows beyond the source's are
    /// versions its DUPLICATE KEY table keeps.
    fn compare(mut self, mut doris: Rows, columns: &[String], keyless: bool) -> RangeReport {
        let mut r = RangeReport::default();
        let all = |values: &[Option<String>], source: bool| -> Vec<ColumnDifference> {
            columns
                .iter()
                .zip(values)
                .map(|(c, v)| ColumnDifference {
                    column: c.clone(),
                    source: if source { v.clone() } else { None },
                    doris: if source { None } else { v.clone() },
                })
                .collect()
        };
        for key in std::mem::take(&mut self.order) {
            let ours = self.by_key.remove(&key).unwrap_or_default();
            let theirs = doris.by_key.remove(&key).unwrap_or_default();
            r.compared += ours.len() as u64;
            for pair in 0..ours.len().max(theirs.len()) {
                match (ours.get(pair), theirs.get(pair)) {
                    (Some(a), Some(b)) if a == b => r.equal += 1,
                    (Some(a), Some(b)) => {
                        r.differing += 1;
                        let columns = columns
                            .iter()
                            .zip(a.iter().zip(b))
                            .filter(|(_, (x, y))| x != y)
                            .map(|(c, (x, y))| ColumnDifference {
                                column: c.clone(),
                                source: x.clone(),
                                doris: y.clone(),
                            })
                            .collect();
                        r.samples.push(Difference { kind: "differing", key: key.clone(), columns });
                    }
                    (Some(a), None) => {
                        r.missing += 1;
                        r.samples.push(Difference { kind: "missing", key: key.clone(), columns: all(a, true) });
                    }
                    (None, Some(_)) if keyless => r.versions += 1,
                    (None, Some(b)) => {
                        r.extra += 1;
                        r.samples.push(Difference { kind: "extra", key: key.clone(), columns: all(b, false) });
                    }
                    (None, None) => {}
                }
            }
        }
        for key in doris.order {
            for b in doris.by_key.remove(&key).unwrap_or_default() {
                if keyless {
                    r.versions += 1;
                    continue;
                }
                r.extra += 1;
                r.samples.push(Difference { kind: "extra", key: key.clone(), columns: all(&b, false) });
            }
        }
        r
    }
}

/// `col=value, …` of `columns` of a row.
fn describe(schema: &SchemaRef, values: &[Option<String>], columns: impl Iterator<Item = usize>) -> String {
    columns
        .map(|i| format!("{}={}", schema.field(i).name(), values[i].as_deref().unwrap_or("NULL")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each column of `batch` as text of `schema`'s type (none: NULL).
fn columns_text(
    batch: &RecordBatch,
    schema: &SchemaRef,
    types: &[Option<DorisType>],
) -> anyhow::Result<Vec<Vec<Option<String>>>> {
    let options = FormatOptions::default();
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .zip(types)
        .map(|((column, field), doris_type)| {
            let column: ArrayRef = match column.data_type() == field.data_type() {
                true => column.clone(),
                // Doris' Flight types (DATETIME in seconds, LARGEINT as text …) as the source's.
                false => arrow::compute::cast(column, field.data_type()).unwrap_or_else(|_| column.clone()),
            };
            let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
            let json = matches!(doris_type, Some(DorisType::Json | DorisType::Complex(_)));
            let float = matches!(field.data_type(), DataType::Float32 | DataType::Float64);
            Ok((0..column.len())
                .map(|row| {
                    if column.is_null(row) {
                        return None;
                    }
                    let text = formatter.value(row).to_string();
                    Some(match (json, float) {
                        (true, _) => normal_json(&text),
                        (_, true) if text == "-0" || text == "-0.0" => "0".to_string(),
                        _ => text,
                    })
                })
                .collect())
        })
        .collect()
}

/// JSON text with object keys sorted and no spaces (as Doris prints JSONB); text that is not JSON
/// stays as it is.
fn normal_json(text: &str) -> String {
    fn sorted(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => sorted(v).to_string(),
        Err(_) => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;
    use crate::runtime::TableId;

    fn table(key: &[&str]) -> MirroredTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        MirroredTable {
            id: TableId::new("db.t"),
            schema,
            key: key.iter().map(|k| k.to_string()).collect(),
            range_key: None,
        }
    }

    fn batch(t: &MirroredTable, ids: &[i32], vs: &[Option<&str>]) -> RecordBatch {
        RecordBatch::try_new(
            t.schema.clone(),
            vec![Arc::new(Int32Array::from(ids.to_vec())), Arc::new(StringArray::from(vs.to_vec()))],
        )
        .unwrap()
    }

    fn compare(t: &MirroredTable, ours: RecordBatch, theirs: RecordBatch) -> RangeReport {
        let columns: Vec<String> = t.schema.fields().iter().map(|f| f.name().clone()).collect();
        Rows::of(t, &[ours]).unwrap().compare(Rows::of(t, &[theirs]).unwrap(), &columns, t.key.is_empty())
    }

    #[test]
    fn rows_are_matched_by_key_and_each_difference_is_named() {
        let t = table(&["id"]);
        let r = compare(
            &t,
            batch(&t, &[1, 2, 3], &[Some("a"), Some("b"), None]),
            batch(&t, &[4, 2, 1], &[Some("x"), None, Some("a")]),
        );
        assert_eq!((r.compared, r.equal, r.differing, r.missing, r.extra), (3, 1, 1, 1, 1));
        let kinds: Vec<(&str, &str)> = r.samples.iter().map(|d| (d.kind, d.key.as_str())).collect();
        assert_eq!(kinds, [("differing", "id=2"), ("missing", "id=3"), ("extra", "id=4")]);
        assert_eq!(
            r.samples[0].columns,
            [ColumnDifference { column: "v".into(), source: Some("b".into()), doris: None }]
        );
    }

    #[test]
    fn rows_without_a_key_are_compared_as_a_multiset() {
        let t = table(&[]);
        let r = compare(
            &t,
            batch(&t, &[1, 1, 2], &[Some("a"), Some("a"), None]),
            batch(&t, &[1, 2, 2], &[Some("a"), None, None]),
        );
        // Doris' extra row is a version its DUPLICATE KEY table keeps; the missing one is drift.
        assert_eq!((r.compared, r.equal, r.differing, r.missing, r.extra, r.versions), (3, 2, 0, 1, 0, 1));
        assert_eq!((r.samples.len(), r.samples[0].key.as_str()), (1, "id=1, v=a"));
    }

    #[test]
    fn rows_alike_as_arrays_are_equal_without_text_and_any_difference_falls_back_to_it() {
        let t = table(&["id"]);
        let ours = batch(&t, &[1, 2, 3], &[Some("a"), None, Some("c")]);
        let theirs = [batch(&t, &[3], &[Some("c")]), batch(&t, &[2, 1], &[None, Some("a")])];
        assert_eq!(same_rows(&t, &ours, &theirs), Some(3));
        let changed = [batch(&t, &[3, 2, 1], &[Some("c"), Some(""), Some("a")])];
        assert_eq!(same_rows(&t, &ours, &changed), None);
        assert_eq!(same_rows(&table(&[]), &ours, &theirs), None, "a table without a key is a multiset");
    }

    #[test]
    fn json_is_compared_as_parsed() {
        assert_eq!(normal_json(r#"{"b": [1, {"d":1,"c":2}], "a": null}"#), r#"{"a":null,"b":[1,{"c":2,"d":1}]}"#);
        assert_eq!(normal_json("not json"), "not json");
    }
}
