//! SQL sessions: Doris statements answered here (SHOW, DESC, SET, USE, INSERT, DELETE, DDL) and
//! SELECT through DataFusion over snapshots of the committed data.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider, TableProvider,
};
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, ViewTable};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
    create_udf,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::tokenizer::Token;
use datafusion::variable::{VarProvider, VarType};

use crate::ddl::{ObjectName, Parser};
use crate::engine::{Engine, EngineError, desc_type, show_create_table};
use crate::storage::{DELETE_SIGN, KeysType, ROWID_COL, RowOp, SEQUENCE_COL, TableWrite};
use crate::table_refs::RefKind;
use crate::types::{DorisType, Value, format_date, format_datetime, format_decimal};

/// The listener addresses, for SHOW FRONTENDS / BACKENDS and the HTTP APIs.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    /// FE HTTP port.
    pub fe_http_port: u16,
    /// BE HTTP port.
    pub be_http_port: u16,
    /// MySQL port.
    pub query_port: u16,
    /// Arrow Flight SQL port (0 = not served yet).
    pub flight_port: u16,
    /// Host to advertise.
    pub host: String,
    /// Whether the HTTP ports serve TLS.
    pub tls: bool,
}

impl ServerInfo {
    /// The scheme of the HTTP ports' URLs.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
}

/// The Doris version string shown in `version_comment`.
pub const VERSION_COMMENT: &str = "Doris version doris-2.1.7-rc01-lite (doris-lite)";
/// The MySQL server version of the handshake.
pub const SERVER_VERSION: &str = "5.7.99";

/// Column kinds of a result set (MySQL and HTTP type names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColKind {
    /// TINYINT / BOOLEAN
    Tiny,
    /// SMALLINT
    Small,
    /// INT
    Int,
    /// BIGINT
    BigInt,
    /// FLOAT
    Float,
    /// DOUBLE
    Double,
    /// DECIMAL
    Decimal,
    /// DATE
    Date,
    /// DATETIME
    DateTime,
    /// VARCHAR / STRING
    Str,
}

impl ColKind {
    /// Type name for the HTTP query API.
    pub fn doris_name(&self) -> &'static str {
        match self {
            ColKind::Tiny => "TINYINT",
            ColKind::Small => "SMALLINT",
            ColKind::Int => "INT",
            ColKind::BigInt => "BIGINT",
            ColKind::Float => "FLOAT",
            ColKind::Double => "DOUBLE",
            ColKind::Decimal => "DECIMAL",
            ColKind::Date => "DATE",
            ColKind::DateTime => "DATETIME",
            ColKind::Str => "VARCHAR",
        }
    }

    fn of(dt: &DataType) -> ColKind {
        match dt {
            DataType::Boolean | DataType::Int8 | DataType::UInt8 => ColKind::Tiny,
            DataType::Int16 | DataType::UInt16 => ColKind::Small,
            DataType::Int32 | DataType::UInt32 => ColKind::Int,
            DataType::Int64 | DataType::UInt64 => ColKind::BigInt,
            DataType::Float16 | DataType::Float32 => ColKind::Float,
            DataType::Float64 => ColKind::Double,
            DataType::Decimal128(..) | DataType::Decimal256(..) => ColKind::Decimal,
            DataType::Date32 | DataType::Date64 => ColKind::Date,
            DataType::Timestamp(..) => ColKind::DateTime,
            _ => ColKind::Str,
        }
    }
}

/// A result set as text cells.
#[derive(Debug, Clone, Default)]
pub struct ResultSet {
    /// Column names and kinds.
    pub columns: Vec<(String, ColKind)>,
    /// Rows; None = NULL.
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    fn strings(names: &[&str], rows: Vec<Vec<Option<String>>>) -> ResultSet {
        ResultSet { columns: names.iter().map(|n| (n.to_string(), ColKind::Str)).collect(), rows }
    }
}

/// What a statement produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A result set.
    Rows(ResultSet),
    /// OK packet.
    Done {
        /// Affected rows.
        affected: u64,
        /// Info string.
        info: String,
    },
}

fn done() -> Outcome {
    Outcome::Done { affected: 0, info: String::new() }
}

/// A statement error: MySQL code and the detail message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    /// MySQL error number.
    pub code: u16,
    /// Detail text (without the `errCode = 2, detailMessage = ` prefix).
    pub message: String,
}

impl SqlError {
    fn other(message: impl Into<String>) -> SqlError {
        SqlError { code: 1105, message: message.into() }
    }
    /// The text Doris sends: `errCode = 2, detailMessage = …`.
    pub fn doris_text(&self) -> String {
        format!("errCode = 2, detailMessage = {}", self.message)
    }
}

impl From<EngineError> for SqlError {
    fn from(e: EngineError) -> Self {
        SqlError { code: e.mysql_code(), message: e.to_string() }
    }
}

impl From<crate::ddl::SyntaxError> for SqlError {
    fn from(e: crate::ddl::SyntaxError) -> Self {
        SqlError { code: 1064, message: e.0 }
    }
}

/// Strips DataFusion's context prefixes from an error for display.
pub fn clean_df_error(e: &DataFusionError) -> String {
    let s = e.find_root().to_string();
    for p in [
        "Error during planning: ",
        "Schema error: ",
        "SQL error: ",
        "Execution error: ",
        "Arrow error: ",
        "This feature is not implemented: ",
    ] {
        if let Some(r) = s.strip_prefix(p) {
            return r.to_string();
        }
    }
    s
}

fn df_error(e: DataFusionError, current_db: Option<&str>) -> SqlError {
    let root = e.find_root();
    match root {
        DataFusionError::SQL(pe, _) => SqlError { code: 1064, message: format!("Syntax error: {pe}") },
        DataFusionError::SchemaError(se, _) => {
            let msg = se.to_string();
            if let datafusion::common::SchemaError::FieldNotFound { field, .. } = se.as_ref() {
                return SqlError { code: 1054, message: format!("Unknown column '{}' in 'table list'", field.name()) };
            }
            SqlError::other(msg)
        }
        _ => {
            let msg = clean_df_error(&e);
            if let Some(rest) = msg.split_once("table '").map(|x| x.1)
                && msg.contains("not found")
            {
                let full = rest.split('\'').next().unwrap_or("");
                let parts: Vec<&str> = full.split('.').collect();
                let table = parts.last().copied().unwrap_or(full).to_string();
                let db = if parts.len() >= 2 {
                    parts[parts.len() - 2].to_string()
                } else {
                    current_db.unwrap_or("").to_string()
                };
                if db == NO_DB {
                    return EngineError::NoDatabase.into();
                }
                return EngineError::UnknownTable(table, db).into();
            }
            SqlError::other(msg)
        }
    }
}

const NO_DB: &str = "__doris_lite_no_database__";

/// Per-connection state.
#[derive(Debug, Clone)]
pub struct Session {
    /// Authenticated user.
    pub user: String,
    /// `USE`d database.
    pub db: Option<String>,
    /// Session variables (lower-case names).
    pub vars: BTreeMap<String, String>,
    /// Connection id.
    pub connection_id: u32,
}

/// Default session variables (name, value).
pub fn default_vars() -> BTreeMap<String, String> {
    let v: &[(&str, &str)] = &[
        ("auto_increment_increment", "1"),
        ("autocommit", "1"),
        ("character_set_client", "utf8mb4"),
        ("character_set_connection", "utf8mb4"),
        ("character_set_results", "utf8mb4"),
        ("character_set_server", "utf8mb4"),
        ("collation_connection", "utf8mb4_0900_bin"),
        ("collation_database", "utf8mb4_0900_bin"),
        ("collation_server", "utf8mb4_0900_bin"),
        ("enable_insert_strict", "true"),
        ("enable_unique_key_partial_update", "false"),
        ("exec_mem_limit", "2147483648"),
        ("group_commit", "off_mode"),
        ("init_connect", ""),
        ("insert_max_filter_ratio", "1.0"),
        ("interactive_timeout", "3600"),
        ("language", "/palo/share/english/"),
        ("license", "Apache License, Version 2.0"),
        ("lower_case_table_names", "0"),
        ("max_allowed_packet", "67108864"),
        ("net_buffer_length", "16384"),
        ("net_write_timeout", "600"),
        ("partial_update_new_key_behavior", "APPEND"),
        ("performance_schema", "0"),
        ("query_cache_size", "1048576"),
        ("query_cache_type", "0"),
        ("query_timeout", "900"),
        ("show_hidden_columns", "false"),
        ("sql_mode", "ONLY_FULL_GROUP_BY"),
        ("sql_select_limit", "9223372036854775807"),
        ("system_time_zone", "UTC"),
        ("time_zone", "UTC"),
        ("transaction_isolation", "REPEATABLE-READ"),
        ("transaction_read_only", "0"),
        ("tx_isolation", "REPEATABLE-READ"),
        ("tx_read_only", "0"),
        ("version", SERVER_VERSION),
        ("version_comment", VERSION_COMMENT),
        ("wait_timeout", "28800"),
    ];
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl Session {
    /// A new session for `user`.
    pub fn new(user: &str, connection_id: u32) -> Session {
        Session { user: user.to_string(), db: None, vars: default_vars(), connection_id }
    }

    /// Whether a boolean session variable is on.
    pub fn var_true(&self, name: &str) -> bool {
        self.vars.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }
}

#[derive(Debug)]
struct SessionVars(BTreeMap<String, String>);

fn var_key(names: &[String]) -> String {
    let joined = names.join(".");
    let s = joined.trim_start_matches('@').to_ascii_lowercase();
    for p in ["session.", "global.", "local."] {
        if let Some(r) = s.strip_prefix(p) {
            return r.to_string();
        }
    }
    s
}

impl VarProvider for SessionVars {
    fn get_value(&self, var_names: Vec<String>) -> datafusion::error::Result<ScalarValue> {
        let key = var_key(&var_names);
        Ok(match self.0.get(&key) {
            Some(v) => match v.parse::<i64>() {
                Ok(i) => ScalarValue::Int64(Some(i)),
                Err(_) => ScalarValue::Utf8(Some(v.clone())),
            },
            None => ScalarValue::Utf8(None),
        })
    }

    fn get_type(&self, var_names: &[String]) -> Option<DataType> {
        let key = var_key(var_names);
        Some(match self.0.get(&key) {
            Some(v) if v.parse::<i64>().is_ok() => DataType::Int64,
            _ => DataType::Utf8,
        })
    }
}

/// DataFusion catalog over the engine: schemas = databases, tables = snapshots.
#[derive(Debug)]
struct DorisCatalog {
    engine: Arc<Engine>,
    session: Arc<Session>,
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
                let scan = crate::keyed_scan::KeyedScan::new(self.engine.clone(), &self.db, t, show_hidden);
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

fn string_batch(names: &[&str], rows: Vec<Vec<Option<String>>>) -> datafusion::error::Result<RecordBatch> {
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

/// Doris' `if(cond, a, b)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisIf {
    signature: Signature,
}

impl ScalarUDFImpl for DorisIf {
    fn name(&self) -> &str {
        "if"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(if t[1] == DataType::Null { t[2].clone() } else { t[1].clone() })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let ret = args.return_field.data_type().clone();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let cond = arrow::compute::cast(&arrays[0], &DataType::Boolean)?;
        let a = arrow::compute::cast(&arrays[1], &ret)?;
        let b = arrow::compute::cast(&arrays[2], &ret)?;
        Ok(ColumnarValue::Array(arrow::compute::kernels::zip::zip(cond.as_boolean(), &a, &b)?))
    }
}

/// Doris' `from_unixtime(seconds[, format])` returning text in the session time zone.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisFromUnixtime {
    signature: Signature,
    /// Session time zone offset from UTC.
    offset_us: i64,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Formats microseconds since the epoch with a MySQL `DATE_FORMAT` pattern (the specifiers mean
/// what MySQL's manual says: `%i` minutes, `%s` seconds, `%M` the month's name, …).
pub fn mysql_date_format(us: i64, fmt: &str) -> String {
    let full = format_datetime(us, 6);
    let (date, time) = full.split_at(10);
    let time = &time[1..];
    let num = |s: &str| s.parse::<u32>().unwrap_or(0);
    let (month, day, hour) = (num(&date[5..7]), num(&date[8..10]), num(&time[0..2]));
    let days = us.div_euclid(86_400_000_000);
    // 1970-01-01 was a Thursday.
    let weekday = (days + 4).rem_euclid(7) as usize;
    let year_day = {
        let jan1 = crate::types::parse_date(&format!("{}-01-01", &date[0..4])).unwrap_or(days as i32) as i64;
        days - jan1 + 1
    };
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let ampm = if hour < 12 { "AM" } else { "PM" };
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&date[0..4]),
            Some('y') => out.push_str(&date[2..4]),
            Some('m') => out.push_str(&date[5..7]),
            Some('c') => out.push_str(&month.to_string()),
            Some('M') => out.push_str(MONTHS[(month as usize).saturating_sub(1) % 12]),
            Some('b') => out.push_str(&MONTHS[(month as usize).saturating_sub(1) % 12][..3]),
            Some('d') => out.push_str(&date[8..10]),
            Some('e') => out.push_str(&day.to_string()),
            Some('D') => {
                let suffix = match (day % 10, day % 100) {
                    (_, 11..=13) => "th",
                    (1, _) => "st",
                    (2, _) => "nd",
                    (3, _) => "rd",
                    _ => "th",
                };
                out.push_str(&format!("{day}{suffix}"));
            }
            Some('W') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('w') => out.push_str(&weekday.to_string()),
            Some('j') => out.push_str(&format!("{year_day:03}")),
            Some('H') => out.push_str(&time[0..2]),
            Some('k') => out.push_str(&hour.to_string()),
            Some('h') | Some('I') => out.push_str(&format!("{hour12:02}")),
            Some('l') => out.push_str(&hour12.to_string()),
            Some('p') => out.push_str(ampm),
            Some('i') => out.push_str(&time[3..5]),
            Some('s') | Some('S') => out.push_str(&time[6..8]),
            Some('f') => out.push_str(&time[9..15]),
            Some('T') => out.push_str(&time[0..8]),
            Some('r') => out.push_str(&format!("{hour12:02}:{} {ampm}", &time[3..8])),
            Some(other) => out.push(other),
            None => out.push('%'),
        }
    }
    out
}

/// Doris' `date_format(datetime, format)`, with MySQL's specifiers (DataFusion's own
/// `date_format` is strftime's).
#[derive(Debug, PartialEq, Eq, Hash)]
struct DorisDateFormat {
    signature: Signature,
}

impl ScalarUDFImpl for DorisDateFormat {
    fn name(&self) -> &str {
        "date_format"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ts = arrow::compute::cast(&arrays[0], &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None))?;
        let ts = ts.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        let fmts = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let fmts = fmts.as_string::<i32>();
        let out: arrow::array::StringArray = (0..ts.len())
            .map(|i| (!ts.is_null(i) && !fmts.is_null(i)).then(|| mysql_date_format(ts.value(i), fmts.value(i))))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

impl ScalarUDFImpl for DorisFromUnixtime {
    fn name(&self) -> &str {
        "from_unixtime"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _t: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let secs = arrow::compute::cast(&arrays[0], &DataType::Float64)?;
        let secs = secs.as_primitive::<arrow::datatypes::Float64Type>();
        let fmts = match arrays.get(1) {
            Some(f) => Some(arrow::compute::cast(f, &DataType::Utf8)?),
            None => None,
        };
        let out: arrow::array::StringArray = (0..secs.len())
            .map(|i| {
                if secs.is_null(i) {
                    return None;
                }
                let us = (secs.value(i) * 1_000_000.0).floor() as i64 + self.offset_us;
                let fmt = match &fmts {
                    Some(f) if f.is_null(i) => return None,
                    Some(f) => f.as_string::<i32>().value(i).to_string(),
                    None => "%Y-%m-%d %H:%i:%s".to_string(),
                };
                Some(mysql_date_format(us, &fmt))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Registers the scalar functions Doris users expect that DataFusion lacks or spells differently.
pub fn register_doris_functions(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::from(DorisIf { signature: Signature::any(3, Volatility::Immutable) }));
    ctx.register_udf(ScalarUDF::from(DorisDateFormat { signature: Signature::any(2, Volatility::Immutable) }));
    register_from_unixtime(ctx, 0);
    crate::functions::register(ctx);
}

fn register_from_unixtime(ctx: &SessionContext, offset_ms: i64) {
    ctx.register_udf(ScalarUDF::from(DorisFromUnixtime {
        signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], Volatility::Immutable),
        offset_us: offset_ms * 1000,
    }));
}

fn register_session_functions(ctx: &SessionContext, session: &Session) {
    let consts: [(&str, Option<String>); 5] = [
        ("database", session.db.clone()),
        ("schema", session.db.clone()),
        ("version", Some(SERVER_VERSION.to_string())),
        ("current_user", Some(format!("'{}'@'%'", session.user))),
        ("user", Some(format!("'{}'@'%'", session.user))),
    ];
    for (name, value) in consts {
        let f = create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(value.clone())))),
        );
        ctx.register_udf(f);
    }
    let id = session.connection_id as i64;
    ctx.register_udf(create_udf(
        "connection_id",
        vec![],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(id))))),
    ));
}

/// Formats one Arrow cell the way Doris prints it.
pub fn cell_text(col: &dyn Array, fmt: &ArrayFormatter, row: usize) -> Option<String> {
    if col.logical_nulls().is_some_and(|n| n.is_null(row)) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Boolean => if col.as_boolean().value(row) { "1" } else { "0" }.to_string(),
        DataType::Date32 => format_date(col.as_primitive::<Date32Type>().value(row)),
        DataType::Timestamp(unit, _) => {
            let us = match unit {
                TimeUnit::Second => col.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
                TimeUnit::Millisecond => col.as_primitive::<TimestampMillisecondType>().value(row) * 1000,
                TimeUnit::Microsecond => col.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => col.as_primitive::<TimestampNanosecondType>().value(row) / 1000,
            };
            format_datetime(us, if us % 1_000_000 == 0 { 0 } else { 6 })
        }
        DataType::Decimal128(_, s) => {
            format_decimal(col.as_primitive::<Decimal128Type>().value(row), (*s).max(0) as u8)
        }
        _ => fmt.value(row).to_string(),
    })
}

/// Converts record batches to a text result set.
pub fn batches_to_result(schema: &Schema, batches: &[RecordBatch]) -> Result<ResultSet, SqlError> {
    let columns = schema.fields().iter().map(|f| (f.name().clone(), ColKind::of(f.data_type()))).collect();
    let mut rows = Vec::new();
    let opts = FormatOptions::default();
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<_, _>>()
            .map_err(|e| SqlError::other(e.to_string()))?;
        for r in 0..b.num_rows() {
            rows.push(b.columns().iter().zip(&fmts).map(|(c, f)| cell_text(c.as_ref(), f, r)).collect());
        }
    }
    Ok(ResultSet { columns, rows })
}

/// Executes SQL for one session.
#[derive(Debug, Clone)]
pub struct Executor {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Listener info.
    pub info: Arc<ServerInfo>,
}

fn like_match(pattern: &str, s: &str) -> bool {
    fn rec(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('%') => (0..=s.len()).any(|i| rec(&p[1..], &s[i..])),
            Some('_') => !s.is_empty() && rec(&p[1..], &s[1..]),
            Some(c) => s.first().is_some_and(|x| x.eq_ignore_ascii_case(c)) && rec(&p[1..], &s[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    rec(&p, &s)
}

fn hex_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let n = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:016x}{:016x}", n as u64, (n >> 64) as u64 ^ 0x9e3779b97f4a7c15)
}

impl Executor {
    /// Records a statement in the engine's audit log: how it ended (`EOF` for a result set, `OK`,
    /// `ERR`) and the rows it returned.
    pub fn audit(&self, s: &Session, protocol: &'static str, stmt: &str, state: &'static str, return_rows: u64) {
        self.engine.audit(crate::engine::AuditEntry {
            time_ms: 0,
            user: s.user.clone(),
            db: s.db.clone().unwrap_or_default(),
            protocol,
            stmt: stmt.to_string(),
            state,
            return_rows,
        });
    }

    /// [`Executor::audit`] of a MySQL statement's outcome.
    pub fn audit_outcome(&self, s: &Session, stmt: &str, outcome: &Result<Outcome, SqlError>) {
        let (state, rows) = match outcome {
            Ok(Outcome::Rows(rs)) => ("EOF", rs.rows.len() as u64),
            Ok(Outcome::Done { .. }) => ("OK", 0),
            Err(_) => ("ERR", 0),
        };
        self.audit(s, "mysql", stmt, state, rows);
    }

    fn resolve<'a>(&self, s: &'a Session, name: &'a ObjectName) -> Result<String, SqlError> {
        match name.db.as_deref().or(s.db.as_deref()) {
            Some(d) => Ok(d.to_string()),
            None => Err(EngineError::NoDatabase.into()),
        }
    }

    /// Runs one statement.
    pub async fn execute(&self, s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        if trimmed.is_empty() {
            return Ok(done());
        }
        let stripped = strip_leading_comments(trimmed);
        let mut p = Parser::new(stripped)?;
        let first = match p.peek() {
            Token::Word(w) => w.value.to_ascii_uppercase(),
            Token::LParen => "SELECT".into(),
            _ => String::new(),
        };
        match first.as_str() {
            "SELECT" | "WITH" | "VALUES" | "EXPLAIN" => self.query(s, stripped).await,
            "CREATE" | "ALTER" if p.is_kw_at(1, "VIEW") || p.is_kw_at(1, "OR") => self.create_view(s, stripped).await,
            "CREATE" | "DROP" | "TRUNCATE" | "ALTER" => {
                if p.is_kw_at(1, "USER")
                    || p.is_kw_at(1, "ROLE")
                    || p.is_kw_at(1, "MATERIALIZED")
                    || p.is_kw_at(1, "INDEX")
                {
                    return Err(SqlError::other(format!("doris-lite does not support: {stripped}")));
                }
                if p.is_kw_at(1, "DATABASE") || p.is_kw_at(1, "SCHEMA") {
                    // Database names are resolved from the statement itself.
                }
                let info = self.engine.ddl(s.db.as_deref(), stripped)?;
                Ok(Outcome::Done { affected: 0, info })
            }
            "USE" => {
                p.advance();
                let db = p.ident()?;
                // `USE catalog.db`
                let db = if p.eat(&Token::Period) { p.ident()? } else { db };
                self.engine.lock().db(&db)?;
                s.db = Some(db);
                Ok(done())
            }
            "SET" => self.set(s, &mut p),
            "SHOW" if p.is_kw_at(1, "ALTER") => self.show_alter(s, &mut p).await,
            "SHOW" => self.show(s, &mut p),
            "DESC" | "DESCRIBE" => {
                p.advance();
                let name = p.object_name()?;
                let all = p.eat_kw("ALL");
                let db = self.resolve(s, &name)?;
                let view = self.engine.lock().db(&db)?.views.get(&name.name).cloned();
                match view {
                    Some(v) => self.desc_view(s, &db, &v).await,
                    None => self.desc(s, &name, all),
                }
            }
            "INSERT" => self.insert(s, &mut p).await,
            "DELETE" => self.delete(s, &mut p).await,
            "UPDATE" => self.update(s, stripped).await,
            "BEGIN" | "COMMIT" | "ROLLBACK" | "START" => Ok(done()),
            "KILL" => Ok(done()),
            _ => Err(SqlError {
                code: 1064,
                message: format!(
                    "Syntax error in line 1:\n{stripped}\n^\nEncountered: {}\nExpected: a statement",
                    p.peek()
                ),
            }),
        }
    }

    fn context(&self, s: &Session) -> SessionContext {
        session_context(&self.engine, s)
    }

    /// `CREATE [OR REPLACE] VIEW` / `ALTER VIEW`: the query must plan (against the view's
    /// database) before the view is stored.
    async fn create_view(&self, s: &Session, sql: &str) -> Result<Outcome, SqlError> {
        let def = crate::engine::parse_view(sql)?;
        let mut vs = s.clone();
        vs.db = Some(self.resolve(s, &def.name)?);
        self.engine.lock().db(vs.db.as_deref().unwrap_or_default())?;
        let plan = view_plan(&self.engine, &vs, &def.view).await.map_err(|e| df_error(e, vs.db.as_deref()))?;
        if !def.view.columns.is_empty() && def.view.columns.len() != plan.schema().fields().len() {
            return Err(SqlError::other(format!(
                "The number of columns of view `{}` ({}) does not match the number of its query's columns ({})",
                def.name.name,
                def.view.columns.len(),
                plan.schema().fields().len()
            )));
        }
        let info = self.engine.ddl(s.db.as_deref(), sql)?;
        Ok(Outcome::Done { affected: 0, info })
    }
}

/// A session's DataFusion context: the internal catalog over the engine, session variables and
/// Doris' functions.
fn session_context(engine: &Arc<Engine>, s: &Session) -> SessionContext {
    let config = SessionConfig::new()
        .with_default_catalog_and_schema("internal", s.db.as_deref().unwrap_or(NO_DB))
        .with_information_schema(false)
        .with_target_partitions(2)
        .set_str("datafusion.sql_parser.dialect", "MySQL");
    let ctx = SessionContext::new_with_config(config);
    ctx.register_catalog("internal", Arc::new(DorisCatalog { engine: engine.clone(), session: Arc::new(s.clone()) }));
    ctx.register_variable(VarType::System, Arc::new(SessionVars(s.vars.clone())));
    ctx.register_variable(VarType::UserDefined, Arc::new(SessionVars(BTreeMap::new())));
    register_doris_functions(&ctx);
    register_session_functions(&ctx, s);
    register_from_unixtime(
        &ctx,
        crate::changelog::tz_offset_ms(s.vars.get("time_zone").map(String::as_str).unwrap_or("UTC")),
    );
    ctx
}

/// The logical plan of a view's query, in a session whose database is the view's.
async fn view_plan(
    engine: &Arc<Engine>,
    s: &Session,
    view: &crate::engine::View,
) -> datafusion::error::Result<LogicalPlan> {
    let ctx = session_context(engine, s);
    let query = crate::functions::rewrite_group_concat(&crate::ddl::lower_quoted_idents(&view.query));
    let sql = if view.columns.is_empty() {
        query
    } else {
        let names: Vec<String> = view.columns.iter().map(|(c, _)| format!("`{}`", c.to_ascii_lowercase())).collect();
        format!("SELECT * FROM ({query}) AS __view({})", names.join(", "))
    };
    ctx.state().create_logical_plan(&sql).await
}

impl Executor {
    async fn run_df(&self, ctx: &SessionContext, s: &Session, sql: &str) -> Result<ResultSet, SqlError> {
        let (schema, batches) = self.run_df_batches(ctx, s, sql).await?;
        batches_to_result(&schema, &batches)
    }

    /// Runs a query in DataFusion; fields are named as the user wrote them in the statement,
    /// else as the table defines them (DataFusion works in lower case).
    async fn run_df_batches(
        &self,
        ctx: &SessionContext,
        s: &Session,
        sql: &str,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let db = s.db.as_deref();
        let lowered = crate::functions::rewrite_group_concat(&crate::ddl::lower_quoted_idents(sql));
        let df = ctx.sql(&lowered).await.map_err(|e| df_error(e, db))?;
        let schema = df.schema().as_arrow().clone();
        let batches = df.collect().await.map_err(|e| df_error(e, db))?;
        let originals = self.column_spellings();
        let labels = select_labels(sql).filter(|l| l.len() == schema.fields().len());
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = spelling_in_sql(sql, f.name())
                    .or_else(|| originals.get(f.name().as_str()).cloned())
                    .or_else(|| labels.as_ref().and_then(|l| l[i].clone()))
                    .unwrap_or_else(|| f.name().clone());
                f.as_ref().clone().with_name(name)
            })
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SqlError::other(e.to_string()))?;
        Ok((schema, batches))
    }

    /// Runs a SELECT, with `TABLET(...)` and `@incr(...)` references, into Arrow batches.
    pub async fn query_batches(&self, s: &Session, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let ctx = self.context(s);
        let (sql, refs) = crate::table_refs::extract(sql)?;
        if !refs.is_empty() {
            let schema = Arc::new(MemorySchemaProvider::new());
            for r in &refs {
                let db = match &r.db {
                    Some(d) => d.clone(),
                    None => s.db.clone().ok_or(EngineError::NoDatabase)?,
                };
                let batches = match &r.kind {
                    RefKind::Tablets(ids) => {
                        self.tablet_batches(&db, &r.table, ids, s.var_true("show_hidden_columns"))?
                    }
                    RefKind::Incr(pairs) => vec![crate::changelog::read(&self.engine, &db, &r.table, pairs, s).await?],
                };
                let name = r.relation.rsplit('.').next().unwrap_or_default().to_string();
                let table = mem_table(batches).map_err(|e| SqlError::other(e.to_string()))?;
                schema.register_table(name, table).map_err(|e| SqlError::other(e.to_string()))?;
            }
            let catalog = MemoryCatalogProvider::new();
            catalog.register_schema("refs", schema).map_err(|e| SqlError::other(e.to_string()))?;
            ctx.register_catalog("__dl", Arc::new(catalog));
        }
        self.run_df_batches(&ctx, s, &sql).await
    }

    /// The snapshots of the named tablets of a table.
    fn tablet_batches(&self, db: &str, table: &str, ids: &[i64], hidden: bool) -> Result<Vec<RecordBatch>, SqlError> {
        let mut st = self.engine.lock();
        let t = st.table_mut(db, table)?;
        let all = t.tablet_snapshots(hidden).map_err(SqlError::other)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match t.tablets.iter().position(|tb| tb.id == *id) {
                Some(i) => out.push(all[i].clone()),
                None => {
                    return Err(SqlError::other(format!("tablet [{id}] does not exist in table [{table}]")));
                }
            }
        }
        Ok(out)
    }

    /// Runs one statement for Arrow Flight SQL: query results as Arrow batches, other results as
    /// UTF-8 columns, statements without a result as the one-column `StatusResult` table (`0`).
    pub async fn execute_arrow(&self, s: &mut Session, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        let stripped = strip_leading_comments(trimmed);
        let first: String = stripped.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        if ["SELECT", "WITH", "VALUES"].iter().any(|k| first.eq_ignore_ascii_case(k)) || stripped.starts_with('(') {
            return self.query_batches(s, stripped).await;
        }
        let rs = match self.execute(s, sql).await? {
            Outcome::Rows(rs) => rs,
            Outcome::Done { .. } => ResultSet::strings(&["StatusResult"], vec![vec![Some("0".into())]]),
        };
        let names: Vec<&str> = rs.columns.iter().map(|(n, _)| n.as_str()).collect();
        let batch = string_batch(&names, rs.rows).map_err(|e| SqlError::other(e.to_string()))?;
        Ok((batch.schema(), vec![batch]))
    }

    fn column_spellings(&self) -> std::collections::HashMap<String, String> {
        let st = self.engine.lock();
        let mut m = std::collections::HashMap::new();
        for d in st.dbs.values() {
            for t in d.tables.values() {
                for c in &t.schema.columns {
                    m.entry(c.name.to_ascii_lowercase()).or_insert_with(|| c.name.clone());
                }
                for (h, _) in t.schema.hidden_columns() {
                    m.entry(h.to_ascii_lowercase()).or_insert_with(|| h.to_string());
                }
            }
        }
        for n in [crate::changelog::BINLOG_OP, crate::changelog::BINLOG_TSO, crate::changelog::BINLOG_LSN] {
            m.entry(n.to_ascii_lowercase()).or_insert_with(|| n.to_string());
        }
        for n in INFO_SCHEMA_UPPER {
            m.entry(n.to_ascii_lowercase()).or_insert_with(|| n.to_string());
        }
        m
    }

    async fn query(&self, s: &Session, sql: &str) -> Result<Outcome, SqlError> {
        let (schema, batches) = self.query_batches(s, sql).await?;
        Ok(Outcome::Rows(batches_to_result(&schema, &batches)?))
    }

    fn set(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        loop {
            p.eat_kw("SESSION");
            p.eat_kw("GLOBAL");
            p.eat_kw("LOCAL");
            if p.eat_kw("NAMES") || p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
                let cs = p.literal_text().unwrap_or_else(|_| "utf8mb4".into());
                if p.eat_kw("COLLATE") {
                    let _ = p.literal_text();
                }
                for k in ["character_set_client", "character_set_connection", "character_set_results"] {
                    s.vars.insert(k.into(), cs.clone());
                }
            } else if p.eat_kw("PASSWORD") || p.eat_kw("TRANSACTION") {
                return Ok(done());
            } else {
                let raw = p.ident()?;
                let mut name = raw.trim_start_matches('@').to_string();
                while p.eat(&Token::Period) {
                    let part = p.ident()?;
                    name = format!("{name}.{part}");
                }
                let name = var_key(&[name]);
                if !p.eat(&Token::Eq) {
                    p.expect(&Token::Assignment)?;
                }
                let value = p.literal_text()?;
                let value = match value.to_ascii_uppercase().as_str() {
                    "ON" | "TRUE" => "true".to_string(),
                    "OFF" | "FALSE" => "false".to_string(),
                    _ => value,
                };
                if !raw.starts_with('@') || raw.starts_with("@@") {
                    s.vars.insert(name, value);
                }
            }
            if !p.eat(&Token::Comma) {
                break;
            }
        }
        p.expect_end()?;
        Ok(done())
    }

    fn show(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        let full = p.eat_kw("FULL");
        let like_or_where = |p: &mut Parser<'_>| -> Result<Option<String>, SqlError> {
            if p.eat_kw("LIKE") {
                Ok(Some(p.string()?))
            } else if p.eat_kw("WHERE") {
                // `WHERE Variable_name = 'x'` style filters.
                p.ident()?;
                if !p.eat(&Token::Eq) {
                    p.expect_kw("LIKE")?;
                }
                Ok(Some(p.string()?))
            } else {
                Ok(None)
            }
        };
        if p.eat_kw("CATALOGS") {
            // doris-lite has the internal catalog only, shown as Doris shows it.
            let like = like_or_where(p)?;
            let rows = [("0", "internal", "internal", "Yes", "UNRECORDED", None, "Doris internal catalog")]
                .into_iter()
                .filter(|r| like.as_deref().is_none_or(|l| like_match(l, r.1)))
                .map(|(id, name, ty, current, created, updated, comment)| {
                    vec![
                        Some(id.to_string()),
                        Some(name.to_string()),
                        Some(ty.to_string()),
                        Some(current.to_string()),
                        Some(created.to_string()),
                        updated,
                        Some(comment.to_string()),
                    ]
                })
                .collect();
            p.expect_end()?;
            let names = ["CatalogId", "CatalogName", "Type", "IsCurrent", "CreateTime", "LastUpdateTime", "Comment"];
            return Ok(Outcome::Rows(ResultSet::strings(&names, rows)));
        }
        if p.eat_kw("DATABASES") || p.eat_kw("SCHEMAS") {
            let like = like_or_where(p)?;
            let mut names = vec!["information_schema".to_string()];
            names.extend(self.engine.lock().dbs.keys().cloned());
            let rows = names
                .into_iter()
                .filter(|n| like.as_deref().is_none_or(|l| like_match(l, n)))
                .map(|n| vec![Some(n)])
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(&["Database"], rows)));
        }
        if p.eat_kws(&["TABLE", "STATUS"]) {
            // MySQL's columns, as Doris fills them for OLAP tables.
            let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
                p.ident()?
            } else {
                s.db.clone().ok_or(EngineError::NoDatabase)?
            };
            let like = like_or_where(p)?;
            p.expect_end()?;
            let st = self.engine.lock();
            let rows = st
                .db(&db)?
                .tables
                .values()
                .filter(|t| like.as_deref().is_none_or(|l| like_match(l, &t.name)))
                .map(|t| {
                    let n = t.row_count().to_string();
                    let mut r: Vec<Option<String>> = vec![Some(t.name.clone()), Some("Doris".into())];
                    r.extend([None, None, Some(n), Some("0".into()), Some("0".into())]);
                    r.extend([None, None, None, None, None, None, None]);
                    r.extend([Some("utf-8".into()), None, Some(String::new()), Some(t.schema.comment.clone())]);
                    r
                })
                .collect();
            let names = [
                "Name",
                "Engine",
                "Version",
                "Row_format",
                "Rows",
                "Avg_row_length",
                "Data_length",
                "Max_data_length",
                "Index_length",
                "Data_free",
                "Auto_increment",
                "Create_time",
                "Update_time",
                "Check_time",
                "Collation",
                "Checksum",
                "Create_options",
                "Comment",
            ];
            return Ok(Outcome::Rows(ResultSet::strings(&names, rows)));
        }
        if p.eat_kw("PROCESSLIST") {
            // doris-lite keeps no registry of connections: the one asking is the one listed.
            p.expect_end()?;
            let fe = format!("{}:{}", self.info.host, self.info.query_port);
            let row = vec![
                Some("Yes".into()),
                Some(s.connection_id.to_string()),
                Some(s.user.clone()),
                Some(self.info.host.clone()),
                None,
                Some("internal".into()),
                s.db.clone(),
                Some("Query".into()),
                Some("0".into()),
                Some("OK".into()),
                None,
                Some(if full { "SHOW FULL PROCESSLIST" } else { "SHOW PROCESSLIST" }.into()),
                Some(fe),
                Some(String::new()),
            ];
            let names = [
                "CurrentConnected",
                "Id",
                "User",
                "Host",
                "LoginTime",
                "Catalog",
                "Db",
                "Command",
                "Time",
                "State",
                "QueryId",
                "Info",
                "FE",
                "CloudCluster",
            ];
            return Ok(Outcome::Rows(ResultSet::strings(&names, vec![row])));
        }
        if p.eat_kw("DATA") {
            return self.show_data(s, p);
        }
        if p.eat_kw("TABLES") {
            let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
                p.ident()?
            } else {
                s.db.clone().ok_or(EngineError::NoDatabase)?
            };
            let like = like_or_where(p)?;
            let st = self.engine.lock();
            let d = st.db(&db)?;
            let mut named: Vec<(&String, &str)> = d.tables.keys().map(|n| (n, "BASE TABLE")).collect();
            named.extend(d.views.keys().map(|n| (n, "VIEW")));
            named.sort();
            let rows = named
                .into_iter()
                .filter(|(n, _)| like.as_deref().is_none_or(|l| like_match(l, n)))
                .map(|(n, ty)| {
                    let mut r = vec![Some(n.clone())];
                    if full {
                        r.push(Some(ty.into()));
                    }
                    r
                })
                .collect();
            let col = format!("Tables_in_{db}");
            let mut names = vec![col.as_str()];
            if full {
                names.push("Table_type");
            }
            return Ok(Outcome::Rows(ResultSet::strings(&names, rows)));
        }
        if p.eat_kws(&["CREATE", "TABLE"]) || p.eat_kws(&["CREATE", "VIEW"]) {
            let name = p.object_name()?;
            let db = self.resolve(s, &name)?;
            let st = self.engine.lock();
            if let Some(v) = st.db(&db)?.views.get(&name.name) {
                return Ok(Outcome::Rows(ResultSet::strings(
                    &["View", "Create View", "character_set_client", "collation_connection"],
                    vec![vec![
                        Some(name.name.clone()),
                        Some(show_create_view(&name.name, v)),
                        Some("utf8mb4".into()),
                        Some("utf8mb4_0900_bin".into()),
                    ]],
                )));
            }
            let t = described(&st, &db, &name.name)?;
            return Ok(Outcome::Rows(ResultSet::strings(
                &["Table", "Create Table"],
                vec![vec![Some(t.name.clone()), Some(show_create_table(t))]],
            )));
        }
        if p.eat_kws(&["CREATE", "DATABASE"]) {
            let db = p.ident()?;
            self.engine.lock().db(&db)?;
            return Ok(Outcome::Rows(ResultSet::strings(
                &["Database", "Create Database"],
                vec![vec![Some(db.clone()), Some(format!("CREATE DATABASE `{db}`"))]],
            )));
        }
        if p.eat_kw("COLUMNS") || p.eat_kw("FIELDS") {
            if !(p.eat_kw("FROM") || p.eat_kw("IN")) {
                return Err(SqlError { code: 1064, message: "Syntax error: expecting FROM".into() });
            }
            let mut name = p.object_name()?;
            if p.eat_kw("FROM") || p.eat_kw("IN") {
                name.db = Some(p.ident()?);
            }
            let like = like_or_where(p)?;
            let db = self.resolve(s, &name)?;
            let st = self.engine.lock();
            let t = described(&st, &db, &name.name)?;
            let mut rows = Vec::new();
            for (i, c) in t.schema.columns.iter().enumerate() {
                if like.as_deref().is_some_and(|l| !like_match(l, &c.name)) {
                    continue;
                }
                let default = match &c.default {
                    Some(crate::storage::DefaultValue::Literal(v)) => Some(v.clone()),
                    Some(crate::storage::DefaultValue::CurrentTimestamp(_)) => Some("CURRENT_TIMESTAMP".into()),
                    _ => None,
                };
                let key = Some(if i < t.schema.key_count { "YES" } else { "NO" }.to_string());
                let null = Some(if c.nullable { "YES" } else { "NO" }.to_string());
                let extra = Some(c.agg.map(|a| a.sql().to_string()).unwrap_or_default());
                if full {
                    rows.push(vec![
                        Some(c.name.clone()),
                        Some(c.ty.sql_name()),
                        None,
                        null,
                        key,
                        default,
                        extra,
                        Some("select,insert,update,references".into()),
                        Some(c.comment.clone()),
                    ]);
                } else {
                    rows.push(vec![Some(c.name.clone()), Some(c.ty.sql_name()), null, key, default, extra]);
                }
            }
            let names: &[&str] = if full {
                &["Field", "Type", "Collation", "Null", "Key", "Default", "Extra", "Privileges", "Comment"]
            } else {
                &["Field", "Type", "Null", "Key", "Default", "Extra"]
            };
            return Ok(Outcome::Rows(ResultSet::strings(names, rows)));
        }
        if p.eat_kw("VARIABLES") || p.eat_kw("STATUS") {
            let like = like_or_where(p)?;
            let defaults = default_vars();
            let rows = s
                .vars
                .iter()
                .filter(|(k, _)| like.as_deref().is_none_or(|l| like_match(l, k)))
                .map(|(k, v)| {
                    let d = defaults.get(k).cloned().unwrap_or_default();
                    let changed = if d == *v { "0" } else { "1" };
                    vec![Some(k.clone()), Some(v.clone()), Some(d), Some(changed.into())]
                })
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(
                &["Variable_name", "Value", "Default_Value", "Changed"],
                rows,
            )));
        }
        if p.eat_kw("FRONTENDS") {
            let i = &self.info;
            let row = vec![
                Some(format!("fe_{}", i.query_port)),
                Some(i.host.clone()),
                Some("9010".into()),
                Some(i.fe_http_port.to_string()),
                Some(i.query_port.to_string()),
                Some("9020".into()),
                Some(if i.flight_port == 0 { "-1".into() } else { i.flight_port.to_string() }),
                Some("FOLLOWER".into()),
                Some("true".into()),
                Some("1".into()),
                Some("true".into()),
                Some("true".into()),
                Some("1".into()),
                None,
                None,
                Some("true".into()),
                Some(String::new()),
                Some(VERSION_COMMENT.into()),
                Some("Yes".into()),
            ];
            return Ok(Outcome::Rows(ResultSet::strings(
                &[
                    "Name",
                    "Host",
                    "EditLogPort",
                    "HttpPort",
                    "QueryPort",
                    "RpcPort",
                    "ArrowFlightSqlPort",
                    "Role",
                    "IsMaster",
                    "ClusterId",
                    "Join",
                    "Alive",
                    "ReplayedJournalId",
                    "LastStartTime",
                    "LastHeartbeat",
                    "IsHelper",
                    "ErrMsg",
                    "Version",
                    "CurrentConnected",
                ],
                vec![row],
            )));
        }
        if p.eat_kw("BACKENDS") {
            let i = &self.info;
            let row = vec![
                Some("10001".into()),
                Some(i.host.clone()),
                Some("9050".into()),
                Some("9060".into()),
                Some(i.be_http_port.to_string()),
                Some("8060".into()),
                Some(if i.flight_port == 0 { "-1".into() } else { i.flight_port.to_string() }),
                Some("true".into()),
                Some(VERSION_COMMENT.into()),
            ];
            return Ok(Outcome::Rows(ResultSet::strings(
                &[
                    "BackendId",
                    "Host",
                    "HeartbeatPort",
                    "BePort",
                    "HttpPort",
                    "BrpcPort",
                    "ArrowFlightSqlPort",
                    "Alive",
                    "Version",
                ],
                vec![row],
            )));
        }
        if p.eat_kw("TRANSACTION") {
            let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
                p.ident()?
            } else {
                s.db.clone().ok_or(EngineError::NoDatabase)?
            };
            // Doris: `WHERE id = 123`, `label = 'l'` or `status = 'precommitted'` (every
            // transaction of the database in that state); anything else is refused.
            const WHERE_FORMS: &str = "Where clause should looks like one of them: id = 123 or label = 'label' \
                                       or status = 'prepare/precommitted/committed/visible/aborted'";
            let form = || EngineError::Other(WHERE_FORMS.into());
            p.expect_kw("WHERE").map_err(|_| EngineError::Other("Missing transaction id".into()))?;
            let key = p.ident().map_err(|_| form())?.to_ascii_lowercase();
            p.expect(&Token::Eq).map_err(|_| form())?;
            let val = p.literal_text().map_err(|_| form())?;
            let status = match key.as_str() {
                "id" if val.parse::<i64>().is_ok() => None,
                "label" => None,
                "status" => match val.to_ascii_uppercase().as_str() {
                    s @ ("PREPARE" | "PRECOMMITTED" | "COMMITTED" | "VISIBLE" | "ABORTED") => Some(s.to_string()),
                    _ => {
                        return Err(EngineError::Other(
                            "status should be prepare/precommitted/committed/visible/aborted".into(),
                        )
                        .into());
                    }
                },
                _ => return Err(form().into()),
            };
            let st = self.engine.lock();
            st.db(&db)?;
            let mut txns: Vec<_> = st
                .txns
                .values()
                .filter(|t| {
                    t.db == db
                        && match (key.as_str(), &status) {
                            ("label", _) => t.label == val,
                            (_, Some(s)) => t.status.name() == s,
                            _ => t.id.to_string() == val,
                        }
                })
                .collect();
            txns.sort_by_key(|t| t.id);
            let rows = txns
                .into_iter()
                .map(|t| {
                    vec![
                        Some(t.id.to_string()),
                        Some(t.label.clone()),
                        Some("BE: 127.0.0.1".into()),
                        Some(t.status.name().into()),
                        Some("BACKEND_STREAMING".into()),
                        Some(t.reason.clone()),
                    ]
                })
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(
                &["TransactionId", "Label", "Coordinator", "TransactionStatus", "LoadJobSourceType", "Reason"],
                rows,
            )));
        }
        if p.eat_kw("PARTITIONS") {
            p.expect_kw("FROM")?;
            let name = p.object_name()?;
            let db = self.resolve(s, &name)?;
            let st = self.engine.lock();
            let t = st.table(&db, &name.name)?;
            let buckets = t.tablets.len().to_string();
            let dist = match &t.schema.distribution {
                crate::storage::Distribution::Hash(cols, _) => cols.join(", "),
                crate::storage::Distribution::Random(_) => "RANDOM".into(),
            };
            let row = vec![
                Some(t.id.to_string()),
                Some(t.name.clone()),
                Some(t.version.to_string()),
                Some("NORMAL".into()),
                Some(String::new()),
                Some(String::new()),
                Some(dist),
                Some(buckets),
                Some("1".into()),
                Some(t.row_count().to_string()),
            ];
            return Ok(Outcome::Rows(ResultSet::strings(
                &[
                    "PartitionId",
                    "PartitionName",
                    "VisibleVersion",
                    "State",
                    "PartitionKey",
                    "Range",
                    "DistributionKey",
                    "Buckets",
                    "ReplicationNum",
                    "RowCount",
                ],
                vec![row],
            )));
        }
        if p.eat_kw("TABLETS") {
            p.expect_kw("FROM")?;
            let name = p.object_name()?;
            let db = self.resolve(s, &name)?;
            let st = self.engine.lock();
            let t = st.table(&db, &name.name)?;
            let rows = t
                .tablets
                .iter()
                .map(|tb| {
                    vec![
                        Some(tb.id.to_string()),
                        Some((tb.id + 1).to_string()),
                        Some("10001".into()),
                        Some(t.version.to_string()),
                        Some(tb.row_count().to_string()),
                    ]
                })
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(
                &["TabletId", "ReplicaId", "BackendId", "Version", "RowCount"],
                rows,
            )));
        }
        if p.eat_kw("WARNINGS")
            || p.eat_kw("ERRORS")
            || p.eat_kw("ENGINES")
            || p.eat_kw("COLLATION")
            || p.eat_kw("CHARSET")
            || p.eat_kw("PROCESSLIST")
        {
            return Ok(Outcome::Rows(ResultSet::strings(&["Level", "Code", "Message"], Vec::new())));
        }
        Err(SqlError { code: 1064, message: format!("Syntax error: doris-lite does not support SHOW {}", p.rest()) })
    }

    /// `SHOW ALTER TABLE COLUMN [FROM db] [WHERE …] [ORDER BY …] [LIMIT …]`: the schema-change
    /// jobs of a database, filtered and ordered as asked.
    async fn show_alter(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        p.expect_kw("ALTER")?;
        p.expect_kw("TABLE")?;
        if !p.eat_kw("COLUMN") {
            return Err(SqlError::other(format!(
                "doris-lite does not support SHOW ALTER TABLE {}: it has schema-change jobs only (SHOW ALTER TABLE COLUMN)",
                p.peek()
            )));
        }
        let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
            p.ident()?
        } else {
            s.db.clone().ok_or(EngineError::NoDatabase)?
        };
        let rest = p.rest().to_string();
        const NAMES: [&str; 13] = [
            "JobId",
            "TableName",
            "CreateTime",
            "FinishTime",
            "IndexName",
            "IndexId",
            "OriginIndexId",
            "SchemaVersion",
            "TransactionId",
            "State",
            "Msg",
            "Progress",
            "Timeout",
        ];
        let rows: Vec<Vec<Option<String>>> = {
            let st = self.engine.lock();
            st.db(&db)?;
            st.alter_jobs
                .iter()
                .filter(|j| j.db == db)
                .map(|j| {
                    vec![
                        Some(j.job_id.to_string()),
                        Some(j.table.clone()),
                        Some(time_with_ms(j.create_ms)),
                        Some(time_with_ms(j.finish_ms)),
                        Some(j.table.clone()),
                        Some(j.index_id.to_string()),
                        Some(j.origin_index_id.to_string()),
                        Some(format!("{}:{}", j.schema_version, j.index_id)),
                        Some(j.txn_id.to_string()),
                        Some("FINISHED".into()),
                        Some(String::new()),
                        Some("N/A".into()),
                        Some("2592000".into()),
                    ]
                })
                .collect()
        };
        let batch = string_batch(&NAMES, rows).map_err(|e| SqlError::other(e.to_string()))?;
        let ctx = SessionContext::new();
        ctx.register_table("__alter_jobs", mem_table(vec![batch]).map_err(|e| SqlError::other(e.to_string()))?)
            .map_err(|e| SqlError::other(e.to_string()))?;
        let sql = format!("SELECT * FROM __alter_jobs {}", crate::ddl::lower_quoted_idents(&rest));
        let df = ctx.sql(&sql).await.map_err(|e| df_error(e, Some(&db)))?;
        let batches = df.collect().await.map_err(|e| df_error(e, Some(&db)))?;
        let mut out = ResultSet::strings(&NAMES, Vec::new());
        for b in &batches {
            let rs = batches_to_result(&b.schema(), std::slice::from_ref(b))?;
            out.rows.extend(rs.rows);
        }
        Ok(Outcome::Rows(out))
    }

    /// `SHOW DATA [FROM [db.]table]`: the data size of each table of the current database (with
    /// the database's Total / Quota / Left), or of one table's index. doris-lite keeps one
    /// replica, no remote storage, and measures a table as the Arrow size of its rows.
    fn show_data(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let from = if p.eat_kw("FROM") { Some(p.object_name()?) } else { None };
        if !p.at_end() {
            return Err(SqlError::other(format!("doris-lite does not support this SHOW DATA clause: {}", p.rest())));
        }
        let mut st = self.engine.lock();
        if let Some(name) = from {
            let db = self.resolve(s, &name)?;
            let t = st.table_mut(&db, &name.name)?;
            let bytes = table_bytes(t)?;
            let rows = t.row_count().to_string();
            let tablets = t.tablets.len().to_string();
            let names = ["TableName", "IndexName", "Size", "ReplicaCount", "RowCount", "RemoteSize"];
            let row = vec![
                Some(name.name.clone()),
                Some(name.name.clone()),
                Some(byte_units(bytes)),
                Some(tablets.clone()),
                Some(rows),
                Some(byte_units(0)),
            ];
            let total =
                vec![None, Some("Total".into()), Some(byte_units(bytes)), Some(tablets), None, Some(byte_units(0))];
            return Ok(Outcome::Rows(ResultSet::strings(&names, vec![row, total])));
        }
        let db = s.db.clone().ok_or(EngineError::NoDatabase)?;
        let d = st.db_mut(&db)?;
        let mut rows = Vec::new();
        let (mut total, mut replicas) = (0u64, 0usize);
        for t in d.tables.values_mut() {
            let bytes = table_bytes(t)?;
            total += bytes;
            replicas += t.tablets.len();
            rows.push(vec![
                Some(t.name.clone()),
                Some(byte_units(bytes)),
                Some(t.tablets.len().to_string()),
                Some(byte_units(0)),
            ]);
        }
        // Doris' default quotas: 1 PiB of data and 1073741824 replicas a database.
        let (quota, replica_quota) = (1u64 << 50, 1_073_741_824usize);
        rows.push(vec![Some("Total".into()), Some(byte_units(total)), Some(replicas.to_string()), Some(byte_units(0))]);
        rows.push(vec![
            Some("Quota".into()),
            Some(byte_units(quota)),
            Some(replica_quota.to_string()),
            Some(String::new()),
        ]);
        rows.push(vec![
            Some("Left".into()),
            Some(byte_units(quota.saturating_sub(total))),
            Some(replica_quota.saturating_sub(replicas).to_string()),
            Some(String::new()),
        ]);
        Ok(Outcome::Rows(ResultSet::strings(&["TableName", "Size", "ReplicaCount", "RemoteSize"], rows)))
    }

    /// DESCRIBE of a view: its query's columns, all nullable, none a key.
    async fn desc_view(&self, s: &Session, db: &str, v: &crate::engine::View) -> Result<Outcome, SqlError> {
        let mut vs = s.clone();
        vs.db = Some(db.to_string());
        let plan = view_plan(&self.engine, &vs, v).await.map_err(|e| df_error(e, Some(db)))?;
        let spellings = self.column_spellings();
        let rows = plan
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = match v.columns.get(i) {
                    Some((c, _)) => c.clone(),
                    None => spellings.get(f.name().as_str()).cloned().unwrap_or_else(|| f.name().clone()),
                };
                vec![
                    Some(name),
                    Some(ColKind::of(f.data_type()).doris_name().to_ascii_lowercase()),
                    Some("Yes".into()),
                    Some("false".into()),
                    None,
                    Some("NONE".into()),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Field", "Type", "Null", "Key", "Default", "Extra"], rows)))
    }

    fn desc(&self, s: &Session, name: &ObjectName, all: bool) -> Result<Outcome, SqlError> {
        let db = self.resolve(s, name)?;
        let st = self.engine.lock();
        let t = described(&st, &db, &name.name)?;
        let mut cols: Vec<(String, DorisType, bool, bool, Option<String>, String)> = t
            .schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let extra = match (t.schema.keys_type, i < t.schema.key_count) {
                    (_, true) => String::new(),
                    (KeysType::Aggregate, false) => c.agg.map(|a| a.sql().to_string()).unwrap_or_default(),
                    (KeysType::Unique, false) => "REPLACE".into(),
                    (KeysType::Duplicate, false) => "NONE".into(),
                };
                let default = match &c.default {
                    Some(crate::storage::DefaultValue::Literal(v)) => Some(v.clone()),
                    Some(crate::storage::DefaultValue::CurrentTimestamp(_)) => Some("CURRENT_TIMESTAMP".into()),
                    _ => None,
                };
                (c.name.clone(), c.ty.clone(), c.nullable, i < t.schema.key_count, default, extra)
            })
            .collect();
        if s.var_true("show_hidden_columns") {
            for (n, ty) in t.schema.hidden_columns() {
                cols.push((n.to_string(), ty, false, false, Some("0".into()), "REPLACE".into()));
            }
        }
        let bool_s = |b: bool, t: &str, f: &str| Some(if b { t } else { f }.to_string());
        if all {
            let rows = cols
                .into_iter()
                .enumerate()
                .map(|(i, (n, ty, null, key, def, extra))| {
                    vec![
                        if i == 0 { Some(t.name.clone()) } else { Some(String::new()) },
                        if i == 0 { Some(t.schema.keys_type.api_name().into()) } else { Some(String::new()) },
                        Some(n),
                        Some(desc_type(&ty)),
                        Some(ty.primitive_name()),
                        bool_s(null, "Yes", "No"),
                        bool_s(key, "true", "false"),
                        def,
                        Some(extra),
                        Some("true".into()),
                        Some(String::new()),
                        Some(String::new()),
                    ]
                })
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(
                &[
                    "IndexName",
                    "IndexKeysType",
                    "Field",
                    "Type",
                    "InternalType",
                    "Null",
                    "Key",
                    "Default",
                    "Extra",
                    "Visible",
                    "DefineExpr",
                    "WhereClause",
                ],
                rows,
            )));
        }
        let rows = cols
            .into_iter()
            .map(|(n, ty, null, key, def, extra)| {
                vec![
                    Some(n),
                    Some(desc_type(&ty)),
                    bool_s(null, "Yes", "No"),
                    bool_s(key, "true", "false"),
                    def,
                    Some(extra),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Field", "Type", "Null", "Key", "Default", "Extra"], rows)))
    }

    async fn insert(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        let overwrite = !p.eat_kw("INTO");
        if overwrite {
            p.expect_kw("OVERWRITE")?;
        }
        p.eat_kw("TABLE");
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        if p.is_kw("PARTITION") || p.is_kw("PARTITIONS") {
            if overwrite {
                // Rows are not partitioned here: replacing the whole table would destroy the
                // other partitions' rows.
                return Err(SqlError::other(format!(
                    "doris-lite does not support INSERT OVERWRITE of single partitions (table `{}`); \
                     overwrite the whole table instead",
                    name.name
                )));
            }
            p.advance();
            p.ident_list()?;
        }
        let mut label = None;
        if p.eat_kws(&["WITH", "LABEL"]) {
            label = Some(p.ident()?);
        }
        let cols = if matches!(p.peek(), Token::LParen) && !p.is_kw_at(1, "SELECT") && !p.is_kw_at(1, "WITH") {
            Some(p.ident_list()?)
        } else {
            None
        };
        let query = p.rest().to_string();
        if query.is_empty() {
            return Err(SqlError { code: 1064, message: "Syntax error: INSERT needs VALUES or SELECT".into() });
        }
        let schema = self.engine.lock().table(&db, &name.name)?.schema.clone();
        if overwrite && schema.changelog_enabled() {
            return Err(SqlError::other(format!(
                "doris-lite does not support INSERT OVERWRITE into table `{}`, whose changelog would not record \
                 the rows it replaces",
                name.name
            )));
        }
        let targets: Vec<String> = match &cols {
            Some(c) => c.clone(),
            None => schema.columns.iter().map(|c| c.name.clone()).collect(),
        };
        for c in &targets {
            if schema.column_index(c).is_none()
                && !c.eq_ignore_ascii_case(DELETE_SIGN)
                && !c.eq_ignore_ascii_case(SEQUENCE_COL)
            {
                return Err(EngineError::UnknownColumn(c.clone(), name.name.clone()).into());
            }
        }
        let ctx = self.context(s);
        let rs = self.run_df(&ctx, s, &query).await?;
        if rs.columns.len() != targets.len() {
            return Err(SqlError::other("Column count doesn't match value count"));
        }
        let partial = !overwrite
            && s.var_true("enable_unique_key_partial_update")
            && cols.is_some()
            && schema.keys_type == KeysType::Unique;
        let strict = s.var_true("enable_insert_strict");
        let map: Vec<Option<usize>> =
            schema.columns.iter().map(|c| targets.iter().position(|t| t.eq_ignore_ascii_case(&c.name))).collect();
        let del_idx = targets.iter().position(|t| t.eq_ignore_ascii_case(DELETE_SIGN));
        let seq_idx = targets.iter().position(|t| t.eq_ignore_ascii_case(SEQUENCE_COL));
        let seq_type = schema.sequence_type();
        let mut ops = Vec::with_capacity(rs.rows.len());
        let mut filtered = 0u64;
        for row in &rs.rows {
            let mut values = Vec::with_capacity(schema.columns.len());
            let mut ok = true;
            for (ci, c) in schema.columns.iter().enumerate() {
                let v = match map[ci] {
                    Some(i) => match &row[i] {
                        None if c.nullable => Ok(Value::Null),
                        None => {
                            Err(format!("Insert has filtered data in strict mode. column `{}` is not nullable", c.name))
                        }
                        Some(text) => c.ty.parse_text(text),
                    },
                    None => c.default_value(),
                };
                match v {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        if strict {
                            return Err(SqlError::other(format!("Insert has filtered data in strict mode. {e}")));
                        }
                        ok = false;
                        break;
                    }
                }
            }
            if !ok {
                filtered += 1;
                continue;
            }
            let delete = del_idx.and_then(|i| row[i].as_deref()).is_some_and(|v| v != "0");
            let seq = match (seq_idx, &seq_type) {
                (Some(i), Some(t)) => row[i].as_deref().and_then(|v| t.parse_text(v).ok()).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            ops.push(RowOp { values, delete, seq });
        }
        let _ = filtered;
        let affected = ops.len() as u64;
        let mask = partial.then(|| map.iter().map(|m| m.is_some()).collect());
        let label = label.unwrap_or_else(|| format!("insert_{}", hex_id()));
        let begun = self.engine.begin(&db, &name.name, &label)?;
        let txn = begun.txn_id;
        let write = if overwrite { TableWrite::Overwrite(ops) } else { TableWrite::Rows { ops, partial: mask } };
        if let Err(e) = self.engine.commit(txn, write) {
            self.engine.abort(txn, &e.to_string());
            return Err(e.into());
        }
        Ok(Outcome::Done { affected, info: format!("{{'label':'{label}', 'status':'VISIBLE', 'txnId':'{txn}'}}") })
    }

    async fn delete(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        p.expect_kw("FROM")?;
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        // Doris' grammar: `DELETE FROM t [alias] [PARTITION …] [USING …] [WHERE …]`. Anything
        // else is a syntax error — never a condition wider than the one written.
        let alias = if p.eat_kw("AS") {
            Some(p.ident()?)
        } else {
            match p.peek() {
                Token::Word(w) if w.quote_style.is_some() || !reserved_word(&w.value) => Some(p.ident()?),
                _ => None,
            }
        };
        if p.eat_kw("PARTITION") || p.eat_kw("PARTITIONS") {
            if matches!(p.peek(), Token::LParen) {
                p.ident_list()?;
            } else {
                p.ident()?;
            }
        }
        if p.is_kw("USING") {
            return Err(SqlError::other(
                "DELETE … USING is not supported by doris-lite; delete by a condition on the table's own columns",
            ));
        }
        let cond = if p.eat_kw("WHERE") {
            let cond = p.rest().to_string();
            if cond.is_empty() {
                p.unexpected_here("a condition after WHERE")?;
            }
            cond
        } else {
            p.expect_end()?;
            "true".to_string()
        };
        // Columns may be qualified by the alias, else by the table's name (`t.col`, as SQLAlchemy
        // writes them).
        let qualifier = alias.unwrap_or_else(|| name.name.clone()).replace('`', "``");
        for _attempt in 0..5 {
            let target = self.dml_target(s, &db, &name.name)?;
            let (version, keys_type, hidden) = (target.version, target.keys_type, target.hidden);
            let q = format!("SELECT * FROM {TARGET} AS `{qualifier}` WHERE {cond}");
            let rs = self.run_df(&target.ctx, s, &q).await?;
            let rowid_col = rs.columns.iter().position(|(n, _)| n == ROWID_COL).unwrap_or(0);
            let affected = rs.rows.len() as u64;
            let write = match keys_type {
                KeysType::Duplicate => TableWrite::DeleteRowIds(
                    rs.rows.iter().filter_map(|r| r[rowid_col].as_deref().and_then(|v| v.parse().ok())).collect(),
                ),
                _ => {
                    let st = self.engine.lock();
                    let t = st.table(&db, &name.name)?;
                    let seq_pos = rs.columns.iter().position(|(n, _)| n.eq_ignore_ascii_case(SEQUENCE_COL));
                    let seq_ty = t.schema.sequence_type();
                    let ops = rs
                        .rows
                        .iter()
                        .map(|r| {
                            let values = t
                                .schema
                                .columns
                                .iter()
                                .enumerate()
                                .map(|(i, c)| {
                                    r[i].as_deref().and_then(|v| c.ty.parse_text(v).ok()).unwrap_or(Value::Null)
                                })
                                .collect();
                            let seq = match (seq_pos, &seq_ty) {
                                (Some(i), Some(ty)) if hidden => {
                                    r[i].as_deref().and_then(|v| ty.parse_text(v).ok()).unwrap_or(Value::Null)
                                }
                                _ => Value::Null,
                            };
                            RowOp { values, delete: true, seq }
                        })
                        .collect();
                    TableWrite::Rows { ops, partial: None }
                }
            };
            match self.commit_unless_changed(&db, &name.name, "delete", version, affected, write)? {
                Some(done) => return Ok(done),
                None => continue,
            }
        }
        Err(SqlError::other("DELETE conflicted with concurrent loads, please retry"))
    }

    /// A snapshot of the table a DELETE or UPDATE changes (with its row ids, and the hidden
    /// columns when it has a sequence), registered as [`TARGET`] in a context that also sees
    /// every table of the catalog (for `UPDATE … FROM`).
    fn dml_target(&self, s: &Session, db: &str, table: &str) -> Result<DmlTarget, SqlError> {
        let (batch, version, keys_type, hidden) = {
            let mut st = self.engine.lock();
            let t = st.table_mut(db, table)?;
            let keys_type = t.schema.keys_type;
            let hidden = keys_type == KeysType::Unique && t.schema.has_sequence();
            let b = lower_case_fields(t.snapshot(hidden, true).map_err(SqlError::other)?)
                .map_err(|e| SqlError::other(e.to_string()))?;
            (b, t.data_version, keys_type, hidden)
        };
        let ctx = self.context(s);
        let schema = Arc::new(MemorySchemaProvider::new());
        let table = mem_table(vec![batch]).map_err(|e| SqlError::other(e.to_string()))?;
        schema.register_table("__target".into(), table).map_err(|e| SqlError::other(e.to_string()))?;
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema("dml", schema).map_err(|e| SqlError::other(e.to_string()))?;
        ctx.register_catalog("__dl_dml", Arc::new(catalog));
        Ok(DmlTarget { ctx, version, keys_type, hidden })
    }

    /// Commits `write` in a transaction labelled `<kind>_…`, unless the table changed since the
    /// snapshot the write was computed from (then `None`: compute it again).
    fn commit_unless_changed(
        &self,
        db: &str,
        table: &str,
        kind: &str,
        version: u64,
        affected: u64,
        write: TableWrite,
    ) -> Result<Option<Outcome>, SqlError> {
        let label = format!("{kind}_{}", hex_id());
        let begun = self.engine.begin(db, table, &label)?;
        {
            let st = self.engine.lock();
            if st.table(db, table)?.data_version != version {
                drop(st);
                self.engine.abort(begun.txn_id, "concurrent write, retrying");
                return Ok(None);
            }
        }
        self.engine.commit(begun.txn_id, write)?;
        Ok(Some(Outcome::Done {
            affected,
            info: format!("{{'label':'{label}', 'status':'VISIBLE', 'txnId':'{}'}}", begun.txn_id),
        }))
    }

    /// `UPDATE t [alias] SET col = expr, … [FROM t2 [JOIN …]] [WHERE …]` on a UNIQUE table, as
    /// Doris runs it: an insert of every matching row with the assigned columns replaced, so the
    /// changelog records update-before/after. Anything else Doris' grammar does not have is an
    /// error.
    async fn update(&self, s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
        use datafusion::sql::sqlparser::ast::{
            AssignmentTarget, ObjectNamePart, Statement, TableFactor, UpdateTableFromKind,
        };
        let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
        let syntax =
            |detail: String| SqlError { code: 1064, message: format!("Syntax error in line 1:\n{sql}\n{detail}") };
        let mut statements =
            datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).map_err(|e| syntax(e.to_string()))?;
        let (Some(Statement::Update(u)), None) = (statements.pop(), statements.pop()) else {
            return Err(syntax("Expected: one UPDATE statement".into()));
        };
        if !u.table.joins.is_empty()
            || u.returning.is_some()
            || u.output.is_some()
            || u.or.is_some()
            || !u.order_by.is_empty()
            || u.limit.is_some()
            || !u.optimizer_hints.is_empty()
            || matches!(u.from, Some(UpdateTableFromKind::BeforeSet(_)))
        {
            return Err(syntax(
                "Expected: UPDATE table [alias] SET column = expression, … [FROM relations] [WHERE condition]".into(),
            ));
        }
        let TableFactor::Table { name: tname, alias, args: None, partitions, .. } = &u.table.relation else {
            return Err(syntax("Expected: a table name after UPDATE".into()));
        };
        let parts: Vec<String> = tname
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(i) => Ok(i.value.clone()),
                other => Err(syntax(format!("Encountered: {other}"))),
            })
            .collect::<Result<_, _>>()?;
        let (db, table) = match parts.as_slice() {
            [t] => (s.db.clone().ok_or(EngineError::NoDatabase)?, t.clone()),
            [d, t] => (d.clone(), t.clone()),
            [_, d, t] => (d.clone(), t.clone()),
            _ => return Err(syntax(format!("Encountered: {tname}"))),
        };
        if !partitions.is_empty() {
            return Err(syntax("Encountered: PARTITION".into()));
        }
        let alias = alias.as_ref().map(|a| a.name.value.clone());
        let schema = self.engine.lock().table(&db, &table)?.schema.clone();
        if schema.keys_type != KeysType::Unique {
            return Err(SqlError::other("Only unique table could be updated."));
        }
        // Each assignment names a column of the target, qualified (if at all) by its alias, or
        // by its name when it has none.
        let qualifier = alias.clone().unwrap_or_else(|| table.clone());
        let mut assigned: Vec<Option<String>> = vec![None; schema.columns.len()];
        let mut unknown = Vec::new();
        for a in &u.assignments {
            let AssignmentTarget::ColumnName(col) = &a.target else {
                return Err(syntax(format!("Encountered: {}", a.target)));
            };
            let names: Vec<String> = col.0.iter().map(|p| p.to_string().trim_matches('`').to_string()).collect();
            let invalid = || SqlError::other(format!("column in assignment list is invalid, {}", names.join(".")));
            match names.as_slice() {
                [_] => {}
                [t, _] if t.eq_ignore_ascii_case(&qualifier) => {}
                [d, t, _] if alias.is_none() && d.eq_ignore_ascii_case(&db) && t.eq_ignore_ascii_case(&table) => {}
                _ => return Err(invalid()),
            }
            let column = names.last().cloned().unwrap_or_default();
            match schema.column_index(&column) {
                Some(i) if i < schema.key_count => {
                    return Err(SqlError::other("Only value columns of unique table could be updated"));
                }
                Some(i) => assigned[i] = Some(a.value.to_string()),
                None => unknown.push(column),
            }
        }
        if !unknown.is_empty() {
            return Err(SqlError::other(format!("unknown column in assignment list: {}", unknown.join(", "))));
        }
        let q = qualifier.replace('`', "``");
        let mut items: Vec<String> = schema
            .columns
            .iter()
            .zip(&assigned)
            .map(|(c, a)| match a {
                Some(expr) => format!("({expr})"),
                None => format!("`{q}`.`{}`", c.name.replace('`', "``")),
            })
            .collect();
        let hidden_seq = schema.sequence_type().is_some();
        if hidden_seq {
            items.push(format!("`{q}`.`{}`", SEQUENCE_COL.to_ascii_lowercase()));
        }
        let from = match &u.from {
            Some(UpdateTableFromKind::AfterSet(from)) => {
                format!(", {}", from.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", "))
            }
            _ => String::new(),
        };
        let filter = u.selection.as_ref().map(|w| format!(" WHERE {w}")).unwrap_or_default();
        let query = format!("SELECT {} FROM {TARGET} AS `{q}`{from}{filter}", items.join(", "));
        let seq_ty = schema.sequence_type();
        for _attempt in 0..5 {
            let target = self.dml_target(s, &db, &table)?;
            let rs = self.run_df(&target.ctx, s, &query).await?;
            let mut ops = Vec::with_capacity(rs.rows.len());
            for row in &rs.rows {
                let mut values = Vec::with_capacity(schema.columns.len());
                for (i, c) in schema.columns.iter().enumerate() {
                    values.push(match &row[i] {
                        None if c.nullable => Value::Null,
                        None => {
                            return Err(SqlError::other(format!(
                                "Insert has filtered data in strict mode. column `{}` is not nullable",
                                c.name
                            )));
                        }
                        Some(text) => {
                            c.ty.parse_text(text)
                                .map_err(|e| SqlError::other(format!("Insert has filtered data in strict mode. {e}")))?
                        }
                    });
                }
                let seq = match (&seq_ty, hidden_seq) {
                    (Some(ty), true) => {
                        row[schema.columns.len()].as_deref().and_then(|v| ty.parse_text(v).ok()).unwrap_or(Value::Null)
                    }
                    _ => Value::Null,
                };
                ops.push(RowOp { values, delete: false, seq });
            }
            let affected = ops.len() as u64;
            let write = TableWrite::Rows { ops, partial: None };
            if let Some(done) = self.commit_unless_changed(&db, &table, "update", target.version, affected, write)? {
                return Ok(done);
            }
        }
        Err(SqlError::other("UPDATE conflicted with concurrent loads, please retry"))
    }
}

/// The tokens of a statement with their byte ranges in it (MySQL's lexical rules: quotes,
/// backslash escapes, comments).
pub(crate) fn token_ranges(sql: &str) -> Result<Vec<(Token, std::ops::Range<usize>)>, SqlError> {
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;
    let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError { code: 1064, message: format!("Syntax error: {e}") })?;
    Ok(tokens
        .into_iter()
        .map(|t| {
            let start = crate::ddl::offset_of(sql, t.span.start.line, t.span.start.column);
            let end = crate::ddl::offset_of(sql, t.span.end.line, t.span.end.column);
            (t.token, start..end.max(start))
        })
        .collect())
}

/// The statements of one query text (`a; b`), split at the semicolons outside quotes and
/// comments; empty statements are dropped. A text that does not tokenize is one statement (its
/// error comes from running it).
pub fn split_statements(sql: &str) -> Vec<&str> {
    let Ok(tokens) = token_ranges(sql) else { return vec![sql] };
    let mut out = Vec::new();
    let mut start = 0;
    for (t, r) in &tokens {
        if *t == Token::SemiColon {
            out.push(&sql[start..r.start]);
            start = r.end;
        }
    }
    out.push(&sql[start..]);
    let kept: Vec<&str> = out.into_iter().filter(|s| !strip_leading_comments(s.trim()).trim().is_empty()).collect();
    if kept.is_empty() { vec![sql] } else { kept }
}

/// The byte ranges of the `?` placeholders of a prepared statement.
pub fn placeholders(sql: &str) -> Result<Vec<std::ops::Range<usize>>, SqlError> {
    Ok(token_ranges(sql)?
        .into_iter()
        .filter(|(t, _)| matches!(t, Token::Placeholder(p) if p == "?"))
        .map(|(_, r)| r)
        .collect())
}

/// `sql` with each placeholder replaced by its SQL literal, in order.
pub fn bind(sql: &str, holes: &[std::ops::Range<usize>], literals: &[String]) -> String {
    let mut out = String::with_capacity(sql.len() + literals.iter().map(String::len).sum::<usize>());
    let mut at = 0;
    for (r, lit) in holes.iter().zip(literals) {
        out.push_str(&sql[at..r.start]);
        out.push_str(lit);
        at = r.end;
    }
    out.push_str(&sql[at..]);
    out
}

/// A string as a MySQL string literal.
pub fn quote_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The table DESCRIBE, SHOW CREATE TABLE and SHOW COLUMNS name. A missing one is answered as
/// Doris' catalog lookup reports it: 1105 `Unknown table 't'` (what SQLAlchemy dialects'
/// `has_table`, which runs DESCRIBE, reads), not the 1146 of a query.
/// A table's data size: the Arrow size of its rows.
fn table_bytes(t: &mut crate::storage::Table) -> Result<u64, SqlError> {
    let batches = t.tablet_snapshots(false).map_err(SqlError::other)?;
    Ok(batches.iter().map(|b| b.get_array_memory_size() as u64).sum())
}

/// A byte count as Doris prints sizes: three decimals and the largest unit it exceeds
/// (`0.000 ` for nothing, `512.000 B`, `1.500 KB`, … `TB`).
fn byte_units(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "TB"), (1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")];
    if bytes == 0 {
        return "0.000 ".into();
    }
    for (size, unit) in UNITS {
        if bytes > size {
            return format!("{:.3} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}.000 B")
}

/// A time as Doris' job listings print it (`yyyy-MM-dd HH:mm:ss.SSS`, UTC here).
fn time_with_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// `SHOW CREATE VIEW` text.
fn show_create_view(name: &str, v: &crate::engine::View) -> String {
    let mut out = format!("CREATE VIEW `{name}`");
    if !v.columns.is_empty() {
        let cols: Vec<String> = v
            .columns
            .iter()
            .map(
                |(c, comment)| {
                    if comment.is_empty() { format!("`{c}`") } else { format!("`{c}` COMMENT '{comment}'") }
                },
            )
            .collect();
        out.push_str(&format!(" ({})", cols.join(", ")));
    }
    if !v.comment.is_empty() {
        out.push_str(&format!(" COMMENT '{}'", v.comment));
    }
    out.push_str(" AS ");
    out.push_str(&v.query);
    out
}

fn described<'s>(st: &'s crate::engine::State, db: &str, table: &str) -> Result<&'s crate::storage::Table, SqlError> {
    st.table(db, table).map_err(|e| match e {
        EngineError::UnknownTable(t, _) => SqlError::other(format!("Unknown table '{t}'")),
        other => other.into(),
    })
}

/// A word that cannot be an unquoted table alias: the keywords sqlparser reserves after a table
/// name, and those of conditions and statements.
fn reserved_word(word: &str) -> bool {
    use datafusion::sql::sqlparser::keywords::{ALL_KEYWORDS, ALL_KEYWORDS_INDEX, RESERVED_FOR_TABLE_ALIAS};
    const MORE: &[&str] = &[
        "FROM",
        "AND",
        "OR",
        "NOT",
        "IN",
        "IS",
        "NULL",
        "LIKE",
        "BETWEEN",
        "PARTITIONS",
        "TABLE",
        "INTO",
        "VALUES",
        "DELETE",
        "UPDATE",
        "INSERT",
        "AS",
        "BY",
    ];
    let upper = word.to_ascii_uppercase();
    MORE.contains(&upper.as_str())
        || ALL_KEYWORDS
            .binary_search(&upper.as_str())
            .is_ok_and(|i| RESERVED_FOR_TABLE_ALIAS.contains(&ALL_KEYWORDS_INDEX[i]))
}

/// Where a DELETE or UPDATE reads the rows it changes.
const TARGET: &str = "__dl_dml.dml.__target";

/// See [`Executor::dml_target`].
struct DmlTarget {
    ctx: SessionContext,
    version: u64,
    keys_type: KeysType,
    hidden: bool,
}

/// The labels Doris gives the items of a plain `SELECT` (as MySQL does): an expression's text as
/// written (`1`, `sum(x)`), a string literal's value (`'a'` → `a`), an alias. `None` where the
/// statement is not one plain SELECT without `*`.
fn select_labels(sql: &str) -> Option<Vec<Option<String>>> {
    use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement, Value};
    let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
    let statements = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).ok()?;
    let [Statement::Query(q)] = statements.as_slice() else { return None };
    let SetExpr::Select(select) = q.body.as_ref() else { return None };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(Expr::Value(v)) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(Some(s.clone())),
                other => Some(Some(other.to_string())),
            },
            SelectItem::UnnamedExpr(e) => Some(Some(e.to_string())),
            SelectItem::ExprWithAlias { alias, .. } => Some(Some(alias.value.clone())),
            _ => None,
        })
        .collect()
}

const INFO_SCHEMA_UPPER: &[&str] = &[
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

/// The spelling of identifier `name` in `sql` (case-insensitive whole-word match).
fn spelling_in_sql(sql: &str, name: &str) -> Option<String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let lower = sql.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name) {
        let at = from + i;
        let end = at + name.len();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let before_ok = at == 0 || !word(bytes[at - 1]);
        let after_ok = end >= bytes.len() || !word(bytes[end]);
        if before_ok && after_ok {
            return Some(sql[at..end].to_string());
        }
        from = end;
    }
    None
}

fn strip_leading_comments(sql: &str) -> &str {
    let mut s = sql.trim_start();
    loop {
        if let Some(r) = s.strip_prefix("/*") {
            match r.find("*/") {
                Some(i) => s = r[i + 2..].trim_start(),
                None => return s,
            }
        } else if s.starts_with("--") || s.starts_with('#') {
            match s.find('\n') {
                Some(i) => s = s[i + 1..].trim_start(),
                None => return "",
            }
        } else {
            return s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;

    async fn run(ex: &Executor, s: &mut Session, sql: &str) -> Outcome {
        match ex.execute(s, sql).await {
            Ok(o) => o,
            Err(e) => panic!("{sql}: {e:?}"),
        }
    }

    fn rows(o: Outcome) -> Vec<Vec<Option<String>>> {
        match o {
            Outcome::Rows(r) => r.rows,
            other => panic!("expected rows, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn insert_select_delete() {
        let (ex, mut s) = test_db().await;
        run(
            &ex,
            &mut s,
            "CREATE TABLE d (k INT, v VARCHAR(20), dt DATETIME) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3",
        )
        .await;
        let o = run(
            &ex,
            &mut s,
            "INSERT INTO d WITH LABEL l1 VALUES (1, \"a\", '2024-01-01 10:00:00'), (2, 'b', NULL), (3, 'c', NULL)",
        )
        .await;
        match o {
            Outcome::Done { affected, info } => {
                assert_eq!(affected, 3);
                assert!(info.starts_with("{'label':'l1', 'status':'VISIBLE', 'txnId':'"), "{info}");
            }
            _ => panic!(),
        }
        let r = rows(run(&ex, &mut s, "SELECT k, v, dt FROM d ORDER BY k").await);
        assert_eq!(r[0], vec![Some("1".into()), Some("a".into()), Some("2024-01-01 10:00:00".into())]);
        run(&ex, &mut s, "DELETE FROM d WHERE k IN (1, 3)").await;
        let r = rows(run(&ex, &mut s, "SELECT count(*) FROM d").await);
        assert_eq!(r[0][0].as_deref(), Some("1"));
        // An alias, or the table's name, qualifies the columns; a statement not understood is an
        // error that changes nothing.
        run(&ex, &mut s, "INSERT INTO d VALUES (1, 'a', NULL), (3, 'c', NULL), (999, 'z', NULL)").await;
        run(&ex, &mut s, "DELETE FROM test.d x WHERE x.k = 999").await;
        assert_eq!(
            rows(run(&ex, &mut s, "SELECT k FROM d ORDER BY k").await),
            [[Some("1".into())], [Some("2".into())], [Some("3".into())]]
        );
        run(&ex, &mut s, "DELETE FROM d AS y WHERE y.k = 3").await;
        run(&ex, &mut s, "DELETE FROM d WHERE d.k = 1").await;
        for bad in [
            "DELETE FROM d x y WHERE k = 1",
            "DELETE FROM d FROM WHERE k = 1",
            "DELETE FROM d LIMIT WHERE k = 1",
            "DELETE FROM d x WHERE",
            "DELETE FROM d WHERE",
            "DELETE FROM d LIMIT 1",
            "DELETE FROM d USING e WHERE d.k = e.k",
            "DELETE FROM d x WHERE z.k = 1",
        ] {
            assert!(ex.execute(&mut s, bad).await.is_err(), "{bad}");
        }
        assert_eq!(rows(run(&ex, &mut s, "SELECT k FROM d ORDER BY k").await), [[Some("2".into())]]);
        let e = ex.execute(&mut s, "SELECT * FROM nope").await.unwrap_err();
        assert_eq!(e.code, 1146);
        let e = ex.execute(&mut s, "SELECT nope FROM d").await.unwrap_err();
        assert_eq!(e.code, 1054);
        let e = ex.execute(&mut s, "SELEC 1").await.unwrap_err();
        assert_eq!(e.code, 1064);
        let e = ex.execute(&mut s, "USE nodb").await.unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (1049, "Unknown database 'nodb'"));
        let r = rows(run(&ex, &mut s, "SELECT FROM_UNIXTIME(1700000000000 / 1000, '%Y-%m-%d %H:%i:%s'), if(k > 1, 'big', 'small'), if(k > 1, k, 0) FROM d").await);
        assert_eq!(r[0], vec![Some("2023-11-14 22:13:20".into()), Some("big".into()), Some("2".into())]);
        let r = rows(run(&ex, &mut s, "SHOW CATALOGS").await);
        assert_eq!(r[0][1].as_deref(), Some("internal"));
        // MySQL's date_format specifiers.
        let r = rows(run(&ex, &mut s, "SELECT date_format('2024-03-05 14:07:09', '%Y-%m-%d %H:%i:%s %M %b %W %a %j %h %p %D %e %c'), date_format(CAST('2024-12-31' AS DATE), '%d/%m/%y')").await);
        assert_eq!(
            r[0],
            vec![Some("2024-03-05 14:07:09 March Mar Tuesday Tue 065 02 PM 5th 5 3".into()), Some("31/12/24".into())]
        );
        // Labels as Doris gives them.
        match run(&ex, &mut s, "SELECT 1, 'a', count(*), k + 1 AS next FROM d GROUP BY k").await {
            Outcome::Rows(r) => {
                let names: Vec<&str> = r.columns.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(names, ["1", "a", "count(*)", "next"]);
            }
            other => panic!("{other:?}"),
        }
        let r = rows(run(&ex, &mut s, "select @@version_comment limit 1").await);
        assert!(r[0][0].as_deref().unwrap().contains("Doris"));
        let r = rows(run(&ex, &mut s, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_SIZE, DECIMAL_DIGITS FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME = 'd'").await);
        assert_eq!(r[1], vec![Some("v".into()), Some("varchar".into()), Some("20".into()), None]);
    }

    fn executor() -> Executor {
        Executor {
            engine: Arc::new(Engine::new(EngineConfig::default(), None).unwrap()),
            info: Arc::new(ServerInfo::default()),
        }
    }

    async fn all_rows(ex: &Executor, s: &mut Session, t: &str) -> Vec<Vec<Option<String>>> {
        rows(run(ex, s, &format!("SELECT * FROM {t} ORDER BY 1")).await)
    }

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|x| if *x == "NULL" { None } else { Some(x.to_string()) }).collect()
    }

    #[test]
    fn statements_split_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(
            split_statements("SELECT 1; SELECT 'a;b' ;\n-- c;\nSELECT `x;`"),
            vec!["SELECT 1", " SELECT 'a;b' ", "\n-- c;\nSELECT `x;`"]
        );
        assert_eq!(split_statements("SELECT 1;"), vec!["SELECT 1"]);
        assert_eq!(split_statements("SELECT 'open"), vec!["SELECT 'open"]);
        let sql = "SELECT ? , '?', `?` FROM t WHERE a = ? -- ?\n";
        let holes = placeholders(sql).unwrap();
        assert_eq!(holes.len(), 2);
        let bound = bind(sql, &holes, &["1".into(), quote_literal("it's \\ ok")]);
        assert_eq!(bound, "SELECT 1 , '?', `?` FROM t WHERE a = 'it''s \\\\ ok' -- ?\n");
    }

    #[tokio::test]
    async fn show_table_status_and_processlist() {
        let (ex, mut s) = test_db().await;
        run(&ex, &mut s, "CREATE TABLE t (k INT) DUPLICATE KEY(k) COMMENT 'ticks' DISTRIBUTED BY HASH(k) BUCKETS 2")
            .await;
        run(&ex, &mut s, "INSERT INTO t VALUES (1), (2), (3)").await;
        let o = run(&ex, &mut s, "SHOW TABLE STATUS FROM test LIKE 't%'").await;
        let Outcome::Rows(rs) = o else { panic!("{o:?}") };
        assert_eq!(rs.columns.len(), 18);
        assert_eq!(rs.rows.len(), 1);
        let r = &rs.rows[0];
        assert_eq!(
            (r[0].as_deref(), r[1].as_deref(), r[4].as_deref(), r[17].as_deref()),
            (Some("t"), Some("Doris"), Some("3"), Some("ticks"))
        );
        assert!(rows(run(&ex, &mut s, "SHOW TABLE STATUS LIKE 'zz'").await).is_empty());
        let p = rows(run(&ex, &mut s, "SHOW FULL PROCESSLIST").await);
        assert_eq!(
            (p[0][1].as_deref(), p[0][2].as_deref(), p[0][6].as_deref()),
            (Some("1"), Some("root"), Some("test"))
        );
    }

    #[tokio::test]
    async fn mysql_date_functions_answer_as_mysql() {
        let (ex, mut s) = test_db().await;
        for (sql, want) in [
            ("SELECT date_add('2024-01-31 10:00:00', INTERVAL 1 DAY)", "2024-02-01 10:00:00"),
            ("SELECT date_sub(CAST('2024-03-01' AS DATE), INTERVAL 1 MONTH)", "2024-02-01"),
            ("SELECT adddate(CAST('2024-03-01' AS DATE), 2)", "2024-03-03"),
            ("SELECT datediff('2024-03-01 23:59:59', '2024-02-28 00:00:01')", "2"),
            ("SELECT unix_timestamp('2024-01-01 00:00:10')", "1704067210"),
            ("SELECT str_to_date('02/12/2026 10:30:15', '%d/%m/%Y %H:%i:%s')", "2026-12-02 10:30:15"),
            ("SELECT str_to_date('December 2, 2026', '%M %e, %Y')", "2026-12-02"),
            ("SELECT str_to_date('not a date', '%Y-%m-%d')", "NULL"),
            ("SELECT curdate() = current_date()", "1"),
        ] {
            let got = rows(run(&ex, &mut s, sql).await);
            assert_eq!(got, vec![some(&[want])], "{sql}");
        }
        let now: i64 = rows(run(&ex, &mut s, "SELECT unix_timestamp()").await)[0][0].clone().unwrap().parse().unwrap();
        assert!(now > 1_700_000_000, "unix_timestamp() = {now}");
    }

    #[tokio::test]
    async fn group_concat_answers_as_doris() {
        let (ex, mut s) = test_db().await;
        run(&ex, &mut s, "CREATE TABLE g (k INT, v VARCHAR(10)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
            .await;
        run(&ex, &mut s, "INSERT INTO g VALUES (1, 'b'), (1, 'a'), (2, 'c'), (1, 'a')").await;
        for (sql, want) in [
            ("SELECT group_concat(v ORDER BY v) FROM g WHERE k = 1", "a, a, b"),
            ("SELECT group_concat(DISTINCT v ORDER BY v SEPARATOR '|') FROM g", "a|b|c"),
            ("SELECT GROUP_CONCAT(v, '-' ORDER BY v DESC) FROM g WHERE k = 1", "b-a-a"),
            ("SELECT group_concat(k ORDER BY k) FROM g WHERE v = 'a'", "1, 1"),
            ("SELECT group_concat(DISTINCT k + 8 ORDER BY k + 8 DESC) FROM g", "10, 9"),
            ("SELECT group_concat(DISTINCT v) FROM g WHERE k = 1 AND v = 'a'", "a"),
        ] {
            assert_eq!(rows(run(&ex, &mut s, sql).await), vec![some(&[want])], "{sql}");
        }
        let r = rows(run(&ex, &mut s, "SELECT k, group_concat(v ORDER BY v) AS vs FROM g GROUP BY k ORDER BY k").await);
        assert_eq!(r, vec![some(&["1", "a, a, b"]), some(&["2", "c"])]);
    }

    #[tokio::test]
    async fn views_are_queried_described_shown_and_dropped() {
        let (ex, mut s) = test_db().await;
        run(
            &ex,
            &mut s,
            "CREATE TABLE o (id INT, amount INT, kind VARCHAR(8)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
        )
        .await;
        run(&ex, &mut s, "INSERT INTO o VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'a')").await;
        run(&ex, &mut s, "CREATE VIEW big_a (id COMMENT 'order', total) COMMENT 'a orders' AS SELECT id, amount * 2 FROM o WHERE kind = 'a'").await;
        assert_eq!(
            rows(run(&ex, &mut s, "SELECT id, total FROM big_a ORDER BY id").await),
            vec![some(&["1", "20"]), some(&["3", "60"])]
        );
        // A view reads the data as it is now, through another view too.
        run(&ex, &mut s, "CREATE VIEW test.top AS SELECT max(total) AS m FROM big_a").await;
        run(&ex, &mut s, "INSERT INTO o VALUES (4, 50, 'a')").await;
        assert_eq!(rows(run(&ex, &mut s, "SELECT m FROM top").await), vec![some(&["100"])]);
        assert_eq!(
            rows(run(&ex, &mut s, "SHOW FULL TABLES").await),
            vec![some(&["big_a", "VIEW"]), some(&["o", "BASE TABLE"]), some(&["top", "VIEW"])]
        );
        let create = rows(run(&ex, &mut s, "SHOW CREATE VIEW big_a").await);
        assert_eq!(
            create[0][1].as_deref(),
            Some(
                "CREATE VIEW `big_a` (`id` COMMENT 'order', `total`) COMMENT 'a orders' AS SELECT id, amount * 2 FROM o WHERE kind = 'a'"
            )
        );
        let desc = rows(run(&ex, &mut s, "DESC big_a").await);
        assert_eq!(desc.iter().map(|r| r[0].clone().unwrap()).collect::<Vec<_>>(), ["id", "total"]);
        let err = |o: Result<Outcome, SqlError>| o.err().map(|e| (e.code, e.message)).expect("an error");
        assert_eq!(
            err(ex.execute(&mut s, "CREATE VIEW big_a AS SELECT 1").await),
            (1050, "Table 'big_a' already exists".into())
        );
        assert_eq!(
            err(ex.execute(&mut s, "CREATE TABLE top (k INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1").await)
                .0,
            1050
        );
        assert_eq!(err(ex.execute(&mut s, "CREATE VIEW bad AS SELECT nope FROM o").await).0, 1054);
        assert_eq!(err(ex.execute(&mut s, "CREATE VIEW bad2 (a, b) AS SELECT id FROM o").await).0, 1105);
        run(&ex, &mut s, "CREATE OR REPLACE VIEW top AS SELECT count(*) AS n FROM o").await;
        assert_eq!(rows(run(&ex, &mut s, "SELECT n FROM top").await), vec![some(&["4"])]);
        run(&ex, &mut s, "DROP VIEW top").await;
        assert_eq!(err(ex.execute(&mut s, "DROP VIEW top").await).0, 1146);
        run(&ex, &mut s, "DROP VIEW IF EXISTS top").await;
        assert_eq!(err(ex.execute(&mut s, "SELECT * FROM top").await).0, 1146);
    }

    #[tokio::test]
    async fn insert_overwrite_replaces_every_row_at_once() {
        let (ex, mut s) = test_db().await;
        run(&ex, &mut s, "CREATE TABLE u (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3").await;
        run(&ex, &mut s, "CREATE TABLE src (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
            .await;
        run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
        run(&ex, &mut s, "INSERT INTO src VALUES (2, 'x'), (9, 'y')").await;
        run(&ex, &mut s, "INSERT OVERWRITE TABLE u WITH LABEL ow1 SELECT k, v FROM src").await;
        assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["2", "x"]), some(&["9", "y"])]);
        run(&ex, &mut s, "INSERT OVERWRITE TABLE u VALUES (5, 'z')").await;
        assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
        // A partition cannot be overwritten alone here: an error, and nothing changes.
        let e =
            ex.execute(&mut s, "INSERT OVERWRITE TABLE u PARTITION(p1) VALUES (6, 'q')").await.expect_err("refused");
        assert!(e.message.contains("single partitions"), "{}", e.message);
        assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
        // A failing query leaves the table as it was.
        assert!(ex.execute(&mut s, "INSERT OVERWRITE TABLE u SELECT nope FROM src").await.is_err());
        assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
    }

    #[tokio::test]
    async fn update_changes_only_the_matching_rows_of_a_unique_table() {
        let (ex, mut s) = test_db().await;
        run(&ex, &mut s, "CREATE TABLE u (k INT, v VARCHAR(20), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3")
            .await;
        run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)").await;
        let o = run(&ex, &mut s, "UPDATE u SET n = n + 1, v = concat(v, '!') WHERE k = 2").await;
        assert!(matches!(o, Outcome::Done { affected: 1, ref info } if info.contains("'label':'update_")), "{o:?}");
        let want = |r: &[[&str; 3]]| r.iter().map(|x| some(x)).collect::<Vec<_>>();
        assert_eq!(all_rows(&ex, &mut s, "u").await, want(&[["1", "a", "10"], ["2", "b!", "21"], ["3", "c", "30"]]));
        // By alias, qualified as SQLAlchemy writes it, and by database.table.column.
        run(&ex, &mut s, "UPDATE u AS x SET x.n = 0 WHERE x.k = 3").await;
        run(&ex, &mut s, "UPDATE test.u SET test.u.v = NULL WHERE u.k = 1").await;
        assert_eq!(all_rows(&ex, &mut s, "u").await, want(&[["1", "NULL", "10"], ["2", "b!", "21"], ["3", "c", "0"]]));
        // A condition nothing matches changes nothing.
        let o = run(&ex, &mut s, "UPDATE u SET n = 99 WHERE k = 999").await;
        assert!(matches!(o, Outcome::Done { affected: 0, .. }), "{o:?}");
        // FROM another table, joined as Doris does (`insert into u select … from u, src …`).
        run(
            &ex,
            &mut s,
            "CREATE TABLE src (id INT, name VARCHAR(20)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1",
        )
        .await;
        run(&ex, &mut s, "INSERT INTO src VALUES (1, 'one'), (3, 'three'), (7, 'seven')").await;
        let o = run(&ex, &mut s, "UPDATE u SET v = s2.name FROM src s2 WHERE u.k = s2.id").await;
        assert!(matches!(o, Outcome::Done { affected: 2, .. }), "{o:?}");
        assert_eq!(
            all_rows(&ex, &mut s, "u").await,
            want(&[["1", "one", "10"], ["2", "b!", "21"], ["3", "three", "0"]]),
            "row 7 of src has no row in u: nothing is added"
        );
        // Without WHERE: every row, as written.
        run(&ex, &mut s, "UPDATE u SET n = 5").await;
        assert_eq!(rows(run(&ex, &mut s, "SELECT count(*) FROM u WHERE n = 5").await), vec![some(&["3"])]);
    }

    #[tokio::test]
    async fn update_refuses_what_doris_refuses() {
        let (ex, mut s) = test_db().await;
        run(
            &ex,
            &mut s,
            "CREATE TABLE u (k INT, v VARCHAR(20) NOT NULL) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
        )
        .await;
        run(&ex, &mut s, "CREATE TABLE d (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
            .await;
        run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a'), (2, 'b')").await;
        run(&ex, &mut s, "INSERT INTO d VALUES (1, 'a')").await;
        for (sql, code, text) in [
            ("UPDATE d SET v = 'x' WHERE k = 1", 1105, "Only unique table could be updated."),
            ("UPDATE u SET k = 5 WHERE k = 1", 1105, "Only value columns of unique table could be updated"),
            ("UPDATE u SET zz = 1, v = 'x'", 1105, "unknown column in assignment list: zz"),
            ("UPDATE u SET other.v = 'x'", 1105, "column in assignment list is invalid, other.v"),
            ("UPDATE u x SET u.v = 'x'", 1105, "column in assignment list is invalid, u.v"),
            ("UPDATE u SET v = NULL WHERE k = 1", 1105, "column `v` is not nullable"),
            ("UPDATE u SET v = 'x' WHERE k = 1 LIMIT 1", 1064, "Syntax error"),
            ("UPDATE u SET v = 'x' ORDER BY k", 1064, "Syntax error"),
            ("UPDATE u JOIN d ON u.k = d.k SET u.v = 'x'", 1064, "Syntax error"),
            ("UPDATE u SET v = 'x' WHERE", 1064, "Syntax error"),
            ("UPDATE u v = 'x'", 1064, "Syntax error"),
            ("UPDATE u SET v = 'x'; DELETE FROM u", 1064, "Syntax error"),
            ("UPDATE nope SET v = 'x'", 1146, "nope"),
        ] {
            match ex.execute(&mut s, sql).await {
                Err(e) => {
                    assert_eq!(e.code, code, "{sql}: {e:?}");
                    assert!(e.message.contains(text), "{sql}: {e:?}");
                }
                Ok(o) => panic!("{sql} was accepted: {o:?}"),
            }
        }
        let want: Vec<Vec<Option<String>>> = vec![some(&["1", "a"]), some(&["2", "b"])];
        assert_eq!(all_rows(&ex, &mut s, "u").await, want, "no refused UPDATE changed a row");
    }

    /// 200 UPDATE statements on a UNIQUE and a DUPLICATE table, well-formed and mangled: each is
    /// refused and changes nothing, or changes exactly the rows its WHERE selects (each sets a
    /// marker no row had), never adds or removes a row; the DUPLICATE table refuses every one.
    #[tokio::test]
    async fn no_update_changes_rows_its_condition_does_not_match() {
        let (ex, mut s, _) = fuzz_tables().await;
        let mut next = seeded(0x0bda_7e26);
        let forms = [
            "UPDATE {t} SET v = '{m}' WHERE k = {n}",
            "UPDATE {t} x SET x.v = '{m}' WHERE x.k = {n}",
            "UPDATE {t} AS x SET v = '{m}' WHERE x.k >= {n}",
            "UPDATE test.{t} SET {t}.v = '{m}' WHERE {t}.k = {n}",
            "UPDATE `{t}` `y` SET `y`.`v` = '{m}' WHERE `y`.`k` IN ({n}, {n})",
            "UPDATE {t} SET v = '{m}' WHERE k < {n} AND k > 3",
        ];
        let dump = |rows: Vec<Vec<Option<String>>>| -> Vec<(String, String)> {
            rows.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap_or_default())).collect()
        };
        let mut accepted = 0;
        for i in 0..200 {
            let t = if i % 5 == 0 { "d" } else { "u" };
            let n = 1 + next(20);
            let marker = format!("m{i}");
            let mut words: Vec<String> = forms[next(forms.len())]
                .replace("{t}", t)
                .replace("{n}", &n.to_string())
                .replace("{m}", &marker)
                .split(' ')
                .map(str::to_string)
                .collect();
            let mangled = i % 4 != 0;
            if mangled {
                let at = 2 + next(words.len() - 1);
                words.insert(at, JUNK[next(JUNK.len())].to_string());
            }
            let stmt = words.join(" ");
            // The same statement as a SELECT of the keys it matches: the SET clause dropped.
            let set = words.iter().position(|w| w == "SET").unwrap();
            let end = words[set + 1..]
                .iter()
                .position(|w| w.eq_ignore_ascii_case("WHERE") || w.eq_ignore_ascii_case("FROM"))
                .map_or(words.len(), |p| set + 1 + p);
            let twin = format!("SELECT k FROM {} {}", words[1..set].join(" "), words[end..].join(" "));
            let before = dump(all_rows(&ex, &mut s, t).await);
            let matched = ex.execute(&mut s, &twin).await;
            let result = ex.execute(&mut s, &stmt).await;
            let after = dump(all_rows(&ex, &mut s, t).await);
            assert_eq!(after.len(), 20, "`{stmt}` added or removed rows");
            if !mangled && t == "u" {
                assert!(result.is_ok(), "`{stmt}` is well-formed but failed: {result:?}");
            }
            match result {
                Err(_) => assert_eq!(after, before, "`{stmt}` failed but changed rows"),
                Ok(_) => {
                    assert_eq!(t, "u", "`{stmt}` updated a DUPLICATE table");
                    accepted += 1;
                    let Ok(Outcome::Rows(m)) = matched else {
                        panic!("`{stmt}` updated, but `{twin}` does not select")
                    };
                    let mut want: Vec<String> = m.rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
                    want.sort_by_key(|k| k.parse::<i64>().unwrap());
                    want.dedup();
                    let changed: Vec<String> =
                        before.iter().zip(&after).filter(|(b, a)| b != a).map(|(b, _)| b.0.clone()).collect();
                    assert_eq!(changed, want, "`{stmt}` changed other rows than `{twin}` selects");
                    assert!(after.iter().filter(|r| want.contains(&r.0)).all(|r| r.1 == marker), "`{stmt}`");
                }
            }
        }
        assert!(accepted >= 40, "only {accepted} of 200 statements ran");
    }

    /// An executor with an empty database `test`, in use.
    async fn test_db() -> (Executor, Session) {
        let ex = executor();
        let mut s = Session::new("root", 1);
        run(&ex, &mut s, "CREATE DATABASE test").await;
        run(&ex, &mut s, "USE test").await;
        (ex, s)
    }

    /// Tables `d` (DUPLICATE) and `u` (UNIQUE) of `test`, each with keys 1..=20 (`fill`, the
    /// VALUES that put them back).
    async fn fuzz_tables() -> (Executor, Session, String) {
        let (ex, mut s) = test_db().await;
        let fill: String = (1..=20).map(|k| format!("({k}, 'v{k}')")).collect::<Vec<_>>().join(", ");
        for (t, keys) in [("d", "DUPLICATE KEY(k)"), ("u", "UNIQUE KEY(k)")] {
            let ddl = format!("CREATE TABLE {t} (k INT, v VARCHAR(20)) {keys} DISTRIBUTED BY HASH(k) BUCKETS 3");
            run(&ex, &mut s, &ddl).await;
            run(&ex, &mut s, &format!("INSERT INTO {t} VALUES {fill}")).await;
        }
        (ex, s, fill)
    }

    /// Tokens put into well-formed DELETE and UPDATE statements to mangle them.
    const JUNK: &[&str] = &[
        "x",
        "AS",
        "LIMIT 1",
        "ORDER BY k",
        ",",
        "USING e",
        "FROM",
        "SET",
        "JOIN d",
        "WHERE",
        "OR",
        "AND",
        "1",
        "(",
        ")",
        ";",
        "'",
        "`",
        "t2",
        "x.k",
        "= 1",
        "NOT",
        "*",
    ];

    /// A xorshift generator of indexes below `n`, from a printed seed.
    fn seeded(seed: u64) -> impl FnMut(usize) -> usize {
        eprintln!("seed {seed:#x}");
        let mut x = seed;
        move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        }
    }

    async fn table_keys(ex: &Executor, s: &mut Session, t: &str) -> Vec<String> {
        rows(run(ex, s, &format!("SELECT k FROM {t} ORDER BY k")).await)
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect()
    }

    /// 200 DELETE statements, well-formed and mangled (a junk token put anywhere): each either
    /// fails and changes nothing, or deletes exactly the rows its SELECT twin (`SELECT k FROM` the
    /// same text) returns — never more than its condition matches.
    #[tokio::test]
    async fn no_delete_removes_rows_its_condition_does_not_match() {
        let (ex, mut s, fill) = fuzz_tables().await;
        let mut next = seeded(0x5eed_2026);
        let forms = [
            "DELETE FROM {t} WHERE k = {n}",
            "DELETE FROM {t} x WHERE x.k = {n}",
            "DELETE FROM {t} AS x WHERE x.k = {n}",
            "DELETE FROM test.{t} WHERE {t}.k = {n}",
            "DELETE FROM `{t}` `y` WHERE `y`.`k` = {n}",
            "DELETE FROM {t} WHERE k IN ({n}, {n})",
        ];
        let mut accepted = 0;
        for i in 0..200 {
            let t = if i % 2 == 0 { "d" } else { "u" };
            let n = 1 + next(20);
            let mut words: Vec<String> = forms[next(forms.len())]
                .replace("{t}", t)
                .replace("{n}", &n.to_string())
                .split(' ')
                .map(str::to_string)
                .collect();
            if i % 4 != 0 {
                let at = 2 + next(words.len() - 1);
                words.insert(at, JUNK[next(JUNK.len())].to_string());
            }
            let stmt = words.join(" ");
            let before = table_keys(&ex, &mut s, t).await;
            let twin = stmt.replacen("DELETE FROM", "SELECT k FROM", 1);
            let matched = ex.execute(&mut s, &twin).await;
            let result = ex.execute(&mut s, &stmt).await;
            let after = table_keys(&ex, &mut s, t).await;
            match result {
                Err(_) => assert_eq!(after, before, "`{stmt}` failed but changed rows"),
                Ok(_) => {
                    accepted += 1;
                    let Ok(Outcome::Rows(m)) = matched else {
                        panic!("`{stmt}` deleted, but `{twin}` does not select")
                    };
                    let matched: Vec<String> = m.rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
                    let gone: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
                    let mut want: Vec<&String> = before.iter().filter(|k| matched.contains(k)).collect();
                    want.dedup();
                    assert_eq!(gone, want, "`{stmt}` deleted other rows than `{twin}` selects");
                }
            }
            if after.len() != 20 {
                run(&ex, &mut s, &format!("DELETE FROM {t}")).await;
                run(&ex, &mut s, &format!("INSERT INTO {t} VALUES {fill}")).await;
            }
        }
        assert!(accepted >= 50, "only {accepted} of 200 statements ran");
    }
}
