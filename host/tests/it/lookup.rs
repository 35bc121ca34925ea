//! Lookup joins against dimension tables in doris-lite: join results, keys of every type, the
//! cache in its modes, retries, and a whole pipeline.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use doris_lite::{DebugPoint, faults};
use sluice::pipeline::DorisSection;
use sluice::runtime::{self, RunOptions};
use sluice::transforms::lookup::{LookupJoin, LookupMetrics, LookupTable, LookupTransform};
use sluice_guest::batch::{Batch, Value, parse_date};
use tokio::sync::watch;

use crate::common::{Doris, accepts, batch, lines, pipeline_file, wait_for};

const DIM_CITY: &str = "CREATE TABLE dim.dim_city (city VARCHAR(32), level INT, province VARCHAR(32), country VARCHAR(32)) UNIQUE KEY(city) DISTRIBUTED BY HASH(city) BUCKETS 2";

pub(crate) const FACT: &str = "id BIGINT, name VARCHAR(32), city VARCHAR(32)";

/// doris-lite with the seed's `dim.dim_city`.
pub(crate) fn with_cities(doris: &Doris) {
    doris.sql("CREATE DATABASE dim");
    doris.sql(DIM_CITY);
    doris.sql(
        "INSERT INTO dim.dim_city VALUES ('Beijing', 1, 'Beijing', 'China'), ('Hangzhou', 2, 'Zhejiang', 'China'), \
         ('Shenzhen', 1, 'Guangdong', 'China'), ('O''Fallon', 3, 'Missouri', 'USA')",
    );
}

fn doris_section(doris: &Doris) -> DorisSection {
    doris_section_at(doris, doris.h().query_addr().port())
}

/// A `[doris]` section whose `jdbc_url` has `port`.
fn doris_section_at(doris: &Doris, port: u16) -> DorisSection {
    toml::from_str(&format!("fenodes = {}\njdbc_url = \"jdbc:mysql://127.0.0.1:{port}\"", doris.fenodes())).unwrap()
}

/// A lookup transform from the keys of a `[[transform]]` table (without `type`).
async fn connect(doris: &Doris, options: &str) -> Result<Arc<LookupTable>, sluice::transforms::lookup::LookupError> {
    let cfg: LookupTransform = toml::from_str(options).unwrap();
    LookupTable::connect(&cfg, &doris_section(doris), "", 4).await
}

async fn join(doris: &Doris, options: &str, columns: &str) -> (LookupJoin, Arc<LookupMetrics>) {
    let table = connect(doris, options).await.unwrap();
    let metrics = table.metrics.clone();
    let input = batch(columns, &[]).schema();
    (LookupJoin::new(table, &input).unwrap(), metrics)
}

fn facts() -> Batch {
    let s = Value::Str;
    batch(
        FACT,
        &[
            vec![Value::Int(1), s("Alice"), s("Hangzhou")],
            vec![Value::Int(2), s("Bob"), s("Atlantis")],
            vec![Value::Int(3), s("Carol"), Value::Null],
            vec![Value::Int(4), s("Dave"), s("Beijing")],
            vec![Value::Int(5), s("Erin"), s("O'Fallon")],
            vec![Value::Int(6), s("Frank"), s("Hangzhou")],
        ],
    )
}

/// One fact row in `city`.
fn in_city(city: &str) -> Batch {
    batch(FACT, &[vec![Value::Int(1), Value::Str("x"), Value::Str(city)]])
}

/// The rows `j` makes of `b`.
async fn joined(j: &LookupJoin, b: &Batch) -> Vec<String> {
    lines(&[j.process(b).await.unwrap()])
}

/// doris-lite with `dim.dim_city`, and a lookup on `city` with more `options`.
async fn city_lookup(options: &str) -> (Doris, LookupJoin, Arc<LookupMetrics>) {
    let doris = Doris::start().await;
    with_cities(&doris);
    let (j, m) = join(&doris, &format!("table = 'dim.dim_city'\nkeys = ['city']\n{options}"), FACT).await;
    (doris, j, m)
}

fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_example_left_and_inner_join() {
    let doris = Doris::start().await;
    with_cities(&doris);
    let (left, _) = join(&doris, "table = 'dim.dim_city'\nkeys = ['city']", FACT).await;
    let out = left.process(&facts()).await.unwrap();
    assert_eq!(
        lines(std::slice::from_ref(&out)),
        [
            "+I 1 Alice Hangzhou 2 Zhejiang China",
            "+I 2 Bob Atlantis NULL NULL NULL",
            "+I 3 Carol NULL NULL NULL NULL",
            "+I 4 Dave Beijing 1 Beijing China",
            "+I 5 Erin O'Fallon 3 Missouri USA",
            "+I 6 Frank Hangzhou 2 Zhejiang China",
        ]
    );
    assert_eq!(
        sluice_guest::types::format_columns(&sluice_guest::types::columns_of(&out.schema()).unwrap()),
        "id BIGINT, name VARCHAR(32), city VARCHAR(32), level INT, province VARCHAR(32), country VARCHAR(32)"
    );

    let inner = "table = 'dim.dim_city'\nkeys = ['city']\njoin = 'inner'\ncolumns = ['province', 'country', 'level']\n\
                 rename.level = 'city_level'";
    let (inner, _) = join(&doris, inner, FACT).await;
    let out = inner.process(&facts()).await.unwrap();
    assert_eq!(
        lines(std::slice::from_ref(&out)),
        [
            "+I 1 Alice Hangzhou Zhejiang China 2",
            "+I 4 Dave Beijing Beijing China 1",
            "+I 5 Erin O'Fallon Missouri USA 3",
            "+I 6 Frank Hangzhou Zhejiang China 2",
        ]
    );
    let names: Vec<String> = out.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["id", "name", "city", "province", "country", "city_level"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_keys_of_every_type_and_several_matches() {
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE dim");
    doris.sql(
        "CREATE TABLE dim.d (k_int INT, k_big BIGINT, k_str VARCHAR(16), k_date DATE, k_dec DECIMAL(10,2), v VARCHAR(16)) \
         DUPLICATE KEY(k_int) DISTRIBUTED BY HASH(k_int) BUCKETS 2",
    );
    doris.sql(
        "INSERT INTO dim.d VALUES (1, 10000000000, 'a', '2024-01-02', 12.30, 'one'), \
         (2, 2, 'b''q', '2024-02-29', -0.50, 'two'), (2, 2, 'b''q', '2024-02-29', -0.50, 'two-again'), \
         (3, 3, 'c', '2023-12-31', 7.00, 'three')",
    );
    // Stream key types differ from the dimension's where a conversion is exact: INT ← BIGINT,
    // DECIMAL(10,2) ← DECIMAL(6,1), DATE ← DATE.
    let stream = "id INT, a BIGINT, b BIGINT, c VARCHAR(16), d DATE, e DECIMAL(6,1)";
    let row = |id, a, b: Option<i64>, c, d, e| {
        let b = b.map_or(Value::Null, Value::Int);
        vec![Value::Int(id), Value::Int(a), b, Value::Str(c), Value::Date(parse_date(d).unwrap()), Value::Decimal(e, 1)]
    };
    let rows = batch(
        stream,
        &[
            row(10, 2, Some(2), "b'q", "2024-02-29", -5),
            row(11, 1, Some(10000000000), "a", "2024-01-02", 123),
            row(12, 1, Some(10000000000), "a", "2024-01-03", 123),
            row(13, 3, None, "c", "2023-12-31", 70),
        ],
    );
    let composite = "table = 'dim.d'\nkeys = ['k_int', 'k_big', 'k_str', 'k_date', 'k_dec']\n\
                     stream_keys = ['a', 'b', 'c', 'd', 'e']\ncolumns = ['v']";
    let (j, m) = join(&doris, composite, stream).await;
    let out = j.process(&rows).await.unwrap();
    assert_eq!(
        lines(&[out]),
        [
            "+I 10 2 2 b'q 2024-02-29 -0.5 two",
            "+I 10 2 2 b'q 2024-02-29 -0.5 two-again",
            "+I 11 1 10000000000 a 2024-01-02 12.3 one",
            "+I 12 1 10000000000 a 2024-01-03 12.3 NULL",
            "+I 13 3 NULL c 2023-12-31 7.0 NULL"
        ]
    );
    // Three distinct keys without NULLs, one query.
    assert_eq!((count(&m.misses), count(&m.queries), count(&m.rows_fetched)), (3, 1, 3));

    // One key column of each type on its own.
    for (key, stream_key, want) in [
        ("k_int", "a", ["two", "two-again", "one", "one", "three"]),
        ("k_big", "b", ["two", "two-again", "one", "one", "NULL"]),
        ("k_str", "c", ["two", "two-again", "one", "one", "three"]),
        ("k_date", "d", ["two", "two-again", "one", "NULL", "three"]),
        ("k_dec", "e", ["two", "two-again", "one", "one", "three"]),
    ] {
        let options = format!("table = 'dim.d'\nkeys = ['{key}']\nstream_keys = ['{stream_key}']\ncolumns = ['v']");
        let (j, _) = join(&doris, &options, stream).await;
        let out = j.process(&rows).await.unwrap();
        let got: Vec<String> = lines(&[out]).iter().map(|l| l.rsplit(' ').next().unwrap().to_string()).collect();
        assert_eq!(got, want, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_keys_are_fetched_once_in_batches_of_batch_size() {
    let doris = Doris::start().await;
    with_cities(&doris);
    let cities = ["Beijing", "Hangzhou", "Shenzhen", "Atlantis", "O'Fallon"];
    let rows: Vec<Vec<Value>> =
        (0..300).map(|i| vec![Value::Int(i), Value::Str("x"), Value::Str(cities[i as usize % 2])]).collect();
    let (j, m) = join(&doris, "table = 'dim.dim_city'\nkeys = ['city']", FACT).await;
    let out = j.process(&batch(FACT, &rows)).await.unwrap();
    assert_eq!(out.num_rows(), 300);
    assert_eq!(lines(&[out])[299], "+I 299 x Hangzhou 2 Zhejiang China");
    assert_eq!((count(&m.misses), count(&m.queries), count(&m.rows_fetched)), (2, 1, 2));

    // Five distinct keys, two per query.
    let rows: Vec<Vec<Value>> =
        (0..50).map(|i| vec![Value::Int(i), Value::Str("x"), Value::Str(cities[i as usize % 5])]).collect();
    let (j, m) = join(&doris, "table = 'dim.dim_city'\nkeys = ['city']\njdbc.read.batch.size = 2", FACT).await;
    j.process(&batch(FACT, &rows)).await.unwrap();
    assert_eq!((count(&m.misses), count(&m.queries), count(&m.rows_fetched)), (5, 3, 4));

    // `jdbc.async = false`: one query per key.
    let (j, m) = join(&doris, "table = 'dim.dim_city'\nkeys = ['city']\njdbc.async = false", FACT).await;
    j.process(&batch(FACT, &rows)).await.unwrap();
    assert_eq!((count(&m.misses), count(&m.queries)), (5, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_keys_expire_after_the_ttl() {
    // An hour that the cache's clock passes at once: no test machine is slow enough to outlast it.
    let (doris, j, m) = city_lookup("columns = ['level']\ncache.max_rows = 100\ncache.ttl = '1h'").await;
    let one = in_city("Hangzhou");
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou 2"]);
    doris.sql("INSERT INTO dim.dim_city VALUES ('Hangzhou', 9, 'Zhejiang', 'China')");
    j.clock().advance(Duration::from_secs(1800));
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou 2"], "served from the cache");
    assert_eq!((count(&m.hits), count(&m.misses), count(&m.queries)), (1, 1, 1));
    j.clock().advance(Duration::from_secs(1800));
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou 9"], "read again after the TTL");
    assert_eq!((count(&m.hits), count(&m.misses), count(&m.queries)), (1, 2, 2));
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou 9"], "cached again");
    assert_eq!((count(&m.hits), count(&m.misses), count(&m.queries)), (2, 2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_keys_are_cached_unless_turned_off() {
    let options = "columns = ['level']\ncache.max_rows = 100\ncache.ttl = '1h'";
    let (doris, negative, nm) = city_lookup(options).await;
    let options = format!("table = 'dim.dim_city'\nkeys = ['city']\n{options}\ncache.cache_missing_key = false");
    let (no_negative, pm) = join(&doris, &options, FACT).await;
    let one = in_city("Atlantis");
    for j in [&negative, &no_negative] {
        assert_eq!(joined(j, &one).await, ["+I 1 x Atlantis NULL"]);
    }
    doris.sql("INSERT INTO dim.dim_city VALUES ('Atlantis', 5, 'Sea', 'Nowhere')");
    assert_eq!(joined(&negative, &one).await, ["+I 1 x Atlantis NULL"], "the miss is cached");
    assert_eq!(joined(&no_negative, &one).await, ["+I 1 x Atlantis 5"]);
    assert_eq!((count(&nm.hits), count(&nm.queries)), (1, 1));
    assert_eq!((count(&pm.hits), count(&pm.queries)), (0, 2));
    // The found key is cached by both.
    no_negative.process(&one).await.unwrap();
    assert_eq!((count(&pm.hits), count(&pm.queries)), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cache_loads_the_table_and_reloads_it_every_ttl() {
    let (doris, j, m) = city_lookup("columns = ['province']\ncache.mode = 'full'\ncache.ttl = '1h'").await;
    let out = j.process(&facts()).await.unwrap();
    assert_eq!(
        lines(&[out]).iter().map(|l| l.rsplit(' ').next().unwrap()).collect::<Vec<_>>(),
        ["Zhejiang", "NULL", "NULL", "Beijing", "Missouri", "Zhejiang"]
    );
    assert_eq!((count(&m.full_loads), count(&m.queries), count(&m.rows_fetched)), (1, 1, 4));
    doris.sql("INSERT INTO dim.dim_city VALUES ('Atlantis', 5, 'Sea', 'Nowhere')");
    let atlantis = in_city("Atlantis");
    assert_eq!(joined(&j, &atlantis).await, ["+I 1 x Atlantis NULL"]);
    j.clock().advance(Duration::from_secs(1800));
    assert_eq!(joined(&j, &atlantis).await, ["+I 1 x Atlantis NULL"]);
    assert_eq!(count(&m.queries), 1, "no query between reloads");
    j.clock().advance(Duration::from_secs(1800));
    // The TTL has passed: this batch starts a reload in the background and is served the old rows.
    assert_eq!(joined(&j, &atlantis).await, ["+I 1 x Atlantis NULL"]);
    wait_for("the reload", || count(&m.full_loads) == 2).await;
    assert_eq!(joined(&j, &atlantis).await, ["+I 1 x Atlantis Sea"]);
    assert_eq!((count(&m.full_loads), count(&m.queries), count(&m.rows_fetched)), (2, 2, 9));
}

/// A TCP proxy in front of doris-lite's query port that can hold each packet a client sends for
/// `delay_ms` or while `holding` (a slow dimension table), or drop every connection (`failing`),
/// and counts the packets it holds and the most it held at once (queries in flight together).
#[derive(Default)]
struct Proxy {
    port: std::sync::atomic::AtomicU16,
    delay_ms: std::sync::atomic::AtomicU64,
    holding: std::sync::atomic::AtomicBool,
    failing: std::sync::atomic::AtomicBool,
    held: std::sync::atomic::AtomicU64,
    most_held: std::sync::atomic::AtomicU64,
}

impl Proxy {
    async fn start(doris: &Doris) -> Arc<Proxy> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Arc::new(Proxy::default());
        proxy.port.store(listener.local_addr().unwrap().port(), Ordering::Relaxed);
        let target = doris.h().query_addr();
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if p.failing.load(Ordering::Relaxed) {
                    continue;
                }
                let p = p.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(target).await else { return };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let answers = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match from_client.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let ms = p.delay_ms.load(Ordering::Relaxed);
                        if ms > 0 || p.holding.load(Ordering::Relaxed) {
                            let now = p.held.fetch_add(1, Ordering::Relaxed) + 1;
                            p.most_held.fetch_max(now, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            while p.holding.load(Ordering::Relaxed) {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            p.held.fetch_sub(1, Ordering::Relaxed);
                        }
                        if p.failing.load(Ordering::Relaxed) || to_server.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    answers.abort();
                });
            }
        });
        proxy
    }

    fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cache_serves_its_snapshot_while_a_slow_or_failing_reload_runs() {
    let doris = Doris::start().await;
    with_cities(&doris);
    let proxy = Proxy::start(&doris).await;
    let options = "table = 'dim.dim_city'\nkeys = ['city']\ncolumns = ['province']\ncache.mode = 'full'\n\
                   cache.ttl = '1h'\nmax_retries = 1";
    let cfg: LookupTransform = toml::from_str(options).unwrap();
    let section = doris_section_at(&doris, proxy.port());
    let table = LookupTable::connect(&cfg, &section, "", 4).await.unwrap();
    let m = table.metrics.clone();
    let j = LookupJoin::new(table, &batch(FACT, &[]).schema()).unwrap();
    let one = in_city("Hangzhou");
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang"], "the first load");
    let ttl = Duration::from_secs(3600);

    // A slow reload (held by the proxy until released): batches keep getting the old snapshot at
    // once, and one reload runs.
    doris.sql("INSERT INTO dim.dim_city VALUES ('Hangzhou', 2, 'Zhejiang-2', 'China')");
    proxy.holding.store(true, Ordering::Relaxed);
    j.clock().advance(ttl);
    for _ in 0..5 {
        assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang"], "the old snapshot while reloading");
    }
    wait_for("the reload to reach Doris", || proxy.held.load(Ordering::Relaxed) > 0).await;
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang"], "the old snapshot while reloading");
    assert_eq!(count(&m.full_loads), 1, "batches waited for the reload");
    // The reload outlasts the TTL, so the first batch after it starts the next one.
    j.clock().advance(ttl);
    proxy.holding.store(false, Ordering::Relaxed);
    wait_for("the slow reload", || count(&m.full_loads) == 2).await;
    assert_eq!(proxy.most_held.load(Ordering::Relaxed), 1, "one reload at a time");
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-2"], "the new snapshot");
    wait_for("the reload after the slow one", || count(&m.full_loads) == 3).await;

    // A failing reload: the snapshot stays, the failure is counted, the batches do not fail.
    proxy.failing.store(true, Ordering::Relaxed);
    doris.sql("INSERT INTO dim.dim_city VALUES ('Hangzhou', 2, 'Zhejiang-3', 'China')");
    j.clock().advance(ttl);
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-2"]);
    wait_for("the failed reload", || count(&m.full_load_failures) == 1).await;
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-2"], "the old snapshot after a failed reload");
    let loads = count(&m.full_loads);
    proxy.failing.store(false, Ordering::Relaxed);
    // Not tried again before a TTL has passed since the failure; tried again after it.
    j.clock().advance(ttl / 2);
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-2"]);
    assert_eq!(count(&m.full_loads), loads, "reloaded before a TTL passed since the failure");
    j.clock().advance(ttl / 2);
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-2"], "served while it reloads");
    wait_for("the reload after the failure", || count(&m.full_loads) == loads + 1).await;
    assert_eq!(joined(&j, &one).await, ["+I 1 x Hangzhou Zhejiang-3"]);
    assert_eq!((count(&m.full_loads), count(&m.full_load_failures)), (loads + 1, 1));

    // Without any snapshot yet, a failed load fails the batch.
    let table = LookupTable::connect(&cfg, &section, "", 4).await.unwrap();
    let fresh = LookupJoin::new(table, &batch(FACT, &[]).schema()).unwrap();
    proxy.failing.store(true, Ordering::Relaxed);
    let e = fresh.process(&one).await.unwrap_err().to_string();
    assert!(e.starts_with("lookup in `dim.dim_city`: query failed after 2 attempt(s)"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_briefly_unavailable_query_port_is_retried() {
    let (doris, j, m) = city_lookup("columns = ['level']\nmax_retries = 3").await;
    close_listeners(&doris, 800).await;
    let out = j.process(&facts()).await.unwrap();
    assert_eq!(lines(&[out])[0], "+I 1 Alice Hangzhou 2");
    assert!(count(&m.query_failures) >= 1, "{m:?}");
    assert_eq!(count(&m.queries), count(&m.query_failures) + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_or_column_is_named() {
    let doris = Doris::start().await;
    with_cities(&doris);
    let e = connect(&doris, "table = 'dim.nope'\nkeys = ['city']").await.err().unwrap().to_string();
    assert!(e.starts_with("lookup in `dim.nope`: the dimension table cannot be read at "), "{e}");
    assert!(e.contains("Unknown table 'nope'"), "{e}");
    let e = connect(&doris, "table = 'dim.dim_city'\nkeys = ['town']").await.err().unwrap().to_string();
    assert_eq!(
        e,
        "lookup in `dim.dim_city`: the dimension table has no column `town`; its columns are city, level, province, country"
    );
    let table = connect(&doris, "table = 'dim.dim_city'\nkeys = ['city']\nstream_keys = ['town']").await.unwrap();
    let e = LookupJoin::new(table, &batch(FACT, &[]).schema()).err().unwrap().to_string();
    assert_eq!(e, "lookup in `dim.dim_city`: the stream has no column `town`; its columns are id, name, city");
    let e = connect(&doris, "table = 'dim.dim_city'\nkeys = ['city']\nrename.city = 'town'").await.err().unwrap();
    assert_eq!(
        e.to_string(),
        "lookup in `dim.dim_city`: `rename.city`: `city` is not a column this lookup brings back (level, province, country)"
    );
    let table = connect(&doris, "table = 'dim.dim_city'\nkeys = ['city']\ncolumns = ['country', 'name']").await;
    assert!(table.err().unwrap().to_string().contains("has no column `name`"));
    let table =
        connect(&doris, "table = 'dim.dim_city'\nkeys = ['city']\ncolumns = ['province']\nrename.province = 'name'");
    let e = LookupJoin::new(table.await.unwrap(), &batch(FACT, &[]).schema()).err().unwrap().to_string();
    assert_eq!(
        e,
        "lookup in `dim.dim_city`: output column `name` is already a stream column; rename it with `rename.province = \"…\"`"
    );
}

pub(crate) const ENRICHED: &str = "CREATE TABLE test.enriched (id BIGINT, name VARCHAR(32), city VARCHAR(32), province VARCHAR(32), country VARCHAR(32), city_level INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2";

fn lookup_pipeline(doris: &Doris, dir: &Path) -> std::path::PathBuf {
    let port = doris.h().query_addr().port();
    let section = format!("fenodes = {}\njdbc_url = \"jdbc:mysql://127.0.0.1:{port}\"", doris.fenodes());
    lookup_pipeline_with(&section, dir)
}

/// The enriching pipeline with `doris_section` as its `[doris]`.
pub(crate) fn lookup_pipeline_with(doris_section: &str, dir: &Path) -> std::path::PathBuf {
    let facts = dir.join("facts.json");
    std::fs::write(
        &facts,
        "{\"id\":1,\"name\":\"Alice\",\"city\":\"Hangzhou\"}\n{\"id\":2,\"name\":\"Bob\",\"city\":\"Atlantis\"}\n\
         {\"id\":3,\"name\":\"Carol\",\"city\":null}\n{\"id\":4,\"name\":\"Dave\",\"city\":\"Beijing\"}\n",
    )
    .unwrap();
    let text = format!(
        r#"
[pipeline]
name = "lookup"
checkpoint_interval = "300ms"

[doris]
{doris_section}

[[source]]
type = "file"
path = "facts.json"
format = "json"
schema = "{FACT}"

[[transform]]
type = "lookup"
table = "dim.dim_city"
keys = ["city"]
columns = ["province", "country", "level"]
rename.level = "city_level"
cache.max_rows = 100000
cache.ttl = "300s"

[[sink]]
type = "doris"
table = "test.enriched"
"#
    );
    pipeline_file(dir, &text)
}

async fn run_pipeline(prepared: &runtime::Prepared) -> anyhow::Result<runtime::RunReport> {
    let (_tx, rx) = watch::channel(false);
    runtime::run(prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await
}

async fn prepare(path: &Path) -> anyhow::Result<runtime::Prepared> {
    sluice::pipeline::prepare(path, sluice::pipeline::load_file(path)?).await
}

/// doris-lite with the cities and `test.enriched`, and the enriching pipeline prepared.
async fn enrich_pipeline() -> (Doris, tempfile::TempDir, runtime::Prepared) {
    let doris = Doris::start().await;
    with_cities(&doris);
    doris.sql(ENRICHED);
    let dir = tempfile::tempdir().unwrap();
    let path = lookup_pipeline(&doris, dir.path());
    let prepared = prepare(&path).await.unwrap();
    (doris, dir, prepared)
}

/// Close doris-lite's listeners (its query port among them) for `ms`; returns once they are closed.
async fn close_listeners(doris: &Doris, ms: u64) {
    let point = DebugPoint::times(1).param("ms", ms);
    doris.h().debug_points().clone().add(faults::SERVER_RESTART_LISTENERS, point).unwrap();
    let query = doris.h().query_addr();
    wait_for("the listeners to close", || !accepts(query)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_enriches_rows_and_reports_lookup_metrics() {
    let (doris, _dir, prepared) = enrich_pipeline().await;
    let report = run_pipeline(&prepared).await.unwrap();
    assert!(report.finished);
    assert_eq!(
        doris.sql("SELECT id, name, city, province, country, city_level FROM test.enriched ORDER BY id"),
        [
            "1\tAlice\tHangzhou\tZhejiang\tChina\t2",
            "2\tBob\tAtlantis\tNULL\tNULL\tNULL",
            "3\tCarol\tNULL\tNULL\tNULL\tNULL",
            "4\tDave\tBeijing\tBeijing\tChina\t1"
        ]
    );
    let text = sluice::metrics::metrics_text(&prepared.stats, "lookup");
    assert!(text.contains("sluice_lookup_misses_total{pipeline=\"lookup\",table=\"dim.dim_city\"} 3\n"), "{text}");
    assert!(
        text.contains("sluice_lookup_rows_fetched_total{pipeline=\"lookup\",table=\"dim.dim_city\"} 2\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_port_down_past_the_retries_fails_the_pipeline_naming_the_table() {
    let (doris, _dir, prepared) = enrich_pipeline().await;
    close_listeners(&doris, 5000).await;
    let e = format!("{:#}", run_pipeline(&prepared).await.unwrap_err());
    assert!(e.starts_with("lookup in `dim.dim_city`: query failed after 2 attempt(s) (`max_retries` = 1): "), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_a_missing_dimension_table_and_prints_the_lookup() {
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE dim");
    doris.sql(ENRICHED);
    let dir = tempfile::tempdir().unwrap();
    let path = lookup_pipeline(&doris, dir.path());
    let check = |path: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_sluice")).arg("check").arg(&path).output().unwrap()
        })
    };
    let out = check(path.clone()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("transform: lookup in `dim.dim_city`: the dimension table cannot be read at "), "{stderr}");

    doris.sql(DIM_CITY);
    let out = check(path).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "transform lookup: left join dim.dim_city on city = city bringing province, country, level AS city_level \
             (cache 100000 keys for 5m) → id BIGINT, name VARCHAR(32), city VARCHAR(32), province VARCHAR(32), \
             country VARCHAR(32), city_level INT"
        ),
        "{stdout}"
    );
}

/// doris-lite with `dim.seq`: `k` from 1 to `rows`, its group `g = (k - 1) / 150` and `w = k * 10`.
fn with_sequence(doris: &Doris, rows: u64) {
    doris.sql("CREATE DATABASE dim");
    doris.sql("CREATE TABLE dim.seq (k BIGINT, g INT, w BIGINT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    let keys: Vec<u64> = (1..=rows).collect();
    for chunk in keys.chunks(1000) {
        let values: Vec<String> = chunk.iter().map(|k| format!("({k}, {}, {})", (k - 1) / 150, k * 10)).collect();
        doris.sql(&format!("INSERT INTO dim.seq VALUES {}", values.join(", ")));
    }
}

/// doris-lite with `dim.seq` of `rows` keys and the table of `target_ddl`, a proxy in front of it
/// that holds each query `delay_ms`, and [`sequence_pipeline`] prepared, bringing `column`.
async fn slow_sequence(
    rows: u64,
    parallelism: u32,
    column: &str,
    target_ddl: &str,
    delay_ms: u64,
) -> (Doris, Arc<Proxy>, tempfile::TempDir, runtime::Prepared) {
    let doris = Doris::start().await;
    with_sequence(&doris, rows);
    doris.sql(target_ddl);
    let target = target_ddl.split_whitespace().nth(2).unwrap();
    let proxy = Proxy::start(&doris).await;
    let dir = tempfile::tempdir().unwrap();
    let text = sequence_pipeline(&doris, proxy.port(), parallelism, rows, column, target);
    let prepared = prepare(&pipeline_file(dir.path(), &text)).await.unwrap();
    proxy.delay_ms.store(delay_ms, Ordering::Relaxed);
    (doris, proxy, dir, prepared)
}

/// datagen ids 1..=`rows` in batches of 100, each looked up in `dim.seq` (no cache) through the
/// proxy at `port`, bringing `column`, into `target`; checkpoints every 100ms.
fn sequence_pipeline(doris: &Doris, port: u16, parallelism: u32, rows: u64, column: &str, target: &str) -> String {
    format!(
        r#"
[pipeline]
name = "lookup-in-flight"
parallelism = {parallelism}
checkpoint_interval = "100ms"

[doris]
fenodes = {fenodes}
jdbc_url = "jdbc:mysql://127.0.0.1:{port}"
request_read_timeout = "20s"

[[source]]
type = "datagen"
schema = "id BIGINT"
rows_per_second = {rate}
number_of_rows = {rows}
fields.id = {{ kind = "sequence", start = 1 }}

[[transform]]
type = "lookup"
table = "dim.seq"
keys = ["k"]
stream_keys = ["id"]
columns = ["{column}"]
jdbc.read.thread_size = 4

[[sink]]
type = "doris"
table = "{target}"
"#,
        fenodes = doris.fenodes(),
        rate = 2000 * parallelism,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_in_flight_against_a_slow_dimension_come_out_in_input_order() {
    // The last write of a key wins, and each group spans two batches of 100 rows: a batch written
    // before the one it followed leaves a group with an id other than its last.
    let target = "CREATE TABLE test.last (g INT, id BIGINT) UNIQUE KEY(g) DISTRIBUTED BY HASH(g) BUCKETS 2";
    let (doris, proxy, _dir, prepared) = slow_sequence(3000, 1, "g", target, 150).await;
    let report = run_pipeline(&prepared).await.unwrap();
    assert!(report.finished);
    let want: Vec<String> = (0..20).map(|g| format!("{g}\t{}", 150 * (g + 1))).collect();
    assert_eq!(doris.sql("SELECT g, id FROM test.last ORDER BY g"), want);
    assert_eq!(prepared.stats.rows_written.load(Ordering::Relaxed), 3000);
    let m = |name| prepared.stats.component_value(name);
    assert_eq!((m("lookup_misses"), m("lookup_rows_fetched")), (3000, 3000));
    let together = proxy.most_held.load(Ordering::Relaxed);
    assert!(together >= 2, "one worker's lookups were never in flight together ({together} at most)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barriers_drain_the_lookups_in_flight_so_a_restart_loses_and_repeats_nothing() {
    let target = "CREATE TABLE test.wide (id BIGINT, w BIGINT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2";
    let (doris, proxy, _dir, prepared) = slow_sequence(8000, 2, "w", target, 100).await;
    // A load fails once a few checkpoints are done: the run restarts from the last one. A row
    // read before a barrier but written after it would be in neither that checkpoint nor the
    // replay, and be lost.
    let (stats, points) = (prepared.stats.clone(), doris.h().debug_points().clone());
    let fault = tokio::spawn(async move {
        while stats.checkpoints.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        points.add(faults::STREAM_LOAD_FAIL, DebugPoint::times(1).param("message", "disk full")).unwrap();
    });
    let report = run_pipeline(&prepared).await.unwrap();
    fault.abort();
    assert!(report.finished);
    // Three checkpoints before the fault, and at least the last one after the restart (how many
    // more a loaded machine fits into the source's two seconds varies).
    assert!(report.restarts >= 1 && report.checkpoint >= 4, "{report:?}");
    assert_eq!(
        doris.sql("SELECT count(*), count(distinct id), min(id), max(id) FROM test.wide"),
        ["8000\t8000\t1\t8000"]
    );
    assert_eq!(doris.sql("SELECT count(*) FROM test.wide WHERE w = id * 10"), ["8000"]);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    assert!(proxy.most_held.load(Ordering::Relaxed) >= 2, "lookups were never in flight together");
}

#[test]
fn an_embedded_pipeline_looks_up_without_a_jdbc_url() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("init.sql"),
        format!(
            "CREATE DATABASE IF NOT EXISTS dim;\n{};\n\
             INSERT INTO dim.dim_city VALUES ('Beijing', 1, 'Beijing', 'China'), ('Hangzhou', 2, 'Zhejiang', 'China');\n\
             CREATE DATABASE IF NOT EXISTS test;\n{};\n",
            DIM_CITY.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"),
            ENRICHED.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS").replace("DUPLICATE KEY", "UNIQUE KEY"),
        ),
    )
    .unwrap();
    let path = lookup_pipeline_with("fenodes = \"embedded\"\ninit_sql = \"init.sql\"", dir.path());
    let check = Command::new(env!("CARGO_BIN_EXE_sluice")).arg("check").arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert!(stdout.contains("transform lookup: left join dim.dim_city on city = city"), "{stdout}");

    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).args(["run", "--quiet"]).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains(" id "))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["1", "Alice", "Hangzhou", "Zhejiang", "China", "2"],
            ["2", "Bob", "Atlantis", "NULL", "NULL", "NULL"],
            ["3", "Carol", "NULL", "NULL", "NULL", "NULL"],
            ["4", "Dave", "Beijing", "Beijing", "China", "1"],
        ],
        "{stdout}"
    );
}
