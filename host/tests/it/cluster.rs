//! One pipeline on several `sluice` processes: etcd (three members, Debian's) elects the leader
//! and fences a deposed one, checkpoints live in an S3 server (moto's). The leader is killed
//! (`kill -9`) or paused past its lease (`SIGSTOP`: a real zombie, woken with `SIGCONT`), an etcd
//! member dies; a worker that does not lead is killed while three units are spread over five
//! processes — and every row lands exactly once, with no transaction left open, every committed
//! transaction listed in exactly one manifest.

use std::time::{Duration, Instant};

use sluice_cluster::testing::{Etcd, S3};

use crate::common::{Background, Doris, pipeline_file};

const TABLE: &str = "CREATE TABLE test.cluster_rows (id BIGINT, name VARCHAR(64), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4";
const ROWS: u64 = 40_000;
// Long enough that a loaded machine does not miss a renewal.
const LEASE_TTL: Duration = Duration::from_secs(4);

fn pipeline(doris: &Doris, etcd: &Etcd, s3: &S3, parallelism: usize, rate: u64) -> String {
    format!(
        r#"
[pipeline]
name = "clustered"
parallelism = {parallelism}
checkpoint_interval = "500ms"

[doris]
fenodes = {fenodes}
request_read_timeout = "5s"

[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64), age INT"
rows_per_second = {rate}
number_of_rows = {ROWS}
fields.id = {{ kind = "sequence", start = 1 }}

[[sink]]
type = "doris"
table = "test.cluster_rows"

{cluster}"#,
        fenodes = doris.fenodes(),
        cluster = cluster_section(etcd, s3),
    )
}

/// The `[cluster]` of the tests' pipelines.
fn cluster_section(etcd: &Etcd, s3: &S3) -> String {
    format!(
        "[cluster]\netcd = \"{}\"\nstore = \"{}\"\nlease_ttl = \"{}s\"\n",
        etcd.url(),
        s3.store_url("pipelines"),
        LEASE_TTL.as_secs()
    )
}

fn committed(doris: &Doris) -> u64 {
    doris.sql("SELECT count(*) FROM test.cluster_rows")[0].parse().unwrap()
}

/// Every row once, nothing left open.
fn exactly_once(doris: &Doris) {
    let tally = doris.sql("SELECT count(*), count(distinct id), min(id), max(id) FROM test.cluster_rows").join("");
    assert_eq!(tally, format!("{ROWS}\t{ROWS}\t1\t{ROWS}"));
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// Every label in `value` (a manifest's committables), wherever it sits.
fn labels(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::String(l)) = m.get("label") {
                out.push(l.clone());
            }
            m.values().for_each(|v| labels(v, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| labels(v, out)),
        _ => {}
    }
}

struct Cluster {
    doris: Doris,
    etcd: Etcd,
    s3: S3,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    env: Vec<(String, String)>,
}

impl Cluster {
    async fn start(bucket: &str) -> Cluster {
        Cluster::start_with(bucket, 2, 8000).await
    }

    /// A pipeline of `parallelism` units reading `rate` rows a second.
    async fn start_with(bucket: &str, parallelism: usize, rate: u64) -> Cluster {
        Cluster::start_pipeline(bucket, |doris, etcd, s3| pipeline(doris, etcd, s3, parallelism, rate)).await
    }

    /// The pipeline `text` gives for these servers.
    async fn start_pipeline(bucket: &str, text: impl Fn(&Doris, &Etcd, &S3) -> String) -> Cluster {
        Cluster::start_on(S3::start(bucket), text).await
    }

    /// The pipeline `text` gives for these servers, with `s3` as the object store.
    async fn start_on(s3: S3, text: impl Fn(&Doris, &Etcd, &S3) -> String) -> Cluster {
        let doris = Doris::start().await;
        doris.sql(TABLE);
        let etcd = Etcd::start(3);
        let dir = tempfile::tempdir().unwrap();
        let path = pipeline_file(dir.path(), &text(&doris, &etcd, &s3));
        let env = s3.env();
        Cluster { doris, etcd, s3, _dir: dir, path, env }
    }

    /// Every transaction committed in Doris is listed in exactly one manifest in the store.
    async fn each_commit_in_one_manifest(&self) {
        sluice::doris::tls::install_provider();
        let store = self.s3.store("pipelines");
        let (mut listed, mut misses, mut n) = (Vec::new(), 0, 0u64);
        // Checkpoint numbers may skip (a deposed leader's); stop after a long run without one.
        while misses < 50 {
            n += 1;
            match store.manifest(n).await.unwrap() {
                Some(m) => {
                    misses = 0;
                    labels(&m.committables, &mut listed);
                }
                None => misses += 1,
            }
        }
        // Only the latest checkpoint's state is kept (and perhaps that of one never completed).
        let kept = store.state_checkpoints().await.unwrap();
        assert!((1..=2).contains(&kept.len()), "state kept of checkpoints {kept:?}");
        let visible = self.doris.visible_labels();
        assert!(!visible.is_empty());
        for label in &visible {
            let times = listed.iter().filter(|l| *l == label).count();
            assert_eq!(times, 1, "committed label {label} is listed in {times} manifests");
        }
    }

    fn member(&self, name: &str) -> Background {
        Background::start_with(&self.path, &["--member", name], &self.env)
    }

    /// Wait until something is committed, not everything.
    async fn some_committed(&self, leader: &mut Background) {
        let doris = &self.doris;
        leader.until(60, "a first commit", |_| committed(doris) > 0).await;
        assert!(committed(doris) < ROWS, "the run finished before the fault");
    }
}

fn leads(name: &str) -> impl Fn(&Background) -> bool {
    let line = format!("member `{name}` leads pipeline `clustered`");
    move |b: &Background| b.log().contains(&line)
}

/// Whether `log` (of member `name`) says it runs unit `unit` (alone or among others) in a plan.
fn runs(log: &str, name: &str, unit: usize) -> bool {
    let start = format!("member `{name}` runs units [");
    log.lines().filter_map(|l| l.split(&start).nth(1)).any(|rest| {
        let list = rest.split(']').next().unwrap_or("");
        list.split(", ").any(|u| u == unit.to_string())
    })
}

/// The lines of `b`'s log after its first `from`.
fn log_after(b: &Background, from: usize) -> String {
    b.log().lines().skip(from).collect::<Vec<_>>().join("\n")
}

fn stands_by(b: &Background) -> bool {
    b.log().contains("standing by to lead")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_a_standby_takes_over_and_every_row_lands_once() {
    let mut cluster = Cluster::start("sluice-kill-leader").await;
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = cluster.member("b");
    b.until(60, "b stands by", stands_by).await;
    // One etcd member of three lost for the rest of the run changes nothing.
    cluster.etcd.kill(0);
    cluster.some_committed(&mut a).await;
    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..1000))).await;
    a.kill_9();
    // How soon is the failover benchmark's to say; the deadline only catches a standby that
    // never takes over.
    b.until(120, "b leads after a is killed", leads("b")).await;
    let (code, log) = b.exit(120).await;
    assert_eq!(code, Some(0), "{log}");
    exactly_once(&cluster.doris);
    cluster.each_commit_in_one_manifest().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_is_fenced_when_it_wakes_and_commits_nothing() {
    let cluster = Cluster::start("sluice-zombie").await;
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = cluster.member("b");
    b.until(60, "b stands by", stands_by).await;
    cluster.some_committed(&mut a).await;
    a.signal("STOP");
    b.until(120, "b leads while a is paused", leads("b")).await;
    let doris = &cluster.doris;
    let before = committed(doris);
    b.until(60, "b commits", |_| committed(doris) > before).await;
    // a wakes believing it leads: it learns it does not, and stops without deciding anything.
    a.signal("CONT");
    let (code, a_log) = a.exit(30).await;
    assert_ne!(code, Some(0), "{a_log}");
    assert!(a_log.contains("lost its cluster lease") || a_log.contains("fenced: this process led epoch"), "{a_log}");
    let (code, b_log) = b.exit(120).await;
    assert_eq!(code, Some(0), "{b_log}");
    exactly_once(doris);
    cluster.each_commit_in_one_manifest().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_three_units_and_a_worker_killed_loses_nothing() {
    // Slower than the others: five processes start, and the units restart when they spread.
    let cluster = Cluster::start_with("sluice-kill-worker", 3, 1500).await;
    let names = ["a", "b", "c", "d", "e"];
    let mut members: Vec<Background> = Vec::new();
    members.push(cluster.member("a"));
    members[0].until(60, "a leads", leads("a")).await;
    for name in &names[1..] {
        members.push(cluster.member(name));
    }
    for (m, name) in members.iter_mut().zip(names).skip(1) {
        m.until(60, &format!("{name} stands by"), stands_by).await;
    }
    // Once all are members, the next checkpoint boundary spreads the units: three members run
    // one each (a keeps one), two stand by with none.
    let doris = &cluster.doris;
    let workers = |members: &[Background]| -> Vec<usize> {
        (1..names.len()).filter(|&i| (0..3).any(|u| runs(&members[i].log(), names[i], u))).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while workers(&members).len() < 2 {
        let logs: Vec<String> = members.iter().map(Background::log).collect();
        assert!(Instant::now() < deadline, "the units were not spread:\n{}", logs.join("\n---\n"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(workers(&members).len(), 2, "more than three members run units");
    let before = committed(doris);
    members[0].until(60, "a commit after the units spread", |_| committed(doris) > before).await;
    assert!(committed(doris) < ROWS, "the run finished before the fault");
    // A worker (not the leader) dies: its unit moves, every unit resumes from the last checkpoint.
    let victim = workers(&members)[0];
    let name = names[victim];
    let units: Vec<usize> = (0..3).filter(|&u| runs(&members[victim].log(), name, u)).collect();
    let seen: Vec<usize> = members.iter().map(|m| m.log().lines().count()).collect();
    members.remove(victim).kill_9();
    let survivors: Vec<(&str, usize)> =
        names.iter().zip(seen).enumerate().filter(|(i, _)| *i != victim).map(|(_, (n, s))| (*n, s)).collect();
    let moved = |members: &[Background]| {
        members.iter().zip(&survivors).any(|(m, (n, s))| units.iter().any(|&u| runs(&log_after(m, *s), n, u)))
    };
    // The deadline only catches units that never move.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !moved(&members) {
        assert!(Instant::now() < deadline, "{name}'s units {units:?} never moved:\n{}", members[0].log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (m, (n, _)) in members.into_iter().zip(&survivors) {
        let (code, log) = m.exit(120).await;
        assert_eq!(code, Some(0), "{n}: {log}");
    }
    exactly_once(doris);
    cluster.each_commit_in_one_manifest().await;
}

/// A MySQL database followed by two processes: the snapshot split between them, the binlog read
/// by unit w0 (with the leader), a DDL aligned to a checkpoint across processes, and then the
/// leader killed with changes made while it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_database_followed_by_two_processes_survives_its_binlog_reader_killed() {
    let maria = tokio::task::spawn_blocking(crate::mysql::MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE shop; \
         CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(20), qty INT); \
         CREATE TABLE shop.users (id INT PRIMARY KEY, name VARCHAR(20)); \
         INSERT INTO shop.orders VALUES (1,'pen',1),(2,'ink',2),(3,'pad',3),(4,'cap',4),(5,'nib',5),(6,'box',6); \
         INSERT INTO shop.users VALUES (1,'ann'),(2,'bob'),(3,'cid')",
    );
    let port = maria.port;
    let cluster = Cluster::start_pipeline("sluice-mysql", |doris, etcd, s3| {
        format!(
            r#"
[pipeline]
name = "clustered"
parallelism = 2
checkpoint_interval = "500ms"

[connections.shop]
type = "mysql"
host = "127.0.0.1"
port = {port}
server_id = 7101

[doris]
fenodes = {fenodes}

[[source]]
type = "mysql"
connection = "shop"
database = "shop"
scan.startup.mode = "initial"
chunk_size = 2

[[sink]]
type = "doris"
database = "ods"

{cluster}"#,
            fenodes = doris.fenodes(),
            cluster = cluster_section(etcd, s3),
        )
    })
    .await;
    let doris = &cluster.doris;
    doris.sql("CREATE DATABASE ods");
    let orders = "SELECT id, item, qty FROM shop.orders ORDER BY id";
    let users = "SELECT id, name FROM shop.users ORDER BY id";
    let converged = |source: &'static str, target: &'static str| {
        let maria = &maria;
        async move {
            crate::common::converges(|| maria.sql(source), doris, target, 60).await.unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = cluster.member("b");
    b.until(60, "b runs unit 1", |b| runs(&b.log(), "b", 1)).await;
    converged(orders, "SELECT id, item, qty FROM ods.orders ORDER BY id").await;
    converged(users, "SELECT id, name FROM ods.users ORDER BY id").await;

    // Changes and a DDL while the binlog is read in a (unit w0): the DDL waits for a checkpoint
    // of both processes' units, then applies.
    maria.sql(
        "INSERT INTO shop.orders VALUES (7,'cup',7); UPDATE shop.orders SET qty = 10 WHERE id = 1; \
         DELETE FROM shop.users WHERE id = 2; \
         ALTER TABLE shop.orders ADD COLUMN note VARCHAR(20); INSERT INTO shop.orders VALUES (8,'mug',8,'gift')",
    );
    let orders = "SELECT id, item, qty, note FROM shop.orders ORDER BY id";
    converged(orders, "SELECT id, item, qty, note FROM ods.orders ORDER BY id").await;
    converged(users, "SELECT id, name FROM ods.users ORDER BY id").await;

    // The leader and binlog reader killed; changes made while it is gone arrive through b.
    a.kill_9();
    maria.sql("INSERT INTO shop.orders VALUES (9,'jar',9,'x'); UPDATE shop.users SET name = 'cyd' WHERE id = 3");
    b.until(120, "b leads after a is killed", leads("b")).await;
    converged(orders, "SELECT id, item, qty, note FROM ods.orders ORDER BY id").await;
    converged(users, "SELECT id, name FROM ods.users ORDER BY id").await;
    let (code, log) = b.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    cluster.each_commit_in_one_manifest().await;
}

/// A process of capacity 3 beside one of capacity 1 runs three of the four units; then a
/// checkpoint held up past `checkpoint_timeout` (a load Doris answers late) fails, and every
/// unit resumes from the last published checkpoint, in the same places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_follow_capacity_and_a_checkpoint_past_its_timeout_resumes_from_the_last_one() {
    let cluster = Cluster::start_pipeline("sluice-capacity", |doris, etcd, s3| {
        pipeline(doris, etcd, s3, 4, 3000)
            .replace("checkpoint_interval = \"500ms\"", "checkpoint_interval = \"500ms\"\ncheckpoint_timeout = \"2s\"")
    })
    .await;
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = Background::start_with(&cluster.path, &["--member", "b", "--capacity", "3"], &cluster.env);
    // At the first checkpoint boundary after b joins: a keeps unit 0, b takes the other three.
    b.until(60, "b runs three units", |b| b.log().contains("member `b` runs units [1, 2, 3] of plan")).await;
    let doris = &cluster.doris;
    let before = committed(doris);
    a.until(60, "a commit after the units spread", |_| committed(doris) > before).await;
    assert!(committed(doris) < ROWS, "the run finished before the fault");
    // The next load Doris answers 4 s late (the read timeout is 5 s); the checkpoint has 2 s.
    let stall = doris_lite::DebugPoint::times(1).param("ms", 4000);
    doris.h().debug_points().add(doris_lite::faults::STREAM_LOAD_STALL, stall).unwrap();
    a.until(30, "a checkpoint times out", |a| {
        a.log().contains("did not acknowledge it within `checkpoint_timeout` (2s)")
    })
    .await;
    let line = a.log().lines().find(|l| l.contains("timed out")).unwrap_or_default().to_string();
    assert!(line.contains("(member `a`)") || line.contains("(member `b`)"), "{line}");
    let (code, a_log) = a.exit(120).await;
    assert_eq!(code, Some(0), "{a_log}");
    let (code, b_log) = b.exit(120).await;
    assert_eq!(code, Some(0), "{b_log}");
    // The plans after the timeout keep the units where they were.
    let plans: Vec<&str> = a_log.lines().filter(|l| l.contains("plan ") && l.contains("w1→")).collect();
    assert!(plans.len() >= 2, "{a_log}");
    assert!(plans.iter().skip(1).all(|l| l.contains("w0→a w1→b w2→b w3→b")), "{plans:?}");
    exactly_once(doris);
    cluster.each_commit_in_one_manifest().await;
}

/// The object store dies (moto, `kill -9`) while the leader writes a manifest: that checkpoint
/// never reaches its commit point, so nothing of it is committed; the leader restarts from the
/// last published checkpoint once the store is back (moto started again with what it held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_object_store_killed_during_a_manifest_write_commits_nothing_of_that_checkpoint() {
    let mut cluster = Cluster::start_on(S3::start_relayed("sluice-store-killed"), |doris, etcd, s3| {
        // Room for the store's absence: restarts in a row (0.5 s, 1 s, 2 s, 4 s …).
        pipeline(doris, etcd, s3, 2, 4000)
            .replace("table = \"test.cluster_rows\"", "table = \"test.cluster_rows\"\nmax_retries = 10")
    })
    .await;
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = cluster.member("b");
    b.until(60, "b runs unit 1", |b| runs(&b.log(), "b", 1)).await;
    cluster.some_committed(&mut a).await;
    let trapped = cluster.s3.trap(&format!("PUT /{}/pipelines/manifests/", cluster.s3.bucket));
    let line = tokio::task::spawn_blocking(move || (trapped.caught(Duration::from_secs(60)), trapped)).await.unwrap();
    let (Some(line), trapped) = line else { panic!("no manifest written within 60 s:\n{}", a.log()) };
    // PUT /bucket/pipelines/manifests/<N, zero-padded>.json HTTP/1.1
    let n: u64 = line.split("/manifests/").nth(1).and_then(|r| r.split('.').next()).unwrap().parse().unwrap();
    cluster.s3.kill();
    trapped.release();
    let committed_at_kill = committed(&cluster.doris);
    a.until(30, "a's checkpoint fails on the store", |a| {
        a.log().lines().any(|l| l.contains("restarting from the last checkpoint") && l.contains("object store"))
    })
    .await;
    // Nothing was committed while the store was gone: checkpoint N had not reached its commit point.
    assert_eq!(committed(&cluster.doris), committed_at_kill);
    cluster.s3.restart();
    let (code, a_log) = a.exit(120).await;
    assert_eq!(code, Some(0), "{a_log}");
    let (code, b_log) = b.exit(120).await;
    assert_eq!(code, Some(0), "{b_log}");
    exactly_once(&cluster.doris);
    // Manifest N was never written, later checkpoints were (numbers are never handed out twice).
    sluice::doris::tls::install_provider();
    let store = cluster.s3.store("pipelines");
    assert!(store.manifest(n).await.unwrap().is_none(), "manifest {n} was written after all");
    assert!(store.manifest(n + 1).await.unwrap().is_some() || store.manifest(n + 2).await.unwrap().is_some());
    // Every committed transaction is in exactly one manifest: none of checkpoint N's was committed.
    cluster.each_commit_in_one_manifest().await;
}
