//! The FE and BE HTTP listeners: Stream Load (§1), 2PC (§2) and the v2 REST endpoints (§3).

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use base64::Engine as _;
use futures::StreamExt;
use serde_json::{Map, Value as Json, json};

use crate::discard::RowCounter;
use crate::engine::{Engine, EngineError};
use crate::faults::{self, DebugPoint, DebugPoints};
use crate::load::{CsvSplitter, GroupCommit, LoadBuilder, LoadOptions, parse_options};
use crate::net::ConnectionKill;
use crate::sql::{ColKind, Executor, Outcome, ServerInfo, Session};
use crate::storage::KeysType;

/// Rejected rows a load's error log shows at most, as Doris' `kMaxErrorNum`.
pub const MAX_ERROR_LOG_ROWS: usize = 50;

/// Shared state of both HTTP listeners.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// SQL executor (query API).
    pub exec: Executor,
    /// user → password.
    pub users: Arc<HashMap<String, String>>,
    /// Listener info.
    pub info: Arc<ServerInfo>,
    /// Fault injection.
    pub debug: DebugPoints,
    /// This listener is the FE (redirects loads) rather than the BE.
    pub is_fe: bool,
    /// Every Stream Load is received and answered but not stored (`--discard-stream-loads`).
    pub discard_stream_loads: bool,
}

fn pretty(v: &Json) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return "{}\n".into();
    }
    let mut s = String::from_utf8(buf).unwrap_or_default();
    s.push('\n');
    s
}

fn json_response(body: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json; charset=utf-8")], body).into_response()
}

/// The v2 envelope `{"msg","code","data","count"}`.
fn envelope(code: i64, msg: &str, data: Json) -> Response {
    let mut m = Map::new();
    m.insert("msg".into(), json!(msg));
    m.insert("code".into(), json!(code));
    m.insert("data".into(), data);
    m.insert("count".into(), json!(0));
    json_response(Json::Object(m).to_string())
}

fn ok_envelope(data: Json) -> Response {
    envelope(0, "success", data)
}

fn rest_base(status: &str, msg: &str) -> Response {
    let mut m = Map::new();
    m.insert("status".into(), json!(status));
    m.insert("msg".into(), json!(msg));
    json_response(Json::Object(m).to_string())
}

/// Basic-auth outcome.
enum Auth {
    Ok { user: String, password: String },
    Missing,
    Denied(String),
}

fn check_auth(headers: &HeaderMap, users: &HashMap<String, String>) -> Auth {
    let Some(h) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Auth::Missing;
    };
    let Some(b64) = h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")) else {
        return Auth::Missing;
    };
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
        return Auth::Missing;
    };
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (user, password) = raw.split_once(':').unwrap_or((raw.as_str(), ""));
    // Redirected credentials may carry the cluster: `root@default_cluster`.
    let user = user.split('@').next().unwrap_or(user).to_string();
    match users.get(&user) {
        Some(p) if p == password => Auth::Ok { user, password: password.to_string() },
        _ => Auth::Denied(format!(
            "Access denied for user '{user}@127.0.0.1' (using password: {})",
            if password.is_empty() { "NO" } else { "YES" }
        )),
    }
}

fn unauthorized(reason: &str) -> Response {
    envelope(401, "Unauthorized", json!(reason))
}

macro_rules! require_auth {
    ($st:expr, $headers:expr) => {
        match check_auth(&$headers, &$st.users) {
            Auth::Ok { user, password } => (user, password),
            Auth::Missing => return unauthorized("Need auth information."),
            Auth::Denied(m) => return unauthorized(&m),
        }
    };
}

/// Builds the router of one listener.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/api/{db}/{table}/_stream_load", put(stream_load))
        // Doris' router takes the path with a trailing slash too.
        .route("/api/{db}/{table}/_stream_load/", put(stream_load))
        .route("/api/{db}/_stream_load_2pc", put(stream_load_2pc_db))
        .route("/api/{db}/{table}/_stream_load_2pc", put(stream_load_2pc_table))
        .route("/api/{db}/get_load_state", get(get_load_state))
        .route("/api/{db}/{table}/_schema", get(table_schema))
        .route("/api/{db}/{table}/_query_plan", post(query_plan))
        .route("/api/{catalog}/{db}/{table}/_schema", get(table_schema_catalog))
        .route("/api/backends", get(backends))
        .route("/api/health", get(health))
        .route("/api/bootstrap", get(bootstrap))
        .route("/api/tso", get(tso))
        .route("/api/_load_error_log", get(load_error_log))
        .route("/api/query/{ns}/{db}", post(query_api))
        .route("/api/debug_point/add/{name}", post(debug_point_add))
        .route("/api/debug_point/remove/{name}", post(debug_point_remove))
        .route("/api/debug_point/clear", post(debug_point_clear))
        .route("/api/debug/clock/advance", post(clock_advance))
        .route("/api/debug/clock", get(clock_now))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Percent-encodes what RFC 3986 does not allow in userinfo.
fn userinfo_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(|s| s.trim().to_string())
}

/// Fields of a Stream Load reply (§1.9).
#[derive(Debug, Default)]
struct LoadReply {
    txn_id: i64,
    label: String,
    comment: String,
    two_phase: bool,
    group_commit: bool,
    status: String,
    existing: Option<&'static str>,
    message: String,
    total: u64,
    loaded: u64,
    filtered: u64,
    unselected: u64,
    load_bytes: u64,
    load_ms: u64,
    begin_ms: u64,
    put_ms: u64,
    read_ms: u64,
    write_ms: u64,
    receive_ms: u64,
    commit_ms: u64,
    error_url: Option<String>,
}

impl LoadReply {
    fn failed(label: String, message: String) -> LoadReply {
        LoadReply { txn_id: -1, label, status: "Fail".into(), message, ..Default::default() }
    }

    fn into_response(self) -> Response {
        let mut m = Map::new();
        m.insert("TxnId".into(), json!(self.txn_id));
        m.insert("Label".into(), json!(self.label));
        m.insert("Comment".into(), json!(self.comment));
        if self.group_commit {
            m.insert("GroupCommit".into(), json!(true));
        } else {
            m.insert("TwoPhaseCommit".into(), json!(if self.two_phase { "true" } else { "false" }));
        }
        m.insert("Status".into(), json!(self.status));
        if let Some(e) = self.existing {
            m.insert("ExistingJobStatus".into(), json!(e));
        }
        m.insert("Message".into(), json!(self.message));
        m.insert("NumberTotalRows".into(), json!(self.total));
        m.insert("NumberLoadedRows".into(), json!(self.loaded));
        m.insert("NumberFilteredRows".into(), json!(self.filtered));
        m.insert("NumberUnselectedRows".into(), json!(self.unselected));
        m.insert("LoadBytes".into(), json!(self.load_bytes));
        m.insert("LoadTimeMs".into(), json!(self.load_ms));
        if !self.group_commit {
            m.insert("BeginTxnTimeMs".into(), json!(self.begin_ms));
        }
        m.insert("StreamLoadPutTimeMs".into(), json!(self.put_ms));
        m.insert("ReadDataTimeMs".into(), json!(self.read_ms));
        m.insert("WriteDataTimeMs".into(), json!(self.write_ms));
        m.insert("ReceiveDataTimeMs".into(), json!(self.receive_ms));
        if !self.group_commit {
            m.insert("CommitAndPublishTimeMs".into(), json!(self.commit_ms));
        }
        if let Some(u) = self.error_url {
            m.insert("ErrorURL".into(), json!(u));
        }
        json_response(pretty(&Json::Object(m)))
    }
}

/// The `Message` of a load that committed but whose publish did not finish in time.
const PUBLISH_TIMEOUT_MESSAGE: &str =
    "[PUBLISH_TIMEOUT]transaction commit successfully, BUT data will be visible later";

fn random_label() -> String {
    let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let a = (n as u64).wrapping_mul(0x9e3779b97f4a7c15);
    let b = (n >> 32) as u64 ^ a.rotate_left(17);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a as u16,
        (b >> 48) as u16,
        b & 0xffff_ffff_ffff
    )
}

fn ms_since(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}

async fn stream_load(
    State(st): State<HttpState>,
    Path((db, table)): Path<(String, String)>,
    uri: axum::http::Uri,
    kill: Option<Extension<ConnectionKill>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if st.is_fe {
        let (user, password) = require_auth!(st, headers);
        if !headers.contains_key(header::EXPECT) {
            return rest_base("FAILED", "There is no 100-continue header");
        }
        if db.is_empty() {
            return rest_base("FAILED", "No database selected.");
        }
        if table.is_empty() {
            return rest_base("FAILED", "No table selected.");
        }
        // Java's URI constructor percent-encodes the `@` of `user@default_cluster`. The scheme is
        // `http` even when the BE serves https: Doris' LoadAction builds it so.
        let location = format!(
            "http://{}%40default_cluster:{}@{}:{}{}?{}",
            userinfo_escape(&user),
            userinfo_escape(&password),
            st.info.host,
            st.info.be_http_port,
            uri.path(),
            uri.query().unwrap_or("")
        );
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, location), (header::CONTENT_TYPE, "text/html;charset=utf-8".to_string())],
        )
            .into_response();
    }
    let kill = kill.map(|Extension(k)| k);
    let stall = st.debug.fire(faults::STREAM_LOAD_STALL);
    let response = be_stream_load(&st, db, table, kill.as_ref(), headers, body).await;
    if let Some(f) = stall {
        tokio::time::sleep(f.ms(1000)).await;
    }
    response
}

/// Drains a body that will not be loaded, so that the client reads the reply.
async fn drain(body: Body) {
    let mut stream = body.into_data_stream();
    while let Some(Ok(_)) = stream.next().await {}
}

async fn be_stream_load(
    st: &HttpState,
    db: String,
    table: String,
    kill: Option<&ConnectionKill>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let start = Instant::now();
    let get = |k: &str| header_str(&headers, k);
    let label_hdr = get("label").unwrap_or_default();
    match check_auth(&headers, &st.users) {
        Auth::Ok { .. } => {}
        Auth::Missing => {
            return LoadReply::failed(label_hdr, "[NOT_AUTHORIZED]no valid Basic authorization".into()).into_response();
        }
        Auth::Denied(m) => {
            return LoadReply::failed(label_hdr, format!("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {m}"))
                .into_response();
        }
    }
    let has_len = headers.contains_key(header::CONTENT_LENGTH);
    let chunked = headers
        .get(header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if !has_len && !chunked {
        return LoadReply::failed(
            label_hdr,
            "[INVALID_ARGUMENT]content_length is empty and transfer-encoding!=chunked, please set content_length or transfer-encoding=chunked".into(),
        )
        .into_response();
    }
    let opts: LoadOptions = match parse_options(&get) {
        Ok(o) => o,
        Err(m) => return LoadReply::failed(label_hdr, m).into_response(),
    };
    let limit = st.engine.config.max_load_bytes;
    if let Some(cl) = get("content-length").and_then(|v| v.parse::<u64>().ok())
        && cl > limit
    {
        return LoadReply::failed(
            label_hdr,
            format!("[EXCEEDED_LIMIT]The size of this load is {cl} bytes, which exceeds streaming_load_max_mb ({limit} bytes)."),
        )
        .into_response();
    }
    let group_commit = opts.group_commit != GroupCommit::Off && !opts.two_phase_commit && !opts.partial;
    let label = match &opts.label {
        Some(l) => l.clone(),
        None if group_commit => {
            let r = random_label().replace('-', "");
            format!("group_commit_{}_{}", &r[..16], &r[16..])
        }
        None => random_label(),
    };
    if let Some(f) = st.debug.fire(faults::STREAM_LOAD_FAIL) {
        drain(body).await;
        let mut r = LoadReply::failed(label, f.str("message", "debug point StreamLoad.fail"));
        r.status = f.str("status", "Fail");
        r.comment = opts.comment.clone();
        r.two_phase = opts.two_phase_commit;
        r.load_ms = ms_since(start);
        return r.into_response();
    }
    let discard = st.discard_stream_loads || st.debug.fire(faults::STREAM_LOAD_DISCARD).is_some();
    let close_mid_body = st.debug.fire(faults::STREAM_LOAD_CLOSE_MID_BODY).map(|f| f.u64("after_bytes", 1));
    let drop_response = st.debug.fire(faults::STREAM_LOAD_DROP_RESPONSE).is_some();
    // For 2PC loads the point acts on the commit call instead.
    let publish_timeout = !opts.two_phase_commit && st.debug.fire(faults::STREAM_LOAD_PUBLISH_TIMEOUT).is_some();
    let begin_t = Instant::now();
    let begun = match st.engine.begin(&db, &table, &label) {
        Ok(b) => b,
        Err(EngineError::LabelExists { label: l, txn_id, status }) => {
            let mut r = LoadReply::failed(
                label.clone(),
                format!(
                    "[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = Label [{l}] has already been used, relate to txn [{txn_id}]"
                ),
            );
            r.status = "Label Already Exists".into();
            r.existing = Some(status.job_status());
            r.comment = opts.comment.clone();
            r.two_phase = opts.two_phase_commit;
            return r.into_response();
        }
        Err(e) => {
            let mut r = LoadReply::failed(label, format!("[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {e}"));
            r.comment = opts.comment.clone();
            return r.into_response();
        }
    };
    let begin_ms = ms_since(begin_t);
    let txn_id = begun.txn_id;
    // A client that goes away mid-body ends the connection, and the server drops this handler
    // where it waits: the load is cancelled and its transaction aborted, as a BE does.
    let _cancelled = AbortUnfinished { engine: st.engine.clone(), txn_id };
    let mut reply = LoadReply {
        txn_id,
        label: label.clone(),
        comment: opts.comment.clone(),
        two_phase: opts.two_phase_commit && !group_commit,
        group_commit,
        begin_ms,
        ..Default::default()
    };
    let fail = |mut reply: LoadReply, msg: String| {
        st.engine.abort(txn_id, &msg);
        reply.status = "Fail".into();
        reply.message = msg;
        reply.load_ms = ms_since(start);
        reply.into_response()
    };
    let mut builder = match LoadBuilder::new(&begun.schema, &opts) {
        Ok(b) => b,
        Err(e) => return fail(reply, e.0),
    };
    // Large CSV bodies are buffered and parsed on all cores; smaller CSV bodies are parsed chunk
    // by chunk while they arrive; other formats are buffered.
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let declared_len = get("content-length").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let parallel = builder.parallelizable() && threads > 1 && declared_len >= 16 << 20;
    let streaming = builder.streams_csv() && !parallel;
    let ncols = builder.field_count();
    let mut splitter = CsvSplitter::new(&opts);
    // A discarded load only counts its rows; the headers were still checked against the table.
    let mut counter = discard.then(|| RowCounter::new(&opts));
    // Read the body (hyper sends `100 Continue` when we first poll it).
    let read_t = Instant::now();
    let mut data: Vec<u8> = if streaming || discard {
        Vec::new()
    } else {
        Vec::with_capacity(get("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0).min(limit as usize))
    };
    let mut received: u64 = 0;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                received += c.len() as u64;
                if let (Some(after), Some(kill)) = (close_mid_body, kill)
                    && received >= after
                {
                    st.engine.abort(txn_id, "debug point StreamLoad.close_mid_body");
                    kill.close().await;
                }
                if received > limit {
                    // Drain the rest so the client reads the reply instead of a reset.
                    drop(data);
                    while let Some(Ok(_)) = stream.next().await {}
                    return fail(
                        reply,
                        format!("[EXCEEDED_LIMIT]The size of this load exceeds streaming_load_max_mb ({limit} bytes)."),
                    );
                }
                if let Some(counter) = counter.as_mut() {
                    counter.feed(&c);
                } else if streaming {
                    splitter.feed(&c, &opts, ncols, &mut |r| builder.csv(r));
                } else {
                    data.extend_from_slice(&c);
                }
            }
            Err(e) => {
                return fail(reply, format!("[INTERNAL_ERROR]failed to read the body: {e}"));
            }
        }
    }
    reply.load_bytes = received;
    reply.receive_ms = ms_since(read_t);
    if has_len
        && let Some(cl) = get("content-length").and_then(|v| v.parse::<u64>().ok())
        && cl != received
    {
        return fail(reply, "[INTERNAL_ERROR]receive body don't equal with body bytes".into());
    }
    let write_t = Instant::now();
    let outcome = if let Some(counter) = counter {
        match counter.finish() {
            Ok(o) => o,
            Err(e) => return fail(reply, e.0),
        }
    } else {
        if streaming {
            splitter.finish(&opts, ncols, &mut |r| builder.csv(r));
        } else if parallel {
            let res =
                if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                    tokio::task::block_in_place(|| builder.feed_csv_parallel(&data, threads))
                } else {
                    builder.feed_csv_parallel(&data, threads)
                };
            if let Err(e) = res {
                return fail(reply, e.0);
            }
        } else {
            if opts.gzip {
                let mut out = Vec::with_capacity(data.len() * 4);
                if let Err(e) = flate2::read::MultiGzDecoder::new(&data[..]).read_to_end(&mut out) {
                    return fail(reply, format!("[INTERNAL_ERROR]failed to decompress gz data: {e}"));
                }
                data = out;
            }
            let json_limit = st.engine.config.max_json_bytes;
            if opts.format == crate::load::Format::Json && !opts.read_json_by_line && data.len() as u64 > json_limit {
                return fail(
                    reply,
                    format!(
                        "[EXCEEDED_LIMIT]The size of this batch exceed the max size [{json_limit}] of json type data  data [{}]. Split the file, or use 'read_json_by_line'",
                        data.len()
                    ),
                );
            }
            if let Err(e) = builder.feed_body(&data) {
                return fail(reply, e.0);
            }
        }
        drop(data);
        match builder.finish().await {
            Ok(o) => o,
            Err(e) => return fail(reply, e.0),
        }
    };
    reply.read_ms = ms_since(read_t);
    reply.write_ms = ms_since(write_t);
    reply.total = outcome.total;
    reply.filtered = outcome.filtered;
    reply.unselected = outcome.unselected;
    reply.loaded = outcome.total - outcome.filtered - outcome.unselected;
    if !outcome.errors.is_empty() {
        // Doris logs the first `kMaxErrorNum` (50) rejected rows of a load; the count is exact.
        let logged = &outcome.errors[..outcome.errors.len().min(MAX_ERROR_LOG_ROWS)];
        let file = st.engine.store_error_log(logged.join("\n") + "\n");
        reply.error_url = Some(format!(
            "{}://{}:{}/api/_load_error_log?file={file}",
            st.info.scheme(),
            st.info.host,
            st.info.be_http_port
        ));
    }
    let denominator = outcome.total - outcome.unselected;
    if denominator > 0 && outcome.filtered as f64 / denominator as f64 > opts.max_filter_ratio {
        return fail(reply, "[DATA_QUALITY_ERROR]too many filtered rows".into());
    }
    let commit_t = Instant::now();
    if reply.two_phase {
        if let Err(e) = st.engine.precommit(txn_id, outcome.write) {
            return fail(reply, format!("[INTERNAL_ERROR]{e}"));
        }
        reply.commit_ms = 0;
    } else {
        if let Err(e) = st.engine.commit(txn_id, outcome.write) {
            return fail(reply, format!("[INTERNAL_ERROR]{e}"));
        }
        reply.commit_ms = ms_since(commit_t);
    }
    if let (true, Some(kill)) = (drop_response, kill) {
        kill.close().await;
    }
    if publish_timeout {
        reply.status = "Publish Timeout".into();
        reply.message = PUBLISH_TIMEOUT_MESSAGE.into();
    } else {
        reply.status = "Success".into();
        reply.message = "OK".into();
    }
    reply.load_ms = ms_since(start);
    reply.into_response()
}

async fn stream_load_2pc_db(State(st): State<HttpState>, Path(db): Path<String>, headers: HeaderMap) -> Response {
    two_pc(st, db, headers).await
}

async fn stream_load_2pc_table(
    State(st): State<HttpState>,
    Path((db, _table)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    two_pc(st, db, headers).await
}

fn two_pc_reply(status: &str, msg: &str) -> Response {
    let mut m = Map::new();
    m.insert("status".into(), json!(status));
    m.insert("msg".into(), json!(msg));
    json_response(pretty(&Json::Object(m)))
}

async fn two_pc(st: HttpState, db: String, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    let txn_hdr = header_str(&headers, "txn_id").filter(|s| !s.is_empty());
    let label = header_str(&headers, "label").filter(|s| !s.is_empty());
    if txn_hdr.is_none() && label.is_none() {
        return rest_base("FAILED", "No transaction id or label selected.");
    }
    let Some(op) = header_str(&headers, "txn_operation").filter(|s| !s.is_empty()) else {
        return rest_base("FAILED", "No transaction operation('commit' or 'abort') selected.");
    };
    let txn_id = match &txn_hdr {
        Some(t) => match t.parse::<i64>() {
            Ok(v) => Some(v),
            Err(e) => {
                return two_pc_reply("INVALID_ARGUMENT", &format!("convert txn_id [{t}] failed, reason={e}"));
            }
        },
        None => None,
    };
    if op != "commit" && op != "abort" {
        return two_pc_reply("INVALID_ARGUMENT", "transaction operation should be 'commit' or 'abort'");
    }
    let id = match st.engine.resolve_txn(&db, txn_id, label.as_deref()) {
        Ok(id) => id,
        Err(e) => {
            return two_pc_reply("ANALYSIS_ERROR", &format!("TStatus: errCode = 2, detailMessage = {e}"));
        }
    };
    let (point, default_msg) = if op == "commit" {
        (faults::TXN_COMMIT_FAIL, "debug point Txn.commit_fail")
    } else {
        (faults::TXN_ABORT_FAIL, "debug point Txn.abort_fail")
    };
    if let Some(f) = st.debug.fire(point) {
        return two_pc_reply(&f.str("status", "ANALYSIS_ERROR"), &f.str("msg", default_msg));
    }
    let res = if op == "commit" { st.engine.commit_2pc(id) } else { st.engine.abort_2pc(id) };
    match res {
        Ok(()) if op == "commit" && st.debug.fire(faults::STREAM_LOAD_PUBLISH_TIMEOUT).is_some() => {
            two_pc_reply("Publish Timeout", PUBLISH_TIMEOUT_MESSAGE)
        }
        Ok(()) => {
            let what = match (&txn_id, &label) {
                (Some(_), _) | (None, None) => format!("transaction [{id}]"),
                (None, Some(l)) => format!("label [{l}]"),
            };
            two_pc_reply("Success", &format!("{what} {op} successfully."))
        }
        Err(e) => two_pc_reply("ANALYSIS_ERROR", &format!("TStatus: errCode = 2, detailMessage = {e}")),
    }
}

async fn get_load_state(
    State(st): State<HttpState>,
    Path(db): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let _ = require_auth!(st, headers);
    let Some(label) = q.get("label").filter(|l| !l.is_empty()) else {
        return envelope(403, "Bad Request", json!("No label selected"));
    };
    match st.engine.label_state(&db, label) {
        Ok(s) => ok_envelope(json!(s)),
        Err(e) => envelope(1, "Error", json!(e.to_string())),
    }
}

async fn table_schema(
    State(st): State<HttpState>,
    Path((db, table)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let _ = require_auth!(st, headers);
    schema_response(&st, &db, &table)
}

async fn table_schema_catalog(
    State(st): State<HttpState>,
    Path((_catalog, db, table)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let _ = require_auth!(st, headers);
    schema_response(&st, &db, &table)
}

fn schema_response(st: &HttpState, db: &str, table: &str) -> Response {
    let engine = st.engine.lock();
    let t = match engine.table(db, table) {
        Ok(t) => t,
        Err(e) => return envelope(1, "Error", json!(e.to_string())),
    };
    let props: Vec<Json> = t
        .schema
        .columns
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("name".into(), json!(c.name));
            m.insert("type".into(), json!(c.ty.primitive_name()));
            m.insert("comment".into(), json!(c.comment));
            let agg = match (t.schema.keys_type, c.agg) {
                (KeysType::Aggregate, Some(a)) => a.sql().to_string(),
                _ => String::new(),
            };
            m.insert("aggregation_type".into(), json!(agg));
            if let crate::types::DorisType::Decimal { precision, scale, .. } = &c.ty {
                m.insert("precision".into(), json!(precision.to_string()));
                m.insert("scale".into(), json!(scale.to_string()));
            }
            Json::Object(m)
        })
        .collect();
    let mut data = Map::new();
    data.insert("properties".into(), Json::Array(props));
    data.insert("keysType".into(), json!(t.schema.keys_type.api_name()));
    data.insert("status".into(), json!(200));
    ok_envelope(Json::Object(data))
}

async fn backends(State(st): State<HttpState>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    ok_envelope(json!({"backends": [{"ip": st.info.host, "http_port": st.info.be_http_port, "is_alive": true}]}))
}

async fn health(State(st): State<HttpState>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    ok_envelope(json!({"total_backend_num": 1, "online_backend_num": 1}))
}

async fn bootstrap(State(st): State<HttpState>, Query(q): Query<HashMap<String, String>>) -> Response {
    if !q.contains_key("cluster_id") && !q.contains_key("token") {
        return ok_envelope(Json::Null);
    }
    let mut m = Map::new();
    m.insert("replayedJournalId".into(), json!(1));
    m.insert("queryPort".into(), json!(st.info.query_port));
    m.insert("rpcPort".into(), json!(9020));
    m.insert(
        "arrowFlightSqlPort".into(),
        json!(if st.info.flight_port == 0 { -1 } else { st.info.flight_port as i64 }),
    );
    m.insert("version".into(), json!(crate::sql::VERSION_COMMENT));
    ok_envelope(Json::Object(m))
}

async fn tso(State(st): State<HttpState>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    let now = st.engine.clock.now_ms();
    let current = st.engine.lock().tso.current(now);
    let physical = current >> crate::storage::TSO_LOGICAL_BITS;
    let logical = current & ((1 << crate::storage::TSO_LOGICAL_BITS) - 1);
    let mut m = Map::new();
    m.insert("window_end_physical_time".into(), json!(now.max(physical) + 3000));
    m.insert("current_tso".into(), json!(current));
    m.insert("current_tso_physical_time".into(), json!(physical));
    m.insert("current_tso_logical_counter".into(), json!(logical));
    ok_envelope(Json::Object(m))
}

async fn load_error_log(State(st): State<HttpState>, Query(q): Query<HashMap<String, String>>) -> Response {
    let file = q.get("file").cloned().unwrap_or_default();
    let text = st.engine.lock().error_logs.get(&file).cloned();
    match text {
        Some(t) => (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], t).into_response(),
        None => (StatusCode::NOT_FOUND, format!("error log file {file} not found\n")).into_response(),
    }
}

async fn query_api(
    State(st): State<HttpState>,
    Path((_ns, db)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (user, _) = require_auth!(st, headers);
    let req: Json = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return envelope(403, "Bad Request", json!(format!("invalid request body: {e}")));
        }
    };
    let Some(stmt) = req.get("stmt").and_then(|s| s.as_str()) else {
        return envelope(403, "Bad Request", json!("stmt is required"));
    };
    let limit = req.get("limit").and_then(|l| l.as_u64()).unwrap_or(1000) as usize;
    let mut session = Session::new(&user, 0);
    if st.engine.lock().dbs.contains_key(&db) {
        session.db = Some(db);
    }
    let start = Instant::now();
    match st.exec.execute(&mut session, stmt).await {
        Ok(Outcome::Rows(rs)) => {
            let meta: Vec<Json> = rs.columns.iter().map(|(n, k)| json!({"name": n, "type": k.doris_name()})).collect();
            let data: Vec<Json> = rs
                .rows
                .iter()
                .take(limit)
                .map(|r| {
                    Json::Array(
                        r.iter()
                            .zip(&rs.columns)
                            .map(|(v, (_, k))| match v {
                                None => Json::Null,
                                Some(s) => match k {
                                    ColKind::Tiny | ColKind::Small | ColKind::Int | ColKind::BigInt => {
                                        s.parse::<i64>().map(Json::from).unwrap_or_else(|_| json!(s))
                                    }
                                    ColKind::Float | ColKind::Double => {
                                        s.parse::<f64>().map(Json::from).unwrap_or_else(|_| json!(s))
                                    }
                                    _ => json!(s),
                                },
                            })
                            .collect(),
                    )
                })
                .collect();
            let mut m = Map::new();
            m.insert("type".into(), json!("result_set"));
            m.insert("meta".into(), Json::Array(meta));
            m.insert("data".into(), Json::Array(data));
            m.insert("time".into(), json!(ms_since(start)));
            ok_envelope(Json::Object(m))
        }
        Ok(Outcome::Done { .. }) => {
            let mut m = Map::new();
            m.insert("type".into(), json!("exec_status"));
            m.insert("status".into(), json!({}));
            m.insert("time".into(), json!(ms_since(start)));
            ok_envelope(Json::Object(m))
        }
        Err(e) => envelope(1, "Error", json!(e.doris_text())),
    }
}

/// `{"msg":"OK","code":0,"data":null,"count":0}`, or code 1 with the error.
fn debug_point_reply(res: Result<(), faults::DebugPointError>) -> Response {
    match res {
        Ok(()) => envelope(0, "OK", Json::Null),
        Err(e) => envelope(1, &e.to_string(), Json::Null),
    }
}

async fn debug_point_add(
    State(st): State<HttpState>,
    Path(name): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let _ = require_auth!(st, headers);
    let mut point = DebugPoint::default();
    for (k, v) in q {
        match k.as_str() {
            "execute" => match v.trim().parse::<i64>() {
                Ok(n) if n > 0 => point.execute = Some(n as u64),
                Ok(_) => point.execute = None,
                Err(_) => {
                    return debug_point_reply(Err(faults::DebugPointError::BadParam {
                        point: name,
                        message: format!("execute must be an integer, got [{v}]"),
                    }));
                }
            },
            "probability" => match v.trim().parse::<f64>() {
                Ok(p) => point.probability = p,
                Err(_) => {
                    return debug_point_reply(Err(faults::DebugPointError::BadParam {
                        point: name,
                        message: format!("probability must be a number between 0 and 1, got [{v}]"),
                    }));
                }
            },
            _ => {
                point.params.insert(k, v);
            }
        }
    }
    debug_point_reply(st.debug.add(&name, point))
}

async fn debug_point_remove(State(st): State<HttpState>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    debug_point_reply(st.debug.remove(&name))
}

async fn debug_point_clear(State(st): State<HttpState>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    st.debug.clear();
    debug_point_reply(Ok(()))
}

fn clock_data(st: &HttpState) -> Json {
    let now = st.engine.clock.now_ms();
    json!({"now_ms": now, "manual": matches!(st.engine.clock, crate::engine::Clock::Manual(_))})
}

/// `POST /api/debug/clock/advance?secs=N` (or `ms=N`, or `to_ms=T`): moves the manual clock.
async fn clock_advance(
    State(st): State<HttpState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let _ = require_auth!(st, headers);
    let num = |k: &str| q.get(k).and_then(|v| v.trim().parse::<f64>().ok());
    let ms = num("secs").map(|s| (s * 1000.0).round() as i64).or_else(|| num("ms").map(|m| m as i64)).unwrap_or(0);
    let to = num("to_ms").map(|m| m as i64);
    match st.engine.clock.advance(ms, to) {
        Ok(_) => envelope(0, "OK", clock_data(&st)),
        Err(e) => envelope(1, &e.to_string(), Json::Null),
    }
}

async fn clock_now(State(st): State<HttpState>, headers: HeaderMap) -> Response {
    let _ = require_auth!(st, headers);
    envelope(0, "OK", clock_data(&st))
}

/// `_query_plan` error: envelope code 0 with `status` / `exception` inside `data` (§3.3).
fn query_plan_error(status: i64, msg: &str) -> Response {
    let mut m = Map::new();
    m.insert("exception".into(), json!(msg));
    m.insert("status".into(), json!(status));
    ok_envelope(Json::Object(m))
}

/// Why a `_query_plan` SQL is refused, if it is: one table (the path's), no aggregation,
/// ORDER BY, LIMIT/OFFSET, window function or EXPLAIN.
fn query_plan_refusal(db: &str, table: &str, sql: &str) -> Option<String> {
    let flat: String = sql.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    let padded = format!(" {} ", flat.replace('(', " ( ").replace(')', " ) ").replace(',', " , "));
    let banned = [
        " explain ",
        " group by ",
        " order by ",
        " limit ",
        " offset ",
        " over ",
        " join ",
        " union ",
        " count (",
        " sum (",
        " avg (",
        " min (",
        " max (",
        " having ",
    ];
    if !padded.trim_start().starts_with("select ") || banned.iter().any(|b| padded.contains(b)) {
        return Some(format!(
            "only support single table select without aggregation, order by, limit or analytic function, but found: {sql}"
        ));
    }
    let after_from = padded.split(" from ").nth(1)?.trim_start();
    let name: String = after_from.split([' ', ';']).next().unwrap_or("").replace('`', "");
    let (sdb, stable) = match name.rsplit_once('.') {
        Some((d, t)) => (d.rsplit('.').next().unwrap_or(d).to_string(), t.to_string()),
        None => (db.to_ascii_lowercase(), name.clone()),
    };
    if sdb != db.to_ascii_lowercase() || stable != table.to_ascii_lowercase() || padded.split(" from ").count() > 2 {
        return Some(format!(
            "requested database and table must consistent with sql: request [{db}.{table}], but found [{name}]"
        ));
    }
    None
}

async fn query_plan(
    State(st): State<HttpState>,
    Path((db, table)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let _ = require_auth!(st, headers);
    let sql = match serde_json::from_slice::<Json>(&body).ok().and_then(|v| v.get("sql")?.as_str().map(str::to_string))
    {
        Some(s) => s,
        None => return query_plan_error(400, "POST body must contains [sql] root object"),
    };
    if let Some(why) = query_plan_refusal(&db, &table, &sql) {
        return query_plan_error(400, &why);
    }
    let (tablets, version) = {
        let st = st.engine.lock();
        match st.table(&db, &table) {
            Ok(t) => (t.tablets.iter().map(|tb| tb.id).collect::<Vec<_>>(), t.version),
            Err(e) => return query_plan_error(400, &e.to_string()),
        }
    };
    let mut partitions = Map::new();
    for id in tablets {
        partitions.insert(
            id.to_string(),
            json!({"routings": [format!("{}:9060", st.info.host)], "version": version, "schemaHash": 0}),
        );
    }
    let plan = json!({"db": db, "table": table, "sql": sql}).to_string();
    let mut m = Map::new();
    m.insert("partitions".into(), Json::Object(partitions));
    m.insert("opaqued_query_plan".into(), json!(base64::engine::general_purpose::STANDARD.encode(plan)));
    m.insert("status".into(), json!(200));
    ok_envelope(Json::Object(m))
}

/// Aborts its load's transaction when dropped before the load finished (see [`Engine::abort_unfinished`]).
struct AbortUnfinished {
    engine: Arc<Engine>,
    txn_id: i64,
}

impl Drop for AbortUnfinished {
    fn drop(&mut self) {
        self.engine
            .abort_unfinished(self.txn_id, "the load was cancelled: its connection closed before the body ended");
    }
}
