//! `type = "doris"`: Apache Doris through Stream Load — exactly once with two-phase commit tied
//! to checkpoints ([`writer`], [`committer`]), or batch mode; tables created or altered as schema
//! changes reach it ([`schema`]).

pub(crate) mod budget;
pub mod committer;
pub(crate) mod mirror;
pub mod schema;
pub mod writer;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use async_trait::async_trait;
use serde::Deserialize;

use crate::Batch;
use crate::doris::DorisConnection;
use crate::metrics::{Metric, MetricSource};
use crate::pipeline::{BuildContext, ByteSize, Checked, Duration, PipelineFile, SinkConfig};
use crate::runtime::dead_letter::BatchRefused;
use crate::runtime::mirror::MirrorTarget;
use crate::runtime::{Alter, Committer, SchemaChange, Sink, SinkWriter, TableId, WriterContext};
use committer::DorisCommitter;
use writer::{DorisWriter, SinkMetrics, SinkSettings, from_doris};

/// `type = "doris"` — the connector's `sink.*` options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSink {
    pub name: Option<String>,
    /// The Doris connection to write (default: `[doris]`).
    pub connection: Option<String>,
    /// `db.table` (the connector's `table.identifier`); batches routed elsewhere by a transform
    /// go to their own table.
    pub table: Option<String>,
    /// Instead of `table`: every source table goes to its own table of this database, named
    /// `table_prefix` + the source table's name + `table_suffix` (the connector's
    /// `--database`, `--table-prefix`, `--table-suffix`), created when missing. `{db}` stands
    /// for the source table's database (or schema): `"{db}"` keeps each table in a database of
    /// its source's name, as the connector does without `--database`.
    pub database: Option<String>,
    #[serde(default)]
    pub table_prefix: String,
    #[serde(default)]
    pub table_suffix: String,
    /// Properties of the tables the sink creates (the connector's `--table-conf`), e.g.
    /// `table_properties.replication_num = "1"`.
    #[serde(default)]
    pub table_properties: BTreeMap<String, String>,
    /// Buckets of the tables the sink creates (the connector's `table-buckets`):
    /// `"orders:10,logs_.*:4"`, exact names first, then patterns in order; else `BUCKETS AUTO`.
    pub table_buckets: Option<String>,
    /// Auto range partitions of the tables the sink creates (`table-partitions`):
    /// `"orders:created_at:day"`.
    pub table_partitions: Option<String>,
    /// Source tables whose rows go to one table (the connector's `--multi-to-one-origin` /
    /// `--multi-to-one-target`): `[[sink.route]] origin = "order_\\d+"`, `target = "orders"`; the
    /// first whose `origin` matches the whole source table name (or its whole `db.table`) wins.
    /// `target` may use the origin's groups (`$1`, `${name}`) and name a database
    /// (`"ods_$1.$2"` for `origin = "(app_\\w+)\\.(.*)"`).
    #[serde(default)]
    pub route: Vec<Route>,
    /// `schema_change.*`: how schema changes reach the tables.
    #[serde(default)]
    pub schema_change: SchemaChangeOptions,
    /// Label prefix; defaults to a stable id of the pipeline.
    pub label_prefix: Option<String>,
    /// Exactly-once through two-phase commit tied to checkpoints (default true).
    #[serde(default = "default_true")]
    pub enable_2pc: bool,
    /// Turn delete rows into `__DORIS_DELETE_SIGN__` (default true, UNIQUE tables only).
    #[serde(default = "default_true")]
    pub enable_delete: bool,
    /// Size of one write buffer (default 1MB).
    #[serde(default = "default_buffer_size")]
    pub buffer_size: ByteSize,
    /// Number of write buffers (default 3).
    #[serde(default = "default_buffer_count")]
    pub buffer_count: u32,
    /// Retries of a failed load or commit (default 3).
    #[serde(default = "default_request_retries")]
    pub max_retries: u32,
    /// `sink.ignore.update-before` (default true).
    #[serde(default)]
    pub ignore: IgnoreOptions,
    /// `sink.enable.batch-mode` (default false).
    #[serde(default)]
    pub enable: EnableOptions,
    /// `sink.buffer-flush.*` (batch mode).
    #[serde(default)]
    pub buffer_flush: BufferFlush,
    /// `sink.flush.queue-size` (batch mode, default 2).
    #[serde(default)]
    pub flush: FlushOptions,
    /// Stream Load headers (`sink.properties.*`), e.g. `properties.format = "json"`.
    #[serde(default)]
    pub properties: BTreeMap<String, toml::Value>,
    /// Stream Loads a worker keeps open at once, over all tables (default 64); one more ends the
    /// least recently written.
    #[serde(default = "default_max_open_loads")]
    pub max_open_loads: u32,
    /// Doris transactions the sink holds open at once per database, over all its writers (each
    /// load is one until it commits: with 2PC, until its checkpoint completes); keep it at or
    /// under Doris' `max_running_txn_num_per_db` (default 100). At half of it a checkpoint is
    /// taken early.
    #[serde(default = "default_max_running_txns")]
    pub max_running_txns_per_db: u32,
}

/// `[[sink.route]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub origin: String,
    pub target: String,
}

/// `schema_change.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaChangeOptions {
    /// `debezium_structure` (default) or `sql_parser` (the connector's `--schema-change-mode`).
    #[serde(default)]
    pub mode: schema::Mode,
    /// `exception`, `evolve` (default), `try_evolve`, `lenient` or `ignore`.
    #[serde(default)]
    pub behavior: schema::Behavior,
    /// Truncate the Doris table when the source table is truncated (default false).
    #[serde(default)]
    pub truncate: bool,
}

fn default_max_open_loads() -> u32 {
    64
}

fn default_max_running_txns() -> u32 {
    100
}

fn default_true() -> bool {
    true
}

fn default_request_retries() -> u32 {
    3
}

fn default_buffer_size() -> ByteSize {
    ByteSize(1024 * 1024)
}

fn default_buffer_count() -> u32 {
    3
}

/// `ignore.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreOptions {
    #[serde(default = "default_true")]
    pub update_before: bool,
}

impl Default for IgnoreOptions {
    fn default() -> Self {
        Self { update_before: true }
    }
}

/// `enable.*`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnableOptions {
    #[serde(default)]
    pub batch_mode: bool,
}

/// `buffer_flush.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferFlush {
    /// Rows per load (default 500000).
    #[serde(default = "default_max_rows")]
    pub max_rows: u64,
    /// Bytes per load (default 100MB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: ByteSize,
    /// Longest time between loads (default 10s).
    #[serde(default = "default_flush_interval")]
    pub interval: Duration,
}

impl Default for BufferFlush {
    fn default() -> Self {
        Self { max_rows: default_max_rows(), max_bytes: default_max_bytes(), interval: default_flush_interval() }
    }
}

fn default_max_rows() -> u64 {
    500_000
}

fn default_max_bytes() -> ByteSize {
    ByteSize(100 * 1024 * 1024)
}

fn default_flush_interval() -> Duration {
    Duration::from_secs(10)
}

/// `flush.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlushOptions {
    /// Loads in flight in batch mode (default 2).
    #[serde(default = "default_queue_size")]
    pub queue_size: u32,
}

impl Default for FlushOptions {
    fn default() -> Self {
        Self { queue_size: default_queue_size() }
    }
}

fn default_queue_size() -> u32 {
    2
}

#[async_trait]
impl SinkConfig for DorisSink {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Its `table`, or every table of its `database` (each checked as it is written).
    fn reach(&self, file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        let mut reach = crate::pipeline::doris_reach(file, self.connection.as_deref())?;
        reach.writes.extend(self.table.clone());
        // Where the databases written depend on the source's, any.
        let anywhere = self.database.as_ref().is_some_and(|d| d.contains("{db}"))
            || self.route.iter().any(|r| r.target.contains('.'));
        reach.writes.extend(self.database.as_ref().map(|d| if anywhere { "*.*".into() } else { format!("{d}.*") }));
        Ok(reach)
    }

    /// As deletes, only with `enable_delete` and `ignore.update_before = false`.
    fn writes_update_before(&self) -> bool {
        self.enable_delete && !self.ignore.update_before
    }

    fn letter_store(&self) -> Option<crate::pipeline::LetterStore<'_>> {
        Some(crate::pipeline::LetterStore::Doris {
            table: self.table.as_deref(),
            connection: self.connection.as_deref(),
        })
    }

    /// With its own `label_prefix`, labels a replay's alone: the prefix and the replay's id
    /// (without one, the default prefix is the replay's already).
    fn relabeled(&self, id: &str) -> Option<Arc<dyn crate::pipeline::SinkConfig>> {
        let prefix = self.label_prefix.as_ref()?;
        Some(Arc::new(DorisSink { label_prefix: Some(format!("{prefix}_replay_{id}")), ..self.clone() }))
    }

    fn validate(&self, file: &PipelineFile) -> Checked {
        match (&self.table, &self.database) {
            (Some(t), None) if t.split('.').count() != 2 || t.split('.').any(str::is_empty) => {
                return Err(("sink.table".into(), format!("expected `db.table`, got {t:?}")));
            }
            (Some(_), None) => {}
            (None, Some(d)) if d.is_empty() || d.contains('.') || d.replace("{db}", "").contains(['{', '}']) => {
                return Err((
                    "sink.database".into(),
                    format!("expected a database name (`{{db}}` for the source table's database), got {d:?}"),
                ));
            }
            (None, Some(_)) => {}
            (Some(_), Some(_)) => {
                return Err((
                    "sink.database".into(),
                    "set `table` (one table) or `database` (a table per source table), not both".into(),
                ));
            }
            (None, None) => {
                return Err((
                    "sink".into(),
                    "needs `table = \"db.table\"`, or `database = \"db\"` for a table per source table".into(),
                ));
            }
        }
        file.doris_of("sink", self.connection.as_deref())?;
        if self.buffer_count == 0 {
            return Err(("sink.buffer_count".into(), "must be at least 1".into()));
        }
        if self.enable.batch_mode && self.flush.queue_size == 0 {
            return Err(("sink.flush.queue_size".into(), "must be at least 1".into()));
        }
        if self.max_open_loads == 0 {
            return Err(("sink.max_open_loads".into(), "must be at least 1".into()));
        }
        if self.max_running_txns_per_db == 0 {
            return Err(("sink.max_running_txns_per_db".into(), "must be at least 1".into()));
        }
        SinkSettings::new(self, "sluice", std::time::Duration::from_secs(1))?;
        self.rules()?;
        self.names()?;
        Ok(())
    }

    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Sink>> {
        let conn = ctx.doris(self.connection.as_deref()).await?;
        let mut settings = SinkSettings::new(self, &ctx.default_label_prefix(), conn.section.request_read_timeout.0)
            .map_err(|(key, msg)| anyhow::anyhow!("{key}: {msg}"))?;
        settings.load_permits = ctx.confinement.as_ref().and_then(|c| c.loads.clone());
        let workers = ctx.pipeline.pipeline.parallelism as usize;
        settings.txns = Arc::new(budget::TxnBudget::new(self.max_running_txns_per_db as usize, workers));
        // Rows Doris filters go to the pipeline's dead-letter target (not its own, if it is this).
        settings.dead_letters = ctx.pipeline.dead_letter.is_some() && name != "dead_letter";
        let journal = Arc::new(ctx.state.journal(name)?);
        let metrics = Arc::new(DorisSinkMetrics { sink: name.to_string(), ..Default::default() });
        let _ = metrics.loads.durations.set(ctx.stats.timings.load.clone());
        ctx.stats.register(metrics.clone());
        let committer = DorisCommitter {
            txns: settings.txns.clone(),
            client: conn.client.clone(),
            journal: journal.clone(),
            commit_retries: metrics.commit_retries.clone(),
            committed: Default::default(),
        };
        Ok(Arc::new(DorisTarget {
            settings: Arc::new(settings),
            conn,
            journal,
            metrics,
            committer,
            claims: self.table.clone(),
            rules: Arc::new(self.rules().map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?),
            database: self.names().map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?,
            confinement: ctx.confinement.clone(),
        }))
    }
}

impl DorisSink {
    fn rules(&self) -> Result<schema::TableRules, (String, String)> {
        let buckets = self.table_buckets.as_deref().map(schema::TableRules::parse_buckets).transpose();
        let partitions = self.table_partitions.as_deref().map(schema::TableRules::parse_partitions).transpose();
        Ok(schema::TableRules {
            properties: self.table_properties.clone(),
            buckets: buckets.map_err(|m| ("sink.table_buckets".to_string(), m))?.unwrap_or_default(),
            partitions: partitions.map_err(|m| ("sink.table_partitions".to_string(), m))?.unwrap_or_default(),
            mode: self.schema_change.mode,
            behavior: self.schema_change.behavior,
            truncate: self.schema_change.truncate,
        })
    }

    fn names(&self) -> Result<Option<TableNames>, (String, String)> {
        let Some(database) = self.database.clone() else {
            if !self.route.is_empty() {
                return Err(("sink.route".into(), "needs `database` (routes name tables of that database)".into()));
            }
            return Ok(None);
        };
        let routes = self
            .route
            .iter()
            .map(|r| {
                let re = regex::Regex::new(&format!("^(?:{})$", r.origin))
                    .map_err(|e| ("sink.route.origin".to_string(), format!("{:?} is not a regex: {e}", r.origin)))?;
                Ok((re, r.target.clone()))
            })
            .collect::<Result<Vec<_>, (String, String)>>()?;
        Ok(Some(TableNames { database, prefix: self.table_prefix.clone(), suffix: self.table_suffix.clone(), routes }))
    }
}

/// A Doris sink, built.
struct DorisTarget {
    settings: Arc<SinkSettings>,
    conn: Arc<DorisConnection>,
    journal: Arc<crate::state::Journal>,
    metrics: Arc<DorisSinkMetrics>,
    committer: DorisCommitter,
    /// `table`, for routing.
    claims: Option<String>,
    /// With `database`: where each source table goes.
    database: Option<TableNames>,
    /// How it creates and changes tables.
    rules: Arc<schema::TableRules>,
    /// A `sluice serve` tenant's grants.
    confinement: Option<crate::pipeline::Confinement>,
}

/// `database`, `table_prefix`, `table_suffix`, `route`: the target of each source table.
#[derive(Debug, Clone)]
struct TableNames {
    database: String,
    prefix: String,
    suffix: String,
    routes: Vec<(regex::Regex, String)>,
}

impl TableNames {
    /// Where the rows of `table` go: by `names` when the sink has a `database`, else to its
    /// `table` (`default`).
    fn target(names: Option<&TableNames>, table: &TableId, default: impl FnOnce() -> String) -> String {
        match names {
            Some(names) => names.of(table),
            None => default(),
        }
    }

    /// The target of the first route whose origin matches the source table `db.name` (or
    /// `name`), its groups filled in (in `database` unless it names one), else
    /// `database.<prefix><name><suffix>`; `{db}` in `database` is the source table's `db`.
    fn of(&self, table: &TableId) -> String {
        let (db, name) = table.as_str().rsplit_once('.').unwrap_or(("", table.as_str()));
        let database = self.database.replace("{db}", db);
        for (re, target) in &self.routes {
            if let Some(found) = re.captures(table.as_str()).or_else(|| re.captures(name)) {
                let mut to = String::new();
                found.expand(target, &mut to);
                return if to.contains('.') { to } else { format!("{database}.{to}") };
            }
        }
        format!("{database}.{}{name}{}", self.prefix, self.suffix)
    }
}

/// The sink's counters: the Flink connector's load metrics and Sluice's retries.
#[derive(Default)]
struct DorisSinkMetrics {
    sink: String,
    loads: Arc<SinkMetrics>,
    commit_retries: Arc<AtomicU64>,
}

impl MetricSource for DorisSinkMetrics {
    fn metrics(&self) -> Vec<Metric> {
        let labels = vec![("sink", self.sink.clone())];
        let mut out: Vec<Metric> = self
            .loads
            .values()
            .into_iter()
            .map(|(name, value)| {
                Metric::counter(name, "Doris sink (Flink connector metric name).", labels.clone(), value)
            })
            .collect();
        out.push(Metric::counter(
            "load_retries",
            "Batch-mode loads tried again under their label.",
            labels.clone(),
            self.loads.load_retries.load(Ordering::Relaxed),
        ));
        out.push(Metric::counter(
            "commit_retries",
            "Commits tried again after a failure.",
            labels,
            self.commit_retries.load(Ordering::Relaxed),
        ));
        out
    }

    fn loads(&self) -> Option<crate::metrics::LoadCounts> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let l = &self.loads;
        Some(crate::metrics::LoadCounts {
            succeeded: g(&l.total_flush_succeeded_number),
            failed: g(&l.total_flush_failed_number),
            bytes: g(&l.total_flush_load_bytes),
            loaded_rows: g(&l.total_flush_loaded_rows),
            filtered_rows: g(&l.total_flush_filtered_rows),
            load_retries: g(&l.load_retries),
            commit_retries: g(&self.commit_retries),
        })
    }
}

#[async_trait]
impl Sink for DorisTarget {
    fn claims(&self) -> Option<&str> {
        self.claims.as_deref()
    }

    async fn writer(&self, ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>> {
        self.settings.txns.begin_run(ctx.run);
        let w = DorisWriter::new(
            self.settings.clone(),
            self.conn.client.clone(),
            self.journal.clone(),
            self.metrics.loads.clone(),
            ctx,
        );
        Ok(Box::new(DorisSinkWriter {
            writer: w,
            conn: self.conn.clone(),
            names: self.database.clone(),
            rules: self.rules.clone(),
            leave_out: HashMap::new(),
            confinement: self.confinement.clone(),
        }))
    }

    fn committer(&self) -> &dyn Committer {
        &self.committer
    }

    fn max_restarts(&self) -> Option<u32> {
        Some(self.settings.max_retries)
    }

    fn written_tables(&self) -> Vec<String> {
        self.claims.iter().cloned().collect()
    }

    fn mirror(&self) -> Option<Arc<dyn MirrorTarget>> {
        let s = &self.settings;
        let default = format!("{}.{}", s.default_db, s.default_table);
        Some(Arc::new(mirror::DorisMirror::new(self.conn.clone(), self.database.clone(), default)))
    }

    async fn check(&self, schema: Option<&arrow::datatypes::SchemaRef>) -> anyhow::Result<String> {
        let s = &self.settings;
        if let Some(names) = &self.database {
            return Ok(format!(
                "database {} (a table per source table: {}<table>{}, created when missing; format {}, label prefix {})",
                names.database, names.prefix, names.suffix, s.format, s.label_prefix
            ));
        }
        let info = self.conn.client.table_info(&s.default_db, &s.default_table).await?;
        if let Some(schema) = schema {
            let missing: Vec<&str> = schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .filter(|c| !info.columns.iter().any(|t| t.eq_ignore_ascii_case(c)))
                .collect();
            if !missing.is_empty() && !s.user_columns {
                anyhow::bail!(
                    "table `{}.{}` has no column {}; its columns are {}",
                    s.default_db,
                    s.default_table,
                    missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
                    info.columns.join(", ")
                );
            }
        }
        let mode = match (&s.batch_mode, s.two_phase) {
            (Some(_), _) => "batch mode, retries keep their label",
            (None, true) => "exactly-once (2PC at checkpoints)",
            (None, false) => "at-least-once (loads committed at checkpoints)",
        };
        Ok(format!(
            "{}.{} ({}, {mode}, format {}, label prefix {})",
            s.default_db, s.default_table, info.keys_type, s.format, s.label_prefix
        ))
    }
}

/// A worker's writer of a Doris sink.
struct DorisSinkWriter {
    writer: DorisWriter,
    conn: Arc<DorisConnection>,
    names: Option<TableNames>,
    rules: Arc<schema::TableRules>,
    /// Per source table: columns its rows carry that its Doris table lacks, left out of the
    /// load (only where `schema_change.behavior` lets a change go unapplied).
    leave_out: HashMap<TableId, Vec<String>>,
    confinement: Option<crate::pipeline::Confinement>,
}

impl DorisSinkWriter {
    /// Refuse a table the tenant may not write, before anything is sent to it.
    fn allowed(&self, target: &str, from: &TableId) -> anyhow::Result<()> {
        // A routed name without its database is in the sink's.
        let full = match target.contains('.') {
            true => target.to_string(),
            false => format!("{}.{target}", self.writer.default_target().split('.').next().unwrap_or_default()),
        };
        match &self.confinement {
            Some(c) if !(c.may_write)(&full) => Err(BatchRefused::error(format!(
                "rows of `{from}` go to `{full}`, which tenant `{}` may not write; the batch is not written (ask for a grant, or route them to a table you are granted)",
                c.tenant
            ))),
            _ => Ok(()),
        }
    }

    /// Where rows and schema changes of `table` go.
    fn target(&self, table: &TableId) -> String {
        TableNames::target(self.names.as_ref(), table, || self.writer.default_target())
    }
}

#[async_trait]
impl SinkWriter for DorisSinkWriter {
    async fn write(&mut self, table: &TableId, batch: &Batch) -> anyhow::Result<()> {
        let projected;
        let batch = match self.leave_out.get(table) {
            Some(gone) => {
                let keep: Vec<usize> = (0..batch.data.num_columns())
                    .filter(|&i| !gone.contains(batch.data.schema().field(i).name()))
                    .collect();
                projected = Batch { data: batch.data.project(&keep)?, ..batch.clone() };
                &projected
            }
            None => batch,
        };
        let target = match (&batch.table, &self.names) {
            (Some(t), _) => t.clone(),
            (None, Some(names)) => names.of(table),
            (None, None) => self.writer.default_target(),
        };
        self.allowed(&target, table)?;
        match &self.names {
            Some(_) if batch.table.is_none() => self.writer.write(&batch.clone().with_table(target)).await,
            _ => self.writer.write(batch).await,
        }
    }

    /// Create the table when it does not exist, else check it (a table's first schema) or
    /// change it as the change says; the open load of the table is ended first, so no load
    /// spans the change.
    async fn schema_change(&mut self, change: &SchemaChange) -> anyhow::Result<()> {
        let target = self.target(&change.table);
        self.allowed(&target, &change.table)?;
        let (db, table) = target.split_once('.').context("the sink's table is `db.table`")?;
        self.writer.before_schema_change(&target).await?;
        let client = &self.conn.client;
        let modifies = change.alter.iter().any(|a| matches!(a, Alter::ModifyColumn { .. }));
        let info = if modifies { client.described(db, table).await } else { client.table_info(db, table).await };
        let statements = match info {
            Ok(info) if !change.is_change() || change.alter == [Alter::CreateTable] => {
                if let Some(why) = schema::mismatch(&target, &info, change) {
                    if change.resumed {
                        // Doris is ahead of the checkpoint the run resumes from: a change
                        // applied before the crash is replayed, and its columns left out until.
                        tracing::info!("resuming: {why}");
                    } else if !self.rules.behavior.tolerates_missing_columns() {
                        anyhow::bail!(why);
                    } else {
                        tracing::warn!("{why}");
                    }
                }
                Vec::new()
            }
            Ok(info) => {
                let r = &self.rules;
                schema::alter_table(db, table, &info, change, r.mode, r.behavior, r.truncate)?
            }
            Err(crate::doris::DorisError::Table { .. }) => vec![
                format!("CREATE DATABASE IF NOT EXISTS {}", crate::doris::scan::quote(db)),
                schema::create_table(db, table, change, &self.rules)?,
            ],
            Err(e) => return Err(from_doris(e)),
        };
        let ddl = change.ddl.as_deref().map(|d| format!(" for `{d}`")).unwrap_or_default();
        for stmt in statements {
            tracing::info!(table = %target, "schema change of `{}`: {stmt}", change.table);
            // The database may not be there yet: its statement runs in one that is.
            let on = if stmt.starts_with("CREATE DATABASE") { "information_schema" } else { db };
            match client.query(on, &stmt).await {
                Ok(_) => {}
                Err(e) if self.rules.behavior == schema::Behavior::TryEvolve => {
                    tracing::warn!("`{target}`: Doris refused `{stmt}`{ddl}: {e}; going on (try_evolve)")
                }
                Err(e) => anyhow::bail!(
                    "`{target}`: Doris refused `{stmt}`{ddl} of `{}`: {e}; set `schema_change.behavior = \"try_evolve\"` to go on without it",
                    change.table
                ),
            }
        }
        self.writer.after_schema_change(&target).await?;
        if self.rules.behavior.tolerates_missing_columns()
            || change.resumed
            || self.leave_out.contains_key(&change.table)
        {
            let info = client.table_info(db, table).await.map_err(from_doris)?;
            let gone: Vec<String> = change
                .schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| !info.columns.iter().any(|c| c.eq_ignore_ascii_case(n)))
                .collect();
            if gone.is_empty() {
                self.leave_out.remove(&change.table);
            } else {
                tracing::warn!(
                    "`{target}` has no column {}: rows of `{}` are loaded without them",
                    gone.join(", "),
                    change.table
                );
                self.leave_out.insert(change.table.clone(), gone);
            }
        }
        Ok(())
    }

    async fn prepare_commit(&mut self, checkpoint: u64) -> anyhow::Result<serde_json::Value> {
        let epoch = self.writer.checkpoint();
        let txns = self.writer.prepare_commit().await?;
        // The loads' transactions commit with checkpoint `checkpoint`.
        self.writer.settings().txns.rekey(epoch, checkpoint);
        self.writer.resume_at(checkpoint + 1);
        Ok(serde_json::to_value(txns)?)
    }

    fn take_dead_letters(&mut self) -> Vec<crate::runtime::dead_letter::DeadLetter> {
        self.writer.take_letters()
    }

    fn wants_ticks(&self) -> bool {
        self.writer.wants_ticks()
    }

    fn wants_checkpoint(&self) -> bool {
        self.writer.settings().txns.crowded()
    }

    async fn tick(&mut self) -> anyhow::Result<()> {
        self.writer.tick().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(database: &str, routes: &[(&str, &str)]) -> TableNames {
        let routes =
            routes.iter().map(|(o, t)| (regex::Regex::new(&format!("^(?:{o})$")).unwrap(), t.to_string())).collect();
        TableNames { database: database.into(), prefix: "p_".into(), suffix: String::new(), routes }
    }

    #[test]
    fn tables_of_several_source_databases_are_routed_by_their_database() {
        let t = |id: &str| TableId::new(id);
        // Each source database to a Doris database of its name, or of a name made from it.
        assert_eq!(names("{db}", &[]).of(&t("app_1.orders")), "app_1.p_orders");
        assert_eq!(names("ods_{db}", &[]).of(&t("app_2.orders")), "ods_app_2.p_orders");
        // Routes match the table's name (as before), or its `db.table`, with groups.
        let routed = names("ods", &[("order_\\d+", "orders"), ("(app_\\d+)\\.(users)", "crm.${2}_$1")]);
        assert_eq!(routed.of(&t("app_1.order_7")), "ods.orders");
        assert_eq!(routed.of(&t("app_1.users")), "crm.users_app_1");
        assert_eq!(routed.of(&t("app_1.items")), "ods.p_items");
    }
}
