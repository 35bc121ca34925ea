//! One worker's lookup join: a batch in, the same rows (in order) with the dimension's columns out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow::array::{ArrayRef, StringArray, UInt32Array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};

use super::cache::{Key, KeyCache, Matches};
use super::fetch::canonical;
use super::{LookupError, LookupTable};
use crate::Batch;
use crate::pipeline::JoinKind;

/// The rows of one chunk of keys, with the chunk.
type ChunkResult<'a> = Result<(&'a [Key], HashMap<Key, Matches>), LookupError>;

/// A lookup join for one input schema.
pub struct LookupJoin {
    table: Arc<LookupTable>,
    /// Index of each stream key column in the input.
    key_columns: Vec<usize>,
    output: SchemaRef,
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
        Ok(LookupJoin { table, key_columns, output })
    }

    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
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
        if let KeyCache::Full { table, ttl } = &t.cache {
            let rows = {
                let mut full = table.lock().await;
                if full.loaded.is_none_or(|at| at.elapsed() >= *ttl) {
                    let started = Instant::now();
                    full.rows = Arc::new(t.dim.fetch_all().await?);
                    full.loaded = Some(started);
                    t.metrics.full_loads.fetch_add(1, Ordering::Relaxed);
                }
                full.rows.clone()
            };
            for (k, m) in distinct.iter_mut() {
                *m = Some(rows.get(*k).cloned().unwrap_or_default());
            }
            t.metrics.hits.fetch_add(distinct.len() as u64, Ordering::Relaxed);
            return Ok(());
        }
        let mut misses: Vec<Key> = Vec::new();
        for (k, m) in distinct.iter_mut() {
            match t.cache.get(k) {
                Some(cached) => *m = Some(cached),
                None => misses.push((*k).clone()),
            }
        }
        t.metrics.hits.fetch_add((distinct.len() - misses.len()) as u64, Ordering::Relaxed);
        t.metrics.misses.fetch_add(misses.len() as u64, Ordering::Relaxed);
        for window in misses.chunks(t.queue_size) {
            // Boxed so the worker's future stays `Send` (closures in stream combinators trip the
            // compiler's higher-ranked lifetime check).
            let queries: Vec<BoxFuture<'_, ChunkResult<'_>>> = window
                .chunks(t.batch_size)
                .map(|chunk| async move { t.dim.fetch(chunk).await.map(|rows| (chunk, rows)) }.boxed())
                .collect();
            let fetched: Vec<_> = futures::stream::iter(queries).buffer_unordered(t.threads).try_collect().await?;
            for (chunk, mut rows) in fetched {
                for key in chunk {
                    let matches = rows.remove(key).unwrap_or_default();
                    t.cache.put(key.clone(), matches.clone());
                    if let Some(slot) = distinct.get_mut(key) {
                        *slot = Some(matches);
                    }
                }
            }
        }
        Ok(())
    }
}
