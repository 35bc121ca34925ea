//! Real servers for tests of clustered pipelines, as processes on loopback: an etcd cluster of
//! Debian's `etcd` (`$SLUICE_ETCD`, else `etcd` on the PATH) and an S3 server (`moto_server`
//! from PyPI: `$SLUICE_MOTO_SERVER`, else on the PATH). Feature `testing`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Wait until `child` listens on `port`; `Err` if it exited first (another test's server took
/// the port between [`free_port`] and its start: start again on other ports).
fn wait_for_port(port: u16, what: &str, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited at start: {status}"));
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port} within 30s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `start` tried up to three times.
fn with_retries<T>(mut start: impl FnMut() -> Result<T, String>) -> T {
    let mut last = String::new();
    for _ in 0..3 {
        match start() {
            Ok(t) => return t,
            Err(e) => last = e,
        }
    }
    panic!("{last}")
}

/// An etcd cluster of `n` members.
pub struct Etcd {
    pub endpoints: Vec<String>,
    members: Vec<Option<Child>>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub fn start(n: usize) -> Etcd {
        with_retries(|| Self::try_start(n))
    }

    fn try_start(n: usize) -> Result<Etcd, String> {
        let bin = std::env::var("SLUICE_ETCD").unwrap_or_else(|_| "etcd".into());
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, p))| format!("m{i}=http://127.0.0.1:{p}")).collect();
        let token = format!("sluice-test-{}", ports[0].0);
        let mut members = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let log = std::fs::File::create(dir.path().join(format!("m{i}.log"))).unwrap();
            let child = Command::new(&bin)
                .args(["--name", &format!("m{i}")])
                .args(["--data-dir", dir.path().join(format!("m{i}")).to_str().unwrap()])
                .args(["--listen-client-urls", &format!("http://127.0.0.1:{client}")])
                .args(["--advertise-client-urls", &format!("http://127.0.0.1:{client}")])
                .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
                .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-state", "new", "--initial-cluster-token", &token])
                .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {bin} (Debian's etcd-server; tests/run.sh installs it): {e}"));
            members.push(Some(child));
        }
        let mut etcd = Etcd {
            endpoints: ports.iter().map(|(c, _)| format!("http://127.0.0.1:{c}")).collect(),
            members,
            _dir: dir,
        };
        for (i, (client, _)) in ports.iter().enumerate() {
            wait_for_port(*client, &format!("etcd member m{i}"), etcd.members[i].as_mut().unwrap())?;
        }
        Ok(etcd)
    }

    /// `etcd://host:port,…` for a pipeline's `[cluster]`.
    pub fn url(&self) -> String {
        format!(
            "etcd://{}",
            self.endpoints.iter().map(|e| e.trim_start_matches("http://")).collect::<Vec<_>>().join(",")
        )
    }

    /// kill -9 member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// moto's S3 server, with one bucket.
pub struct S3 {
    pub port: u16,
    pub bucket: String,
    child: Option<Child>,
}

impl S3 {
    pub fn start(bucket: &str) -> S3 {
        with_retries(|| Self::try_start(bucket))
    }

    fn try_start(bucket: &str) -> Result<S3, String> {
        let bin: PathBuf = std::env::var("SLUICE_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into()).into();
        // Port 0: the server takes a free port and says which (" * Running on http://…:PORT").
        let mut child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {} (moto[server] from PyPI; tests/run.sh installs it): {e}", bin.display())
            });
        let stderr = child.stderr.take().unwrap();
        // Dropped on every early return: killed and waited for.
        let mut s3 = S3 { port: 0, bucket: bucket.to_string(), child: Some(child) };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut sent = false;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = line.split("Running on http://127.0.0.1:").nth(1)
                    && !sent
                {
                    sent = tx.send(port.trim().parse::<u16>().ok()).is_ok();
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(port)) => port,
            other => return Err(format!("moto_server did not say its port: {other:?}")),
        };
        s3.port = port;
        wait_for_port(port, "moto_server", s3.child.as_mut().unwrap())?;
        // Make the bucket: moto takes an unsigned CreateBucket.
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        use std::io::{Read, Write};
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "CreateBucket: {answer}");
        Ok(s3)
    }

    /// The settings that reach it.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", format!("http://127.0.0.1:{}", self.port)),
            ("aws_access_key_id", "test".into()),
            ("aws_secret_access_key", "test".into()),
            ("aws_region", "us-east-1".into()),
        ]
    }

    /// The environment that points the AWS tools (and Sluice) at it.
    pub fn env(&self) -> Vec<(String, String)> {
        self.settings().into_iter().map(|(k, v)| (k.to_ascii_uppercase(), v)).collect()
    }

    /// `s3://bucket/prefix` for a pipeline's `[cluster]`.
    pub fn store_url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    pub fn store(&self, prefix: &str) -> crate::StateStore {
        let settings = self.settings();
        let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        crate::StateStore::open_with(&format!("s3://{}/{prefix}", self.bucket), &settings).unwrap()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.kill();
    }
}
