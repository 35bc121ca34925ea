//! Lookup joins: each row of the stream is enriched with the matching rows of a Doris dimension
//! table, read over the MySQL protocol.
//!
//! Per batch, the key values are put in the types of the dimension's key columns, de-duplicated
//! and served from the cache where possible; the misses are fetched with
//! `WHERE k IN (…)` / `WHERE (k1, k2) IN ((…), …)` queries of at most `jdbc.read.batch.size` keys,
//! up to `jdbc.read.thread_size` of them at a time per worker, values rendered as escaped SQL
//! literals. A worker keeps several batches' lookups in flight ([`LookupJoin::lookup`]), at most
//! `jdbc.read.batch.queue_size` keys of them being fetched at once, and emits the batches in input
//! order; each batch keeps its row order. With `cache.mode = "full"` the whole table is held in
//! memory and read again in the background every `cache.ttl`, the old snapshot served meanwhile.

mod cache;
pub use cache::Clock;
mod config;
pub(crate) mod fetch;
mod join;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::FutureExt;

use sluice_guest::types::DorisType;

pub use config::*;
pub use join::LookupJoin;

use crate::Batch;
use crate::pipeline::{BuildContext, Checked, DorisSection, PipelineFile, TransformConfig};
use crate::runtime::{ConcurrentTransform, TableId, Transform, TransformInstance};
use cache::KeyCache;
use fetch::Dimension;

/// A failure of a lookup join, naming the dimension table and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("lookup: {0}")]
    Config(String),
    #[error("lookup in `{table}`: the dimension table cannot be read at {at}: {message}")]
    Describe { table: String, at: String, message: String },
    #[error("lookup in `{table}`: the dimension table has no column `{column}`; its columns are {columns}")]
    NoDimensionColumn { table: String, column: String, columns: String },
    #[error("lookup in `{table}`: the stream has no column `{column}`; its columns are {columns}")]
    NoStreamColumn { table: String, column: String, columns: String },
    #[error(
        "lookup in `{table}`: output column `{column}` is already a stream column; rename it with `rename.{dim} = \"…\"`"
    )]
    Clash { table: String, column: String, dim: String },
    #[error("lookup in `{table}`: query failed after {attempts} attempt(s) (`max_retries` = {retries}): {message}")]
    Query { table: String, attempts: u32, retries: u32, message: String },
    #[error("lookup in `{table}`: {message}")]
    Data { table: String, message: String },
}

/// Counters of one lookup transform, summed over the workers.
#[derive(Debug, Default)]
pub struct LookupMetrics {
    /// Distinct keys of a batch answered by the cache (negative entries included).
    pub hits: AtomicU64,
    /// Distinct keys of a batch that had to be fetched.
    pub misses: AtomicU64,
    /// Queries sent to Doris, retries included.
    pub queries: AtomicU64,
    /// Queries that failed (each retried while `max_retries` allows).
    pub query_failures: AtomicU64,
    /// Dimension rows read.
    pub rows_fetched: AtomicU64,
    /// Time spent in queries, summed, in microseconds.
    pub query_time_us: AtomicU64,
    /// The slowest query, in microseconds.
    pub query_time_max_us: AtomicU64,
    /// Loads of the whole table (`cache.mode = "full"`).
    pub full_loads: AtomicU64,
    /// Reloads of the whole table that failed (the previous snapshot stayed in use).
    pub full_load_failures: AtomicU64,
}

impl LookupMetrics {
    /// `(name, help, value)` for every counter.
    pub fn values(&self) -> Vec<(&'static str, &'static str, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("lookup_hits", "Distinct keys answered by the lookup cache.", g(&self.hits)),
            ("lookup_misses", "Distinct keys fetched from the dimension table.", g(&self.misses)),
            ("lookup_queries", "Lookup queries sent, retries included.", g(&self.queries)),
            ("lookup_query_failures", "Lookup queries that failed.", g(&self.query_failures)),
            ("lookup_rows_fetched", "Dimension rows read by lookups.", g(&self.rows_fetched)),
            ("lookup_query_time_us", "Time spent in lookup queries, in microseconds.", g(&self.query_time_us)),
            ("lookup_query_time_max_us", "The slowest lookup query, in microseconds.", g(&self.query_time_max_us)),
            ("lookup_full_loads", "Loads of the whole dimension table (full cache).", g(&self.full_loads)),
            (
                "lookup_full_load_failures",
                "Reloads of the whole dimension table that failed (full cache).",
                g(&self.full_load_failures),
            ),
        ]
    }

    fn record_query(&self, elapsed: std::time::Duration, ok: bool) {
        let us = elapsed.as_micros() as u64;
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.query_time_us.fetch_add(us, Ordering::Relaxed);
        self.query_time_max_us.fetch_max(us, Ordering::Relaxed);
        if !ok {
            self.query_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A dimension column as the lookup uses it.
#[derive(Debug, Clone)]
struct DimColumn {
    /// The name in Doris.
    name: String,
    ty: DorisType,
}

/// The part of a lookup shared by every worker: the connection pool, the dimension's columns, the
/// cache and the counters.
pub struct LookupTable {
    dim: Dimension,
    /// Stream columns matched with `dim.keys`, in the same order.
    stream_keys: Vec<String>,
    /// Output names of `dim.values`.
    output_names: Vec<String>,
    join: JoinKind,
    cache: KeyCache,
    /// Keys per query.
    batch_size: usize,
    /// Keys being fetched at once per worker, over all its batches in flight.
    queue_size: usize,
    /// Queries in flight at once per worker.
    threads: usize,
    pub metrics: Arc<LookupMetrics>,
    /// The time the cache's entries expire by.
    pub clock: Clock,
}

impl LookupTable {
    /// Connect to the dimension table of `cfg` and read its columns; `connections` bounds the pool.
    pub async fn connect(
        cfg: &LookupTransform,
        doris: &DorisSection,
        password: &str,
        connections: usize,
    ) -> Result<Arc<LookupTable>, LookupError> {
        let metrics = Arc::new(LookupMetrics::default());
        let dim = Dimension::connect(cfg, doris, password, connections, metrics.clone()).await?;
        let stream_keys = if cfg.stream_keys.is_empty() { cfg.keys.clone() } else { cfg.stream_keys.clone() };
        let renamed = |name: &str| cfg.rename.iter().find(|(from, _)| from.eq_ignore_ascii_case(name));
        if let Some(from) = cfg.rename.keys().find(|from| !dim.values.iter().any(|c| c.name.eq_ignore_ascii_case(from)))
        {
            let values: Vec<&str> = dim.values.iter().map(|c| c.name.as_str()).collect();
            let message =
                format!("`rename.{from}`: `{from}` is not a column this lookup brings back ({})", values.join(", "));
            return Err(LookupError::Data { table: cfg.table.clone(), message });
        }
        let output_names =
            dim.values.iter().map(|c| renamed(&c.name).map_or_else(|| c.name.clone(), |(_, to)| to.clone())).collect();
        let (batch_size, threads) = if cfg.jdbc.is_async {
            (cfg.jdbc.read.batch.size as usize, cfg.jdbc.read.thread_size as usize)
        } else {
            (1, 1)
        };
        Ok(Arc::new(LookupTable {
            cache: KeyCache::new(&cfg.cache),
            dim,
            stream_keys,
            output_names,
            join: cfg.join,
            batch_size,
            queue_size: (cfg.jdbc.read.batch.queue_size as usize).max(batch_size),
            threads,
            metrics,
            clock: Clock::default(),
        }))
    }

    /// `db.table` as configured.
    pub fn table(&self) -> &str {
        &self.dim.table
    }

    /// One line for `sluice check`.
    pub fn describe(&self) -> String {
        let on: Vec<String> =
            self.dim.keys.iter().zip(&self.stream_keys).map(|(d, s)| format!("{} = {s}", d.name)).collect();
        let cols: Vec<String> = self
            .dim
            .values
            .iter()
            .zip(&self.output_names)
            .map(|(c, out)| if &c.name == out { c.name.clone() } else { format!("{} AS {out}", c.name) })
            .collect();
        format!(
            "{} join {} on {} bringing {} ({})",
            match self.join {
                JoinKind::Left => "left",
                JoinKind::Inner => "inner",
            },
            self.dim.table,
            on.join(", "),
            cols.join(", "),
            self.cache.describe()
        )
    }

    /// Close the connection pool.
    pub async fn close(&self) {
        self.dim.close().await;
    }
}

#[async_trait]
impl TransformConfig for LookupTransform {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        let mut reach = crate::pipeline::doris_reach(file, self.connection.as_deref())?;
        reach.reads.push(self.table.clone());
        Ok(reach)
    }

    fn validate(&self, file: &PipelineFile) -> Checked {
        self.check(file)
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Transform>> {
        let conn = ctx.doris(self.connection.as_deref()).await?;
        let connections = self.jdbc.read.thread_size as usize * ctx.parallelism();
        let table = LookupTable::connect(self, &conn.section, &conn.password, connections).await?;
        ctx.stats.register(Arc::new(TableMetrics { table: self.table.clone(), metrics: table.metrics.clone() }));
        Ok(Arc::new(Lookup(table)))
    }
}

/// A lookup's counters, labelled with its dimension table.
struct TableMetrics {
    table: String,
    metrics: Arc<LookupMetrics>,
}

impl crate::metrics::MetricSource for TableMetrics {
    fn metrics(&self) -> Vec<crate::metrics::Metric> {
        self.metrics
            .values()
            .into_iter()
            .map(|(name, help, value)| {
                crate::metrics::Metric::counter(name, help, vec![("table", self.table.clone())], value)
            })
            .collect()
    }
}

/// The lookup transform; its connection pool, cache and counters are shared by the workers.
pub struct Lookup(pub Arc<LookupTable>);

impl Transform for Lookup {
    fn instance(
        &self,
        _worker: usize,
        _table: &TableId,
        input: &SchemaRef,
        _state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        Ok(Box::new(LookupJoin::new(self.0.clone(), input)?))
    }

    fn describe(&self) -> String {
        format!("lookup: {}", self.0.describe())
    }
}

#[async_trait]
impl TransformInstance for LookupJoin {
    fn output_schema(&self) -> &SchemaRef {
        LookupJoin::output_schema(self)
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        Ok(vec![LookupJoin::process(self, &batch).await?])
    }

    fn concurrent(&self) -> Option<&dyn ConcurrentTransform> {
        Some(self)
    }
}

impl ConcurrentTransform for LookupJoin {
    /// The lookup as a task of its own, so it moves on while the worker writes; the task is
    /// aborted if the returned future is dropped (the worker failed).
    fn start(&self, batch: Batch) -> futures::future::BoxFuture<'static, anyhow::Result<Vec<Batch>>> {
        let mut task = crate::runtime::AbortOnDrop(tokio::spawn(self.lookup(batch)));
        async move { Ok(vec![(&mut task.0).await.map_err(|e| anyhow::anyhow!("a lookup task failed: {e}"))??]) }.boxed()
    }

    fn max_in_flight(&self) -> usize {
        LookupJoin::max_in_flight(self)
    }
}
