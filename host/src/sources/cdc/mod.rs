//! What the database sources (`mysql`, `postgres`) share: the shape of a change-data-capture
//! source, written once.
//!
//! A CDC source lists the tables of one database (or schema) whose names its `include` /
//! `exclude` patterns cover, announces each (a schema change, so a sink can create the table),
//! reads them in key chunks dealt to the workers ([`snapshot`]: the enumerator, the readers and
//! their positions) and then, on worker 0, follows the server's change log a transaction at a
//! time ([`log`]: the batches of a transaction and the position after it). What differs between
//! servers is a [`Dialect`] (how to quote, select and read a page, where a chunk's key bounds lie,
//! how to open the log) and its [`LogFollower`] (the binlog, pgoutput): a new CDC source is one of
//! each, plus its options.

pub(crate) mod chunks;
pub(crate) mod log;
pub(crate) mod mirror;
pub(crate) mod progress;
pub(crate) mod snapshot;

use std::fmt::Debug;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_guest::types::{ColumnDef, DorisType, arrow_schema};

use crate::runtime::{Event, SchemaChange, TableId};
pub(crate) use snapshot::Enumerator;

/// Rows per page of a snapshot chunk, and at most per batch of a transaction.
pub(crate) const PAGE_ROWS: u64 = 4096;

/// How the bytes of BLOB / BINARY / VARBINARY (MySQL) and BYTEA (PostgreSQL) columns reach
/// Doris' STRING (the source's `binary_handling`, after Debezium's `binary.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryHandling {
    /// As text when they are UTF-8; other bytes are an error naming the column.
    Text,
    /// Base64 (the default: any bytes load, as Debezium's JSON carries them to the connector).
    #[default]
    Base64,
    Hex,
}

impl BinaryHandling {
    /// `bytes` of `what` (a column) as the text Doris gets.
    pub fn encode(self, bytes: &[u8], what: &str) -> Result<String, String> {
        use base64::Engine;
        match self {
            BinaryHandling::Base64 => Ok(base64::engine::general_purpose::STANDARD.encode(bytes)),
            BinaryHandling::Hex => Ok(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            BinaryHandling::Text => String::from_utf8(bytes.to_vec()).map_err(|_| {
                format!(
                    "{what} holds bytes that are not UTF-8 text; set `binary_handling = \"base64\"` (or \"hex\") on the source (`debezium.binary.handling.mode=base64` in a sync command's --mysql-conf/--postgres-conf) to load them encoded"
                )
            }),
        }
    }
}

/// The tables a source follows — those of `namespace` (a MySQL database, a PostgreSQL schema)
/// whose names `include` matches and `exclude` does not (whole names) — and how their values
/// are shown.
#[derive(Debug)]
pub(crate) struct Scope {
    /// As written: one name, or (MySQL's `database`) a regex of names.
    pub namespace: String,
    /// `namespace` as a regex matched against whole names, where it is one.
    namespaces: Option<regex::Regex>,
    include: regex::Regex,
    exclude: Option<regex::Regex>,
    /// `chunk_key_column`: the tables it names (none: every table), each with its column.
    chunk_keys: Vec<ChunkKey>,
    pub binary: BinaryHandling,
    /// `server_time_zone`: where instants (MySQL TIMESTAMP, PostgreSQL TIMESTAMPTZ) are shown
    /// (none: UTC).
    pub zone: Option<chrono_tz::Tz>,
    /// Whether the row before an update is read: something after the source uses it (a
    /// transform, a sink that writes it). Otherwise an update that keeps its key is read as its
    /// row after alone, as Flink drops `UPDATE_BEFORE` for a sink that does not take it.
    pub update_before: bool,
}

impl Scope {
    /// The scope of a source's options, or the key at fault and why.
    /// `pattern`: `namespace` is a regex of names (MySQL's `database`, as Flink CDC's
    /// `database-name`), else one name.
    pub fn new(
        namespace: &str,
        pattern: bool,
        tables: &TablePatterns<'_>,
        binary: BinaryHandling,
        zone: Option<chrono_tz::Tz>,
    ) -> Result<Scope, (String, String)> {
        let (include, exclude) = tables.compile()?;
        let chunk_keys = tables.chunk_keys()?;
        let namespaces = pattern.then(|| crate::sources::regex("source.database", namespace)).transpose()?;
        let namespace = namespace.to_string();
        Ok(Scope { namespace, namespaces, include, exclude, chunk_keys, binary, zone, update_before: true })
    }

    /// The column `chunk_key_column` chooses to cut table `id` (`namespace.name`) into snapshot
    /// chunks at, if it names one for it.
    pub fn chunk_key(&self, id: &str, name: &str) -> Option<&str> {
        let covers = |t: &Option<regex::Regex>| t.as_ref().is_none_or(|re| re.is_match(id) || re.is_match(name));
        self.chunk_keys.iter().find(|(t, _)| covers(t)).map(|(_, c)| c.as_str())
    }

    /// Whether tables of namespace `namespace` may be followed.
    pub fn covers_namespace(&self, namespace: &str) -> bool {
        match &self.namespaces {
            Some(re) => re.is_match(namespace),
            None => namespace == self.namespace,
        }
    }

    pub fn covers(&self, namespace: &str, name: &str) -> bool {
        self.covers_namespace(namespace)
            && self.include.is_match(name)
            && !self.exclude.as_ref().is_some_and(|x| x.is_match(name))
    }

    /// An instant, `micros` after the epoch, as wall time in the source's zone.
    pub fn wall_time(&self, micros: i64) -> String {
        crate::sources::wall_time(self.zone, micros)
    }
}

/// A `chunk_key_column` entry: the tables it names (none: every table), and the column.
type ChunkKey = (Option<regex::Regex>, String);

/// A source's table options as written: `include`, `exclude`, `chunk_size` and
/// `chunk_key_column`.
pub(crate) struct TablePatterns<'a> {
    pub include: &'a str,
    pub exclude: Option<&'a str>,
    pub chunk_size: u64,
    pub chunk_key_column: Option<&'a str>,
}

impl TablePatterns<'_> {
    fn compile(&self) -> Result<(regex::Regex, Option<regex::Regex>), (String, String)> {
        let include = crate::sources::regex("source.include", self.include)?;
        let exclude = self.exclude.map(|x| crate::sources::regex("source.exclude", x)).transpose()?;
        Ok((include, exclude))
    }

    /// `chunk_key_column` (Flink CDC's `scan.incremental.snapshot.chunk.key-column`): `column`
    /// for every table, or `table:column` entries separated by `;`, each table a regex matched
    /// against the whole `database.table` or table name.
    fn chunk_keys(&self) -> Result<Vec<ChunkKey>, (String, String)> {
        let key = "source.chunk_key_column";
        let Some(written) = self.chunk_key_column else { return Ok(Vec::new()) };
        let entries = written.split(';').map(str::trim).filter(|e| !e.is_empty());
        let parsed = entries
            .map(|entry| match entry.rsplit_once(':') {
                Some((table, column)) if !column.trim().is_empty() => {
                    Ok((Some(crate::sources::regex(key, table.trim())?), column.trim().to_string()))
                }
                Some(_) => Err((key.to_string(), format!("`{entry}` names no column: write `table:column`"))),
                None => Ok((None, entry.to_string())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if parsed.is_empty() {
            return Err((
                key.into(),
                "names no column: write `column`, or `table:column` entries separated by `;`".into(),
            ));
        }
        Ok(parsed)
    }
    /// The checks every CDC source makes of these keys.
    pub fn validate(&self) -> crate::pipeline::Checked {
        self.compile()?;
        self.chunk_keys()?;
        if self.chunk_size == 0 {
            return Err(("source.chunk_size".into(), "must be at least 1".into()));
        }
        Ok(())
    }

    /// What to say when no table of `place` matches.
    pub fn none_match(&self, place: &str, what: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "no table of `{place}` matches include = {:?}{}; check {what} and the patterns",
            self.include,
            self.exclude.map(|x| format!(" and exclude = {x:?}")).unwrap_or_default()
        )
    }
}

/// The tables a source follows, found again when a run restarts (not when the source was just
/// opened): a table created since, or renamed into the patterns, is read by the restarted run
/// ([`snapshot`]'s late tables).
pub(crate) struct Found<T> {
    tables: std::sync::RwLock<std::sync::Arc<Vec<T>>>,
    /// Found when the source was opened, and not yet used by a run.
    just_opened: std::sync::atomic::AtomicBool,
}

impl<T> Found<T> {
    pub fn new(tables: Vec<T>) -> Found<T> {
        Found {
            tables: std::sync::RwLock::new(std::sync::Arc::new(tables)),
            just_opened: std::sync::atomic::AtomicBool::new(true),
        }
    }

    pub fn get(&self) -> std::sync::Arc<Vec<T>> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The tables for a run: as found at the source's opening for its first run, else as `find`
    /// finds them now.
    pub async fn for_run<F>(&self, find: F) -> anyhow::Result<std::sync::Arc<Vec<T>>>
    where
        F: std::future::Future<Output = anyhow::Result<Vec<T>>>,
    {
        if self.just_opened.swap(false, std::sync::atomic::Ordering::Relaxed) {
            return Ok(self.get());
        }
        let tables = std::sync::Arc::new(find.await?);
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = tables.clone();
        Ok(tables)
    }
}

/// A source column as the shared code needs it.
pub(crate) trait Column: Clone + Debug + Send + Sync + 'static {
    /// The column as Doris gets it (name, type, nullability), or why it has no Doris type.
    fn doris_column(&self) -> Result<ColumnDef, String>;
}

/// A source table: its columns, key and Arrow schema, and what the dialect keeps besides
/// (`extra`: MySQL's ENUM/SET labels, PostgreSQL's replica identity).
#[derive(Debug, Clone)]
pub(crate) struct Table<C, X> {
    pub id: TableId,
    /// The database (MySQL) or schema (PostgreSQL) it is in.
    pub namespace: String,
    pub name: String,
    pub columns: Vec<C>,
    pub primary_key: Vec<String>,
    pub schema: SchemaRef,
    pub extra: X,
}

impl<C: Column, X> Table<C, X> {
    /// The table `namespace.name`; an error names it and the column without a Doris type.
    pub fn new(
        namespace: &str,
        name: &str,
        columns: Vec<C>,
        primary_key: Vec<String>,
        extra: X,
    ) -> anyhow::Result<Table<C, X>> {
        let defs = columns
            .iter()
            .map(Column::doris_column)
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| anyhow::anyhow!("table `{namespace}.{name}`: {e}"))?;
        Ok(Table {
            id: TableId::new(format!("{namespace}.{name}")),
            namespace: namespace.to_string(),
            name: name.to_string(),
            columns,
            primary_key,
            schema: arrow_schema(&defs),
            extra,
        })
    }
}

/// A source table as the shared reader sees it.
pub(crate) trait CdcTable: Clone + Send + Sync + 'static {
    fn id(&self) -> &TableId;
    /// The table's own name (chunks are ordered and kept in positions by it).
    fn name(&self) -> &str;
    fn schema(&self) -> &SchemaRef;
    fn primary_key(&self) -> &[String];
    /// The single integer key column keyset pages and chunks run on, if the table has one.
    fn integer_key(&self) -> Option<&str>;
    /// The index of column `name`.
    fn column(&self, name: &str) -> Option<usize>;

    /// The table's schema, as a sink learns it.
    fn announce(&self) -> SchemaChange {
        SchemaChange::announce(self.id(), self.schema().clone(), self.primary_key().to_vec())
    }

    /// A batch of no rows: a position moved, nothing else.
    fn nothing(&self) -> Event {
        let empty = arrow::record_batch::RecordBatch::new_empty(self.schema().clone());
        Event::data(self.id(), sluice_guest::batch::Batch::new(empty))
    }
}

impl<C: Column, X: Clone + Send + Sync + 'static> CdcTable for Table<C, X> {
    fn id(&self) -> &TableId {
        &self.id
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn primary_key(&self) -> &[String] {
        &self.primary_key
    }

    /// Chunks and keyset pages run on an integer whose values fit an `i64` (MySQL's unsigned
    /// BIGINT is a Doris LARGEINT: such a table is read as one chunk).
    fn integer_key(&self) -> Option<&str> {
        use arrow::datatypes::DataType::{Int8, Int16, Int32, Int64};
        let [key] = self.primary_key.as_slice() else { return None };
        let field = self.schema.field_with_name(key).ok()?;
        matches!(field.data_type(), Int8 | Int16 | Int32 | Int64).then_some(key.as_str())
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.schema.index_of(name).ok()
    }
}

/// Where worker 0 stands in the change log, kept flat in its position (each dialect keeps its
/// own keys, so positions written before stay readable).
pub(crate) trait LogState:
    Default + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// A position in the log: where a transaction ends.
    type At: Clone + Debug + Send + Sync + 'static;

    /// The position after the last transaction returned, if any.
    fn at(&self) -> Option<Self::At>;
    /// Where a new run begins, when the dialect keeps it (MySQL's binlog position, taken before
    /// the snapshot); a dialect whose server keeps it (a PostgreSQL slot) keeps nothing.
    fn begin(&mut self, start: Option<Self::At>);
    /// Batches of the transaction after [`LogState::at`] already returned.
    fn skip(&self) -> u64;
    /// A transaction ended at `at`.
    fn advance(&mut self, at: Self::At);
    /// The same place, named as another server's log names it (the batches already returned of
    /// the transaction after it stay returned).
    fn relocate(&mut self, at: Self::At);
    /// One more batch of the open transaction was returned.
    fn step(&mut self);
}

/// A log follower: the server's changes to the tables followed, a transaction at a time.
#[async_trait]
pub(crate) trait LogFollower: Send {
    type At;
    type Def;
    /// The next batch or schema change and, with a transaction's last, the position after it.
    async fn next(&mut self) -> anyhow::Result<(Event, Option<Self::At>)>;
    /// The tables followed, when one changed since this was last asked (called with a
    /// transaction's last event, when they stand as of the position after it).
    fn take_changed_tables(&mut self) -> Option<Vec<Self::Def>>;
}

/// What one database server does differently: one per CDC source type, made for a run (it may
/// hold the run's shared state: a PostgreSQL snapshot exported by the slot's session).
#[async_trait]
pub(crate) trait Dialect: Send + Sync + 'static {
    type Table: CdcTable;
    /// A table as a position keeps it.
    type Def: Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;
    type Log: LogState;
    /// A reader's connection while it reads its chunks.
    type Session: Send + 'static;
    type Follower: LogFollower<At = <Self::Log as LogState>::At, Def = Self::Def>;

    /// The source's type, as positions are named in errors.
    const KIND: &'static str;

    /// `name` quoted as an identifier.
    fn quote(&self, name: &str) -> String;
    /// `SELECT <columns> FROM <table>`, to which a page's range, order and limit are added.
    fn select(&self, t: &Self::Table) -> String;
    /// How a value of each of `columns` of `t` (as [`Dialect::rows`] gives it) is written as a
    /// literal, when every one of them compares in the server exactly as that literal says (then
    /// `t` is cut into chunks, and paged, at their values: [`chunks::Keyset`]; else it is read
    /// whole, by OFFSET).
    fn key_literal(&self, _t: &Self::Table, _columns: &[String]) -> Option<Vec<chunks::Literal>> {
        None
    }
    /// The tables the source reads, and how.
    fn scope(&self) -> &Scope;
    /// The order of a table without a key's pages (none: the server's).
    fn keyless_order(&self) -> Option<&'static str> {
        None
    }
    /// A session for reading chunks, inside `snapshot` (one the log exported) when given.
    async fn session(&self, snapshot: Option<&str>) -> anyhow::Result<Self::Session>;
    /// The session's end (its transaction's).
    async fn close(&self, _session: Self::Session) {}
    /// The rows of `sql` (a page of `t`), each value as the text Doris gets.
    async fn rows(
        &self,
        session: &mut Self::Session,
        t: &Self::Table,
        sql: &str,
    ) -> anyhow::Result<Vec<Vec<Option<String>>>>;
    /// The lowest and highest value of integer column `key` of `t` (none: the table is empty).
    async fn bounds(
        &self,
        session: &mut Self::Session,
        t: &Self::Table,
        key: &str,
    ) -> anyhow::Result<Option<(i64, i64)>>;
    /// How the server computes a [`Fingerprint`](crate::runtime::mirror::Fingerprint) of `t`'s
    /// rows: the hash, which columns are text, and `SELECT COUNT(*), SUM(<row's hash>) FROM
    /// <table>`, to which a range is added (none: a column has no text that the server and Sluice
    /// write alike).
    fn fingerprint(&self, _t: &Self::Table) -> Option<(crate::runtime::mirror::RowHash, Vec<bool>, String)> {
        None
    }
    /// The columns of `t` that are not mirrored by design, each with why.
    async fn unmirrored(&self, _session: &mut Self::Session, _t: &Self::Table) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// The first row of `sql`, each value as text.
    async fn scalars(&self, session: &mut Self::Session, sql: &str) -> anyhow::Result<Vec<Option<String>>>;
    /// A table kept in a position, as the follower reads it again.
    fn table(&self, def: &Self::Def) -> anyhow::Result<Self::Table>;
    /// `t` as a position keeps it.
    fn def(&self, t: &Self::Table) -> Self::Def;
    /// The log from `at`, leaving out the first `skip` batches of the first transaction, with the
    /// tables as they stand there.
    async fn follow(
        &self,
        at: <Self::Log as LogState>::At,
        skip: u64,
        tables: Vec<Self::Table>,
    ) -> anyhow::Result<Self::Follower>;
    /// A checkpoint of these positions is complete (committed in Doris).
    async fn on_checkpoint_complete(&self, _positions: &[serde_json::Value]) -> anyhow::Result<()> {
        Ok(())
    }
    /// Where the run says how far it is.
    fn progress(&self) -> &progress::Progress;
    /// The server's estimate of the rows of `t` (its statistics), if it has one.
    async fn estimated_rows(&self, _session: &mut Self::Session, _t: &Self::Table) -> Option<u64> {
        None
    }
    /// Which server the log is read from, in words that tell it from another (kept in worker 0's
    /// position: a run resumed against another server is caught).
    async fn server(&self) -> anyhow::Result<String>;
    /// The position was taken on server `kept` (described as [`Dialect::server`] does), and the
    /// server now is `found`: where its log goes on from `at` (by GTIDs, where the server has
    /// them), or why it cannot, which names both and says how to start over.
    async fn elsewhere(
        &self,
        kept: &str,
        found: &str,
        at: <Self::Log as LogState>::At,
    ) -> anyhow::Result<<Self::Log as LogState>::At>;
}

/// The Doris type of a source column of `n` characters. Doris sizes VARCHAR in bytes: room for
/// `n` characters of up to 4 bytes each (so emoji fit, where the connector's 3n fails the load),
/// STRING beyond VARCHAR's 65533 bytes or when the length is unknown (0).
pub(crate) fn varchar_of_chars(n: u32) -> DorisType {
    match n.checked_mul(4) {
        Some(bytes) if n > 0 && bytes <= 65533 => DorisType::Varchar(Some(bytes)),
        _ => DorisType::String,
    }
}

/// `include`'s default: every table.
pub(crate) fn default_include() -> String {
    ".*".into()
}

/// `chunk_size`'s default (Flink CDC's `scan.incremental.snapshot.chunk.size`).
pub(crate) fn default_chunk_size() -> u64 {
    8096
}

/// What a CDC source's build starts from: its server's connection, the password (from the
/// environment), the tables' scope and the mode it reads in.
pub(crate) struct Opening<'a> {
    pub server: &'a crate::pipeline::DatabaseConnection,
    pub password: String,
    pub scope: std::sync::Arc<Scope>,
    /// `scan.startup.mode`, or `schema-only`.
    pub mode: crate::sources::StartupMode,
    /// Where the source's runs say how far they are (registered with the pipeline's metrics).
    pub progress: std::sync::Arc<progress::Progress>,
}

/// A CDC source type's options and their `SourceConfig`, written once: the keys every CDC source
/// has (`name`, `connection`, `database`, `include`, `exclude`, `chunk_size`, `binary_handling`,
/// `schema_only`) around the type's own, the shared checks and the shared start of a build. The
/// type adds `check` (its own keys' checks), `namespace` (where its tables are: a database, a
/// schema) and `open` (the source, from an [`Opening`]).
macro_rules! cdc_source {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $kind:literal, Connection::$variant:ident {
            $($fields:tt)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            pub name: Option<String>,
            #[doc = concat!("A `[connections.<name>]` of `type = \"", $kind, "\"`.")]
            pub connection: String,
            /// The database (`database-name`).
            pub database: String,
            /// Tables to read: a regex matched against the whole table name (default: all).
            #[serde(default = "crate::sources::cdc::default_include")]
            pub include: String,
            /// Tables to leave out, matched after `include`.
            pub exclude: Option<String>,
            $($fields)*
            /// Primary-key values per snapshot chunk (Flink CDC's
            /// `scan.incremental.snapshot.chunk.size`, 8096).
            #[serde(default = "crate::sources::cdc::default_chunk_size")]
            pub chunk_size: u64,
            /// The column snapshot chunks are cut at, instead of the primary key (Flink CDC's
            /// `scan.incremental.snapshot.chunk.key-column`): `column`, or `table:column`
            /// entries separated by `;` (a table without a key is then read in parallel too).
            pub chunk_key_column: Option<String>,
            /// Binary values (BLOB, BINARY, BYTEA): `base64` (default), `hex`, or `text` (UTF-8
            /// bytes as they are, others an error).
            #[serde(default)]
            pub binary_handling: crate::sources::cdc::BinaryHandling,
            /// Announce the tables (so a sink creates them) and read no rows, whatever the startup
            /// mode: what `--create-table-only` runs.
            #[serde(default)]
            pub schema_only: bool,
        }

        impl $name {
            fn server<'f>(
                &self,
                file: &'f crate::pipeline::PipelineFile,
            ) -> Result<&'f crate::pipeline::DatabaseConnection, (String, String)> {
                file.source_connection(&self.connection, $kind, |c| match c {
                    crate::pipeline::Connection::$variant(c) => Some(c),
                    _ => None,
                })
            }

            fn patterns(&self) -> crate::sources::cdc::TablePatterns<'_> {
                crate::sources::cdc::TablePatterns {
                    include: &self.include,
                    exclude: self.exclude.as_deref(),
                    chunk_size: self.chunk_size,
                    chunk_key_column: self.chunk_key_column.as_deref(),
                }
            }
        }

        #[async_trait::async_trait]
        impl crate::pipeline::SourceConfig for $name {
            fn name(&self) -> Option<&str> {
                self.name.as_deref()
            }

            fn reach(&self, _file: &crate::pipeline::PipelineFile) -> Result<crate::pipeline::Reach, String> {
                Ok(crate::pipeline::Reach { connections: vec![self.connection.clone()], ..Default::default() })
            }

            fn validate(&self, file: &crate::pipeline::PipelineFile) -> crate::pipeline::Checked {
                self.server(file)?;
                self.check()?;
                if Self::NAMESPACE_PATTERN {
                    crate::sources::regex("source.database", self.namespace())?;
                }
                self.patterns().validate()
            }

            async fn build(
                &self,
                name: &str,
                ctx: &crate::pipeline::BuildContext<'_>,
            ) -> anyhow::Result<std::sync::Arc<dyn crate::runtime::Source>> {
                let server = self.server(ctx.pipeline).map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?;
                let key = format!("connections.{}", self.connection);
                let password = server.password(&key)?;
                let zone = crate::sources::time_zone(server.server_time_zone.as_deref(), &key)?;
                let mut scope = crate::sources::cdc::Scope::new(
                    self.namespace(),
                    Self::NAMESPACE_PATTERN,
                    &self.patterns(),
                    self.binary_handling,
                    zone,
                )
                .map_err(|(_, m)| anyhow::anyhow!(m))?;
                scope.update_before = ctx.update_before;
                let mode = self.scan.startup.mode.unless_schema_only(self.schema_only);
                let scope = std::sync::Arc::new(scope);
                let progress = std::sync::Arc::new(crate::sources::cdc::progress::Progress::new(name));
                ctx.stats.register(progress.clone());
                self.open(crate::sources::cdc::Opening { server, password, scope, mode, progress }).await
            }
        }
    };
}
pub(crate) use cdc_source;
