//! Real servers for tests of clustered pipelines, as processes on loopback: an etcd cluster of
//! Debian's `etcd` (`$SLUICE_ETCD`, else `etcd` on the PATH) and an S3 server (`moto_server`
//! from PyPI: `$SLUICE_MOTO_SERVER`, else on the PATH). Feature `testing`.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, mpsc};
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

/// Wait until the etcd member `child` answers its `/health` on `port` with a leader elected;
/// `Err` if it exited first or something else answers there.
fn wait_until_healthy(port: u16, what: &str, child: &mut Child) -> Result<(), String> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited at start: {status}"));
        }
        let mut reply = String::new();
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let asked = stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_ok();
            if asked {
                let _ = stream.read_to_string(&mut reply);
            }
        }
        if reply.contains("\"health\":\"true\"") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{what} on port {port} is not a healthy etcd within 30s (it answered {reply:?})"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
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
            let what = format!("etcd member m{i}");
            let child = etcd.members[i].as_mut().unwrap();
            wait_for_port(*client, &what, child)?;
            // The port may answer for another test's server that took it first (etcd then exits):
            // it is this member once etcd's own health check says so.
            wait_until_healthy(*client, &what, child)?;
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

/// moto's S3 server, with one bucket. [`S3::start_relayed`] puts it behind a [`Relay`] and keeps
/// moto's recording of every request, so that it can be killed in the middle of a request and
/// started again with what it held ([`S3::restart`]).
pub struct S3 {
    /// Where clients connect: moto, or its relay.
    pub port: u16,
    pub bucket: String,
    child: Option<Child>,
    relay: Option<Relay>,
    /// moto's request log (`MOTO_RECORDER_FILEPATH`), when relayed.
    recording: Option<tempfile::TempDir>,
}

impl S3 {
    pub fn start(bucket: &str) -> S3 {
        let (child, port) = with_retries(|| Self::spawn(None));
        create_bucket(port, bucket);
        S3 { port, bucket: bucket.to_string(), child: Some(child), relay: None, recording: None }
    }

    /// moto behind a relay, recording every request it serves.
    pub fn start_relayed(bucket: &str) -> S3 {
        let recording = tempfile::tempdir().unwrap();
        let (child, port) = with_retries(|| Self::spawn(Some(&recording.path().join("requests.jsonl"))));
        create_bucket(port, bucket);
        let relay = Relay::start(port);
        S3 {
            port: relay.port,
            bucket: bucket.to_string(),
            child: Some(child),
            relay: Some(relay),
            recording: Some(recording),
        }
    }

    /// A moto server on a free port (recording its requests to `recording`, if given).
    fn spawn(recording: Option<&std::path::Path>) -> Result<(Child, u16), String> {
        let bin: PathBuf = std::env::var("SLUICE_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into()).into();
        let mut command = Command::new(&bin);
        if let Some(path) = recording {
            command.env("MOTO_ENABLE_RECORDING", "true").env("MOTO_RECORDER_FILEPATH", path);
        }
        // Port 0: the server takes a free port and says which (" * Running on http://…:PORT").
        let mut child = command
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {} (moto[server] from PyPI; tests/run.sh installs it): {e}", bin.display())
            });
        let stderr = child.stderr.take().unwrap();
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
            other => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("moto_server did not say its port: {other:?}"));
            }
        };
        if let Err(e) = wait_for_port(port, "moto_server", &mut child) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok((child, port))
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

    /// The relay holds the next request whose first bytes contain `pattern` (`PUT /bucket/key`):
    /// from then on no connection reaches moto. See [`Trapped`].
    pub fn trap(&self, pattern: &str) -> Trapped {
        self.relay.as_ref().expect("S3::start_relayed").trap(pattern)
    }

    /// Kill moto (SIGKILL): what it was doing is cut off.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start moto again after [`S3::kill`], with every object it held (its recording replayed),
    /// and only then let connections through the relay again.
    pub fn restart(&mut self) {
        self.kill();
        let path = self.recording.as_ref().expect("S3::start_relayed").path().join("requests.jsonl");
        let (child, port) = with_retries(|| Self::spawn(Some(&path)));
        self.child = Some(child);
        let answer = http(port, "POST /moto-api/recorder/replay-recording", "");
        assert!(answer.starts_with("HTTP/1.1 200"), "moto's replay: {answer}");
        self.relay.as_ref().expect("relayed").upstream.store(port, Ordering::SeqCst);
    }
}

/// One request to 127.0.0.1:`port`, `Connection: close`; the whole answer.
fn http(port: u16, request_line: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{request_line} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// Make the bucket: moto takes an unsigned CreateBucket.
fn create_bucket(port: u16, bucket: &str) {
    let answer = http(port, &format!("PUT /{bucket}"), "");
    assert!(answer.starts_with("HTTP/1.1 200"), "CreateBucket: {answer}");
}

/// A request held by the relay: [`Trapped::caught`] gives its request line once it arrives; the
/// relay keeps its connection open, neither answered nor forwarded, until [`Trapped::release`],
/// then drops it.
pub struct Trapped {
    caught: mpsc::Receiver<String>,
    go: mpsc::Sender<()>,
}

impl Trapped {
    /// The held request's first line, once it has come (`None` if none came within `wait`).
    pub fn caught(&self, wait: Duration) -> Option<String> {
        self.caught.recv_timeout(wait).ok()
    }

    /// Drop the held connection (as a dead server's socket is).
    pub fn release(&self) {
        let _ = self.go.send(());
    }
}

struct Trap {
    pattern: Vec<u8>,
    caught: mpsc::Sender<String>,
    go: mpsc::Receiver<()>,
}

/// A TCP relay on loopback in front of a server: it passes bytes both ways unchanged, and can
/// hold one request ([`S3::trap`]). Upstream port 0: every connection is closed at once (the
/// server is down).
struct Relay {
    port: u16,
    upstream: Arc<AtomicU16>,
    trap: Arc<Mutex<Option<Trap>>>,
}

impl Relay {
    fn start(upstream: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let relay = Relay { port, upstream: Arc::new(AtomicU16::new(upstream)), trap: Arc::new(Mutex::new(None)) };
        let (upstream, trap) = (relay.upstream.clone(), relay.trap.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let (upstream, trap) = (upstream.clone(), trap.clone());
                std::thread::spawn(move || relay_connection(client, &upstream, &trap));
            }
        });
        relay
    }

    fn trap(&self, pattern: &str) -> Trapped {
        let (caught_tx, caught) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        *self.trap.lock().unwrap() = Some(Trap { pattern: pattern.as_bytes().to_vec(), caught: caught_tx, go: go_rx });
        Trapped { caught, go }
    }
}

fn relay_connection(mut client: TcpStream, upstream: &AtomicU16, trap: &Mutex<Option<Trap>>) {
    use std::io::{Read, Write};
    let port = upstream.load(Ordering::SeqCst);
    let Some(mut server) = (port != 0).then(|| TcpStream::connect(("127.0.0.1", port)).ok()).flatten() else {
        return;
    };
    let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone()) else { return };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = server.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let mut armed = trap.lock().unwrap();
        let hit = armed.as_ref().and_then(|t| chunk.windows(t.pattern.len()).position(|w| w == t.pattern));
        if let Some(at) = hit {
            let t = armed.take().expect("armed");
            drop(armed);
            upstream.store(0, Ordering::SeqCst);
            let line = String::from_utf8_lossy(&chunk[at..]).lines().next().unwrap_or_default().to_string();
            let _ = t.caught.send(line);
            let _ = t.go.recv_timeout(Duration::from_secs(60));
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        drop(armed);
        if server.write_all(chunk).is_err() {
            return;
        }
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.kill();
    }
}
