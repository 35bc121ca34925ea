//! `server.toml`: where `sluice serve` listens and keeps its data, the connections it holds the
//! secrets of, and its tenants with their tokens, grants and quotas.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::pipeline::{ByteSize, Connection, read_connection};
use crate::wasm::PluginLimits;

/// The file as read.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The file (for messages; paths in it are relative to its directory).
    pub file: PathBuf,
    pub server: ServerSection,
    pub connections: BTreeMap<String, Connection>,
    pub tenants: BTreeMap<String, TenantConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: ServerSection,
    #[serde(default)]
    connections: BTreeMap<String, toml::Table>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantConfig>,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// The API, `/metrics` and the live view (default `127.0.0.1:8080`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Pipelines, their state and uploaded plugins (default `serve-data` beside the file).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// A directory watched for pipeline files: `<dir>/<tenant>/<file>.toml` runs as that
    /// tenant's; a changed file restarts its pipeline, a removed one stops it.
    pub pipelines_dir: Option<PathBuf>,
    /// Prebuilt `.wasm` plugins every tenant may name (besides its own uploads).
    pub plugin_dir: Option<PathBuf>,
    /// SHA-256 (hex) of the admin token, which sees and controls every tenant's pipelines.
    pub admin_token_sha256: Option<String>,
    /// Plugin calls running at once in the process, shared evenly by the tenants (default:
    /// the machine's cores).
    pub plugin_threads: Option<usize>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("serve-data")
}

/// `[tenants.<name>]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// SHA-256 (hex) of the tenant's API token: `printf %s "$TOKEN" | sha256sum`.
    pub token_sha256: String,
    /// The server's connections the tenant's pipelines may name.
    #[serde(default)]
    pub connections: Vec<String>,
    /// Doris tables it may read: `db.table`, `db.*`, `db.prefix_*`, `*`.
    #[serde(default)]
    pub read: Vec<String>,
    /// Doris tables it may write (the same patterns).
    #[serde(default)]
    pub write: Vec<String>,
    /// Pipelines it may have (default 10).
    #[serde(default = "default_max_pipelines")]
    pub max_pipelines: usize,
    /// Workers of all its pipelines together (default 8).
    #[serde(default = "default_max_workers")]
    pub max_workers: usize,
    /// Stream Loads open at once over all its pipelines (default: no limit).
    pub max_stream_loads: Option<usize>,
    /// Linear memory of one plugin instance at most (default 256MB).
    pub plugin_memory: Option<ByteSize>,
    /// Time of one plugin call at most (default 3s).
    pub plugin_timeout: Option<crate::pipeline::Duration>,
    /// Fuel (about one per WebAssembly instruction) of one plugin call at most (default: not
    /// metered).
    pub plugin_fuel: Option<u64>,
    /// CPU time all its plugin calls together may use per minute, e.g. `"6s"` for a tenth of a
    /// core (default: no budget). A call that overspends it is paused until the budget has
    /// refilled, so the tenant's plugins use at most this much CPU however many there are and
    /// whatever they do.
    pub plugin_cpu_per_minute: Option<crate::pipeline::Duration>,
    /// API calls that change something (submit, pause/resume/stop/savepoint, delete, plugin
    /// uploads) it may make per minute; beyond it, `429` with `Retry-After` (default: no limit).
    pub api_writes_per_minute: Option<u32>,
    /// How a failed pipeline is restarted from its last checkpoint.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Where its pipelines that have no `[dead_letter]` of their own set aside the rows they
    /// cannot deliver: a Doris table it may write (created when missing).
    pub dead_letter: Option<TenantDeadLetter>,
    /// Object stores its pipelines may keep a `[cluster]`'s checkpoints in, `s3://bucket/prefix`:
    /// a clustered pipeline's `store` must be one of them or under one (default: none, so a
    /// pipeline with `[cluster]` is refused). Its etcd keys are under `/sluice/<tenant>/<pipeline>`,
    /// apart from other tenants' and from `sluice run`'s.
    #[serde(default)]
    pub clusters: Vec<String>,
}

/// `[tenants.<name>.dead_letter]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantDeadLetter {
    /// `db.table`; one of the tenant's `write` grants must cover it.
    pub table: String,
    /// One of the tenant's connections (default: its pipeline's default Doris connection).
    pub connection: Option<String>,
}

impl TenantDeadLetter {
    /// Give `file` this dead-letter table, unless it has a `[dead_letter]` of its own.
    pub fn apply(&self, file: &mut crate::pipeline::PipelineFile) -> anyhow::Result<()> {
        if file.dead_letter.is_some() {
            return Ok(());
        }
        let mut t = toml::Table::new();
        t.insert("table".into(), self.table.clone().into());
        if let Some(c) = &self.connection {
            t.insert("connection".into(), c.clone().into());
        }
        let sink: crate::sinks::doris::DorisSink = crate::pipeline::read(t).map_err(|(k, m)| {
            anyhow::anyhow!("the tenant's dead_letter{}: {m}", k.map(|k| format!(".{k}")).unwrap_or_default())
        })?;
        file.dead_letter = Some(crate::pipeline::Entry {
            kind: "doris",
            name: "dead_letter".into(),
            line: 0,
            config: std::sync::Arc::new(sink),
        });
        Ok(())
    }
}

fn default_max_pipelines() -> usize {
    10
}

fn default_max_workers() -> usize {
    8
}

/// `[tenants.<name>.restart]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RestartPolicy {
    /// Restarts in a row before the pipeline is left failed (a completed checkpoint resets the
    /// count; default 10).
    pub max_restarts: u32,
    /// The first wait (default 1s); each next one doubles, up to `max_backoff` (default 60s).
    pub backoff: crate::pipeline::Duration,
    pub max_backoff: crate::pipeline::Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        use crate::pipeline::Duration as D;
        Self { max_restarts: 10, backoff: D(Duration::from_secs(1)), max_backoff: D(Duration::from_secs(60)) }
    }
}

impl TenantConfig {
    /// The limits of its plugin instances.
    pub fn plugin_limits(&self) -> PluginLimits {
        let d = PluginLimits::default();
        PluginLimits {
            memory: self.plugin_memory.map_or(d.memory, |b| b.0),
            timeout: self.plugin_timeout.map_or(d.timeout, |t| t.0),
            fuel: self.plugin_fuel,
        }
    }
}

/// Names of tenants and connections: letters, digits, `-`, `_`.
fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())
}

impl ServerConfig {
    /// Read and check `server.toml`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read the server file: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> anyhow::Result<Self> {
        let at = path.display();
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| text[..s.start].matches('\n').count() + 1);
            let msg = e.message().lines().next().unwrap_or_default().to_string();
            match line {
                Some(l) => anyhow::anyhow!("{at}:{l}: {msg}"),
                None => anyhow::anyhow!("{at}: {msg}"),
            }
        })?;
        let mut connections = BTreeMap::new();
        for (name, table) in raw.connections {
            let mut conn = read_connection(table).map_err(|(key, m)| {
                let key = key.map(|k| format!(".{k}")).unwrap_or_default();
                anyhow::anyhow!("{at}: connections.{name}{key}: {m}")
            })?;
            // TLS files are relative to the server file.
            if let Connection::Doris(d) = &mut conn {
                d.resolve_paths(path.parent().unwrap_or(Path::new("")));
            }
            connections.insert(name, conn);
        }
        if let Some(h) = &raw.server.admin_token_sha256
            && !is_sha256_hex(h)
        {
            anyhow::bail!(
                "{at}: server.admin_token_sha256: expected 64 hex digits (`printf %s \"$TOKEN\" | sha256sum`)"
            );
        }
        for (name, t) in &raw.tenants {
            if !is_name(name) {
                anyhow::bail!("{at}: tenants.{name}: a tenant's name is letters, digits, `-` or `_`");
            }
            if !is_sha256_hex(&t.token_sha256) {
                anyhow::bail!(
                    "{at}: tenants.{name}.token_sha256: expected 64 hex digits (`printf %s \"$TOKEN\" | sha256sum`)"
                );
            }
            if let Some(c) = t.connections.iter().find(|c| !connections.contains_key(*c)) {
                anyhow::bail!("{at}: tenants.{name}.connections: there is no [connections.{c}] in this file");
            }
            for (key, patterns) in [("read", &t.read), ("write", &t.write)] {
                if let Some(p) = patterns.iter().find(|p| super::grant::Pattern::parse(p).is_none()) {
                    anyhow::bail!(
                        "{at}: tenants.{name}.{key}: {p:?} is not a table pattern; write `db.table`, `db.*`, `db.prefix_*` or `*`"
                    );
                }
            }
            if t.plugin_cpu_per_minute.is_some_and(|c| c.0 < Duration::from_millis(1)) {
                anyhow::bail!(
                    "{at}: tenants.{name}.plugin_cpu_per_minute: must be at least 1ms (leave it out for no budget)"
                );
            }
            if t.api_writes_per_minute == Some(0) {
                anyhow::bail!(
                    "{at}: tenants.{name}.api_writes_per_minute: must be at least 1 (leave it out for no limit)"
                );
            }
            if t.max_stream_loads == Some(0) {
                anyhow::bail!("{at}: tenants.{name}.max_stream_loads: must be at least 1");
            }
            if let Some(d) = &t.dead_letter {
                if !d.table.split_once('.').is_some_and(|(db, tb)| !db.is_empty() && !tb.is_empty()) {
                    anyhow::bail!("{at}: tenants.{name}.dead_letter.table: expected `db.table`, got {:?}", d.table);
                }
                if !super::grant::Tables::of(t).may_write(&d.table) {
                    anyhow::bail!(
                        "{at}: tenants.{name}.dead_letter.table: the tenant may not write `{}`; add it to tenants.{name}.write",
                        d.table
                    );
                }
                if let Some(c) = d.connection.as_ref().filter(|c| !t.connections.contains(c)) {
                    anyhow::bail!(
                        "{at}: tenants.{name}.dead_letter.connection: `{c}` is not one of tenants.{name}.connections"
                    );
                }
            }
        }
        let mut duplicate =
            raw.tenants.iter().map(|(n, t)| (t.token_sha256.to_ascii_lowercase(), n)).collect::<Vec<_>>();
        duplicate.sort();
        if let Some(w) = duplicate.windows(2).find(|w| w[0].0 == w[1].0) {
            anyhow::bail!("{at}: tenants.{} and tenants.{} have the same token", w[0].1, w[1].1);
        }
        Ok(Self { file: path.to_path_buf(), server: raw.server, connections, tenants: raw.tenants })
    }

    /// A path of the file, relative to its directory.
    pub fn path(&self, p: &Path) -> PathBuf {
        self.file.parent().map(|d| d.join(p)).unwrap_or_else(|| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn tls_files_of_a_connection_are_relative_to_the_server_file() {
        let text = "[server]\nlisten = \"127.0.0.1:0\"\n[connections.dw]\ntype = \"doris\"\nfenodes = [\"127.0.0.1:8030\"]\nenable_tls = true\ntls_ca_certificate_path = \"certs/ca.pem\"\ntls_client_certificate_path = \"/etc/sluice/client.pem\"\ntls_client_key_path = \"client.key\"\n";
        let c = ServerConfig::parse(Path::new("/srv/sluice/server.toml"), text).unwrap();
        let Connection::Doris(d) = &c.connections["dw"] else { panic!("a doris connection") };
        assert_eq!(d.tls_ca_certificate_path.as_deref(), Some(Path::new("/srv/sluice/certs/ca.pem")));
        assert_eq!(d.tls_client_certificate_path.as_deref(), Some(Path::new("/etc/sluice/client.pem")));
        assert_eq!(d.tls_client_key_path.as_deref(), Some(Path::new("/srv/sluice/client.key")));
    }

    #[test]
    fn tenants_read_with_defaults_and_mistakes_name_the_key() {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[connections.dw]\ntype = \"doris\"\nfenodes = [\"127.0.0.1:8030\"]\n[tenants.a]\ntoken_sha256 = \"{HASH}\"\nconnections = [\"dw\"]\nwrite = [\"a.*\"]\nplugin_memory = \"64MB\"\n"
        );
        let c = ServerConfig::parse(Path::new("server.toml"), &text).unwrap();
        let a = &c.tenants["a"];
        assert_eq!(a.max_pipelines, 10);
        assert_eq!(a.plugin_limits().memory, 64_000_000);
        assert_eq!(a.restart.max_restarts, 10);
        let bad = text.replace("connections = [\"dw\"]", "connections = [\"nope\"]");
        let e = ServerConfig::parse(Path::new("server.toml"), &bad).unwrap_err().to_string();
        assert_eq!(e, "server.toml: tenants.a.connections: there is no [connections.nope] in this file");
        let bad = text.replace("write = [\"a.*\"]", "write = [\"a\"]");
        let e = ServerConfig::parse(Path::new("server.toml"), &bad).unwrap_err().to_string();
        assert!(e.starts_with("server.toml: tenants.a.write: \"a\" is not a table pattern"), "{e}");
        let dead = format!("{text}[tenants.a.dead_letter]\ntable = \"a.dead_letters\"\n");
        let c = ServerConfig::parse(Path::new("server.toml"), &dead).unwrap();
        assert_eq!(c.tenants["a"].dead_letter.as_ref().unwrap().table, "a.dead_letters");
        let e = ServerConfig::parse(Path::new("server.toml"), &dead.replace("a.dead_letters", "ops.dead_letters"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "server.toml: tenants.a.dead_letter.table: the tenant may not write `ops.dead_letters`; add it to tenants.a.write"
        );
        let bad = text.replace("plugin_memory", "plugin_memroy");
        let e = ServerConfig::parse(Path::new("server.toml"), &bad).unwrap_err().to_string();
        assert!(e.starts_with("server.toml:10: unknown field `plugin_memroy`"), "{e}");
    }
}
