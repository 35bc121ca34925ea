//! `type = "postgres"`: the tables of a PostgreSQL schema — a snapshot in primary-key chunks,
//! then (`scan.startup.mode = "initial"`) their changes from a logical replication slot
//! (pgoutput), or only the changes (`latest-offset`), or only the snapshot (`snapshot`). The
//! shape is every CDC source's ([`crate::sources::cdc`]); this module is PostgreSQL's dialect of
//! it: the tables from the catalog (types mapped by [`types`]), pages read in a snapshot
//! transaction, and the slot's stream ([`stream`]).
//!
//! On a fresh start the source creates its publication (for the tables it follows) and its slot
//! when they are missing. A slot created here exports its snapshot: every worker reads its chunks
//! in a transaction that imports it, so the snapshot and the stream meet exactly at the slot's
//! consistent point. The session that exported it stays idle until worker 0 starts streaming on
//! it. A run restarted in the middle of the snapshot reads its remaining chunks as they are then,
//! and the stream replays the changes since the consistent point: a UNIQUE target absorbs them, a
//! table without a primary key (DUPLICATE in Doris) may get a row changed meanwhile twice.
//!
//! Worker 0 follows the slot once every worker's part of the snapshot is in a completed
//! checkpoint. Its position is the end of the last transaction it returned (and the batches of
//! the next one already returned); the slot is told an LSN only once the checkpoint holding it is
//! committed in Doris, so PostgreSQL keeps every change Doris does not have yet. Values are read
//! as text in both phases, with the session's `TimeZone` UTC: TIMESTAMPTZ values arrive as UTC
//! wall time (or in `server_time_zone`).

mod stream;
pub mod types;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, watch};

use crate::pipeline::Checked;
use crate::runtime::mirror::{MirrorSource, RowHash};
use crate::runtime::{Restartable, Source, SplitEnumerator};
use crate::sources::cdc::{self, Dialect, Enumerator, LogState, Scope};
use crate::sources::{StartupMode, is_zero};
use stream::Follower;
use types::PgColumn;

/// Session settings that make the server print values the way [`PgColumn::text`] reads them.
const SESSION: &str =
    "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres -c bytea_output=hex -c extra_float_digits=1";

cdc::cdc_source! {
    /// `type = "postgres"`: the options (Flink CDC's Postgres source keys where one exists).
    pub struct PostgresSource: "postgres", Connection::Postgres {
        /// The schema whose tables are read (`schema-name`, default `public`).
        #[serde(default = "default_schema")]
        pub schema: String,
        /// The replication slot (`slot.name`), created when missing.
        pub slot_name: String,
        /// The publication the slot streams (`debezium.publication.name`, default the slot's name),
        /// created for the tables followed when missing.
        pub publication_name: Option<String>,
        /// `decoding.plugin.name`: only `pgoutput`, PostgreSQL's own.
        #[serde(default = "default_plugin")]
        pub decoding_plugin: String,
        /// Default: `initial`.
        #[serde(default)]
        pub scan: PostgresScan,
    }
}

fn default_schema() -> String {
    "public".into()
}

fn default_plugin() -> String {
    "pgoutput".into()
}

/// `scan.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresScan {
    #[serde(default)]
    pub startup: PostgresStartup,
}

/// `scan.startup.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresStartup {
    /// `initial` (the snapshot, then the slot), `snapshot` (read every table once and stop) or
    /// `latest-offset` (only the slot, from where it stands).
    #[serde(default)]
    pub mode: StartupMode,
}

/// The startup modes a slot can serve.
const MODES: [StartupMode; 3] = [StartupMode::Initial, StartupMode::Snapshot, StartupMode::LatestOffset];

/// A name as a PostgreSQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Text as a PostgreSQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl PostgresSource {
    fn publication(&self) -> String {
        self.publication_name.clone().unwrap_or_else(|| self.slot_name.clone())
    }

    /// The checks of its own keys.
    fn check(&self) -> Checked {
        let mode = self.scan.startup.mode;
        if !MODES.contains(&mode) {
            return Err((
                "source.scan.startup.mode".into(),
                format!("expected one of {}, got \"{mode}\"", MODES.map(|m| format!("\"{m}\"")).join(", ")),
            ));
        }
        if self.decoding_plugin != "pgoutput" {
            return Err((
                "source.decoding_plugin".into(),
                format!("only \"pgoutput\" (PostgreSQL's own) is supported, got {:?}", self.decoding_plugin),
            ));
        }
        let valid_slot = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if !valid_slot(&self.slot_name) {
            return Err((
                "source.slot_name".into(),
                format!("{:?}: a slot name is 1 to 63 lower-case letters, digits and underscores", self.slot_name),
            ));
        }
        Ok(())
    }

    /// One schema.
    const NAMESPACE_PATTERN: bool = false;

    fn namespace(&self) -> &str {
        &self.schema
    }

    async fn open(&self, opening: cdc::Opening<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let cdc::Opening { server, password, scope, mode, progress } = opening;
        let server = Arc::new(Endpoint {
            host: server.host.clone(),
            port: server.port.unwrap_or(5432),
            user: server.user.clone(),
            password,
            database: self.database.clone(),
        });
        let control = server.connect().await?;
        let streams = mode == StartupMode::Initial || mode == StartupMode::LatestOffset;
        if streams {
            let level = query(&control, "SHOW wal_level").await?;
            let level = level.first().and_then(|r| r[0].clone()).unwrap_or_default();
            if level != "logical" {
                anyhow::bail!(
                    "PostgreSQL at {} has wal_level = {level}: reading changes needs wal_level = logical; set it (ALTER SYSTEM SET wal_level = logical, or in postgresql.conf) and restart the server, or use scan.startup.mode = \"snapshot\"",
                    server.describe()
                );
            }
        }
        let tables = discover(&control, &scope).await.with_context(|| {
            format!("reading the tables of `{}.{}` at {}", self.database, self.schema, server.describe())
        })?;
        if tables.is_empty() {
            let place = format!("{}.{}", self.database, self.schema);
            return Err(self.patterns().none_match(&place, "the database, the schema"));
        }
        if streams && let Some(t) = tables.iter().find(|t| t.primary_key.is_empty() && t.replica_identity() != 'f') {
            anyhow::bail!("{}", no_identity(t));
        }
        Ok(Arc::new(PostgresTables {
            server,
            scope,
            tables: Arc::new(cdc::Found::new(tables)),
            progress,
            chunk_size: self.chunk_size,
            mode,
            slot: self.slot_name.clone(),
            publication: self.publication(),
        }))
    }
}

/// Why changes of `t` cannot be followed: no key PostgreSQL would send with them.
fn no_identity(t: &Table) -> String {
    format!(
        "table `{}` has no primary key and REPLICA IDENTITY {}: PostgreSQL sends no old row with its updates and deletes (and refuses them once the table is published); run `ALTER TABLE {} REPLICA IDENTITY FULL` or add a primary key",
        t.id,
        match t.replica_identity() {
            'n' => "NOTHING",
            'i' => "USING INDEX",
            _ => "DEFAULT",
        },
        t.quoted()
    )
}

/// Where and as whom the source connects.
#[derive(Debug)]
struct Endpoint {
    host: String,
    port: u16,
    user: String,
    password: String,
    database: String,
}

impl Endpoint {
    fn describe(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.database)
    }

    /// A SQL session with [`SESSION`]'s settings.
    async fn connect(&self) -> anyhow::Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .options(SESSION)
            .application_name("sluice")
            .connect_timeout(std::time::Duration::from_secs(10));
        if !self.password.is_empty() {
            config.password(&self.password);
        }
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| {
            Restartable::error(format!("connecting to PostgreSQL at {}: {}", self.describe(), pg_error(&e)))
        })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("PostgreSQL connection ended: {e}");
            }
        });
        Ok(client)
    }

    /// The replication session of `slot`, streaming `publication` from `start` once started.
    fn replication(&self, slot: &str, publication: &str, start: u64) -> pgwire_replication::ReplicationConfig {
        pgwire_replication::ReplicationConfig::new(
            self.host.clone(),
            self.user.clone(),
            self.password.clone(),
            self.database.clone(),
            slot,
            publication,
        )
        .with_port(self.port)
        .with_start_lsn(pgwire_replication::Lsn(start))
        .with_options(SESSION)
        .with_application_name("sluice")
    }
}

/// A server error with its message (tokio-postgres' own display says only "db error").
fn pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// The rows of `sql` (simple protocol, text values).
async fn query(client: &tokio_postgres::Client, sql: &str) -> anyhow::Result<Vec<Vec<Option<String>>>> {
    query_typed(client, sql).await.map_err(|e| anyhow::anyhow!("{}", pg_error(&e)))
}

/// [`query`], with the server's error as it is (its SQLSTATE).
async fn query_typed(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

/// A source table; its `extra` the table's replica identity (`relreplident`: `d` default (the
/// key), `f` full, `n` nothing, `i` an index).
type Table = cdc::Table<PgColumn, char>;

/// A table as a position keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub schema: String,
    pub name: String,
    pub columns: Vec<PgColumn>,
    pub primary_key: Vec<String>,
    pub replica_identity: char,
}

fn new_table(def: TableDef) -> anyhow::Result<Table> {
    Table::new(&def.schema, &def.name, def.columns, def.primary_key, def.replica_identity)
}

impl Table {
    fn replica_identity(&self) -> char {
        self.extra
    }

    fn def(&self) -> TableDef {
        TableDef {
            schema: self.namespace.clone(),
            name: self.name.clone(),
            columns: self.columns.clone(),
            primary_key: self.primary_key.clone(),
            replica_identity: self.extra,
        }
    }

    fn quoted(&self) -> String {
        format!("{}.{}", ident(&self.namespace), ident(&self.name))
    }

    /// A row's values (as the server prints them) as Doris text.
    fn texts(&self, values: &[Option<&str>], scope: &Scope) -> anyhow::Result<Vec<Option<String>>> {
        self.columns
            .iter()
            .zip(values)
            .map(|(c, v)| v.map(|v| c.text(v, scope.binary, scope.zone)).transpose())
            .collect::<Result<_, String>>()
            .map_err(|e| anyhow::anyhow!("reading `{}`: {e}", self.id))
    }
}

/// `pg_type` rows by OID: (name, `typtype`, `typcategory`), domains resolved to their base type.
async fn type_names(
    client: &tokio_postgres::Client,
    oids: impl IntoIterator<Item = u32>,
) -> anyhow::Result<HashMap<u32, (String, String, String)>> {
    let list: Vec<String> = oids.into_iter().map(|o| o.to_string()).collect();
    if list.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT t.oid, b.typname, b.typtype, b.typcategory FROM pg_catalog.pg_type t JOIN pg_catalog.pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END WHERE t.oid IN ({})",
        list.join(",")
    );
    let mut out = HashMap::new();
    for row in query(client, &sql).await? {
        let text = |i: usize| row[i].clone().unwrap_or_default();
        if let Ok(oid) = text(0).parse() {
            out.insert(oid, (text(1), text(2), text(3)));
        }
    }
    Ok(out)
}

/// A column of type `oid` (looked up in `types`), with `typmod`.
fn column(
    name: &str,
    oid: u32,
    typmod: i32,
    nullable: bool,
    types: &HashMap<u32, (String, String, String)>,
) -> PgColumn {
    let (type_name, typtype, category) =
        types.get(&oid).cloned().unwrap_or_else(|| (format!("oid {oid}"), "b".into(), "U".into()));
    let array = category == "A";
    PgColumn {
        name: name.to_string(),
        type_name: if array { type_name.trim_start_matches('_').to_string() } else { type_name },
        typmod,
        nullable,
        array,
        enumerated: typtype == "e",
        attnum: None,
    }
}

async fn discover(client: &tokio_postgres::Client, scope: &Scope) -> anyhow::Result<Vec<Table>> {
    let schema = literal(&scope.namespace);
    let rows = query(
        client,
        &format!(
            "SELECT c.relname, a.attname, a.atttypid, a.atttypmod, a.attnotnull, c.relreplident, a.attnum \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid \
             WHERE n.nspname = {schema} AND c.relkind = 'r' AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped \
             AND a.attgenerated = '' \
             ORDER BY c.relname, a.attnum"
        ),
    )
    .await?;
    let keys = query(
        client,
        &format!(
            "SELECT c.relname, a.attname FROM pg_catalog.pg_index i \
             JOIN pg_catalog.pg_class c ON c.oid = i.indrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
             WHERE i.indisprimary AND n.nspname = {schema} \
             ORDER BY c.relname, array_position(i.indkey::int2[], a.attnum)"
        ),
    )
    .await?;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let oids: HashSet<u32> = rows.iter().filter_map(|r| text(&r[2]).parse().ok()).collect();
    let types = type_names(client, oids).await?;
    let mut defs: Vec<TableDef> = Vec::new();
    for r in &rows {
        let name = text(&r[0]);
        if !scope.covers(&scope.namespace, &name) {
            continue;
        }
        if defs.last().is_none_or(|d| d.name != name) {
            let replica_identity = text(&r[5]).chars().next().unwrap_or('d');
            defs.push(TableDef {
                schema: scope.namespace.clone(),
                name: name.clone(),
                columns: Vec::new(),
                primary_key: Vec::new(),
                replica_identity,
            });
        }
        let oid = text(&r[2]).parse().unwrap_or(0);
        let typmod = text(&r[3]).parse().unwrap_or(-1);
        let def = defs.last_mut().expect("pushed above");
        let attnum = text(&r[6]).parse().ok();
        def.columns.push(PgColumn { attnum, ..column(&text(&r[1]), oid, typmod, text(&r[4]) != "t", &types) });
    }
    for k in &keys {
        if let Some(def) = defs.iter_mut().find(|d| d.name == text(&k[0])) {
            def.primary_key.push(text(&k[1]));
        }
    }
    defs.into_iter().map(new_table).collect()
}

/// [`Dialect::server`] of the server `control` is connected to.
async fn server_identity(control: &tokio_postgres::Client) -> anyhow::Result<String> {
    let rows = query(control, "SELECT system_identifier::text, current_database() FROM pg_catalog.pg_control_system()")
        .await?;
    let row = rows.first().context("pg_control_system() returned no row")?;
    let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    Ok(format!("system {}, database {}", text(0), text(1)))
}

/// A PostgreSQL source, built.
struct PostgresTables {
    server: Arc<Endpoint>,
    scope: Arc<Scope>,
    tables: Arc<cdc::Found<Table>>,
    progress: Arc<cdc::progress::Progress>,
    chunk_size: u64,
    /// `scan.startup.mode` (or `schema-only`).
    mode: StartupMode,
    slot: String,
    publication: String,
}

impl PostgresTables {
    /// Creates the publication for the tables followed, or adds those it lacks.
    async fn publication(&self, control: &tokio_postgres::Client, tables: &[Table]) -> anyhow::Result<()> {
        let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
        publish(control, &self.publication, &self.scope.namespace, &names).await
    }
}

/// Tables `names` of schema `namespace` in `publication`: it is created for them, or those it
/// lacks are added.
async fn publish(
    control: &tokio_postgres::Client,
    publication: &str,
    namespace: &str,
    names: &[String],
) -> anyhow::Result<()> {
    let name = literal(publication);
    let exists =
        !query(control, &format!("SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = {name}")).await?.is_empty();
    let published: HashSet<String> = query(
        control,
        &format!(
            "SELECT tablename FROM pg_catalog.pg_publication_tables WHERE pubname = {name} AND schemaname = {}",
            literal(namespace)
        ),
    )
    .await?
    .into_iter()
    .filter_map(|r| r[0].clone())
    .collect();
    let missing: Vec<String> = names
        .iter()
        .filter(|n| !published.contains(*n))
        .map(|n| format!("{}.{}", ident(namespace), ident(n)))
        .collect();
    let sql = match (exists, missing.is_empty()) {
        (_, true) => return Ok(()),
        (false, _) => format!("CREATE PUBLICATION {} FOR TABLE {}", ident(publication), missing.join(", ")),
        (true, _) => format!("ALTER PUBLICATION {} ADD TABLE {}", ident(publication), missing.join(", ")),
    };
    tracing::info!("{sql}");
    query(control, &sql).await.with_context(|| format!("publishing the tables followed: {sql}")).map(drop)
}

/// What worker 0 streams from: the session that created the slot and exported the snapshot
/// (until it starts), and the LSN the slot may be told (raised when a checkpoint is committed).
struct Stream {
    exported: Mutex<Option<pgwire_replication::ReplicationClient>>,
    confirm: watch::Sender<u64>,
}

#[async_trait]
impl Source for PostgresTables {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        let positions = Enumerator::<Postgres>::restore(restored)?;
        let fresh = positions.iter().all(Option::is_none);
        let streams = self.mode == StartupMode::Initial || self.mode == StartupMode::LatestOffset;
        let mut snapshot = None;
        let mut exported = None;
        let tables = self
            .tables
            .for_run(async {
                let control = self.server.connect().await?;
                discover(&control, &self.scope).await
            })
            .await?;
        if streams {
            let control = self.server.connect().await?;
            self.publication(&control, &tables).await?;
            let slot = query(
                &control,
                &format!(
                    "SELECT plugin, database FROM pg_catalog.pg_replication_slots WHERE slot_name = {}",
                    literal(&self.slot)
                ),
            )
            .await?;
            match slot.first() {
                Some(row)
                    if row[0].as_deref() != Some("pgoutput") || row[1].as_deref() != Some(&self.server.database) =>
                {
                    anyhow::bail!(
                        "replication slot `{}` exists for plugin {} in database {}, not for pgoutput in `{}`; give the source another slot_name",
                        self.slot,
                        row[0].as_deref().unwrap_or("?"),
                        row[1].as_deref().unwrap_or("?"),
                        self.server.database
                    );
                }
                Some(_) => {
                    if fresh && self.mode == StartupMode::Initial {
                        tracing::warn!(
                            "replication slot `{}` exists: the snapshot is read as the tables are now, and the slot's changes since its confirmed position are replayed after it",
                            self.slot
                        );
                    }
                }
                None if self.mode == StartupMode::Initial && fresh => {
                    // The session that creates the slot exports its snapshot, valid while it is idle.
                    let config = self.server.replication(&self.slot, &self.publication, 0);
                    let mut session = pgwire_replication::ReplicationClient::connect_gated(config)
                        .await
                        .map_err(|e| anyhow::anyhow!("replication session to {}: {e}", self.server.describe()))?;
                    let rows = session
                        .simple_query(&format!(
                            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT",
                            ident(&self.slot)
                        ))
                        .await
                        .map_err(|e| anyhow::anyhow!("creating replication slot `{}`: {e}", self.slot))?;
                    let name = rows.first().and_then(|r| r.get(2).cloned().flatten());
                    snapshot = name.map(|n| String::from_utf8_lossy(&n).into_owned());
                    tracing::info!("created replication slot `{}` (snapshot {snapshot:?})", self.slot);
                    exported = Some(session);
                }
                // A restored run whose slot is gone: the changes since its position are gone with
                // it (a new slot would start from now).
                None if !fresh => {
                    let first = positions.first().and_then(Option::as_ref);
                    let dialect = self.dialect(None);
                    if let Some((kept, at)) = first.and_then(|p| p.server.clone().zip(p.log.at())) {
                        let found = server_identity(&control).await?;
                        if kept != found {
                            dialect.elsewhere(&kept, &found, at).await?;
                        }
                    }
                    anyhow::bail!(
                        "replication slot `{}` is gone from {}: the changes since the sync's last checkpoint{} went with it; start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`",
                        self.slot,
                        self.server.describe(),
                        first.and_then(|p| p.log.at()).map(|at| format!(" (LSN {})", Lsn(at))).unwrap_or_default()
                    );
                }
                None => {
                    query(
                        &control,
                        &format!("SELECT pg_create_logical_replication_slot({}, 'pgoutput')", literal(&self.slot)),
                    )
                    .await
                    .with_context(|| format!("creating replication slot `{}`", self.slot))?;
                    tracing::info!("created replication slot `{}`", self.slot);
                }
            }
        }
        let run = Enumerator {
            dialect: Arc::new(self.dialect(exported)),
            tables,
            mode: self.mode,
            chunk_size: self.chunk_size,
            // The slot keeps where the stream stands: LSN 0 asks for its confirmed position.
            log_start: streams.then_some(0),
            snapshot,
        };
        run.start(&positions).await
    }

    fn describe(&self) -> String {
        let tables = self.tables.get();
        let names: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
        format!("postgres {} of {} (slot {})", self.mode, names.join(", "), self.slot)
    }

    fn mirror(&self) -> Option<Arc<dyn MirrorSource>> {
        Some(Arc::new(cdc::mirror::Mirror { dialect: Arc::new(self.dialect(None)), tables: self.tables.clone() }))
    }
}

impl PostgresTables {
    /// The dialect of a run; `exported`: the session that created the slot, holding its snapshot.
    fn dialect(&self, exported: Option<pgwire_replication::ReplicationClient>) -> Postgres {
        Postgres {
            server: self.server.clone(),
            scope: self.scope.clone(),
            slot: self.slot.clone(),
            publication: self.publication.clone(),
            stream: Stream { exported: Mutex::new(exported), confirm: watch::channel(0).0 },
            progress: self.progress.clone(),
        }
    }
}

/// PostgreSQL's dialect of a CDC source, for a run.
struct Postgres {
    server: Arc<Endpoint>,
    scope: Arc<Scope>,
    slot: String,
    publication: String,
    stream: Stream,
    progress: Arc<cdc::progress::Progress>,
}

/// Worker 0's place in the slot's stream, as its position keeps it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct LsnState {
    /// The LSN after the last transaction returned (`X/Y`); none before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsn: Option<Lsn>,
    /// Batches of the transaction after `lsn` already returned.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skip: u64,
}

impl LogState for LsnState {
    type At = u64;

    fn at(&self) -> Option<u64> {
        self.lsn.map(|l| l.0)
    }

    fn begin(&mut self, _start: Option<u64>) {}

    fn skip(&self) -> u64 {
        self.skip
    }

    fn advance(&mut self, at: u64) {
        self.lsn = Some(Lsn(at));
        self.skip = 0;
    }

    fn relocate(&mut self, at: u64) {
        self.lsn = Some(Lsn(at));
    }

    fn step(&mut self) {
        self.skip += 1;
    }
}

/// A WAL position, kept in a checkpoint as PostgreSQL writes it (`X/Y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lsn(pub u64);

impl Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&pgwire_replication::Lsn(self.0).to_pg_string())
    }
}

impl std::str::FromStr for Lsn {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Lsn> {
        pgwire_replication::Lsn::parse(text).map(|l| Lsn(l.0)).map_err(|_| {
            anyhow::anyhow!("the checkpoint's LSN {text:?} is not one; start over with a new `pipeline.state_dir`")
        })
    }
}

#[async_trait]
impl Dialect for Postgres {
    type Table = Table;
    type Def = TableDef;
    type Log = LsnState;
    type Session = tokio_postgres::Client;
    type Follower = Follower;

    const KIND: &'static str = "postgres";

    /// The cluster's system identifier (from `initdb`; a physical replica shares it) and the
    /// database: a logical slot lives in one database of one server.
    async fn server(&self) -> anyhow::Result<String> {
        server_identity(&self.server.connect().await?).await
    }

    /// A logical slot does not move to another server (not to a physical replica either, before
    /// PostgreSQL 17's failover slots).
    async fn elsewhere(&self, kept: &str, found: &str, at: u64) -> anyhow::Result<u64> {
        anyhow::bail!(
            "the sync's state was read through replication slot `{}` of another PostgreSQL server ({kept}, at LSN {}); {} is {found}, where that slot's changes cannot be read: start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir` (or point the source back at that server)",
            self.slot,
            Lsn(at),
            self.server.describe()
        )
    }

    fn scope(&self) -> &Scope {
        &self.scope
    }

    fn quote(&self, name: &str) -> String {
        ident(name)
    }

    /// Keys of numbers, dates, timestamps (TIMESTAMPTZ only shown in UTC), text and UUIDs:
    /// as escape-string literals.
    /// `E'…'`, a literal of no type yet, which takes the column's: compared exactly.
    fn key_literal(&self, t: &Table, columns: &[String]) -> Option<Vec<cdc::chunks::Literal>> {
        let zone = self.scope.zone;
        let comparable = |k: &String| {
            t.columns
                .iter()
                .find(|c| &c.name == k)
                .is_some_and(|c| c.fingerprinted(zone).is_some() && !(c.type_name == "timestamptz" && zone.is_some()))
        };
        let literal: cdc::chunks::Literal = |v| format!("E'{}'", v.replace('\\', "\\\\").replace('\'', "''"));
        columns.iter().all(comparable).then(|| vec![literal; columns.len()])
    }

    fn select(&self, t: &Table) -> String {
        let columns: Vec<String> = t.columns.iter().map(|c| ident(&c.name)).collect();
        format!("SELECT {} FROM {}", columns.join(", "), t.quoted())
    }

    /// Without a key, the physical order of the snapshot (which it does not change).
    fn keyless_order(&self) -> Option<&'static str> {
        Some("ctid")
    }

    /// A read-only transaction, begun at the exported snapshot when there is one.
    async fn session(&self, snapshot: Option<&str>) -> anyhow::Result<tokio_postgres::Client> {
        let client = self.server.connect().await?;
        let mut begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;".to_string();
        if let Some(s) = snapshot {
            begin.push_str(&format!(" SET TRANSACTION SNAPSHOT {};", literal(s)));
        }
        query(&client, &begin).await.context("beginning the snapshot transaction")?;
        Ok(client)
    }

    async fn close(&self, session: tokio_postgres::Client) {
        let _ = query(&session, "COMMIT").await;
    }

    async fn rows(
        &self,
        session: &mut tokio_postgres::Client,
        t: &Table,
        sql: &str,
    ) -> anyhow::Result<Vec<Vec<Option<String>>>> {
        let rows = query_typed(session, sql).await.map_err(|e| match e.code() {
            // A column dropped or renamed under the snapshot, before its table was read: the
            // snapshot cannot be read as the tables were announced, and a restart would read
            // the table in a newer shape than the stream replays.
            Some(code) if *code == tokio_postgres::error::SqlState::UNDEFINED_COLUMN => anyhow::anyhow!(
                "reading `{}`: {}: a column of the table was dropped or renamed while the snapshot was read, which Sluice cannot finish; change columns before a sync's snapshot or after it (once the log says `following replication slot`), and start this one again: a new state dir, a new slot, and the table dropped in Doris",
                t.id,
                pg_error(&e)
            ),
            _ => Restartable::error(format!("reading `{}`: {}", t.id, pg_error(&e))),
        })?;
        rows.iter()
            .map(|row| {
                let values: Vec<Option<&str>> = row.iter().map(Option::as_deref).collect();
                t.texts(&values, &self.scope)
            })
            .collect()
    }

    fn progress(&self) -> &cdc::progress::Progress {
        &self.progress
    }

    /// `pg_class.reltuples` (the planner's estimate; -1 before the table was first analysed).
    async fn estimated_rows(&self, session: &mut tokio_postgres::Client, t: &Table) -> Option<u64> {
        let sql =
            format!("SELECT reltuples::bigint FROM pg_catalog.pg_class WHERE oid = {}::regclass", literal(&t.quoted()));
        let rows = query(session, &sql).await.ok()?;
        rows.first()?.first()?.as_deref()?.parse::<i64>().ok().filter(|n| *n >= 0).map(|n| n as u64)
    }

    async fn bounds(
        &self,
        session: &mut tokio_postgres::Client,
        t: &Table,
        key: &str,
    ) -> anyhow::Result<Option<(i64, i64)>> {
        let sql = format!("SELECT MIN({0}), MAX({0}) FROM {1}", ident(key), t.quoted());
        let bounds = query(session, &sql).await?;
        let number = |i: usize| bounds.first().and_then(|r| r[i].as_deref()).and_then(|v| v.parse::<i64>().ok());
        Ok(number(0).zip(number(1)))
    }

    /// `hashtext()` of each row's text, summed.
    fn fingerprint(&self, t: &Table) -> Option<(RowHash, Vec<bool>, String)> {
        let columns: Vec<(String, bool)> =
            t.columns.iter().map(|c| c.fingerprinted(self.scope.zone)).collect::<Option<_>>()?;
        let (values, text): (Vec<String>, Vec<bool>) = columns.into_iter().unzip();
        let row = format!("hashtext(concat_ws('|', {}))", values.join(", "));
        Some((RowHash::PgHashText, text, format!("SELECT count(*), sum({row}) FROM {}", t.quoted())))
    }

    /// Generated columns: logical replication does not carry their values (before PostgreSQL 18).
    async fn unmirrored(&self, session: &mut tokio_postgres::Client, t: &Table) -> anyhow::Result<Vec<String>> {
        let sql = format!(
            "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {}::regclass AND attnum > 0 \
             AND NOT attisdropped AND attgenerated <> '' ORDER BY attnum",
            literal(&t.quoted())
        );
        Ok(query(session, &sql)
            .await?
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .map(|c| format!("`{c}`: a generated column, which logical replication does not carry"))
            .collect())
    }

    async fn scalars(&self, session: &mut tokio_postgres::Client, sql: &str) -> anyhow::Result<Vec<Option<String>>> {
        Ok(query(session, sql).await?.into_iter().next().unwrap_or_default())
    }

    fn table(&self, def: &TableDef) -> anyhow::Result<Table> {
        new_table(def.clone())
    }

    fn def(&self, t: &Table) -> TableDef {
        t.def()
    }

    async fn follow(&self, start: u64, skip: u64, tables: Vec<Table>) -> anyhow::Result<Follower> {
        let session = match self.stream.exported.lock().await.take() {
            Some(mut session) => {
                session.start().await.map_err(|e| Restartable::error(format!("starting replication: {e}")))?;
                session
            }
            None => {
                let config = self.server.replication(&self.slot, &self.publication, start);
                pgwire_replication::ReplicationClient::connect(config).await.map_err(|e| {
                    Restartable::error(format!("replication session to {}: {e}", self.server.describe()))
                })?
            }
        };
        tracing::info!(
            "following replication slot `{}` from {}",
            self.slot,
            pgwire_replication::Lsn(start).to_pg_string()
        );
        let control = self.server.connect().await?;
        let confirm = self.stream.confirm.subscribe();
        Ok(Follower::new(session, control, tables, self.scope.clone(), start, skip, confirm)
            .publishing(&self.publication)
            .reporting(self.progress.clone()))
    }

    /// The checkpoint is committed in Doris: the slot may let go of what it holds.
    async fn on_checkpoint_complete(&self, positions: &[serde_json::Value]) -> anyhow::Result<()> {
        if let Some(lsn) = positions.first().and_then(|p| p.get("lsn")).and_then(|l| l.as_str()) {
            let Lsn(lsn) = lsn.parse()?;
            self.stream.confirm.send_if_modified(|c| {
                let raised = lsn > *c;
                *c = (*c).max(lsn);
                raised
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::Position;
    use crate::sources::cdc::snapshot::CdcPosition;

    type SlotPosition = CdcPosition<super::LsnState, super::TableDef>;

    /// Worker 0's position as the slot's reader writes it: read back key for key, the LSN as
    /// PostgreSQL writes it; one that is not an LSN is refused, not read as the slot's start.
    #[test]
    fn a_position_keeps_its_keys_and_its_lsn_is_checked() {
        let written = serde_json::json!({
            "table": null, "start": null, "cursor": null, "rows": 0, "done": true, "lsn": "0/16B3748", "skip": 1,
        });
        let p = SlotPosition::restore(Some(&written), "postgres").unwrap();
        assert_eq!(p.log.lsn, Some(super::Lsn(0x16B_3748)));
        assert_eq!(p.to_value(), written);
        let e =
            SlotPosition::restore(Some(&serde_json::json!({"rows": 0, "lsn": "yesterday"})), "postgres").unwrap_err();
        assert!(e.to_string().contains("the checkpoint's LSN \"yesterday\" is not one"), "{e}");
    }
}
