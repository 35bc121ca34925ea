//! `--data-dir` persistence: an append-only, fsynced log of DDL statements, pre-committed and
//! committed writes, and aborts of pre-committed ones, replayed at start. A commit is acknowledged only after its record is on disk.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::storage::TableWrite;

/// One log record.
#[derive(Debug, Serialize, Deserialize)]
pub enum LogRecord {
    /// A DDL statement and the database it ran in.
    Ddl {
        /// Current database of the session.
        db: Option<String>,
        /// Statement text.
        sql: String,
    },
    /// A pre-committed (2PC phase one) transaction and its data: it survives a restart and can
    /// still be committed or aborted, as in Doris.
    Precommit {
        /// Database.
        db: String,
        /// Table.
        table: String,
        /// Txn id.
        txn_id: i64,
        /// Label.
        label: String,
        /// The data.
        write: TableWrite,
    },
    /// A pre-committed transaction aborted.
    Abort {
        /// Txn id.
        txn_id: i64,
    },
    /// A committed transaction.
    Commit {
        /// Database.
        db: String,
        /// Table.
        table: String,
        /// Txn id.
        txn_id: i64,
        /// Label.
        label: String,
        /// Commit TSO.
        tso: i64,
        /// Commit wall time (ms).
        commit_ms: i64,
        /// The data.
        write: TableWrite,
    },
}

/// Errors of the log.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// I/O on the log file.
    #[error("commit log {path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A record that does not decode (not the torn last line).
    #[error("commit log {path} line {line}: {message}")]
    Corrupt {
        /// File.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// Decoder message.
        message: String,
    },
}

/// The log file under the data dir.
#[derive(Debug)]
pub struct WriteAheadLog {
    path: PathBuf,
    file: File,
}

impl WriteAheadLog {
    /// Opens (creating) `<dir>/doris-lite.log`.
    pub fn open(dir: &Path) -> Result<WriteAheadLog, WalError> {
        let io = |source| WalError::Io { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join("doris-lite.log");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(|source| WalError::Io { path: path.clone(), source })?;
        let mut wal = WriteAheadLog { path, file };
        // Terminate a torn last record so the next append starts on its own line.
        let len = wal.file.metadata().map(|m| m.len()).unwrap_or(0);
        if len > 0 {
            let bytes = std::fs::read(&wal.path).map_err(|source| WalError::Io { path: wal.path.clone(), source })?;
            if bytes.last() != Some(&b'\n') {
                wal.file.write_all(b"\n").map_err(|source| WalError::Io { path: wal.path.clone(), source })?;
            }
        }
        Ok(wal)
    }

    /// Reads every complete record. A torn last line (crash mid-write) is ignored: its commit
    /// was never acknowledged.
    pub fn replay(&self) -> Result<Vec<LogRecord>, WalError> {
        let f = File::open(&self.path).map_err(|source| WalError::Io { path: self.path.clone(), source })?;
        let lines: Vec<String> = BufReader::new(f)
            .lines()
            .collect::<Result<_, _>>()
            .map_err(|source| WalError::Io { path: self.path.clone(), source })?;
        let n = lines.len();
        let mut out = Vec::with_capacity(n);
        for (i, line) in lines.into_iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(&line) {
                Ok(r) => out.push(r),
                // A torn write: never acknowledged, so skipping it loses nothing.
                Err(e) if i + 1 == n || !line.ends_with('}') => {
                    tracing::warn!(line = i + 1, error = %e, "skipping a torn commit log record");
                }
                Err(e) => {
                    return Err(WalError::Corrupt { path: self.path.clone(), line: i + 1, message: e.to_string() });
                }
            }
        }
        Ok(out)
    }

    /// Appends a record and fsyncs.
    pub fn append(&mut self, rec: &LogRecord) -> Result<(), WalError> {
        let io = |source| WalError::Io { path: self.path.clone(), source };
        let mut line = serde_json::to_vec(rec).map_err(|e| WalError::Corrupt {
            path: self.path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        Ok(())
    }
}
