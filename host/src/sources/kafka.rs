//! `type = "kafka"`: the messages of Kafka topics. The partitions (of `topics`, or of every topic
//! `topic_pattern` matches) are dealt to the workers round robin; each worker reads its
//! partitions by assignment (no consumer-group rebalancing), from the offsets in the checkpoint,
//! else from where `scan.startup.mode` says. The offsets are the position: a restart reads every
//! message after the last checkpoint once. The consumer group (`group_id`) is told the offsets
//! only after the checkpoint holding them is committed in Doris — for tools that show a group's
//! lag; Sluice never reads them back except for `group-offsets` on a fresh start.
//!
//! A message becomes a row by `format`: `raw` (the message itself: topic, partition, offset, key,
//! value, timestamp — for a decoder plugin in a `[[transform]]`), or decoded here into `schema`'s
//! columns: `json` (an object per message), `debezium-json`, `canal-json` or `csv`. A message
//! that does not decode stops the pipeline, naming its topic, partition and offset.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sluice_guest::batch::{Batch, BatchBuilder, RowKind, Value};
use sluice_guest::types::{arrow_schema, parse_columns};

use crate::pipeline::{BuildContext, Checked, Connection, KafkaConnection, PipelineFile, SourceConfig};
use crate::runtime::{Event, Position, Restartable, Source, SourceReader, SplitEnumerator, TableId};

/// Messages per batch at most.
const BATCH_MESSAGES: usize = 4096;
/// How long the broker may take to answer a metadata or offsets request.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `type = "kafka"`: the options (the Flink Kafka connector's keys where one exists).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSource {
    pub name: Option<String>,
    /// A `[connections.<name>]` of `type = "kafka"`.
    pub connection: String,
    /// The topics read (`topic`), or …
    pub topics: Option<Vec<String>>,
    /// … every topic whose whole name this regex matches (`topic-pattern`).
    pub topic_pattern: Option<String>,
    /// `properties.group.id`: the group the committed offsets are reported to (default
    /// `sluice-<pipeline>`).
    pub group_id: Option<String>,
    pub scan: KafkaScan,
    /// `raw` (default), `json`, `debezium-json`, `canal-json` or `csv`.
    #[serde(default = "default_format")]
    pub format: String,
    /// The columns messages decode into (all formats but `raw`), in Doris syntax.
    pub schema: Option<String>,
    /// `debezium-json`: the key columns, whose change turns an update into delete + insert.
    #[serde(default)]
    pub key: Vec<String>,
    /// `csv`: the field delimiter (default `,`).
    #[serde(default = "default_delimiter")]
    pub csv_delimiter: String,
    /// The table the rows are of, for sinks and transforms (default: the topic's name).
    pub table: Option<String>,
}

fn default_format() -> String {
    "raw".into()
}

fn default_delimiter() -> String {
    ",".into()
}

/// `scan.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaScan {
    pub startup: KafkaStartup,
}

/// `scan.startup.*`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaStartup {
    /// `earliest-offset`, `latest-offset`, `group-offsets` (the group's committed offsets, else
    /// the earliest) or `timestamp`.
    pub mode: String,
    /// `scan.startup.timestamp-millis`, for `timestamp`.
    pub timestamp_millis: Option<i64>,
}

const MODES: [&str; 4] = ["earliest-offset", "latest-offset", "group-offsets", "timestamp"];
const FORMATS: [&str; 5] = ["raw", "json", "debezium-json", "canal-json", "csv"];

/// The columns of `format = "raw"`.
pub const RAW_COLUMNS: &str = "topic VARCHAR(255) NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, key STRING, value STRING, timestamp DATETIME(3)";

impl KafkaSource {
    fn server<'f>(&self, file: &'f PipelineFile) -> Result<&'f KafkaConnection, (String, String)> {
        file.source_connection(&self.connection, "kafka", |c| match c {
            Connection::Kafka(c) => Some(c),
            _ => None,
        })
    }

    fn mode(&self) -> &str {
        match self.scan.startup.mode.as_str() {
            "earliest" => "earliest-offset",
            "latest" => "latest-offset",
            other => other,
        }
    }
}

#[async_trait]
impl SourceConfig for KafkaSource {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, _file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach { connections: vec![self.connection.clone()], ..Default::default() })
    }

    fn validate(&self, file: &PipelineFile) -> Checked {
        self.server(file)?;
        match (&self.topics, &self.topic_pattern) {
            (Some(t), None) if !t.is_empty() => {}
            (None, Some(p)) => {
                regex::Regex::new(p).map_err(|e| ("source.topic_pattern".to_string(), format!("not a regex: {e}")))?;
            }
            _ => {
                return Err(("source.topics".into(), "give `topics = [\"…\"]` or `topic_pattern`, one of them".into()));
            }
        }
        if !MODES.contains(&self.mode()) {
            return Err((
                "source.scan.startup.mode".into(),
                format!(
                    "expected one of {}, got {:?}",
                    MODES.map(|m| format!("\"{m}\"")).join(", "),
                    self.scan.startup.mode
                ),
            ));
        }
        match (self.mode(), self.scan.startup.timestamp_millis) {
            ("timestamp", Some(t)) if t >= 0 => {}
            ("timestamp", _) => {
                return Err((
                    "source.scan.startup.timestamp_millis".into(),
                    "`timestamp` needs `timestamp_millis` (milliseconds since 1970-01-01 UTC)".into(),
                ));
            }
            (_, Some(_)) => {
                return Err(("source.scan.startup.timestamp_millis".into(), "only for mode = \"timestamp\"".into()));
            }
            _ => {}
        }
        if !FORMATS.contains(&self.format.as_str()) {
            return Err((
                "source.format".into(),
                format!("expected one of {}, got {:?}", FORMATS.map(|m| format!("\"{m}\"")).join(", "), self.format),
            ));
        }
        match (&self.schema, self.format.as_str()) {
            (Some(_), "raw") => {
                return Err((
                    "source.schema".into(),
                    "`raw` messages have their own columns (topic, partition, offset, key, value, timestamp); give the schema to the decoder".into(),
                ));
            }
            (None, f) if f != "raw" => {
                return Err((
                    "source.schema".into(),
                    format!("`{f}` messages decode into `schema = \"id INT, …\"`; give it"),
                ));
            }
            (Some(s), _) => {
                let columns = parse_columns(s).map_err(|e| ("source.schema".to_string(), e.message))?;
                if let Some(k) = self.key.iter().find(|k| !columns.iter().any(|c| &c.name == *k)) {
                    return Err(("source.key".into(), format!("column `{k}` is not in `schema`")));
                }
            }
            _ => {}
        }
        if self.format == "csv" && self.csv_delimiter.len() != 1 {
            return Err(("source.csv_delimiter".into(), "one ASCII character".into()));
        }
        Ok(())
    }

    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let server = self.server(ctx.pipeline).map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?;
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", server.bootstrap_servers.join(","));
        for (k, v) in &server.properties {
            config.set(k, v);
        }
        let group = self.group_id.clone().unwrap_or_else(|| format!("sluice-{}", ctx.pipeline.pipeline.name));
        config
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("client.id", format!("sluice-{name}"));
        let columns = match &self.schema {
            Some(s) => s.clone(),
            None => RAW_COLUMNS.to_string(),
        };
        let schema = arrow_schema(&parse_columns(&columns).map_err(|e| anyhow::anyhow!(e.message))?);
        let format = match self.format.as_str() {
            "json" => Format::Json,
            "debezium-json" => Format::Debezium(self.key.clone()),
            "canal-json" => Format::Canal,
            "csv" => Format::Csv(self.csv_delimiter.as_bytes()[0]),
            _ => Format::Raw,
        };
        let topics = match (&self.topics, &self.topic_pattern) {
            (Some(t), _) => Topics::Named(t.clone()),
            (None, Some(p)) => Topics::Pattern(regex::Regex::new(&format!("^(?:{p})$"))?),
            (None, None) => anyhow::bail!("source.topics: give `topics` or `topic_pattern`"),
        };
        let lag = Arc::new(ConsumerLag { source: name.to_string(), partitions: Default::default() });
        ctx.stats.register(lag.clone());
        Ok(Arc::new(KafkaTopics {
            lag,
            config,
            servers: server.bootstrap_servers.join(","),
            topics,
            mode: self.mode().to_string(),
            timestamp: self.scan.startup.timestamp_millis,
            schema,
            format: Arc::new(format),
            table: self.table.clone(),
        }))
    }
}

/// How a message becomes rows.
#[derive(Debug)]
enum Format {
    Raw,
    Json,
    Debezium(Vec<String>),
    Canal,
    Csv(u8),
}

#[derive(Debug)]
enum Topics {
    Named(Vec<String>),
    Pattern(regex::Regex),
}

struct KafkaTopics {
    lag: Arc<ConsumerLag>,
    config: ClientConfig,
    servers: String,
    topics: Topics,
    mode: String,
    timestamp: Option<i64>,
    schema: SchemaRef,
    format: Arc<Format>,
    table: Option<String>,
}

/// How far behind each partition's end the source reads: the next offset read and the partition's
/// high watermark, asked every few seconds.
struct ConsumerLag {
    source: String,
    /// `topic:partition` → (next offset to read, high watermark).
    partitions: std::sync::Mutex<BTreeMap<String, (i64, i64)>>,
}

/// How often the partitions' ends are asked for.
const WATERMARKS_EVERY: Duration = Duration::from_secs(5);

impl ConsumerLag {
    fn read(&self, moved: &[(String, i64)]) {
        let mut partitions = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        for (k, next) in moved {
            partitions.entry(k.clone()).or_insert((0, 0)).0 = *next;
        }
    }

    /// Ask `consumer` for the high watermarks of `partitions` every few seconds, until dropped.
    fn probe(
        self: &Arc<Self>,
        consumer: Arc<BaseConsumer>,
        partitions: Vec<(String, i32)>,
    ) -> crate::runtime::AbortOnDrop<()> {
        let lag = self.clone();
        crate::runtime::AbortOnDrop(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(WATERMARKS_EVERY);
            loop {
                ticks.tick().await;
                let (consumer, partitions) = (consumer.clone(), partitions.clone());
                let highs = blocking(move || {
                    Ok(partitions
                        .iter()
                        .filter_map(|(t, p)| Some((key(t, *p), consumer.fetch_watermarks(t, *p, TIMEOUT).ok()?.1)))
                        .collect::<Vec<_>>())
                })
                .await;
                let Ok(highs) = highs else { continue };
                let mut known = lag.partitions.lock().unwrap_or_else(|e| e.into_inner());
                for (k, high) in highs {
                    known.entry(k).or_insert((0, 0)).1 = high;
                }
            }
        }))
    }
}

impl crate::metrics::MetricSource for ConsumerLag {
    fn metrics(&self) -> Vec<crate::metrics::Metric> {
        let partitions = self.partitions.lock().unwrap_or_else(|e| e.into_inner()).clone();
        partitions
            .into_iter()
            .map(|(k, (next, high))| {
                crate::metrics::Metric::gauge(
                    "source_lag_messages",
                    "Messages of the partition after the next one read (its high watermark, asked every 5 s).",
                    vec![("source", self.source.clone()), ("partition", k)],
                    (high - next).max(0) as u64,
                )
            })
            .collect()
    }
}

/// A partition as a position names it: `topic:partition`.
fn key(topic: &str, partition: i32) -> String {
    format!("{topic}:{partition}")
}

/// A broker call, off the async threads (librdkafka's calls block).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await.context("a Kafka call panicked")?
}

impl KafkaTopics {
    /// The partitions read, sorted.
    async fn partitions(&self, consumer: Arc<BaseConsumer>) -> anyhow::Result<Vec<(String, i32)>> {
        let servers = self.servers.clone();
        let metadata = blocking(move || {
            consumer
                .fetch_metadata(None, TIMEOUT)
                .map_err(|e| Restartable::error(format!("reading the topics of the Kafka brokers {servers}: {e}")))
        })
        .await?;
        let mut out = Vec::new();
        let mut found = Vec::new();
        for t in metadata.topics() {
            let wanted = match &self.topics {
                Topics::Named(names) => names.iter().any(|n| n == t.name()),
                Topics::Pattern(p) => p.is_match(t.name()),
            };
            if wanted && t.error().is_none() {
                found.push(t.name().to_string());
                out.extend(t.partitions().iter().map(|p| (t.name().to_string(), p.id())));
            }
        }
        if let Topics::Named(names) = &self.topics
            && let Some(missing) = names.iter().find(|n| !found.contains(n))
        {
            anyhow::bail!("Kafka topic `{missing}` does not exist on {}; create it or fix `topics`", self.servers);
        }
        if out.is_empty() {
            anyhow::bail!("no Kafka topic on {} matches `topic_pattern`", self.servers);
        }
        out.sort();
        Ok(out)
    }

    /// Where each of `fresh` starts by `scan.startup.mode`.
    async fn start_offsets(
        &self,
        consumer: Arc<BaseConsumer>,
        fresh: Vec<(String, i32)>,
    ) -> anyhow::Result<BTreeMap<String, i64>> {
        if fresh.is_empty() {
            return Ok(BTreeMap::new());
        }
        let (mode, timestamp) = (self.mode.clone(), self.timestamp);
        blocking(move || {
            let mut out = BTreeMap::new();
            let watermarks = |t: &str, p: i32| {
                consumer
                    .fetch_watermarks(t, p, TIMEOUT)
                    .map_err(|e| Restartable::error(format!("offsets of {t}:{p}: {e}")))
            };
            let mut list = TopicPartitionList::new();
            for (t, p) in &fresh {
                match mode.as_str() {
                    "timestamp" => drop(list.add_partition_offset(t, *p, Offset::Offset(timestamp.unwrap_or(0)))),
                    _ => drop(list.add_partition(t, *p)),
                }
            }
            let resolved = match mode.as_str() {
                "group-offsets" => Some(consumer.committed_offsets(list, TIMEOUT)?),
                "timestamp" => Some(consumer.offsets_for_times(list, TIMEOUT)?),
                _ => None,
            };
            for (t, p) in &fresh {
                let (low, high) = watermarks(t, *p)?;
                let found = resolved.as_ref().and_then(|r| r.find_partition(t, *p)).map(|e| e.offset());
                let offset = match (mode.as_str(), found) {
                    ("latest-offset", _) => high,
                    (_, Some(Offset::Offset(o))) => o,
                    // A timestamp after the last message: the end.
                    ("timestamp", _) => high,
                    // No committed offset (or the earliest asked for).
                    _ => low,
                };
                out.insert(key(t, *p), offset);
            }
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl Source for KafkaTopics {
    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        let consumer: Arc<BaseConsumer> = Arc::new(self.config.create().context("a Kafka client")?);
        let partitions = self.partitions(consumer.clone()).await?;
        let mut offsets = BTreeMap::new();
        for p in restored.iter().flatten() {
            offsets.extend(OffsetsPosition::restore(Some(p), "kafka")?.offsets);
        }
        let fresh: Vec<(String, i32)> =
            partitions.iter().filter(|(t, p)| !offsets.contains_key(&key(t, *p))).cloned().collect();
        let starts = self.start_offsets(consumer.clone(), fresh).await?;
        offsets.extend(starts);
        self.lag.read(&offsets.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>());
        Ok(Box::new(Partitions {
            _probe: self.lag.probe(consumer.clone(), partitions.clone()),
            lag: self.lag.clone(),
            config: self.config.clone(),
            consumer,
            partitions,
            offsets,
            readers: restored.len().max(1),
            schema: self.schema.clone(),
            format: self.format.clone(),
            table: self.table.clone(),
        }))
    }

    fn describe(&self) -> String {
        match &self.topics {
            Topics::Named(t) => format!("kafka {} of {}", self.mode, t.join(", ")),
            Topics::Pattern(p) => format!("kafka {} of topics matching {}", self.mode, p.as_str()),
        }
    }
}

struct Partitions {
    lag: Arc<ConsumerLag>,
    _probe: crate::runtime::AbortOnDrop<()>,
    config: ClientConfig,
    /// For committing offsets to the group.
    consumer: Arc<BaseConsumer>,
    partitions: Vec<(String, i32)>,
    /// Where each partition starts in this run.
    offsets: BTreeMap<String, i64>,
    readers: usize,
    schema: SchemaRef,
    format: Arc<Format>,
    table: Option<String>,
}

/// A reader's position: the next offset of each of its partitions (`topic:partition`).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct OffsetsPosition {
    pub offsets: BTreeMap<String, i64>,
}

impl Position for OffsetsPosition {}

#[async_trait]
impl SplitEnumerator for Partitions {
    async fn on_checkpoint_complete(&mut self, _id: u64, positions: &[serde_json::Value]) -> anyhow::Result<()> {
        // For the group's lag in Kafka tools; Sluice's own offsets are in the checkpoint.
        let mut list = TopicPartitionList::new();
        for p in positions {
            for (k, offset) in OffsetsPosition::restore(Some(p), "kafka")?.offsets {
                if let Some((t, p)) = k.rsplit_once(':').and_then(|(t, p)| Some((t.to_string(), p.parse().ok()?))) {
                    let _ = list.add_partition_offset(&t, p, Offset::Offset(offset));
                }
            }
        }
        if list.count() > 0
            && let Err(e) = self.consumer.commit(&list, CommitMode::Async)
        {
            tracing::warn!("reporting the offsets to the Kafka group: {e}");
        }
        Ok(())
    }

    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let mut position = OffsetsPosition::restore(position, "kafka")?;
        let mine: Vec<(String, i32)> = self.partitions.iter().skip(worker).step_by(self.readers).cloned().collect();
        let mut list = TopicPartitionList::new();
        for (t, p) in &mine {
            let k = key(t, *p);
            let at = position.offsets.get(&k).or(self.offsets.get(&k)).copied().unwrap_or(0);
            position.offsets.insert(k, at);
            list.add_partition_offset(t, *p, Offset::Offset(at)).context("assigning a partition")?;
        }
        position.offsets.retain(|k, _| mine.iter().any(|(t, p)| &key(t, *p) == k));
        let consumer: StreamConsumer = self.config.create().context("a Kafka consumer")?;
        if !mine.is_empty() {
            consumer.assign(&list).context("assigning the partitions")?;
        }
        Ok(Box::new(KafkaReader {
            lag: self.lag.clone(),
            consumer: if mine.is_empty() { None } else { Some(consumer) },
            position,
            schema: self.schema.clone(),
            format: self.format.clone(),
            table: self.table.clone(),
            ready: VecDeque::new(),
        }))
    }
}

/// A message, owned.
struct Owned {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

struct KafkaReader {
    lag: Arc<ConsumerLag>,
    /// None: this worker has no partition.
    consumer: Option<StreamConsumer>,
    position: OffsetsPosition,
    schema: SchemaRef,
    format: Arc<Format>,
    table: Option<String>,
    /// Decoded batches, each with the next offsets it moves its partitions to.
    ready: VecDeque<(Event, Vec<(String, i64)>)>,
}

impl KafkaReader {
    /// The rows of a run of messages of one topic.
    fn decode(&self, messages: &[Owned]) -> anyhow::Result<Batch> {
        let mut builder = BatchBuilder::new(self.schema.clone()).map_err(|e| anyhow::anyhow!(e.message))?;
        for m in messages {
            let at = || format!("Kafka topic `{}` partition {} offset {}", m.topic, m.partition, m.offset);
            let value = m.value.as_deref().unwrap_or_default();
            let text = |bytes: &[u8]| {
                std::str::from_utf8(bytes)
                    .map(str::to_string)
                    .map_err(|_| anyhow::anyhow!("{}: the message is not UTF-8 text", at()))
            };
            let pushed = match &*self.format {
                Format::Raw => {
                    let key = m.key.as_deref().map(text).transpose()?;
                    let value = m.value.as_deref().map(text).transpose()?;
                    let partition = m.partition.to_string();
                    let offset = m.offset.to_string();
                    let ts = m.timestamp.map(|t| sluice_guest::batch::format_datetime_micros(t * 1000));
                    let values = [
                        Value::Str(&m.topic),
                        Value::Str(&partition),
                        Value::Str(&offset),
                        key.as_deref().map_or(Value::Null, Value::Str),
                        value.as_deref().map_or(Value::Null, Value::Str),
                        ts.as_deref().map_or(Value::Null, Value::Str),
                    ];
                    builder.push(RowKind::Insert, &values)
                }
                Format::Json if sluice_guest::json::is_tombstone(value) => Ok(()),
                Format::Json => sluice_guest::json::parse_object(value, 0)
                    .and_then(|o| sluice_guest::json::push_object(&mut builder, &self.schema, RowKind::Insert, &o)),
                Format::Debezium(key) => sluice_guest::json::push_debezium(&mut builder, &self.schema, key, value, 0),
                Format::Canal => sluice_guest::json::push_canal(&mut builder, &self.schema, value, 0),
                Format::Csv(delimiter) => csv_row(&mut builder, *delimiter, value),
            };
            pushed.map_err(|e| {
                anyhow::anyhow!(
                    "{}: {}; fix or skip the message (set the source's offsets past it) and restart",
                    at(),
                    e.message.trim_start_matches("row 0: ")
                )
            })?;
        }
        builder.finish().map_err(|e| anyhow::anyhow!(e.message))
    }
}

/// One CSV record as a row; `\N` is NULL (as in a Stream Load).
fn csv_row(builder: &mut BatchBuilder, delimiter: u8, value: &[u8]) -> Result<(), sluice_guest::Error> {
    let mut reader =
        csv::ReaderBuilder::new().delimiter(delimiter).has_headers(false).flexible(true).from_reader(value);
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(e) => return Err(sluice_guest::Error::new(format!("not CSV: {e}"))),
    }
    let values: Vec<Value<'_>> = record.iter().map(|f| if f == "\\N" { Value::Null } else { Value::Str(f) }).collect();
    builder.push(RowKind::Insert, &values)
}

#[async_trait]
impl SourceReader for KafkaReader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        if let Some((event, moved)) = self.ready.pop_front() {
            self.lag.read(&moved);
            self.position.offsets.extend(moved);
            return Ok(Some(event));
        }
        let Some(consumer) = &self.consumer else {
            // No partition here: nothing, until the pipeline stops.
            std::future::pending::<()>().await;
            return Ok(None);
        };
        let own = |m: &rdkafka::message::BorrowedMessage<'_>| Owned {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp: m.timestamp().to_millis(),
        };
        let first = consumer.recv().await.map_err(|e| Restartable::error(format!("reading Kafka: {e}")))?;
        let mut messages = vec![own(&first)];
        drop(first);
        while messages.len() < BATCH_MESSAGES {
            match tokio::time::timeout(Duration::from_millis(5), consumer.recv()).await {
                Ok(Ok(m)) => messages.push(own(&m)),
                Ok(Err(e)) => return Err(Restartable::error(format!("reading Kafka: {e}"))),
                Err(_) => break,
            }
        }
        // One batch per run of a topic, in the order read.
        let mut start = 0;
        while start < messages.len() {
            let topic = messages[start].topic.clone();
            let end = messages[start..].iter().position(|m| m.topic != topic).map_or(messages.len(), |i| start + i);
            let run = &messages[start..end];
            let batch = self.decode(run)?;
            let mut moved = BTreeMap::new();
            for m in run {
                moved.insert(key(&m.topic, m.partition), m.offset + 1);
            }
            let table = TableId::new(self.table.clone().unwrap_or(topic));
            self.ready.push_back((Event::data(&table, batch), moved.into_iter().collect()));
            start = end;
        }
        let (event, moved) = self.ready.pop_front().expect("one batch at least");
        self.lag.read(&moved);
        self.position.offsets.extend(moved);
        Ok(Some(event))
    }

    fn position(&self) -> serde_json::Value {
        self.position.to_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(format: Format, columns: &str) -> KafkaReader {
        KafkaReader {
            lag: Arc::new(ConsumerLag { source: "kafka".into(), partitions: Default::default() }),
            consumer: None,
            position: OffsetsPosition::default(),
            schema: arrow_schema(&parse_columns(columns).unwrap()),
            format: Arc::new(format),
            table: None,
            ready: VecDeque::new(),
        }
    }

    #[test]
    fn lag_is_the_messages_after_the_next_one_read() {
        let lag = ConsumerLag { source: "events".into(), partitions: Default::default() };
        lag.read(&[("t:0".into(), 7), ("t:1".into(), 3)]);
        lag.partitions.lock().unwrap().get_mut("t:0").unwrap().1 = 10;
        let shown: Vec<(String, u64)> =
            crate::metrics::MetricSource::metrics(&lag).into_iter().map(|m| (m.labels[1].1.clone(), m.value)).collect();
        // t:1's end is not known yet (0): no lag is shown rather than a negative one.
        assert_eq!(shown, [("t:0".to_string(), 3), ("t:1".to_string(), 0)]);
    }

    fn message(offset: i64, value: &str) -> Owned {
        Owned {
            topic: "t".into(),
            partition: 2,
            offset,
            key: Some(b"k".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            timestamp: Some(1_764_547_200_123),
        }
    }

    fn lines(batch: &Batch) -> Vec<String> {
        (0..batch.num_rows())
            .map(|r| {
                let values: Vec<String> = (0..batch.data.num_columns())
                    .map(|c| arrow::util::display::array_value_to_string(batch.data.column(c), r).unwrap())
                    .collect();
                format!("{} {}", batch.row_kind(r).short(), values.join(" "))
            })
            .collect()
    }

    #[test]
    fn each_format_turns_messages_into_rows() {
        let cols = "id INT, name VARCHAR(16)";
        let json = reader(Format::Json, cols);
        let out =
            json.decode(&[message(0, r#"{"id": 1, "name": "a", "x": 0}"#), message(1, ""), message(2, r#"{"id": 2}"#)]);
        assert_eq!(lines(&out.unwrap()), ["+I 1 a", "+I 2 "]);

        let canal = reader(Format::Canal, cols);
        let update = r#"{"data":[{"id":"1","name":"b"}],"old":[{"name":"a"}],"type":"UPDATE","isDdl":false}"#;
        let out = canal.decode(&[
            message(0, r#"{"data":[{"id":1,"name":"a"},{"id":2,"name":"z"}],"type":"INSERT"}"#),
            message(1, update),
            message(2, r#"{"data":[{"id":2,"name":"z"}],"type":"DELETE"}"#),
            message(3, r#"{"sql":"ALTER TABLE t ADD c INT","type":"ALTER","isDdl":true}"#),
        ]);
        assert_eq!(lines(&out.unwrap()), ["+I 1 a", "+I 2 z", "-U 1 a", "+U 1 b", "-D 2 z"]);

        let csv = reader(Format::Csv(b'|'), cols);
        let out = csv.decode(&[message(0, "1|plain"), message(1, "2|\"quoted | bar\""), message(2, "3|\\N")]);
        assert_eq!(lines(&out.unwrap()), ["+I 1 plain", "+I 2 quoted | bar", "+I 3 "]);

        let dbz = reader(Format::Debezium(vec!["id".into()]), cols);
        let out = dbz.decode(&[message(0, r#"{"before":{"id":1,"name":"a"},"after":{"id":5,"name":"a"},"op":"u"}"#)]);
        assert_eq!(lines(&out.unwrap()), ["-D 1 a", "+I 5 a"]);

        let raw = reader(Format::Raw, RAW_COLUMNS);
        let out = raw.decode(&[message(7, "hello")]).unwrap();
        assert_eq!(lines(&out), ["+I t 2 7 k hello 2025-12-01T00:00:00.123"]);
    }

    #[test]
    fn a_message_that_does_not_decode_is_named_by_topic_partition_and_offset() {
        let json = reader(Format::Json, "id INT");
        let e = json.decode(&[message(0, r#"{"id": 1}"#), message(41, "[1]")]).unwrap_err().to_string();
        assert!(e.starts_with("Kafka topic `t` partition 2 offset 41: expected a JSON object, got an array"), "{e}");
        let e = json.decode(&[message(3, r#"{"id": "x"}"#)]).unwrap_err().to_string();
        assert!(e.starts_with("Kafka topic `t` partition 2 offset 3: "), "{e}");
        let mut bad = message(9, "");
        bad.value = Some(vec![0xff, 0xfe]);
        let e = reader(Format::Raw, RAW_COLUMNS).decode(&[bad]).unwrap_err().to_string();
        assert_eq!(e, "Kafka topic `t` partition 2 offset 9: the message is not UTF-8 text");
    }
}
