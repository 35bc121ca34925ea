//! The pipeline file, as written. Option names follow the Flink Doris connector's keys without
//! their section prefix, `-` as `_`, dots kept as TOML dotted keys (`sink.label-prefix` →
//! `label_prefix`, `sink.buffer-flush.max-rows` → `buffer_flush.max_rows`), with the same
//! defaults. Unknown keys are errors.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{ByteSize, Duration};
use crate::wasm::PluginLimits;

/// One pipeline file.
#[derive(Debug, Clone)]
pub struct PipelineFile {
    pub pipeline: PipelineSection,
    /// The Doris connection shared by sources, sinks and lookups.
    pub doris: Option<DorisSection>,
    pub source: Vec<SourceConfig>,
    pub transform: Vec<TransformConfig>,
    pub sink: Vec<SinkConfig>,
}

/// `[pipeline]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSection {
    /// Names the pipeline in logs, metrics and (by default) Stream Load labels.
    pub name: String,
    /// Workers, each with its own plugin instances and sink writers (default 1).
    #[serde(default = "default_parallelism")]
    pub parallelism: u32,
    /// Time between checkpoints (default 10s).
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: Duration,
    /// Where checkpoints and labels are kept (default `.sluice/<name>` beside the pipeline file).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

fn default_parallelism() -> u32 {
    1
}

fn default_checkpoint_interval() -> Duration {
    Duration::from_secs(10)
}

/// `fenodes`: `"embedded"` (start doris-lite in-process) or a list of FE `host:http_port`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FeNodes {
    List(Vec<String>),
    One(String),
}

impl FeNodes {
    pub fn is_embedded(&self) -> bool {
        matches!(self, FeNodes::One(s) if s == "embedded")
    }

    /// The FE addresses; a single string may list several, comma separated (as the connector).
    pub fn addresses(&self) -> Vec<String> {
        match self {
            FeNodes::List(l) => l.clone(),
            FeNodes::One(s) => s.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect(),
        }
    }
}

/// `[doris]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSection {
    /// FE HTTP addresses, or `"embedded"`.
    pub fenodes: FeNodes,
    /// BE HTTP addresses (used when `auto_redirect = false`).
    #[serde(default)]
    pub benodes: Vec<String>,
    #[serde(default = "default_username")]
    pub username: String,
    /// The password, inline. Prefer `password_env`.
    #[serde(default)]
    pub password: Option<String>,
    /// The environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// `jdbc:mysql://host:9030` — the MySQL-protocol endpoint (lookups, DDL, offsets).
    #[serde(default)]
    pub jdbc_url: Option<String>,
    /// Send Stream Loads through the FE, which redirects to a BE (default true).
    #[serde(default = "default_true")]
    pub auto_redirect: bool,
    /// `doris.request.retries` (default 3).
    #[serde(default = "default_request_retries")]
    pub request_retries: u32,
    /// `doris.request.connect.timeout` (default 30s).
    #[serde(default = "default_request_timeout")]
    pub request_connect_timeout: Duration,
    /// `doris.request.read.timeout` (default 30s).
    #[serde(default = "default_request_timeout")]
    pub request_read_timeout: Duration,
    /// With `fenodes = "embedded"`: SQL statements (a file, relative to the pipeline file) run at
    /// start, to create and fill tables for local runs. Write them to be repeatable
    /// (`CREATE … IF NOT EXISTS`, UNIQUE keys).
    #[serde(default)]
    pub init_sql: Option<PathBuf>,
}

fn default_username() -> String {
    "root".into()
}

fn default_true() -> bool {
    true
}

fn default_request_retries() -> u32 {
    3
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

/// `[[source]]`, by `type`.
#[derive(Debug, Clone)]
pub enum SourceConfig {
    /// Generated rows, as Flink's `datagen` connector.
    Datagen(DatagenSource),
    /// Rows from a CSV or JSON-lines file (bounded).
    File(FileSource),
    /// A Doris table, read tablet by tablet over Arrow Flight SQL.
    Doris(DorisSource),
}

impl SourceConfig {
    pub fn name(&self) -> Option<&str> {
        match self {
            SourceConfig::Datagen(s) => s.name.as_deref(),
            SourceConfig::File(s) => s.name.as_deref(),
            SourceConfig::Doris(s) => s.name.as_deref(),
        }
    }
}

/// `type = "datagen"`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenSource {
    pub name: Option<String>,
    /// Columns in Doris syntax: `"id BIGINT, name VARCHAR(64), age INT"`.
    pub schema: String,
    /// Rows generated per second (default 10000).
    #[serde(default = "default_rows_per_second")]
    pub rows_per_second: u64,
    /// Total rows; unbounded when absent.
    pub number_of_rows: Option<u64>,
    /// Per-column generators: `fields.id.kind = "sequence"`, `fields.age.min = 1` …
    #[serde(default)]
    pub fields: BTreeMap<String, DatagenField>,
}

fn default_rows_per_second() -> u64 {
    10_000
}

/// `fields.<column>` of a datagen source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenField {
    /// `random` (default) or `sequence`.
    #[serde(default)]
    pub kind: DatagenKind,
    /// Smallest random value.
    pub min: Option<i64>,
    /// Largest random value.
    pub max: Option<i64>,
    /// Length of random strings (default 10).
    pub length: Option<u32>,
    /// First value of a sequence.
    pub start: Option<i64>,
    /// Last value of a sequence (the source ends after it).
    pub end: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatagenKind {
    #[default]
    Random,
    Sequence,
}

/// `type = "file"`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSource {
    pub name: Option<String>,
    pub path: PathBuf,
    /// `csv` (default) or `json` (one object per line).
    #[serde(default)]
    pub format: FileFormat,
    /// Columns in Doris syntax.
    pub schema: String,
    /// CSV column separator (default `,`).
    #[serde(default = "default_separator")]
    pub column_separator: String,
}

fn default_separator() -> String {
    ",".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    #[default]
    Csv,
    Json,
}

/// `type = "doris"` — the connector's `doris.*` and `source.*` read options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSource {
    pub name: Option<String>,
    /// `db.table` (the connector's `table.identifier`).
    pub table: String,
    /// `doris.read.field`: the columns to read, comma separated (default all).
    #[serde(default)]
    pub read: ReadOptions,
    /// `doris.filter.query`: a predicate pushed down into the scan.
    #[serde(default)]
    pub filter: FilterOptions,
    /// `doris.request.tablet.size`: tablets per split (default 1).
    #[serde(default)]
    pub request: ScanRequestOptions,
    /// `doris.batch.size` (default 4064; batches come as Doris sends them).
    #[serde(default)]
    pub batch: BatchSizeOptions,
    /// `source.use-flight-sql` (default true; the Thrift reader is not offered).
    #[serde(default = "default_true")]
    pub use_flight_sql: bool,
    /// `source.flight-sql-port` (default -1: from `SHOW FRONTENDS`).
    #[serde(default = "default_flight_port")]
    pub flight_sql_port: i32,
    /// `source.scan.mode` / `source.scan.timestamp`.
    #[serde(default)]
    pub scan: ScanOptions,
    /// `source.changelog.*`: how the changelog is followed after (or instead of) the snapshot.
    #[serde(default)]
    pub changelog: ChangelogOptions,
    /// The table's primary key, comma separated (Flink's `PRIMARY KEY (…) NOT ENFORCED`); needed by
    /// `dedup`.
    pub primary_key: Option<String>,
    /// Flink's `table.exec.source.cdc-events-duplicate`: normalise the change events per primary
    /// key, so that events replayed after a failure (or read twice where the snapshot and the
    /// changelog overlap) do not change the results. Default false.
    #[serde(default)]
    pub dedup: bool,
}

impl DorisSource {
    /// `primary_key` as column names.
    pub fn primary_key_columns(&self) -> Vec<String> {
        self.primary_key
            .iter()
            .flat_map(|k| k.split(','))
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty())
            .collect()
    }
}

/// `changelog.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangelogOptions {
    /// `detail` (default), `min_delta` or `append_only`.
    #[serde(default)]
    pub increment_type: IncrementType,
    /// How often a new window is read (default 10s, at least 1s).
    #[serde(default = "default_poll_interval")]
    pub poll_interval: Duration,
    /// How long a window whose transactions are still in flight is retried (default 5m; 0s: not).
    #[serde(default = "default_visible_wait")]
    pub visible_wait_timeout: Duration,
    /// `db.table` recording each consumer's next start (needs `doris.jdbc_url`).
    pub offset_table: Option<String>,
    /// This pipeline's row in the offset table.
    pub consumer_id: Option<String>,
}

impl Default for ChangelogOptions {
    fn default() -> Self {
        Self {
            increment_type: IncrementType::default(),
            poll_interval: default_poll_interval(),
            visible_wait_timeout: default_visible_wait(),
            offset_table: None,
            consumer_id: None,
        }
    }
}

fn default_poll_interval() -> Duration {
    Duration::from_secs(10)
}

fn default_visible_wait() -> Duration {
    Duration::from_secs(300)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncrementType {
    #[default]
    Detail,
    MinDelta,
    AppendOnly,
}

impl IncrementType {
    /// The `incrementType` of an `@incr` query.
    pub fn sql(self) -> &'static str {
        match self {
            IncrementType::Detail => "DETAIL",
            IncrementType::MinDelta => "MIN_DELTA",
            IncrementType::AppendOnly => "APPEND_ONLY",
        }
    }
}

fn default_flight_port() -> i32 {
    -1
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadOptions {
    pub field: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterOptions {
    pub query: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanRequestOptions {
    #[serde(default)]
    pub tablet: TabletOptions,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TabletOptions {
    #[serde(default = "default_tablet_size")]
    pub size: u32,
}

impl Default for TabletOptions {
    fn default() -> Self {
        Self { size: default_tablet_size() }
    }
}

fn default_tablet_size() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSizeOptions {
    #[serde(default = "default_batch_size")]
    pub size: u32,
}

impl Default for BatchSizeOptions {
    fn default() -> Self {
        Self { size: default_batch_size() }
    }
}

fn default_batch_size() -> u32 {
    4064
}

/// `scan.mode` and `scan.timestamp`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanOptions {
    #[serde(default)]
    pub mode: ScanMode,
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScanMode {
    /// Read the table once and stop.
    #[default]
    Snapshot,
    /// The snapshot, then the changelog from the snapshot's point.
    Initial,
    /// The changelog from now on.
    Latest,
    /// The changelog from `scan.timestamp`.
    FromTimestamp,
}

/// `[[transform]]`, by `type`.
#[derive(Debug, Clone)]
pub enum TransformConfig {
    /// A WebAssembly plugin.
    Wasm(WasmTransform),
    /// A lookup join against a Doris dimension table.
    Lookup(LookupTransform),
}

/// `type = "wasm"`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmTransform {
    pub name: Option<String>,
    /// A `.wasm` component or a plugin crate directory, relative to the pipeline file.
    pub plugin: PathBuf,
    /// Settings handed to the plugin's `init`, as text.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    /// Memory, time and fuel limits of each instance.
    #[serde(default)]
    pub limits: PluginLimits,
}

/// `type = "lookup"`: adds the columns of the matching rows of a Doris dimension table to each
/// row, read over `doris.jdbc_url` (the connector's `lookup.*` options).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupTransform {
    pub name: Option<String>,
    /// The dimension table, `db.table` (the connector's `table.identifier`).
    pub table: String,
    /// The dimension's join key columns, one or more.
    pub keys: Vec<String>,
    /// The stream columns matched with `keys`, in the same order (default: the same names).
    #[serde(default)]
    pub stream_keys: Vec<String>,
    /// The dimension columns added to each row (default: every column but the keys).
    #[serde(default)]
    pub columns: Vec<String>,
    /// Output names of dimension columns: `rename.level = "city_level"`.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// `left` (default: a row without a match gets NULLs) or `inner` (it is dropped).
    #[serde(default)]
    pub join: JoinKind,
    /// `lookup.cache.*`
    #[serde(default)]
    pub cache: LookupCache,
    /// `lookup.max-retries`: a failed query is tried again this many times (default 1).
    #[serde(default = "default_lookup_retries")]
    pub max_retries: u32,
    /// `lookup.jdbc.*`
    #[serde(default)]
    pub jdbc: LookupJdbc,
}

fn default_lookup_retries() -> u32 {
    1
}

/// `join`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    #[default]
    Left,
    Inner,
}

/// `cache.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupCache {
    /// `lookup.cache.max-rows`: keys kept; -1 (default) turns the cache off.
    #[serde(default = "default_cache_max_rows")]
    pub max_rows: i64,
    /// `lookup.cache.ttl`: how long a cached key (or the full table) is used (default 10s).
    #[serde(default = "default_cache_ttl")]
    pub ttl: Duration,
    /// `partial` (default: keys as they are looked up) or `full` (the whole table, read again
    /// every `ttl`; for small dimensions).
    #[serde(default)]
    pub mode: CacheMode,
    /// Remember keys that have no row too, so a hot missing key is not queried again (default
    /// true; Flink's `lookup.partial-cache.cache-missing-key`).
    #[serde(default = "default_true")]
    pub cache_missing_key: bool,
}

impl Default for LookupCache {
    fn default() -> Self {
        Self {
            max_rows: default_cache_max_rows(),
            ttl: default_cache_ttl(),
            mode: CacheMode::default(),
            cache_missing_key: true,
        }
    }
}

fn default_cache_max_rows() -> i64 {
    -1
}

fn default_cache_ttl() -> Duration {
    Duration::from_secs(10)
}

/// `cache.mode`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    #[default]
    Partial,
    Full,
}

/// `jdbc.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupJdbc {
    /// `lookup.jdbc.async`: batch the keys of each batch into few queries run concurrently
    /// (default true); false sends one query per key, one at a time.
    #[serde(rename = "async", default = "default_true")]
    pub is_async: bool,
    /// `lookup.jdbc.read.*`
    #[serde(default)]
    pub read: LookupRead,
}

impl Default for LookupJdbc {
    fn default() -> Self {
        Self { is_async: true, read: LookupRead::default() }
    }
}

/// `jdbc.read.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupRead {
    /// `lookup.jdbc.read.batch.*`
    #[serde(default)]
    pub batch: LookupReadBatch,
    /// `lookup.jdbc.read.thread-size`: queries in flight at once per worker (default 3).
    #[serde(default = "default_lookup_threads")]
    pub thread_size: u32,
}

impl Default for LookupRead {
    fn default() -> Self {
        Self { batch: LookupReadBatch::default(), thread_size: default_lookup_threads() }
    }
}

fn default_lookup_threads() -> u32 {
    3
}

/// `jdbc.read.batch.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupReadBatch {
    /// `lookup.jdbc.read.batch.size`: keys per query (default 128).
    #[serde(default = "default_lookup_batch")]
    pub size: u32,
    /// `lookup.jdbc.read.batch.queue-size`: missing keys of a batch in flight at once (default 256).
    #[serde(default = "default_lookup_queue")]
    pub queue_size: u32,
}

impl Default for LookupReadBatch {
    fn default() -> Self {
        Self { size: default_lookup_batch(), queue_size: default_lookup_queue() }
    }
}

fn default_lookup_batch() -> u32 {
    128
}

fn default_lookup_queue() -> u32 {
    256
}

/// `[[sink]]`, by `type`.
#[derive(Debug, Clone)]
pub enum SinkConfig {
    /// Apache Doris through Stream Load.
    Doris(DorisSink),
    /// Discards every row (for measuring sources and transforms), like Flink's `blackhole`.
    Blackhole(BlackholeSink),
}

/// `type = "blackhole"`: rows are counted and dropped.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlackholeSink {
    pub name: Option<String>,
}

/// `type = "doris"` — the connector's `sink.*` options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSink {
    pub name: Option<String>,
    /// `db.table` (the connector's `table.identifier`); batches routed elsewhere by a transform
    /// go to their own table.
    pub table: String,
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
