//! One worker's lookup join: a batch in, the same rows (in order) with the dimension's columns out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{ArrayRef, StringArray, UInt32Array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::JoinKind;
use super::cache::{Key, KeyCache, Matches, Rows};
use super::fetch::canonical;
use super::{LookupError, LookupTable};
use crate::Batch;

/// The rows of one chunk of keys, with the chunk.
type ChunkResult<'a> = Result<(&'a [Key], HashMap<Key, Matches>), LookupError>;

/// Stream batches a worker keeps in flight in a lookup at most, whatever the queue size: they
/// hold memory while they wait for the batches before them.
const MAX_BATCHES_IN_FLIGHT: usize = 16;

/// A lookup join for one input schema: one worker's instance. Its clones share the worker's
/// bounds, so the futures of [`LookupJoin::lookup`] in flight together respect them.
#[derive(Clone)]
pub struct LookupJoin {
    table: Arc<LookupTable>,
    /// Index of each stream key column in the input.
    key_columns: Arc<[usize]>,
    output: SchemaRef,
    /// `jdbc.read.thread_size` permits: queries this worker runs at once.
    queries: Arc<Semaphore>,
    /// `jdbc.read.batch.queue_size` permits: keys this worker fetches at once.
    keys: Arc<Semaphore>,
}

impl LookupJoin {
    /// Plan the join for batches of `input`, checking that the stream has the key columns and
    /// that no output column is already there.
    pub fn new(table: Arc<LookupTable>, input: &SchemaRef) -> Result<LookupJoin, LookupError> {
        let names = || input.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ");
        let key_columns = table
            .stream_keys
            .iter()
            .map(|k| {
                input.index_of(k).map_err(|_| LookupError::NoStreamColumn {
                    table: table.dim.table.clone(),
                    column: k.clone(),
                    columns: names(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        for (col, out) in table.dim.values.iter().zip(&table.output_names) {
            if input.index_of(out).is_ok() {
                return Err(LookupError::Clash {
                    table: table.dim.table.clone(),
                    column: out.clone(),
                    dim: col.name.clone(),
                });
            }
            fields.push(col.ty.arrow_field(out, true));
        }
        let output = Arc::new(Schema::new_with_metadata(fields, input.metadata().clone()));
        let queries = Arc::new(Semaphore::new(table.threads));
        let keys = Arc::new(Semaphore::new(table.queue_size));
        Ok(LookupJoin { table, key_columns: key_columns.into(), output, queries, keys })
    }

    /// The time the cache's entries expire by.
    pub fn clock(&self) -> &super::Clock {
        &self.table.clock
    }

    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
    }

    /// How many batches a worker may have in flight in [`LookupJoin::lookup`]: the queue size
    /// (each batch is at least one pending request), at most [`MAX_BATCHES_IN_FLIGHT`].
    pub fn max_in_flight(&self) -> usize {
        self.table.queue_size.clamp(1, MAX_BATCHES_IN_FLIGHT)
    }

    /// Join `batch` in a future of its own, to be kept in flight with others of this worker (in a
    /// `FuturesOrdered`, so they come out in input order). They share this instance's bounds:
    /// `jdbc.read.thread_size` queries and `jdbc.read.batch.queue_size` keys at once.
    pub fn lookup(&self, batch: Batch) -> BoxFuture<'static, Result<Batch, LookupError>> {
        let join = self.clone();
        async move { join.process(&batch).await }.boxed()
    }

    fn data_error(&self, message: impl ToString) -> LookupError {
        LookupError::Data { table: self.table.dim.table.clone(), message: message.to_string() }
    }

    /// The key of every row; `None` where a key column is NULL (or does not convert), which never
    /// matches.
    fn row_keys(&self, batch: &Batch) -> Result<Vec<Option<Key>>, LookupError> {
        let mut parts: Vec<Vec<Option<String>>> = Vec::with_capacity(self.key_columns.len());
        for (&i, col) in self.key_columns.iter().zip(&self.table.dim.keys) {
            parts.push(canonical(batch.data.column(i), &col.ty).map_err(|e| self.data_error(e))?);
        }
        Ok((0..batch.num_rows()).map(|r| parts.iter_mut().map(|p| p[r].take()).collect::<Option<Key>>()).collect())
    }

    /// Join one batch.
    pub async fn process(&self, batch: &Batch) -> Result<Batch, LookupError> {
        let keys = self.row_keys(batch)?;
        let mut distinct: HashMap<&Key, Option<Matches>> = HashMap::new();
        for k in keys.iter().flatten() {
            distinct.entry(k).or_insert(None);
        }
        self.resolve(&mut distinct).await?;

        let join = self.table.join;
        let values = self.table.dim.values.len();
        let mut take: Vec<u32> = Vec::with_capacity(batch.num_rows());
        let mut cells: Vec<Vec<Option<&str>>> = vec![Vec::with_capacity(batch.num_rows()); values];
        for (row, key) in keys.iter().enumerate() {
            let matches = key.as_ref().and_then(|k| distinct.get(k)).and_then(Option::as_ref);
            match matches {
                Some(m) if !m.is_empty() => {
                    for dim_row in m.iter() {
                        take.push(row as u32);
                        for (c, cell) in cells.iter_mut().zip(dim_row) {
                            c.push(cell.as_deref());
                        }
                    }
                }
                _ if join == JoinKind::Left => {
                    take.push(row as u32);
                    cells.iter_mut().for_each(|c| c.push(None));
                }
                _ => {}
            }
        }
        let indices = UInt32Array::from(take);
        let mut columns: Vec<ArrayRef> = batch
            .data
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c, &indices, None))
            .collect::<Result<_, _>>()
            .map_err(|e| self.data_error(e))?;
        let first_value = batch.data.num_columns();
        for (i, c) in cells.into_iter().enumerate() {
            let texts: ArrayRef = Arc::new(StringArray::from(c));
            let ty = self.output.field(first_value + i).data_type();
            columns.push(arrow::compute::cast(&texts, ty).map_err(|e| self.data_error(e))?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(indices.len()));
        let data = RecordBatch::try_new_with_options(self.output.clone(), columns, &options)
            .map_err(|e| self.data_error(e))?;
        let row_kinds = if batch.row_kinds.is_empty() {
            Vec::new()
        } else {
            indices.values().iter().map(|&i| batch.row_kind(i as usize)).collect()
        };
        Ok(Batch { table: batch.table.clone(), data, row_kinds })
    }

    /// Fill in the rows of every key: from the cache, else from Doris.
    async fn resolve(&self, distinct: &mut HashMap<&Key, Option<Matches>>) -> Result<(), LookupError> {
        let t = &self.table;
        if let KeyCache::Full { .. } = &t.cache {
            let rows = full_table(t).await?;
            for (k, m) in distinct.iter_mut() {
                *m = Some(rows.get(*k).cloned().unwrap_or_default());
            }
            t.metrics.hits.fetch_add(distinct.len() as u64, Ordering::Relaxed);
            return Ok(());
        }
        let mut misses: Vec<Key> = Vec::new();
        let now = t.clock.now();
        for (k, m) in distinct.iter_mut() {
            match t.cache.get(k, now) {
                Some(cached) => *m = Some(cached),
                None => misses.push((*k).clone()),
            }
        }
        t.metrics.hits.fetch_add((distinct.len() - misses.len()) as u64, Ordering::Relaxed);
        t.metrics.misses.fetch_add(misses.len() as u64, Ordering::Relaxed);
        for window in misses.chunks(t.queue_size) {
            // The window's keys count against the worker's queue size until they are fetched.
            let _pending = self.keys.acquire_many(window.len() as u32).await.expect("never closed");
            // Boxed so the worker's future stays `Send` (closures in stream combinators trip the
            // compiler's higher-ranked lifetime check).
            let queries: Vec<BoxFuture<'_, ChunkResult<'_>>> = window
                .chunks(t.batch_size)
                .map(|chunk| {
                    let running = &self.queries;
                    async move {
                        let _running = running.acquire().await.expect("never closed");
                        t.dim.fetch(chunk).await.map(|rows| (chunk, rows))
                    }
                    .boxed()
                })
                .collect();
            let fetched_at = t.clock.now();
            let fetched: Vec<_> = futures::stream::iter(queries).buffer_unordered(t.threads).try_collect().await?;
            for (chunk, mut rows) in fetched {
                for key in chunk {
                    let matches = rows.remove(key).unwrap_or_default();
                    t.cache.put(key.clone(), matches.clone(), fetched_at);
                    if let Some(slot) = distinct.get_mut(key) {
                        *slot = Some(matches);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The rows of `cache.mode = "full"`. The first load blocks (one at a time; its failure fails the
/// batch); after that the snapshot is served at once, and once it is `cache.ttl` old one reload
/// starts in the background. A failed reload keeps the snapshot, is logged and counted in
/// `full_load_failures`, and is tried again a `cache.ttl` later.
async fn full_table(t: &Arc<LookupTable>) -> Result<Rows, LookupError> {
    let KeyCache::Full { table: full, ttl } = &t.cache else { unreachable!("a full cache") };
    if let Some((rows, due)) = full.current(t.clock.now()) {
        if due && !full.reloading.swap(true, Ordering::AcqRel) {
            let t = t.clone();
            tokio::spawn(async move {
                let KeyCache::Full { table: full, ttl } = &t.cache else { return };
                let started = t.clock.now();
                match t.dim.fetch_all().await {
                    Ok(rows) => {
                        full.replace(Arc::new(rows), started + *ttl);
                        t.metrics.full_loads.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        full.postpone(t.clock.now() + *ttl);
                        t.metrics.full_load_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            table = %t.dim.table,
                            "reloading the whole table failed, still serving the previous snapshot; trying again in {ttl:?}: {e}"
                        );
                    }
                }
                full.reloading.store(false, Ordering::Release);
            });
        }
        return Ok(rows);
    }
    let _first = full.first.lock().await;
    if let Some((rows, _)) = full.current(t.clock.now()) {
        return Ok(rows);
    }
    let started = t.clock.now();
    let rows: Rows = Arc::new(t.dim.fetch_all().await?);
    full.replace(rows.clone(), started + *ttl);
    t.metrics.full_loads.fetch_add(1, Ordering::Relaxed);
    Ok(rows)
}
