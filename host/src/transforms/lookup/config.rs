//! The options of `type = "lookup"`: the connector's `lookup.*` options.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::pipeline::{Checked, Duration, PipelineFile, has_jdbc_url};

fn default_true() -> bool {
    true
}

/// `type = "lookup"`: adds the columns of the matching rows of a Doris dimension table to each
/// row, read over `doris.jdbc_url` (the connector's `lookup.*` options).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupTransform {
    pub name: Option<String>,
    /// The Doris connection of the dimension table (default: `[doris]`).
    pub connection: Option<String>,
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

impl LookupTransform {
    /// The checks of the options that serde cannot express.
    pub fn check(&self, file: &PipelineFile) -> Checked {
        let l = self;
        if l.table.split('.').count() != 2 || l.table.split('.').any(str::is_empty) {
            return Err(("transform.table".into(), format!("expected `db.table`, got {:?}", l.table)));
        }
        if l.keys.is_empty() {
            return Err(("transform.keys".into(), "name at least one key column of the dimension table".into()));
        }
        if !l.stream_keys.is_empty() && l.stream_keys.len() != l.keys.len() {
            return Err((
                "transform.stream_keys".into(),
                format!(
                    "{} stream key(s) for {} key(s); give one per key, in the same order",
                    l.stream_keys.len(),
                    l.keys.len()
                ),
            ));
        }
        for from in l.rename.keys() {
            if !l.columns.is_empty() && !l.columns.contains(from) {
                return Err((format!("transform.rename.{from}"), format!("`{from}` is not one of `columns`")));
            }
        }
        let positive = [
            ("transform.jdbc.read.batch.size", l.jdbc.read.batch.size),
            ("transform.jdbc.read.batch.queue_size", l.jdbc.read.batch.queue_size),
            ("transform.jdbc.read.thread_size", l.jdbc.read.thread_size),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err((key.to_string(), "must be at least 1".into()));
        }
        if l.cache.max_rows == 0 || l.cache.max_rows < -1 {
            return Err(("transform.cache.max_rows".into(), "expected a number of keys, or -1 for no cache".into()));
        }
        if l.cache.ttl.0.is_zero() {
            return Err(("transform.cache.ttl".into(), "must be longer than 0s".into()));
        }
        let (conn, doris) = file.doris_of("transform", l.connection.as_deref())?;
        if !has_jdbc_url(doris) {
            let key = if conn == crate::pipeline::DEFAULT_DORIS {
                "doris.jdbc_url".to_string()
            } else {
                format!("connections.{conn}.jdbc_url")
            };
            return Err((
                key,
                "a lookup reads its table over MySQL: set `jdbc_url = \"jdbc:mysql://host:9030\"` in [doris]".into(),
            ));
        }
        Ok(())
    }
}
