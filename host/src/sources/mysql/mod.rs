//! `type = "mysql"`: the tables of a MySQL/MariaDB database — a snapshot in primary-key chunks,
//! then (`scan.startup.mode = "initial"`) their changes from the binlog, from the position taken
//! before the snapshot began; or only the changes from now (`latest-offset`), or only the
//! snapshot (`snapshot`). The shape is every CDC source's ([`crate::sources::cdc`]); this module
//! is MySQL's dialect of it: the tables and keys from `information_schema` (columns mapped as the
//! connector maps them, [`types`]), pages read as text, and the binlog ([`binlog`]), whose
//! position is taken before the snapshot and kept in worker 0's position. Changes between the
//! binlog position and a chunk's read are replayed, which a UNIQUE target absorbs. TIMESTAMP values
//! are read as UTC wall time in both phases. No lock is taken: without the binlog, rows changed
//! while the snapshot runs may be read before or after the change.

mod binlog;
mod ddl;
pub mod types;

use std::sync::Arc;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};

use crate::pipeline::Checked;
use crate::runtime::mirror::{MirrorSource, RowHash};
use crate::runtime::{Restartable, Source, SplitEnumerator};
use crate::sources::cdc::{self, Dialect, Enumerator, LogState, Scope};
use crate::sources::{StartupMode, is_zero};
use binlog::{BinlogPosition, Follower};
use types::MysqlColumn;

cdc::cdc_source! {
    /// `type = "mysql"`: the options (Flink CDC's MySQL source keys where one exists).
    pub struct MysqlSource: "mysql", Connection::Mysql {
        /// `scan.startup.mode`.
        /// Default: `initial`.
        #[serde(default)]
        pub scan: MysqlScan,
    }
}

/// `scan.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlScan {
    #[serde(default)]
    pub startup: MysqlStartup,
}

/// `scan.startup.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlStartup {
    /// `initial` (the snapshot, then the binlog), `snapshot` (read every table once and stop),
    /// or only the binlog: from now (`latest-offset`), from the oldest file the server keeps
    /// (`earliest-offset`), from `specific_offset` (`specific-offset`) or from
    /// `timestamp_millis` (`timestamp`).
    #[serde(default)]
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
    /// The checks of its own keys.
    fn check(&self) -> Checked {
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
        Ok(())
    }

    /// `database` is a regex of database names (Flink CDC's `database-name`): one name matches
    /// itself.
    const NAMESPACE_PATTERN: bool = true;

    fn namespace(&self) -> &str {
        &self.database
    }

    async fn open(&self, opening: cdc::Opening<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let cdc::Opening { server, password, scope, mode, progress } = opening;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(server.host.clone())
            .tcp_port(server.port.unwrap_or(3306))
            .user(Some(server.user.clone()))
            .pass(Some(password))
            .prefer_socket(false);
        let pool = mysql_async::Pool::new(opts);
        let tables = discover(&pool, &scope)
            .await
            .with_context(|| format!("reading the tables of `{}` at {}", self.database, server.host))?;
        if tables.is_empty() {
            return Err(self.patterns().none_match(&self.database, "the database"));
        }
        Ok(Arc::new(MysqlTables {
            pool,
            scope,
            tables: Arc::new(cdc::Found::new(tables)),
            progress,
            chunk_size: self.chunk_size,
            mode,
            startup: self.scan.startup.clone(),
            server_id: server.server_id.unwrap_or_else(|| 5400 + fastrand::u32(..1000)),
        }))
    }
}

/// A source table; its `extra` the labels of each ENUM or SET column (the binlog carries their
/// numbers; empty for other columns).
type Table = cdc::Table<MysqlColumn, Vec<Vec<String>>>;

/// A table as a position keeps it: what [`new_table`] builds it from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub db: String,
    pub name: String,
    pub columns: Vec<MysqlColumn>,
    pub primary_key: Vec<String>,
}

fn new_table(db: &str, name: &str, columns: Vec<MysqlColumn>, primary_key: Vec<String>) -> anyhow::Result<Table> {
    let labels = columns
        .iter()
        .map(|c| {
            let t = c.column_type.to_ascii_lowercase();
            if t.starts_with("enum(") || t.starts_with("set(") { binlog::labels(&c.column_type) } else { Vec::new() }
        })
        .collect();
    Table::new(db, name, columns, primary_key, labels)
}

impl Table {
    fn def(&self) -> TableDef {
        TableDef {
            db: self.namespace.clone(),
            name: self.name.clone(),
            columns: self.columns.clone(),
            primary_key: self.primary_key.clone(),
        }
    }

    fn quoted(&self) -> String {
        format!("{}.{}", quote(&self.namespace), quote(&self.name))
    }
}

/// A name as a MySQL identifier.
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

async fn discover(pool: &mysql_async::Pool, scope: &Scope) -> anyhow::Result<Vec<Table>> {
    let mut conn = pool.get_conn().await.map_err(Restartable::caused_by)?;
    let names: Vec<(String, String)> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' \
             AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') \
             ORDER BY TABLE_SCHEMA, TABLE_NAME",
        )
        .await?;
    let mut tables = Vec::new();
    for (db, name) in names.into_iter().filter(|(db, n)| scope.covers(db, n)) {
        let db = db.as_str();
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
        tables.push(new_table(db, &name, columns, primary_key)?);
    }
    Ok(tables)
}

/// A MySQL source, built: the pool and the tables.
struct MysqlTables {
    pool: mysql_async::Pool,
    scope: Arc<Scope>,
    tables: Arc<cdc::Found<Table>>,
    progress: Arc<cdc::progress::Progress>,
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
        let positions = Enumerator::<Mysql>::restore(restored)?;
        let fresh = positions.iter().all(Option::is_none);
        // The binlog position is taken before the snapshot begins: every change after it is
        // replayed, none before it is missed.
        let restored_start = positions.first().cloned().flatten().and_then(|p| p.log.binlog);
        let log_start = match (self.mode, restored_start) {
            (StartupMode::Snapshot | StartupMode::SchemaOnly, _) => None,
            (_, start) if !fresh => start,
            (StartupMode::EarliestOffset | StartupMode::Timestamp, _) => {
                let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
                Some(binlog::earliest(&mut conn).await?)
            }
            (StartupMode::SpecificOffset, _) => {
                let o = self.startup.specific_offset.clone().context("specific_offset")?;
                Some(BinlogPosition { file: o.file.unwrap_or_default(), pos: o.pos.unwrap_or(4), gtid: o.gtid_set })
            }
            _ => {
                let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
                Some(binlog::current(&mut conn).await?)
            }
        };
        let tables = self.tables.for_run(discover(&self.pool, &self.scope)).await?;
        let run = Enumerator {
            dialect: Arc::new(self.dialect()),
            tables,
            mode: self.mode,
            chunk_size: self.chunk_size,
            log_start,
            snapshot: None,
        };
        run.start(&positions).await
    }

    fn describe(&self) -> String {
        let tables = self.tables.get();
        let names: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
        format!("mysql {} of {}", self.mode, names.join(", "))
    }

    fn mirror(&self) -> Option<Arc<dyn MirrorSource>> {
        Some(Arc::new(cdc::mirror::Mirror { dialect: Arc::new(self.dialect()), tables: self.tables.clone() }))
    }
}

impl MysqlTables {
    fn dialect(&self) -> Mysql {
        Mysql {
            pool: self.pool.clone(),
            scope: self.scope.clone(),
            progress: self.progress.clone(),
            server_id: self.server_id,
            skip_before: self.startup.timestamp_millis.map(|t| (t / 1000).clamp(0, i64::from(u32::MAX)) as u32),
        }
    }
}

/// MySQL's dialect of a CDC source, for a run.
struct Mysql {
    pool: mysql_async::Pool,
    scope: Arc<Scope>,
    progress: Arc<cdc::progress::Progress>,
    server_id: u32,
    /// `timestamp` mode: the binlog from this time (Unix seconds).
    skip_before: Option<u32>,
}

/// Worker 0's place in the binlog, as its position keeps it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct BinlogState {
    /// The binlog position after the last transaction returned (or where following starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog: Option<BinlogPosition>,
    /// Events of the transaction at `binlog` already returned: a checkpoint inside a
    /// transaction holds some of its rows, which a restart does not return again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub binlog_skip: u64,
}

impl LogState for BinlogState {
    type At = BinlogPosition;

    fn at(&self) -> Option<BinlogPosition> {
        self.binlog.clone()
    }

    fn begin(&mut self, start: Option<BinlogPosition>) {
        // Kept from the first checkpoint on: a restart during the snapshot follows from here.
        if self.binlog.is_none() {
            self.binlog = start;
        }
    }

    fn skip(&self) -> u64 {
        self.binlog_skip
    }

    fn advance(&mut self, at: BinlogPosition) {
        self.binlog = Some(at);
        self.binlog_skip = 0;
    }

    fn relocate(&mut self, at: BinlogPosition) {
        self.binlog = Some(at);
    }

    fn step(&mut self) {
        self.binlog_skip += 1;
    }
}

#[async_trait]
impl Dialect for Mysql {
    type Table = Table;
    type Def = TableDef;
    type Log = BinlogState;
    type Session = mysql_async::Conn;
    type Follower = Follower;

    const KIND: &'static str = "mysql";

    /// `server_id`, the binlog's base name and (MySQL) `server_uuid`: a replica, a new instance
    /// or a server in another data dir differ in one of them.
    async fn server(&self) -> anyhow::Result<String> {
        let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
        let (id, base): (u64, Option<String>) = conn
            .query_first("SELECT @@server_id, @@log_bin_basename")
            .await
            .map_err(Restartable::caused_by)?
            .unwrap_or_default();
        // MariaDB has no server_uuid.
        let uuid: Option<String> = conn.query_first("SELECT @@server_uuid").await.ok().flatten();
        let mut text = format!("server_id {id}, binlog {}", base.unwrap_or_else(|| "off".into()));
        if let Some(uuid) = uuid {
            text.push_str(&format!(", server_uuid {uuid}"));
        }
        Ok(text)
    }

    /// MariaDB's GTIDs name a transaction on every server of a replication group: a failover
    /// replica (or a server restored with its binlog) whose binlog has the transactions the
    /// position read goes on from them. A binlog file and offset belong to one server only.
    async fn elsewhere(&self, kept: &str, found: &str, at: BinlogPosition) -> anyhow::Result<BinlogPosition> {
        let start_over = "start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir` (or point the source back at that server)";
        let Some(gtids) = at.gtid.clone().filter(|g| !g.is_empty() && !g.contains(':')) else {
            anyhow::bail!(
                "the sync's state was read from another MySQL server ({kept}, binlog at {}); this one is {found}, and {}: {start_over}",
                at.describe(),
                match at.gtid {
                    Some(_) => "Sluice goes on from another server's log by MariaDB GTIDs only",
                    None => "the position has no GTIDs to find its place in this server's binlog",
                }
            );
        };
        let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
        let state: Option<String> =
            conn.query_first("SELECT @@GLOBAL.gtid_binlog_state").await.map_err(Restartable::caused_by)?;
        let state = state.unwrap_or_default();
        // `domain-server-seq`: this server's binlog has the transaction when it has one at least
        // as late from the same server in the same domain.
        let parse = |g: &str| -> Option<(u32, u32, u64)> {
            let mut p = g.trim().splitn(3, '-');
            Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?, p.next()?.parse().ok()?))
        };
        let has = |g: &str| {
            parse(g).is_some_and(|(d, s, n)| {
                state.split(',').filter_map(&parse).any(|(d2, s2, n2)| d2 == d && s2 == s && n2 >= n)
            })
        };
        if let Some(missing) = gtids.split(',').find(|g| !has(g)) {
            anyhow::bail!(
                "the sync's state was read from another MySQL server ({kept}, up to GTIDs {gtids}); this one is {found}, whose binlog never had transaction {missing}: {start_over}",
                missing = missing.trim()
            );
        }
        tracing::warn!(
            "the binlog position {} was read from another server ({kept}); this one is {found} and has its transactions: going on from GTIDs {gtids}",
            at.describe()
        );
        Ok(BinlogPosition { file: String::new(), pos: 4, gtid: Some(gtids) })
    }

    fn scope(&self) -> &Scope {
        &self.scope
    }

    fn quote(&self, name: &str) -> String {
        quote(name)
    }

    /// Keys of numbers, dates, DATETIME (and TIMESTAMP shown in UTC) and UTF-8 text: quoted,
    /// with backslashes escaped (the session allows them).
    /// Numbers unquoted (MySQL compares a number column with a quoted string as doubles, which
    /// would blur BIGINT and DECIMAL keys past 2^53), other values quoted.
    fn key_literal(&self, t: &Table, columns: &[String]) -> Option<Vec<cdc::chunks::Literal>> {
        // Text as a string literal, backslashes escaped (the session's sql_mode lets them escape).
        fn quoted(v: &str) -> String {
            format!("'{}'", v.replace('\\', "\\\\").replace('\'', "''"))
        }
        let number: cdc::chunks::Literal = |v| {
            let plain = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'.');
            if plain { v.to_string() } else { quoted(v) }
        };
        let literal = |k: &String| {
            let c = t.columns.iter().find(|c| &c.name == k)?;
            let (_, text) = c.fingerprinted(self.scope.zone)?;
            let numeric = !text && !c.is(&["date", "datetime", "timestamp"]);
            Some(if numeric { number } else { quoted })
        };
        columns.iter().map(literal).collect()
    }

    fn select(&self, t: &Table) -> String {
        let columns: Vec<String> = t.columns.iter().map(MysqlColumn::select).collect();
        format!("SELECT {} FROM {}", columns.join(", "), t.quoted())
    }

    async fn session(&self, _snapshot: Option<&str>) -> anyhow::Result<mysql_async::Conn> {
        let mut conn = self.pool.get_conn().await.map_err(Restartable::caused_by)?;
        // TIMESTAMP columns as UTC wall time, as the binlog carries them; backslashes escape in
        // literals (key values, `key_literal`).
        conn.query_drop("SET time_zone = '+00:00', sql_mode = REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')")
            .await
            .map_err(Restartable::caused_by)?;
        Ok(conn)
    }

    async fn rows(
        &self,
        conn: &mut mysql_async::Conn,
        t: &Table,
        sql: &str,
    ) -> anyhow::Result<Vec<Vec<Option<String>>>> {
        let rows: Vec<mysql_async::Row> = conn.query(sql).await.map_err(|e| match &e {
            // ER_BAD_FIELD_ERROR: a column was dropped or renamed under the snapshot, which a
            // restart would read the same way again.
            mysql_async::Error::Server(s) if s.code == 1054 => anyhow::anyhow!(
                "reading `{}`: {e}: a column of the table was dropped or renamed while its snapshot was read, which Sluice cannot finish; change columns before a sync's snapshot or after it (once the log says `following the binlog`), and start this one again: a new state dir, and the table dropped in Doris",
                t.id
            ),
            _ => Restartable::error(format!("reading `{}`: {e}", t.id)),
        })?;
        let scope = &self.scope;
        let text = |row: &mysql_async::Row, i: usize| match row.as_ref(i) {
            None | Some(mysql_async::Value::NULL) => Ok(None),
            Some(mysql_async::Value::Bytes(b)) if scope.zone.is_some() && t.columns[i].is_timestamp() => {
                let text = String::from_utf8_lossy(b);
                let utc = sluice_guest::batch::parse_datetime_micros(&text)
                    .map_err(|e| format!("column `{}`: {text:?}: {}", t.columns[i].name, e.message))?;
                Ok(Some(scope.wall_time(utc)))
            }
            Some(mysql_async::Value::Bytes(b)) => t.columns[i].text(b, scope.binary, false).map(Some),
            Some(other) => Ok(Some(other.as_sql(true).trim_matches('\'').to_string())),
        };
        rows.iter()
            .map(|row| (0..t.columns.len()).map(|i| text(row, i)).collect::<Result<Vec<_>, String>>())
            .collect::<Result<_, String>>()
            .map_err(|e| anyhow::anyhow!("reading `{}`: {e}", t.id))
    }

    fn progress(&self) -> &cdc::progress::Progress {
        &self.progress
    }

    /// `information_schema.TABLES.TABLE_ROWS` (InnoDB's estimate).
    async fn estimated_rows(&self, conn: &mut mysql_async::Conn, t: &Table) -> Option<u64> {
        let sql = "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?";
        conn.exec_first::<Option<u64>, _, _>(sql, (&t.namespace, &t.name)).await.ok().flatten().flatten()
    }

    async fn bounds(&self, conn: &mut mysql_async::Conn, t: &Table, key: &str) -> anyhow::Result<Option<(i64, i64)>> {
        let sql = format!("SELECT MIN({0}), MAX({0}) FROM {1}", quote(key), t.quoted());
        let bounds: Option<(Option<String>, Option<String>)> = conn.query_first(sql).await?;
        let number = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok());
        Ok(bounds.and_then(|(lo, hi)| number(lo).zip(number(hi))))
    }

    /// `CRC32` of each row's text, summed.
    fn fingerprint(&self, t: &Table) -> Option<(RowHash, Vec<bool>, String)> {
        let columns: Vec<(String, bool)> =
            t.columns.iter().map(|c| c.fingerprinted(self.scope.zone)).collect::<Option<_>>()?;
        let (values, text): (Vec<String>, Vec<bool>) = columns.into_iter().unzip();
        let sql = format!("SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', {}))) FROM {}", values.join(", "), t.quoted());
        Some((RowHash::Crc32, text, sql))
    }

    async fn scalars(&self, conn: &mut mysql_async::Conn, sql: &str) -> anyhow::Result<Vec<Option<String>>> {
        let row: Option<mysql_async::Row> = conn.query_first(sql).await?;
        let text = |v: Option<&mysql_async::Value>| match v {
            None | Some(mysql_async::Value::NULL) => None,
            Some(mysql_async::Value::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Some(other) => Some(other.as_sql(true).trim_matches('\'').to_string()),
        };
        Ok(row.map(|r| (0..r.len()).map(|i| text(r.as_ref(i))).collect()).unwrap_or_default())
    }

    fn table(&self, def: &TableDef) -> anyhow::Result<Table> {
        new_table(&def.db, &def.name, def.columns.clone(), def.primary_key.clone())
    }

    fn def(&self, t: &Table) -> TableDef {
        t.def()
    }

    async fn follow(&self, at: BinlogPosition, skip: u64, tables: Vec<Table>) -> anyhow::Result<Follower> {
        tracing::info!("following the binlog from {}", at.describe());
        let scope = self.scope.clone();
        let follower = Follower::open(&self.pool, self.server_id, &at, skip, tables, scope, self.skip_before).await?;
        Ok(follower.reporting(self.progress.clone(), self.pool.clone()))
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::Position;
    use crate::sources::cdc::snapshot::CdcPosition;

    /// Worker 0's position as the binlog reader writes it: a checkpoint of an earlier run reads
    /// back the same, key for key.
    #[test]
    fn a_position_keeps_its_keys() {
        let written = serde_json::json!({
            "table": "orders", "start": 8096, "cursor": 9000, "rows": 904, "done": false,
            "steps": {"orders": 8096},
            "binlog": {"file": "mysql-bin.000003", "pos": 1234, "gtid": "0-1-77"},
            "binlog_skip": 2,
            "tables": [{"db": "shop", "name": "orders", "columns": [
                {"name": "id", "column_type": "int(11)", "nullable": false}], "primary_key": ["id"]}],
        });
        let p = CdcPosition::<super::BinlogState, super::TableDef>::restore(Some(&written), "mysql").unwrap();
        assert_eq!(p.log.binlog.as_ref().unwrap().describe(), "mysql-bin.000003:1234");
        assert_eq!(p.log.binlog_skip, 2);
        assert_eq!(p.to_value(), written);
    }
}
