//! Following the binlog of a MySQL/MariaDB server (ROW format): the row events of the source's
//! tables as change events, a transaction at a time, with the position after the transaction's
//! commit as the reader's position, so a restart neither loses nor repeats a transaction.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use futures::StreamExt;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::binlog::value::BinlogValue;
use serde::{Deserialize, Serialize};
use sluice_guest::batch::RowKind;

use super::ddl::{self, Ddl, Shape};
use super::{Table, TableDef, new_table};
use crate::runtime::{Alter, Event, Restartable, SchemaChange};
use crate::sources::cdc::log::{Release, Transactions};
use crate::sources::cdc::progress::Progress;
use crate::sources::cdc::{LogFollower, Scope};

/// A binlog position: the file and the offset of the next event to read, and the GTIDs read up
/// to there (MariaDB: the last of each domain, `domain-server-seq`, comma separated, as
/// `gtid_slave_pos` takes them; MySQL: the last `uuid:n`). A position given by GTIDs alone has
/// an empty `file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

/// The oldest binlog position the server still has (`SHOW BINARY LOGS`).
pub async fn earliest(conn: &mut mysql_async::Conn) -> anyhow::Result<BinlogPosition> {
    use mysql_async::prelude::Queryable;
    let rows: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| anyhow::anyhow!("SHOW BINARY LOGS: {e} (the server needs `log_bin` on for `earliest-offset`)"))?;
    let file: Option<String> = rows.first().and_then(|r| r.get(0));
    let file = file.context("the server has no binlog files (SHOW BINARY LOGS is empty)")?;
    Ok(BinlogPosition { file, pos: 4, gtid: None })
}

/// The server's current binlog position (`SHOW MASTER STATUS`); an error that says how to turn
/// the binlog on when it is off.
pub async fn current(conn: &mut mysql_async::Conn) -> anyhow::Result<BinlogPosition> {
    use mysql_async::prelude::Queryable;
    let row: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await?;
    let Some(row) = row else {
        anyhow::bail!(
            "the MySQL server has no binlog (SHOW MASTER STATUS is empty): start it with `log_bin` on, `binlog_format = ROW` and a `server_id`"
        );
    };
    let file: String = row.get(0).unwrap_or_default();
    let pos: u64 = row.get(1).unwrap_or(4);
    let gtid: Option<String> = conn.query_first("SELECT @@GLOBAL.gtid_binlog_pos").await.ok().flatten();
    Ok(BinlogPosition { file, pos, gtid: gtid.filter(|g| !g.is_empty()) })
}

/// An open binlog stream and the changes of the transaction being read.
pub struct Follower {
    stream: mysql_async::BinlogStream,
    /// The tables followed, with their columns as of the position read; a table created in the
    /// stream is added.
    tables: Vec<Table>,
    by_name: HashMap<String, usize>,
    scope: Arc<Scope>,
    /// The file of the events being read.
    file: String,
    /// The open transaction's rows, and the events of a committed one still to hand out (a
    /// transaction's rows of one table are one batch, however many).
    tx: Transactions<BinlogPosition>,
    /// A table changed since the position last took the tables.
    changed: bool,
    /// The GTIDs read (see [`BinlogPosition::gtid`]): MariaDB's by domain, or MySQL's last.
    gtids: std::collections::BTreeMap<u32, String>,
    /// `timestamp` mode: what was written before this time (seconds) is passed over.
    skip_before: Option<u32>,
    /// Whether the event being read was written before `skip_before`.
    skipping: bool,
    /// Whether the server checksums its events (`binlog_checksum`).
    checksums: bool,
    /// Where the stream was opened (a purged binlog is found on the first read).
    opened: BinlogPosition,
    /// How far it is, and the position read as the probe of the server's binlog end sees it.
    progress: Option<Arc<Progress>>,
    read_at: Arc<std::sync::Mutex<(String, u64)>>,
    _probe: Option<crate::runtime::AbortOnDrop<()>>,
}

/// How often the server is asked where its binlog ends.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes of the binlog files `logs` (`SHOW BINARY LOGS`: name and size, oldest first) after
/// offset `pos` of `file`; none when `file` is not among them.
fn bytes_after(logs: &[(String, u64)], file: &str, pos: u64) -> Option<u64> {
    let at = logs.iter().position(|(name, _)| name == file)?;
    Some(logs[at].1.saturating_sub(pos) + logs[at + 1..].iter().map(|(_, size)| size).sum::<u64>())
}

impl Follower {
    /// Open the stream at `at` (its file and offset, or with no file its GTIDs), as replica
    /// `server_id`, leaving out the first `skip` events of the first transaction (those a
    /// checkpoint taken inside it already holds); with `skip_before`, what was written before
    /// that time (Unix seconds) is passed over.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        pool: &mysql_async::Pool,
        server_id: u32,
        at: &BinlogPosition,
        skip: u64,
        tables: Vec<Table>,
        scope: Arc<Scope>,
        skip_before: Option<u32>,
    ) -> anyhow::Result<Follower> {
        use mysql_async::prelude::Queryable;
        let mut conn = pool.get_conn().await.map_err(Restartable::caused_by)?;
        // One round trip: whether it is MariaDB (its GTIDs) and whether it checksums events.
        let (version, checksum): (String, Option<String>) = conn
            .query_first("SELECT VERSION(), @@GLOBAL.binlog_checksum")
            .await?
            .context("SELECT VERSION() returned no row")?;
        let mariadb = version.contains("MariaDB");
        let checksums = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
        let mut request = mysql_async::BinlogStreamRequest::new(server_id);
        if mariadb {
            // GTID events instead of the placeholders MariaDB sends replicas that do not ask.
            conn.query_drop("SET @mariadb_slave_capability = 4").await?;
        }
        if at.file.is_empty() {
            let gtid = at.gtid.as_deref().unwrap_or_default();
            anyhow::ensure!(
                mariadb,
                "starting at the GTID set {gtid:?}: only MariaDB GTIDs are supported; give a file and pos"
            );
            let set = format!("SET @slave_connect_state = '{}', @slave_gtid_strict_mode = 0", gtid.replace('\'', ""));
            conn.query_drop(set).await.with_context(|| format!("starting at the GTIDs {gtid:?}"))?;
            request = request.with_filename(b"".as_slice()).with_pos(4u64);
        } else {
            request = request.with_filename(at.file.as_bytes()).with_pos(at.pos);
        }
        let stream = conn.get_binlog_stream(request).await.map_err(|e| {
            if is_binlog_gone(&e) {
                gone(at, &e.to_string())
            } else {
                Restartable::error(format!("opening the binlog at {}: {e}", at.describe()))
            }
        })?;
        let by_name =
            tables.iter().enumerate().map(|(i, t)| (key(&(t.namespace.clone(), t.name.clone())), i)).collect();
        let gtids = at
            .gtid
            .iter()
            .flat_map(|g| g.split(','))
            .filter_map(|g| Some((g.trim().split('-').next()?.parse().ok()?, g.trim().to_string())))
            .collect();
        Ok(Follower {
            stream,
            tables,
            by_name,
            scope,
            file: at.file.clone(),
            tx: Transactions::new(skip, usize::MAX, Release::AtCommit),
            changed: false,
            gtids,
            skip_before,
            skipping: false,
            checksums,
            opened: at.clone(),
            progress: None,
            read_at: Arc::new(std::sync::Mutex::new((at.file.clone(), at.pos))),
            _probe: None,
        })
    }

    /// Say how far it is in `progress`: the time of each change read, and (asking `pool` every
    /// few seconds where the server's binlog ends) the bytes after the position read.
    pub fn reporting(mut self, progress: Arc<Progress>, pool: mysql_async::Pool) -> Follower {
        let (read_at, p) = (self.read_at.clone(), progress.clone());
        let probe = tokio::spawn(async move {
            use mysql_async::prelude::Queryable;
            // The first answer after a while: until then, the age of the changes read is the lag.
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PROBE_EVERY, PROBE_EVERY);
            loop {
                ticks.tick().await;
                let logs: Result<Vec<(String, u64)>, _> = async {
                    let mut conn = pool.get_conn().await?;
                    let rows: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await?;
                    Ok::<_, mysql_async::Error>(
                        rows.iter().filter_map(|r| Some((r.get::<String, _>(0)?, r.get::<u64, _>(1)?))).collect(),
                    )
                }
                .await;
                let (file, pos) = read_at.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match logs.map(|logs| bytes_after(&logs, &file, pos)) {
                    Ok(Some(bytes)) => p.behind(bytes),
                    Ok(None) => {}
                    Err(e) => tracing::debug!("asking where the binlog ends: {e}"),
                }
            }
        });
        self.progress = Some(progress);
        self._probe = Some(crate::runtime::AbortOnDrop(probe));
        self
    }

    fn gtid(&self) -> Option<String> {
        (!self.gtids.is_empty()).then(|| self.gtids.values().cloned().collect::<Vec<_>>().join(","))
    }

    /// Keep the rows of a row event of one of the source's tables.
    fn rows(&mut self, rows: &RowsEventData<'_>) -> anyhow::Result<()> {
        if self.skipping {
            return Ok(());
        }
        let Some(tme) = self.stream.get_tme(rows.table_id()) else { return Ok(()) };
        let name = key(&(tme.database_name().into_owned(), tme.table_name().into_owned()));
        let Some(&index) = self.by_name.get(&name) else { return Ok(()) };
        let table = &self.tables[index];
        if tme.columns_count() as usize != table.columns.len() {
            anyhow::bail!(
                "`{}`: the binlog's rows have {} columns where Sluice knows {} ({}): the table changed by a statement Sluice did not follow; start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`",
                table.id,
                tme.columns_count(),
                table.columns.len(),
                table.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        let key: Vec<usize> =
            table.primary_key.iter().filter_map(|k| table.columns.iter().position(|c| &c.name == k)).collect();
        for row in rows.rows(tme) {
            let (before, after) = row?;
            let scope = &self.scope;
            let text = |r: &mysql_async::binlog::row::BinlogRow| -> anyhow::Result<Vec<Option<String>>> {
                (0..table.columns.len()).map(|i| value_text(table, i, r.as_ref(i), scope)).collect()
            };
            let tables = &self.tables;
            let mut push = |kind, row| self.tx.push(tables, index, kind, row);
            match (before, after) {
                (None, Some(a)) => push(RowKind::Insert, text(&a)?)?,
                (Some(b), None) => push(RowKind::Delete, text(&b)?)?,
                (Some(b), Some(a)) => {
                    // A changed primary key is a delete of the old key and an insert of the new.
                    let moved = key.iter().any(|&k| b.as_ref(k) != a.as_ref(k));
                    if moved {
                        push(RowKind::Delete, text(&b)?)?;
                        push(RowKind::Insert, text(&a)?)?;
                    } else if scope.update_before {
                        push(RowKind::UpdateBefore, text(&b)?)?;
                        push(RowKind::UpdateAfter, text(&a)?)?;
                    } else {
                        // Nothing after the source uses the row before: it is not decoded.
                        push(RowKind::UpdateAfter, text(&a)?)?;
                    }
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The tables followed, as a position keeps them.
    fn defs(&self) -> Vec<TableDef> {
        let mut defs: Vec<TableDef> = self.by_name.values().map(|&i| self.tables[i].def()).collect();
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        defs
    }

    /// A statement of database `db` that is not a transaction's: its changes to the tables
    /// followed become schema changes, handed out with the position after it.
    fn ddl(&mut self, db: &str, sql: &str, end: u64) -> anyhow::Result<()> {
        if self.skipping {
            return Ok(());
        }
        let mut changes = Vec::new();
        for statement in ddl::parse(db, sql) {
            let change = |t: &Table, alter: Vec<Alter>| SchemaChange {
                table: t.id.clone(),
                schema: t.schema.clone(),
                primary_key: t.primary_key.clone(),
                ddl: Some(sql.to_string()),
                alter,
                resumed: false,
            };
            let unsupported = |reason: String| vec![Alter::Unsupported { reason }];
            match statement {
                Ddl::Alter { table, ops } => {
                    let Some(&i) = self.by_name.get(&key(&table)) else { continue };
                    let t = &self.tables[i];
                    let (mut columns, mut primary_key) = (t.columns.clone(), t.primary_key.clone());
                    let doris = |c: &super::MysqlColumn| c.doris_type().map(|t| t.to_string()).unwrap_or_default();
                    let shape = Shape { columns: &mut columns, primary_key: &mut primary_key };
                    let alter = match ddl::apply(shape, &ops, doris) {
                        Ok(alter) if alter.is_empty() => continue,
                        Ok(alter) => match new_table(&t.namespace, &t.name, columns, primary_key) {
                            Ok(next) => {
                                self.tables[i] = next;
                                alter
                            }
                            Err(e) => unsupported(e.to_string()),
                        },
                        Err(reason) => unsupported(reason),
                    };
                    changes.push(change(&self.tables[i], alter));
                }
                Ddl::Create { table, columns, primary_key } => {
                    if self.by_name.contains_key(&key(&table)) || !self.scope.covers(&table.0, &table.1) {
                        continue;
                    }
                    let columns = columns.into_iter().map(|c| c.column).collect();
                    match new_table(&table.0, &table.1, columns, primary_key) {
                        Ok(t) => {
                            self.by_name.insert(key(&table), self.tables.len());
                            changes.push(change(&t, vec![Alter::CreateTable]));
                            self.tables.push(t);
                        }
                        Err(e) => tracing::warn!("`{}.{}` is created but cannot be followed: {e}", table.0, table.1),
                    }
                }
                Ddl::Truncate(table) => {
                    if let Some(&i) = self.by_name.get(&key(&table)) {
                        changes.push(change(&self.tables[i], vec![Alter::Truncate]));
                    }
                }
                Ddl::Drop(table) => {
                    if self.by_name.remove(&key(&table)).is_some() {
                        tracing::warn!("`{}.{}` was dropped; its Doris table is kept", table.0, table.1);
                    }
                }
                Ddl::Rename { from, to } => {
                    if let Some(i) = self.by_name.remove(&key(&from)) {
                        let reason =
                            format!("the table was renamed to `{}.{}`, which Sluice does not follow", to.0, to.1);
                        changes.push(change(&self.tables[i], unsupported(reason)));
                    } else if self.scope.covers(&to.0, &to.1) && !self.by_name.contains_key(&key(&to)) {
                        // Its rows are not in the binlog from here: a restarted run reads them.
                        return Err(new_table_found(&to, sql));
                    }
                }
                Ddl::Unreadable { table, reason } => {
                    let followed = self.by_name.get(&key(&table)).map(|&i| &self.tables[i]);
                    let creates = sql.trim_start().to_ascii_uppercase().starts_with("CREATE");
                    match followed {
                        // `CREATE TABLE … LIKE / AS SELECT` of a table followed already: it is
                        // there (a restarted run found it, and read it).
                        Some(_) if creates => {}
                        Some(t) => {
                            changes.push(change(t, unsupported(format!("the statement could not be read: {reason}"))))
                        }
                        None if creates && self.scope.covers(&table.0, &table.1) => {
                            tracing::info!(
                                "`{}.{}` is created by a statement Sluice reads as a new table ({reason})",
                                table.0,
                                table.1
                            );
                            return Err(new_table_found(&table, sql));
                        }
                        None => {}
                    }
                }
            }
        }
        if !changes.is_empty() {
            for change in changes {
                self.tx.schema_change(&self.tables, change)?;
            }
            let at = BinlogPosition { file: self.file.clone(), pos: end, gtid: self.gtid() };
            self.tx.commit(&self.tables, at)?;
            self.changed = true;
        }
        Ok(())
    }

    /// The transaction is committed: its rows become batches (one per run of a table), handed out
    /// before anything after it.
    fn commit(&mut self, end: u64) -> anyhow::Result<()> {
        *self.read_at.lock().unwrap_or_else(|e| e.into_inner()) = (self.file.clone(), end);
        let at = BinlogPosition { file: self.file.clone(), pos: end, gtid: self.gtid() };
        self.tx.commit(&self.tables, at)
    }
}

/// A table the patterns cover appeared in the binlog without its rows (renamed into the patterns,
/// or created from another table): the run restarts, and the restarted run reads it before it
/// goes on with the binlog.
fn new_table_found(table: &(String, String), sql: &str) -> anyhow::Error {
    crate::runtime::Restartable::error(format!(
        "`{}.{}` is new to the sync (`{sql}`): restarting to read its rows",
        table.0, table.1
    ))
}

#[async_trait]
impl LogFollower for Follower {
    type At = BinlogPosition;
    type Def = TableDef;

    /// The next batch of a committed transaction and, with its last batch, the position after the
    /// transaction.
    async fn next(&mut self) -> anyhow::Result<(Event, Option<BinlogPosition>)> {
        loop {
            if let Some(next) = self.tx.pop() {
                return Ok(next);
            }
            let Some(event) = self.stream.next().await else {
                return Err(Restartable::error("the MySQL server closed the binlog stream"));
            };
            let event = event.map_err(|e| {
                if is_binlog_gone(&e) {
                    gone(&self.opened, &e.to_string())
                } else {
                    Restartable::error(format!("reading the binlog: {e}"))
                }
            })?;
            let end = u64::from(event.header().log_pos());
            self.skipping = self.skip_before.is_some_and(|t| event.header().timestamp() < t);
            if let Some(p) = &self.progress
                && end != 0
            {
                p.event(u64::from(event.header().timestamp()) * 1000);
            }
            if event.header().event_type_raw() == MARIADB_GTID_EVENT {
                // seq_no (u64), domain_id (u32), flags: the server id is the header's.
                let data = event.data();
                if data.len() >= 12 {
                    let seq = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                    let domain = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
                    self.gtids.insert(domain, format!("{domain}-{}-{seq}", event.header().server_id()));
                }
                continue;
            }
            match event.read_data()? {
                Some(EventData::GtidEvent(g)) => {
                    let sid = g.sid().iter().map(|b| format!("{b:02x}")).collect::<String>();
                    let uuid =
                        format!("{}-{}-{}-{}-{}", &sid[..8], &sid[8..12], &sid[12..16], &sid[16..20], &sid[20..]);
                    self.gtids.insert(0, format!("{uuid}:{}", g.gno()));
                }
                Some(EventData::RotateEvent(r)) => {
                    // The rotate a stream starts with comes before the server says it checksums
                    // events, so its name carries the checksum's 4 bytes; the file it names is the
                    // one asked for, unless the stream was asked for by GTIDs.
                    let raw = r.name_raw();
                    let name = if event.header().log_pos() == 0 && self.checksums && raw.len() > 4 {
                        &raw[..raw.len() - 4]
                    } else {
                        raw
                    };
                    if event.header().log_pos() != 0 || self.file.is_empty() {
                        self.file = String::from_utf8_lossy(name).into_owned();
                    }
                }
                Some(EventData::RowsEvent(rows)) => self.rows(&rows)?,
                Some(EventData::XidEvent(_)) => self.commit(end)?,
                Some(EventData::QueryEvent(q)) => {
                    let sql = q.query();
                    let sql = sql.trim();
                    if sql.eq_ignore_ascii_case("COMMIT") {
                        self.commit(end)?;
                    } else if !sql.eq_ignore_ascii_case("BEGIN") {
                        self.ddl(&q.schema(), sql, end)?;
                    }
                }
                _ => {}
            }
        }
    }

    fn take_changed_tables(&mut self) -> Option<Vec<TableDef>> {
        std::mem::take(&mut self.changed).then(|| self.defs())
    }
}

/// The labels of `enum('a','b')` / `set('a','b')` (quotes doubled inside a label).
pub(super) fn labels(column_type: &str) -> Vec<String> {
    let inside = column_type.split_once('(').map_or("", |(_, r)| r.strip_suffix(')').unwrap_or(r));
    let mut out = Vec::new();
    let mut chars = inside.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut label = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    label.push('\'');
                }
                '\'' => break,
                '\\' => label.extend(chars.next()),
                c => label.push(c),
            }
        }
        out.push(label);
    }
    out
}

/// The binlog the pipeline would read next is no longer on the server (purged): what is lost and
/// what to do. Not worth a restart.
/// `ER_SOURCE_FATAL_ERROR_READING_BINLOG`: the server cannot send the binlog asked for (purged,
/// or a position it never wrote; "Could not find first log file name in binary log index file").
const ER_SOURCE_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// Whether the server said the binlog asked for is gone (by its error code).
fn is_binlog_gone(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == ER_SOURCE_FATAL_ERROR_READING_BINLOG)
}

fn gone(at: &BinlogPosition, text: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the binlog at {} is gone from the server ({text}); the changes since then cannot be read: start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`",
        at.describe()
    )
}

/// MariaDB's GTID event (which `mysql_common` does not decode).
const MARIADB_GTID_EVENT: u8 = 162;

impl BinlogPosition {
    /// `file:pos`, or the GTIDs of a position given by them.
    pub fn describe(&self) -> String {
        match (&self.file, &self.gtid) {
            (f, Some(g)) if f.is_empty() => format!("GTIDs {g}"),
            (f, _) => format!("{f}:{}", self.pos),
        }
    }
}

/// How the follower knows a table: `db.table`.
fn key(table: &ddl::Name) -> String {
    format!("{}.{}", table.0, table.1)
}

/// A binlog value as the text the snapshot reads for the same column.
fn value_text(
    table: &Table,
    column: usize,
    value: Option<&BinlogValue<'_>>,
    scope: &Scope,
) -> anyhow::Result<Option<String>> {
    use mysql_async::Value as V;
    let c = &table.columns[column];
    let Some(value) = value else { return Ok(None) };
    let v = match value {
        BinlogValue::Value(v) => v,
        // MySQL 8's binary JSON.
        BinlogValue::Jsonb(j) => {
            let json = serde_json::Value::try_from(j.clone())
                .map_err(|e| anyhow::anyhow!("`{}`.`{}`: a JSON value of the binlog: {e}", table.id, c.name))?;
            return Ok(Some(json.to_string()));
        }
        BinlogValue::JsonDiff(_) => anyhow::bail!(
            "`{}`.`{}`: a partial JSON update in the binlog (binlog_row_value_options = PARTIAL_JSON): set it to '' on the server",
            table.id,
            c.name
        ),
    };
    // ENUM and SET travel as the label's number and the labels' bit mask.
    let (is_enum, is_set) = (c.is(&["enum"]), c.is(&["set"]));
    if is_enum || is_set {
        let n = match v {
            V::Int(i) => *i as u64,
            V::UInt(u) => *u,
            V::Bytes(b) => b.iter().rev().fold(0u64, |n, byte| (n << 8) | u64::from(*byte)),
            V::NULL => return Ok(None),
            other => anyhow::bail!("`{}`.`{}`: an ENUM/SET value {other:?} in the binlog", table.id, c.name),
        };
        let labels = &table.extra[column];
        let pick = |i: u64| labels.get(i as usize).cloned().unwrap_or_default();
        return Ok(Some(if is_enum {
            // 0 is the empty string MySQL stores for an invalid value.
            if n == 0 { String::new() } else { pick(n - 1) }
        } else {
            (0..labels.len() as u64).filter(|b| n & (1 << b) != 0).map(pick).collect::<Vec<_>>().join(",")
        }));
    }
    Ok(match v {
        V::NULL => None,
        V::Bytes(b) if c.is(&["bit"]) => Some(b.iter().fold(0u128, |n, byte| (n << 8) | u128::from(*byte)).to_string()),
        V::Bytes(b) if c.is_timestamp() => {
            // Seconds since the epoch (and a fraction): UTC wall time, as the snapshot reads it.
            let text = String::from_utf8_lossy(b);
            let (secs, frac) = text.split_once('.').unwrap_or((&text, ""));
            let secs: i64 =
                secs.parse().map_err(|_| anyhow::anyhow!("`{}`.`{}`: timestamp {text:?}", table.id, c.name))?;
            let micros: i64 = format!("{frac:0<6}")[..6].parse().unwrap_or(0);
            Some(scope.wall_time(secs * 1_000_000 + micros))
        }
        V::Bytes(b) => Some(c.text(b, scope.binary, true).map_err(|e| anyhow::anyhow!("`{}`: {e}", table.id))?),
        // The binlog carries an unsigned column's bits as a signed number of its width.
        V::Int(i) if *i < 0 && c.column_type.to_ascii_lowercase().contains("unsigned") => {
            let bits = match c.base().to_ascii_lowercase().as_str() {
                "tinyint" => 8,
                "smallint" => 16,
                "mediumint" => 24,
                "int" | "integer" => 32,
                _ => 64,
            };
            let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
            Some(((*i as u64) & mask).to_string())
        }
        V::Int(i) => Some(i.to_string()),
        V::UInt(u) => Some(u.to_string()),
        V::Float(f) => Some(f.to_string()),
        V::Double(d) => Some(d.to_string()),
        V::Date(y, mo, d, ..) if c.is(&["date"]) => Some(format!("{y:04}-{mo:02}-{d:02}")),
        V::Date(y, mo, d, h, mi, s, us) => Some(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")),
        V::Time(neg, d, h, mi, s, us) => {
            // As the snapshot reads it: the column's fractional digits, none for TIME(0).
            let fsp = c
                .column_type
                .split_once('(')
                .and_then(|(_, r)| r.trim_end_matches(')').parse::<usize>().ok())
                .unwrap_or(0);
            let fraction = if fsp == 0 { String::new() } else { format!(".{:06}", us)[..=fsp.min(6)].to_string() };
            Some(format!("{}{:02}:{mi:02}:{s:02}{fraction}", if *neg { "-" } else { "" }, u32::from(*h) + d * 24))
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_behind_count_the_rest_of_the_file_read_and_every_later_one() {
        let logs = [("b.000001".to_string(), 500), ("b.000002".to_string(), 300), ("b.000003".to_string(), 40)];
        assert_eq!(super::bytes_after(&logs, "b.000002", 100), Some(240));
        assert_eq!(super::bytes_after(&logs, "b.000003", 40), Some(0));
        assert_eq!(super::bytes_after(&logs, "b.000009", 4), None);
    }

    #[test]
    fn enum_and_set_labels_are_read_from_the_column_type() {
        assert_eq!(super::labels("enum('small','large')"), ["small", "large"]);
        assert_eq!(super::labels("set('a','it''s','c,d')"), ["a", "it's", "c,d"]);
    }
}
