//! Errors talking to Doris. Each names the table, label or transaction and carries Doris' own
//! words, never the password.

/// What went wrong talking to Doris.
#[derive(Debug, thiserror::Error)]
pub enum DorisError {
    #[error("Doris at {url}: {detail}; check `fenodes` / `benodes` and that Doris is up")]
    Connect { url: String, detail: String },

    #[error("Doris at {url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: std::time::Duration },

    #[error("Doris at {url}: access denied for user `{user}`; check `username` and `password_env`")]
    Unauthorized { url: String, user: String },

    #[error("Doris at {url}: unexpected HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },

    #[error("Doris at {url}: cannot read its reply: {detail}")]
    Protocol { url: String, detail: String },

    #[error("stream load of `{table}` (label `{label}`) failed: {status}: {message}{errors}")]
    LoadFailed { table: String, label: String, status: String, message: String, errors: String },

    #[error("table `{table}`: {message}")]
    Table { table: String, message: String },

    #[error("transaction {txn_id} in database `{db}`: {operation} failed: {message}")]
    Txn { db: String, txn_id: i64, operation: &'static str, message: String },
}

impl DorisError {
    /// Whether the failure may pass on another try: Doris unreachable or slow, a reply cut short
    /// or garbled (a broken stream), a server error.
    pub fn is_transient(&self) -> bool {
        match self {
            DorisError::Connect { .. } | DorisError::Timeout { .. } | DorisError::Protocol { .. } => true,
            DorisError::Http { status, .. } => *status >= 500,
            _ => false,
        }
    }
}
