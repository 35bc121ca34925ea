//! Lookup joins against a 1 M-row dimension table in doris-lite (in this process), for a stream
//! whose keys are drawn from 100 k distinct ones:
//!
//! - (a) one query per row, no cache: what the Flink connector's `lookup.jdbc.async = false`
//!   without cache costs;
//! - (b) Sluice batched (`WHERE k IN (…)`, 128 keys per query, 3 in flight), no cache;
//! - (c) (b) with the cache (`cache.max_rows = 200000`).
//!
//! Run with `cargo bench -p sluice --bench lookup`. Every figure comes from the same run and the
//! same data. One query per row runs at a few hundred rows a second, so (a) reads only the first
//! `LOOKUP_BENCH_A_ROWS` (default 10 000) rows of the stream; (b) and (c) read all of it.
//! `LOOKUP_BENCH_ROWS` and `LOOKUP_BENCH_KEYS` scale the stream and its distinct keys,
//! `LOOKUP_BENCH_B_ROWS` cuts (b) short.

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

/// Join `rows` rows of `batches` (re-cut to `per_call` rows per call); returns lookups/s and the
/// number of queries.
async fn measure(doris: &DorisSection, options: &str, batches: &[Batch], rows: usize, per_call: usize) -> (f64, u64) {
    let cfg: LookupTransform = toml::from_str(options).expect("options parse");
    let table = LookupTable::connect(&cfg, doris, "", 3).await.expect("the dimension table is there");
    let join = LookupJoin::new(table.clone(), &batches[0].schema()).expect("the join plans");
    let started = Instant::now();
    let mut done = 0;
    'outer: for b in batches {
        let mut offset = 0;
        while offset < b.num_rows() {
            let n = per_call.min(b.num_rows() - offset).min(rows - done);
            let part = Batch::new(b.data.slice(offset, n));
            let out = join.process(&part).await.expect("the lookup succeeds");
            assert_eq!(out.data.column(2).null_count(), 0, "every key has its row");
            offset += n;
            done += n;
            if done == rows {
                break 'outer;
            }
        }
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    let queries = table.metrics.queries.load(std::sync::atomic::Ordering::Relaxed);
    table.close().await;
    (rate, queries)
}

fn main() {
    let rows = env_or("LOOKUP_BENCH_ROWS", 1_000_000);
    let keys = env_or("LOOKUP_BENCH_KEYS", 100_000) as u64;
    let a_rows = env_or("LOOKUP_BENCH_A_ROWS", 10_000).min(rows);
    let b_rows = env_or("LOOKUP_BENCH_B_ROWS", rows).min(rows);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let doris = doris_lite::DorisLite::start(doris_lite::Config::ephemeral()).await.expect("doris-lite starts");
        let sql = |s: &str| {
            let out = std::process::Command::new("mysql")
                .args(["-h127.0.0.1", "-P", &doris.query_addr().port().to_string(), "-uroot", "-e", s])
                .output()
                .expect("the mysql CLI is installed");
            assert!(out.status.success(), "{s}: {}", String::from_utf8_lossy(&out.stderr));
        };
        sql("CREATE DATABASE dim");
        sql("CREATE TABLE dim.big (k BIGINT, v VARCHAR(32), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 8");
        let started = Instant::now();
        load_dimension(&doris).await;
        println!("dimension: {DIM_ROWS} rows loaded in {:.1}s", started.elapsed().as_secs_f64());
        let section: DorisSection = toml::from_str(&format!(
            "fenodes = [\"{}\"]\njdbc_url = \"jdbc:mysql://127.0.0.1:{}\"",
            doris.fe_http_addr(),
            doris.query_addr().port()
        ))
        .expect("section parses");
        let batches = stream(rows, keys);
        println!("stream: {rows} rows over {keys} distinct keys, batches of {BATCH}");
        let base = "table = 'dim.big'\nkeys = ['k']\ncolumns = ['v', 'n']\n";
        let (a, a_queries) = measure(&section, &format!("{base}jdbc.async = false"), &batches, a_rows, 1).await;
        println!("(a) one query per row, no cache:  {a:>10.0} lookups/s  ({a_rows} rows, {a_queries} queries)");
        let (b, b_queries) = measure(&section, base, &batches, b_rows, BATCH).await;
        println!("(b) batched, no cache:            {b:>10.0} lookups/s  ({b_rows} rows, {b_queries} queries)");
        let cached = format!("{base}cache.max_rows = 200000\ncache.ttl = '1h'");
        let (c, c_queries) = measure(&section, &cached, &batches, rows, BATCH).await;
        println!("(c) batched, cache:               {c:>10.0} lookups/s  ({rows} rows, {c_queries} queries)");
        println!("b/a = {:.1}x (target >= 10x), c/a = {:.1}x (target >= 50x)", b / a, c / a);
        tokio::time::timeout(Duration::from_secs(10), doris.stop()).await.ok();
    });
}
