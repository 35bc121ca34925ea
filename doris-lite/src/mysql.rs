//! The MySQL-protocol listener (§6): handshake as Doris, `mysql_native_password`, and
//! statements through the shared SQL executor.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use opensrv_mysql::{
    AsyncMysqlIntermediary, AsyncMysqlShim, Column, ColumnFlags, ColumnType, ErrorKind, InitWriter,
    IntermediaryOptions, OkResponse, ParamParser, QueryResultWriter, StatementMetaWriter, StatusFlags,
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
                None => self.out.extend_from_slice(&p[..4 + len]),
            }
            at += 4 + len;
        }
        self.pending.drain(..at);
    }
}

/// `(code, marker length)` of an error packet payload carrying the code marker.
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

    async fn on_prepare<'a>(&'a mut self, _query: &'a str, info: StatementMetaWriter<'a, W>) -> io::Result<()> {
        info.error(
            ErrorKind::ER_UNSUPPORTED_PS,
            b"errCode = 2, detailMessage = doris-lite does not support server-side prepared statements",
        )
        .await
    }

    async fn on_execute<'a>(
        &'a mut self,
        _id: u32,
        _params: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        results.error(ErrorKind::ER_UNSUPPORTED_PS, b"errCode = 2, detailMessage = unknown prepared statement").await
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
        match self.exec.execute(&mut self.session, query).await {
            Ok(Outcome::Rows(rs)) => {
                let cols: Vec<Column> = rs
                    .columns
                    .iter()
                    .map(|(n, k)| Column {
                        table: String::new(),
                        column: n.clone(),
                        coltype: col_type(*k),
                        colflags: ColumnFlags::empty(),
                    })
                    .collect();
                let mut w = results.start(&cols).await?;
                for row in &rs.rows {
                    for cell in row {
                        w.write_col(cell.as_deref())?;
                    }
                    w.end_row().await?;
                }
                w.finish().await
            }
            Ok(Outcome::Done { affected, info }) => {
                results
                    .completed(OkResponse {
                        affected_rows: affected,
                        info,
                        status_flags: StatusFlags::SERVER_STATUS_AUTOCOMMIT,
                        ..Default::default()
                    })
                    .await
            }
            Err(e) => write_error(results, &e).await,
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

/// Accepts MySQL connections until the listener task is dropped (which closes them too).
pub async fn serve(listener: TcpListener, exec: Executor, users: Arc<HashMap<String, String>>) {
    crate::net::serve_tcp(listener, move |stream| {
        let _ = stream.set_nodelay(true);
        let id = CONNECTION_IDS.fetch_add(1, Ordering::Relaxed);
        let conn = Connection {
            exec: exec.clone(),
            users: users.clone(),
            session: Session::new("root", id),
            authenticated_user: Mutex::new(None),
            salt: make_salt(id),
        };
        async move {
            let (r, w) = stream.into_split();
            let w = ErrorCodeWriter::new(w);
            let opts = IntermediaryOptions {
                process_use_statement_on_query: true,
                reject_connection_on_dbname_absence: false,
            };
            if let Err(e) = AsyncMysqlIntermediary::run_with_options(conn, r, w, &opts).await {
                tracing::debug!(error = %e, "mysql connection ended");
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

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
