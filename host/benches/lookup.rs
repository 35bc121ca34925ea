//! Lookup joins against a 1 M-row dimension table, for a stream whose keys are drawn from a set of
//! distinct ones, in three ways over the same stream rows:
//!
//! - (a) one query per row, no cache: what the Flink connector's `lookup.jdbc.async = false`
//!   without cache costs;
//! - (b) Sluice batched (`WHERE k IN (…)`, 128 keys per query, 3 in flight), no cache;
//! - (c) (b) with the cache (`cache.max_rows = 200000`).
//!
//! Each against doris-lite (in this process; it answers key lookups from its key index) and
//! against the machine's MariaDB with the same table under a primary key: a real server whose
//! cost is the round trip, the honest baseline for what batching saves. Each case first joins
//! `LOOKUP_BENCH_WARM` rows untimed (connections open, the server's data warm).
//!
//! Run with `cargo bench -p sluice --bench lookup`. Every figure comes from the same run and the
//! same data. `LOOKUP_BENCH_ROWS` (default 100 000) and `LOOKUP_BENCH_KEYS` (20 000) set the
//! stream and its distinct keys; `LOOKUP_BENCH_MARIADB` the MariaDB (`host:port`, user root, no
//! password; default 127.0.0.1:3306, `none` to skip), where the bench creates and drops the
//! database `sluice_lookup_bench`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array};
use arrow::record_batch::RecordBatch;
use sluice::Batch;
use sluice::pipeline::DorisSection;
use sluice::transforms::lookup::{LookupJoin, LookupTable, LookupTransform};

const DIM_ROWS: u64 = 1_000_000;
/// Rows per stream batch (the datagen source's size).
const BATCH: usize = 4096;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Load `dim.big (k BIGINT, v VARCHAR, n INT)` with k = 0, 10, 20, … through Stream Load.
async fn load_dimension(doris: &doris_lite::Handle) {
    let body: String = (0..DIM_ROWS).map(|i| format!("{}\tvalue-{i}\t{}\n", i * 10, i % 97)).collect();
    let url = format!("http://{}/api/dim/big/_stream_load", doris.be_http_addr());
    sluice::doris::tls::install_provider();
    let resp = reqwest::Client::new()
        .put(url)
        .basic_auth("root", Some(""))
        .header("Expect", "100-continue")
        .body(body)
        .send()
        .await
        .expect("stream load is answered");
    let text = resp.text().await.expect("stream load reply");
    assert!(text.contains("\"Status\": \"Success\""), "{text}");
}

/// `rows` stream rows `(id, k)`, each k one of `keys` dimension keys, in batches of [`BATCH`].
fn stream(rows: usize, keys: u64) -> Vec<Batch> {
    let mut rng = fastrand::Rng::with_seed(7);
    let stride = DIM_ROWS / keys * 10;
    let all: Vec<i64> = (0..rows).map(|_| (rng.u64(0..keys) * stride) as i64).collect();
    all.chunks(BATCH)
        .enumerate()
        .map(|(b, chunk)| {
            let ids = Int64Array::from_iter_values((0..chunk.len()).map(|i| (b * BATCH + i) as i64));
            let columns: Vec<ArrayRef> = vec![Arc::new(ids), Arc::new(Int64Array::from(chunk.to_vec()))];
            Batch::new(RecordBatch::try_from_iter(["id", "k"].into_iter().zip(columns)).expect("batch builds"))
        })
        .collect()
}

/// Join the first `rows` rows of `batches` (re-cut to `per_call` rows per call) after `warm` rows
/// untimed; returns lookups/s and the number of timed queries.
async fn measure(
    doris: &DorisSection,
    options: &str,
    batches: &[Batch],
    (warm, rows): (usize, usize),
    per_call: usize,
) -> (f64, u64) {
    let cfg: LookupTransform = toml::from_str(options).expect("options parse");
    let table = LookupTable::connect(&cfg, doris, "", 3).await.expect("the dimension table is there");
    let join = LookupJoin::new(table.clone(), &batches[0].schema()).expect("the join plans");
    let queries = || table.metrics.queries.load(std::sync::atomic::Ordering::Relaxed);
    let mut timed = (Instant::now(), queries());
    let mut done = 0;
    'outer: for b in batches {
        let mut offset = 0;
        while offset < b.num_rows() {
            if done == warm {
                timed = (Instant::now(), queries());
            }
            let limit = if done < warm { warm } else { warm + rows };
            let n = per_call.min(b.num_rows() - offset).min(limit - done);
            let part = Batch::new(b.data.slice(offset, n));
            let out = join.process(&part).await.expect("the lookup succeeds");
            assert_eq!(out.data.column(2).null_count(), 0, "every key has its row");
            offset += n;
            done += n;
            if done == warm + rows {
                break 'outer;
            }
        }
    }
    let rate = rows as f64 / timed.0.elapsed().as_secs_f64();
    let count = queries() - timed.1;
    table.close().await;
    (rate, count)
}

/// The three cases against the server `section` points at; prints each and returns (a, b, c).
async fn cases(server: &str, section: &DorisSection, table: &str, batches: &[Batch], span: (usize, usize)) -> [f64; 3] {
    let base = format!("table = '{table}'\nkeys = ['k']\ncolumns = ['v', 'n']\n");
    let rows = span.1;
    let (a, a_queries) = measure(section, &format!("{base}jdbc.async = false"), batches, span, 1).await;
    println!("{server} (a) one query per row, no cache: {a:>10.0} lookups/s  ({rows} rows, {a_queries} queries)");
    let (b, b_queries) = measure(section, &base, batches, span, BATCH).await;
    println!("{server} (b) batched, no cache:           {b:>10.0} lookups/s  ({rows} rows, {b_queries} queries)");
    let cached = format!("{base}cache.max_rows = 200000\ncache.ttl = '1h'");
    let (c, c_queries) = measure(section, &cached, batches, span, BATCH).await;
    println!("{server} (c) batched, cache:              {c:>10.0} lookups/s  ({rows} rows, {c_queries} queries)");
    println!("{server}: b/a = {:.1}x (target >= 10x), c/a = {:.1}x (target >= 50x)", b / a, c / a);
    [a, b, c]
}

/// Run `sql` (sent on stdin) with the mysql CLI against `host:port` as root (no password).
fn mysql_cli(addr: &str, sql: &str) {
    use std::io::Write;
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let mut child = std::process::Command::new("mysql")
        .args(["-h", host, "-P", port, "-uroot"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the mysql CLI is installed");
    child.stdin.take().expect("piped").write_all(sql.as_bytes()).expect("the mysql CLI reads its input");
    let out = child.wait_with_output().expect("the mysql CLI ends");
    assert!(out.status.success(), "{}: {}", &sql[..sql.len().min(200)], String::from_utf8_lossy(&out.stderr));
}

/// The dimension table in MariaDB at `addr` (`sluice_lookup_bench.big`, `k` the primary key).
fn load_mariadb(addr: &str) {
    mysql_cli(addr, "DROP DATABASE IF EXISTS sluice_lookup_bench; CREATE DATABASE sluice_lookup_bench");
    mysql_cli(addr, "CREATE TABLE sluice_lookup_bench.big (k BIGINT PRIMARY KEY, v VARCHAR(32), n INT)");
    for part in 0..DIM_ROWS / 50_000 {
        let values: Vec<String> =
            (part * 50_000..(part + 1) * 50_000).map(|i| format!("({},'value-{i}',{})", i * 10, i % 97)).collect();
        mysql_cli(addr, &format!("INSERT INTO sluice_lookup_bench.big VALUES {}", values.join(",")));
    }
}

fn main() {
    let rows = env_or("LOOKUP_BENCH_ROWS", 100_000);
    let keys = env_or("LOOKUP_BENCH_KEYS", 20_000) as u64;
    let warm = env_or("LOOKUP_BENCH_WARM", 2_000);
    let mariadb = std::env::var("LOOKUP_BENCH_MARIADB").unwrap_or_else(|_| "127.0.0.1:3306".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let doris = doris_lite::DorisLite::start(doris_lite::Config::ephemeral()).await.expect("doris-lite starts");
        let addr = format!("127.0.0.1:{}", doris.query_addr().port());
        mysql_cli(&addr, "CREATE DATABASE dim");
        mysql_cli(
            &addr,
            "CREATE TABLE dim.big (k BIGINT, v VARCHAR(32), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 8",
        );
        let started = Instant::now();
        load_dimension(&doris).await;
        println!("dimension: {DIM_ROWS} rows loaded in {:.1}s", started.elapsed().as_secs_f64());
        let section = |fe: &str, jdbc: &str| -> DorisSection {
            toml::from_str(&format!("fenodes = [\"{fe}\"]\njdbc_url = \"jdbc:mysql://{jdbc}\""))
                .expect("section parses")
        };
        let batches = stream(warm + rows, keys);
        println!("stream: {rows} rows (after {warm} untimed) over {keys} distinct keys, batches of {BATCH}");
        let fe = doris.fe_http_addr().to_string();
        let d = cases("doris-lite", &section(&fe, &addr), "dim.big", &batches, (warm, rows)).await;
        tokio::time::timeout(Duration::from_secs(10), doris.stop()).await.ok();
        if mariadb == "none" {
            return;
        }
        load_mariadb(&mariadb);
        println!("MariaDB at {mariadb}: the same {DIM_ROWS} rows, k the primary key");
        let m = cases("MariaDB", &section(&fe, &mariadb), "sluice_lookup_bench.big", &batches, (warm, rows)).await;
        println!("doris-lite / MariaDB: (a) {:.2}, (b) {:.2}, (c) {:.2}", d[0] / m[0], d[1] / m[1], d[2] / m[2]);
        mysql_cli(&mariadb, "DROP DATABASE sluice_lookup_bench");
    });
}
