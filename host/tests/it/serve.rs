//! `sluice serve` as a process, driven over its REST API: two tenants against doris-lite, tokens,
//! grants and quotas at the door, a plugin routing outside its grant, plugins that trap and
//! loop, pause/resume/savepoint/stop/delete, the watched directory, `/metrics`, and a kill -9 of
//! the server resuming every pipeline from its checkpoint.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Doris, plugin_wasm};

const ALPHA: &str = "alpha-token-0123";
const BETA: &str = "beta-token-4567";
const ADMIN: &str = "admin-token-89ab";
const GAMMA: &str = "gamma-token-cdef";
/// Tenant `gamma`'s plugin CPU time per minute (half a percent of a core).
const GAMMA_CPU: f64 = 0.3;

fn sha256(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A `sluice serve` process with two tenants, `alpha` and `beta`, against `doris`.
struct Serve {
    dir: PathBuf,
    child: Option<std::process::Child>,
    log: Arc<Mutex<Vec<String>>>,
    url: String,
    http: reqwest::Client,
}

fn server_toml(doris: &Doris) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
data_dir = "data"
pipelines_dir = "watched"
plugin_dir = "plugins"
admin_token_sha256 = "{admin}"
plugin_threads = 2

[connections.dw]
type = "doris"
fenodes = {fenodes}
jdbc_url = "jdbc:mysql://127.0.0.1:{query}"
request_read_timeout = "5s"

[connections.other]
type = "doris"
fenodes = {fenodes}

[tenants.alpha]
token_sha256 = "{alpha}"
connections = ["dw"]
read = ["dim.*"]
write = ["alpha.*"]
max_pipelines = 3
max_workers = 4
max_stream_loads = 2
plugin_memory = "64MB"
plugin_timeout = "1s"
restart = {{ max_restarts = 2, backoff = "200ms", max_backoff = "1s" }}

[tenants.beta]
token_sha256 = "{beta}"
connections = ["dw"]
write = ["beta.*"]
dead_letter = {{ table = "beta.dead_letters" }}

[tenants.gamma]
token_sha256 = "{gamma}"
connections = ["dw"]
write = ["gamma.*"]
plugin_timeout = "2s"
plugin_cpu_per_minute = "{gamma_cpu}s"
api_writes_per_minute = 2
"#,
        admin = sha256(ADMIN),
        alpha = sha256(ALPHA),
        beta = sha256(BETA),
        gamma = sha256(GAMMA),
        gamma_cpu = GAMMA_CPU,
        fenodes = doris.fenodes(),
        query = doris.h().query_addr().port(),
    )
}

impl Serve {
    async fn start(doris: &Doris, dir: &Path) -> Serve {
        Serve::start_with(dir, &server_toml(doris), &[]).await
    }

    /// A server of configuration `config`, with `env` besides the test's environment.
    async fn start_with(dir: &Path, config: &str, env: &[(String, String)]) -> Serve {
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        std::fs::create_dir_all(dir.join("watched/alpha")).unwrap();
        for p in ["student-trans", "hostile", "route-even"] {
            let wasm = plugin_wasm(p);
            std::fs::copy(&wasm, dir.join("plugins").join(wasm.file_name().unwrap())).unwrap();
        }
        std::fs::write(dir.join("server.toml"), config).unwrap();
        Serve::spawn_with(dir, env).await
    }

    async fn spawn(dir: &Path) -> Serve {
        Serve::spawn_with(dir, &[]).await
    }

    async fn spawn_with(dir: &Path, env: &[(String, String)]) -> Serve {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--config"])
            .arg(dir.join("server.toml"))
            .env("SLUICE_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sluice serve starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("sluice serve: http://") {
                    let _ = tx.send(rest.split('/').next().unwrap_or_default().to_string());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("sluice serve did not start:\n{}", log.lock().unwrap().join("\n")));
        Serve {
            dir: dir.to_path_buf(),
            child: Some(child),
            log,
            url: format!("http://{addr}"),
            http: {
                sluice::doris::tls::install_provider();
                reqwest::Client::new()
            },
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    async fn call(&self, method: reqwest::Method, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("Content-Type", "application/toml").body(b.to_string());
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, Some(token), None).await
    }

    async fn post(&self, path: &str, token: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(token), None).await
    }

    async fn submit(&self, token: &str, toml: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, "/api/v1/pipelines", Some(token), Some(toml)).await
    }

    /// Poll pipeline `id` until `f` holds of its status (`secs` at most).
    async fn until(&self, id: &str, token: &str, secs: u64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        for _ in 0..secs * 10 {
            let (_, v) = self.get(&format!("/api/v1/pipelines/{id}"), token).await;
            if f(&v) {
                return v;
            }
            last = v;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{id}: {what}: not within {secs} s; last status {last:#}\n{}", self.log());
    }

    fn kill_9(&mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    async fn stop(&mut self) {
        let mut c = self.child.take().unwrap();
        assert!(std::process::Command::new("kill").args(["-TERM", &c.id().to_string()]).status().unwrap().success());
        let status = tokio::task::spawn_blocking(move || c.wait()).await.unwrap().unwrap();
        assert!(status.success(), "sluice serve exited with {status}:\n{}", self.log());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A datagen pipeline of `rows` rows at `rate` rows/s through `plugin` into `table`.
fn datagen(name: &str, table: &str, rows: u64, rate: u64, transform: &str) -> String {
    format!(
        r#"
[pipeline]
name = "{name}"
checkpoint_interval = "300ms"

[[source]]
type = "datagen"
schema = "id BIGINT, name VARCHAR(64), age INT"
rows_per_second = {rate}
number_of_rows = {rows}
fields.id = {{ kind = "sequence", start = 1 }}
fields.age = {{ min = 1, max = 50 }}
{transform}
[[sink]]
type = "doris"
table = "{table}"
"#
    )
}

const STUDENT_TRANS: &str = "[[transform]]\ntype = \"wasm\"\nplugin = \"student_trans.wasm\"\n";

fn hostile(mode: &str) -> String {
    format!("[[transform]]\ntype = \"wasm\"\nplugin = \"hostile.wasm\"\nconfig.mode = \"{mode}\"\n")
}

fn tables(doris: &Doris) {
    for db in ["alpha", "beta", "gamma", "dim"] {
        doris.sql(&format!("CREATE DATABASE IF NOT EXISTS {db}"));
    }
    for t in
        ["alpha.students", "alpha.more", "alpha.slow", "alpha.routed", "beta.students", "beta.stolen", "gamma.spin"]
    {
        doris.sql(&format!(
            "CREATE TABLE {t} (id BIGINT, name VARCHAR(64), age INT) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2"
        ));
    }
}

/// The 1-based line of `text` that is `line`.
fn line_of(text: &str, line: &str) -> usize {
    text.lines().position(|l| l == line).expect("the line is there") + 1
}

fn refused(v: &Value) -> String {
    let list: Vec<&str> = v["refused"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
    format!("{} | {}", v["error"].as_str().unwrap_or_default(), list.join(" | "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grants_and_quotas_are_checked_at_the_door() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;

    // Tokens: none, unknown.
    let (st, v) = s.call(reqwest::Method::GET, "/api/v1/pipelines", None, None).await;
    assert_eq!((st, v["error"].as_str()), (401, Some("no token: send `Authorization: Bearer <token>`")));
    let (st, v) = s.get("/api/v1/pipelines", "not-a-token").await;
    assert_eq!((st, v["error"].as_str()), (401, Some("the token is not one of this server's")));

    // A good pipeline: a plugin named by its file name, a table of the tenant's.
    let good = datagen("students", "alpha.students", 2000, 50_000, STUDENT_TRANS);
    let (st, v) = s.submit(ALPHA, &good).await;
    assert_eq!((st, &v), (201, &serde_json::json!({ "id": "alpha.students" })));
    let done = s.until("alpha.students", ALPHA, 60, "finished", |v| v["state"] == "finished").await;
    assert_eq!(done["rows_in"], 2000);
    assert_eq!(done["rows_out"], 2000);
    assert!(done["last_checkpoint"]["id"].as_u64().unwrap() >= 1, "{done:#}");
    assert_eq!(done["graph"]["transforms"][0]["type"], "wasm");
    assert_eq!(
        doris.sql("SELECT count(*), count(DISTINCT id) FROM alpha.students WHERE name LIKE 'prefix_%'"),
        ["2000\t2000"]
    );

    // Another tenant cannot see it, the admin can.
    let (st, v) = s.get("/api/v1/pipelines/alpha.students", BETA).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("there is no pipeline `alpha.students`")));
    let (_, v) = s.get("/api/v1/pipelines", BETA).await;
    assert_eq!(v["data"], serde_json::json!([]));
    let (_, v) = s.get("/api/v1/pipelines", ADMIN).await;
    assert_eq!(v["data"][0]["id"], "alpha.students");
    let (st, _) = s.post("/api/v1/pipelines/alpha.students/stop", BETA).await;
    assert_eq!(st, 404);

    // The same name again.
    let (st, v) = s.submit(ALPHA, &good).await;
    assert_eq!(st, 409, "{v}");

    // Grants: another tenant's table, a table not granted to read, a server file, a plugin
    // path, a connection of the server's not granted, connections of its own.
    let steal = datagen("steal", "beta.students", 10, 10, "");
    let (st, v) = s.submit(ALPHA, &steal).await;
    assert_eq!(st, 403);
    assert_eq!(
        refused(&v),
        format!(
            "tenant `alpha` is not granted what this pipeline reaches | pipeline.toml:{}: sink (type \"doris\"): tenant `alpha` may not write `beta.students`",
            line_of(&steal, "[[sink]]")
        )
    );
    let lookup = datagen(
        "peek",
        "alpha.more",
        10,
        10,
        "[[transform]]\ntype = \"lookup\"\ntable = \"secret.cities\"\nkeys = [\"id\"]\n",
    );
    let (st, v) = s.submit(ALPHA, &lookup).await;
    assert_eq!(st, 403);
    assert!(refused(&v).contains("transform (type \"lookup\"): tenant `alpha` may not read `secret.cities`"), "{v}");
    let file = "[pipeline]\nname = \"files\"\n[[source]]\ntype = \"file\"\npath = \"/etc/passwd\"\nschema = \"a STRING\"\n[[sink]]\ntype = \"blackhole\"\n";
    let (st, v) = s.submit(ALPHA, file).await;
    assert_eq!(st, 403);
    assert!(
        refused(&v).contains("pipeline.toml:3: source (type \"file\"): reads the server's file \"/etc/passwd\"; tenants read and write only through the connections they are granted"),
        "{v}"
    );
    let path_plugin = datagen(
        "paths",
        "alpha.more",
        10,
        10,
        "[[transform]]\ntype = \"wasm\"\nplugin = \"../plugins/hostile.wasm\"\n",
    );
    let (st, v) = s.submit(ALPHA, &path_plugin).await;
    assert_eq!(st, 403);
    assert!(refused(&v).contains("name a prebuilt `.wasm` component by its file name"), "{v}");
    let missing = datagen("missing", "alpha.more", 10, 10, "[[transform]]\ntype = \"wasm\"\nplugin = \"nope.wasm\"\n");
    let (st, v) = s.submit(ALPHA, &missing).await;
    assert_eq!(st, 403);
    assert!(
        refused(&v).contains("there is no plugin `nope.wasm`; upload it with `PUT /api/v1/plugins/nope.wasm`"),
        "{v}"
    );
    let other = datagen("other", "alpha.more", 10, 10, "")
        .replace("type = \"doris\"\n", "type = \"doris\"\nconnection = \"other\"\n");
    let (st, v) = s.submit(ALPHA, &other).await;
    assert_eq!(st, 403);
    assert!(
        v["error"].as_str().unwrap().ends_with("sink.connection: connection `other` is not granted to tenant `alpha`"),
        "{v}"
    );
    let own = format!("[doris]\nfenodes = {}\n{}", doris.fenodes(), datagen("own", "alpha.more", 10, 10, ""));
    let (st, v) = s.submit(ALPHA, &own).await;
    assert_eq!(st, 400);
    assert!(v["error"].as_str().unwrap().starts_with("pipeline.toml:1: doris: connections are the server's"), "{v}");

    // Quotas: workers, plugin limits, pipelines.
    let wide = datagen("wide", "alpha.more", 10, 10, "")
        .replace("checkpoint_interval", "parallelism = 5\ncheckpoint_interval");
    let (st, v) = s.submit(ALPHA, &wide).await;
    assert_eq!(st, 403);
    assert!(v["error"].as_str().unwrap().contains("above its `max_workers` (4)"), "{v}");
    let greedy = datagen("greedy", "alpha.more", 10, 10, &format!("{STUDENT_TRANS}limits.memory = \"1GB\"\n"));
    let (st, v) = s.submit(ALPHA, &greedy).await;
    assert_eq!(st, 403);
    assert!(refused(&v).contains("limits.memory: 1.0 GB is above tenant `alpha`'s plugin_memory (64.0 MB)"), "{v}");
    for name in ["second", "third"] {
        let (st, v) = s.submit(ALPHA, &datagen(name, "alpha.more", 1_000_000, 10, "")).await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = s.submit(ALPHA, &datagen("fourth", "alpha.more", 10, 10, "")).await;
    assert_eq!(st, 403);
    assert_eq!(v["error"], "tenant `alpha` has 3 pipelines, its limit (`max_pipelines`); delete one first");

    // Not TOML, not a tenant.
    let (st, _) = s.call(reqwest::Method::POST, "/api/v1/pipelines", Some(ADMIN), Some(&good)).await;
    assert_eq!(st, 403);
    let r =
        s.http.post(format!("{}/api/v1/pipelines", s.url)).bearer_auth(BETA).body(good.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 415);

    // The OpenAPI document and `/metrics`, labelled by tenant and pipeline.
    let (st, api) = s.call(reqwest::Method::GET, "/api/v1/openapi.json", None, None).await;
    assert_eq!(st, 200);
    assert!(api["paths"]["/api/v1/pipelines/{id}/savepoint"]["post"].is_object(), "{api}");
    let metrics = s.http.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("sluice_rows_read_total{tenant=\"alpha\",pipeline=\"students\"} 2000\n"), "{metrics}");
    assert!(metrics.contains("# TYPE sluice_checkpoint_duration_seconds histogram\n"), "{metrics}");
    assert!(
        metrics.contains(
            "sluice_totalFlushLoadedRows_total{tenant=\"alpha\",pipeline=\"students\",sink=\"doris\"} 2000\n"
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_load_duration_seconds_count{tenant=\"alpha\",pipeline=\"students\"} "))
    );
    assert!(!metrics.contains(ALPHA) && !metrics.contains(&sha256(ALPHA)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_routing_outside_the_grant_fails_its_batch_and_writes_nothing_there() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let route = "[[transform]]\ntype = \"wasm\"\nplugin = \"route_even.wasm\"\nconfig.table = \"beta.stolen\"\n";
    let (st, v) = s.submit(ALPHA, &datagen("routed", "alpha.routed", 100, 1000, route)).await;
    assert_eq!(st, 201, "{v}");
    let failed = s.until("alpha.routed", ALPHA, 60, "failed", |v| v["state"] == "failed").await;
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.contains(
            "rows of `datagen` go to `beta.stolen`, which tenant `alpha` may not write; the batch is not written"
        ),
        "{error}"
    );
    assert_eq!(failed["restarts"], 2, "{failed:#}");
    assert_eq!(doris.sql("SELECT count(*) FROM beta.stolen"), ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_dead_letter_table_takes_the_rows_its_pipelines_route_outside_their_grant() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let route = "[[transform]]\ntype = \"wasm\"\nplugin = \"route_even.wasm\"\nconfig.table = \"alpha.students\"\n";
    let (st, v) = s.submit(BETA, &datagen("routed", "beta.students", 100, 1000, route)).await;
    assert_eq!(st, 201, "{v}");
    s.until("beta.routed", BETA, 60, "finished", |v| v["state"] == "finished").await;
    assert_eq!(doris.sql("SELECT count(*), sum(id % 2) FROM beta.students").join(""), "50\t50");
    assert_eq!(doris.sql("SELECT count(*) FROM alpha.students"), ["0"]);
    assert_eq!(
        doris.sql("SELECT count(*), min(stage), max(stage), min(pipeline) FROM beta.dead_letters").join(""),
        "50\troute\troute\trouted"
    );
    let reason = doris.sql("SELECT reason FROM beta.dead_letters LIMIT 1").join("");
    assert!(reason.contains("go to `alpha.students`, which tenant `beta` may not write"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_or_looping_plugin_fails_its_pipeline_only() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let (st, v) = s.submit(ALPHA, &datagen("trap", "alpha.more", 100, 1000, &hostile("trap"))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.submit(ALPHA, &datagen("loop", "alpha.slow", 100, 1000, &hostile("loop"))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.submit(ALPHA, &datagen("eat", "alpha.routed", 100, 1000, &hostile("memory"))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.submit(BETA, &datagen("students", "beta.students", 20_000, 5_000, "")).await;
    assert_eq!(st, 201, "{v}");
    let trap = s.until("alpha.trap", ALPHA, 60, "failed", |v| v["state"] == "failed").await;
    assert!(trap["last_error"].as_str().unwrap().contains("trapped"), "{trap:#}");
    assert_eq!(trap["restarts"], 2, "restarted from its checkpoint up to `max_restarts`: {trap:#}");
    let looped = s.until("alpha.loop", ALPHA, 90, "failed", |v| v["state"] == "failed").await;
    assert!(
        looped["last_error"].as_str().unwrap().contains("exceeded its wall-time limit of 1s per call"),
        "{looped:#}"
    );
    let eat = s.until("alpha.eat", ALPHA, 90, "failed", |v| v["state"] == "failed").await;
    assert!(eat["last_error"].as_str().unwrap().contains("exceeded its memory limit of 64000000 bytes"), "{eat:#}");
    let beta = s.until("beta.students", BETA, 90, "finished", |v| v["state"] == "finished").await;
    assert_eq!(beta["rows_out"], 20_000);
    assert_eq!(doris.sql("SELECT count(*), count(DISTINCT id) FROM beta.students"), ["20000\t20000"]);
    assert_eq!(doris.sql("SELECT count(*) FROM alpha.more"), ["0"]);
    assert_eq!(doris.sql("SELECT count(*) FROM alpha.routed"), ["0"]);
}

/// The value of the series `name` in `/metrics` text.
fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A tenant's CPU budget per minute bounds what its plugins spend together: a plugin that loops
/// is paused (not failed) once the budget is spent, and spends no more than it refills, while
/// another tenant's plugin pipeline runs to its end. Its quota of API calls that change
/// something answers 429 beyond it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_budget_per_minute_pauses_a_tenants_plugins() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let s = Serve::start(&doris, dir.path()).await;
    let (st, v) = s.submit(GAMMA, &datagen("spin", "gamma.spin", 100, 1000, &hostile("loop"))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.submit(BETA, &datagen("students", "beta.students", 20_000, 5_000, STUDENT_TRANS)).await;
    assert_eq!(st, 201, "{v}");
    let paused = r#"sluice_plugin_paused_seconds_total{tenant="gamma"}"#;
    let mut metrics = String::new();
    for _ in 0..900 {
        metrics = s.http.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
        if series(&metrics, paused).is_some_and(|p| p >= 1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if !series(&metrics, paused).is_some_and(|p| p >= 1.0) {
        let (_, spin) = s.get("/api/v1/pipelines/gamma.spin", GAMMA).await;
        let budget: Vec<&str> = metrics.lines().filter(|l| l.starts_with("sluice_plugin_")).collect();
        panic!("gamma's loop was never paused: {budget:?}\n{spin:#}\n{}", s.log());
    }
    // Spent: at most the full bucket, what refilled since, and the overshoot of one epoch tick
    // (10 ms; a late one on a busy machine); a loop left alone spends a second each second.
    let cpu = series(&metrics, r#"sluice_plugin_cpu_seconds_total{tenant="gamma"}"#).expect("gamma's CPU is counted");
    let bound = GAMMA_CPU * (1.0 + elapsed / 60.0) + 0.3;
    assert!(cpu >= GAMMA_CPU && cpu <= bound, "gamma spent {cpu} s of CPU in {elapsed:.1} s (bound {bound})");
    assert!(series(&metrics, r#"sluice_plugin_cpu_seconds_total{tenant="beta"}"#).is_none(), "beta has no budget");
    // Paused, not failed: the pause does not count toward the call's 2 s limit.
    let (_, spin) = s.get("/api/v1/pipelines/gamma.spin", GAMMA).await;
    assert_eq!((spin["state"].as_str(), &spin["restarts"]), (Some("running"), &Value::from(0)), "{spin:#}");
    let beta = s.until("beta.students", BETA, 120, "finished", |v| v["state"] == "finished").await;
    assert_eq!(beta["rows_out"], 20_000);
    assert_eq!(doris.sql("SELECT count(*), count(DISTINCT id) FROM beta.students"), ["20000\t20000"]);
    assert_eq!(doris.sql("SELECT count(*) FROM gamma.spin"), ["0"]);
    // gamma may make two calls that change something a minute (one more every 30 s): however
    // long the run took since its first, a third call in a row is refused.
    let write = || {
        s.http
            .post(format!("{}/api/v1/pipelines", s.url))
            .bearer_auth(GAMMA)
            .header("Content-Type", "application/toml")
            .body("[pipeline")
            .send()
    };
    let mut refused = None;
    for call in 1..=3 {
        let r = write().await.unwrap();
        if r.status() == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status(), 400, "call {call}: a bad pipeline file, within the budget");
    }
    let r = refused.expect("the third call in a row is over the budget of two");
    let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=31).contains(&wait), "Retry-After: {wait}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"],
        format!(
            "tenant `gamma` has made its 2 API calls that change something this minute (api_writes_per_minute); try again in {wait} s"
        )
    );
    // Reading is not counted.
    assert_eq!(s.get("/api/v1/pipelines/gamma.spin", GAMMA).await.0, 200);
}

/// A changelog table `dim.people` of three rows, and its copy's table `alpha.people`.
fn changelog_people(doris: &Doris) {
    doris.sql(
        "CREATE TABLE dim.people (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2 \
         PROPERTIES (\"enable_unique_key_merge_on_write\" = \"true\", \"changelog.enable\" = \"true\", \"changelog.need_historical_value\" = \"true\")",
    );
    doris.sql("CREATE TABLE alpha.people (id INT, name VARCHAR(32), age INT) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    doris.sql("INSERT INTO dim.people VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)");
}

/// `dim.people` mirrored into `alpha.people` by its changelog, compared every second.
const MIRROR: &str = "[pipeline]\nname = \"mirror\"\ncheckpoint_interval = \"300ms\"\n\n\
    [[source]]\nname = \"people\"\ntype = \"doris\"\ntable = \"dim.people\"\nprimary_key = \"id\"\nscan.mode = \"initial\"\n\
    changelog.poll_interval = \"1s\"\n\n[[sink]]\ntype = \"doris\"\ntable = \"alpha.people\"\n\n\
    [verify]\nevery = \"1s\"\n";

/// `[verify]` of a mirror under `sluice serve`: the pipeline's API shows its last comparison, and a
/// row changed in the copy behind the pipeline's back shows as a difference there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_shows_the_last_verification_of_a_served_mirror() {
    let doris = Doris::start().await;
    tables(&doris);
    changelog_people(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let (st, v) = s.submit(ALPHA, MIRROR).await;
    assert_eq!(st, 201, "{v}");
    let v = s.until("alpha.mirror", ALPHA, 60, "a comparison that agrees", |v| v["verify"]["agrees"] == true).await;
    let t = &v["verify"]["tables"][0];
    assert_eq!(
        (&t["source"], &t["target"], &t["compared"], &t["equal"], &t["differing"]),
        (&json!("dim.people"), &json!("alpha.people"), &json!(3), &json!(3), &json!(0)),
        "{v:#}"
    );
    doris.sql("UPDATE alpha.people SET age = 99 WHERE id = 2");
    let v = s.until("alpha.mirror", ALPHA, 60, "a comparison that differs", |v| v["verify"]["agrees"] == false).await;
    let t = &v["verify"]["tables"][0];
    assert_eq!((&t["differing"], &t["samples"][0]["key"]), (&json!(1), &json!("id=2")), "{v:#}");
    assert_eq!(t["samples"][0]["columns"], json!([{"column": "age", "source": "20", "doris": "99"}]), "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_savepoint_stop_and_delete() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let (st, _) = s.submit(ALPHA, &datagen("slow", "alpha.slow", 1_000_000, 2000, "")).await;
    assert_eq!(st, 201);
    s.until("alpha.slow", ALPHA, 60, "rows written", |v| v["rows_out"].as_u64().unwrap_or(0) > 0).await;
    let (st, v) = s.post("/api/v1/pipelines/alpha.slow/savepoint", ALPHA).await;
    assert_eq!(st, 200, "{v}");
    let savepoint = v["checkpoint"].as_u64().unwrap();
    assert!(savepoint >= 1, "{v}");

    let (st, v) = s.post("/api/v1/pipelines/alpha.slow/pause", ALPHA).await;
    assert_eq!((st, v["state"].as_str()), (200, Some("paused")), "{v}");
    let count = || doris.sql("SELECT count(*) FROM alpha.slow")[0].parse::<u64>().unwrap();
    let at_pause = count();
    assert_eq!(v["rows_out"].as_u64().unwrap(), at_pause, "a pause commits what was written: {v}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(count(), at_pause, "nothing lands while paused");
    let (st, _) = s.post("/api/v1/pipelines/alpha.slow/savepoint", ALPHA).await;
    assert_eq!(st, 409);

    let (st, v) = s.post("/api/v1/pipelines/alpha.slow/resume", ALPHA).await;
    assert_eq!(st, 200, "{v}");
    s.until("alpha.slow", ALPHA, 60, "more rows", |v| {
        v["state"] == "running" && v["rows_out"].as_u64().unwrap_or(0) > at_pause
    })
    .await;
    let (st, v) = s.post("/api/v1/pipelines/alpha.slow/stop", ALPHA).await;
    assert_eq!((st, v["state"].as_str()), (200, Some("stopped")), "{v}");
    // Exactly once across the pause: ids 1..n, each once.
    let n = count();
    assert_eq!(doris.sql("SELECT count(DISTINCT id), min(id), max(id) FROM alpha.slow"), [format!("{n}\t1\t{n}")]);

    // The command line, with the token from the environment.
    let list = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["list", "--server", &s.url])
        .env("SLUICE_TOKEN", ALPHA)
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.starts_with("alpha.slow\tstopped\tcheckpoint "), "{text}");
    let denied = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["stop", "alpha.slow", "--server", &s.url])
        .env("SLUICE_TOKEN", BETA)
        .output()
        .unwrap();
    assert!(!denied.status.success());
    assert_eq!(
        String::from_utf8_lossy(&denied.stderr).trim(),
        format!("error: {} answered 404 Not Found: there is no pipeline `alpha.slow`", s.url)
    );

    let r = s.call(reqwest::Method::DELETE, "/api/v1/pipelines/alpha.slow", Some(ALPHA), None).await;
    assert_eq!(r.0, 204);
    assert_eq!(s.get("/api/v1/pipelines/alpha.slow", ALPHA).await.0, 404);
    assert!(!s.dir.join("data/tenants/alpha/pipelines/slow").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_file_starts_restarts_and_stops_its_pipeline() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    let file = dir.path().join("watched/alpha/nightly.toml");
    std::fs::write(&file, datagen("nightly", "alpha.more", 3000, 500, "")).unwrap();
    s.until("alpha.nightly", ALPHA, 60, "a checkpoint", |v| v["last_checkpoint"]["id"].as_u64().unwrap_or(0) >= 1)
        .await;
    // A changed file restarts its pipeline from its checkpoint (faster now).
    std::fs::write(&file, datagen("nightly", "alpha.more", 3000, 50_000, "")).unwrap();
    let v = s
        .until("alpha.nightly", ALPHA, 60, "finished", |v| {
            v["state"] == "finished" && v["rows_in"].as_u64() < Some(3000)
        })
        .await;
    assert!(v["rows_in"].as_u64().unwrap() > 0, "{v:#}");
    assert_eq!(doris.sql("SELECT count(*), count(DISTINCT id) FROM alpha.more"), ["3000\t3000"]);
    // A file refused by the grants is reported, not run.
    std::fs::write(dir.path().join("watched/alpha/bad.toml"), datagen("bad", "beta.students", 10, 10, "")).unwrap();
    std::fs::remove_file(&file).unwrap();
    for _ in 0..100 {
        if s.get("/api/v1/pipelines/alpha.nightly", ALPHA).await.0 == 404 && s.log().contains("bad.toml") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.get("/api/v1/pipelines/alpha.nightly", ALPHA).await.0, 404, "{}", s.log());
    let bad = datagen("bad", "beta.students", 10, 10, "");
    let line = line_of(&bad, "[[sink]]");
    assert!(
        s.log().contains(&format!(
            "alpha/bad.toml:{line}: sink (type \"doris\"): tenant `alpha` may not write `beta.students`"
        )),
        "{}",
        s.log()
    );
    assert_eq!(s.get("/api/v1/pipelines/alpha.bad", ALPHA).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_server_resumes_every_pipeline_from_its_checkpoint() {
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let mut s = Serve::start(&doris, dir.path()).await;
    const ROWS: u64 = 30_000;
    assert_eq!(s.submit(ALPHA, &datagen("students", "alpha.students", ROWS, 4000, STUDENT_TRANS)).await.0, 201);
    assert_eq!(s.submit(BETA, &datagen("students", "beta.students", ROWS, 4000, "")).await.0, 201);
    let count = |t: &str| doris.sql(&format!("SELECT count(*) FROM {t}"))[0].parse::<u64>().unwrap();
    for round in 0..2 {
        // Kill while both are mid-way: rows committed, more to come.
        for _ in 0..300 {
            let (a, b) = (count("alpha.students"), count("beta.students"));
            if a > (round + 1) * 3000 && b > (round + 1) * 3000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (a, b) = (count("alpha.students"), count("beta.students"));
        assert!(a < ROWS && b < ROWS && a > 0 && b > 0, "round {round}: {a} and {b} rows before the kill");
        s.kill_9();
        s = Serve::spawn(dir.path()).await;
    }
    for (id, token, table) in [("alpha.students", ALPHA, "alpha.students"), ("beta.students", BETA, "beta.students")] {
        s.until(id, token, 120, "finished", |v| v["state"] == "finished").await;
        assert_eq!(
            doris.sql(&format!("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {table}")),
            [format!("{ROWS}\t{ROWS}\t1\t{ROWS}")],
            "{id}"
        );
    }
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    s.stop().await;
}

/// A pipeline with `[cluster]` under `sluice serve`: the server joins the pipeline's cluster
/// (etcd; checkpoints in the S3 store granted to the tenant), leads it, and every row lands once,
/// committed through checkpoints published in that store. A store not granted is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clustered_pipeline_runs_under_serve_with_its_checkpoints_in_the_tenants_store() {
    use sluice_cluster::testing::{Etcd, S3};
    let doris = Doris::start().await;
    tables(&doris);
    let etcd = Etcd::start(1);
    let s3 = S3::start("serve-clusters");
    let granted = s3.store_url("tenants/alpha");
    let config = server_toml(&doris)
        .replace("max_pipelines = 3\n", &format!("max_pipelines = 3\nclusters = [\"{granted}/\"]\n"));
    let dir = tempfile::tempdir().unwrap();
    let mut s = Serve::start_with(dir.path(), &config, &s3.env()).await;
    const ROWS: u64 = 6000;
    let cluster = |store: &str| {
        format!(
            "\n[cluster]\netcd = \"{}\"\nstore = \"{store}\"\nmember = \"serve-1\"\nlease_ttl = \"4s\"\n",
            etcd.url()
        )
    };
    let pipeline =
        datagen("students", "alpha.students", ROWS, 6000, STUDENT_TRANS) + &cluster(&format!("{granted}/students"));

    // Another tenant's store, or none granted: refused at the door.
    let stolen = datagen("students", "beta.students", ROWS, 6000, "") + &cluster(&format!("{granted}/stolen"));
    let (st, v) = s.submit(BETA, &stolen).await;
    assert_eq!(st, 403, "{v}");
    assert!(
        refused(&v).contains(&format!(
            "[cluster] keeps its checkpoints in `{granted}/stolen`, which is not under a store granted to tenant `beta` (its `clusters`: none)"
        )),
        "{v}"
    );

    assert_eq!(s.submit(ALPHA, &pipeline).await, (201, serde_json::json!({ "id": "alpha.students" })));
    let done = s.until("alpha.students", ALPHA, 120, "finished", |v| v["state"] == "finished").await;
    assert_eq!(done["rows_out"], ROWS, "{done:#}");
    assert_eq!(
        doris.sql(
            "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM alpha.students WHERE name LIKE 'prefix_%'"
        ),
        [format!("{ROWS}\t{ROWS}\t1\t{ROWS}")]
    );
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    // The checkpoints are the cluster's, in the tenant's store; the log says who led.
    sluice::doris::tls::install_provider();
    let last = done["last_checkpoint"]["id"].as_u64().expect("a checkpoint");
    let manifest = s3.store("tenants/alpha/students").manifest(last).await.unwrap();
    assert!(manifest.is_some(), "checkpoint {last} has no manifest in {granted}/students");
    assert!(s.log().contains("member `serve-1` leads pipeline `students`"), "{}", s.log());
    s.stop().await;
}

/// The live view in headless Chromium: the numbers it shows are `/metrics`', its buttons work.
/// Needs Debian's chromium and a Python with Playwright (`SLUICE_PLAYWRIGHT_PYTHON`), which the
/// test command installs and then runs this with `--ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and Playwright: tests/run.sh runs it"]
async fn the_live_view_shows_what_metrics_says_and_its_buttons_work() {
    let python = std::env::var("SLUICE_PLAYWRIGHT_PYTHON").expect("SLUICE_PLAYWRIGHT_PYTHON: a Python with Playwright");
    let doris = Doris::start().await;
    tables(&doris);
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&doris, dir.path()).await;
    assert_eq!(s.submit(ALPHA, &datagen("students", "alpha.students", 3000, 20_000, STUDENT_TRANS)).await.0, 201);
    assert_eq!(s.submit(ALPHA, &datagen("slow", "alpha.slow", 1_000_000, 500, STUDENT_TRANS)).await.0, 201);
    assert_eq!(s.submit(BETA, &datagen("students", "beta.students", 100, 1000, "")).await.0, 201);
    s.until("alpha.students", ALPHA, 60, "finished", |v| v["state"] == "finished").await;
    // A changelog mirror: its card shows how far its source is.
    changelog_people(&doris);
    assert_eq!(s.submit(ALPHA, MIRROR).await.0, 201);
    s.until("alpha.mirror", ALPHA, 60, "a changelog window read", |v| {
        v["sources"][0]["position_age_seconds"].is_number()
    })
    .await;
    let shot = std::env::var_os("SLUICE_SCREENSHOT").map_or_else(|| dir.path().join("view.png"), PathBuf::from);
    let script = crate::common::repo_root().join("tests/web/serve_view.py");
    let url = s.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args([&url, ALPHA, "alpha.students", "alpha.slow", "alpha.mirror"])
            .arg(&shot)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "{stdout}\n{stderr}\n{}", s.log());
}
