//! Tables with Doris key-model semantics: tablets (= buckets), merge-on-write, aggregation,
//! sequence columns, partial updates, commit TSOs and per-row change records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int8Builder,
    Int16Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::types::{DorisType, Value};

/// Name of the hidden delete-sign column of UNIQUE tables.
pub const DELETE_SIGN: &str = "__DORIS_DELETE_SIGN__";
/// Name of the hidden version column of UNIQUE tables.
pub const VERSION_COL: &str = "__DORIS_VERSION_COL__";
/// Name of the hidden sequence column (tables with `function_column.sequence_type`).
pub const SEQUENCE_COL: &str = "__DORIS_SEQUENCE_COL__";
/// Name of the hidden commit-TSO column of changelog tables.
pub const COMMIT_TSO_COL: &str = "__DORIS_COMMIT_TSO_COL__";
/// Internal row-id column used to implement `DELETE FROM` on DUPLICATE tables.
pub const ROWID_COL: &str = "__dl_rowid";

/// The key model of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeysType {
    /// DUPLICATE KEY: every row kept.
    Duplicate,
    /// UNIQUE KEY (merge-on-write): one row per key.
    Unique,
    /// AGGREGATE KEY: value columns merged by their aggregate.
    Aggregate,
}

impl KeysType {
    /// `DUPLICATE` / `UNIQUE` / `AGGREGATE`.
    pub fn sql(&self) -> &'static str {
        match self {
            KeysType::Duplicate => "DUPLICATE",
            KeysType::Unique => "UNIQUE",
            KeysType::Aggregate => "AGGREGATE",
        }
    }
    /// `DUP_KEYS` / `UNIQUE_KEYS` / `AGG_KEYS` (the `_schema` spelling).
    pub fn api_name(&self) -> &'static str {
        match self {
            KeysType::Duplicate => "DUP_KEYS",
            KeysType::Unique => "UNIQUE_KEYS",
            KeysType::Aggregate => "AGG_KEYS",
        }
    }
}

/// Aggregate of a value column in an AGGREGATE table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggType {
    /// SUM
    Sum,
    /// MAX
    Max,
    /// MIN
    Min,
    /// REPLACE
    Replace,
    /// REPLACE_IF_NOT_NULL
    ReplaceIfNotNull,
    /// HLL_UNION (merged as REPLACE here).
    HllUnion,
    /// BITMAP_UNION (merged as REPLACE here).
    BitmapUnion,
    /// QUANTILE_UNION (merged as REPLACE here).
    QuantileUnion,
    /// GENERIC (merged as REPLACE here).
    Generic,
}

impl AggType {
    /// Parses an aggregate keyword.
    pub fn parse(s: &str) -> Option<AggType> {
        Some(match s.to_ascii_uppercase().as_str() {
            "SUM" => AggType::Sum,
            "MAX" => AggType::Max,
            "MIN" => AggType::Min,
            "REPLACE" => AggType::Replace,
            "REPLACE_IF_NOT_NULL" => AggType::ReplaceIfNotNull,
            "HLL_UNION" => AggType::HllUnion,
            "BITMAP_UNION" => AggType::BitmapUnion,
            "QUANTILE_UNION" => AggType::QuantileUnion,
            "GENERIC" => AggType::Generic,
            _ => return None,
        })
    }
    /// The SQL keyword.
    pub fn sql(&self) -> &'static str {
        match self {
            AggType::Sum => "SUM",
            AggType::Max => "MAX",
            AggType::Min => "MIN",
            AggType::Replace => "REPLACE",
            AggType::ReplaceIfNotNull => "REPLACE_IF_NOT_NULL",
            AggType::HllUnion => "HLL_UNION",
            AggType::BitmapUnion => "BITMAP_UNION",
            AggType::QuantileUnion => "QUANTILE_UNION",
            AggType::Generic => "GENERIC",
        }
    }
}

/// Column default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DefaultValue {
    /// `DEFAULT NULL`
    Null,
    /// `DEFAULT "x"` (text, converted on use)
    Literal(String),
    /// `DEFAULT CURRENT_TIMESTAMP[(p)]`
    CurrentTimestamp(Option<u8>),
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// Column name as written.
    pub name: String,
    /// Doris type.
    pub ty: DorisType,
    /// NULL allowed.
    pub nullable: bool,
    /// Default, if any.
    pub default: Option<DefaultValue>,
    /// COMMENT.
    pub comment: String,
    /// Aggregate (AGGREGATE tables' value columns).
    pub agg: Option<AggType>,
    /// AUTO_INCREMENT.
    pub auto_increment: bool,
}

impl Column {
    /// The value a row gets when this column is not supplied; `Err` when NOT NULL without default.
    pub fn default_value(&self) -> Result<Value, String> {
        if self.auto_increment {
            // Filled with the next id when the write is applied.
            return Ok(Value::Null);
        }
        match &self.default {
            Some(DefaultValue::Literal(s)) => self.ty.parse_text(s),
            Some(DefaultValue::CurrentTimestamp(_)) => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
                Ok(match self.ty {
                    DorisType::Date => Value::Date((now / 86_400_000_000) as i32),
                    DorisType::DateTime(_) => Value::DateTime(now),
                    _ => Value::Null,
                })
            }
            Some(DefaultValue::Null) | None if self.nullable => Ok(Value::Null),
            _ => Err(format!("the column `{}` is not nullable and has no default value", self.name)),
        }
    }
}

/// Bucket count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Buckets {
    /// `BUCKETS n`
    Fixed(u32),
    /// `BUCKETS AUTO`
    Auto,
}

impl Buckets {
    /// Number of tablets created.
    pub fn count(&self) -> usize {
        match self {
            Buckets::Fixed(n) => (*n).max(1) as usize,
            Buckets::Auto => 1,
        }
    }
}

/// `DISTRIBUTED BY …`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Distribution {
    /// `HASH(cols) BUCKETS n|AUTO`
    Hash(Vec<String>, Buckets),
    /// `RANDOM BUCKETS n|AUTO`
    Random(Buckets),
}

/// Everything `CREATE TABLE` defines.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableSchema {
    /// Visible columns, keys first.
    pub columns: Vec<Column>,
    /// Key model.
    pub keys_type: KeysType,
    /// Number of leading key columns.
    pub key_count: usize,
    /// Distribution.
    pub distribution: Distribution,
    /// Table COMMENT.
    pub comment: String,
    /// `PARTITION BY …` clause as written (accepted, not used for placement).
    pub partition_clause: Option<String>,
    /// PROPERTIES in the order given.
    pub properties: Vec<(String, String)>,
}

impl TableSchema {
    /// Property lookup.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
    }

    /// Index of a visible column (case-insensitive as in Doris).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// Index of the column named by `function_column.sequence_col`, if any.
    pub fn sequence_column(&self) -> Option<usize> {
        self.property("function_column.sequence_col").and_then(|c| self.column_index(c))
    }

    /// Type of the hidden `__DORIS_SEQUENCE_COL__` (`function_column.sequence_type`).
    pub fn sequence_type(&self) -> Option<DorisType> {
        let t = self.property("function_column.sequence_type")?;
        DorisType::from_parts(t, &[], t).ok()
    }

    /// Does the table carry a sequence (column or hidden)?
    pub fn has_sequence(&self) -> bool {
        self.keys_type == KeysType::Unique && (self.sequence_column().is_some() || self.sequence_type().is_some())
    }

    /// Row binlog / changelog enabled (`changelog.enable` or `binlog.enable` + `binlog.format=ROW`).
    pub fn changelog_enabled(&self) -> bool {
        self.property("changelog.enable") == Some("true")
            || (self.property("binlog.enable") == Some("true") && self.property("binlog.format") == Some("ROW"))
    }

    /// Before images kept in change records.
    pub fn changelog_historical(&self) -> bool {
        self.property("changelog.need_historical_value") == Some("true")
            || self.property("binlog.need_historical_value") == Some("true")
    }

    /// Hidden columns of this table in display order: (name, type).
    pub fn hidden_columns(&self) -> Vec<(&'static str, DorisType)> {
        let mut v = Vec::new();
        if self.keys_type == KeysType::Unique {
            v.push((DELETE_SIGN, DorisType::TinyInt));
            v.push((VERSION_COL, DorisType::BigInt));
            if let Some(t) = self.sequence_type() {
                v.push((SEQUENCE_COL, t));
            } else if let Some(i) = self.sequence_column() {
                v.push((SEQUENCE_COL, self.columns[i].ty.clone()));
            }
        }
        if self.changelog_enabled() {
            v.push((COMMIT_TSO_COL, DorisType::BigInt));
        }
        v
    }

    /// The distribution column indexes (empty for RANDOM).
    pub fn distribution_indexes(&self) -> Vec<usize> {
        match &self.distribution {
            Distribution::Hash(cols, _) => cols.iter().filter_map(|c| self.column_index(c)).collect(),
            Distribution::Random(_) => Vec::new(),
        }
    }
}

/// A stored row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRow {
    /// Visible column values.
    pub values: Vec<Value>,
    /// Sequence value (UNIQUE tables with a sequence), else Null.
    pub seq: Value,
    /// Version (commit number) of the last write.
    pub version: i64,
    /// TSO of the last write.
    pub tso: i64,
    /// Tombstone: deleted key kept only to honour the sequence of a delete.
    pub deleted: bool,
}

/// The rows of one tablet.
#[derive(Debug, Clone, Default)]
pub struct Tablet {
    /// Stable tablet id.
    pub id: i64,
    /// DUPLICATE tables: rows in arrival order, kept columnar.
    pub chunks: Vec<Chunk>,
    /// UNIQUE and AGGREGATE tables: rows by key.
    pub keyed: BTreeMap<Vec<Value>, StoredRow>,
}

/// Appended rows of a DUPLICATE tablet as one Arrow batch of the visible columns (the batch a
/// scan serves, so a scan copies nothing), with the commit TSO of each run of rows.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The rows.
    pub batch: RecordBatch,
    /// `(first row, commit TSO)` of each commit in the chunk, in row order.
    pub tsos: Vec<(usize, i64)>,
}

impl Chunk {
    fn tso_column(&self) -> Vec<Value> {
        let n = self.batch.num_rows();
        let mut out = Vec::with_capacity(n);
        for (i, &(start, tso)) in self.tsos.iter().enumerate() {
            let end = self.tsos.get(i + 1).map(|r| r.0).unwrap_or(n);
            out.extend((start..end).map(|_| Value::Int(tso)));
        }
        out
    }

    fn merge(chunks: &[Chunk]) -> Result<Chunk, String> {
        let Some(first) = chunks.first() else {
            return Err("no chunks to merge".into());
        };
        let batch = arrow::compute::concat_batches(&first.batch.schema(), chunks.iter().map(|c| &c.batch))
            .map_err(|e| e.to_string())?;
        let mut tsos = Vec::new();
        let mut offset = 0;
        for c in chunks {
            tsos.extend(c.tsos.iter().map(|&(start, tso)| (start + offset, tso)));
            offset += c.batch.num_rows();
        }
        Ok(Chunk { batch, tsos })
    }
}

impl Tablet {
    /// Live rows of a UNIQUE or AGGREGATE tablet (tombstones skipped).
    pub fn live_rows(&self) -> impl Iterator<Item = &StoredRow> + '_ {
        self.keyed.values().filter(|r| !r.deleted)
    }

    /// Number of live rows.
    pub fn row_count(&self) -> usize {
        self.chunks.iter().map(|c| c.batch.num_rows()).sum::<usize>() + self.live_rows().count()
    }

    /// Appends rows (visible columns, in arrival order) committed at `tso`. Chunks are merged
    /// while the newest is at least half the size of the one before, so a tablet holds a few
    /// chunks however many small commits it took.
    fn append(&mut self, batch: RecordBatch, tso: i64) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.chunks.push(Chunk { batch, tsos: vec![(0, tso)] });
        while let [.., a, b] = self.chunks.as_slice() {
            if b.batch.num_rows() * 2 < a.batch.num_rows() {
                break;
            }
            let at = self.chunks.len() - 2;
            let merged = Chunk::merge(&self.chunks[at..])?;
            self.chunks.truncate(at);
            self.chunks.push(merged);
        }
        Ok(())
    }

    /// Merges the chunks into one, so the tablet's rows are one batch.
    fn compact(&mut self) -> Result<(), String> {
        if self.chunks.len() > 1 {
            let merged = Chunk::merge(&self.chunks)?;
            self.chunks = vec![merged];
        }
        Ok(())
    }

    /// Removes the appended rows whose position (in arrival order) is marked.
    fn remove_rows(&mut self, doomed: &[bool]) -> Result<(), String> {
        self.compact()?;
        let Some(chunk) = self.chunks.pop() else {
            return Ok(());
        };
        let keep = arrow::array::BooleanArray::from_iter(
            (0..chunk.batch.num_rows()).map(|i| Some(!doomed.get(i).copied().unwrap_or(false))),
        );
        let batch = arrow::compute::filter_record_batch(&chunk.batch, &keep).map_err(|e| e.to_string())?;
        let mut tsos: Vec<(usize, i64)> = Vec::new();
        let mut kept = 0;
        for (i, &(start, tso)) in chunk.tsos.iter().enumerate() {
            let end = chunk.tsos.get(i + 1).map(|r| r.0).unwrap_or(chunk.batch.num_rows());
            let n = (start..end).filter(|&r| !doomed.get(r).copied().unwrap_or(false)).count();
            if n > 0 {
                tsos.push((kept, tso));
                kept += n;
            }
        }
        if batch.num_rows() > 0 {
            self.chunks.push(Chunk { batch, tsos });
        }
        Ok(())
    }

    /// The appended rows as values, in arrival order.
    fn appended_values(&self) -> Vec<Vec<Value>> {
        let mut out = Vec::with_capacity(self.row_count());
        for c in &self.chunks {
            let cols = c.batch.columns();
            for r in 0..c.batch.num_rows() {
                out.push(cols.iter().map(|a| value_at(a, r)).collect());
            }
        }
        out
    }
}

/// One row operation of a load or INSERT, in table column order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowOp {
    /// Values for every visible column (unsupplied partial-update columns hold defaults).
    pub values: Vec<Value>,
    /// Delete sign.
    pub delete: bool,
    /// Sequence value from the load (hidden sequence or sequence column).
    pub seq: Value,
}

/// A change to one table, applied atomically at commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TableWrite {
    /// Upserts / appends / deletes by key.
    Rows {
        /// The operations in load order.
        ops: Vec<RowOp>,
        /// Partial update: which columns were supplied (None = all).
        partial: Option<Vec<bool>>,
    },
    /// `DELETE FROM` a DUPLICATE table: row ids from a snapshot of `data_version`.
    DeleteRowIds(Vec<u64>),
    /// `INSERT OVERWRITE`: every row is replaced by these (appends / upserts in load order).
    Overwrite(Vec<RowOp>),
}

/// Kind of a change record (`__DORIS_BINLOG_OP__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum ChangeOp {
    /// 0: a new row.
    Append = 0,
    /// 1: a removed row.
    Delete = 1,
    /// 2: the row before an update.
    UpdateBefore = 2,
    /// 3: the row after an update.
    UpdateAfter = 3,
}

/// One per-row change record (changelog tables).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// Commit TSO.
    pub tso: i64,
    /// Order within the commit.
    pub lsn: i64,
    /// Operation.
    pub op: ChangeOp,
    /// Row image (after image; the deleted row for deletes).
    pub after: Vec<Value>,
    /// Before image for updates when `need_historical_value` is set.
    pub before: Option<Vec<Value>>,
    /// Commit wall time (ms), for TTL.
    pub commit_ms: i64,
}

/// A table: schema, tablets, version and change records.
#[derive(Debug, Clone)]
pub struct Table {
    /// Stable table id.
    pub id: i64,
    /// Table name.
    pub name: String,
    /// Schema.
    pub schema: TableSchema,
    /// Tablets (one per bucket).
    pub tablets: Vec<Tablet>,
    /// Visible version: number of commits applied.
    pub version: i64,
    /// Bumped by every change (data or schema); keys the snapshot cache.
    pub data_version: u64,
    /// Change records (changelog tables only).
    pub changelog: Vec<ChangeRecord>,
    /// Time of the last commit (ms since epoch).
    pub last_commit_ms: i64,
    /// When the table was created (wall clock, ms since epoch).
    pub created_ms: i64,
    random_cursor: usize,
    tablet_snapshots: Option<SnapshotCache>,
}

fn hidden_value(name: &str, row: &StoredRow) -> Value {
    match name {
        DELETE_SIGN => Value::Int(0),
        VERSION_COL => Value::Int(row.version),
        SEQUENCE_COL => row.seq.clone(),
        COMMIT_TSO_COL => Value::Int(row.tso),
        _ => Value::Null,
    }
}

impl Table {
    /// A new empty table whose tablets take ids from `next_id`.
    pub fn new(id: i64, name: String, schema: TableSchema, next_id: &mut i64) -> Table {
        let n = match &schema.distribution {
            Distribution::Hash(_, b) | Distribution::Random(b) => b.count(),
        };
        let tablets = (0..n)
            .map(|_| {
                *next_id += 1;
                Tablet { id: *next_id, ..Default::default() }
            })
            .collect();
        Table {
            id,
            name,
            schema,
            tablets,
            version: 1,
            data_version: 0,
            changelog: Vec::new(),
            last_commit_ms: 0,
            created_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            random_cursor: 0,
            tablet_snapshots: None,
        }
    }

    /// Number of live rows.
    pub fn row_count(&self) -> usize {
        self.tablets.iter().map(Tablet::row_count).sum()
    }

    /// Drops all rows (TRUNCATE); tablet ids are kept.
    pub fn truncate(&mut self) {
        for t in &mut self.tablets {
            t.chunks.clear();
            t.keyed.clear();
        }
        self.data_version += 1;
    }

    /// Marks a schema change; existing rows are reshaped by the caller.
    pub fn touch(&mut self) {
        self.data_version += 1;
    }

    /// Rewrites every stored row with `f` (ALTER TABLE ADD/DROP/MODIFY COLUMN), after the schema
    /// has taken its new shape.
    pub fn map_rows(&mut self, mut f: impl FnMut(&mut Vec<Value>)) -> Result<(), String> {
        self.data_version += 1;
        let types: Vec<DorisType> = self.schema.columns.iter().map(|c| c.ty.clone()).collect();
        let schema = self.arrow_schema(false, false);
        for t in &mut self.tablets {
            for r in t.keyed.values_mut() {
                f(&mut r.values);
            }
            if t.chunks.is_empty() {
                continue;
            }
            t.compact()?;
            let mut rows = t.appended_values();
            for r in rows.iter_mut() {
                f(r);
            }
            let tsos = std::mem::take(&mut t.chunks[0].tsos);
            t.chunks = vec![Chunk { batch: batch_of(&schema, &types, &rows)?, tsos }];
        }
        Ok(())
    }

    fn bucket_of(&mut self, values: &[Value], dist: &[usize]) -> usize {
        let n = self.tablets.len();
        if n <= 1 {
            return 0;
        }
        if dist.is_empty() {
            self.random_cursor = (self.random_cursor + 1) % n;
            return self.random_cursor;
        }
        let mut h: u64 = 0xcbf29ce484222325;
        for &i in dist {
            values[i].hash_into(&mut h);
        }
        (h % n as u64) as usize
    }

    /// Applies one committed write at `tso` (version = self.version + 1).
    pub fn apply(&mut self, write: TableWrite, tso: i64, commit_ms: i64) -> Result<(), String> {
        if let TableWrite::Overwrite(ops) = write {
            self.truncate();
            return self.apply(TableWrite::Rows { ops, partial: None }, tso, commit_ms);
        }
        self.version += 1;
        self.data_version += 1;
        self.last_commit_ms = commit_ms;
        let version = self.version;
        let changelog = self.schema.changelog_enabled();
        let historical = self.schema.changelog_historical();
        let mut lsn = 0i64;
        let mut records: Vec<ChangeRecord> = Vec::new();
        let mut record = |op: ChangeOp, after: &[Value], before: Option<&[Value]>| {
            if changelog {
                records.push(ChangeRecord {
                    tso,
                    lsn,
                    op,
                    after: after.to_vec(),
                    before: if historical { before.map(|b| b.to_vec()) } else { None },
                    commit_ms,
                });
                lsn += 1;
            }
        };
        match write {
            TableWrite::Overwrite(_) => unreachable!("replaced by Rows above"),
            TableWrite::DeleteRowIds(ids) => {
                let mut by_tablet: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
                for id in ids {
                    by_tablet.entry((id >> 40) as usize).or_default().push((id & ((1 << 40) - 1)) as usize);
                }
                for (t, idx) in by_tablet {
                    let Some(tablet) = self.tablets.get_mut(t) else {
                        continue;
                    };
                    let mut doomed = vec![false; tablet.row_count()];
                    for i in idx {
                        if let Some(d) = doomed.get_mut(i) {
                            *d = true;
                        }
                    }
                    tablet.remove_rows(&doomed)?;
                }
            }
            TableWrite::Rows { mut ops, partial } => {
                // AUTO_INCREMENT columns left NULL get the next id (deterministic, so a
                // replayed log assigns the same ids).
                let auto_cols: Vec<usize> =
                    self.schema.columns.iter().enumerate().filter(|(_, c)| c.auto_increment).map(|(i, _)| i).collect();
                for &ci in &auto_cols {
                    let keyed =
                        self.tablets.iter().flat_map(|t| t.keyed.values()).filter_map(|r| match r.values.get(ci) {
                            Some(Value::Int(i)) => Some(*i),
                            _ => None,
                        });
                    let appended = self.tablets.iter().flat_map(|t| &t.chunks).filter_map(|c| {
                        let col = arrow::compute::cast(c.batch.column(ci), &DataType::Int64).ok()?;
                        arrow::compute::max(col.as_any().downcast_ref::<arrow::array::Int64Array>()?)
                    });
                    let mut next = keyed.chain(appended).max().unwrap_or(0) + 1;
                    for op in ops.iter_mut() {
                        if op.values[ci].is_null() && !op.delete {
                            op.values[ci] = Value::Int(next);
                            next += 1;
                        }
                    }
                }
                let dist = self.schema.distribution_indexes();
                let key_count = self.schema.key_count;
                let keys_type = self.schema.keys_type;
                let has_seq = self.schema.has_sequence();
                let seq_col = self.schema.sequence_column();
                let aggs: Vec<Option<AggType>> = self.schema.columns.iter().map(|c| c.agg).collect();
                if keys_type == KeysType::Duplicate {
                    let mut per_tablet: Vec<Vec<Vec<Value>>> = vec![Vec::new(); self.tablets.len()];
                    for op in ops {
                        record(ChangeOp::Append, &op.values, None);
                        let b = self.bucket_of(&op.values, &dist);
                        per_tablet[b].push(op.values);
                    }
                    let types: Vec<DorisType> = self.schema.columns.iter().map(|c| c.ty.clone()).collect();
                    let schema = self.arrow_schema(false, false);
                    for (tablet, rows) in self.tablets.iter_mut().zip(per_tablet) {
                        tablet.append(batch_of(&schema, &types, &rows)?, tso)?;
                    }
                    ops = Vec::new();
                }
                for op in ops {
                    let b = self.bucket_of(&op.values, &dist);
                    let tablet = &mut self.tablets[b];
                    match keys_type {
                        KeysType::Duplicate => unreachable!("appended above"),
                        KeysType::Unique => {
                            let RowOp { mut values, delete, seq: op_seq } = op;
                            let key: Vec<Value> = values[..key_count].to_vec();
                            match tablet.keyed.entry(key) {
                                std::collections::btree_map::Entry::Vacant(slot) => {
                                    let seq = match seq_col {
                                        Some(i) if op_seq.is_null() => values[i].clone(),
                                        _ => op_seq,
                                    };
                                    if delete {
                                        if has_seq {
                                            slot.insert(StoredRow { values, seq, version, tso, deleted: true });
                                        }
                                        continue;
                                    }
                                    record(ChangeOp::Append, &values, None);
                                    slot.insert(StoredRow { values, seq, version, tso, deleted: false });
                                }
                                std::collections::btree_map::Entry::Occupied(mut slot) => {
                                    let old = slot.get();
                                    let live = !old.deleted;
                                    // Partial update: unsupplied columns (the sequence column too)
                                    // keep their stored values.
                                    if let (Some(mask), true) = (&partial, live) {
                                        for (i, supplied) in mask.iter().enumerate() {
                                            if !supplied {
                                                values[i] = old.values[i].clone();
                                            }
                                        }
                                    }
                                    let seq = match seq_col {
                                        Some(i) if op_seq.is_null() => values[i].clone(),
                                        _ => op_seq,
                                    };
                                    if has_seq && seq < old.seq {
                                        continue;
                                    }
                                    let before = if changelog && live { Some(old.values.clone()) } else { None };
                                    if delete {
                                        if let Some(b) = &before {
                                            record(ChangeOp::Delete, b, None);
                                        }
                                        if has_seq {
                                            *slot.get_mut() = StoredRow { values, seq, version, tso, deleted: true };
                                        } else {
                                            slot.remove();
                                        }
                                        continue;
                                    }
                                    if changelog {
                                        match &before {
                                            Some(b) => {
                                                record(ChangeOp::UpdateBefore, b, None);
                                                record(ChangeOp::UpdateAfter, &values, Some(b));
                                            }
                                            None => record(ChangeOp::Append, &values, None),
                                        }
                                    }
                                    *slot.get_mut() = StoredRow { values, seq, version, tso, deleted: false };
                                }
                            }
                        }
                        KeysType::Aggregate => {
                            let key: Vec<Value> = op.values[..key_count].to_vec();
                            if op.delete {
                                tablet.keyed.remove(&key);
                                continue;
                            }
                            match tablet.keyed.get_mut(&key) {
                                Some(old) => {
                                    for (i, agg) in aggs.iter().enumerate().skip(key_count) {
                                        let new = &op.values[i];
                                        let cur = &old.values[i];
                                        let merged = match agg.unwrap_or(AggType::Replace) {
                                            AggType::Sum => cur.add(new).unwrap_or(new.clone()),
                                            AggType::Max => {
                                                if cur.is_null() || (!new.is_null() && new > cur) {
                                                    new.clone()
                                                } else {
                                                    cur.clone()
                                                }
                                            }
                                            AggType::Min => {
                                                if cur.is_null() || (!new.is_null() && new < cur) {
                                                    new.clone()
                                                } else {
                                                    cur.clone()
                                                }
                                            }
                                            AggType::ReplaceIfNotNull => {
                                                if new.is_null() {
                                                    cur.clone()
                                                } else {
                                                    new.clone()
                                                }
                                            }
                                            _ => new.clone(),
                                        };
                                        old.values[i] = merged;
                                    }
                                    old.version = version;
                                    old.tso = tso;
                                }
                                None => {
                                    tablet.keyed.insert(
                                        key,
                                        StoredRow { values: op.values, seq: Value::Null, version, tso, deleted: false },
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        self.changelog.extend(records);
        Ok(())
    }

    /// Arrow schema of a snapshot.
    pub fn arrow_schema(&self, with_hidden: bool, with_rowid: bool) -> SchemaRef {
        let mut fields: Vec<Field> = self.schema.columns.iter().map(|c| c.ty.arrow_field(&c.name)).collect();
        if with_hidden {
            for (name, ty) in self.schema.hidden_columns() {
                fields.push(Field::new(name, ty.arrow_type(), true));
            }
        }
        if with_rowid {
            fields.push(Field::new(ROWID_COL, DataType::UInt64, false));
        }
        Arc::new(Schema::new(fields))
    }

    /// The committed rows as one RecordBatch: the tablets' batches one after another, with a
    /// row id (`tablet << 40 | row`) column when asked.
    pub fn snapshot(&mut self, with_hidden: bool, with_rowid: bool) -> Result<RecordBatch, String> {
        let tablets = self.tablet_snapshots(with_hidden)?;
        let schema = self.arrow_schema(with_hidden, with_rowid);
        let plain = self.arrow_schema(with_hidden, false);
        let all = arrow::compute::concat_batches(&plain, &tablets).map_err(|e| e.to_string())?;
        if !with_rowid {
            return Ok(all);
        }
        let mut ids = UInt64Builder::with_capacity(all.num_rows());
        for (ti, b) in tablets.iter().enumerate() {
            for ri in 0..b.num_rows() {
                ids.append_value(((ti as u64) << 40) | ri as u64);
            }
        }
        let mut columns = all.columns().to_vec();
        columns.push(Arc::new(ids.finish()));
        RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
    }
}

impl Table {
    /// The committed rows of each tablet as one RecordBatch, in tablet order: what full scans
    /// and `TABLET(...)` reads are served from. A DUPLICATE tablet's batch is its stored chunk
    /// itself.
    pub fn tablet_snapshots(&mut self, with_hidden: bool) -> Result<Vec<RecordBatch>, String> {
        self.tablet_columns(with_hidden, None)
    }

    /// The committed rows of each tablet, in tablet order, with only `columns` of the
    /// snapshot's schema (indexes into [`Table::arrow_schema`]; all of them when `None`), as a
    /// columnar store reads only the columns a query names. A column is converted once per data
    /// version, when it is first asked for.
    pub fn tablet_columns(&mut self, with_hidden: bool, columns: Option<&[usize]>) -> Result<Vec<RecordBatch>, String> {
        let schema = self.arrow_schema(with_hidden, false);
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let wanted = columns.unwrap_or(&all);
        if let Some(&bad) = wanted.iter().find(|&&c| c >= all.len()) {
            return Err(format!("column {bad} of a table of {} columns", all.len()));
        }
        let fresh = self
            .tablet_snapshots
            .as_ref()
            .is_some_and(|c| c.data_version == self.data_version && c.hidden == with_hidden);
        if !fresh {
            for t in &mut self.tablets {
                t.compact()?;
            }
            let rows = self.tablets.iter().map(|t| t.row_count()).collect();
            let columns = vec![vec![None; all.len()]; self.tablets.len()];
            self.tablet_snapshots =
                Some(SnapshotCache { data_version: self.data_version, hidden: with_hidden, rows, columns });
        }
        let cache = self.tablet_snapshots.as_mut().expect("set above");
        let missing: Vec<usize> =
            wanted.iter().copied().filter(|&c| cache.columns.iter().any(|t| t[c].is_none())).collect();
        if !missing.is_empty() {
            let hidden = if with_hidden { self.schema.hidden_columns() } else { Vec::new() };
            let visible = &self.schema.columns;
            let build = |tablet: &Tablet| -> Result<Vec<ArrayRef>, String> {
                let mut arrays = Vec::with_capacity(missing.len());
                if let Some(chunk) = tablet.chunks.first() {
                    let tsos =
                        if missing.iter().any(|&c| c >= visible.len()) { chunk.tso_column() } else { Vec::new() };
                    for &c in &missing {
                        arrays.push(match c.checked_sub(visible.len()).map(|h| &hidden[h]) {
                            None => chunk.batch.column(c).clone(),
                            Some((name, ty)) => {
                                let hv: Vec<Value> = match *name {
                                    COMMIT_TSO_COL => tsos.clone(),
                                    _ => vec![Value::Null; tsos.len()],
                                };
                                build_array(ty, hv.iter())?
                            }
                        });
                    }
                } else {
                    let rows: Vec<&StoredRow> = tablet.live_rows().collect();
                    for &c in &missing {
                        arrays.push(match c.checked_sub(visible.len()).map(|h| &hidden[h]) {
                            None => build_array(&visible[c].ty, rows.iter().map(|r| &r.values[c]))?,
                            Some((name, ty)) => {
                                let hv: Vec<Value> = rows.iter().map(|r| hidden_value(name, r)).collect();
                                build_array(ty, hv.iter())?
                            }
                        });
                    }
                }
                Ok(arrays)
            };
            // Large keyed tables are converted on all cores, a share of the tablets each.
            let rows: usize = self.tablets.iter().map(|t| t.keyed.len()).sum();
            let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(self.tablets.len());
            let built: Vec<Vec<ArrayRef>> = if threads > 1 && rows >= 100_000 {
                let per = self.tablets.len().div_ceil(threads);
                let parts: Vec<Result<Vec<Vec<ArrayRef>>, String>> = std::thread::scope(|s| {
                    let handles: Vec<_> = self
                        .tablets
                        .chunks(per)
                        .map(|chunk| s.spawn(|| chunk.iter().map(build).collect::<Result<Vec<_>, _>>()))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|_| Err("snapshot conversion panicked".to_string())))
                        .collect()
                });
                let mut out = Vec::with_capacity(self.tablets.len());
                for p in parts {
                    out.extend(p?);
                }
                out
            } else {
                self.tablets.iter().map(build).collect::<Result<_, _>>()?
            };
            for (cached, arrays) in cache.columns.iter_mut().zip(built) {
                for (&c, array) in missing.iter().zip(arrays) {
                    cached[c] = Some(array);
                }
            }
        }
        let projected = Arc::new(schema.project(wanted).map_err(|e| e.to_string())?);
        cache
            .columns
            .iter()
            .zip(&cache.rows)
            .map(|(cached, &rows)| {
                let arrays: Vec<ArrayRef> =
                    wanted.iter().map(|&c| cached[c].clone().expect("converted above")).collect();
                let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
                RecordBatch::try_new_with_options(projected.clone(), arrays, &options).map_err(|e| e.to_string())
            })
            .collect()
    }
}

/// The columns of a table's tablets converted for scans at one data version (see
/// [`Table::tablet_columns`]).
#[derive(Debug, Clone)]
struct SnapshotCache {
    data_version: u64,
    hidden: bool,
    /// Rows of each tablet.
    rows: Vec<usize>,
    /// Per tablet, each column of the snapshot's schema once converted.
    columns: Vec<Vec<Option<ArrayRef>>>,
}

/// A batch of `schema` (visible columns of `types`) from rows of values.
pub(crate) fn batch_of(schema: &SchemaRef, types: &[DorisType], rows: &[Vec<Value>]) -> Result<RecordBatch, String> {
    let arrays = types
        .iter()
        .enumerate()
        .map(|(ci, ty)| build_array(ty, rows.iter().map(|r| &r[ci])))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        arrays,
        &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
    .map_err(|e| e.to_string())
}

/// The value at `row` of an array built by [`build_array`].
pub fn value_at(array: &ArrayRef, row: usize) -> Value {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes as t;
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8 => Value::Int(array.as_primitive::<t::Int8Type>().value(row).into()),
        DataType::Int16 => Value::Int(array.as_primitive::<t::Int16Type>().value(row).into()),
        DataType::Int32 => Value::Int(array.as_primitive::<t::Int32Type>().value(row).into()),
        DataType::Int64 => Value::Int(array.as_primitive::<t::Int64Type>().value(row)),
        DataType::Float32 => Value::Float(array.as_primitive::<t::Float32Type>().value(row).into()),
        DataType::Float64 => Value::Float(array.as_primitive::<t::Float64Type>().value(row)),
        DataType::Decimal128(_, _) => Value::Decimal(array.as_primitive::<t::Decimal128Type>().value(row).into()),
        DataType::Date32 => Value::Date(array.as_primitive::<t::Date32Type>().value(row)),
        DataType::Timestamp(_, _) => Value::DateTime(array.as_primitive::<t::TimestampMicrosecondType>().value(row)),
        DataType::Utf8 => Value::Str(array.as_string::<i32>().value(row).into()),
        _ => Value::Null,
    }
}

/// Builds one Arrow array of `ty` from values.
pub fn build_array<'a>(ty: &DorisType, values: impl ExactSizeIterator<Item = &'a Value>) -> Result<ArrayRef, String> {
    let n = values.len();
    macro_rules! ints {
        ($b:ty, $t:ty) => {{
            let mut b = <$b>::with_capacity(n);
            for v in values {
                match v {
                    Value::Int(i) => b.append_value(*i as $t),
                    Value::Bool(x) => b.append_value(*x as $t),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    Ok(match ty.arrow_type() {
        DataType::Boolean => {
            let mut b = BooleanBuilder::with_capacity(n);
            for v in values {
                match v {
                    Value::Bool(x) => b.append_value(*x),
                    Value::Int(i) => b.append_value(*i != 0),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int8 => ints!(Int8Builder, i8),
        DataType::Int16 => ints!(Int16Builder, i16),
        DataType::Int32 => ints!(Int32Builder, i32),
        DataType::Int64 => ints!(Int64Builder, i64),
        DataType::Float32 => {
            let mut b = Float32Builder::with_capacity(n);
            for v in values {
                match v {
                    Value::Float(f) => b.append_value(*f as f32),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(n);
            for v in values {
                match v {
                    Value::Float(f) => b.append_value(*f),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Decimal128(p, s) => {
            let mut b = Decimal128Builder::with_capacity(n);
            for v in values {
                match v {
                    Value::Decimal(d) | Value::Large(d) => b.append_value(d.get()),
                    Value::Int(i) => b.append_value(*i as i128),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish().with_precision_and_scale(p, s).map_err(|e| e.to_string())?)
        }
        DataType::Date32 => {
            let mut b = Date32Builder::with_capacity(n);
            for v in values {
                match v {
                    Value::Date(d) => b.append_value(*d),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(_, _) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(n);
            for v in values {
                match v {
                    Value::DateTime(d) => b.append_value(*d),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        _ => {
            let mut b = StringBuilder::with_capacity(n, n * 16);
            for v in values {
                match v {
                    Value::Str(s) => b.append_value(s),
                    Value::Null => b.append_null(),
                    other => match ty.render(other) {
                        Some(s) => b.append_value(s),
                        None => b.append_null(),
                    },
                }
            }
            Arc::new(b.finish())
        }
    })
}

/// The timestamp oracle: `physical_ms << 18 | logical`, strictly increasing.
#[derive(Debug, Default, Clone)]
pub struct Tso {
    last: i64,
}

/// Bits of the logical counter in a TSO.
pub const TSO_LOGICAL_BITS: u32 = 18;

impl Tso {
    /// Current wall clock in ms.
    pub fn now_ms() -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }

    /// Allocates the next TSO at wall time `now_ms`.
    pub fn allocate(&mut self, now_ms: i64) -> i64 {
        let candidate = now_ms << TSO_LOGICAL_BITS;
        self.last = if candidate > self.last { candidate } else { self.last + 1 };
        self.last
    }

    /// The current TSO at wall time `now_ms`: the last allocated one, or `now_ms` with logical 0
    /// when the clock has moved past it.
    pub fn current(&self, now_ms: i64) -> i64 {
        self.last.max(now_ms << TSO_LOGICAL_BITS)
    }

    /// Raises the floor after replaying a log.
    pub fn observe(&mut self, tso: i64) {
        self.last = self.last.max(tso);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: DorisType, agg: Option<AggType>) -> Column {
        Column {
            name: name.into(),
            ty,
            nullable: true,
            default: None,
            comment: String::new(),
            agg,
            auto_increment: false,
        }
    }

    fn table(keys_type: KeysType, props: Vec<(String, String)>, aggs: [Option<AggType>; 2]) -> Table {
        let schema = TableSchema {
            columns: vec![
                col("k", DorisType::Int, None),
                col("a", DorisType::Int, aggs[0]),
                col("b", DorisType::Varchar(10), aggs[1]),
            ],
            keys_type,
            key_count: 1,
            distribution: Distribution::Hash(vec!["k".into()], Buckets::Fixed(3)),
            comment: String::new(),
            partition_clause: None,
            properties: props,
        };
        let mut id = 100;
        Table::new(1, "t".into(), schema, &mut id)
    }

    fn op(k: i64, a: Option<i64>, b: &str, delete: bool) -> RowOp {
        RowOp {
            values: vec![Value::Int(k), a.map(Value::Int).unwrap_or(Value::Null), Value::Str(b.into())],
            delete,
            seq: Value::Null,
        }
    }

    fn rows(t: &Table) -> Vec<Vec<Value>> {
        let mut v: Vec<Vec<Value>> =
            t.tablets.iter().flat_map(|t| t.live_rows().map(|r| r.values.clone()).chain(t.appended_values())).collect();
        v.sort();
        v
    }

    #[test]
    fn a_scan_of_some_columns_converts_those_once_per_version_and_matches_the_whole_snapshot() {
        for keys_type in [KeysType::Unique, KeysType::Duplicate] {
            let mut t = table(keys_type, vec![], [None, None]);
            let ops: Vec<RowOp> = (0..1000).map(|k| op(k, (k % 7 != 0).then_some(k * 2), "x", false)).collect();
            t.apply(TableWrite::Rows { ops, partial: None }, 1, 0).unwrap();
            // With the hidden columns (the commit TSO among them) and without.
            for hidden in [false, true] {
                let whole = t.tablet_snapshots(hidden).unwrap();
                let width = whole[0].num_columns();
                for columns in [vec![2], vec![width - 1, 0], vec![]] {
                    let some = t.tablet_columns(hidden, Some(&columns)).unwrap();
                    for (part, all) in some.iter().zip(&whole) {
                        assert_eq!(part.num_rows(), all.num_rows(), "{keys_type:?} {columns:?}");
                        assert_eq!(part.schema().as_ref(), &all.schema().project(&columns).unwrap());
                        for (i, &c) in columns.iter().enumerate() {
                            assert_eq!(part.column(i).as_ref(), all.column(c).as_ref(), "{keys_type:?} column {c}");
                        }
                    }
                }
            }
            // A new version converts only what is asked for.
            t.apply(TableWrite::Rows { ops: vec![op(5000, Some(1), "y", false)], partial: None }, 2, 0).unwrap();
            let counted = t.tablet_columns(false, Some(&[1])).unwrap();
            assert_eq!(counted.iter().map(|b| b.num_rows()).sum::<usize>(), 1001);
            let cache = t.tablet_snapshots.as_ref().unwrap();
            assert!(cache.columns.iter().all(|c| c[1].is_some() && c[0].is_none() && c[2].is_none()));
        }
    }

    #[test]
    fn tablet_snapshots_of_a_large_table_match_the_tablets() {
        let mut t = table(KeysType::Duplicate, vec![], [None, None]);
        let ops: Vec<RowOp> = (0..150_000).map(|k| op(k, Some(k * 2), "x", false)).collect();
        t.apply(TableWrite::Rows { ops, partial: None }, 1, 0).unwrap();
        let batches = t.tablet_snapshots(false).unwrap();
        assert_eq!(batches.len(), 3);
        for (b, tablet) in batches.iter().zip(&t.tablets) {
            assert_eq!(b.num_rows(), tablet.row_count());
            let keys = b.column(0).as_any().downcast_ref::<arrow::array::Int32Array>().unwrap();
            let want: Vec<i32> =
                tablet.appended_values().iter().map(|r| if let Value::Int(k) = r[0] { k as i32 } else { -1 }).collect();
            assert_eq!(keys.values().to_vec(), want);
        }
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 150_000);
    }

    #[test]
    fn unique_upsert_delete_and_partial() {
        let mut t = table(KeysType::Unique, vec![], [None, None]);
        let w = TableWrite::Rows {
            ops: vec![op(1, Some(1), "x", false), op(1, Some(2), "y", false), op(2, Some(5), "z", false)],
            partial: None,
        };
        t.apply(w, 1, 0).unwrap();
        assert_eq!(rows(&t)[0], vec![Value::Int(1), Value::Int(2), Value::Str("y".into())]);
        t.apply(TableWrite::Rows { ops: vec![op(2, None, "", true)], partial: None }, 2, 0).unwrap();
        assert_eq!(rows(&t).len(), 1);
        t.apply(
            TableWrite::Rows { ops: vec![op(1, Some(9), "", false)], partial: Some(vec![true, true, false]) },
            3,
            0,
        )
        .unwrap();
        assert_eq!(rows(&t)[0], vec![Value::Int(1), Value::Int(9), Value::Str("y".into())]);
        let tablet_ids: Vec<i64> = t.tablets.iter().map(|t| t.id).collect();
        assert_eq!(tablet_ids, vec![101, 102, 103]);
    }

    #[test]
    fn sequence_column_wins_over_commit_order() {
        let mut t = table(KeysType::Unique, vec![("function_column.sequence_col".into(), "a".into())], [None, None]);
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(10), "new", false)], partial: None }, 1, 0).unwrap();
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(5), "old", false)], partial: None }, 2, 0).unwrap();
        assert_eq!(rows(&t)[0][2], Value::Str("new".into()));
        // A delete with a lower sequence is ignored.
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(3), "", true)], partial: None }, 3, 0).unwrap();
        assert_eq!(rows(&t).len(), 1);
    }

    #[test]
    fn aggregate_merges() {
        let mut t = table(KeysType::Aggregate, vec![], [Some(AggType::Sum), Some(AggType::ReplaceIfNotNull)]);
        t.apply(
            TableWrite::Rows { ops: vec![op(1, Some(1), "a", false), op(1, Some(2), "b", false)], partial: None },
            1,
            0,
        )
        .unwrap();
        let mut o = op(1, Some(3), "", false);
        o.values[2] = Value::Null;
        t.apply(TableWrite::Rows { ops: vec![o], partial: None }, 2, 0).unwrap();
        assert_eq!(rows(&t)[0], vec![Value::Int(1), Value::Int(6), Value::Str("b".into())]);
    }

    #[test]
    fn changelog_records() {
        let mut t = table(
            KeysType::Unique,
            vec![("changelog.enable".into(), "true".into()), ("changelog.need_historical_value".into(), "true".into())],
            [None, None],
        );
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(1), "x", false)], partial: None }, 10, 0).unwrap();
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(2), "x", false)], partial: None }, 11, 0).unwrap();
        let ops: Vec<ChangeOp> = t.changelog.iter().map(|r| r.op).collect();
        assert_eq!(ops, vec![ChangeOp::Append, ChangeOp::UpdateBefore, ChangeOp::UpdateAfter]);
        assert!(t.changelog[2].before.is_some());
        assert_eq!(t.changelog[2].tso, 11);
    }

    #[test]
    fn duplicate_tablets_keep_few_chunks_and_each_rows_commit_tso() {
        let mut t = table(KeysType::Duplicate, vec![("changelog.enable".into(), "true".into())], [None, None]);
        for k in 0..300 {
            t.apply(TableWrite::Rows { ops: vec![op(k, Some(k), "x", false)], partial: None }, 1000 + k, 0).unwrap();
        }
        for tablet in &t.tablets {
            assert!(tablet.chunks.len() <= 9, "{} chunks after ~100 commits", tablet.chunks.len());
        }
        assert_eq!(t.row_count(), 300);
        let b = t.snapshot(true, false).unwrap();
        let k = b.column(0).as_any().downcast_ref::<arrow::array::Int32Array>().unwrap();
        let tso = b.column_by_name(COMMIT_TSO_COL).unwrap();
        let tso = tso.as_any().downcast_ref::<arrow::array::Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            assert_eq!(tso.value(i), 1000 + i64::from(k.value(i)), "row {i}");
        }
        // A scan leaves one chunk per tablet, and serves it without copying.
        assert!(t.tablets.iter().all(|tb| tb.chunks.len() == 1));
        let scans = t.tablet_snapshots(false).unwrap();
        for (s, tb) in scans.iter().zip(&t.tablets) {
            assert!(Arc::ptr_eq(s.column(2), tb.chunks[0].batch.column(2)));
        }
    }

    #[test]
    fn duplicate_rows_are_deleted_by_row_id_and_reshaped_by_schema_changes() {
        let mut t = table(KeysType::Duplicate, vec![], [None, None]);
        for k in 0..6 {
            t.apply(TableWrite::Rows { ops: vec![op(k, Some(k * 10), "x", false)], partial: None }, k, 0).unwrap();
        }
        let b = t.snapshot(false, true).unwrap();
        let k = b.column(0).as_any().downcast_ref::<arrow::array::Int32Array>().unwrap();
        let ids = b.column(3).as_any().downcast_ref::<arrow::array::UInt64Array>().unwrap();
        let doomed: Vec<u64> = (0..b.num_rows()).filter(|&i| k.value(i) % 2 == 0).map(|i| ids.value(i)).collect();
        t.apply(TableWrite::DeleteRowIds(doomed), 7, 0).unwrap();
        let odd = |a: &str| -> Vec<Vec<Value>> {
            [1, 3, 5].iter().map(|&k| vec![Value::Int(k), Value::Int(k * 10), Value::Str(a.into())]).collect()
        };
        assert_eq!(rows(&t), odd("x"));
        // ALTER TABLE … ADD COLUMN: the schema first, then the rows.
        t.schema.columns.push(col("c", DorisType::BigInt, None));
        t.map_rows(|r| r.push(Value::Int(7))).unwrap();
        let b = t.snapshot(false, false).unwrap();
        assert_eq!(b.schema().field(3).name(), "c");
        let mut want = odd("x");
        want.iter_mut().for_each(|r| r.push(Value::Int(7)));
        assert_eq!(rows(&t), want);
        // New loads land in the new shape beside the old rows.
        let mut o = op(9, Some(90), "y", false);
        o.values.push(Value::Int(8));
        t.apply(TableWrite::Rows { ops: vec![o], partial: None }, 8, 0).unwrap();
        assert_eq!(t.row_count(), 4);
        assert_eq!(t.snapshot(false, false).unwrap().num_rows(), 4);
    }

    #[test]
    fn duplicate_auto_increment_continues_after_the_stored_maximum() {
        let mut t = table(KeysType::Duplicate, vec![], [None, None]);
        t.schema.columns[1].auto_increment = true;
        t.apply(TableWrite::Rows { ops: vec![op(1, Some(41), "x", false)], partial: None }, 1, 0).unwrap();
        t.apply(TableWrite::Rows { ops: vec![op(2, None, "y", false)], partial: None }, 2, 0).unwrap();
        assert_eq!(rows(&t)[1], vec![Value::Int(2), Value::Int(42), Value::Str("y".into())]);
    }

    #[test]
    fn tso_is_monotonic() {
        let mut tso = Tso::default();
        let a = tso.allocate(Tso::now_ms());
        let b = tso.allocate(Tso::now_ms());
        assert!(b > a);
        assert!(a >> TSO_LOGICAL_BITS > 1_600_000_000_000);
    }
}
