//! The DataFusion catalog over the engine: databases as schemas, tables as scans of their
//! tablets, views planned on use, and `information_schema`.

use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::datasource::{MemTable, ViewTable};
use datafusion::error::DataFusionError;

use super::query::view_plan;
use super::{Session, SqlError};
use crate::engine::Engine;
use crate::storage::KeysType;
use crate::types::DorisType;

/// DataFusion catalog over the engine: schemas = databases, tables = snapshots.
#[derive(Debug)]
pub(super) struct DorisCatalog {
    pub(super) engine: Arc<Engine>,
    pub(super) session: Arc<Session>,
}

impl CatalogProvider for DorisCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.engine.lock().dbs.keys().cloned().collect();
        v.push("information_schema".into());
        v
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name.eq_ignore_ascii_case("information_schema") {
            return Some(Arc::new(InfoSchema { engine: self.engine.clone() }));
        }
        let db = {
            let st = self.engine.lock();
            if st.dbs.contains_key(name) {
                name.to_string()
            } else {
                st.dbs.keys().find(|d| d.eq_ignore_ascii_case(name))?.clone()
            }
        };
        Some(Arc::new(DorisSchema { engine: self.engine.clone(), db, session: self.session.clone() }))
    }
}

#[derive(Debug)]
struct DorisSchema {
    engine: Arc<Engine>,
    db: String,
    session: Arc<Session>,
}

impl DorisSchema {
    /// A view, planned in a session whose database is the view's.
    async fn view_table(&self, view: crate::engine::View) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        let mut vs = (*self.session).clone();
        vs.db = Some(self.db.clone());
        let plan = Box::pin(view_plan(&self.engine, &vs, &view)).await?;
        Ok(Some(Arc::new(ViewTable::new(plan, Some(view.query)))))
    }
}

#[async_trait]
impl SchemaProvider for DorisSchema {
    fn table_names(&self) -> Vec<String> {
        self.engine
            .lock()
            .dbs
            .get(&self.db)
            .map(|d| d.tables.keys().chain(d.views.keys()).cloned().collect())
            .unwrap_or_default()
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        let show_hidden = self.session.var_true("show_hidden_columns");
        let view = {
            let mut st = self.engine.lock();
            let Some(d) = st.dbs.get_mut(&self.db) else {
                return Ok(None);
            };
            let key = match d.tables.get_key_value(name) {
                Some((k, _)) => Some(k.clone()),
                None => d.tables.keys().find(|t| t.eq_ignore_ascii_case(name)).cloned(),
            };
            if let Some(t) = key.and_then(|k| d.tables.get_mut(&k)) {
                let scan = super::keyed_scan::KeyedScan::new(self.engine.clone(), &self.db, t, show_hidden);
                return Ok(Some(Arc::new(scan)));
            }
            match d.views.get(name) {
                Some(v) => v.clone(),
                None => match d.views.iter().find(|(v, _)| v.eq_ignore_ascii_case(name)) {
                    Some((_, v)) => v.clone(),
                    None => return Ok(None),
                },
            }
        };
        self.view_table(view).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.engine
            .lock()
            .dbs
            .get(&self.db)
            .is_some_and(|d| d.tables.keys().chain(d.views.keys()).any(|t| t.eq_ignore_ascii_case(name)))
    }
}

/// A table over tablet batches (one partition, tablet order), with lower-case field names.
pub(crate) fn mem_table(batches: Vec<RecordBatch>) -> datafusion::error::Result<Arc<dyn TableProvider>> {
    let batches = batches.into_iter().map(lower_case_fields).collect::<datafusion::error::Result<Vec<_>>>()?;
    let Some(schema) = batches.first().map(|b| b.schema()) else {
        return Err(DataFusionError::Execution("a table without tablets".into()));
    };
    Ok(Arc::new(MemTable::try_new(schema, vec![batches])?))
}

/// Renames every field to lower case (DataFusion normalises unquoted identifiers).
pub fn lower_case_fields(batch: RecordBatch) -> datafusion::error::Result<RecordBatch> {
    if batch.schema().fields().iter().all(|f| !f.name().chars().any(|c| c.is_ascii_uppercase())) {
        return Ok(batch);
    }
    let fields: Vec<Field> =
        batch.schema().fields().iter().map(|f| f.as_ref().clone().with_name(f.name().to_ascii_lowercase())).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), batch.columns().to_vec())?)
}

#[derive(Debug)]
struct InfoSchema {
    engine: Arc<Engine>,
}

pub(super) fn string_batch(names: &[&str], rows: Vec<Vec<Option<String>>>) -> datafusion::error::Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| {
                let ty = if matches!(
                    *n,
                    "ordinal_position"
                        | "column_size"
                        | "decimal_digits"
                        | "table_rows"
                        | "numeric_precision"
                        | "numeric_scale"
                        | "character_maximum_length"
                        | "version"
                        | "avg_row_length"
                        | "data_length"
                        | "max_data_length"
                        | "index_length"
                        | "data_free"
                        | "auto_increment"
                        | "checksum"
                ) {
                    DataType::Int64
                } else if matches!(*n, "create_time" | "update_time" | "check_time") {
                    DataType::Timestamp(arrow::datatypes::TimeUnit::Second, None)
                } else {
                    DataType::Utf8
                };
                Field::new(*n, ty, true)
            })
            .collect::<Vec<_>>(),
    ));
    let mut cols: Vec<Arc<dyn Array>> = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if f.data_type() == &DataType::Int64 {
            let a: arrow::array::Int64Array =
                rows.iter().map(|r| r[i].as_ref().and_then(|s| s.parse::<i64>().ok())).collect();
            cols.push(Arc::new(a));
        } else {
            let a: arrow::array::StringArray = rows.iter().map(|r| r[i].clone()).collect();
            cols.push(arrow::compute::cast(&a, f.data_type())?);
        }
    }
    Ok(RecordBatch::try_new(schema, cols)?)
}

#[async_trait]
impl SchemaProvider for InfoSchema {
    fn table_names(&self) -> Vec<String> {
        vec!["schemata".into(), "tables".into(), "columns".into(), "tso_status".into()]
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        if name.eq_ignore_ascii_case("tso_status") {
            return Ok(Some(mem_table(vec![tso_status_batch(&self.engine)?])?));
        }
        let mut st = self.engine.lock();
        let batch = match name.to_ascii_lowercase().as_str() {
            "schemata" => {
                let mut rows: Vec<Vec<Option<String>>> = vec![vec![
                    Some("internal".into()),
                    Some("information_schema".into()),
                    Some("utf8mb4".into()),
                    Some("utf8mb4_0900_bin".into()),
                    None,
                ]];
                for db in st.dbs.keys() {
                    rows.push(vec![
                        Some("internal".into()),
                        Some(db.clone()),
                        Some("utf8mb4".into()),
                        Some("utf8mb4_0900_bin".into()),
                        None,
                    ]);
                }
                string_batch(
                    &[
                        "catalog_name",
                        "schema_name",
                        "default_character_set_name",
                        "default_collation_name",
                        "sql_path",
                    ],
                    rows,
                )?
            }
            "tables" => {
                // MySQL's 21 columns, filled as Doris fills them for its tables and views.
                let mut rows = Vec::new();
                let time = |ms: i64| (ms > 0).then(|| time_with_ms(ms)[..19].to_string());
                for (db, d) in st.dbs.iter_mut() {
                    for (tn, t) in d.tables.iter_mut() {
                        let n = t.row_count() as u64;
                        let bytes = table_bytes(t).map_err(|e| DataFusionError::Execution(e.message))?;
                        rows.push(vec![
                            Some("internal".into()),
                            Some(db.clone()),
                            Some(tn.clone()),
                            Some("BASE TABLE".into()),
                            Some("Doris".into()),
                            None,
                            None,
                            Some(n.to_string()),
                            Some(bytes.checked_div(n).unwrap_or(0).to_string()),
                            Some(bytes.to_string()),
                            None,
                            None,
                            None,
                            None,
                            time(t.created_ms),
                            time(t.last_commit_ms),
                            None,
                            Some("utf8mb4_0900_bin".into()),
                            None,
                            None,
                            Some(t.schema.comment.clone()),
                        ]);
                    }
                    for (vn, v) in &d.views {
                        let mut r: Vec<Option<String>> =
                            vec![Some("internal".into()), Some(db.clone()), Some(vn.clone()), Some("VIEW".into())];
                        r.extend([Some("View".into()), None, None, Some("0".into()), Some("0".into())]);
                        r.extend([Some("0".into()), None, None, None, None, None, None, None]);
                        r.extend([Some("utf8mb4_0900_bin".into()), None, None, Some(v.comment.clone())]);
                        rows.push(r);
                    }
                }
                string_batch(
                    &[
                        "table_catalog",
                        "table_schema",
                        "table_name",
                        "table_type",
                        "engine",
                        "version",
                        "row_format",
                        "table_rows",
                        "avg_row_length",
                        "data_length",
                        "max_data_length",
                        "index_length",
                        "data_free",
                        "auto_increment",
                        "create_time",
                        "update_time",
                        "check_time",
                        "table_collation",
                        "checksum",
                        "create_options",
                        "table_comment",
                    ],
                    rows,
                )?
            }
            "columns" => {
                let mut rows = Vec::new();
                for (db, d) in &st.dbs {
                    for (tn, t) in &d.tables {
                        for (i, c) in t.schema.columns.iter().enumerate() {
                            let (size, digits) = c.ty.column_size_digits();
                            let (char_len, num_prec, num_scale) = match &c.ty {
                                DorisType::Char(n) | DorisType::Varchar(n) => (Some(n.to_string()), None, None),
                                DorisType::String => (Some("2147483643".to_string()), None, None),
                                DorisType::Decimal { precision, scale, .. } => {
                                    (None, Some(precision.to_string()), Some(scale.to_string()))
                                }
                                DorisType::TinyInt
                                | DorisType::SmallInt
                                | DorisType::Int
                                | DorisType::BigInt
                                | DorisType::LargeInt => (None, size.map(|s| s.to_string()), Some("0".to_string())),
                                _ => (None, None, None),
                            };
                            rows.push(vec![
                                Some("internal".into()),
                                Some(db.clone()),
                                Some(tn.clone()),
                                Some(c.name.clone()),
                                Some((i + 1).to_string()),
                                match &c.default {
                                    Some(crate::storage::DefaultValue::Literal(v)) => Some(v.clone()),
                                    Some(crate::storage::DefaultValue::CurrentTimestamp(_)) => {
                                        Some("CURRENT_TIMESTAMP".into())
                                    }
                                    _ => None,
                                },
                                Some(if c.nullable { "YES" } else { "NO" }.into()),
                                Some(c.ty.data_type_name()),
                                char_len,
                                num_prec,
                                num_scale,
                                Some(c.ty.sql_name()),
                                Some(if i < t.schema.key_count && t.schema.keys_type != KeysType::Duplicate {
                                    "UNI".into()
                                } else if i < t.schema.key_count {
                                    "DUP".into()
                                } else {
                                    String::new()
                                }),
                                Some(String::new()),
                                Some("select,insert,update,references".into()),
                                Some(c.comment.clone()),
                                size.map(|s| s.to_string()),
                                digits.map(|d| d.to_string()),
                            ]);
                        }
                    }
                }
                string_batch(
                    &[
                        "table_catalog",
                        "table_schema",
                        "table_name",
                        "column_name",
                        "ordinal_position",
                        "column_default",
                        "is_nullable",
                        "data_type",
                        "character_maximum_length",
                        "numeric_precision",
                        "numeric_scale",
                        "column_type",
                        "column_key",
                        "extra",
                        "privileges",
                        "column_comment",
                        "column_size",
                        "decimal_digits",
                    ],
                    rows,
                )?
            }
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        matches!(name.to_ascii_lowercase().as_str(), "schemata" | "tables" | "columns" | "tso_status")
    }
}

/// `information_schema.tso_status` (§5.3): one row of BIGINT columns.
fn tso_status_batch(engine: &Engine) -> datafusion::error::Result<RecordBatch> {
    use crate::storage::TSO_LOGICAL_BITS;
    let now = engine.clock.now_ms();
    let (current, committed) = {
        let st = engine.lock();
        let committed = st.txns.values().filter(|t| t.status == crate::engine::TxnStatus::Visible).map(|t| t.tso).max();
        (st.tso.current(now), committed)
    };
    let physical = current >> TSO_LOGICAL_BITS;
    let cols: [(&str, Option<i64>); 6] = [
        ("WINDOW_END_PHYSICAL_TIME", Some(now.max(physical) + 3000)),
        ("CURRENT_TSO", Some(current)),
        ("CURRENT_TSO_PHYSICAL_TIME", Some(physical)),
        ("CURRENT_TSO_LOGICAL_COUNTER", Some(current & ((1 << TSO_LOGICAL_BITS) - 1))),
        ("COMMITTED_TSO", committed),
        ("COMMITTED_TSO_PHYSICAL_TIME", committed.map(|c| c >> TSO_LOGICAL_BITS)),
    ];
    let schema = Arc::new(Schema::new(
        cols.iter().map(|(n, _)| Field::new(n.to_ascii_lowercase(), DataType::Int64, true)).collect::<Vec<_>>(),
    ));
    let arrays: Vec<arrow::array::ArrayRef> = cols
        .iter()
        .map(|(_, v)| Arc::new(arrow::array::Int64Array::from(vec![*v])) as arrow::array::ArrayRef)
        .collect();
    Ok(RecordBatch::try_new(schema, arrays)?)
}

pub(super) const INFO_SCHEMA_UPPER: &[&str] = &[
    "WINDOW_END_PHYSICAL_TIME",
    "CURRENT_TSO",
    "CURRENT_TSO_PHYSICAL_TIME",
    "CURRENT_TSO_LOGICAL_COUNTER",
    "COMMITTED_TSO",
    "COMMITTED_TSO_PHYSICAL_TIME",
    "CATALOG_NAME",
    "SCHEMA_NAME",
    "DEFAULT_CHARACTER_SET_NAME",
    "DEFAULT_COLLATION_NAME",
    "SQL_PATH",
    "TABLE_CATALOG",
    "TABLE_SCHEMA",
    "TABLE_NAME",
    "TABLE_TYPE",
    "ENGINE",
    "TABLE_ROWS",
    "TABLE_COMMENT",
    "ROW_FORMAT",
    "AVG_ROW_LENGTH",
    "DATA_LENGTH",
    "MAX_DATA_LENGTH",
    "INDEX_LENGTH",
    "DATA_FREE",
    "AUTO_INCREMENT",
    "CREATE_TIME",
    "UPDATE_TIME",
    "CHECK_TIME",
    "TABLE_COLLATION",
    "CHECKSUM",
    "CREATE_OPTIONS",
    "COLUMN_NAME",
    "ORDINAL_POSITION",
    "COLUMN_DEFAULT",
    "IS_NULLABLE",
    "DATA_TYPE",
    "CHARACTER_MAXIMUM_LENGTH",
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "COLUMN_TYPE",
    "COLUMN_KEY",
    "EXTRA",
    "PRIVILEGES",
    "COLUMN_COMMENT",
    "COLUMN_SIZE",
    "DECIMAL_DIGITS",
];

/// A table's data size: the Arrow size of its rows.
pub(super) fn table_bytes(t: &mut crate::storage::Table) -> Result<u64, SqlError> {
    let batches = t.tablet_snapshots(false).map_err(SqlError::other)?;
    Ok(batches.iter().map(|b| b.get_array_memory_size() as u64).sum())
}

/// A time as Doris' job listings print it (`yyyy-MM-dd HH:mm:ss.SSS`, UTC here).
pub(super) fn time_with_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}
