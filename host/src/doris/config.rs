//! A Doris connection's options (`[doris]`, `[connections.<name>] type = "doris"`): what a
//! pipeline file says of the cluster, its credentials and its TLS.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::pipeline::Duration;

/// The name of the connection `[doris]` defines.
pub const DEFAULT_DORIS: &str = "doris";

/// The password in the environment variable `var`, if one is named; `key` names the option in
/// the error (the value itself is never printed).
pub fn password_from_env(var: Option<&str>, key: &str) -> Result<Option<String>, String> {
    match var {
        Some(var) => std::env::var(var)
            .map(Some)
            .map_err(|_| format!("{key}.password_env: the environment variable `{var}` is not set")),
        None => Ok(None),
    }
}

/// `fenodes`: `"embedded"` (start doris-lite in-process) or a list of FE `host:http_port`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FeNodes {
    List(Vec<String>),
    One(String),
}

impl FeNodes {
    pub fn is_embedded(&self) -> bool {
        matches!(self, FeNodes::One(s) if s == "embedded")
    }

    /// The FE addresses; a single string may list several, comma separated (as the connector).
    pub fn addresses(&self) -> Vec<String> {
        match self {
            FeNodes::List(l) => l.clone(),
            FeNodes::One(s) => s.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect(),
        }
    }
}

/// `[doris]`, or `[connections.<name>] type = "doris"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DorisSection {
    /// FE HTTP addresses, or `"embedded"`.
    pub fenodes: FeNodes,
    /// BE HTTP addresses (used when `auto_redirect = false`).
    #[serde(default)]
    pub benodes: Vec<String>,
    #[serde(default = "default_username")]
    pub username: String,
    /// The password, inline. Prefer `password_env`.
    #[serde(default)]
    pub password: Option<String>,
    /// The environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// `jdbc:mysql://host:9030` — the MySQL-protocol endpoint (lookups, DDL, offsets).
    #[serde(default)]
    pub jdbc_url: Option<String>,
    /// Send Stream Loads through the FE, which redirects to a BE (default true).
    #[serde(default = "default_true")]
    pub auto_redirect: bool,
    /// `doris.request.retries` (default 3).
    #[serde(default = "default_request_retries")]
    pub request_retries: u32,
    /// `doris.request.connect.timeout` (default 30s).
    #[serde(default = "default_request_timeout")]
    pub request_connect_timeout: Duration,
    /// `doris.request.read.timeout` (default 30s).
    #[serde(default = "default_request_timeout")]
    pub request_read_timeout: Duration,
    /// With `fenodes = "embedded"`: SQL statements (a file, relative to the pipeline file) run at
    /// start, to create and fill tables for local runs. Write them to be repeatable
    /// (`CREATE … IF NOT EXISTS`, UNIQUE keys).
    #[serde(default)]
    pub init_sql: Option<PathBuf>,
    /// `doris.enable.tls`: https to the FEs and BEs, and Arrow Flight SQL and the MySQL protocol
    /// over TLS.
    #[serde(default)]
    pub enable_tls: bool,
    /// `doris.tls.ca-certificate-path`: the PEM CA certificates that sign Doris' certificates
    /// (relative to the pipeline file); the system's roots without it.
    #[serde(default)]
    pub tls_ca_certificate_path: Option<PathBuf>,
    /// A PEM client certificate chain, for a Doris that asks for one (with `tls_client_key_path`).
    #[serde(default)]
    pub tls_client_certificate_path: Option<PathBuf>,
    /// The PEM private key of `tls_client_certificate_path`.
    #[serde(default)]
    pub tls_client_key_path: Option<PathBuf>,
    /// `doris.tls.skip-hostname-verification`: check the certificate chain but not the name in
    /// it (warned at every start; refused for Arrow Flight SQL, which fails closed).
    #[serde(default)]
    pub tls_skip_hostname_verification: bool,
    /// `doris.tls.excluded-protocols`: protocols kept in plain text, of `http`, `mysql` and
    /// `arrowflight`.
    #[serde(default)]
    pub tls_excluded_protocols: Vec<String>,
}

impl DorisSection {
    /// Make the TLS file paths that are relative, relative to `base` (the directory of the file
    /// that names them).
    pub fn resolve_paths(&mut self, base: &Path) {
        for p in
            [&mut self.tls_ca_certificate_path, &mut self.tls_client_certificate_path, &mut self.tls_client_key_path]
                .into_iter()
                .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Whether `protocol` (`http`, `mysql`, `arrowflight`) goes over TLS.
    pub fn tls_for(&self, protocol: &str) -> bool {
        self.enable_tls && !self.tls_excluded_protocols.iter().any(|p| p == protocol)
    }
}

pub(crate) fn default_username() -> String {
    "root".into()
}

fn default_true() -> bool {
    true
}

fn default_request_retries() -> u32 {
    3
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

/// Whether MySQL-protocol reads have an address: `jdbc_url`, or the embedded doris-lite's query
/// port, which `sluice run` and `sluice check` fill in.
pub fn has_jdbc_url(doris: &DorisSection) -> bool {
    doris.jdbc_url.is_some() || doris.fenodes.is_embedded()
}
