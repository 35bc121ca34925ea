//! The FE client: REST and SQL APIs, the TSO, query plans, Stream Load and its two-phase commit, as
//! Doris' HTTP API defines them.
//!
//! Doris' FE answers a Stream Load with a 307 redirect to a BE without reading the body. HTTP
//! clients either drop the `Authorization` header on a cross-host redirect or cannot replay a
//! streamed body, so the BE is resolved first with an empty probe request, and the body is then
//! streamed straight to the BE with credentials.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{AUTHORIZATION, EXPECT, HeaderMap, HeaderName, HeaderValue, LOCATION};
use serde::Deserialize;

use super::{DorisError, Label, TxnId, TxnState};

/// Username and password. The password is never printed.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    password: String,
}

impl Credentials {
    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self { user: user.into(), password: password.into() }
    }

    fn basic(&self) -> HeaderValue {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", self.user, self.password));
        let mut v = HeaderValue::from_str(&format!("Basic {token}")).unwrap_or(HeaderValue::from_static(""));
        v.set_sensitive(true);
        v
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

/// `Status` of a Stream Load reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadStatus {
    Success,
    /// Committed; visibility follows later. Counts as success.
    PublishTimeout,
    /// The label was used before; `ExistingJobStatus` says how far that load got.
    LabelAlreadyExists {
        existing: String,
    },
    Fail,
    Other(String),
}

/// The JSON reply of a Stream Load.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LoadResponse {
    pub txn_id: TxnId,
    pub label: Label,
    pub status: String,
    #[serde(default)]
    pub existing_job_status: Option<String>,
    pub message: String,
    #[serde(default)]
    pub two_phase_commit: Option<String>,
    #[serde(default)]
    pub number_total_rows: i64,
    #[serde(default)]
    pub number_loaded_rows: i64,
    #[serde(default)]
    pub number_filtered_rows: i64,
    #[serde(default)]
    pub number_unselected_rows: i64,
    #[serde(default)]
    pub load_bytes: i64,
    #[serde(default)]
    pub load_time_ms: i64,
    #[serde(default)]
    pub begin_txn_time_ms: i64,
    #[serde(default)]
    pub stream_load_put_time_ms: i64,
    #[serde(default)]
    pub read_data_time_ms: i64,
    #[serde(default)]
    pub write_data_time_ms: i64,
    #[serde(default)]
    pub commit_and_publish_time_ms: i64,
    #[serde(default, rename = "ErrorURL")]
    pub error_url: Option<String>,
}

impl LoadResponse {
    pub fn load_status(&self) -> LoadStatus {
        match self.status.as_str() {
            "Success" => LoadStatus::Success,
            "Publish Timeout" => LoadStatus::PublishTimeout,
            "Label Already Exists" => {
                LoadStatus::LabelAlreadyExists { existing: self.existing_job_status.clone().unwrap_or_default() }
            }
            "Fail" => LoadStatus::Fail,
            other => LoadStatus::Other(other.to_string()),
        }
    }

    /// `Success` or `Publish Timeout`.
    pub fn is_success(&self) -> bool {
        matches!(self.load_status(), LoadStatus::Success | LoadStatus::PublishTimeout)
    }

    /// The BE status code a failed load's `Message` starts with (`[DATA_QUALITY_ERROR]…`,
    /// `[ANALYSIS_ERROR]…`); none from Doris before 2.0, whose messages have no code.
    pub fn status_code(&self) -> Option<&str> {
        let rest = self.message.strip_prefix('[')?;
        let code = &rest[..rest.find(']')?];
        let word = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        word.then_some(code)
    }

    /// Whether Doris refused the load for its rows (they would be refused again on a retry):
    /// status code `DATA_QUALITY_ERROR`, or, from Doris before 2.0 (no code), a failed load that
    /// filtered rows.
    pub fn is_data_quality(&self) -> bool {
        match self.status_code() {
            Some(code) => code == "DATA_QUALITY_ERROR",
            None => self.load_status() == LoadStatus::Fail && self.number_filtered_rows > 0,
        }
    }

    /// The transaction a reused label belongs to (`… relate to txn [N]`).
    pub fn existing_txn_id(&self) -> Option<TxnId> {
        let rest = &self.message[self.message.find("relate to txn [")? + "relate to txn [".len()..];
        rest[..rest.find(']')?].parse().ok().map(TxnId)
    }
}

/// How a commit or abort ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Done now.
    Done,
    /// It had been done before (`already visible` for a commit, `already aborted` / `not found`
    /// for an abort): idempotent success.
    AlreadyDone,
}

/// A client for one Doris cluster: the FE's REST and SQL API, TSO, query plan, Stream Load and
/// its two-phase commit.
///
/// With several FEs, a request goes to the FE that answered last and moves on to the next one
/// only when it cannot connect (refused, connect timeout): an FE that answers, even with an error,
/// has spoken, and a request that may have reached it is never sent to another.
#[derive(Debug, Clone)]
pub struct FeClient {
    http: reqwest::Client,
    fenodes: Vec<String>,
    /// Index into `fenodes` of the FE that answered last; shared by the clones of a client, so
    /// every worker skips an FE that one of them found dead.
    current_fe: Arc<AtomicUsize>,
    credentials: Credentials,
    read_timeout: Duration,
    /// BE addresses loads go to directly (`auto_redirect = false`); empty = through the FE.
    backends: Vec<String>,
    /// `https` with TLS, else `http`.
    scheme: &'static str,
}

/// What the sink needs to know about a target table (`GET /api/{db}/{table}/_schema`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableInfo {
    /// `DUP_KEYS`, `UNIQUE_KEYS` or `AGG_KEYS`.
    pub keys_type: String,
    pub columns: Vec<String>,
    /// Columns and their types as `DESC` shows them (`VARCHAR(32)`), where they were asked for
    /// ([`FeClient::described`]); the schema API names types without their lengths.
    pub types: Vec<(String, String)>,
}

impl TableInfo {
    pub fn is_unique(&self) -> bool {
        self.keys_type.eq_ignore_ascii_case("UNIQUE_KEYS")
    }
}

#[derive(Deserialize)]
struct TxnReply {
    status: String,
    msg: String,
}

impl FeClient {
    /// A client for the FEs at `fenodes` (`host:http_port`).
    pub fn new(
        fenodes: Vec<String>,
        credentials: Credentials,
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> Result<Self, DorisError> {
        Self::with_tls(fenodes, credentials, connect_timeout, read_timeout, None)
    }

    /// [`FeClient::new`] over https with `tls` (every request, the BEs' too; a redirect to plain
    /// http is refused).
    pub fn with_tls(
        fenodes: Vec<String>,
        credentials: Credentials,
        connect_timeout: Duration,
        read_timeout: Duration,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, DorisError> {
        super::tls::install_provider();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut builder =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).connect_timeout(connect_timeout);
        if let Some(config) = tls {
            builder = builder.tls_backend_preconfigured(config).https_only(true);
        }
        let http =
            builder.build().map_err(|e| DorisError::Connect { url: fenodes.join(","), detail: e.to_string() })?;
        let fenodes = if fenodes.is_empty() { vec!["127.0.0.1:8030".to_string()] } else { fenodes };
        Ok(Self { http, fenodes, current_fe: Arc::default(), credentials, read_timeout, backends: Vec::new(), scheme })
    }

    /// Where a redirect from `from` to `location` goes, without the credentials it carries (they
    /// are sent as a header). Over https, a redirect to plain http is refused: the load's data and
    /// credentials would cross the network in clear.
    fn follow(&self, from: &str, location: &str) -> Result<reqwest::Url, DorisError> {
        let mut next = reqwest::Url::parse(location)
            .map_err(|e| DorisError::Protocol { url: from.to_string(), detail: format!("bad Location: {e}") })?;
        let _ = next.set_username("");
        let _ = next.set_password(None);
        if self.scheme == "https" && next.scheme() != "https" {
            next.set_query(None);
            return Err(DorisError::Protocol {
                url: from.to_string(),
                detail: format!(
                    "redirected to {next}, plain http, although TLS is on; Sluice does not send data or credentials in clear: set `auto_redirect = false` and list the BEs' https addresses in `benodes`"
                ),
            });
        }
        Ok(next)
    }

    /// The FE that answered last (the first of `fenodes` before any did).
    fn fe(&self) -> &str {
        &self.fenodes[self.current_fe.load(Ordering::Relaxed) % self.fenodes.len()]
    }

    /// Send a request built by `request` for `path` to the FEs in turn, starting with the one that
    /// answered last, until one answers. Only a failure to connect moves on to the next FE; when
    /// every FE fails the error names each and what it said.
    async fn send_fe(
        &self,
        path: &ApiPath<'_>,
        request: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<(String, reqwest::Response), DorisError> {
        let first = self.current_fe.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in (0..self.fenodes.len()).map(|k| (first + k) % self.fenodes.len()) {
            let url = path.url(self.scheme, &self.fenodes[i])?;
            match request(&url).send().await {
                Ok(resp) => {
                    self.current_fe.store(i, Ordering::Relaxed);
                    return Ok((url, resp));
                }
                // Not connected, so not sent: the next FE may take it.
                Err(e) if e.is_connect() => failures.push((url, e)),
                Err(e) => return Err(connect_error(&url, e, self.read_timeout)),
            }
        }
        Err(no_fe_answered(&self.fenodes, failures, self.read_timeout))
    }

    /// Send loads straight to these BEs (`host:webserver_port`) instead of through the FE.
    pub fn with_backends(mut self, backends: Vec<String>) -> Self {
        self.backends = backends;
        self
    }

    /// A GET on the FE REST API, unwrapping Doris' `{code, msg, data}` envelope.
    async fn rest_get(&self, path: &ApiPath<'_>) -> Result<serde_json::Value, DorisError> {
        self.rest(path, |url| self.http.get(url)).await
    }

    /// A POST on the FE REST API with a JSON body, unwrapping the envelope.
    async fn rest_post(&self, path: &ApiPath<'_>, body: &serde_json::Value) -> Result<serde_json::Value, DorisError> {
        self.rest(path, |url| self.http.post(url).json(body)).await
    }

    async fn rest(
        &self,
        path: &ApiPath<'_>,
        request: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<serde_json::Value, DorisError> {
        let (url, resp) = self
            .send_fe(path, |url| {
                request(url).header(AUTHORIZATION, self.credentials.basic()).timeout(self.read_timeout)
            })
            .await?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| connect_error(&url, e, self.read_timeout))?;
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() });
        }
        let envelope: serde_json::Value = serde_json::from_str(&text).map_err(|e| DorisError::Protocol {
            url: url.clone(),
            detail: format!("{e}: {}", text.chars().take(300).collect::<String>()),
        })?;
        match envelope.get("code").and_then(|c| c.as_i64()) {
            Some(0) => Ok(envelope.get("data").cloned().unwrap_or_default()),
            Some(401) => Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() }),
            _ => {
                let data = match envelope.get("data") {
                    Some(serde_json::Value::String(d)) => d.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let msg = envelope.get("msg").and_then(|d| d.as_str()).unwrap_or_default();
                Err(DorisError::Http { url, status: status.as_u16(), body: format!("{msg}: {data}") })
            }
        }
    }

    /// Run one statement through the FE's SQL API (`/api/query/default_cluster/{db}`): column
    /// names and rows as text.
    pub async fn query(&self, db: &str, stmt: &str) -> Result<(Vec<String>, Vec<Vec<String>>), DorisError> {
        let data = self
            .rest_post(&ApiPath::new(["api", "query", "default_cluster", db]), &serde_json::json!({ "stmt": stmt }))
            .await?;
        let names = data
            .get("meta")
            .and_then(|m| m.as_array())
            .map(|m| m.iter().filter_map(|c| c.get("name")?.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::Null => "NULL".to_string(),
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let rows = data
            .get("data")
            .and_then(|d| d.as_array())
            .map(|rows| rows.iter().filter_map(|r| r.as_array()).map(|r| r.iter().map(text).collect()).collect())
            .unwrap_or_default();
        Ok((names, rows))
    }

    /// The FE's clock as an `@incr` window bound: `/api/tso`'s physical time, formatted by the FE
    /// (`FROM_UNIXTIME(ms / 1000, '%Y-%m-%d %H:%i:%s')`, so in its time zone, rounded down to the second).
    pub async fn tso_time(&self) -> Result<String, DorisError> {
        Ok(self.tso_now().await?.1)
    }

    /// The FE's current TSO (`current_tso`, when it reports one: every commit at or before it has a
    /// TSO no larger) and its clock as an `@incr` window bound, as [`Self::tso_time`] gives it.
    pub async fn tso_now(&self) -> Result<(Option<i64>, String), DorisError> {
        let data = self.rest_get(&ApiPath::new(["api", "tso"])).await?;
        let current = data.get("current_tso").and_then(|t| t.as_i64());
        let ms =
            data.get("current_tso_physical_time").and_then(|m| m.as_i64()).ok_or_else(|| DorisError::Protocol {
                url: format!("{}://{}/api/tso", self.scheme, self.fe()),
                detail: format!("no current_tso_physical_time in {data}"),
            })?;
        let (_, rows) = self
            .query("information_schema", &format!("SELECT FROM_UNIXTIME({ms} / 1000, '%Y-%m-%d %H:%i:%s')"))
            .await?;
        let time = rows.into_iter().next().and_then(|r| r.into_iter().next()).ok_or_else(|| DorisError::Protocol {
            url: format!("{}://{}/api/query", self.scheme, self.fe()),
            detail: "FROM_UNIXTIME returned no row".into(),
        })?;
        Ok((current, time))
    }

    /// The tablets a snapshot of `sql` over `db.table` reads (`_query_plan`), sorted.
    pub async fn query_plan(&self, db: &str, table: &str, sql: &str) -> Result<Vec<i64>, DorisError> {
        let data = self
            .rest_post(&ApiPath::new(["api", db, table, "_query_plan"]), &serde_json::json!({ "sql": sql }))
            .await?;
        if let Some(exception) = data.get("exception").and_then(|e| e.as_str()) {
            return Err(DorisError::Table {
                table: format!("{db}.{table}"),
                message: format!("query plan: {exception}"),
            });
        }
        let mut tablets: Vec<i64> = data
            .get("partitions")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().filter_map(|k| k.parse().ok()).collect())
            .unwrap_or_default();
        tablets.sort_unstable();
        Ok(tablets)
    }

    /// The FE's Arrow Flight SQL port, from `SHOW FRONTENDS`.
    pub async fn flight_sql_port(&self) -> Result<Option<u16>, DorisError> {
        let data = self
            .rest_post(
                &ApiPath::new(["api", "query", "default_cluster", "information_schema"]),
                &serde_json::json!({ "stmt": "show frontends" }),
            )
            .await?;
        let meta = data.get("meta").and_then(|m| m.as_array()).cloned().unwrap_or_default();
        let Some(col) = meta.iter().position(|m| m.get("name").and_then(|n| n.as_str()) == Some("ArrowFlightSqlPort"))
        else {
            return Ok(None);
        };
        let port = data
            .get("data")
            .and_then(|d| d.as_array())
            .and_then(|rows| rows.first())
            .and_then(|r| r.get(col))
            .and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())));
        Ok(port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0))
    }

    /// The FE host (without port) this client talks to: the one that answered last.
    pub fn fe_host(&self) -> &str {
        host_of(self.fe())
    }

    /// The FE (`host:http_port`) requests go to first: the one that answered last.
    pub fn fe_node(&self) -> &str {
        self.fe()
    }

    /// Every FE host (without port), the one that answered last first: where to look for the
    /// Arrow Flight SQL service ([`super::scan::FlightReader::connect_any`]).
    pub fn fe_hosts(&self) -> Vec<&str> {
        let first = self.current_fe.load(Ordering::Relaxed);
        let n = self.fenodes.len();
        (0..n).map(|k| host_of(&self.fenodes[(first + k) % n])).collect()
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The key model and columns of `db.table`.
    pub async fn table_info(&self, db: &str, table: &str) -> Result<TableInfo, DorisError> {
        let data = self.rest_get(&ApiPath::new(["api", db, table, "_schema"])).await.map_err(|e| match e {
            DorisError::Http { body, .. } => DorisError::Table {
                table: format!("{db}.{table}"),
                message: format!("{body}; create it first, or fix `table`"),
            },
            other => other,
        })?;
        let keys_type = data.get("keysType").and_then(|k| k.as_str()).unwrap_or("DUP_KEYS").to_string();
        let columns = data
            .get("properties")
            .and_then(|p| p.as_array())
            .map(|cols| cols.iter().filter_map(|c| c.get("name")?.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        Ok(TableInfo { keys_type, columns, types: Vec::new() })
    }

    /// [`Self::table_info`] with each column's type as `DESC` shows it.
    pub async fn described(&self, db: &str, table: &str) -> Result<TableInfo, DorisError> {
        let mut info = self.table_info(db, table).await?;
        let (names, rows) =
            self.query(db, &format!("DESC {}.{}", super::scan::quote(db), super::scan::quote(table))).await?;
        let at = |n: &str| names.iter().position(|x| x.eq_ignore_ascii_case(n));
        if let (Some(field), Some(ty)) = (at("Field"), at("Type")) {
            info.types = rows.into_iter().filter_map(|r| Some((r.get(field)?.clone(), r.get(ty)?.clone()))).collect();
        }
        Ok(info)
    }

    /// The alive BEs, from `GET /api/backends?is_alive=true` (for `auto_redirect = false`).
    pub async fn discover_backends(&self) -> Result<Vec<String>, DorisError> {
        let data = self.rest_get(&ApiPath::new(["api", "backends"]).query("is_alive=true")).await?;
        Ok(data
            .get("backends")
            .and_then(|b| b.as_array())
            .map(|bes| {
                bes.iter()
                    .filter(|b| b.get("is_alive").and_then(|a| a.as_bool()).unwrap_or(true))
                    .filter_map(|b| Some(format!("{}:{}", b.get("ip")?.as_str()?, b.get("http_port")?.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Ask the FE where the body of a Stream Load to `db.table` goes: the BE URL of its 307
    /// redirect, without credentials (they are sent as a header).
    pub async fn resolve_be(&self, db: &str, table: &str) -> Result<reqwest::Url, DorisError> {
        let (url, resp) = self
            .send_fe(&ApiPath::new(["api", db, table, "_stream_load"]), |url| {
                self.http
                    .put(url)
                    .header(AUTHORIZATION, self.credentials.basic())
                    .header(EXPECT, "100-continue")
                    .header(reqwest::header::CONTENT_LENGTH, "0")
            })
            .await?;
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() });
        }
        if !status.is_redirection() {
            let body = resp.text().await.unwrap_or_default();
            // Doris answers a failed login with HTTP 200 and `{"msg":"Unauthorized","code":401,…}`.
            let envelope: Option<serde_json::Value> = serde_json::from_str(&body).ok();
            if envelope.as_ref().and_then(|e| e.get("code")).and_then(|c| c.as_i64()) == Some(401) {
                return Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() });
            }
            return Err(DorisError::Http { url, status: status.as_u16(), body: body.chars().take(500).collect() });
        }
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| DorisError::Protocol { url: url.clone(), detail: "307 without a Location".into() })?;
        // The redirect carries the credentials in the userinfo; they go in a header instead.
        let mut be = self.follow(&url, location)?;
        be.set_query(None);
        Ok(be)
    }

    /// Stream `body` into `db.table` with the given Stream Load headers (`label`, `format`,
    /// `two_phase_commit` …). A reply that is not `Success` / `Publish Timeout` is returned as
    /// is: the caller decides what `Label Already Exists` means for it.
    ///
    /// `timeout` bounds the whole request; a streamed body is bounded by its producer instead.
    pub async fn load(
        &self,
        db: &str,
        table: &str,
        headers: &[(String, String)],
        body: reqwest::Body,
        timeout: Option<Duration>,
    ) -> Result<LoadResponse, DorisError> {
        let be = if self.backends.is_empty() {
            self.resolve_be(db, table).await?
        } else {
            let be = &self.backends[fastrand::usize(..self.backends.len())];
            let url = ApiPath::new(["api", db, table, "_stream_load"]).url(self.scheme, be)?;
            reqwest::Url::parse(&url).map_err(|e| DorisError::Protocol { url, detail: e.to_string() })?
        };
        let url = be.to_string();
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| DorisError::Protocol { url: url.clone(), detail: format!("invalid header name {k:?}") })?;
            let value = HeaderValue::from_str(v).map_err(|_| DorisError::Protocol {
                url: url.clone(),
                detail: format!("invalid value for header {k:?}"),
            })?;
            map.insert(name, value);
        }
        map.insert(AUTHORIZATION, self.credentials.basic());
        map.insert(EXPECT, HeaderValue::from_static("100-continue"));
        let mut request = self.http.put(be).headers(map).body(body);
        if let Some(t) = timeout {
            request = request.timeout(t);
        }
        let resp = request.send().await.map_err(|e| connect_error(&url, e, self.read_timeout))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| connect_error(&url, e, self.read_timeout))?;
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() });
        }
        if !status.is_success() {
            return Err(DorisError::Http { url, status: status.as_u16(), body: text.chars().take(500).collect() });
        }
        serde_json::from_str(&text).map_err(|e| DorisError::Protocol {
            url,
            detail: format!("{e}: {}", text.chars().take(300).collect::<String>()),
        })
    }

    /// The first lines of a load's error log, for error messages.
    pub async fn error_log(&self, error_url: &str, lines: usize) -> String {
        match self.http.get(error_url).timeout(self.read_timeout).send().await {
            Ok(r) => r.text().await.unwrap_or_default().lines().take(lines).collect::<Vec<_>>().join("\n"),
            Err(_) => String::new(),
        }
    }

    /// Commit a pre-committed transaction. "Already visible" counts as done.
    pub async fn commit(&self, db: &str, txn_id: TxnId) -> Result<TxnOutcome, DorisError> {
        self.txn(db, txn_id, "commit").await
    }

    /// Abort a pre-committed transaction. "Already aborted" and "not found" count as done.
    pub async fn abort(&self, db: &str, txn_id: TxnId) -> Result<TxnOutcome, DorisError> {
        self.txn(db, txn_id, "abort").await
    }

    /// Abort whatever transaction carries `label`. "Already aborted" and "not found" count as done;
    /// a label whose transaction is already committed is an error.
    pub async fn abort_label(&self, db: &str, label: &str) -> Result<TxnOutcome, DorisError> {
        let (url, resp) = self
            .send_fe(&ApiPath::new(["api", db, "_stream_load_2pc"]), |url| {
                self.http
                    .put(url)
                    .header(AUTHORIZATION, self.credentials.basic())
                    .header("label", label)
                    .header("txn_operation", "abort")
                    .header(reqwest::header::CONTENT_LENGTH, "0")
                    .timeout(self.read_timeout)
            })
            .await?;
        let text = resp.text().await.map_err(|e| connect_error(&url, e, self.read_timeout))?;
        let reply: TxnReply = serde_json::from_str(&text)
            .map_err(|e| DorisError::Protocol { url: url.clone(), detail: format!("{e}: {text}") })?;
        classify_txn(db, -1, "abort", reply).map_err(|mut e| {
            if let DorisError::Txn { message, .. } = &mut e {
                *message = format!("label `{label}`: {message}");
            }
            e
        })
    }

    async fn txn(&self, db: &str, txn_id: TxnId, operation: &'static str) -> Result<TxnOutcome, DorisError> {
        let put = |url: &str| {
            self.http
                .put(url)
                .header(AUTHORIZATION, self.credentials.basic())
                .header("txn_id", txn_id.to_string())
                .header("txn_operation", operation)
                .header(reqwest::header::CONTENT_LENGTH, "0")
                .timeout(self.read_timeout)
        };
        let (url, mut resp) = self.send_fe(&ApiPath::new(["api", db, "_stream_load_2pc"]), put).await?;
        let mut target = url.clone();
        // The FE may redirect 2PC to a BE; follow it by hand to keep the credentials.
        for _ in 0..3 {
            let status = resp.status();
            if status.is_redirection() {
                let location = resp.headers().get(LOCATION).and_then(|l| l.to_str().ok()).unwrap_or_default();
                target = self.follow(&target, location)?.to_string();
                resp = put(&target).send().await.map_err(|e| connect_error(&target, e, self.read_timeout))?;
                continue;
            }
            if status == reqwest::StatusCode::UNAUTHORIZED {
                return Err(DorisError::Unauthorized { url, user: self.credentials.user.clone() });
            }
            let text = resp.text().await.map_err(|e| connect_error(&target, e, self.read_timeout))?;
            let reply: TxnReply = serde_json::from_str(&text)
                .map_err(|e| DorisError::Protocol { url: target.clone(), detail: format!("{e}: {text}") })?;
            return classify_txn(db, txn_id.0, operation, reply);
        }
        Err(DorisError::Protocol { url, detail: "too many redirects".into() })
    }
}

/// Characters a path segment keeps as they are: RFC 3986's unreserved ones. Everything else in a
/// database or table name (`/`, `?`, `#`, `%`, spaces, non-ASCII …) is percent-escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A path of Doris' HTTP API as segments, escaped when the URL is built: a database or table may
/// be named anything a plugin routes rows to, and must stay one segment.
struct ApiPath<'a> {
    segments: Vec<&'a str>,
    query: Option<&'static str>,
}

impl<'a> ApiPath<'a> {
    fn new(segments: impl IntoIterator<Item = &'a str>) -> Self {
        Self { segments: segments.into_iter().collect(), query: None }
    }

    fn query(mut self, query: &'static str) -> Self {
        self.query = Some(query);
        self
    }

    /// `{scheme}://{node}/{segment}/…[?query]`.
    fn url(&self, scheme: &str, node: &str) -> Result<String, DorisError> {
        let mut url = format!("{scheme}://{node}");
        for segment in &self.segments {
            // URL parsers resolve `.` and `..` (escaped or not) instead of sending them.
            if matches!(*segment, "." | "..") {
                return Err(DorisError::Table {
                    table: segment.to_string(),
                    message: "`.` and `..` cannot be named in a Doris URL; rename the database or table".into(),
                });
            }
            url.push('/');
            url.extend(utf8_percent_encode(segment, SEGMENT));
        }
        if let Some(q) = self.query {
            url.push('?');
            url.push_str(q);
        }
        Ok(url)
    }
}

fn host_of(node: &str) -> &str {
    node.rsplit_once(':').map_or(node, |(h, _)| h)
}

fn classify_txn(db: &str, txn_id: i64, operation: &'static str, reply: TxnReply) -> Result<TxnOutcome, DorisError> {
    // `Publish Timeout`: committed; the rows become visible shortly.
    if reply.status == "Success" || (operation == "commit" && reply.status == "Publish Timeout") {
        return Ok(TxnOutcome::Done);
    }
    let state = TxnState::from_message(&reply.msg);
    let already = match operation {
        "commit" => state == TxnState::Committed,
        _ => matches!(state, TxnState::Aborted | TxnState::NotFound),
    };
    if already {
        return Ok(TxnOutcome::AlreadyDone);
    }
    let message = if operation == "commit" && matches!(state, TxnState::Aborted | TxnState::NotFound) {
        format!(
            "{} (the transaction was aborted, most likely because it stayed pre-committed past Doris' pre-commit timeout)",
            reply.msg
        )
    } else {
        reply.msg
    };
    Err(DorisError::Txn { db: db.to_string(), txn_id, operation, status: reply.status, state, message })
}

fn connect_error(url: &str, e: reqwest::Error, timeout: Duration) -> DorisError {
    if e.is_timeout() {
        return DorisError::Timeout { url: url.to_string(), timeout };
    }
    DorisError::Connect { url: url.to_string(), detail: error_chain(&e) }
}

/// `e` and its causes, `: `-separated (reqwest's own message alone says only "error sending request").
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    detail
}

/// The error of a request that no FE took: with one FE its own error, with several one that names
/// each FE tried and what it said.
fn no_fe_answered(fenodes: &[String], mut failures: Vec<(String, reqwest::Error)>, timeout: Duration) -> DorisError {
    if failures.len() == 1 {
        let (url, e) = failures.remove(0);
        return connect_error(&url, e, timeout);
    }
    let said: Vec<String> =
        failures.into_iter().map(|(url, e)| format!("{url}: {}", error_chain(&e.without_url()))).collect();
    DorisError::Connect {
        url: fenodes.join(", "),
        detail: format!("none of the {} FEs answered ({})", said.len(), said.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::{ApiPath, TxnOutcome, TxnReply, classify_txn};
    use crate::doris::TxnState;

    fn reply(status: &str, msg: &str) -> TxnReply {
        TxnReply { status: status.into(), msg: msg.into() }
    }

    fn load(status: &str, message: &str, filtered: i64) -> super::LoadResponse {
        serde_json::from_value(serde_json::json!({
            "TxnId": 7, "Label": "l", "Status": status, "Message": message, "NumberFilteredRows": filtered,
        }))
        .unwrap()
    }

    #[test]
    fn a_load_refused_for_its_rows_is_told_by_its_status_code() {
        let refused = load("Fail", "[DATA_QUALITY_ERROR]too many filtered rows", 3);
        assert_eq!(refused.status_code(), Some("DATA_QUALITY_ERROR"));
        assert!(refused.is_data_quality());
        // The same words under another code are not a refusal of the rows.
        let other = load("Fail", "[INTERNAL_ERROR]too many filtered rows in a broken tablet", 0);
        assert_eq!(other.status_code(), Some("INTERNAL_ERROR"));
        assert!(!other.is_data_quality());
        // Doris before 2.0 sends no code: a failed load that filtered rows.
        let old = load("Fail", "too many filtered rows", 3);
        assert_eq!(old.status_code(), None);
        assert!(old.is_data_quality());
        assert!(!load("Fail", "[CANCELLED]cancelled", 0).is_data_quality());
        assert!(
            !load("Fail", "[tablet 7] is down", 0).is_data_quality()
                && load("Fail", "[tablet 7]", 0).status_code().is_none()
        );
    }

    #[test]
    fn refused_commits_and_aborts_carry_dorises_status_and_the_transactions_state() {
        let gone = classify_txn(
            "test",
            7,
            "commit",
            reply(
                "ANALYSIS_ERROR",
                "TStatus: errCode = 2, detailMessage = transaction [7] is already aborted. abort reason: timeout",
            ),
        )
        .unwrap_err();
        assert!(gone.is_txn_gone(), "{gone:?}");
        assert!(
            matches!(&gone, crate::doris::DorisError::Txn { status, state: TxnState::Aborted, .. } if status == "ANALYSIS_ERROR"),
            "{gone:?}"
        );
        assert!(gone.to_string().contains("pre-commit timeout"), "{gone}");
        let not_ready =
            classify_txn("test", 7, "commit", reply("ANALYSIS_ERROR", "transaction [7] is prepare, not pre-committed"))
                .unwrap_err();
        assert_eq!(not_ready.txn_state(), Some(TxnState::NotPrecommitted));
        assert!(!not_ready.is_txn_gone());
        let visible = reply("ANALYSIS_ERROR", "transaction [7] is already visible, not pre-committed.");
        assert_eq!(classify_txn("test", 7, "commit", visible).unwrap(), TxnOutcome::AlreadyDone);
        let unknown = reply("ANALYSIS_ERROR", "transaction [7] not found");
        assert_eq!(classify_txn("test", 7, "abort", unknown).unwrap(), TxnOutcome::AlreadyDone);
        let committed = reply("ANALYSIS_ERROR", "transaction [7] is already visible, could not abort.");
        assert_eq!(classify_txn("test", 7, "abort", committed).unwrap_err().txn_state(), Some(TxnState::Committed));
    }

    #[test]
    fn names_in_urls_are_escaped_as_one_path_segment() {
        let weird = "we ird/ta?ble#1";
        assert_eq!(
            ApiPath::new(["api", "test", weird, "_stream_load"]).url("http", "fe:8030").unwrap(),
            "http://fe:8030/api/test/we%20ird%2Fta%3Fble%231/_stream_load"
        );
        assert_eq!(
            ApiPath::new(["api", "db 1", "_stream_load_2pc"]).url("http", "fe:8030").unwrap(),
            "http://fe:8030/api/db%201/_stream_load_2pc"
        );
        assert_eq!(
            ApiPath::new(["api", "query", "default_cluster", "100%"]).url("http", "fe:8030").unwrap(),
            "http://fe:8030/api/query/default_cluster/100%25"
        );
        assert_eq!(
            ApiPath::new(["api", "d", "表", "_schema"]).url("http", "fe:8030").unwrap(),
            "http://fe:8030/api/d/%E8%A1%A8/_schema"
        );
        // The escaped URL parses back to the same segments.
        let url =
            reqwest::Url::parse(&ApiPath::new(["api", "test", weird, "_query_plan"]).url("http", "fe:8030").unwrap())
                .unwrap();
        assert_eq!(url.path_segments().unwrap().count(), 4);
        assert_eq!((url.query(), url.fragment()), (None, None));
    }

    #[test]
    fn ordinary_names_are_unchanged() {
        assert_eq!(
            ApiPath::new(["api", "test", "student_trans-2.v1~x", "_stream_load"]).url("http", "10.0.0.1:8030").unwrap(),
            "http://10.0.0.1:8030/api/test/student_trans-2.v1~x/_stream_load"
        );
        assert_eq!(
            ApiPath::new(["api", "backends"]).query("is_alive=true").url("http", "fe:8030").unwrap(),
            "http://fe:8030/api/backends?is_alive=true"
        );
    }

    #[test]
    fn dot_names_are_refused_rather_than_resolved_away() {
        let err = ApiPath::new(["api", "test", "..", "_stream_load"]).url("http", "fe:8030").unwrap_err();
        assert!(err.to_string().starts_with("table `..`: "), "{err}");
    }
}
