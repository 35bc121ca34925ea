//! `type = "mysql"`: the tables of a MySQL/MariaDB database — a snapshot in primary-key chunks,
//! then (`scan.startup.mode = "initial"`) their changes from the binlog, from the position taken
//! before the snapshot began; or only the changes from now (`latest-offset`), or only the
//! snapshot (`snapshot`). Every table arrives as its own stream: a schema change with its columns
//! (mapped as the connector maps them, [`types`]) and primary key, then its rows, so a sink can
//! create the table first. Worker 0 follows the binlog ([`binlog`]) once every worker's part of
//! the snapshot is in a completed checkpoint, a transaction at a time; changes between the binlog
//! position and a chunk's read are replayed, which a UNIQUE target absorbs. TIMESTAMP values are
//! read as UTC wall time in both phases.
//!
//! The coordinator lists the tables (`include` / `exclude` regexes over their names), reads their
//! columns and keys from `information_schema` and cuts each table with a single integer primary
//! key into chunks of `chunk_size` key values; other tables are one chunk. Worker `w` of `n` reads
//! chunks `w`, `w + n`, … with keyset pages (`WHERE key >= cursor … ORDER BY key LIMIT …`), so its
//! position is the chunk and the next key, and a restart reads nothing twice. No lock is taken:
//! without the binlog, rows changed while the snapshot runs may be read before or after the change.

mod binlog;
mod ddl;
pub mod types;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};
use sluice_guest::batch::{BatchBuilder, RowKind, Value};
use sluice_guest::types::{ColumnDef, arrow_schema};
use tokio::sync::watch;

use crate::pipeline::{BuildContext, Checked, Connection, DatabaseConnection, PipelineFile, SourceConfig};
use crate::runtime::{Event, Position, Restartable, SchemaChange, Source, SourceReader, SplitEnumerator, TableId};
use crate::sources::chunks::{Chunk, ChunkCursor, resume};
use crate::sources::{StartupMode, is_zero, regex};
use binlog::{BinlogPosition, Follower};
use types::MysqlColumn;

/// Rows per page of a chunk.
const PAGE_ROWS: u64 = 4096;

/// `type = "mysql"`: the options (Flink CDC's MySQL source keys where one exists).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSource {
    pub name: Option<String>,
    /// A `[connections.<name>]` of `type = "mysql"`.
    pub connection: String,
    /// The database whose tables are read.
    pub database: String,
    /// Tables to read: a regex matched against the whole table name (default: all).
    #[serde(default = "default_include")]
    pub include: String,
    /// Tables to leave out, matched after `include`.
    pub exclude: Option<String>,
    /// `scan.startup.mode`.
    pub scan: MysqlScan,
    /// Primary-key values per snapshot chunk (Flink CDC's `scan.incremental.snapshot.chunk.size`,
    /// 8096).
    #[serde(default = "default_chunk_size")]
    pub chunk_size: u64,
    /// BLOB / BINARY values: `text` (default: UTF-8 bytes as they are, others an error), `base64`
    /// or `hex`.
    #[serde(default)]
    pub binary_handling: types::BinaryHandling,
    /// Announce the tables (so a sink creates them) and read no rows, whatever the startup
    /// mode: what `mysql-sync-database --create-table-only` runs.
    #[serde(default)]
    pub schema_only: bool,
}

fn default_include() -> String {
    ".*".into()
}

fn default_chunk_size() -> u64 {
    8096
}

/// `scan.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlScan {
    pub startup: MysqlStartup,
}

/// `scan.startup.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlStartup {
    /// `initial` (the snapshot, then the binlog), `snapshot` (read every table once and stop),
    /// or only the binlog: from now (`latest-offset`), from the oldest file the server keeps
    /// (`earliest-offset`), from `specific_offset` (`specific-offset`) or from
    /// `timestamp_millis` (`timestamp`).
    pub mode: StartupMode,
    /// `scan.startup.specific-offset.*`: `file` and `pos`, or (MariaDB) `gtid_set`.
    pub specific_offset: Option<SpecificOffset>,
    /// `scan.startup.timestamp-millis`: changes written from this time (ms since the epoch).
    pub timestamp_millis: Option<i64>,
}

/// `scan.startup.specific_offset.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecificOffset {
    pub file: Option<String>,
    pub pos: Option<u64>,
    pub gtid_set: Option<String>,
}

impl MysqlSource {
    fn server<'f>(&self, file: &'f PipelineFile) -> Result<&'f DatabaseConnection, (String, String)> {
        file.source_connection(&self.connection, "mysql", |c| match c {
            Connection::Mysql(c) => Some(c),
            _ => None,
        })
    }
}

#[async_trait]
impl SourceConfig for MysqlSource {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, _file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach { connections: vec![self.connection.clone()], ..Default::default() })
    }

    fn validate(&self, file: &PipelineFile) -> Checked {
        self.server(file)?;
        let startup = &self.scan.startup;
        match (startup.mode, &startup.specific_offset, startup.timestamp_millis) {
            (
                StartupMode::SpecificOffset,
                Some(SpecificOffset { file: Some(_), pos: Some(_), gtid_set: None }),
                None,
            ) => {}
            (StartupMode::SpecificOffset, Some(SpecificOffset { file: None, pos: None, gtid_set: Some(_) }), None) => {}
            (StartupMode::SpecificOffset, ..) => {
                return Err((
                    "source.scan.startup.specific_offset".into(),
                    "`specific-offset` needs `file` and `pos`, or `gtid_set`".into(),
                ));
            }
            (StartupMode::Timestamp, None, Some(t)) if t >= 0 => {}
            (StartupMode::Timestamp, ..) => {
                return Err((
                    "source.scan.startup.timestamp_millis".into(),
                    "`timestamp` needs `timestamp_millis` (milliseconds since 1970-01-01 UTC), and nothing else".into(),
                ));
            }
            (_, Some(_), _) => {
                return Err((
                    "source.scan.startup.specific_offset".into(),
                    "only for mode = \"specific-offset\"".into(),
                ));
            }
            (_, _, Some(_)) => {
                return Err(("source.scan.startup.timestamp_millis".into(), "only for mode = \"timestamp\"".into()));
            }
            _ => {}
        }
        regex("source.include", &self.include)?;
        if let Some(x) = &self.exclude {
            regex("source.exclude", x)?;
        }
        if self.chunk_size == 0 {
            return Err(("source.chunk_size".into(), "must be at least 1".into()));
        }
        Ok(())
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let server = self.server(ctx.pipeline).map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?;
        let key = format!("connections.{}", self.connection);
        let password = server.password(&key)?;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(server.host.clone())
            .tcp_port(server.port.unwrap_or(3306))
            .user(Some(server.user.clone()))
            .pass(Some(password))
            .prefer_socket(false);
        let pool = mysql_async::Pool::new(opts);
        let include = regex("source.include", &self.include).map_err(|(_, m)| anyhow::anyhow!(m))?;
        let exclude = self.exclude.as_deref().map(|x| regex("source.exclude", x)).transpose();
        let exclude = exclude.map_err(|(_, m)| anyhow::anyhow!(m))?;
        let zone = crate::sources::time_zone(server.server_time_zone.as_deref(), &key)?;
        let scope = Arc::new(Scope { db: self.database.clone(), include, exclude, binary: self.binary_handling, zone });
        let tables = discover(&pool, &scope)
            .await
            .with_context(|| format!("reading the tables of `{}` at {}", self.database, server.host))?;
        if tables.is_empty() {
            anyhow::bail!(
                "no table of `{}` matches include = {:?}{}; check the database and the patterns",
                self.database,
                self.include,
                self.exclude.as_ref().map(|x| format!(" and exclude = {x:?}")).unwrap_or_default()
            );
        }
        Ok(Arc::new(MysqlTables {
            pool,
            scope,
            tables: Arc::new(tables),
            chunk_size: self.chunk_size,
            mode: self.scan.startup.mode.unless_schema_only(self.schema_only),
            startup: self.scan.startup.clone(),
            server_id: server.server_id.unwrap_or_else(|| 5400 + fastrand::u32(..1000)),
        }))
    }
}

/// The tables a source follows: those of `db` whose names `include` matches and `exclude` does
/// not (whole names).
#[derive(Debug)]
struct Scope {
    db: String,
    include: regex::Regex,
    exclude: Option<regex::Regex>,
    binary: types::BinaryHandling,
    /// `server_time_zone`: where TIMESTAMP values are shown (none: UTC).
    zone: Option<chrono_tz::Tz>,
}

impl Scope {
    /// A TIMESTAMP value, `micros` after the epoch, as wall time in the source's zone.
    fn timestamp(&self, micros: i64) -> String {
        crate::sources::wall_time(self.zone, micros)
    }
}

impl Scope {
    fn covers(&self, db: &str, name: &str) -> bool {
        db == self.db && self.include.is_match(name) && !self.exclude.as_ref().is_some_and(|x| x.is_match(name))
    }
}

/// A source table: its columns, key and Arrow schema.
#[derive(Debug, Clone)]
struct Table {
    id: TableId,
    db: String,
    name: String,
    columns: Vec<MysqlColumn>,
    primary_key: Vec<String>,
    schema: SchemaRef,
    /// Per column, the labels of an ENUM or SET (the binlog carries their numbers); else empty.
    labels: Vec<Vec<String>>,
}

/// A table as a position keeps it: what [`Table::new`] builds it from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub db: String,
    pub name: String,
    pub columns: Vec<MysqlColumn>,
    pub primary_key: Vec<String>,
}

impl Table {
    fn new(db: &str, name: &str, columns: Vec<MysqlColumn>, primary_key: Vec<String>) -> anyhow::Result<Table> {
        let defs = columns
            .iter()
            .map(|c| Ok(ColumnDef::new(&c.name, c.doris_type()?, c.nullable)))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| anyhow::anyhow!("table `{db}.{name}`: {e}"))?;
        let labels = columns
            .iter()
            .map(|c| {
                let t = c.column_type.to_ascii_lowercase();
                if t.starts_with("enum(") || t.starts_with("set(") {
                    binlog::labels(&c.column_type)
                } else {
                    Vec::new()
                }
            })
            .collect();
        Ok(Table {
            id: TableId::new(format!("{db}.{name}")),
            db: db.to_string(),
            name: name.to_string(),
            columns,
            labels,
            primary_key,
            schema: arrow_schema(&defs),
        })
    }

    fn from_def(def: &TableDef) -> anyhow::Result<Table> {
        Table::new(&def.db, &def.name, def.columns.clone(), def.primary_key.clone())
    }

    fn def(&self) -> TableDef {
        TableDef {
            db: self.db.clone(),
            name: self.name.clone(),
            columns: self.columns.clone(),
            primary_key: self.primary_key.clone(),
        }
    }

    /// The table's schema, as a sink learns it.
    fn announce(&self) -> SchemaChange {
        SchemaChange::announce(&self.id, self.schema.clone(), self.primary_key.clone())
    }

    fn quoted(&self) -> String {
        format!("`{}`.`{}`", self.db.replace('`', "``"), self.name.replace('`', "``"))
    }

    /// The single integer key column keyset pages and chunks run on, if the table has one.
    fn integer_key(&self) -> Option<&str> {
        let [key] = self.primary_key.as_slice() else { return None };
        let column = self.columns.iter().find(|c| &c.name == key)?;
        let t = column.column_type.to_ascii_lowercase();
        // An unsigned BIGINT may not fit the signed cursor: such a table is read as one chunk.
        let fits = !(t.starts_with("bigint") && t.contains("unsigned"));
        (fits && ["tinyint", "smallint", "mediumint", "int", "bigint"].iter().any(|i| t.starts_with(i)))
            .then_some(key.as_str())
    }
}

async fn discover(pool: &mysql_async::Pool, scope: &Scope) -> anyhow::Result<Vec<Table>> {
    let db = scope.db.as_str();
    let mut conn = pool.get_conn().await.map_err(Restartable::caused_by)?;
    let names: Vec<String> = conn
        .exec(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
            (db,),
        )
        .await?;
    let mut tables = Vec::new();
    for name in names.into_iter().filter(|n| scope.covers(db, n)) {
        let rows: Vec<(String, String, String, Option<String>)> = conn
            .exec(
                "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (db, &name),
            )
            .await?;
        let columns: Vec<MysqlColumn> = rows
            .into_iter()
            .map(|(name, column_type, nullable, charset)| MysqlColumn {
                name,
                column_type,
                nullable: nullable == "YES",
                charset,
            })
            .collect();
        let primary_key: Vec<String> = conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                (db, &name),
            )
            .await?;
        tables.push(Table::new(db, &name, columns, primary_key)?);
    }
    Ok(tables)
}

/// A MySQL source, built: the pool and the tables.
struct MysqlTables {
    pool: mysql_async::Pool,
    scope: Arc<Scope>,
    tables: Arc<Vec<Table>>,
    chunk_size: u64,
    /// `scan.startup.mode` (or `schema-only`).
    mode: StartupMode,
    startup: MysqlStartup,
    server_id: u32,
}

#[async_trait]
impl Source for MysqlTables {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
        let positions = restored
            .iter()
            .map(|p| p.as_ref().map(|v| ChunkPosition::restore(Some(v), "mysql")).transpose())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let fresh = positions.iter().all(Option::is_none);
        // The binlog position is taken before the snapshot begins: every change after it is
        // replayed, none before it is missed.
        let binlog_start = match (self.mode, positions.first().cloned().flatten()) {
            (StartupMode::Snapshot | StartupMode::SchemaOnly, _) => None,
            (_, Some(p)) if !fresh => p.binlog,
            (StartupMode::EarliestOffset | StartupMode::Timestamp, _) => Some(binlog::earliest(&mut conn).await?),
            (StartupMode::SpecificOffset, _) => {
                let o = self.startup.specific_offset.clone().context("specific_offset")?;
                Some(BinlogPosition { file: o.file.unwrap_or_default(), pos: o.pos.unwrap_or(4), gtid: o.gtid_set })
            }
            _ => Some(binlog::current(&mut conn).await?),
        };
        // Only the binlog: no snapshot.
        let binlog_only = self.mode.log_only();
        let snapshot_done = !fresh && positions.iter().all(|p| p.as_ref().is_some_and(|p| p.chunk.done));
        let gate = (self.mode == StartupMode::Initial && restored.len() > 1).then(|| watch::channel(snapshot_done).0);
        // The chunk widths of a snapshot under way stay as it began.
        let mut steps = ChunkCursor::restored_steps(positions.iter().flatten().map(|p| &p.chunk));
        let mut chunks = Vec::new();
        for (i, t) in self.tables.iter().enumerate() {
            if binlog_only || snapshot_done {
                break;
            }
            if self.mode == StartupMode::SchemaOnly {
                chunks.push(Chunk::whole(i));
                continue;
            }
            let Some(key) = t.integer_key() else {
                chunks.push(Chunk::whole(i));
                continue;
            };
            let sql = format!("SELECT MIN(`{key}`), MAX(`{key}`) FROM {}", t.quoted());
            let bounds: Option<(Option<String>, Option<String>)> = conn.query_first(sql).await?;
            let number = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok());
            let (lo, hi) = bounds.map(|(lo, hi)| (number(lo), number(hi))).unwrap_or((None, None));
            let step = *steps.entry(t.name.clone()).or_insert_with(|| Chunk::step_for(lo.zip(hi), self.chunk_size));
            chunks.extend(Chunk::split(i, lo.zip(hi), step));
        }
        Ok(Box::new(Chunks {
            pool: self.pool.clone(),
            scope: self.scope.clone(),
            tables: self.tables.clone(),
            chunks,
            readers: restored.len(),
            steps,
            binlog_start,
            schema_only: self.mode == StartupMode::SchemaOnly,
            skip_before: self.startup.timestamp_millis.map(|t| (t / 1000).clamp(0, i64::from(u32::MAX)) as u32),
            server_id: self.server_id,
            gate,
        }))
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self.tables.iter().map(|t| t.id.as_str()).collect();
        format!("mysql {} of {}", self.mode, names.join(", "))
    }
}

/// The chunks of a run, dealt to the readers round robin.
struct Chunks {
    pool: mysql_async::Pool,
    scope: Arc<Scope>,
    tables: Arc<Vec<Table>>,
    chunks: Vec<Chunk>,
    readers: usize,
    /// The chunk width of each table, kept in every position.
    steps: BTreeMap<String, u64>,
    /// Where worker 0 starts following the binlog (none for `snapshot`).
    binlog_start: Option<BinlogPosition>,
    schema_only: bool,
    skip_before: Option<u32>,
    server_id: u32,
    /// With several workers, `initial` follows the binlog only once this turns true: every
    /// worker's part of the snapshot is in a completed checkpoint, so no snapshot row can land
    /// after a newer change.
    gate: Option<watch::Sender<bool>>,
}

/// A reader's position: where it stands in its chunks, and for worker 0 where it stands in the
/// binlog.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ChunkPosition {
    #[serde(flatten)]
    pub(crate) chunk: ChunkCursor,
    /// Worker 0: the binlog position after the last transaction it returned (or where it will
    /// start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog: Option<BinlogPosition>,
    /// Events of the transaction at `binlog` already returned: a checkpoint inside a
    /// transaction holds some of its rows, which a restart does not return again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub binlog_skip: u64,
    /// Worker 0, once a statement in the binlog changed a table: every table followed, with its
    /// columns as of `binlog` (the rows after it are read with these).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<TableDef>>,
}

impl Position for ChunkPosition {}

#[async_trait]
impl SplitEnumerator for Chunks {
    async fn on_checkpoint_complete(&mut self, _id: u64, positions: &[serde_json::Value]) -> anyhow::Result<()> {
        if let Some(gate) = &self.gate {
            let done = positions.iter().all(|p| p.get("done").and_then(|d| d.as_bool()) == Some(true));
            if done {
                gate.send_replace(true);
            }
        }
        Ok(())
    }

    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let position = ChunkPosition::restore(position, "mysql")?;
        let names = |t: usize| self.tables[t].name.clone();
        let (chunks, resumes) = resume(&self.chunks, self.readers, worker, &position.chunk, names);
        let binlog = if worker == 0 { position.binlog.clone().or_else(|| self.binlog_start.clone()) } else { None };
        let tables = if worker == 0 { position.tables.clone() } else { None };
        let mut position = if resumes || position.chunk.done { position } else { ChunkPosition::default() };
        position.binlog = binlog;
        position.tables = tables;
        position.chunk.steps = self.steps.clone();
        Ok(Box::new(ChunkReader {
            pool: self.pool.clone(),
            scope: self.scope.clone(),
            tables: self.tables.clone(),
            chunks,
            position,
            announced: HashSet::new(),
            server_id: self.server_id,
            gate: if worker == 0 { self.gate.as_ref().map(|g| g.subscribe()) } else { None },
            follower: None,
            schema_only: self.schema_only,
            skip_before: self.skip_before,
        }))
    }
}

/// Worker `w`'s chunks, page by page.
struct ChunkReader {
    pool: mysql_async::Pool,
    scope: Arc<Scope>,
    tables: Arc<Vec<Table>>,
    /// Chunks still to read, the current one first.
    chunks: VecDeque<Chunk>,
    position: ChunkPosition,
    /// Tables whose schema this run has sent.
    announced: HashSet<TableId>,
    server_id: u32,
    /// See [`Chunks::gate`].
    gate: Option<watch::Receiver<bool>>,
    follower: Option<Follower>,
    /// Announce the tables only.
    schema_only: bool,
    /// `timestamp` mode: the binlog from this time (Unix seconds).
    skip_before: Option<u32>,
}

impl ChunkReader {
    /// After the snapshot: the binlog's next transaction (worker 0 of a binlog mode), else the end.
    async fn follow(&mut self) -> anyhow::Result<Option<Event>> {
        let Some(at) = self.position.binlog.clone() else { return Ok(None) };
        if self.follower.is_none() {
            // The tables as of the binlog position: as a statement in the binlog left them, or as
            // found at the start.
            let tables = match &self.position.tables {
                Some(defs) => defs.iter().map(Table::from_def).collect::<anyhow::Result<Vec<_>>>()?,
                None => self.tables.to_vec(),
            };
            if let Some(t) = tables.iter().find(|t| !self.announced.contains(&t.id)) {
                self.announced.insert(t.id.clone());
                return Ok(Some(Event::SchemaChange(t.announce())));
            }
            if let Some(mut gate) = self.gate.take() {
                tracing::debug!("waiting for every worker's part of the snapshot to be checkpointed");
                if gate.wait_for(|done| *done).await.is_err() {
                    return Ok(None);
                }
            }
            tracing::info!("following the binlog from {}", at.describe());
            let (pool, scope) = (&self.pool, self.scope.clone());
            let skip = self.position.binlog_skip;
            let follower = Follower::open(pool, self.server_id, &at, skip, tables, scope, self.skip_before).await?;
            self.follower = Some(follower);
        }
        let follower = self.follower.as_mut().expect("opened above");
        let (event, after) = follower.next().await?;
        match after {
            Some(after) => {
                self.position.binlog = Some(after);
                self.position.binlog_skip = 0;
                if matches!(event, Event::SchemaChange(_)) {
                    self.position.tables = Some(follower.defs());
                }
            }
            None => self.position.binlog_skip += 1,
        }
        Ok(Some(event))
    }

    /// The SQL of the next page of the current chunk.
    fn page(&self, t: &Table, chunk: &Chunk) -> String {
        let columns: Vec<String> = t.columns.iter().map(MysqlColumn::select).collect();
        let quote = |k: &str| format!("`{}`", k.replace('`', "``"));
        let order: Vec<String> = t.primary_key.iter().map(|k| quote(k)).collect();
        let key = t.integer_key().map(quote);
        let order = (!order.is_empty()).then(|| order.join(", "));
        let tail = self.position.chunk.page(chunk, key.as_deref(), order.as_deref(), PAGE_ROWS);
        format!("SELECT {} FROM {}{tail}", columns.join(", "), t.quoted())
    }
}

#[async_trait]
impl SourceReader for ChunkReader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        let Some(chunk) = self.chunks.front().cloned() else {
            self.position.chunk.finish();
            return self.follow().await;
        };
        let t = &self.tables[chunk.table];
        self.position.chunk.enter(&t.name, &chunk);
        if !self.announced.contains(&t.id) {
            self.announced.insert(t.id.clone());
            return Ok(Some(Event::SchemaChange(t.announce())));
        }
        if self.schema_only {
            self.chunks.pop_front();
            return Ok(Some(Event::data(
                &t.id,
                sluice_guest::batch::Batch::new(arrow::record_batch::RecordBatch::new_empty(t.schema.clone())),
            )));
        }
        let sql = self.page(t, &chunk);
        let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
        // TIMESTAMP columns as UTC wall time, as the binlog carries them.
        conn.query_drop("SET time_zone = '+00:00'").await.map_err(Restartable::caused_by)?;
        let rows: Vec<mysql_async::Row> =
            conn.query(&sql).await.map_err(|e| Restartable::error(format!("reading `{}`: {e}", t.id)))?;
        let mut builder = BatchBuilder::new(t.schema.clone()).map_err(|e| anyhow::anyhow!(e.message))?;
        let key = t.integer_key().and_then(|k| t.columns.iter().position(|c| c.name == k));
        let mut last_key = None;
        for row in &rows {
            let texts: Vec<Option<String>> = (0..t.columns.len())
                .map(|i| match row.as_ref(i) {
                    None | Some(mysql_async::Value::NULL) => Ok(None),
                    Some(mysql_async::Value::Bytes(b)) if self.scope.zone.is_some() && t.columns[i].is_timestamp() => {
                        let text = String::from_utf8_lossy(b);
                        let utc = sluice_guest::batch::parse_datetime_micros(&text)
                            .map_err(|e| format!("column `{}`: {text:?}: {}", t.columns[i].name, e.message))?;
                        Ok(Some(self.scope.timestamp(utc)))
                    }
                    Some(mysql_async::Value::Bytes(b)) => t.columns[i].text(b, self.scope.binary, false).map(Some),
                    Some(other) => Ok(Some(other.as_sql(true).trim_matches('\'').to_string())),
                })
                .collect::<Result<_, String>>()
                .map_err(|e| anyhow::anyhow!("reading `{}`: {e}", t.id))?;
            let values: Vec<Value<'_>> = texts.iter().map(|v| v.as_deref().map_or(Value::Null, Value::Str)).collect();
            builder.push(RowKind::Insert, &values).map_err(|e| anyhow::anyhow!("reading `{}`: {}", t.id, e.message))?;
            if let Some(k) = key {
                last_key = texts[k].as_deref().and_then(|v| v.parse::<i64>().ok());
            }
        }
        let names = |i: usize| self.tables[i].name.clone();
        self.position.chunk.advance(&mut self.chunks, rows.len() as u64, PAGE_ROWS, last_key, names);
        Ok(Some(Event::data(&t.id, builder.finish().map_err(|e| anyhow::anyhow!(e.message))?)))
    }

    fn position(&self) -> serde_json::Value {
        self.position.to_value()
    }
}
