//! `type = "datagen"`: rows at a steady rate, like Flink's datagen connector.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::array::{ArrayRef, BooleanArray, Float32Array, Float64Array, Int64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::Deserialize;
use sluice_guest::types::{ColumnDef, DorisType, arrow_schema, parse_columns};

use super::RowPosition;
use crate::Batch;
use crate::pipeline::{BuildContext, Checked, PipelineFile, SourceConfig};
use crate::runtime::{Event, Position, Source, SourceReader, SplitEnumerator, TableId};

/// `type = "datagen"`: the options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenSource {
    pub name: Option<String>,
    /// Columns in Doris syntax: `"id BIGINT, name VARCHAR(64), age INT"`.
    pub schema: String,
    /// Rows generated per second (default 10000).
    #[serde(default = "default_rows_per_second")]
    pub rows_per_second: u64,
    /// Total rows; unbounded when absent.
    pub number_of_rows: Option<u64>,
    /// Per-column generators: `fields.id.kind = "sequence"`, `fields.age.min = 1` …
    #[serde(default)]
    pub fields: BTreeMap<String, DatagenField>,
}

fn default_rows_per_second() -> u64 {
    10_000
}

/// `fields.<column>` of a datagen source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenField {
    /// `random` (default) or `sequence`.
    #[serde(default)]
    pub kind: DatagenKind,
    /// Smallest random value.
    pub min: Option<i64>,
    /// Largest random value.
    pub max: Option<i64>,
    /// Length of random strings (default 10).
    pub length: Option<u32>,
    /// First value of a sequence.
    pub start: Option<i64>,
    /// Last value of a sequence (the source ends after it).
    pub end: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatagenKind {
    #[default]
    Random,
    Sequence,
}

/// `type = "datagen"`: rows at a steady rate, like Flink's datagen connector. Sequence columns
/// are spread over the workers (worker `w` of `n` produces `start + w`, `start + w + n`, …), so
/// together they produce every value once.
pub struct Datagen {
    table: TableId,
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
    fn new(
        name: &str,
        cfg: &DatagenSource,
        worker: usize,
        parallelism: usize,
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
        let (w, p) = (worker as u64, parallelism as u64);
        let limit = total.map(|t| if t > w { (t - w).div_ceil(p) } else { 0 });
        let columns =
            defs.into_iter().map(|c| (c.clone(), cfg.fields.get(&c.name).cloned().unwrap_or_default())).collect();
        let rate = cfg.rows_per_second as f64 / p as f64;
        let rows = RowPosition::restore(position, name)?.rows;
        Ok(Self {
            table: TableId::new(name),
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
impl SourceReader for Datagen {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
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
        Ok(Some(Event::data(&self.table, Batch::new(RecordBatch::try_new(self.schema.clone(), arrays)?))))
    }

    fn position(&self) -> serde_json::Value {
        RowPosition { rows: self.rows }.to_value()
    }
}

#[async_trait]
impl SourceConfig for DatagenSource {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Generated rows reach nothing.
    fn reach(&self, _file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach::default())
    }

    fn validate(&self, _file: &PipelineFile) -> Checked {
        if self.rows_per_second == 0 {
            return Err(("source.rows_per_second".into(), "must be at least 1".into()));
        }
        let columns = parse_columns(&self.schema).map_err(|e| ("source.schema".to_string(), e.message))?;
        for (field, generator) in &self.fields {
            if !columns.iter().any(|c| &c.name == field) {
                return Err((
                    format!("source.fields.{field}"),
                    format!("`{field}` is not a column of the source schema"),
                ));
            }
            if let (Some(min), Some(max)) = (generator.min, generator.max)
                && min > max
            {
                return Err((format!("source.fields.{field}.min"), format!("min {min} is larger than max {max}")));
            }
        }
        Ok(())
    }

    async fn build(&self, name: &str, _ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let schema = arrow_schema(&parse_columns(&self.schema).map_err(|e| anyhow::anyhow!(e.message))?);
        Ok(Arc::new(DatagenSourceBuilt { name: name.to_string(), config: self.clone(), schema }))
    }
}

/// A datagen source: each worker generates its share (sequence columns are spread over the
/// workers: worker `w` of `n` produces `start + w`, `start + w + n`, …, so together they produce
/// every value once).
#[derive(Clone)]
struct DatagenSourceBuilt {
    name: String,
    config: DatagenSource,
    schema: SchemaRef,
}

#[async_trait]
impl Source for DatagenSourceBuilt {
    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        Ok(Box::new(Workers { source: self.clone(), parallelism: restored.len() }))
    }

    fn describe(&self) -> String {
        format!("datagen {}", self.config.schema)
    }
}

/// The split of worker `w`: the `w`-th of every `parallelism` rows.
struct Workers {
    source: DatagenSourceBuilt,
    parallelism: usize,
}

#[async_trait]
impl SplitEnumerator for Workers {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let s = &self.source;
        Ok(Box::new(Datagen::new(&s.name, &s.config, worker, self.parallelism, position)?))
    }

    fn total_rows(&self) -> Option<u64> {
        (0..self.parallelism)
            .map(|w| {
                Datagen::new(&self.source.name, &self.source.config, w, self.parallelism, None)
                    .ok()
                    .and_then(|d| d.limit)
            })
            .sum()
    }
}
