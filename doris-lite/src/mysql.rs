//! The MySQL-protocol listener (§6): handshake as Doris, `mysql_native_password`, and
//! statements through the shared SQL executor.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use opensrv_mysql::{
    AsyncMysqlIntermediary, AsyncMysqlShim, Column, ColumnFlags, ColumnType, ErrorKind, InitWriter,
    IntermediaryOptions, OkResponse, ParamParser, QueryResultWriter, StatementMetaWriter, StatusFlags, ValueInner,
};
use sha1::{Digest, Sha1};
use tokio::io::AsyncWrite;
use tokio::net::TcpListener;

use crate::sql::{ColKind, Executor, Outcome, SERVER_VERSION, Session, SqlError};

static CONNECTION_IDS: AtomicU32 = AtomicU32::new(1);

/// One MySQL connection.
struct Connection {
    exec: Executor,
    users: Arc<HashMap<String, String>>,
    session: Session,
    authenticated_user: Mutex<Option<String>>,
    salt: [u8; 20],
    /// Server-side prepared statements (COM_STMT_PREPARE) by id.
    prepared: HashMap<u32, Prepared>,
    next_statement: u32,
}

/// A prepared statement: its text and where its `?` placeholders are.
struct Prepared {
    sql: String,
    holes: Vec<std::ops::Range<usize>>,
}

fn make_salt(seed: u32) -> [u8; 20] {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut h = Sha1::new();
    h.update(nanos.to_le_bytes());
    h.update(seed.to_le_bytes());
    let d = h.finalize();
    let mut out = [0u8; 20];
    for (i, b) in d.iter().enumerate() {
        // Printable, never NUL or '$'.
        out[i] = 0x21 + (b % 0x5d);
        if out[i] == b'$' {
            out[i] = b'%';
        }
    }
    out
}

/// `SHA1(password) XOR SHA1(salt + SHA1(SHA1(password)))`.
fn native_password_scramble(password: &str, salt: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha1::digest(password.as_bytes());
    let stage2 = Sha1::digest(stage1);
    let mut h = Sha1::new();
    h.update(salt);
    h.update(stage2);
    let s = h.finalize();
    stage1.iter().zip(s.iter()).map(|(a, b)| a ^ b).collect()
}

fn col_type(k: ColKind) -> ColumnType {
    match k {
        ColKind::Tiny => ColumnType::MYSQL_TYPE_TINY,
        ColKind::Small => ColumnType::MYSQL_TYPE_SHORT,
        ColKind::Int => ColumnType::MYSQL_TYPE_LONG,
        ColKind::BigInt => ColumnType::MYSQL_TYPE_LONGLONG,
        ColKind::Float => ColumnType::MYSQL_TYPE_FLOAT,
        ColKind::Double => ColumnType::MYSQL_TYPE_DOUBLE,
        ColKind::Decimal => ColumnType::MYSQL_TYPE_NEWDECIMAL,
        ColKind::Date => ColumnType::MYSQL_TYPE_DATE,
        ColKind::DateTime => ColumnType::MYSQL_TYPE_DATETIME,
        ColKind::Str => ColumnType::MYSQL_TYPE_VAR_STRING,
    }
}

/// Marks an error packet whose code the MySQL library cannot name (Doris' own 5xxx codes):
/// `\x01DL<code>\x01` before the message; [`ErrorCodeWriter`] puts the code in place.
const CODE_MARK: u8 = 0x01;

async fn write_error<W: AsyncWrite + Send + Unpin>(w: QueryResultWriter<'_, W>, e: &SqlError) -> io::Result<()> {
    if e.code >= 5000 {
        let msg = format!("{}DL{}{}{}", CODE_MARK as char, e.code, CODE_MARK as char, e.doris_text());
        return w.error(ErrorKind::ER_UNKNOWN_ERROR, msg.as_bytes()).await;
    }
    w.error(ErrorKind::from(e.code), e.doris_text().as_bytes()).await
}

/// Writes MySQL packets through, giving marked error packets their real code.
struct ErrorCodeWriter<W> {
    inner: W,
    pending: Vec<u8>,
    out: Vec<u8>,
}

impl<W> ErrorCodeWriter<W> {
    fn new(inner: W) -> Self {
        ErrorCodeWriter { inner, pending: Vec::new(), out: Vec::new() }
    }

    /// Moves the complete packets of `pending` to `out`, rewriting marked error packets.
    fn take_packets(&mut self) {
        let mut at = 0;
        while self.pending.len() - at >= 4 {
            let p = &self.pending[at..];
            let len = p[0] as usize | (p[1] as usize) << 8 | (p[2] as usize) << 16;
            if p.len() < 4 + len {
                break;
            }
            let payload = &p[4..4 + len];
            match marked_code(payload) {
                Some((code, mark_len)) => {
                    let new_len = len - mark_len;
                    self.out.extend_from_slice(&[new_len as u8, (new_len >> 8) as u8, (new_len >> 16) as u8, p[3]]);
                    self.out.push(0xFF);
                    self.out.extend_from_slice(&code.to_le_bytes());
                    self.out.extend_from_slice(&payload[3..9]);
                    self.out.extend_from_slice(&payload[9 + mark_len..]);
                }
                None => match access_denied(payload) {
                    Some(new) => {
                        let n = new.len();
                        self.out.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, p[3]]);
                        self.out.extend_from_slice(&new);
                    }
                    None => self.out.extend_from_slice(&p[..4 + len]),
                },
            }
            at += 4 + len;
        }
        self.pending.drain(..at);
    }
}

/// `(code, marker length)` of an error packet payload carrying the code marker.
/// The MySQL library's own refusal of a login (1698 `Authenticate failed, user: "etl", …`) as
/// Doris answers one: 1045, SQLSTATE 28000, `Access denied for user 'etl' (using password: YES)`.
fn access_denied(payload: &[u8]) -> Option<Vec<u8>> {
    if payload.len() < 9 || payload[0] != 0xFF || u16::from_le_bytes([payload[1], payload[2]]) != 1698 {
        return None;
    }
    let msg = std::str::from_utf8(&payload[9..]).ok()?;
    let user = msg.strip_prefix("Authenticate failed, user: \"")?.split('"').next()?;
    let mut out = vec![0xFF];
    out.extend_from_slice(&1045u16.to_le_bytes());
    out.extend_from_slice(b"#28000");
    out.extend_from_slice(format!("Access denied for user '{user}' (using password: YES)").as_bytes());
    Some(out)
}

fn marked_code(payload: &[u8]) -> Option<(u16, usize)> {
    if payload.len() < 9 || payload[0] != 0xFF || payload[3] != b'#' {
        return None;
    }
    let msg = &payload[9..];
    let rest = msg.strip_prefix(&[CODE_MARK, b'D', b'L'])?;
    let end = rest.iter().position(|b| *b == CODE_MARK)?;
    let code: u16 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((code, 3 + end + 1))
}

impl<W: AsyncWrite + Unpin> ErrorCodeWriter<W> {
    fn poll_drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        while !self.out.is_empty() {
            match std::pin::Pin::new(&mut self.inner).poll_write(cx, &self.out) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.out.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ErrorCodeWriter<W> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.pending.extend_from_slice(buf);
        this.take_packets();
        // Bytes are accepted once buffered; flush pushes them out.
        if let std::task::Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return std::task::Poll::Ready(Err(e));
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            // An incomplete packet at flush time: pass it on as it is.
            let rest = std::mem::take(&mut this.pending);
            this.out.extend_from_slice(&rest);
        }
        match this.poll_drain(cx) {
            std::task::Poll::Ready(Ok(())) => std::pin::Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.poll_drain(cx) {
            std::task::Poll::Ready(Ok(())) => std::pin::Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin> AsyncMysqlShim<W> for Connection {
    type Error = io::Error;

    fn version(&self) -> String {
        SERVER_VERSION.to_string()
    }

    fn connect_id(&self) -> u32 {
        self.session.connection_id
    }

    fn salt(&self) -> [u8; 20] {
        self.salt
    }

    async fn authenticate(&self, _plugin: &str, username: &[u8], salt: &[u8], auth_data: &[u8]) -> bool {
        let user = String::from_utf8_lossy(username).to_string();
        let user = user.split('@').next().unwrap_or(&user).to_string();
        let Some(password) = self.users.get(&user) else {
            return false;
        };
        let ok = native_password_scramble(password, salt) == auth_data
            || (password.is_empty() && auth_data.iter().all(|b| *b == 0));
        if ok && let Ok(mut u) = self.authenticated_user.lock() {
            *u = Some(user);
        }
        ok
    }

    async fn on_prepare<'a>(&'a mut self, query: &'a str, info: StatementMetaWriter<'a, W>) -> io::Result<()> {
        self.sync_user();
        let holes = match crate::sql::placeholders(query) {
            Ok(h) => h,
            Err(e) => return info.error(ErrorKind::from(e.code), e.doris_text().as_bytes()).await,
        };
        let id = self.next_statement;
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        let params: Vec<Column> = holes
            .iter()
            .map(|_| Column {
                table: String::new(),
                column: "?".into(),
                coltype: ColumnType::MYSQL_TYPE_VAR_STRING,
                colflags: ColumnFlags::empty(),
            })
            .collect();
        self.prepared.insert(id, Prepared { sql: query.to_string(), holes });
        // The result's columns are sent with each execution's result set.
        info.reply(id, &params, &[]).await
    }

    async fn on_execute<'a>(
        &'a mut self,
        id: u32,
        params: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        self.sync_user();
        let Some(p) = self.prepared.get(&id) else {
            let msg =
                format!("errCode = 2, detailMessage = Unknown prepared statement handler ({id}) given to EXECUTE");
            return results.error(ErrorKind::ER_UNKNOWN_STMT_HANDLER, msg.as_bytes()).await;
        };
        let literals: Vec<String> = params.into_iter().map(|v| param_literal(v.value.into_inner())).collect();
        if literals.len() != p.holes.len() {
            let msg = format!(
                "errCode = 2, detailMessage = the statement has {} placeholders, {} values were sent",
                p.holes.len(),
                literals.len()
            );
            return results.error(ErrorKind::ER_WRONG_ARGUMENTS, msg.as_bytes()).await;
        }
        let sql = crate::sql::bind(&p.sql, &p.holes, &literals);
        tracing::debug!(query = %sql, "mysql execute");
        let outcome = self.exec.execute(&mut self.session, &sql).await;
        self.exec.audit_outcome(&self.session, &sql, &outcome);
        write_outcomes(results, vec![outcome], true).await
    }

    async fn on_close<'a>(&'a mut self, _stmt: u32)
    where
        W: 'async_trait,
    {
    }

    async fn on_init<'a>(&'a mut self, db: &'a str, w: InitWriter<'a, W>) -> io::Result<()> {
        self.sync_user();
        // As Doris: a handshake with an empty database name (mysql-connector-python sends one)
        // selects none, and `internal.<db>` is the internal catalog's database.
        if db.is_empty() {
            return w.ok().await;
        }
        let db = db.strip_prefix("internal.").unwrap_or(db);
        let exists = self.exec.engine.lock().dbs.contains_key(db);
        if exists {
            self.session.db = Some(db.to_string());
            w.ok().await
        } else {
            w.error(
                ErrorKind::ER_BAD_DB_ERROR,
                format!("errCode = 2, detailMessage = Unknown database '{db}'").as_bytes(),
            )
            .await
        }
    }

    async fn on_query<'a>(&'a mut self, query: &'a str, results: QueryResultWriter<'a, W>) -> io::Result<()> {
        self.sync_user();
        tracing::debug!(query, "mysql query");
        // Several statements in one query (`a; b`) answer with one result each, as Doris does;
        // the first error ends the query.
        let mut outcomes = Vec::new();
        for statement in crate::sql::split_statements(query) {
            let outcome = self.exec.execute(&mut self.session, statement).await;
            self.exec.audit_outcome(&self.session, statement, &outcome);
            let failed = outcome.is_err();
            outcomes.push(outcome);
            if failed {
                break;
            }
        }
        write_outcomes(results, outcomes, false).await
    }
}

/// Writes the outcomes of a query's statements, one result each; an error (the last outcome,
/// if any) ends the answer.
async fn write_outcomes<W: AsyncWrite + Send + Unpin>(
    results: QueryResultWriter<'_, W>,
    outcomes: Vec<Result<Outcome, SqlError>>,
    binary: bool,
) -> io::Result<()> {
    let metas: Vec<(Vec<Column>, Vec<ColKind>)> = outcomes
        .iter()
        .map(|o| match o {
            Ok(Outcome::Rows(rs)) => result_columns(rs, binary),
            _ => (Vec::new(), Vec::new()),
        })
        .collect();
    let n = outcomes.len();
    let mut results = results;
    for (i, (outcome, (cols, kinds))) in outcomes.into_iter().zip(&metas).enumerate() {
        match write_outcome(results, outcome, cols, kinds, binary, i + 1 < n).await? {
            Some(next) => results = next,
            None => return Ok(()),
        }
    }
    results.no_more_results().await
}

/// The columns of a result set, and the kind each value is sent as. The binary protocol
/// (prepared statements) sends each value in its column's type; a column whose texts do not
/// all parse as that type goes as a string.
fn result_columns(rs: &crate::sql::ResultSet, binary: bool) -> (Vec<Column>, Vec<ColKind>) {
    let kinds: Vec<ColKind> = rs
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, k))| {
            let fits = !binary || rs.rows.iter().all(|r| r[i].as_deref().is_none_or(|t| typed(*k, t).is_some()));
            if fits { *k } else { ColKind::Str }
        })
        .collect();
    let cols = rs
        .columns
        .iter()
        .zip(&kinds)
        .map(|((n, _), k)| Column {
            table: String::new(),
            column: n.clone(),
            coltype: col_type(*k),
            colflags: ColumnFlags::empty(),
        })
        .collect();
    (cols, kinds)
}

/// Writes one statement's outcome, leaving the writer for the next result (`more`: another
/// follows). An error is written in full: nothing may follow it (`None`).
async fn write_outcome<'b, W: AsyncWrite + Send + Unpin>(
    results: QueryResultWriter<'b, W>,
    outcome: Result<Outcome, SqlError>,
    cols: &'b [Column],
    kinds: &[ColKind],
    binary: bool,
    more: bool,
) -> io::Result<Option<QueryResultWriter<'b, W>>> {
    match outcome {
        Ok(Outcome::Rows(rs)) => {
            let mut w = results.start(cols).await?;
            for row in &rs.rows {
                for (cell, k) in row.iter().zip(kinds) {
                    match (binary, cell.as_deref()) {
                        (true, Some(t)) => match typed(*k, t) {
                            Some(Typed::I8(v)) => w.write_col(v)?,
                            Some(Typed::I16(v)) => w.write_col(v)?,
                            Some(Typed::I32(v)) => w.write_col(v)?,
                            Some(Typed::I64(v)) => w.write_col(v)?,
                            Some(Typed::F32(v)) => w.write_col(v)?,
                            Some(Typed::F64(v)) => w.write_col(v)?,
                            Some(Typed::Date(v)) => w.write_col(v)?,
                            Some(Typed::DateTime(v)) => w.write_col(v)?,
                            Some(Typed::Text) | None => w.write_col(t)?,
                        },
                        (_, cell) => w.write_col(cell)?,
                    }
                }
                w.end_row().await?;
            }
            w.finish_one().await.map(Some)
        }
        Ok(Outcome::Done { affected, info }) => {
            let mut status_flags = StatusFlags::SERVER_STATUS_AUTOCOMMIT;
            if more {
                status_flags |= StatusFlags::SERVER_MORE_RESULTS_EXISTS;
            }
            let ok = OkResponse { affected_rows: affected, info, status_flags, ..Default::default() };
            results.complete_one(ok).await.map(Some)
        }
        Err(e) => {
            write_error(results, &e).await?;
            Ok(None)
        }
    }
}

/// A cell's text as the binary protocol's value for its column kind.
enum Typed {
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Date(chrono::NaiveDate),
    DateTime(chrono::NaiveDateTime),
    Text,
}

fn typed(kind: ColKind, t: &str) -> Option<Typed> {
    Some(match kind {
        ColKind::Tiny => Typed::I8(t.parse().ok()?),
        ColKind::Small => Typed::I16(t.parse().ok()?),
        ColKind::Int => Typed::I32(t.parse().ok()?),
        ColKind::BigInt => Typed::I64(t.parse().ok()?),
        ColKind::Float => Typed::F32(t.parse().ok()?),
        ColKind::Double => Typed::F64(t.parse().ok()?),
        ColKind::Date => Typed::Date(chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d").ok()?),
        ColKind::DateTime => Typed::DateTime(chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f").ok()?),
        ColKind::Decimal | ColKind::Str => Typed::Text,
    })
}

/// A parameter of COM_STMT_EXECUTE as the SQL literal bound in its placeholder's place.
fn param_literal(v: ValueInner<'_>) -> String {
    fn le(b: &[u8], at: usize, n: usize) -> u64 {
        b.get(at..at + n).map_or(0, |s| s.iter().rev().fold(0, |acc, x| acc << 8 | u64::from(*x)))
    }
    match v {
        ValueInner::NULL => "NULL".into(),
        ValueInner::Int(i) => i.to_string(),
        ValueInner::UInt(u) => u.to_string(),
        ValueInner::Double(f) if f.is_finite() => format!("{f:?}"),
        ValueInner::Double(f) => crate::sql::quote_literal(&f.to_string()),
        ValueInner::Bytes(b) => crate::sql::quote_literal(&String::from_utf8_lossy(b)),
        ValueInner::Date(b) | ValueInner::Datetime(b) => {
            let mut t = format!("{:04}-{:02}-{:02}", le(b, 0, 2), le(b, 2, 1), le(b, 3, 1));
            if b.len() >= 7 {
                t += &format!(" {:02}:{:02}:{:02}", le(b, 4, 1), le(b, 5, 1), le(b, 6, 1));
            }
            if b.len() >= 11 {
                t += &format!(".{:06}", le(b, 7, 4));
            }
            crate::sql::quote_literal(&t)
        }
        ValueInner::Time(b) => {
            let sign = if le(b, 0, 1) == 1 { "-" } else { "" };
            let hours = le(b, 1, 4) * 24 + le(b, 5, 1);
            let mut t = format!("{sign}{hours:02}:{:02}:{:02}", le(b, 6, 1), le(b, 7, 1));
            if b.len() >= 12 {
                t += &format!(".{:06}", le(b, 8, 4));
            }
            crate::sql::quote_literal(&t)
        }
    }
}

impl Connection {
    fn sync_user(&mut self) {
        if let Ok(mut u) = self.authenticated_user.lock()
            && let Some(user) = u.take()
        {
            self.session.user = user;
        }
    }
}

/// Accepts MySQL connections until the listener task is dropped (which closes them too). With
/// `tls`, the greeting offers SSL (`CLIENT_SSL`) and a client that asks for it continues over TLS,
/// as a Doris FE with `enable_ssl` serves it; a client that does not stays in plain text.
pub async fn serve(
    listener: TcpListener,
    exec: Executor,
    users: Arc<HashMap<String, String>>,
    tls: Option<crate::net::TlsAcceptor>,
) {
    crate::net::serve_tcp(listener, move |stream| {
        let _ = stream.set_nodelay(true);
        let id = CONNECTION_IDS.fetch_add(1, Ordering::Relaxed);
        let conn = Connection {
            exec: exec.clone(),
            users: users.clone(),
            session: Session::new("root", id),
            authenticated_user: Mutex::new(None),
            salt: make_salt(id),
            prepared: HashMap::new(),
            next_statement: 1,
        };
        let tls = tls.clone();
        async move {
            let result = match tls {
                None => {
                    let (r, w) = stream.into_split();
                    run(conn, r, w).await
                }
                Some(acceptor) => {
                    // The protocol runs over a pipe; `starttls` moves its bytes to and from the
                    // socket, in TLS from the client's SSL request on.
                    let (inner, outer) = tokio::io::duplex(64 * 1024);
                    let (r, w) = tokio::io::split(inner);
                    let (a, b) = tokio::join!(run(conn, r, w), starttls(stream, outer, acceptor));
                    a.and(b)
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "mysql connection ended");
            }
        }
    })
    .await
}

async fn run<R, W>(conn: Connection, r: R, w: W) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin,
{
    let w = ErrorCodeWriter::new(w);
    let opts = IntermediaryOptions { process_use_statement_on_query: true, reject_connection_on_dbname_absence: false };
    AsyncMysqlIntermediary::run_with_options(conn, r, w, &opts).await
}

/// `CLIENT_SSL` of the capability flags.
const CLIENT_SSL: u32 = 0x0800;

/// Moves a connection's packets between `socket` and the protocol's `pipe`: the greeting goes
/// out offering SSL; a client's SSL request (a 32-byte handshake response with `CLIENT_SSL`)
/// turns the socket into TLS, and the handshake response that follows in TLS reaches the protocol
/// without the flag, as if the connection had been plain from the start.
async fn starttls(
    mut socket: tokio::net::TcpStream,
    mut pipe: tokio::io::DuplexStream,
    acceptor: crate::net::TlsAcceptor,
) -> io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let mut greeting = read_packet(&mut pipe).await?;
    offer_ssl(&mut greeting)?;
    socket.write_all(&greeting).await?;
    let answer = read_packet(&mut socket).await?;
    let asks_ssl = answer.len() == 4 + 32 && capabilities(&answer) & CLIENT_SSL != 0;
    if !asks_ssl {
        pipe.write_all(&answer).await?;
        tokio::io::copy_bidirectional(&mut socket, &mut pipe).await?;
        return Ok(());
    }
    let Some(mut tls) = crate::net::handshake(&acceptor, socket).await else {
        return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the client's TLS handshake failed"));
    };
    let mut response = read_packet(&mut tls).await?;
    if response.len() < 8 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "handshake response too short"));
    }
    let caps = capabilities(&response) & !CLIENT_SSL;
    response[4..8].copy_from_slice(&caps.to_le_bytes());
    pipe.write_all(&response).await?;
    tokio::io::copy_bidirectional(&mut tls, &mut pipe).await?;
    Ok(())
}

/// One packet (its 4-byte header and payload) from `r`.
async fn read_packet(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let mut packet = vec![0u8; 4];
    r.read_exact(&mut packet).await?;
    let len = u32::from_le_bytes([packet[0], packet[1], packet[2], 0]) as usize;
    packet.resize(4 + len, 0);
    r.read_exact(&mut packet[4..]).await?;
    Ok(packet)
}

/// The capability flags of a handshake response packet (its payload's first four bytes).
fn capabilities(packet: &[u8]) -> u32 {
    packet.get(4..8).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Sets `CLIENT_SSL` in the lower capability flags of a HandshakeV10 packet: after the protocol
/// version, the NUL-terminated server version, the connection id (4) and the first 8 bytes of
/// the salt and a filler byte.
fn offer_ssl(greeting: &mut [u8]) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a HandshakeV10 greeting");
    let payload = greeting.get_mut(4..).ok_or_else(bad)?;
    if payload.first() != Some(&10) {
        return Err(bad());
    }
    let nul = payload[1..].iter().position(|&b| b == 0).ok_or_else(bad)?;
    let at = 1 + nul + 1 + 4 + 8 + 1;
    let flags = payload.get_mut(at..at + 2).ok_or_else(bad)?;
    flags[1] |= (CLIENT_SSL >> 8) as u8;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_greeting_offers_ssl_in_its_lower_capability_flags() {
        // protocol 10, "5.7.99\0", connection id, 8 salt bytes, filler, flags 0xf7ff … (no SSL).
        let mut payload = vec![10u8];
        payload.extend_from_slice(b"5.7.99\0");
        payload.extend_from_slice(&[1, 0, 0, 0]);
        payload.extend_from_slice(&[7; 8]);
        payload.push(0);
        payload.extend_from_slice(&[0xff, 0xf7, 0x21, 0x02]);
        let mut packet = vec![payload.len() as u8, 0, 0, 0];
        packet.extend_from_slice(&payload);
        offer_ssl(&mut packet).unwrap();
        let at = 4 + 1 + 7 + 4 + 8 + 1;
        assert_eq!(u16::from_le_bytes([packet[at], packet[at + 1]]), 0xffff);
        assert!(offer_ssl(&mut [1, 0, 0, 0, 9]).is_err());
    }

    #[test]
    fn marked_error_packets_get_their_code() {
        let msg = b"\x01DL5101\x01errCode = 2, detailMessage = x";
        let mut payload = vec![0xFF, 0x51, 0x04, b'#', b'H', b'Y', b'0', b'0', b'0'];
        payload.extend_from_slice(msg);
        let mut w = ErrorCodeWriter::new(Vec::<u8>::new());
        w.pending.extend_from_slice(&[payload.len() as u8, 0, 0, 1]);
        w.pending.extend_from_slice(&payload);
        w.pending.extend_from_slice(&[1, 0, 0]);
        w.take_packets();
        let text = b"errCode = 2, detailMessage = x";
        let mut want = vec![(9 + text.len()) as u8, 0, 0, 1, 0xFF, 0xED, 0x13, b'#', b'H', b'Y', b'0', b'0', b'0'];
        want.extend_from_slice(text);
        assert_eq!(w.out, want);
        assert_eq!(w.pending, vec![1, 0, 0], "an incomplete packet waits");
    }

    #[test]
    fn scramble_is_empty_for_empty_password() {
        assert!(native_password_scramble("", b"12345678901234567890").is_empty());
        assert_eq!(native_password_scramble("pw", b"12345678901234567890").len(), 20);
    }
}
