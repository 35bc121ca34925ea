//! The error vocabulary at the bottom of Sluice: what the runtime does with a failure depends on
//! which of these the failure is, never on its words. A component keeps its own typed errors
//! (`DorisError`, a MySQL server error and its code, a PostgreSQL SQLSTATE, a cluster error) and
//! says what a failure means for the run by wrapping it:
//!
//! - [`Restartable`]: it may pass after a restart from the last checkpoint (the cause kept, typed);
//! - [`RowRejected`]: a plugin rejected one row of a batch (set aside with a dead-letter target);
//! - [`BatchRefused`]: a sink may not or cannot write a batch's table (set aside likewise).
//!
//! Anything else stops the pipeline.

/// A failure that may pass after a restart from the last checkpoint: a server that did not
/// answer, a stream that broke, a load that failed. Anything else stops the pipeline.
#[derive(Debug)]
pub enum Restartable {
    /// Said in the runtime's or a component's own words (a stream that ended, a member that left).
    Said(String),
    /// A component's own error, kept as it is: its message is this failure's, and it can be
    /// read back typed ([`Restartable::cause`]).
    Caused(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl std::fmt::Display for Restartable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Restartable::Said(message) => f.write_str(message),
            Restartable::Caused(cause) => cause.fmt(f),
        }
    }
}

/// The cause's message is this failure's already, so it is not a source to be printed again;
/// [`Restartable::cause`] reads it back.
impl std::error::Error for Restartable {}

impl Restartable {
    /// A restartable failure said in words.
    pub fn error(message: impl Into<String>) -> anyhow::Error {
        Restartable::Said(message.into()).into()
    }

    /// `cause`, restartable.
    pub fn caused_by(cause: impl std::error::Error + Send + Sync + 'static) -> anyhow::Error {
        Restartable::Caused(Box::new(cause)).into()
    }

    /// The component's error this failure carries, if it is an `E`.
    pub fn cause<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Restartable::Caused(c) => c.downcast_ref(),
            Restartable::Said(_) => None,
        }
    }
}

/// Whether `e` may pass after a restart from the last checkpoint.
pub fn is_restartable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Restartable>())
}

/// The error a transform returns when its plugin rejected one row of a batch: with a
/// dead-letter target the row is set aside and the rest of the batch goes on; without one the
/// error stops the pipeline as any other.
#[derive(Debug, thiserror::Error)]
#[error("{text}")]
pub struct RowRejected {
    /// The plugin's name.
    pub plugin: String,
    /// The row of the input batch at fault.
    pub row: usize,
    /// The plugin's own message.
    pub reason: String,
    /// The whole message, as it reads without a dead-letter target.
    pub text: String,
}

/// The error a sink returns for a batch whose table it may not or cannot write (not granted,
/// not there): with a dead-letter target its rows are set aside, else the pipeline stops.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct BatchRefused {
    pub reason: String,
}

impl BatchRefused {
    pub fn error(reason: impl Into<String>) -> anyhow::Error {
        BatchRefused { reason: reason.into() }.into()
    }
}

/// The refusal of a whole batch, if `e` is one.
pub fn refused_batch(e: &anyhow::Error) -> Option<&BatchRefused> {
    e.chain().find_map(|c| c.downcast_ref::<BatchRefused>())
}

/// The rejection of a row within `rows` rows, if `e` is one.
pub fn rejected_row(e: &anyhow::Error, rows: usize) -> Option<&RowRejected> {
    e.chain().find_map(|c| c.downcast_ref::<RowRejected>()).filter(|r| r.row < rows)
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::{Restartable, is_restartable};

    #[test]
    fn a_restartable_failure_keeps_its_cause_typed_and_its_message() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = Err::<(), _>(Restartable::caused_by(reset)).context("loading `db.t`").unwrap_err();
        assert!(is_restartable(&e));
        // The cause's words once, as before it was kept.
        assert_eq!(format!("{e:#}"), "loading `db.t`: reset by peer");
        let r = e.chain().find_map(|c| c.downcast_ref::<Restartable>()).expect("a restartable failure");
        assert_eq!(r.cause::<std::io::Error>().map(|c| c.kind()), Some(std::io::ErrorKind::ConnectionReset));
        assert!(r.cause::<std::fmt::Error>().is_none());
        assert!(Restartable::error("the stream ended").chain().any(|c| c.is::<Restartable>()));
        assert!(!is_restartable(&anyhow::anyhow!("a bad row")));
    }
}
