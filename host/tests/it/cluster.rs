//! One pipeline on several `sluice` processes: etcd (three members, Debian's) elects the leader
//! and fences a deposed one, checkpoints live in an S3 server (moto's). The leader is killed
//! (`kill -9`) or paused past its lease (`SIGSTOP`: a real zombie, woken with `SIGCONT`), an etcd
//! member dies — and every row lands exactly once, with no transaction left open.

use std::time::{Duration, Instant};

use sluice_cluster::testing::{Etcd, S3};

use crate::common::{Background, Doris, pipeline_file};

const TABLE: &str = "CREATE TABLE test.cluster_rows (id BIGINT, name VARCHAR(64), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 4";
const ROWS: u64 = 40_000;
// Long enough that a loaded machine does not miss a renewal.
const LEASE_TTL: Duration = Duration::from_secs(4);

fn pipeline(doris: &Doris, etcd: &Etcd, s3: &S3) -> String {
    format!(
        r#"
[pipeline]
name = "clustered"
parallelism = 2
checkpoint_interval = "500ms"

[doris]
fenodes = {fenodes}
request_read_timeout = "5s"

[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64), age INT"
rows_per_second = 8000
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
        let doris = Doris::start().await;
        doris.sql(TABLE);
        let etcd = Etcd::start(3);
        let s3 = S3::start(bucket);
        let dir = tempfile::tempdir().unwrap();
        let path = pipeline_file(dir.path(), &pipeline(&doris, &etcd, &s3));
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
