//! Arrow Flight SQL (§4): Basic → Bearer sessions, statements and prepared statements through
//! the shared executor, results redeemed with `DoGet` on the same port, `GetSqlInfo`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    Any, CommandGetSqlInfo, CommandPreparedStatementQuery, CommandStatementQuery, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc,
    Ticket,
};
use base64::Engine as _;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use sha1::{Digest, Sha1};
use tokio::sync::Mutex as AsyncMutex;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

use crate::faults::{self, DebugPoints};
use crate::sql::{Executor, Session, SqlError};
use crate::types::DORIS_TYPE_KEY;

/// Results not redeemed within this time are dropped.
const RESULT_TTL: Duration = Duration::from_secs(600);
/// Target size of one Flight data message (well under gRPC's usual 16 MiB limit).
const MAX_FLIGHT_DATA_BYTES: usize = 4 << 20;

static SQL_INFO: LazyLock<Option<SqlInfoData>> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "DorisFE");
    b.append(SqlInfo::FlightSqlServerVersion, "1.0");
    b.append(SqlInfo::FlightSqlServerArrowVersion, "13.0");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "`");
    b.append(SqlInfo::SqlIdentifierCase, 3_i32); // case insensitive
    b.append(SqlInfo::SqlQuotedIdentifierCase, 3_i32);
    b.build().ok()
});

type Shared<T> = Arc<Mutex<T>>;

/// Standard base64 with or without padding (clients differ).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

#[derive(Debug)]
struct Pending {
    at: Instant,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

/// The Flight SQL service.
#[derive(Debug, Clone)]
pub struct FlightSql {
    exec: Executor,
    users: Arc<HashMap<String, String>>,
    debug: DebugPoints,
    sessions: Shared<HashMap<String, Arc<AsyncMutex<Session>>>>,
    results: Shared<HashMap<String, Pending>>,
    prepared: Shared<HashMap<String, String>>,
    counter: Arc<AtomicU64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An authenticated call: its session and the token to echo.
struct Caller {
    token: String,
    session: Arc<AsyncMutex<Session>>,
}

impl FlightSql {
    /// A service running statements with `exec`.
    pub fn new(exec: Executor, users: Arc<HashMap<String, String>>, debug: DebugPoints) -> FlightSql {
        FlightSql {
            exec,
            users,
            debug,
            sessions: Arc::default(),
            results: Arc::default(),
            prepared: Arc::default(),
            counter: Arc::new(AtomicU64::new(1)),
        }
    }

    /// A fresh unguessable id (hex).
    fn new_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut h = Sha1::new();
        h.update(n.to_le_bytes());
        h.update(nanos.to_le_bytes());
        h.update((Arc::as_ptr(&self.counter) as usize).to_le_bytes());
        h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// Basic credentials open a session; a Bearer token names one (§4.2).
    #[allow(clippy::result_large_err)]
    fn authenticate(&self, md: &MetadataMap) -> Result<Caller, Status> {
        let Some(h) = md.get("authorization").and_then(|v| v.to_str().ok()) else {
            return Err(Status::unauthenticated("no authorization header"));
        };
        if let Some(token) = h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")) {
            let token = token.trim().to_string();
            let session = lock(&self.sessions).get(&token).cloned();
            return match session {
                Some(session) => Ok(Caller { token, session }),
                None => Err(Status::unauthenticated("invalid bearer token")),
            };
        }
        let Some(b64) = h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")) else {
            return Err(Status::unauthenticated("unsupported authorization scheme"));
        };
        let raw = BASE64.decode(b64.trim()).map_err(|_| Status::unauthenticated("malformed Basic credentials"))?;
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (user, password) = raw.split_once(':').unwrap_or((raw.as_str(), ""));
        let user = user.split('@').next().unwrap_or(user);
        if self.users.get(user).is_none_or(|p| p != password) {
            return Err(Status::unauthenticated(format!(
                "Access denied for user '{user}' (using password: {})",
                if password.is_empty() { "NO" } else { "YES" }
            )));
        }
        let token = self.new_id();
        let id = (self.counter.load(Ordering::Relaxed) & 0xffff_ffff) as u32;
        let session = Arc::new(AsyncMutex::new(Session::new(user, id)));
        lock(&self.sessions).insert(token.clone(), session.clone());
        Ok(Caller { token, session })
    }

    fn with_token<T>(mut resp: Response<T>, token: &str) -> Response<T> {
        if let Ok(v) = MetadataValue::try_from(format!("Bearer {token}")) {
            resp.metadata_mut().insert("authorization", v);
        }
        resp
    }

    /// Runs `sql` in the caller's session and keeps the result for `DoGet`.
    async fn run(&self, caller: &Caller, sql: &str, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        let (schema, batches) = {
            let mut session = caller.session.lock().await;
            let result = self.exec.execute_arrow(&mut session, sql).await;
            let (state, rows) = match &result {
                Ok((_, batches)) => ("EOF", batches.iter().map(|b| b.num_rows() as u64).sum()),
                Err(_) => ("ERR", 0),
            };
            self.exec.audit(&session, "arrow_flight_sql", sql, state, rows);
            result.map_err(sql_status)?
        };
        let (schema, batches) = to_flight_types(schema, batches).map_err(|e| Status::internal(e.to_string()))?;
        let handle = self.new_id();
        {
            let mut results = lock(&self.results);
            results.retain(|_, p| p.at.elapsed() < RESULT_TTL);
            results.insert(handle.clone(), Pending { at: Instant::now(), schema: schema.clone(), batches });
        }
        let ticket = TicketStatementQuery { statement_handle: handle.into_bytes().into() };
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))
            .map(|i| i.with_endpoint(endpoint).with_descriptor(descriptor).with_total_records(-1).with_total_bytes(-1))
    }
}

/// Doris' Flight error shapes: `UNAVAILABLE` + `doris-error-code` for incremental-read
/// readiness errors (§5.6), `INTERNAL` otherwise (§4.3).
fn sql_status(e: SqlError) -> Status {
    let text = e.doris_text();
    if e.code == crate::changelog::ERR_INCR_WINDOW_NOT_READY
        || e.code == crate::changelog::ERR_INCR_VISIBLE_WAIT_TIMEOUT
    {
        let name = if e.code == crate::changelog::ERR_INCR_WINDOW_NOT_READY {
            "ERR_INCR_WINDOW_NOT_READY"
        } else {
            "ERR_INCR_VISIBLE_WAIT_TIMEOUT"
        };
        let mut md = MetadataMap::new();
        if let Ok(v) = MetadataValue::try_from(e.code.to_string()) {
            md.insert("doris-error-code", v);
        }
        md.insert("doris-error-name", MetadataValue::from_static(name));
        return Status::with_metadata(tonic::Code::Unavailable, text, md);
    }
    Status::internal(format!("get flight info statement failed, {text}, error code: {}, error msg: {text}", e.code))
}

/// Applies the Flight type mapping (§4.5): LARGEINT as text, DATETIME(p) in seconds /
/// milliseconds / microseconds by precision, without a time zone.
fn to_flight_types(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(SchemaRef, Vec<RecordBatch>), arrow::error::ArrowError> {
    let targets: Vec<Option<DataType>> = schema
        .fields()
        .iter()
        .map(|f| {
            let tag = f.metadata().get(DORIS_TYPE_KEY)?;
            if tag == "LARGEINT" {
                return Some(DataType::Utf8);
            }
            let p: u8 = tag.strip_prefix("DATETIMEV2(")?.trim_end_matches(')').parse().ok()?;
            let unit = match p {
                0 => TimeUnit::Second,
                1..=3 => TimeUnit::Millisecond,
                _ => TimeUnit::Microsecond,
            };
            Some(DataType::Timestamp(unit, None))
        })
        .collect();
    if targets.iter().all(Option::is_none) {
        return Ok((schema, batches));
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&targets)
        .map(|(f, t)| match t {
            Some(t) => f.as_ref().clone().with_data_type(t.clone()),
            None => f.as_ref().clone(),
        })
        .collect();
    let out_schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let out = batches
        .into_iter()
        .map(|b| {
            let cols = b
                .columns()
                .iter()
                .zip(&targets)
                .map(|(c, t)| match (t, c.data_type()) {
                    // Casting would clip LARGEINT's 39th digit (decimal128 shows 38).
                    (Some(DataType::Utf8), DataType::Decimal128(..)) => {
                        let d = c.as_primitive::<arrow::datatypes::Decimal128Type>();
                        Ok(Arc::new(d.iter().map(|v| v.map(|v| v.to_string())).collect::<StringArray>()) as ArrayRef)
                    }
                    (Some(t), _) => arrow::compute::cast(c, t),
                    (None, _) => Ok(c.clone()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            RecordBatch::try_new(out_schema.clone(), cols)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((out_schema, out))
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let reply = HandshakeResponse { protocol_version: 0, payload: caller.token.clone().into_bytes().into() };
        let out: Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>> =
            Box::pin(futures::stream::iter(vec![Ok(reply)]));
        Ok(Self::with_token(Response::new(out), &caller.token))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let info = self.run(&caller, &query.query, request.into_inner()).await?;
        Ok(Self::with_token(Response::new(info), &caller.token))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).into_owned();
        let Some(sql) = lock(&self.prepared).get(&handle).cloned() else {
            return Err(Status::not_found(format!("prepared statement [{handle}] not found")));
        };
        let info = self.run(&caller, &sql, request.into_inner()).await?;
        Ok(Self::with_token(Response::new(info), &caller.token))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let handle = String::from_utf8_lossy(&ticket.statement_handle).into_owned();
        let Some(p) = lock(&self.results).remove(&handle) else {
            return Err(Status::not_found(format!("result [{handle}] not found (already read or expired)")));
        };
        if let Some(stall) = self.debug.fire(faults::FLIGHT_STALL) {
            tokio::time::sleep(std::time::Duration::from_millis(stall.u64("ms", 1000))).await;
        }
        let cut = self.debug.fire(faults::FLIGHT_DROP_STREAM).map(|f| f.u64("after_batches", 1) as usize);
        let n = p.batches.len();
        let batches = futures::stream::iter(p.batches.into_iter().map(Ok::<_, FlightError>));
        let batches: Pin<Box<dyn Stream<Item = Result<RecordBatch, FlightError>> + Send>> = match cut {
            Some(after) => Box::pin(batches.take(after.min(n)).chain(futures::stream::once(async move {
                Err(FlightError::Tonic(Box::new(Status::internal(format!(
                    "debug point Flight.drop_stream: stream dropped after {after} batches"
                )))))
            }))),
            None => Box::pin(batches),
        };
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(p.schema)
            .with_max_flight_data_size(MAX_FLIGHT_DATA_BYTES)
            .build(batches)
            .map_err(Status::from);
        Ok(Self::with_token(Response::new(Box::pin(stream) as DoGetStream), &caller.token))
    }

    async fn do_get_fallback(&self, request: Request<Ticket>, message: Any) -> Result<Response<DoGetStream>, Status> {
        self.authenticate(request.metadata())?;
        Err(Status::unimplemented(format!("do_get: unsupported ticket {}", message.type_url)))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let data = SQL_INFO.as_ref().ok_or_else(|| Status::internal("sql info unavailable"))?;
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(query.into_builder(data).schema().as_ref())
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Self::with_token(Response::new(info), &caller.token))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.authenticate(request.metadata())?;
        let data = SQL_INFO.as_ref().ok_or_else(|| Status::internal("sql info unavailable"))?;
        let builder = query.into_builder(data);
        let schema = builder.schema();
        let batch = builder.build();
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(futures::stream::once(async { batch }))
            .map_err(Status::from);
        Ok(Self::with_token(Response::new(Box::pin(stream) as DoGetStream), &caller.token))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        self.authenticate(request.metadata())?;
        let handle = self.new_id();
        lock(&self.prepared).insert(handle.clone(), query.query);
        // As Doris: the result schema is only known when the statement runs, so a placeholder
        // one-column schema stands for it (an empty one would read as an update).
        let dummy = Schema::new(vec![Field::new("ResultMeta", DataType::Utf8, true)]);
        let IpcMessage(schema_bytes) = SchemaAsIpc::new(&dummy, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema: schema_bytes,
            parameter_schema: Default::default(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        self.authenticate(request.metadata())?;
        lock(&self.prepared).remove(String::from_utf8_lossy(&query.prepared_statement_handle).as_ref());
        Ok(())
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let caller = self.authenticate(request.metadata())?;
        if request.get_ref().r#type == "CloseSession" {
            lock(&self.sessions).remove(&caller.token);
            return Ok(Response::new(Box::pin(futures::stream::empty())));
        }
        Err(Status::unimplemented(format!("action {} is not supported", request.get_ref().r#type)))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// The gRPC router of the Flight SQL port.
pub fn router(svc: FlightSql) -> axum::Router {
    let server = FlightServiceServer::new(svc).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20);
    tonic::service::Routes::new(server).into_axum_router()
}
