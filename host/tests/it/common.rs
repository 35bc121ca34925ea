//! Shared fixtures: the plugins built once per test process, a runtime with a shared cache.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use sluice::doris::{Credentials, FeClient};
use sluice::wasm::{ComponentCache, Plugin, PluginLimits, PluginRuntime};
use sluice_guest::batch::{Batch, BatchBuilder, RowKind, Value};
use sluice_guest::types::{arrow_schema, parse_columns};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

pub fn plugin_dir(name: &str) -> PathBuf {
    repo_root().join("plugins").join(name)
}

/// The `.wasm` of a plugin, building the whole plugins workspace once per test process.
pub fn plugin_wasm(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(repo_root().join("plugins/Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the plugins failed");
    });
    repo_root().join("plugins/target/wasm32-wasip2/release").join(format!("{}.wasm", name.replace('-', "_")))
}

/// A runtime whose compile cache is shared by every test (and every run) of this target dir.
pub fn runtime() -> &'static PluginRuntime {
    static RUNTIME: OnceLock<PluginRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
        PluginRuntime::new(ComponentCache::new(cache)).expect("runtime starts")
    })
}

pub fn load(name: &str, limits: PluginLimits) -> Plugin {
    runtime().load(&plugin_wasm(name), limits).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// A batch of inserts of `columns` (Doris syntax) with the given rows.
pub fn batch(columns: &str, rows: &[Vec<Value<'_>>]) -> Batch {
    let schema = arrow_schema(&parse_columns(columns).unwrap());
    let mut b = BatchBuilder::new(schema).unwrap();
    for row in rows {
        b.push(RowKind::Insert, row).unwrap();
    }
    b.finish().unwrap()
}

/// Every row of the batches as `kind v1 v2 …` lines.
pub fn lines(batches: &[Batch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            b.rows().map(|r| {
                let values: Vec<String> = r.values().iter().map(|v| v.to_string()).collect();
                format!("{} {}", r.kind().short(), values.join(" "))
            })
        })
        .collect()
}

/// doris-lite in this process, with `test.t` created.
pub struct Doris {
    pub handle: Option<doris_lite::Handle>,
}

impl Doris {
    pub async fn start() -> Self {
        Self::start_with(doris_lite::Config::ephemeral()).await
    }

    /// doris-lite started with `config` (ports should be 0).
    pub async fn start_with(config: doris_lite::Config) -> Self {
        let handle = doris_lite::DorisLite::start(config).await.expect("doris-lite starts");
        let d = Doris { handle: Some(handle) };
        d.sql("CREATE DATABASE test");
        d.sql("CREATE TABLE test.t (id INT, name VARCHAR(32)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
        d
    }

    pub fn h(&self) -> &doris_lite::Handle {
        self.handle.as_ref().expect("running")
    }

    pub fn client(&self, password: &str) -> FeClient {
        FeClient::new(
            vec![self.h().fe_http_addr().to_string()],
            Credentials::new("root", password),
            Duration::from_secs(5),
            Duration::from_secs(30),
        )
        .unwrap()
    }

    /// Rows through the mysql CLI, tab separated.
    pub fn sql(&self, sql: &str) -> Vec<String> {
        mysql(self.h().query_addr().port(), sql)
    }
}

/// Rows of `sql` through the mysql CLI against 127.0.0.1:`port` as root, tab separated.
pub fn mysql(port: u16, sql: &str) -> Vec<String> {
    try_mysql(port, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// [`mysql`], with the server's error as `Err` (for polling what may not exist yet).
pub fn try_mysql(port: u16, sql: &str) -> Result<Vec<String>, String> {
    let mut command = Command::new("mysql");
    command.args(["-h127.0.0.1", "-P", &port.to_string(), "-uroot", "-N", "-B"]);
    let out = run_sql(command, "-e", sql);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

/// `command` (a database's command-line client) with `sql`: as the argument after `flag`, or on
/// its standard input when it is too long to be an argument (a large transaction's script).
pub fn run_sql(mut command: Command, flag: &str, sql: &str) -> std::process::Output {
    use std::io::Write;
    if sql.len() < 64 * 1024 {
        return command.args([flag, sql]).output().expect("the client is installed");
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client is installed");
    // Written beside the reading of its output, which could otherwise fill its pipe first.
    let mut stdin = child.stdin.take().expect("piped");
    let input = sql.as_bytes().to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("the client ends");
    writer.join().expect("the writer ends").expect("the client reads its input");
    out
}

impl Doris {
    /// Transactions still pre-committed or loading.
    pub fn open_txns(&self) -> Vec<String> {
        use doris_lite::engine::TxnStatus;
        let engine = self.h().engine();
        let st = engine.lock();
        st.txns
            .values()
            .filter(|t| matches!(t.status, TxnStatus::Precommitted | TxnStatus::Prepare))
            .map(|t| format!("{} ({:?})", t.label, t.status))
            .collect()
    }

    /// The labels of the transactions committed (visible).
    pub fn visible_labels(&self) -> Vec<String> {
        use doris_lite::engine::TxnStatus;
        let engine = self.h().engine();
        let st = engine.lock();
        st.txns.values().filter(|t| t.status == TxnStatus::Visible).map(|t| t.label.clone()).collect()
    }

    pub fn fenodes(&self) -> String {
        format!("[\"{}\"]", self.h().fe_http_addr())
    }
}

/// Run the pipeline file at `path` in this process until its sources are exhausted.
pub async fn run_file(path: &std::path::Path) -> anyhow::Result<sluice::runtime::RunReport> {
    let prepared = sluice::pipeline::prepare(path, sluice::pipeline::load_file(path)?).await?;
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let opts = sluice::runtime::RunOptions { quiet: true, status_interval: None, ..Default::default() };
    sluice::runtime::run(&prepared, &opts, rx).await
}

/// `sluice verify <path> <args>` as a process: whether it exited 0, and its stdout then stderr.
pub async fn verify(path: &std::path::Path, args: &[&str]) -> (bool, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.arg("verify").arg(path).args(args);
    let out = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// One table's line of `sluice verify --json`.
#[derive(Debug)]
pub struct Verified(pub serde_json::Value);

impl Verified {
    /// Rows compared, equal, equal by fingerprint, differing.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let n = |k: &str| self.0[k].as_u64().unwrap_or_else(|| panic!("no {k} in {}", self.0));
        (n("compared"), n("equal"), n("fingerprinted"), n("differing"))
    }
}

/// `sluice verify --json <path> <args>` of a pipeline of one table: its report.
pub async fn verify_json(path: &std::path::Path, args: &[&str]) -> Verified {
    let (_, out) = verify(path, &[&["--json"], args].concat()).await;
    let line = out.lines().next().unwrap_or_default();
    Verified(serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}")))
}

/// `sluice verify --json <path> <args>`: each table's report, by table.
pub async fn verify_tables(path: &std::path::Path, args: &[&str]) -> std::collections::BTreeMap<String, Verified> {
    let (_, out) = verify(path, &[&["--json"], args].concat()).await;
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {out}")))
        .filter_map(|v| Some((v["source"].as_str()?.to_string(), Verified(v))))
        .collect()
}

/// A fresh run of a pipeline's source with one worker, for tests that read it event by event:
/// the pipeline, the run's enumerator (what it runs beside the readers lives as long) and worker
/// 0's reader.
pub struct FirstReader {
    pub prepared: sluice::runtime::Prepared,
    pub splits: Box<dyn sluice::runtime::SplitEnumerator>,
    pub reader: Box<dyn sluice::runtime::SourceReader>,
}

/// [`FirstReader`] of the pipeline `text` (written in `dir`).
pub async fn first_reader(dir: &std::path::Path, text: &str) -> FirstReader {
    let path = pipeline_file(dir, text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let mut splits = prepared.source.component.enumerator(&[None]).await.unwrap();
    let reader = splits.reader(0, None).await.unwrap();
    FirstReader { prepared, splits, reader }
}

/// Read from `reader` until `rows` rows came (in data events).
pub async fn read_rows_of(reader: &mut Box<dyn sluice::runtime::SourceReader>, rows: usize) {
    let mut seen = 0;
    while seen < rows {
        if let Some(sluice::runtime::Event::Data { batch, .. }) = reader.next().await.unwrap() {
            seen += batch.data.num_rows();
        }
    }
}

/// Write `text` as `pipeline.toml` in `dir`.
pub fn pipeline_file(dir: &std::path::Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A `sluice run` in the background, its stderr collected line by line.
pub struct Background {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Background {
    pub fn start(path: &std::path::Path) -> Self {
        Self::start_with(path, &[], &[])
    }

    /// [`Background::start`] with more arguments to `sluice run` and more environment.
    pub fn start_with(path: &std::path::Path, args: &[&str], env: &[(String, String)]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet"])
            .args(args)
            .arg(path)
            .env("SLUICE_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sluice starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = stderr.clone();
        let pipe = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Background { child, stderr }
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Wait until `f` holds (checked every 100 ms), for at most `secs`.
    pub async fn until(&mut self, secs: u64, what: &str, mut f: impl FnMut(&Self) -> bool) {
        for _ in 0..secs * 10 {
            if f(self) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("sluice exited ({status}) while waiting for {what}:\n{}", self.log());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("{what}: not within {secs} s\n{}", self.log());
    }

    /// Send `signal` (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    }

    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then the exit code and the log.
    pub async fn stop(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = tokio::task::spawn_blocking(move || self.child.wait().map(|s| (s, self))).await.unwrap().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        (status.0.code(), status.1.log())
    }

    pub async fn exit(mut self, secs: u64) -> (Option<i32>, String) {
        for _ in 0..secs * 10 {
            if let Some(status) = self.child.try_wait().unwrap() {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                return (status.code(), self.log());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("sluice did not exit within {secs} s:\n{}", self.log());
    }
}

/// Wait for `done` (checked every 20 ms). The 60 s deadline is for a hang on a busy machine, not a
/// bound on speed.
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "{what} did not happen within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The rows of `table` in the doris-lite whose query port is `port`; 0 while it does not exist.
pub fn rows_in(port: u16, table: &str) -> usize {
    try_mysql(port, &format!("SELECT COUNT(*) FROM {table}"))
        .ok()
        .and_then(|rows| rows.first().and_then(|n| n.parse::<usize>().ok()))
        .unwrap_or(0)
}

/// Whether something listens at `addr` (a TCP connection is accepted).
pub fn accepts(addr: std::net::SocketAddr) -> bool {
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_ok()
}

/// Polls until `doris` answers `target` with what `source()` answers (`secs` at most); the error
/// shows where they differ.
pub async fn converges(source: impl Fn() -> Vec<String>, doris: &Doris, target: &str, secs: u64) -> Result<(), String> {
    let mut last = (Vec::new(), Vec::new());
    for _ in 0..secs * 10 {
        let want = source();
        let got = std::panic::catch_unwind(|| doris.sql(target)).unwrap_or_default();
        if got == want {
            return Ok(());
        }
        last = (got, want);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (got, want) = last;
    if got.len() > 20 || want.len() > 20 {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        let near = |v: &[String]| v[at.saturating_sub(2)..(at + 3).min(v.len())].to_vec();
        return Err(format!(
            "`{target}` has {} rows, the source {}; from row {at} on: {:?} against {:?}",
            got.len(),
            want.len(),
            near(&got),
            near(&want)
        ));
    }
    Err(format!("`{target}` = {got:?}, the source has {want:?}"))
}

/// doris-lite as its own process (the `doris-lite` binary built beside `sluice`), so a test can
/// crash it for real with `kill -9`. Its listeners: `fe_http`, `be_http`, `query`, `flight_sql`.
pub struct DorisProcess {
    child: std::process::Child,
    pub ports: [u16; 4],
}

impl DorisProcess {
    /// Start on `ports` (0 = any) with its data in `data_dir`.
    pub fn start(data_dir: &std::path::Path, ports: [u16; 4]) -> Self {
        use std::io::BufRead;
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_sluice")).with_file_name("doris-lite");
        assert!(bin.exists(), "{} is missing: build it with `cargo build -p doris-lite`", bin.display());
        let mut cmd = Command::new(&bin);
        for (flag, port) in
            ["--fe-http-port", "--be-http-port", "--query-port", "--arrow-flight-sql-port"].iter().zip(ports)
        {
            cmd.arg(flag).arg(port.to_string());
        }
        let mut child = cmd
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("doris-lite starts");
        let mut found = [0u16; 4];
        let stdout = child.stdout.take().expect("piped");
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "ready" {
                break;
            }
            let (name, addr) = line.split_once(' ').unwrap_or_default();
            let port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
            if let Some(i) = ["fe_http", "be_http", "query", "flight_sql"].iter().position(|n| *n == name) {
                found[i] = port;
            }
        }
        assert!(found.iter().all(|p| *p > 0), "doris-lite did not print its listeners: {found:?}");
        DorisProcess { child, ports: found }
    }

    pub fn fenodes(&self) -> String {
        format!("[\"127.0.0.1:{}\"]", self.ports[0])
    }

    pub fn sql(&self, sql: &str) -> Vec<String> {
        mysql(self.ports[2], sql)
    }

    /// `POST /api/debug_point/add/<name>?<params>`, as Doris' debug point API takes it.
    pub fn debug_point(&self, name: &str, params: &str) {
        let url = format!("http://127.0.0.1:{}/api/debug_point/add/{name}?{params}", self.ports[0]);
        let out = Command::new("curl").args(["-sS", "-X", "POST", "-u", "root:", &url]).output().unwrap();
        let reply = String::from_utf8_lossy(&out.stdout);
        assert!(reply.contains("\"msg\":\"OK\""), "{url}: {reply}");
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for DorisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
