//! Errors talking to Doris. Each names the table, label or transaction and carries Doris' own
//! words, never the password.
//!
//! Where Doris' reply carries a status or a code (the 2PC reply's `status` and `msg`, a Flight
//! error's `doris-error-code`), the client reads it once, here, into a typed field; callers ask
//! [`DorisError::is_txn_gone`], [`DorisError::doris_code`] or [`DorisError::is_window_not_ready`]
//! instead of searching the message.

/// What went wrong talking to Doris.
#[derive(Debug, thiserror::Error)]
pub enum DorisError {
    /// No connection (refused, connect timeout, DNS). With several FEs, `url` lists every FE
    /// tried and `detail` what each said.
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

    /// A commit or abort that Doris refused. `status` is the 2PC reply's `status` (`ANALYSIS_ERROR`,
    /// `FAILED` …), `state` what its `msg` says about the transaction.
    #[error("transaction {txn_id} in database `{db}`: {operation} failed: {message}")]
    Txn { db: String, txn_id: i64, operation: &'static str, status: String, state: TxnState, message: String },

    /// A Flight SQL call that the FE answered with an error status. `code` and `name` are its
    /// `doris-error-code` / `doris-error-name` metadata, when it sent them (5100
    /// `ERR_INCR_WINDOW_NOT_READY`, 5101 `ERR_INCR_VISIBLE_WAIT_TIMEOUT`).
    #[error("Doris at {url}: Arrow Flight SQL: {status:?}{}: {message}", code_suffix(*.code, .name.as_deref()))]
    Flight { url: String, status: tonic::Code, code: Option<i32>, name: Option<String>, message: String },
}

fn code_suffix(code: Option<i32>, name: Option<&str>) -> String {
    match (code, name) {
        (Some(c), Some(n)) => format!(" (doris-error-code {c} {n})"),
        (Some(c), None) => format!(" (doris-error-code {c})"),
        (None, Some(n)) => format!(" ({n})"),
        (None, None) => String::new(),
    }
}

/// What a refused commit or abort says about its transaction (the 2PC reply's `msg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// `transaction [N] is already aborted` (e.g. it stayed pre-committed past Doris'
    /// pre-commit timeout).
    Aborted,
    /// `transaction [N] not found`: it expired or never existed.
    NotFound,
    /// `is already visible` / `is already committed`.
    Committed,
    /// `is prepare, not pre-committed`: its load has not finished.
    NotPrecommitted,
    /// Anything else; the message says what.
    Other,
}

impl TxnState {
    /// Read Doris' 2PC `msg` (any case). Doris gives no code for these, only its words; this is
    /// the one place that reads them.
    pub fn from_message(msg: &str) -> Self {
        let msg = msg.to_ascii_lowercase();
        if msg.contains("is already aborted") {
            TxnState::Aborted
        } else if msg.contains("not found") {
            TxnState::NotFound
        } else if msg.contains("is already visible") || msg.contains("is already committed") {
            TxnState::Committed
        } else if msg.contains("not pre-committed") {
            TxnState::NotPrecommitted
        } else {
            TxnState::Other
        }
    }
}

/// `doris-error-code` of a window that cannot be read yet (its end is past the FE's TSO).
pub const ERR_INCR_WINDOW_NOT_READY: i32 = 5100;
/// `doris-error-code` of a visibility wait that timed out (transactions still in flight).
pub const ERR_INCR_VISIBLE_WAIT_TIMEOUT: i32 = 5101;

impl DorisError {
    /// What a refused commit or abort said about its transaction.
    pub fn txn_state(&self) -> Option<TxnState> {
        match self {
            DorisError::Txn { state, .. } => Some(*state),
            _ => None,
        }
    }

    /// The transaction is aborted or Doris no longer knows it: a commit can never succeed, so
    /// retrying is pointless and its rows are not in Doris.
    pub fn is_txn_gone(&self) -> bool {
        matches!(self.txn_state(), Some(TxnState::Aborted | TxnState::NotFound))
    }

    /// Doris' own error code, where its reply carries one (Flight's `doris-error-code`).
    pub fn doris_code(&self) -> Option<i32> {
        match self {
            DorisError::Flight { code, .. } => *code,
            _ => None,
        }
    }

    /// An `@incr` changelog window that Doris cannot serve yet and that must be retried as it is
    /// (never shrunk or skipped): codes 5100 / 5101, or, from FEs that send no code, the
    /// classic visibility-wait timeout.
    pub fn is_window_not_ready(&self) -> bool {
        match self {
            DorisError::Flight { code: Some(c), .. } => {
                *c == ERR_INCR_WINDOW_NOT_READY || *c == ERR_INCR_VISIBLE_WAIT_TIMEOUT
            }
            // Doris before the codes existed says it only in words.
            DorisError::Flight { code: None, message, .. } => {
                message.contains("timeout waiting previous transactions finish")
                    || message.contains("timeout waiting follower journal replay")
            }
            _ => false,
        }
    }
}

impl DorisError {
    /// Whether the failure may pass on another try: Doris unreachable or slow, a reply cut short
    /// or garbled (a broken stream), a server error.
    pub fn is_transient(&self) -> bool {
        match self {
            DorisError::Connect { .. } | DorisError::Timeout { .. } | DorisError::Protocol { .. } => true,
            DorisError::Http { status, .. } => *status >= 500,
            // A window not visible yet has its own wait (`changelog.visible_wait_timeout`).
            DorisError::Flight { status, .. } if !self.is_window_not_ready() => matches!(
                status,
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled
                    | tonic::Code::Aborted
            ),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(status: &str, msg: &str) -> DorisError {
        DorisError::Txn {
            db: "test".into(),
            txn_id: 7,
            operation: "commit",
            status: status.into(),
            state: TxnState::from_message(msg),
            message: msg.into(),
        }
    }

    #[test]
    fn two_pc_messages_are_read_into_a_state() {
        let cases = [
            ("transaction [7] is already aborted. abort reason: User Abort", TxnState::Aborted),
            ("TStatus: errCode = 2, detailMessage = transaction [7] not found", TxnState::NotFound),
            ("transaction [7] is already visible, not pre-committed.", TxnState::Committed),
            ("transaction [7] is already COMMITTED, not pre-committed.", TxnState::Committed),
            ("transaction [7] is prepare, not pre-committed", TxnState::NotPrecommitted),
            ("current running txns on db 1 is 100, larger than limit 100", TxnState::Other),
        ];
        for (msg, state) in cases {
            assert_eq!(TxnState::from_message(msg), state, "{msg}");
        }
    }

    #[test]
    fn only_aborted_or_unknown_transactions_are_gone() {
        assert!(txn("ANALYSIS_ERROR", "transaction [7] is already aborted. abort reason: timeout").is_txn_gone());
        assert!(txn("ANALYSIS_ERROR", "transaction [7] not found").is_txn_gone());
        assert!(!txn("ANALYSIS_ERROR", "transaction [7] is prepare, not pre-committed").is_txn_gone());
        assert!(!txn("FAILED", "No transaction operation('commit' or 'abort') selected.").is_txn_gone());
        let other = DorisError::Table { table: "test.t".into(), message: "transaction not found".into() };
        assert!(!other.is_txn_gone(), "only a 2PC reply says a transaction is gone");
        assert_eq!(txn("ANALYSIS_ERROR", "transaction [7] not found").txn_state(), Some(TxnState::NotFound));
    }

    fn flight(code: Option<i32>, name: Option<&str>, message: &str) -> DorisError {
        DorisError::Flight {
            url: "http://fe:9090".into(),
            status: tonic::Code::Unavailable,
            code,
            name: name.map(str::to_string),
            message: message.into(),
        }
    }

    #[test]
    fn flight_errors_expose_dorises_code() {
        let e = flight(Some(5101), Some("ERR_INCR_VISIBLE_WAIT_TIMEOUT"), "reason=VISIBLE_WAIT_TIMEOUT");
        assert_eq!(e.doris_code(), Some(5101));
        assert!(e.is_window_not_ready());
        assert_eq!(
            e.to_string(),
            "Doris at http://fe:9090: Arrow Flight SQL: Unavailable (doris-error-code 5101 ERR_INCR_VISIBLE_WAIT_TIMEOUT): reason=VISIBLE_WAIT_TIMEOUT"
        );
        assert!(flight(Some(5100), None, "").is_window_not_ready());
        assert!(!flight(Some(1105), None, "timeout waiting previous transactions finish").is_window_not_ready());
        assert!(
            flight(None, None, "timeout waiting previous transactions finish for time-based read")
                .is_window_not_ready()
        );
        assert!(
            !flight(None, None, "Row binlog offset has expired according to binlog.ttl_seconds").is_window_not_ready()
        );
        assert_eq!(flight(None, None, "x").doris_code(), None);
        assert_eq!(txn("ANALYSIS_ERROR", "x").doris_code(), None);
    }
}
