//! The pipeline file, as written: `[pipeline]`, the connections, and each component's entry as its
//! component read it (see [`super::registry`]). Option names follow the Flink Doris connector's
//! keys without their section prefix, `-` as `_`, dots kept as TOML dotted keys
//! (`sink.label-prefix` → `label_prefix`, `sink.buffer-flush.max-rows` → `buffer_flush.max_rows`),
//! with the same defaults. Unknown keys are errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::Duration;
use super::component::{SinkConfig, SourceConfig, TransformConfig};
pub use crate::doris::config::{DEFAULT_DORIS, DorisSection, FeNodes, has_jdbc_url, password_from_env};

/// One pipeline file.
#[derive(Debug, Clone)]
pub struct PipelineFile {
    pub pipeline: PipelineSection,
    /// `[connections.<name>]`, and `[doris]` as the connection named `doris`.
    pub connections: BTreeMap<String, Connection>,
    pub source: Vec<Entry<dyn SourceConfig>>,
    pub transform: Vec<Entry<dyn TransformConfig>>,
    pub sink: Vec<Entry<dyn SinkConfig>>,
    /// `[dead_letter]`: where rows go that cannot be delivered (a `doris` or `file` sink).
    pub dead_letter: Option<Entry<dyn SinkConfig>>,
    /// `[cluster]`: the pipeline runs on several processes, coordinated by etcd.
    pub cluster: Option<ClusterSection>,
    /// `[verify]`: the running pipeline compares its Doris copy with the source now and then.
    pub verify: Option<VerifySection>,
}

impl PipelineFile {
    /// The Doris connection a component names (`connection = "…"`), or the default one: `[doris]`,
    /// else the only Doris connection. The error says what to write.
    pub fn doris(&self, name: Option<&str>) -> Result<(&str, &DorisSection), String> {
        let doris = |n: &str| match self.connections.get_key_value(n) {
            Some((k, Connection::Doris(d))) => Ok((k.as_str(), d)),
            Some((_, other)) => Err(format!("connection `{n}` is a {} connection, not a Doris one", other.kind())),
            None => Err(format!("there is no connection `{n}`; define it as [connections.{n}] with type = \"doris\"")),
        };
        if let Some(n) = name {
            return doris(n);
        }
        if self.connections.contains_key(DEFAULT_DORIS) {
            return doris(DEFAULT_DORIS);
        }
        let mut all = self.connections.iter().filter(|(_, c)| matches!(c, Connection::Doris(_)));
        match (all.next(), all.next()) {
            (Some((k, Connection::Doris(d))), None) => Ok((k.as_str(), d)),
            (None, _) => Err("needs a Doris connection: add a [doris] section with `fenodes`".into()),
            _ => Err("several Doris connections: say which with `connection = \"<name>\"`".into()),
        }
    }

    /// [`PipelineFile::doris`] for the entry of `section` (`"sink"`, …) with `connection = name`:
    /// the key at fault is its `connection`, or the entry when it names none.
    pub fn doris_of(&self, section: &str, name: Option<&str>) -> Result<(&str, &DorisSection), (String, String)> {
        self.doris(name).map_err(|e| match name {
            Some(_) => (format!("{section}.connection"), e),
            None => (section.to_string(), e),
        })
    }

    /// The Doris connection with `fenodes = "embedded"`, if there is one.
    pub fn embedded_doris_mut(&mut self) -> Option<&mut DorisSection> {
        self.connections.values_mut().find_map(|c| match c {
            Connection::Doris(d) if d.fenodes.is_embedded() => Some(d),
            _ => None,
        })
    }
}

/// A component's entry in the file: its `type`, its name, and its options as it read them.
#[derive(Debug)]
pub struct Entry<T: ?Sized> {
    /// `type = "…"`
    pub kind: &'static str,
    /// Its name in the pipeline, logs and checkpoints: `name = "…"`, else its type (with `-2`,
    /// `-3`, … when several entries share one).
    pub name: String,
    /// Line of its `[[…]]` header.
    pub line: usize,
    pub config: Arc<T>,
}

impl<T: ?Sized> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry { kind: self.kind, name: self.name.clone(), line: self.line, config: self.config.clone() }
    }
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
    /// How long a checkpoint may take, from its barrier to every worker's acknowledgement
    /// (default 10min, as Flink's `execution.checkpointing.timeout`). A checkpoint that takes
    /// longer fails, and the pipeline restarts from the last completed one.
    #[serde(default = "default_checkpoint_timeout")]
    pub checkpoint_timeout: Duration,
    /// Where checkpoints and labels are kept (default `.sluice/<name>` beside the pipeline file).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

/// `[cluster]`: one pipeline on several `sluice` processes (docs/scale-out.md). Each process
/// joins under a lease; the leader runs the pipeline, the others stand by and take over when it
/// is lost; checkpoints live in object storage and are published in etcd.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// The etcd members, `etcd://host:2379[,host:2379…]` (`sluice run --cluster` sets it too).
    #[serde(default)]
    pub etcd: Option<String>,
    /// Where checkpoints are kept: `s3://bucket/prefix` (credentials, region and endpoint from
    /// the `AWS_*` environment) or `file:///dir` (a directory every process shares).
    pub store: String,
    /// This process's name in the cluster (default: `$HOSTNAME`, which is a StatefulSet pod's
    /// name; `sluice run --member` sets it too). Two live processes cannot share one.
    #[serde(default)]
    pub member: Option<String>,
    /// How long a process may go unheard before another takes its place (default 10s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: Duration,
    /// How many units this process takes, relative to the others (default 1; `sluice run
    /// --capacity` sets it too): the leader gives each process a share of the units in
    /// proportion to its capacity.
    #[serde(default = "default_capacity")]
    pub capacity: u32,
}

/// `[verify]`: `sluice verify` inside the running pipeline, every `every`; the last result is in
/// `/metrics` (`sluice_verify_rows_differing{table}` …) and in `sluice serve`'s API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifySection {
    /// Time between two comparisons (the first one this long after the start).
    pub every: Duration,
    /// Differing rows logged per table (default 10; all are counted).
    #[serde(default = "default_verify_samples")]
    pub samples: usize,
    /// Source rows read per second at most (default: as fast as it goes).
    #[serde(default)]
    pub rate: Option<u64>,
}

fn default_verify_samples() -> usize {
    10
}

fn default_capacity() -> u32 {
    1
}

fn default_lease_ttl() -> Duration {
    Duration::from_secs(10)
}

fn default_parallelism() -> u32 {
    1
}

fn default_checkpoint_interval() -> Duration {
    Duration::from_secs(10)
}

fn default_checkpoint_timeout() -> Duration {
    Duration::from_secs(600)
}

/// `[connections.<name>]`, by `type`.
#[derive(Debug, Clone)]
pub enum Connection {
    Doris(DorisSection),
    Mysql(DatabaseConnection),
    Postgres(DatabaseConnection),
    Kafka(KafkaConnection),
}

impl Connection {
    /// Its `type` (the registry's name of it, [`super::registry::CONNECTIONS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Connection::Doris(_) => "doris",
            Connection::Mysql(_) => "mysql",
            Connection::Postgres(_) => "postgres",
            Connection::Kafka(_) => "kafka",
        }
    }
}

impl PipelineFile {
    /// The connection `name` a source names (`source.connection`), which must be of `kind`;
    /// `pick` takes it out of its variant.
    pub fn source_connection<'f, T>(
        &'f self,
        name: &str,
        kind: &str,
        pick: impl FnOnce(&'f Connection) -> Option<&'f T>,
    ) -> Result<&'f T, (String, String)> {
        let key = || "source.connection".to_string();
        match self.connections.get(name) {
            Some(c) => pick(c)
                .ok_or_else(|| (key(), format!("connection `{name}` is a {} connection, not a {kind} one", c.kind()))),
            None => Err((
                key(),
                format!("there is no connection `{name}`; define it as [connections.{name}] with type = \"{kind}\""),
            )),
        }
    }
}

/// `type = "mysql"` or `"postgres"`: a database server a source reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConnection {
    pub host: String,
    pub port: Option<u16>,
    #[serde(default = "crate::doris::config::default_username")]
    pub user: String,
    /// The environment variable holding the password. Prefer it to `password`.
    pub password_env: Option<String>,
    /// The password, inline (never printed).
    pub password: Option<String>,
    /// The database to connect to, when the server needs one.
    pub database: Option<String>,
    /// MySQL: the replica id this pipeline reads the binlog as (unique among the server's
    /// replicas; default 5400 + a random number below 1000).
    pub server_id: Option<u32>,
    /// MySQL: the time zone TIMESTAMP values are shown in (an IANA name such as
    /// `Asia/Shanghai`; default `UTC`). DATETIME values are wall times and stay as they are.
    pub server_time_zone: Option<String>,
}

impl DatabaseConnection {
    /// The password: inline, else from `password_env`, else none (empty); `key` names the
    /// connection in the error.
    pub fn password(&self, key: &str) -> anyhow::Result<String> {
        match &self.password {
            Some(p) => Ok(p.clone()),
            None => Ok(password_from_env(self.password_env.as_deref(), key)
                .map_err(|e| anyhow::anyhow!(e))?
                .unwrap_or_default()),
        }
    }
}

/// `type = "kafka"`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConnection {
    /// `host:port` of the brokers to bootstrap from.
    pub bootstrap_servers: Vec<String>,
    /// librdkafka settings passed as they are (`security.protocol`, `sasl.mechanism`,
    /// `ssl.ca.location`, …; the Flink connector's `properties.*`).
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, String>,
}
