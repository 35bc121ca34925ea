//! Dead letters: rows the pipeline could not deliver, each with the reason, kept instead of
//! failing the pipeline when it has a `[dead_letter]` target.
//!
//! Three kinds reach it: rows a transform or decoder plugin rejects (`plugin-error.row`), rows a
//! transform routes to a table the sink may not write, and rows Doris filters out of a load
//! (within `max_filter_ratio`). Dead letters belong to the checkpoint interval they were found
//! in: the worker writes them to the dead-letter sink at the barrier, after every other sink has
//! prepared its commit, so they are committed with the rows of the same checkpoint — once.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::Batch;
pub use crate::error::{BatchRefused, RowRejected, refused_batch, rejected_row};

/// Why a row could not be delivered, and where it was refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "stage")]
pub enum Refusal {
    /// A transform or decoder plugin rejected the row (`plugin-error` with `row`).
    Plugin { plugin: String },
    /// A transform routed the row to `target`, a table the sink may not or cannot write.
    Route { target: String },
    /// Doris filtered the row out of a load (`NumberFilteredRows`); `label` is the load's.
    Doris { label: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Plugin { plugin } => write!(f, "plugin `{plugin}`"),
            Refusal::Route { target } => write!(f, "routing to `{target}`"),
            Refusal::Doris { label } => write!(f, "Doris load `{label}`"),
        }
    }
}

/// One row that was not delivered.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeadLetter {
    /// The table the row was read from (as its source names it), or for rows Doris refused, the
    /// Doris table it was loaded into.
    pub table: String,
    /// Where it was refused.
    #[serde(flatten)]
    pub refusal: Refusal,
    /// Why, in the words of whoever refused it.
    pub reason: String,
    /// The row, column name → value (Arrow's JSON form of each value).
    pub row: serde_json::Map<String, serde_json::Value>,
    /// The row's kind (`+I`, `-U`, `+U`, `-D`).
    pub kind: String,
    /// The row's columns in Doris syntax (`id BIGINT NOT NULL, name VARCHAR(16)`), so that it can
    /// be read back with its types; empty when only Doris' text of it is known.
    pub columns: String,
    /// The pipeline's entry that refused it: the transform's name, or the sink's.
    pub component: String,
}

/// The name the worker gives the dead-letter target's batches.
pub const TABLE: &str = "dead_letter";

/// Rows `offset..offset + len` of `batch`, row kinds with them.
pub fn slice(batch: &Batch, offset: usize, len: usize) -> Batch {
    let row_kinds =
        if batch.row_kinds.is_empty() { Vec::new() } else { batch.row_kinds[offset..offset + len].to_vec() };
    Batch { table: batch.table.clone(), data: batch.data.slice(offset, len), row_kinds }
}

/// Row `row` of `batch` as a JSON object (column name → value, nulls written out).
pub fn row_json(batch: &Batch, row: usize) -> serde_json::Map<String, serde_json::Value> {
    super::json::json_objects(&batch.data.slice(row, 1))
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .unwrap_or_default()
}

/// A dead letter for row `row` of `batch`.
pub fn letter(table: &str, batch: &Batch, row: usize, refusal: Refusal, reason: impl Into<String>) -> DeadLetter {
    let columns = sluice_guest::types::columns_of(&batch.data.schema())
        .map(|c| sluice_guest::types::format_columns(&c))
        .unwrap_or_default();
    DeadLetter {
        table: table.to_string(),
        refusal,
        reason: reason.into(),
        row: row_json(batch, row),
        kind: batch.row_kind(row).short().to_string(),
        columns,
        component: String::new(),
    }
}

/// The columns dead letters are written with (to a Doris table or a file); `record` is the row
/// as JSON. A Doris table made for them is keyed (DUPLICATE) by `time`.
pub fn schema() -> SchemaRef {
    let json = [(super::json::EXTENSION_NAME.to_string(), super::json::JSON_EXTENSION.to_string())];
    Arc::new(Schema::new(vec![
        Field::new("time", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        Field::new("pipeline", DataType::Utf8, false),
        Field::new("checkpoint", DataType::Int64, false),
        Field::new("worker", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("source_table", DataType::Utf8, false),
        Field::new("stage", DataType::Utf8, false),
        Field::new("component", DataType::Utf8, false),
        Field::new("refused_by", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("row_kind", DataType::Utf8, false),
        Field::new("record", DataType::Utf8, false).with_metadata(json.into()),
        Field::new("columns", DataType::Utf8, false),
    ]))
}

/// Where in the run a batch of dead letters was found.
#[derive(Debug, Clone)]
pub struct Stamp<'a> {
    pub pipeline: &'a str,
    pub checkpoint: u64,
    pub worker: usize,
    /// Microseconds since the Unix epoch, UTC.
    pub time: i64,
}

/// `letters` (all of one worker's in one checkpoint) as a batch of [`schema`]'s columns.
/// (`checkpoint`, `worker`, `seq`) names each letter uniquely within a pipeline.
pub fn to_batch(letters: &[DeadLetter], stamp: &Stamp<'_>) -> anyhow::Result<Batch> {
    let n = letters.len();
    let text = |f: &dyn Fn(&DeadLetter) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(letters.iter().map(f)))
    };
    let repeat = |v: u64| -> ArrayRef { Arc::new(Int64Array::from(vec![v as i64; n])) };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from(vec![stamp.time; n])),
        text(&|_| stamp.pipeline.to_string()),
        repeat(stamp.checkpoint),
        repeat(stamp.worker as u64),
        Arc::new(Int64Array::from_iter_values(0..n as i64)),
        text(&|l| l.table.clone()),
        text(&|l| stage(&l.refusal).to_string()),
        text(&|l| l.component.clone()),
        text(&|l| match &l.refusal {
            Refusal::Plugin { plugin } => plugin.clone(),
            Refusal::Route { target } => target.clone(),
            Refusal::Doris { label } => label.clone(),
        }),
        text(&|l| l.reason.clone()),
        text(&|l| l.kind.clone()),
        text(&|l| serde_json::Value::Object(l.row.clone()).to_string()),
        text(&|l| l.columns.clone()),
    ];
    Ok(Batch::new(RecordBatch::try_new(schema(), columns)?))
}

fn stage(r: &Refusal) -> &'static str {
    match r {
        Refusal::Plugin { .. } => "plugin",
        Refusal::Route { .. } => "route",
        Refusal::Doris { .. } => "doris",
    }
}

/// Now, as the `time` of dead letters.
pub fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Batch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let data = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        Batch {
            table: None,
            data,
            row_kinds: vec![crate::RowKind::Insert, crate::RowKind::Delete, crate::RowKind::Insert],
        }
    }

    #[test]
    fn a_row_becomes_json_with_its_nulls_and_kind() {
        let l = letter("db.t", &batch(), 1, Refusal::Route { target: "db.u".into() }, "no such table");
        assert_eq!(serde_json::Value::Object(l.row).to_string(), r#"{"id":2,"name":null}"#);
        assert_eq!(l.columns, "id BIGINT NOT NULL, name STRING");
        assert_eq!(l.kind, "-D");
    }

    #[test]
    fn slices_keep_their_row_kinds() {
        let s = slice(&batch(), 1, 2);
        assert_eq!(s.num_rows(), 2);
        assert_eq!(s.row_kinds, vec![crate::RowKind::Delete, crate::RowKind::Insert]);
    }

    #[test]
    fn letters_become_a_batch_numbered_within_their_checkpoint() {
        let b = batch();
        let letters = vec![
            letter("db.t", &b, 0, Refusal::Plugin { plugin: "p".into() }, "bad"),
            letter("db.t", &b, 2, Refusal::Doris { label: "l1".into() }, "too long"),
        ];
        let stamp = Stamp { pipeline: "pl", checkpoint: 7, worker: 1, time: 0 };
        let out = to_batch(&letters, &stamp).unwrap();
        assert_eq!(out.num_rows(), 2);
        let seq = out.data.column(4).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(seq.values(), &[0, 1]);
        let by = out.data.column(8).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((by.value(0), by.value(1)), ("p", "l1"));
    }
}
