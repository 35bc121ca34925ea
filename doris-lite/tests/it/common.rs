//! Test harness: an in-process doris-lite on ephemeral ports plus client helpers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use doris_lite::{Config, DorisLite, Handle};
use serde_json::Value;

/// The quick-start DDL, exactly as in the Flink connector documentation (seed 003).
pub const STUDENT_DDL: &str = r#"CREATE TABLE test.student (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1
PROPERTIES (
    "replication_allocation" = "tag.location.default: 3"
);"#;

/// The quick-start target table, exactly as in the seed.
pub const STUDENT_TRANS_DDL: &str = r#"CREATE TABLE test.student_trans (
    `id` INT,
    `name` VARCHAR(256),
    `age` INT
)
UNIQUE KEY(`id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 1
PROPERTIES (
    "replication_allocation" = "tag.location.default: 3"
);"#;

/// A running server and the runtime that drives it.
pub struct Server {
    pub handle: Option<Handle>,
    rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(Config::ephemeral())
    }

    pub fn start_with(config: Config) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let handle = rt.block_on(DorisLite::start(config)).expect("doris-lite starts");
        Server { handle: Some(handle), rt, dir: tempfile::tempdir().expect("tempdir") }
    }

    fn h(&self) -> &Handle {
        self.handle.as_ref().expect("running")
    }

    pub fn fe(&self) -> String {
        self.h().fe_http_addr().to_string()
    }

    pub fn be(&self) -> String {
        self.h().be_http_addr().to_string()
    }

    pub fn query_port(&self) -> u16 {
        self.h().query_addr().port()
    }

    pub fn flight_port(&self) -> u16 {
        self.h().flight_sql_addr().port()
    }

    pub fn handle(&self) -> &Handle {
        self.h()
    }

    /// Writes a file under the test's temp dir.
    pub fn file(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write test file");
        p
    }

    /// Runs SQL through the mysql CLI; panics on failure. Returns rows (tab separated, no header).
    pub fn sql(&self, sql: &str) -> Vec<Vec<String>> {
        let out = self.mysql_raw(&["-N", "-B"], sql);
        assert!(out.status.success(), "mysql failed for {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
    }

    /// Runs SQL expecting an error; returns stderr.
    pub fn sql_err(&self, sql: &str) -> String {
        let out = self.mysql_raw(&["-N", "-B"], sql);
        assert!(!out.status.success(), "expected an error for {sql}");
        // The CLI may echo the statement before the ERROR line.
        let err = String::from_utf8_lossy(&out.stderr);
        match err.find("ERROR ") {
            Some(i) => err[i..].trim().to_string(),
            None => err.trim().to_string(),
        }
    }

    pub fn mysql_raw(&self, extra: &[&str], sql: &str) -> Output {
        let port = self.query_port().to_string();
        Command::new("mysql")
            .args(["-h127.0.0.1", "-P", &port, "-uroot", "--connect-timeout=5"])
            .args(extra)
            .args(["-e", sql])
            .output()
            .expect("the mysql CLI (apt-get install default-mysql-client or mariadb-client) must be installed")
    }

    /// `curl --location-trusted -u root: -H … -T file http://FE/api/db/table/_stream_load`.
    pub fn stream_load(&self, db: &str, table: &str, headers: &[&str], file: &Path) -> Value {
        let url = format!("http://{}/api/{db}/{table}/_stream_load", self.fe());
        let mut args: Vec<String> = vec!["-sS".into(), "--location-trusted".into(), "-u".into(), "root:".into()];
        for h in headers {
            args.push("-H".into());
            args.push(h.to_string());
        }
        args.push("-T".into());
        args.push(file.display().to_string());
        args.push(url);
        curl_json(&args)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.stop());
        }
    }
}

/// Runs curl and parses its JSON output.
pub fn curl_json(args: &[String]) -> Value {
    let out = curl(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("curl output is not JSON ({e}): {out}"))
}

/// Runs curl and returns stdout.
pub fn curl(args: &[String]) -> String {
    let out = Command::new("curl").args(args).output().expect("curl must be installed");
    assert!(out.status.success(), "curl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Shorthand for building curl argument lists.
/// A 2PC commit or abort of database `test` as the Doris manual does it with curl: `header` is
/// `label:…` or `txn_id:…`, `op` is `commit` or `abort`.
pub fn two_pc(fe: &str, header: &str, op: &str) -> Value {
    curl_json(&args(&[
        "-sS",
        "-X",
        "PUT",
        "--location-trusted",
        "-u",
        "root:",
        "-H",
        header,
        "-H",
        &format!("txn_operation:{op}"),
        &format!("http://{fe}/api/test/_stream_load_2pc"),
    ]))
}

/// A Stream Load of `file` into `db`.`table` at the FE `fe` with curl, as the Doris manual shows:
/// the label, then `headers` (`name:value`).
pub fn curl_load(fe: &str, db: &str, table: &str, label: &str, headers: &[&str], file: &Path) -> Value {
    let mut a = args(&["-sS", "--location-trusted", "-u", "root:", "-H", &format!("label:{label}")]);
    for h in headers {
        a.extend(args(&["-H", h]));
    }
    a.extend(args(&["-T", &file.display().to_string(), &format!("http://{fe}/api/{db}/{table}/_stream_load")]));
    curl_json(&a)
}

pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Keys of a JSON object in order.
pub fn keys(v: &Value) -> Vec<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

/// `$SLUICE_TEST_VENV`, else `<target dir>/../doris-lite-venv`.
fn venv_dir() -> PathBuf {
    if let Ok(v) = std::env::var("SLUICE_TEST_VENV") {
        return PathBuf::from(v);
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| {
        // target/<profile>/deps/it-<hash>
        std::env::current_exe()
            .ok()
            .and_then(|p| p.ancestors().nth(3).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("target"))
    });
    target.join("..").join("doris-lite-venv")
}

/// The Python client libraries the tests use: (import name, PyPI requirement), every one pinned.
const PY_PACKAGES: &[(&str, &str)] = &[
    ("pymysql", "pymysql==1.2.4"),
    ("pyarrow.flight", "pyarrow==26.0.1"),
    ("adbc_driver_flightsql.dbapi", "adbc_driver_flightsql==1.13.0"),
    ("adbc_driver_manager", "adbc_driver_manager==1.13.0"),
    ("mysql.connector", "mysql-connector-python==26.10.0"),
    // pydoris' `doris://` SQLAlchemy dialect runs over mysqlclient (built against libmysqlclient).
    ("pydoris.sqlalchemy.dialect", "pydoris==1.2.0"),
    ("MySQLdb", "mysqlclient==2.3.2"),
    ("sqlalchemy", "sqlalchemy==2.1.9"),
    ("sqlalchemy_doris", "sqlalchemy-doris[pymysql]==0.2.2"),
    ("DorisClient", "dorisclient==1.2.22"),
];

static VENV: Mutex<()> = Mutex::new(());

/// A virtualenv's python with the client libraries of [`PY_PACKAGES`], made and filled from PyPI
/// on first use, and filled again when that list changes (the venv records it in `.requirements`).
pub fn python() -> PathBuf {
    let _guard = VENV.lock().unwrap_or_else(|e| e.into_inner());
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let record = venv.join(".requirements");
    let wanted = PY_PACKAGES.iter().map(|(_, p)| *p).collect::<Vec<_>>().join("\n");
    let imports = PY_PACKAGES.iter().map(|(m, _)| format!("import {m}")).collect::<Vec<_>>().join("; ");
    let ready = |py: &PathBuf| Command::new(py).args(["-c", &imports]).status().is_ok_and(|s| s.success());
    let recorded = std::fs::read_to_string(&record).is_ok_and(|r| r == wanted);
    if python.exists() && recorded && ready(&python) {
        return python;
    }
    if !python.exists() {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is required for the Python client tests");
        assert!(st.success(), "python3 -m venv {} failed (install python3-venv)", venv.display());
    }
    let st = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet"])
        .args(PY_PACKAGES.iter().map(|(_, p)| *p))
        .status()
        .expect("pip");
    assert!(st.success(), "pip install of the Python test clients failed");
    assert!(ready(&python), "the Python test clients do not import");
    std::fs::write(&record, &wanted).expect("record the venv's requirements");
    python
}

/// Runs a Python script with arguments; panics with its output unless it exits 0. Returns stdout.
pub fn run_python(script: &str, args: &[String]) -> String {
    let out = Command::new(python()).arg("-c").arg(script).args(args).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "python failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}
