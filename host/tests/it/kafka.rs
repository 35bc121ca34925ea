//! The `kafka` source against a real Kafka-compatible broker each test starts: tansu (SQLite
//! storage) on a free loopback port, installed by `tests/run.sh` into
//! `/var/tmp/sluice-tools/tansu` (or `$SLUICE_TANSU`). Messages are produced with librdkafka.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::common::{Background, Doris, pipeline_file, plugin_wasm};

fn tansu_bin() -> PathBuf {
    let path = std::env::var_os("SLUICE_TANSU")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/sluice-tools/tansu/bin/tansu"));
    assert!(
        path.is_file(),
        "the Kafka tests need the tansu broker at {}: run tests/run.sh (it installs it), or set SLUICE_TANSU",
        path.display()
    );
    path
}

/// A tansu broker of this test, its data in a temp dir. Stopped when dropped.
pub struct Broker {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Broker {
    pub fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu_bin())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("broker.log")).unwrap())
            .spawn()
            .expect("tansu starts");
        let broker = Broker { child, port, _dir: dir };
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return broker;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("tansu did not listen on port {port}");
    }

    pub fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let out = Command::new(tansu_bin())
            .args(["topic", "create", name, "--broker", &format!("tcp://127.0.0.1:{}", self.port)])
            .args(["--partitions", &partitions.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "creating topic {name}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn producer(&self) -> FutureProducer {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.servers())
            .set("message.timeout.ms", "30000")
            .create()
            .unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Send `messages` (key, value) to `topic`, partition `partition` (none: by key), waiting for
/// each to be acknowledged.
async fn produce(producer: &FutureProducer, topic: &str, partition: Option<i32>, messages: &[(String, String)]) {
    for (k, v) in messages {
        let mut record = FutureRecord::to(topic).key(k).payload(v);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e).unwrap();
    }
}

async fn until_rows(doris: &Doris, sql: &str, want: &[&str], run: &Background) {
    let mut got = Vec::new();
    for _ in 0..600 {
        got = std::panic::catch_unwind(|| doris.sql(sql)).unwrap_or_default();
        if got == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{sql}` = {got:?}, expected {want:?}\n{}", run.log());
}

fn head(broker: &Broker, doris: &Doris, name: &str) -> String {
    format!(
        "[pipeline]\nname = \"{name}\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.events]\ntype = \"kafka\"\nbootstrap_servers = [\"{}\"]\n\n[doris]\nfenodes = {}\n\n",
        broker.servers(),
        doris.fenodes()
    )
}

/// The Doris documentation's `op_type` case (`pipelines/kafka-op-type.toml`): `{"op_type":
/// "delete", "data": {…}}` messages through the `op-type-delete-sign` decoder plugin into a UNIQUE
/// table — inserts land, a delete removes its row (`__DORIS_DELETE_SIGN__`), a later upsert
/// replaces a row; a message the plugin rejects stops the pipeline naming where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_type_messages_upsert_and_delete_rows_through_a_decoder_plugin() {
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("user_ops", 2);
    let doris = Doris::start().await;
    doris.sql(
        "CREATE DATABASE db; CREATE TABLE db.users (id INT, name VARCHAR(32)) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1",
    );
    let producer = broker.producer();
    let op = |op: &str, id: i32, name: &str| {
        (id.to_string(), format!(r#"{{"op_type":"{op}","data":{{"id":{id},"name":"{name}"}}}}"#))
    };
    produce(
        &producer,
        "user_ops",
        None,
        &[op("insert", 1, "zhangsan"), op("insert", 2, "lisi"), op("insert", 3, "wangwu")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    // pipelines/kafka-op-type.toml as written, pointed at this broker and this doris-lite.
    let text = std::fs::read_to_string(crate::common::repo_root().join("pipelines/kafka-op-type.toml"))
        .unwrap()
        .replace("127.0.0.1:9092", &broker.servers())
        .replace("fenodes = \"embedded\"", &format!("fenodes = {}", doris.fenodes()))
        .replace("\"../plugins/op-type-delete-sign\"", &format!("\"{}\"", plugin_wasm("op-type-delete-sign").display()))
        .replace("checkpoint_interval = \"2s\"", "checkpoint_interval = \"300ms\"");
    assert!(text.contains(&broker.servers()) && text.contains(".wasm"), "{text}");
    let path = pipeline_file(dir.path(), &text);
    let run = Background::start(&path);
    let sql = "SELECT id, name FROM db.users ORDER BY id";
    until_rows(&doris, sql, &["1\tzhangsan", "2\tlisi", "3\twangwu"], &run).await;
    produce(&producer, "user_ops", None, &[op("delete", 1, "zhangsan"), op("update", 3, "wangwu2")]).await;
    until_rows(&doris, sql, &["2\tlisi", "3\twangwu2"], &run).await;
    // A message the plugin rejects stops the pipeline, naming the message.
    produce(&producer, "user_ops", Some(1), &[("9".into(), "{not json".into())]).await;
    let (code, log) = run.exit(60).await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("invalid JSON") && log.contains("(the message at topic `user_ops` partition 1 offset "),
        "{log}"
    );
    assert_eq!(doris.sql(sql), ["2\tlisi", "3\twangwu2"]);
}

/// Debezium JSON change events from Kafka, decoded by the source (`format = "debezium-json"`):
/// snapshot reads, inserts, an update, a key change and a delete end as the source table would.
/// A message that is not JSON then stops the pipeline naming its topic, partition and offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_json_changes_apply_and_a_poison_message_is_named() {
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("cdc.student", 1);
    let doris = Doris::start().await;
    doris.sql(
        "CREATE DATABASE db; CREATE TABLE db.student (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1",
    );
    let producer = broker.producer();
    let events = [
        r#"{"before":null,"after":{"id":1,"name":"ann","age":18},"op":"r"}"#,
        r#"{"before":null,"after":{"id":2,"name":"bob","age":19},"op":"c"}"#,
        r#"{"schema":{},"payload":{"before":null,"after":{"id":3,"name":"cid","age":20},"op":"c"}}"#,
        r#"{"before":{"id":2,"name":"bob","age":19},"after":{"id":2,"name":"bob","age":29},"op":"u"}"#,
        r#"{"before":{"id":3,"name":"cid","age":20},"after":{"id":30,"name":"cid","age":20},"op":"u"}"#,
        r#"{"before":{"id":1,"name":"ann","age":18},"after":null,"op":"d"}"#,
        "",
    ];
    let messages: Vec<(String, String)> = events.iter().map(|e| ("k".to_string(), e.to_string())).collect();
    produce(&producer, "cdc.student", Some(0), &messages).await;
    let dir = tempfile::tempdir().unwrap();
    let text = head(&broker, &doris, "dbz")
        + "[[source]]\ntype = \"kafka\"\nconnection = \"events\"\ntopics = [\"cdc.student\"]\nscan.startup.mode = \"earliest-offset\"\n\
           format = \"debezium-json\"\nschema = \"id INT, name VARCHAR(32), age INT\"\nkey = [\"id\"]\n\n\
           [[sink]]\ntype = \"doris\"\ntable = \"db.student\"\n";
    let path = pipeline_file(dir.path(), &text);
    let run = Background::start(&path);
    until_rows(&doris, "SELECT id, name, age FROM db.student ORDER BY id", &["2\tbob\t29", "30\tcid\t20"], &run).await;
    produce(&producer, "cdc.student", Some(0), &[("k".into(), "{not json".into())]).await;
    let (code, log) = run.exit(60).await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("Kafka topic `cdc.student` partition 0 offset 7: invalid JSON"),
        "the error names the message: {log}"
    );
}

/// `kill -9` of `sluice run` five times while a producer keeps writing to four partitions read
/// by two workers: in the end the DUPLICATE table holds every message exactly once (a replayed
/// message would show twice), and the group's committed offsets trail the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_reading_loads_every_message_once() {
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("facts", 4);
    let doris = Doris::start().await;
    doris.sql(
        "CREATE DATABASE db; CREATE TABLE db.facts (n INT, p INT, note VARCHAR(32)) DUPLICATE KEY(n) DISTRIBUTED BY HASH(n) BUCKETS 2",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = head(&broker, &doris, "crash").replace("checkpoint_interval", "parallelism = 2\ncheckpoint_interval")
        + "[[source]]\ntype = \"kafka\"\nconnection = \"events\"\ntopics = [\"facts\"]\nscan.startup.mode = \"earliest-offset\"\n\
           format = \"json\"\nschema = \"n INT, p INT, note VARCHAR(32)\"\n\n\
           [[sink]]\ntype = \"doris\"\ntable = \"db.facts\"\n";
    let path = pipeline_file(dir.path(), &text);
    let producer = broker.producer();
    let total = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (count, on) = (total.clone(), writing.clone());
    let writer = tokio::spawn(async move {
        let mut n = 0;
        while on.load(std::sync::atomic::Ordering::Relaxed) {
            let mut batch = Vec::new();
            for _ in 0..50 {
                n += 1;
                let p = n % 4;
                let payload = format!(r#"{{"n":{n},"p":{p},"note":"m{n}"}}"#);
                let record = FutureRecord::to("facts").key("k").partition(p).payload(&payload);
                batch.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
            }
            for f in batch {
                f.await.unwrap().map_err(|(e, _)| e).unwrap();
            }
            count.store(n as i64, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let rows = |doris: &Doris| doris.sql("SELECT COUNT(*) FROM db.facts")[0].parse::<i64>().unwrap_or(0);
    let mut kills = 0;
    while kills < 5 {
        let before = rows(&doris);
        let mut run = Background::start(&path);
        // Killed only once it has loaded something in this round.
        run.until(60, "rows loaded in this round", |_| rows(&doris) > before).await;
        tokio::time::sleep(Duration::from_millis(fastrand::u64(..700))).await;
        run.kill_9();
        kills += 1;
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let n = total.load(std::sync::atomic::Ordering::Relaxed);
    let run = Background::start(&path);
    let want = [format!("{n}\t{n}")];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    until_rows(&doris, "SELECT COUNT(*), COUNT(DISTINCT n) FROM db.facts", &want, &run).await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// The lookup case of the Doris documentation: facts from Kafka (JSON, the topics matching a
/// pattern) joined with the Doris
/// dimension table `dim.dim_city` on `city` (the lookup transform), written to a Doris table: each
/// fact with its city's province and level, or NULLs where the city is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_facts_are_enriched_from_a_doris_dimension_table() {
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("facts", 1);
    let doris = Doris::start().await;
    doris.sql(
        "CREATE DATABASE dim; CREATE TABLE dim.dim_city (city VARCHAR(32), level INT, province VARCHAR(32), country VARCHAR(32)) \
         UNIQUE KEY(city) DISTRIBUTED BY HASH(city) BUCKETS 2; \
         INSERT INTO dim.dim_city VALUES ('Beijing', 1, 'Beijing', 'China'), ('Hangzhou', 2, 'Zhejiang', 'China'); \
         CREATE DATABASE db; CREATE TABLE db.enriched (id BIGINT, name VARCHAR(32), city VARCHAR(32), province VARCHAR(32), \
         level INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1",
    );
    let facts = [(1, "Alice", "Hangzhou"), (2, "Bob", "Atlantis"), (3, "Dave", "Beijing")];
    let messages: Vec<(String, String)> = facts
        .iter()
        .map(|(id, name, city)| (id.to_string(), format!(r#"{{"id":{id},"name":"{name}","city":"{city}"}}"#)))
        .collect();
    produce(&broker.producer(), "facts", Some(0), &messages).await;
    // A topic the pattern does not match: its message would stop the pipeline if it were read.
    broker.create_topic("facts_raw", 1);
    produce(&broker.producer(), "facts_raw", Some(0), &[("x".into(), "{not json".into())]).await;
    let dir = tempfile::tempdir().unwrap();
    let text = head(&broker, &doris, "lookup").replace(
        "fenodes = ",
        &format!("jdbc_url = \"jdbc:mysql://127.0.0.1:{}\"\nfenodes = ", doris.h().query_addr().port()),
    ) + "[[source]]\ntype = \"kafka\"\nconnection = \"events\"\ntopic_pattern = \"fa.ts\"\nscan.startup.mode = \"earliest-offset\"\n\
           format = \"json\"\nschema = \"id BIGINT, name VARCHAR(32), city VARCHAR(32)\"\n\n\
           [[transform]]\ntype = \"lookup\"\ntable = \"dim.dim_city\"\nkeys = [\"city\"]\ncolumns = [\"province\", \"level\"]\n\n\
           [[sink]]\ntype = \"doris\"\ntable = \"db.enriched\"\n";
    let path = pipeline_file(dir.path(), &text);
    let run = Background::start(&path);
    let want = ["1\tAlice\tHangzhou\tZhejiang\t2", "2\tBob\tAtlantis\tNULL\tNULL", "3\tDave\tBeijing\tBeijing\t1"];
    until_rows(&doris, "SELECT id, name, city, province, level FROM db.enriched ORDER BY id", &want, &run).await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// `scan.startup.mode` on a fresh start, and the offsets the group is told: a pipeline from the
/// earliest offset loads everything and reports its offsets to its group once committed; a second
/// pipeline (its own state) with `group-offsets` on that group reads only what came after;
/// `latest-offset` only what is produced after it starts; `timestamp` what was produced from then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_modes_and_the_groups_offsets() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("ev", 2);
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE db");
    for t in ["early", "group", "late", "stamp"] {
        doris.sql(&format!("CREATE TABLE db.{t} (n INT) DUPLICATE KEY(n) DISTRIBUTED BY HASH(n) BUCKETS 1"));
    }
    let producer = broker.producer();
    let batch = |from: i32, to: i32| (from..to).map(|n| (n.to_string(), format!(r#"{{"n":{n}}}"#))).collect::<Vec<_>>();
    produce(&producer, "ev", None, &batch(0, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = |name: &str, startup: &str, group: &str| {
        let text = head(&broker, &doris, name)
            + &format!(
                "[[source]]\ntype = \"kafka\"\nconnection = \"events\"\ntopics = [\"ev\"]\ngroup_id = \"{group}\"\n{startup}\n\
                 format = \"json\"\nschema = \"n INT\"\n\n[[sink]]\ntype = \"doris\"\ntable = \"db.{name}\"\n"
            );
        pipeline_file(&dir.path().join(name), &text)
    };
    let count = |t: &str| doris.sql(&format!("SELECT COUNT(*), MIN(n), MAX(n) FROM db.{t}"))[0].clone();

    let run = Background::start(&pipeline("early", "scan.startup.mode = \"earliest-offset\"", "g1"));
    until_rows(&doris, "SELECT COUNT(*) FROM db.early", &["10"], &run).await;
    // The group hears the offsets after the checkpoint that holds them is committed.
    let group: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", broker.servers()).set("group.id", "g1").create().unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition("ev", 0);
    list.add_partition("ev", 1);
    let mut committed = 0;
    for _ in 0..100 {
        let got = group.committed_offsets(list.clone(), Duration::from_secs(10)).unwrap();
        committed = got
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                rdkafka::Offset::Offset(o) => Some(o),
                _ => None,
            })
            .sum::<i64>();
        if committed == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(committed, 10, "the group's committed offsets");
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");

    produce(&producer, "ev", None, &batch(10, 15)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    produce(&producer, "ev", None, &batch(15, 20)).await;

    let run = Background::start(&pipeline("group", "scan.startup.mode = \"group-offsets\"", "g1"));
    until_rows(&doris, "SELECT COUNT(*) FROM db.group", &["10"], &run).await;
    assert_eq!(count("group"), "10\t10\t19");
    run.stop().await;

    let stamp = format!("scan.startup.mode = \"timestamp\"\nscan.startup.timestamp_millis = {since}");
    let run = Background::start(&pipeline("stamp", &stamp, "g3"));
    until_rows(&doris, "SELECT COUNT(*) FROM db.stamp", &["5"], &run).await;
    assert_eq!(count("stamp"), "5\t15\t19");
    run.stop().await;

    let mut run = Background::start(&pipeline("late", "scan.startup.mode = \"latest-offset\"", "g4"));
    // Started (its first checkpoint taken) before the next messages.
    let state = dir.path().join("late/.sluice/late/checkpoint.json");
    run.until(60, "a first checkpoint", |_| state.exists()).await;
    produce(&producer, "ev", None, &batch(20, 23)).await;
    until_rows(&doris, "SELECT COUNT(*), MIN(n), MAX(n) FROM db.late", &["3\t20\t22"], &run).await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// How far behind each partition's end a Kafka source reads: the messages after the next one
/// read (the high watermark is asked every 5 s), in what `/metrics` and `sluice serve`'s API show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_behind_each_partition_is_shown() {
    let broker = tokio::task::spawn_blocking(Broker::start).await.unwrap();
    broker.create_topic("lagging", 1);
    let messages: Vec<(String, String)> = (0..10).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    produce(&broker.producer(), "lagging", Some(0), &messages).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"lag\"\n\n[connections.events]\ntype = \"kafka\"\nbootstrap_servers = [\"{}\"]\n\n\
         [[source]]\nname = \"events\"\ntype = \"kafka\"\nconnection = \"events\"\ntopics = [\"lagging\"]\n\
         scan.startup.mode = \"earliest-offset\"\n\n[[sink]]\ntype = \"blackhole\"\n",
        broker.servers()
    );
    let crate::common::FirstReader { prepared, splits: _splits, mut reader } =
        crate::common::first_reader(dir.path(), &text).await;
    let lag = || {
        let sources = prepared.stats.sources();
        sources.iter().find(|s| s["source"] == "events").map(|s| s["partitions"]["lagging:0"].clone())
    };
    let mut seen = None;
    for _ in 0..150 {
        seen = lag();
        if seen == Some(serde_json::json!(10)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, Some(serde_json::json!(10)), "nothing read yet: all 10 behind");
    crate::common::read_rows_of(&mut reader, 10).await;
    assert_eq!(lag(), Some(serde_json::json!(0)));
    let metrics = sluice::metrics::metrics_text(&prepared.stats, "lag");
    assert!(
        metrics.contains("sluice_source_lag_messages{pipeline=\"lag\",source=\"events\",partition=\"lagging:0\"} 0\n"),
        "{metrics}"
    );
}
