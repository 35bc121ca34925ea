//! The REST API under `/api/v1` (JSON; a pipeline is submitted as its TOML), `/metrics`, and the
//! live view (static files built into the binary).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use super::managed::Managed;
use super::{Caller, Refused, Server};

/// Largest upload: a plugin component or a pipeline file.
const MAX_BODY: usize = 64 << 20;

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({ "error": self.message });
        if !self.refused.is_empty() {
            body["refused"] = json!(self.refused);
        }
        let mut r = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        r
    }
}

type Reply = Result<Response, Refused>;

fn caller(server: &Server, headers: &HeaderMap) -> Result<Caller, Refused> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    server.caller(token)
}

/// The caller of a call that changes something, counted against its tenant's quota of such calls.
fn writer(server: &Server, headers: &HeaderMap) -> Result<Caller, Refused> {
    let c = caller(server, headers)?;
    server.write_call(&c)?;
    Ok(c)
}

/// The routes of `server`.
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/api/v1/pipelines", get(list).post(submit))
        .route("/api/v1/pipelines/{id}", get(show).delete(delete))
        .route("/api/v1/pipelines/{id}/{action}", post(act))
        .route("/api/v1/plugins/{name}", put(upload))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/openapi.json", get(|| async { axum::Json(openapi()) }))
        .route("/metrics", get(metrics))
        .route("/", get(|| async { asset("text/html; charset=utf-8", include_str!("web/index.html")) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", include_str!("web/app.js")) }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(server)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn metrics(State(server): State<Arc<Server>>) -> Response {
    let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], server.metrics.text()).into_response()
}

async fn whoami(State(server): State<Arc<Server>>, headers: HeaderMap) -> Reply {
    let c = caller(&server, &headers)?;
    let who = match c {
        Caller::Admin => json!({ "admin": true }),
        Caller::Tenant(t) => json!({ "tenant": t }),
    };
    Ok(axum::Json(who).into_response())
}

async fn list(State(server): State<Arc<Server>>, headers: HeaderMap) -> Reply {
    let c = caller(&server, &headers)?;
    let all: Vec<Value> = server.visible(&c).iter().map(|m| summary(m)).collect();
    Ok(axum::Json(json!({ "data": all })).into_response())
}

async fn show(State(server): State<Arc<Server>>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let c = caller(&server, &headers)?;
    let m = server.get(&c, &id)?;
    Ok(axum::Json(detail(&m)).into_response())
}

async fn submit(State(server): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = writer(&server, &headers)?;
    let Caller::Tenant(tenant) = c else {
        return Err(Refused::new(403, "pipelines belong to tenants: submit with a tenant's token"));
    };
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !kind.starts_with("application/toml") && !kind.starts_with("text/plain") {
        return Err(Refused::new(
            415,
            format!("send the pipeline file with `Content-Type: application/toml` (got {kind:?})"),
        ));
    }
    let text = String::from_utf8(body.to_vec()).map_err(|_| Refused::new(400, "the pipeline file is not UTF-8"))?;
    let m = server.submit(&tenant, &text, std::path::Path::new("pipeline.toml"), None)?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "id": m.id }))).into_response())
}

async fn act(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
) -> Reply {
    let c = writer(&server, &headers)?;
    let m = server.get(&c, &id)?;
    if action == "savepoint" {
        let checkpoint =
            m.savepoint(Duration::from_secs(120)).await.map_err(|e| Refused::new(409, format!("{e:#}")))?;
        return Ok(axum::Json(json!({ "id": m.id, "checkpoint": checkpoint })).into_response());
    }
    if action == "delete" {
        return Err(Refused::new(404, "no action `delete`: send `DELETE /api/v1/pipelines/{id}`"));
    }
    server.control(&m, &action).await?;
    Ok(axum::Json(summary(&m)).into_response())
}

async fn delete(State(server): State<Arc<Server>>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let c = writer(&server, &headers)?;
    let m = server.get(&c, &id)?;
    server.control(&m, "delete").await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn upload(State(server): State<Arc<Server>>, headers: HeaderMap, Path(name): Path<String>, body: Bytes) -> Reply {
    let c = writer(&server, &headers)?;
    let Caller::Tenant(tenant) = c else {
        return Err(Refused::new(403, "plugins belong to tenants: upload with a tenant's token"));
    };
    let good = name.ends_with(".wasm")
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !good {
        return Err(Refused::new(400, format!("{name:?}: a plugin is named `<letters, digits, -, _>.wasm`")));
    }
    if !body.starts_with(b"\0asm") || body.get(4..8) == Some(&[1, 0, 0, 0]) {
        return Err(Refused::new(400, format!("{name}: not a WebAssembly component (build it for wasm32-wasip2)")));
    }
    let dir = server.plugin_upload_dir(&tenant);
    let keep = || -> anyhow::Result<()> {
        std::fs::create_dir_all(&dir)?;
        super::managed::write_atomic(&dir.join(&name), &body)
    };
    keep().map_err(|e| Refused::new(500, format!("cannot keep plugin {name}: {e:#}")))?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "plugin": name, "bytes": body.len() }))).into_response())
}

fn summary(m: &Managed) -> Value {
    let s = m.status();
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    json!({
        "id": m.id,
        "tenant": m.tenant,
        "name": m.name,
        "state": s.state,
        "desired": s.desired,
        "last_checkpoint": m.stats.history().last(),
        "rows_in": g(&m.stats.rows_read),
        "rows_out": g(&m.stats.rows_written),
        "lag_seconds": lag_seconds(m),
        "last_error": s.last_error,
    })
}

/// Seconds since the oldest row read and not yet made visible (0 when all is committed).
fn lag_seconds(m: &Managed) -> f64 {
    let since = m.stats.unread_since_ms.load(Ordering::Relaxed);
    if since == 0 { 0.0 } else { crate::metrics::now_ms().saturating_sub(since) as f64 / 1000.0 }
}

fn detail(m: &Managed) -> Value {
    let s = m.status();
    let st = &m.stats;
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let mut d = summary(m);
    d["parallelism"] = json!(m.parallelism);
    d["graph"] = json!(m.graph);
    d["rows_transformed"] = json!(g(&st.rows_transformed));
    d["checkpoints"] = json!(st.history());
    d["verify"] = json!(st.last_verified());
    d["sources"] = json!(st.sources());
    d["restarts"] = json!(g(&st.restarts));
    d["failures_in_a_row"] = json!(s.failures);
    let loads = st.loads();
    d["loads"] = json!({
        "committed": g(&st.txns_committed),
        "succeeded": loads.succeeded,
        "failed": loads.failed,
        "filtered_rows": loads.filtered_rows,
        "loaded_rows": loads.loaded_rows,
    });
    d
}

/// The API described as OpenAPI 3.
fn openapi() -> Value {
    let pipeline_id = json!([{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" }, "description": "`<tenant>.<pipeline name>`" }]);
    let err = json!({ "description": "error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
    let action = |what: &str| {
        json!({
            "post": { "summary": what, "parameters": pipeline_id, "responses": { "200": { "description": "the pipeline" }, "404": err, "429": err } }
        })
    };
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Sluice serve API", "version": "1" },
        "components": {
            "securitySchemes": { "token": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": { "type": "object", "properties": { "error": { "type": "string" }, "refused": { "type": "array", "items": { "type": "string" } } }, "required": ["error"] },
                "Pipeline": { "type": "object", "properties": {
                    "id": { "type": "string" }, "tenant": { "type": "string" }, "name": { "type": "string" },
                    "state": { "type": "string", "enum": ["starting", "running", "restarting", "paused", "stopped", "finished", "failed"] },
                    "desired": { "type": "string", "enum": ["running", "paused", "stopped"] },
                    "last_checkpoint": { "type": "object", "nullable": true },
                    "rows_in": { "type": "integer" }, "rows_out": { "type": "integer" },
                    "lag_seconds": { "type": "number" }, "last_error": { "type": "string", "nullable": true }
                } }
            }
        },
        "security": [{ "token": [] }],
        "paths": {
            "/api/v1/pipelines": {
                "get": { "summary": "The caller's pipelines (every tenant's for the admin)", "responses": { "200": { "description": "`{\"data\": [Pipeline]}`" }, "401": err } },
                "post": {
                    "summary": "Submit a pipeline file",
                    "requestBody": { "required": true, "content": { "application/toml": { "schema": { "type": "string" } } } },
                    "responses": { "201": { "description": "`{\"id\": …}`" }, "400": err, "401": err, "403": err, "409": err, "429": err }
                }
            },
            "/api/v1/pipelines/{id}": {
                "get": { "summary": "State, last checkpoint, rows in/out, lag, last error, graph, checkpoint history, loads, the last [verify]", "parameters": pipeline_id, "responses": { "200": { "description": "Pipeline" }, "404": err } },
                "delete": { "summary": "Stop it and forget it with its state", "parameters": pipeline_id, "responses": { "204": { "description": "deleted" }, "404": err, "429": err } }
            },
            "/api/v1/pipelines/{id}/pause": action("Stop after a final checkpoint; resume goes on from it"),
            "/api/v1/pipelines/{id}/resume": action("Run again from the last checkpoint"),
            "/api/v1/pipelines/{id}/stop": action("Stop after a final checkpoint"),
            "/api/v1/pipelines/{id}/savepoint": action("Take a checkpoint now: `{\"checkpoint\": n}`"),
            "/api/v1/plugins/{name}": {
                "put": {
                    "summary": "Upload a prebuilt WebAssembly component the tenant's pipelines name as `plugin = \"<name>\"`",
                    "parameters": [{ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }],
                    "requestBody": { "required": true, "content": { "application/wasm": { "schema": { "type": "string", "format": "binary" } } } },
                    "responses": { "201": { "description": "kept" }, "400": err, "401": err, "429": err }
                }
            },
            "/api/v1/whoami": { "get": { "summary": "The caller: `{\"tenant\": …}` or `{\"admin\": true}`", "responses": { "200": { "description": "caller" }, "401": err } } }
        }
    })
}
