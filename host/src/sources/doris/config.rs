//! The options of `type = "doris"`: the connector's `doris.*` and `source.*` read options.

use serde::Deserialize;

use crate::pipeline::{Checked, Duration, PipelineFile, has_jdbc_url};

fn default_true() -> bool {
    true
}

/// `type = "doris"` — the connector's `doris.*` and `source.*` read options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSource {
    pub name: Option<String>,
    /// The Doris connection to read (default: `[doris]`).
    pub connection: Option<String>,
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

impl DorisSource {
    /// The checks of the options that serde cannot express.
    pub fn check(&self, file: &PipelineFile) -> Checked {
        if self.table.split('.').count() != 2 || self.table.split('.').any(str::is_empty) {
            return Err(("source.table".into(), format!("expected `db.table`, got {:?}", self.table)));
        }
        let (conn, doris) = file.doris_of("source", self.connection.as_deref())?;
        if !self.use_flight_sql {
            return Err((
                "source.use_flight_sql".into(),
                "Sluice reads Doris over Arrow Flight SQL only; remove this key or set it to true".into(),
            ));
        }
        if self.request.tablet.size == 0 {
            return Err(("source.request.tablet.size".into(), "must be at least 1".into()));
        }
        if self.flight_sql_port == 0 || self.flight_sql_port > 65535 || self.flight_sql_port < -1 {
            return Err((
                "source.flight_sql_port".into(),
                format!("expected a port or -1, got {}", self.flight_sql_port),
            ));
        }
        match (&self.changelog.offset_table, &self.changelog.consumer_id) {
            (Some(_), None) => {
                return Err(("source.changelog.consumer_id".into(), "`offset_table` needs `consumer_id`".into()));
            }
            (None, Some(_)) => {
                return Err(("source.changelog.offset_table".into(), "`consumer_id` needs `offset_table`".into()));
            }
            (Some(t), _) if t.split('.').count() != 2 => {
                return Err(("source.changelog.offset_table".into(), format!("expected `db.table`, got {t:?}")));
            }
            (Some(_), _) if !has_jdbc_url(doris) => {
                let section = if conn == crate::pipeline::DEFAULT_DORIS {
                    "[doris]".to_string()
                } else {
                    format!("[connections.{conn}]")
                };
                return Err((
                    "source.changelog.offset_table".into(),
                    format!(
                        "needs `jdbc_url` in {section} (the MySQL-protocol address, jdbc:mysql://host:9030), or `fenodes = \"embedded\"`"
                    ),
                ));
            }
            _ => {}
        }
        if self.changelog.poll_interval.0 < std::time::Duration::from_secs(1) {
            return Err(("source.changelog.poll_interval".into(), "must be at least 1s".into()));
        }
        if self.dedup && self.primary_key_columns().is_empty() {
            return Err((
                "source.dedup".into(),
                "needs the table's primary key: add `primary_key = \"id\"` (comma separated for several columns)"
                    .into(),
            ));
        }
        if self.dedup && self.scan.mode == ScanMode::Snapshot {
            return Err((
                "source.dedup".into(),
                "normalises change events; a `snapshot` scan has none: set `scan.mode` to `initial`, `latest` or `from-timestamp`, or remove `dedup`".into(),
            ));
        }
        match (&self.scan.mode, &self.scan.timestamp) {
            (ScanMode::FromTimestamp, None) => {
                return Err((
                    "source.scan.timestamp".into(),
                    "`scan.mode = \"from-timestamp\"` needs `scan.timestamp = \"yyyy-MM-dd HH:mm:ss\"`".into(),
                ));
            }
            (_, Some(t)) if sluice_guest::batch::parse_datetime_micros(t).is_err() || t.len() != 19 => {
                return Err(("source.scan.timestamp".into(), format!("expected \"yyyy-MM-dd HH:mm:ss\", got {t:?}")));
            }
            _ => {}
        }
        Ok(())
    }
}
