//! SQL sessions: Doris statements answered here (SHOW, DESC, SET, USE, INSERT, DELETE, DDL) and
//! SELECT through DataFusion over snapshots of the committed data.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::ddl::{ObjectName, Parser};
use crate::engine::{Engine, EngineError};

mod catalog;
pub mod changelog;
mod describe;
mod dml;
mod error;
pub mod functions;
pub mod keyed_scan;
mod query;
mod result;
mod session;
mod show;
pub mod table_refs;
#[cfg(test)]
mod tests;
mod text;
mod udfs;

pub use catalog::lower_case_fields;
pub(crate) use catalog::mem_table;
pub use error::{SqlError, clean_df_error};
pub use result::{ColKind, Outcome, ResultSet, batches_to_result, cell_text};
pub use session::{Session, default_vars};
pub(crate) use text::token_ranges;
pub use text::{bind, placeholders, quote_literal, split_statements};
pub use udfs::{mysql_date_format, register_doris_functions};

use error::df_error;
use query::session_context;
use result::done;
use text::strip_leading_comments;

/// The listener addresses, for SHOW FRONTENDS / BACKENDS and the HTTP APIs.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    /// FE HTTP port.
    pub fe_http_port: u16,
    /// BE HTTP port.
    pub be_http_port: u16,
    /// MySQL port.
    pub query_port: u16,
    /// Arrow Flight SQL port (0 = not served yet).
    pub flight_port: u16,
    /// Host to advertise.
    pub host: String,
    /// Whether the HTTP ports serve TLS.
    pub tls: bool,
}

impl ServerInfo {
    /// The scheme of the HTTP ports' URLs.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
}

/// The Doris version string shown in `version_comment`.
pub const VERSION_COMMENT: &str = "Doris version doris-2.1.7-rc01-lite (doris-lite)";
/// The MySQL server version of the handshake.
pub const SERVER_VERSION: &str = "5.7.99";

/// Executes SQL for one session.
#[derive(Debug, Clone)]
pub struct Executor {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Listener info.
    pub info: Arc<ServerInfo>,
}

impl Executor {
    /// Records a statement in the engine's audit log: how it ended (`EOF` for a result set, `OK`,
    /// `ERR`) and the rows it returned.
    pub fn audit(&self, s: &Session, protocol: &'static str, stmt: &str, state: &'static str, return_rows: u64) {
        self.engine.audit(crate::engine::AuditEntry {
            time_ms: 0,
            user: s.user.clone(),
            db: s.db.clone().unwrap_or_default(),
            protocol,
            stmt: stmt.to_string(),
            state,
            return_rows,
        });
    }

    /// [`Executor::audit`] of a MySQL statement's outcome.
    pub fn audit_outcome(&self, s: &Session, stmt: &str, outcome: &Result<Outcome, SqlError>) {
        let (state, rows) = match outcome {
            Ok(Outcome::Rows(rs)) => ("EOF", rs.rows.len() as u64),
            Ok(Outcome::Done { .. }) => ("OK", 0),
            Err(_) => ("ERR", 0),
        };
        self.audit(s, "mysql", stmt, state, rows);
    }

    fn resolve<'a>(&self, s: &'a Session, name: &'a ObjectName) -> Result<String, SqlError> {
        match name.db.as_deref().or(s.db.as_deref()) {
            Some(d) => Ok(d.to_string()),
            None => Err(EngineError::NoDatabase.into()),
        }
    }

    /// Runs one statement.
    pub async fn execute(&self, s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        if trimmed.is_empty() {
            return Ok(done());
        }
        let stripped = strip_leading_comments(trimmed);
        let mut p = Parser::new(stripped)?;
        let first = match p.peek() {
            Token::Word(w) => w.value.to_ascii_uppercase(),
            Token::LParen => "SELECT".into(),
            _ => String::new(),
        };
        match first.as_str() {
            "SELECT" | "WITH" | "VALUES" | "EXPLAIN" => self.query(s, stripped).await,
            "CREATE" | "ALTER" if p.is_kw_at(1, "VIEW") || p.is_kw_at(1, "OR") => self.create_view(s, stripped).await,
            "CREATE" | "DROP" | "TRUNCATE" | "ALTER" => {
                if p.is_kw_at(1, "USER")
                    || p.is_kw_at(1, "ROLE")
                    || p.is_kw_at(1, "MATERIALIZED")
                    || p.is_kw_at(1, "INDEX")
                {
                    return Err(SqlError::other(format!("doris-lite does not support: {stripped}")));
                }
                if p.is_kw_at(1, "DATABASE") || p.is_kw_at(1, "SCHEMA") {
                    // Database names are resolved from the statement itself.
                }
                let info = self.engine.ddl(s.db.as_deref(), stripped)?;
                Ok(Outcome::Done { affected: 0, info })
            }
            "USE" => {
                p.advance();
                let db = p.ident()?;
                // `USE catalog.db`
                let db = if p.eat(&Token::Period) { p.ident()? } else { db };
                self.engine.lock().db(&db)?;
                s.db = Some(db);
                Ok(done())
            }
            "SET" => self.set(s, &mut p),
            "SHOW" if p.is_kw_at(1, "ALTER") => self.show_alter(s, &mut p).await,
            "SHOW" => self.show(s, &mut p),
            "DESC" | "DESCRIBE" => {
                p.advance();
                let name = p.object_name()?;
                let all = p.eat_kw("ALL");
                let db = self.resolve(s, &name)?;
                let view = self.engine.lock().db(&db)?.views.get(&name.name).cloned();
                match view {
                    Some(v) => self.desc_view(s, &db, &v).await,
                    None => self.desc(s, &name, all),
                }
            }
            "INSERT" => self.insert(s, &mut p).await,
            "DELETE" => self.delete(s, &mut p).await,
            "UPDATE" => self.update(s, stripped).await,
            "BEGIN" | "COMMIT" | "ROLLBACK" | "START" => Ok(done()),
            "KILL" => Ok(done()),
            _ => Err(SqlError {
                code: 1064,
                message: format!(
                    "Syntax error in line 1:\n{stripped}\n^\nEncountered: {}\nExpected: a statement",
                    p.peek()
                ),
            }),
        }
    }

    fn context(&self, s: &Session) -> SessionContext {
        session_context(&self.engine, s)
    }
}
