//! Worker 0's side of a PostgreSQL source after the snapshot: the pgoutput stream of the slot.
//!
//! A transaction's rows become batches, one per run of a table and at most [`cdc::PAGE_ROWS`]
//! rows each ([`Transactions`]), handed out as they fill; the last batch of a transaction carries the LSN after it
//! (an empty batch when nothing of it is left). The batches of one transaction are the same
//! however often it is streamed, so a position inside one (`skip`) names the same rows after a
//! restart. A relation message whose columns differ from what the source knows becomes a schema
//! change (columns added, dropped, renamed — a column under a new name that keeps an old one's
//! `attnum` — or retyped), a TRUNCATE a truncate. Between transactions a keepalive moves the position to the server's WAL end, so a
//! slot whose tables are quiet still lets go of WAL.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use pg_walstream::{LogicalReplicationMessage, LogicalReplicationParser, TupleData};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use sluice_guest::batch::RowKind;
use sluice_guest::types::DorisType;
use tokio::sync::watch;

use super::types::PgColumn;
use super::{Table, TableDef, column, ident, literal, new_table, no_identity, type_names};
use crate::runtime::{Alter, Event, Restartable, SchemaChange};
use crate::sources::cdc::log::{Release, Transactions};
use crate::sources::cdc::progress::Progress;
use crate::sources::cdc::{self, LogFollower, Scope};

pub struct Follower {
    client: ReplicationClient,
    parser: LogicalReplicationParser,
    /// For the names of types relation messages give by OID.
    control: tokio_postgres::Client,
    tables: Vec<Table>,
    /// Relation OID → index into `tables` (`None`: not followed).
    relations: HashMap<u32, Option<usize>>,
    scope: Arc<Scope>,
    /// The open transaction's rows, and the events of committed ones still to hand out.
    tx: Transactions<u64>,
    in_transaction: bool,
    /// The LSN the slot may be told: raised once a checkpoint holding it is committed.
    confirm: watch::Receiver<u64>,
    /// A table changed since the position last took the tables.
    changed: bool,
    /// The LSN the position stands at: a keepalive moves it only forward (the server's first
    /// keepalives after a restart may report WAL before it, while it skips what was confirmed).
    last: u64,
    /// When to look for tables created since the start (pgoutput says nothing of them).
    discovery: tokio::time::Interval,
    /// The publication new tables join.
    publication: Option<String>,
    progress: Option<Arc<Progress>>,
    /// The end of the server's WAL, as its last message said.
    server_end: u64,
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// How often the catalog is asked for tables created since the start.
const DISCOVER_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The value rows written before a column was added hold in it, per column of `relation`:
/// PostgreSQL keeps a non-volatile default of `ADD COLUMN` as the column's "missing value" rather
/// than rewriting the rows (which reach the WAL only when changed). None where the catalog cannot
/// say (a volatile default rewrote the table, or the column is gone again).
async fn missing_values(control: &tokio_postgres::Client, relation: u32) -> HashMap<String, String> {
    let sql = format!(
        "SELECT attname, (attmissingval::text::text[])[1] FROM pg_catalog.pg_attribute \
         WHERE attrelid = {relation} AND atthasmissing AND NOT attisdropped"
    );
    match super::query(control, &sql).await {
        Ok(rows) => rows.into_iter().filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?))).collect(),
        Err(e) => {
            tracing::warn!("the defaults of columns added to relation {relation} are unknown: {e:#}");
            HashMap::new()
        }
    }
}

/// The number of each live column of `relation`, by name (empty where the catalog cannot say).
async fn attnums(control: &tokio_postgres::Client, relation: u32) -> HashMap<String, i16> {
    let sql = format!(
        "SELECT attname, attnum FROM pg_catalog.pg_attribute WHERE attrelid = {relation} AND attnum > 0 AND NOT attisdropped"
    );
    match super::query(control, &sql).await {
        Ok(rows) => {
            rows.into_iter().filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.as_deref()?.parse().ok()?))).collect()
        }
        Err(e) => {
            tracing::warn!(
                "the columns of relation {relation} are unknown (a rename reads as a drop and an add): {e:#}"
            );
            HashMap::new()
        }
    }
}

impl Follower {
    pub fn new(
        client: ReplicationClient,
        control: tokio_postgres::Client,
        tables: Vec<Table>,
        scope: Arc<Scope>,
        start: u64,
        skip: u64,
        confirm: watch::Receiver<u64>,
    ) -> Follower {
        Follower {
            client,
            parser: LogicalReplicationParser::with_protocol_version(1),
            control,
            tables,
            relations: HashMap::new(),
            scope,
            tx: Transactions::new(skip, cdc::PAGE_ROWS as usize, Release::AsTheyFill),
            in_transaction: false,
            confirm,
            changed: false,
            last: start,
            discovery: tokio::time::interval_at(tokio::time::Instant::now() + DISCOVER_EVERY, DISCOVER_EVERY),
            publication: None,
            progress: None,
            server_end: 0,
        }
    }

    /// Say how far it is in `progress`: the commit time of each transaction read, and the WAL
    /// after the position read as the server's messages say where its WAL ends.
    pub fn reporting(mut self, progress: Arc<Progress>) -> Follower {
        self.progress = Some(progress);
        self
    }

    /// The position read is `at`: the server's WAL after it is behind.
    fn report_behind(&self, at: u64) {
        if let Some(p) = &self.progress {
            p.behind(self.server_end.saturating_sub(at));
        }
    }

    /// New tables the patterns cover join `publication`.
    pub fn publishing(mut self, publication: &str) -> Follower {
        self.publication = Some(publication.to_string());
        self
    }

    /// Tables of the schema the patterns cover that this follower does not know: a table created
    /// since the start joins the publication, and the run restarts to read its rows (those from
    /// before it joined are not in the stream), then follows it.
    async fn discover(&self) -> anyhow::Result<()> {
        let Some(publication) = &self.publication else { return Ok(()) };
        let ns = literal(&self.scope.namespace);
        let sql = format!(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {ns} AND c.relkind = 'r' AND NOT c.relispartition ORDER BY c.relname"
        );
        let rows = match super::query(&self.control, &sql).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("looking for new tables: {e:#}");
                return Ok(());
            }
        };
        let new: Vec<String> = rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .filter(|name| self.scope.covers(&self.scope.namespace, name))
            .filter(|name| !self.tables.iter().any(|t| t.namespace == self.scope.namespace && &t.name == name))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        super::publish(&self.control, publication, &self.scope.namespace, &new).await?;
        let named: Vec<String> = new.iter().map(|n| format!("`{}.{n}`", self.scope.namespace)).collect();
        Err(Restartable::error(format!(
            "{} {} new to the sync: restarting to read {}",
            named.join(", "),
            if new.len() == 1 { "is" } else { "are" },
            if new.len() == 1 { "its rows" } else { "their rows" }
        )))
    }

    async fn message(&mut self, message: LogicalReplicationMessage) -> anyhow::Result<()> {
        match message {
            LogicalReplicationMessage::Relation {
                relation_id,
                namespace,
                relation_name,
                replica_identity,
                columns,
            } => {
                let index = self
                    .tables
                    .iter()
                    .position(|t| t.namespace == *namespace && t.name == *relation_name)
                    .filter(|_| self.scope.covers(&namespace, &relation_name));
                self.relations.insert(relation_id, index);
                let Some(index) = index else { return Ok(()) };
                let types = type_names(&self.control, columns.iter().map(|c| c.type_id)).await?;
                let old = &self.tables[index];
                let added = columns.iter().any(|c| !old.columns.iter().any(|k| k.name == *c.name));
                let (missing, attnums) = match added {
                    true => {
                        (missing_values(&self.control, relation_id).await, attnums(&self.control, relation_id).await)
                    }
                    false => (HashMap::new(), HashMap::new()),
                };
                let new_columns: Vec<_> = columns
                    .iter()
                    .map(|c| {
                        // Nullability is not in the message: a known column keeps its own.
                        let known = old.columns.iter().find(|k| k.name == *c.name);
                        let attnum = known.map_or_else(|| attnums.get(&*c.name).copied(), |k| k.attnum);
                        let nullable = known.is_none_or(|k| k.nullable);
                        PgColumn { attnum, ..column(&c.name, c.type_id, c.type_modifier, nullable, &types) }
                    })
                    .collect();
                let mut def = old.def();
                def.replica_identity = char::from(replica_identity);
                if def.columns == new_columns && def.replica_identity == old.replica_identity() {
                    return Ok(());
                }
                let mut alter = Vec::new();
                for c in &new_columns {
                    // A column under a new name that keeps an old column's number was renamed.
                    let renamed = old.columns.iter().find(|k| {
                        k.attnum.is_some()
                            && k.attnum == c.attnum
                            && k.name != c.name
                            && !new_columns.iter().any(|n| n.name == k.name)
                    });
                    match old.columns.iter().find(|k| k.name == c.name).or(renamed) {
                        Some(k) if k.name != c.name => {
                            alter.push(Alter::RenameColumn { from: k.name.clone(), to: c.name.clone() });
                            if k.type_name != c.type_name || k.typmod != c.typmod || k.array != c.array {
                                let from =
                                    k.doris_type().map(|t| t.to_string()).unwrap_or_else(|_| k.type_name.clone());
                                alter.push(Alter::ModifyColumn { name: c.name.clone(), from });
                            }
                        }
                        None => {
                            // The rows from before the column hold its default: Doris fills them with it.
                            let default =
                                missing.get(&c.name).and_then(|v| c.text(v, self.scope.binary, self.scope.zone).ok());
                            alter.push(Alter::AddColumn { name: c.name.clone(), default, comment: None })
                        }
                        Some(k) if k.type_name != c.type_name || k.typmod != c.typmod || k.array != c.array => {
                            let from = k.doris_type().map(|t| t.to_string()).unwrap_or_else(|_| k.type_name.clone());
                            alter.push(Alter::ModifyColumn { name: c.name.clone(), from });
                        }
                        Some(_) => {}
                    }
                }
                for k in &old.columns {
                    let renamed = |c: &PgColumn| k.attnum.is_some() && c.attnum == k.attnum;
                    if !new_columns.iter().any(|c| c.name == k.name || renamed(c)) {
                        alter.push(Alter::DropColumn { name: k.name.clone() });
                    }
                }
                def.columns = new_columns;
                def.primary_key.retain(|k| def.columns.iter().any(|c| &c.name == k));
                let table = new_table(def)?;
                self.tx.flush(&self.tables)?;
                if !alter.is_empty() {
                    tracing::info!(
                        "`{}` changed: {}",
                        table.id,
                        alter.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
                    );
                    let change = SchemaChange {
                        table: table.id.clone(),
                        schema: table.schema.clone(),
                        primary_key: table.primary_key.clone(),
                        ddl: None,
                        alter,
                        resumed: false,
                    };
                    self.tx.schema_change(&self.tables, change)?;
                }
                self.tables[index] = table;
                self.changed = true;
            }
            LogicalReplicationMessage::Insert { relation_id, tuple } => {
                let Some(t) = self.table(relation_id) else { return Ok(()) };
                let row = self.values(t, &tuple, None)?;
                self.push(t, RowKind::Insert, row)?;
            }
            LogicalReplicationMessage::Update { relation_id, old_tuple, new_tuple, key_type } => {
                let Some(t) = self.table(relation_id) else { return Ok(()) };
                let before = old_tuple.as_ref().map(|o| self.values(t, o, None)).transpose()?;
                // Only a whole old row ('O') holds the values of unchanged TOASTed columns.
                let whole = before.as_deref().filter(|_| key_type == Some('O'));
                let mut after = self.values(t, &new_tuple, whole)?;
                let unchanged: Vec<usize> = (0..after.len())
                    .filter(|&i| whole.is_none() && new_tuple.columns.get(i).is_some_and(|v| v.is_unchanged()))
                    .collect();
                if !unchanged.is_empty() {
                    self.read_back(t, &new_tuple, &mut after, &unchanged).await?;
                    after = self.fill(t, after);
                }
                let table = &self.tables[t];
                let key: Vec<usize> =
                    table.primary_key.iter().filter_map(|k| table.columns.iter().position(|c| &c.name == k)).collect();
                match before {
                    // The key changed ('K', the old key only; or 'O', the old row).
                    Some(b) if key.iter().any(|&k| b[k] != after[k]) => {
                        let b = self.fill(t, b);
                        self.push(t, RowKind::Delete, b)?;
                        self.push(t, RowKind::Insert, after)?;
                    }
                    Some(b) if table.replica_identity() == 'f' => {
                        if self.scope.update_before {
                            self.push(t, RowKind::UpdateBefore, b)?;
                        }
                        self.push(t, RowKind::UpdateAfter, after)?;
                    }
                    _ if key.is_empty() => anyhow::bail!("{}", no_identity(table)),
                    _ => self.push(t, RowKind::UpdateAfter, after)?,
                }
            }
            LogicalReplicationMessage::Delete { relation_id, old_tuple, .. } => {
                let Some(t) = self.table(relation_id) else { return Ok(()) };
                if self.tables[t].primary_key.is_empty() && self.tables[t].replica_identity() != 'f' {
                    anyhow::bail!("{}", no_identity(&self.tables[t]));
                }
                let row = self.values(t, &old_tuple, None)?;
                let row = self.fill(t, row);
                self.push(t, RowKind::Delete, row)?;
            }
            LogicalReplicationMessage::Truncate { relation_ids, .. } => {
                for id in relation_ids {
                    if let Some(t) = self.table(id) {
                        let t = &self.tables[t];
                        let change = SchemaChange {
                            table: t.id.clone(),
                            schema: t.schema.clone(),
                            primary_key: t.primary_key.clone(),
                            ddl: Some(format!("TRUNCATE {}", t.quoted())),
                            alter: vec![Alter::Truncate],
                            resumed: false,
                        };
                        self.tx.schema_change(&self.tables, change)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn table(&self, relation: u32) -> Option<usize> {
        self.relations.get(&relation).copied().flatten()
    }

    /// A tuple's values as Doris text; an unchanged TOASTed value is taken from `old` (the old
    /// row, sent with REPLICA IDENTITY FULL), as PostgreSQL sends nothing else for it.
    fn values(
        &self,
        t: usize,
        tuple: &TupleData,
        old: Option<&[Option<String>]>,
    ) -> anyhow::Result<Vec<Option<String>>> {
        let table = &self.tables[t];
        if tuple.columns.len() != table.columns.len() {
            anyhow::bail!(
                "`{}`: a change has {} columns where the relation has {}; start over with a new `pipeline.state_dir`",
                table.id,
                tuple.columns.len(),
                table.columns.len()
            );
        }
        let mut out = Vec::with_capacity(table.columns.len());
        for (i, (c, v)) in table.columns.iter().zip(&tuple.columns).enumerate() {
            if v.is_unchanged() {
                // Without the old row, read back by the caller ([`Follower::read_back`]).
                out.push(old.and_then(|o| o.get(i)).cloned().flatten());
                continue;
            }
            if v.is_null() {
                out.push(None);
                continue;
            }
            let text = v.as_str().unwrap_or_default();
            out.push(Some(
                c.text(&text, self.scope.binary, self.scope.zone)
                    .map_err(|e| anyhow::anyhow!("`{}`: {e}", table.id))?,
            ));
        }
        Ok(out)
    }

    /// Columns `unchanged` of an update's new row (`tuple`) that PostgreSQL did not resend
    /// (TOASTed values left as they were, sent only with a whole old row), read back from the
    /// table by the row's key. The value read is the row's latest: a later change of it follows
    /// in the stream (and a row deleted since, whose columns then stay NULL, is deleted by it).
    async fn read_back(
        &self,
        t: usize,
        tuple: &TupleData,
        row: &mut [Option<String>],
        unchanged: &[usize],
    ) -> anyhow::Result<()> {
        let table = &self.tables[t];
        let key: Vec<usize> =
            table.primary_key.iter().filter_map(|k| table.columns.iter().position(|c| &c.name == k)).collect();
        if key.is_empty() {
            anyhow::bail!("{}", no_identity(table));
        }
        let filter: Vec<String> = key
            .iter()
            .map(|&k| match tuple.columns[k].as_str() {
                Some(v) => format!("{} = {}", ident(&table.columns[k].name), literal(&v)),
                None => format!("{} IS NULL", ident(&table.columns[k].name)),
            })
            .collect();
        let columns: Vec<String> = unchanged.iter().map(|&i| ident(&table.columns[i].name)).collect();
        let sql = format!("SELECT {} FROM {} WHERE {}", columns.join(", "), table.quoted(), filter.join(" AND "));
        let found = super::query(&self.control, &sql)
            .await
            .with_context(|| format!("`{}`: reading back the values an update left unchanged", table.id))?;
        let found = found.into_iter().next().unwrap_or_default();
        for (j, &i) in unchanged.iter().enumerate() {
            row[i] = match found.get(j).cloned().flatten() {
                Some(v) => Some(
                    table.columns[i]
                        .text(&v, self.scope.binary, self.scope.zone)
                        .map_err(|e| anyhow::anyhow!("`{}`: {e}", table.id))?,
                ),
                None => None,
            };
        }
        Ok(())
    }

    /// A deleted row's old key with the other columns PostgreSQL did not send (NULL) filled in
    /// where the column is NOT NULL, so Doris takes the delete rather than filtering the row.
    fn fill(&self, t: usize, mut row: Vec<Option<String>>) -> Vec<Option<String>> {
        let table = &self.tables[t];
        for (c, v) in table.columns.iter().zip(row.iter_mut()) {
            if v.is_none() && !c.nullable {
                *v = Some(
                    match c.doris_type() {
                        Ok(DorisType::Date) => "1970-01-01",
                        Ok(DorisType::DateTime { .. }) => "1970-01-01 00:00:00",
                        Ok(DorisType::Json) => "null",
                        Ok(DorisType::Varchar(_) | DorisType::String | DorisType::Char(_)) => "",
                        Ok(DorisType::Boolean) => "false",
                        _ => "0",
                    }
                    .to_string(),
                );
            }
        }
        row
    }

    fn push(&mut self, t: usize, kind: RowKind, row: Vec<Option<String>>) -> anyhow::Result<()> {
        self.tx.push(&self.tables, t, kind, row)
    }
}

#[async_trait]
impl LogFollower for Follower {
    type At = u64;
    type Def = TableDef;

    /// The next batch or schema change and, with a transaction's last one, the LSN after it.
    async fn next(&mut self) -> anyhow::Result<(Event, Option<u64>)> {
        loop {
            if let Some(next) = self.tx.pop() {
                return Ok(next);
            }
            let event = tokio::select! {
                event = self.client.recv() => event,
                changed = self.confirm.changed() => {
                    if changed.is_ok() {
                        let lsn = *self.confirm.borrow_and_update();
                        self.client.update_applied_lsn(Lsn(lsn));
                    }
                    continue;
                }
                _ = self.discovery.tick(), if !self.in_transaction => {
                    self.discover().await?;
                    continue;
                }
            };
            let event = event.map_err(|e| Restartable::error(format!("reading the replication stream: {e}")))?;
            match event {
                None => return Err(Restartable::error("the PostgreSQL server ended the replication stream")),
                Some(ReplicationEvent::Begin { .. }) => self.in_transaction = true,
                Some(ReplicationEvent::Commit { end_lsn, commit_time_micros, .. }) => {
                    self.in_transaction = false;
                    self.tx.commit(&self.tables, end_lsn.0)?;
                    self.last = end_lsn.0;
                    if let Some(p) = &self.progress {
                        p.event(((commit_time_micros + PG_EPOCH_MICROS) / 1000).max(0) as u64);
                    }
                    self.report_behind(end_lsn.0);
                }
                Some(ReplicationEvent::KeepAlive { wal_end, .. }) => {
                    self.server_end = self.server_end.max(wal_end.0);
                    if !self.in_transaction && self.tx.is_empty() {
                        self.report_behind(self.last.max(wal_end.0));
                    }
                    // Nothing is ready (it was all handed out before this was read): an empty
                    // batch carries the position on.
                    if !self.in_transaction && self.tx.is_empty() && wal_end.0 > self.last {
                        self.last = wal_end.0;
                        self.tx.commit(&self.tables, wal_end.0)?;
                    }
                }
                Some(ReplicationEvent::XLogData { data, wal_end, .. }) => {
                    self.server_end = self.server_end.max(wal_end.0);
                    let message = self
                        .parser
                        .parse_wal_message(&data)
                        .map_err(|e| anyhow::anyhow!("reading a pgoutput message: {e}"))?;
                    self.message(message.message).await?;
                }
                Some(_) => {}
            }
        }
    }

    /// The tables followed, when one changed since this was last asked: called with a
    /// transaction's last batch, when they stand as of the position after it.
    fn take_changed_tables(&mut self) -> Option<Vec<TableDef>> {
        std::mem::take(&mut self.changed).then(|| self.tables.iter().map(Table::def).collect())
    }
}
