//! One pipeline on several `sluice` processes: etcd (three members, Debian's) elects the leader
//! and fences a deposed one, checkpoints live in an S3 server (moto's). The leader is killed
//! (`kill -9`) or paused past its lease (`SIGSTOP`: a real zombie, woken with `SIGCONT`), an etcd
//! member dies; a worker that does not lead is killed while the units are spread over three
//! processes — and every row lands exactly once, with no transaction left open.

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

[cluster]
etcd = "{etcd}"
store = "{store}"
lease_ttl = "{ttl}s"
"#,
        fenodes = doris.fenodes(),
        etcd = etcd.url(),
        store = s3.store_url("pipelines"),
        ttl = LEASE_TTL.as_secs(),
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

struct Cluster {
    doris: Doris,
    etcd: Etcd,
    _s3: S3,
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
        let doris = Doris::start().await;
        doris.sql(TABLE);
        let etcd = Etcd::start(3);
        let s3 = S3::start(bucket);
        let dir = tempfile::tempdir().unwrap();
        let path = pipeline_file(dir.path(), &pipeline(&doris, &etcd, &s3, parallelism, rate));
        let env = s3.env();
        Cluster { doris, etcd, _s3: s3, _dir: dir, path, env }
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

/// Whether `name`'s log says it runs unit `unit` (alone or among others) in some plan.
fn runs(name: &str, unit: usize) -> impl Fn(&Background) -> bool {
    let start = format!("member `{name}` runs units [");
    move |b: &Background| {
        b.log().lines().filter_map(|l| l.split(&start).nth(1)).any(|rest| {
            let list = rest.split(']').next().unwrap_or("");
            list.split(", ").any(|u| u == unit.to_string())
        })
    }
}

fn stands_by(b: &Background) -> bool {
    b.log().contains("standing by to lead")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_a_standby_takes_over_within_the_lease_and_every_row_lands_once() {
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
    let killed = Instant::now();
    b.until(LEASE_TTL.as_secs() + 10, "b leads after a is killed", leads("b")).await;
    let took = killed.elapsed();
    assert!(took < LEASE_TTL + Duration::from_secs(10), "b led {took:?} after the kill");
    let (code, log) = b.exit(120).await;
    assert_eq!(code, Some(0), "{log}");
    exactly_once(&cluster.doris);
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
    b.until(LEASE_TTL.as_secs() + 10, "b leads while a is paused", leads("b")).await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_the_units_and_a_worker_killed_loses_nothing() {
    // Slower than the others: three processes start, and the units restart when they spread.
    let cluster = Cluster::start_with("sluice-kill-worker", 3, 3000).await;
    let mut a = cluster.member("a");
    a.until(60, "a leads", leads("a")).await;
    let mut b = cluster.member("b");
    let mut c = cluster.member("c");
    b.until(60, "b stands by", stands_by).await;
    c.until(60, "c stands by", stands_by).await;
    // Once all three are members, the next checkpoint boundary spreads the units: one each.
    let doris = &cluster.doris;
    let spread = |b: &Background, c: &Background| (0..3).any(|u| runs("b", u)(b)) && (0..3).any(|u| runs("c", u)(c));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !spread(&b, &c) {
        assert!(Instant::now() < deadline, "the units were not spread over b and c:\n{}\n{}", b.log(), c.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = committed(doris);
    b.until(60, "a commit after the units spread", |_| committed(doris) > before).await;
    assert!(committed(doris) < ROWS, "the run finished before the fault");
    // A worker (not the leader) dies: its unit moves, every unit resumes from the last checkpoint.
    let c_units: Vec<usize> = (0..3).filter(|u| runs("c", *u)(&c)).collect();
    c.kill_9();
    let killed = Instant::now();
    let moved = |log: &Background| c_units.iter().any(|u| runs("a", *u)(log));
    let moved_b = |log: &Background| c_units.iter().any(|u| runs("b", *u)(log));
    let deadline = Instant::now() + LEASE_TTL + Duration::from_secs(10);
    while !(moved(&a) || moved_b(&b)) {
        assert!(Instant::now() < deadline, "c's units {c_units:?} did not move within the lease + 10 s:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = killed.elapsed();
    assert!(took < LEASE_TTL + Duration::from_secs(10), "c's units moved {took:?} after the kill");
    let (code, a_log) = a.exit(120).await;
    assert_eq!(code, Some(0), "{a_log}");
    let (code, b_log) = b.exit(30).await;
    assert_eq!(code, Some(0), "{b_log}");
    exactly_once(doris);
}
