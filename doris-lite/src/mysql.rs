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

async fn write_error<W: AsyncWrite + Send + Unpin>(w: QueryResultWriter<'_, W>, e: &SqlError) -> io::Result<()> {
    w.error(ErrorKind::from(e.code), e.doris_text().as_bytes()).await
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
    fn scramble_is_empty_for_empty_password() {
        assert!(native_password_scramble("", b"12345678901234567890").is_empty());
        assert_eq!(native_password_scramble("pw", b"12345678901234567890").len(), 20);
    }
}
