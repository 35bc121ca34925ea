//! The `normalize` transform: `dedup = true` on a changelog source (Flink's
//! `table.exec.source.cdc-events-duplicate`) runs it first, so that change events read twice —
//! replayed after a failure, read again from a lagging offset table, or present both in the
//! `initial` snapshot and in the changelog that follows it — do not change the results.
//!
//! The state is one entry per key: a digest of the key's current row, or a tombstone once it is
//! deleted. An insert or update-after equal to the current row is dropped, as is a delete of a key
//! already deleted; an update-before passes only while it matches the current row. Events for a key
//! the state has not seen always pass, so a partial state (a new consumer, another worker's part of
//! the snapshot) can only let a duplicate through, never drop a change. The state is checkpointed
//! as the transform's own, compactly: 33 bytes a key (a 128-bit digest of the key, a tombstone
//! flag, a 128-bit digest of the row), base64 in the checkpoint.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use anyhow::Context;
use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use base64::Engine as _;

use crate::runtime::{TableId, Transform, TransformInstance};
use crate::{Batch, RowKind};

/// The transform: normalise the change events of each table on its primary key.
#[derive(Debug, Clone)]
pub struct Normalize {
    pub primary_key: Vec<String>,
}

impl Transform for Normalize {
    fn instance(
        &self,
        _worker: usize,
        table: &TableId,
        input: &SchemaRef,
        state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        Ok(Box::new(Normalizer::new(table.as_str(), input, &self.primary_key, state)?))
    }

    fn describe(&self) -> String {
        format!("normalize change events on ({})", self.primary_key.join(", "))
    }
}

#[async_trait]
impl TransformInstance for Normalizer {
    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        Ok(vec![self.apply(batch)?])
    }

    fn snapshot(&self) -> Option<serde_json::Value> {
        Some(Normalizer::snapshot(self))
    }
}

/// The per-key state of one table.
#[derive(Debug)]
pub struct Normalizer {
    schema: SchemaRef,
    key_columns: Vec<usize>,
    /// Digest of the key → digest of its current row; `None` = deleted.
    state: HashMap<u128, Option<u128>>,
    /// Events dropped as duplicates (for the log and tests).
    pub dropped: u64,
}

/// The format tag of a checkpointed state.
const FORMAT: &str = "normalize-v1";
const ENTRY: usize = 33;

const SEP: char = '\u{1f}';

impl Normalizer {
    /// A normaliser keyed on `primary_key` (columns of `schema`), starting from `saved` (the
    /// state of a checkpoint) when given.
    pub fn new(
        table: &str,
        schema: &SchemaRef,
        primary_key: &[String],
        saved: Option<&serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let key_columns = primary_key
            .iter()
            .map(|k| {
                schema.index_of(k).map_err(|_| {
                    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                    anyhow::anyhow!(
                        "source.primary_key: `{table}` read with these columns has no column `{k}`; they are {}",
                        names.join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let state = match saved {
            Some(saved) => decode(saved).with_context(|| format!("the dedup state of `{table}` in the checkpoint"))?,
            None => HashMap::new(),
        };
        Ok(Self { schema: schema.clone(), key_columns, state, dropped: 0 })
    }

    /// The state for a checkpoint: `{"format", "keys", "data"}` with the entries in base64.
    pub fn snapshot(&self) -> serde_json::Value {
        let mut data = Vec::with_capacity(self.state.len() * ENTRY);
        for (k, v) in &self.state {
            data.extend_from_slice(&k.to_le_bytes());
            data.push(u8::from(v.is_some()));
            data.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
        }
        serde_json::json!({
            "format": FORMAT,
            "keys": self.state.len(),
            "data": base64::engine::general_purpose::STANDARD.encode(&data),
        })
    }

    /// Whether the key made of `values` (as text, in key-column order) is known as deleted.
    pub fn is_deleted(&self, values: &[&str]) -> bool {
        let key: String = values.iter().map(|v| format!("{v}{SEP}")).collect();
        self.state.get(&digest(&key)) == Some(&None)
    }

    /// Keys known (current or deleted).
    pub fn len(&self) -> usize {
        self.state.len()
    }

    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// The events of `batch` that change something, in order.
    pub fn apply(&mut self, batch: Batch) -> anyhow::Result<Batch> {
        if batch.num_rows() == 0 {
            return Ok(batch);
        }
        let keep = self.changes(&batch)?;
        if keep.iter().all(|k| *k) {
            return Ok(batch);
        }
        let mask = BooleanArray::from(keep.clone());
        let data = filter_record_batch(&batch.data, &mask)?;
        let row_kinds = if batch.row_kinds.is_empty() {
            Vec::new()
        } else {
            batch.row_kinds.iter().zip(&keep).filter(|(_, k)| **k).map(|(r, _)| *r).collect()
        };
        Ok(Batch { table: batch.table, data, row_kinds })
    }

    /// For each row: does it change something? Updates the state.
    fn changes(&mut self, batch: &Batch) -> anyhow::Result<Vec<bool>> {
        let options = FormatOptions::default().with_null("\u{0}");
        let formatters = batch
            .data
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        let mut text = String::new();
        for row in 0..batch.num_rows() {
            text.clear();
            for &c in &self.key_columns {
                use std::fmt::Write;
                write!(text, "{}{SEP}", formatters[c].value(row))?;
            }
            let key = digest(&text);
            for f in &formatters {
                use std::fmt::Write;
                write!(text, "{}{SEP}", f.value(row))?;
            }
            let digest = digest(&text);
            let current = self.state.get(&key).copied();
            let pass = match batch.row_kind(row) {
                RowKind::Insert | RowKind::UpdateAfter => {
                    let pass = current != Some(Some(digest));
                    self.state.insert(key, Some(digest));
                    pass
                }
                RowKind::Delete => {
                    let pass = current != Some(None);
                    self.state.insert(key, None);
                    pass
                }
                RowKind::UpdateBefore => current.is_none() || current == Some(Some(digest)),
            };
            if !pass {
                self.dropped += 1;
            }
            keep.push(pass);
        }
        Ok(keep)
    }
}

/// 128 bits from two SipHash passes with different prefixes. A digest that changes between
/// builds only lets a duplicate through; it never drops a change.
fn digest(text: &str) -> u128 {
    let half = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        text.hash(&mut h);
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

/// A checkpointed state back as entries.
fn decode(saved: &serde_json::Value) -> anyhow::Result<HashMap<u128, Option<u128>>> {
    anyhow::ensure!(saved["format"] == FORMAT, "expected format {FORMAT:?}, found {}", saved["format"]);
    let data = saved["data"].as_str().context("no `data`")?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).context("`data` is not base64")?;
    anyhow::ensure!(bytes.len() % ENTRY == 0, "`data` is {} bytes, not a whole number of entries", bytes.len());
    let mut state = HashMap::with_capacity(bytes.len() / ENTRY);
    for e in bytes.chunks_exact(ENTRY) {
        let key = u128::from_le_bytes(e[..16].try_into().expect("16 bytes"));
        let row = u128::from_le_bytes(e[17..].try_into().expect("16 bytes"));
        state.insert(key, (e[16] == 1).then_some(row));
    }
    Ok(state)
}

/// Whether a checkpointed state (a [`Normalizer::snapshot`]) of `schema`, keyed on `primary_key`,
/// knows the key made of `values` as deleted (for tests and tools).
pub fn state_has_deleted(
    saved: &serde_json::Value,
    schema: &SchemaRef,
    primary_key: &[String],
    values: &[&str],
) -> anyhow::Result<bool> {
    Ok(Normalizer::new("checkpoint", schema, primary_key, Some(saved))?.is_deleted(values))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    use super::*;

    fn batch(rows: &[(i32, &str, RowKind)]) -> Batch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let data = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())),
                Arc::new(StringArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())),
            ],
        )
        .unwrap();
        Batch { table: None, data, row_kinds: rows.iter().map(|r| r.2).collect() }
    }

    fn ids(b: &Batch) -> Vec<(i32, String, RowKind)> {
        let id = b.data.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        let name = b.data.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        (0..b.num_rows()).map(|i| (id.value(i), name.value(i).to_string(), b.row_kind(i))).collect()
    }

    #[test]
    fn replayed_events_are_dropped_and_new_ones_pass() {
        use RowKind::*;
        let schema = batch(&[]).data.schema();
        let mut n = Normalizer::new("db.t", &schema, &["id".into()], None).unwrap();
        let first =
            [(1, "a", Insert), (2, "b", Insert), (1, "a", UpdateBefore), (1, "a2", UpdateAfter), (2, "b", Delete)];
        let out = n.apply(batch(&first)).unwrap();
        assert_eq!(out.num_rows(), 5);
        // Replayed events that are each key's latest change: nothing passes.
        let replay = [(1, "a", UpdateBefore), (1, "a2", UpdateAfter), (2, "b", Delete), (1, "a2", Insert)];
        assert_eq!(n.apply(batch(&replay)).unwrap().num_rows(), 0);
        assert_eq!(n.dropped, 4);
        // A real change passes, and its replay does not.
        let change = [(1, "a2", UpdateBefore), (1, "a3", UpdateAfter)];
        assert_eq!(
            ids(&n.apply(batch(&change)).unwrap()),
            vec![(1, "a2".into(), UpdateBefore), (1, "a3".into(), UpdateAfter)]
        );
        assert_eq!(n.apply(batch(&change)).unwrap().num_rows(), 0);
        // Restored from a checkpoint, the state behaves the same.
        let mut restored = Normalizer::new("db.t", &schema, &["id".into()], Some(&n.snapshot())).unwrap();
        let out = restored.apply(batch(&[(1, "a3", Insert), (2, "b", Delete), (3, "c", Delete)])).unwrap();
        assert_eq!(ids(&out), vec![(3, "c".into(), Delete)], "a delete of an unknown key passes");
        assert_eq!(restored.len(), 3);
        assert!(restored.is_deleted(&["2"]) && !restored.is_deleted(&["1"]));
    }

    #[test]
    fn the_state_of_a_million_keys_is_33_bytes_a_key() {
        let schema = batch(&[]).data.schema();
        let mut n = Normalizer::new("db.t", &schema, &["id".into()], None).unwrap();
        for chunk in 0..100 {
            let rows: Vec<(i32, &str, RowKind)> =
                (chunk * 10_000..(chunk + 1) * 10_000).map(|i| (i, "x", RowKind::Insert)).collect();
            n.apply(batch(&rows)).unwrap();
        }
        let snapshot = n.snapshot();
        assert_eq!(snapshot["keys"], 1_000_000);
        let encoded = snapshot["data"].as_str().unwrap().len();
        assert_eq!(encoded, 1_000_000 * 33 / 3 * 4, "base64 of 33 bytes a key");
        let restored = Normalizer::new("db.t", &schema, &["id".into()], Some(&snapshot)).unwrap();
        assert_eq!(restored.len(), 1_000_000);
    }

    #[test]
    fn an_unknown_key_column_is_named() {
        let schema = batch(&[]).data.schema();
        let e = Normalizer::new("db.t", &schema, &["uid".into()], None).unwrap_err().to_string();
        assert_eq!(e, "source.primary_key: `db.t` read with these columns has no column `uid`; they are id, name");
    }
}
