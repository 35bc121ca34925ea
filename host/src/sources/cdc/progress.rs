//! How far a CDC source is: its snapshot, table by table (rows read of the server's estimate,
//! chunks read of those planned), and its log (how far behind the server's log it reads, in
//! time and in bytes) — Flink CDC's `currentFetchEventTimeLag`, in `/metrics`, the status line
//! and `sluice serve`'s API.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::metrics::{Metric, MetricKind, MetricSource};

/// One table's snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableProgress {
    pub rows: u64,
    /// The server's estimate of its rows (statistics, not a count).
    pub estimated: Option<u64>,
    pub chunks: u64,
    pub chunks_read: u64,
}

/// A CDC source's progress, shared by its enumerator, readers and log follower.
#[derive(Debug)]
pub(crate) struct Progress {
    /// The source's name (the metrics' `source` label).
    source: String,
    tables: Mutex<BTreeMap<String, TableProgress>>,
    /// Server time (Unix ms) of the last change read from the log; 0 before the first.
    event_ms: AtomicU64,
    /// The log is read up to the server's end, as last seen.
    caught_up: AtomicBool,
    /// Bytes of log between the position read and the server's end, as last seen.
    behind: AtomicU64,
    /// The log is followed (the metrics of the log are shown).
    following: AtomicBool,
}

impl Progress {
    pub fn new(source: &str) -> Progress {
        Progress {
            source: source.to_string(),
            tables: Mutex::default(),
            event_ms: AtomicU64::new(0),
            caught_up: AtomicBool::new(false),
            behind: AtomicU64::new(0),
            following: AtomicBool::new(false),
        }
    }

    fn table<T>(&self, table: &str, f: impl FnOnce(&mut TableProgress) -> T) -> T {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        f(tables.entry(table.to_string()).or_default())
    }

    /// A run plans `chunks` chunks of `table` (its estimate of rows, where the server has one).
    pub fn planned(&self, table: &str, chunks: u64, estimated: Option<u64>) {
        self.table(table, |t| {
            t.chunks = chunks;
            t.estimated = estimated.or(t.estimated);
        });
    }

    /// `rows` more rows of `table` read; `chunk_done`: its chunk ended with them.
    pub fn read(&self, table: &str, rows: u64, chunk_done: bool) {
        self.table(table, |t| {
            t.rows += rows;
            t.chunks_read += u64::from(chunk_done);
        });
    }

    #[cfg(test)]
    pub fn snapshot(&self, table: &str) -> TableProgress {
        self.table(table, |t| *t)
    }

    /// The log is followed from now on.
    pub fn following(&self) {
        self.following.store(true, Ordering::Relaxed);
    }

    /// A change the server wrote at `ms` (Unix milliseconds, its clock) was read.
    pub fn event(&self, ms: u64) {
        self.event_ms.fetch_max(ms, Ordering::Relaxed);
        // More may follow: behind until the server says its log ends here.
        self.caught_up.store(false, Ordering::Relaxed);
    }

    /// The server's log ends `bytes` after the position read (0: caught up).
    pub fn behind(&self, bytes: u64) {
        self.behind.store(bytes, Ordering::Relaxed);
        self.caught_up.store(bytes == 0, Ordering::Relaxed);
    }

    /// How far behind the server's log the reading is, in milliseconds: from the last change
    /// read to now, or 0 when nothing more is in the log (a quiet server is not a lag).
    pub fn lag_ms(&self) -> u64 {
        let at = self.event_ms.load(Ordering::Relaxed);
        if self.caught_up.load(Ordering::Relaxed) || at == 0 {
            return 0;
        }
        crate::metrics::now_ms().saturating_sub(at)
    }

    pub fn behind_bytes(&self) -> u64 {
        self.behind.load(Ordering::Relaxed)
    }
}

impl MetricSource for Progress {
    fn metrics(&self) -> Vec<Metric> {
        let source = || vec![("source", self.source.clone())];
        let mut out = Vec::new();
        if self.following.load(Ordering::Relaxed) {
            out.push(Metric {
                kind: MetricKind::Milliseconds,
                ..Metric::gauge(
                    "source_lag_seconds",
                    "From the time the server wrote the last change read to now (0 once the log is read to its end).",
                    source(),
                    self.lag_ms(),
                )
            });
            out.push(Metric::gauge(
                "source_lag_bytes",
                "Bytes of the server's log after the position read, as last asked.",
                source(),
                self.behind_bytes(),
            ));
        }
        let tables = self.tables.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (table, t) in tables {
            let labels = || vec![("source", self.source.clone()), ("table", table.clone())];
            out.push(Metric::counter("snapshot_rows_read", "Rows of the table the snapshot read.", labels(), t.rows));
            if let Some(n) = t.estimated {
                out.push(Metric::gauge(
                    "snapshot_rows_estimated",
                    "Rows of the table by the server's statistics, when its snapshot was planned.",
                    labels(),
                    n,
                ));
            }
            out.push(Metric::gauge("snapshot_chunks", "Chunks of the table's snapshot.", labels(), t.chunks));
            out.push(Metric::gauge(
                "snapshot_chunks_read",
                "Chunks of the table's snapshot read in this run.",
                labels(),
                t.chunks_read,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_age_of_the_last_change_until_the_log_is_read_to_its_end() {
        let p = Progress::new("src");
        assert_eq!(p.lag_ms(), 0, "nothing read yet");
        p.event(crate::metrics::now_ms() - 5_000);
        assert!((5_000..60_000).contains(&p.lag_ms()), "{}", p.lag_ms());
        p.behind(1234);
        assert!(p.lag_ms() >= 5_000);
        p.behind(0);
        assert_eq!(p.lag_ms(), 0);
        p.event(crate::metrics::now_ms() - 3_000);
        assert!(p.lag_ms() >= 3_000, "a change read: behind again until the server says otherwise");
        p.following();
        p.planned("app.t", 3, Some(100));
        p.read("app.t", 40, true);
        let names: Vec<&str> = p.metrics().iter().map(|m| m.name).collect();
        assert_eq!(
            names,
            [
                "source_lag_seconds",
                "source_lag_bytes",
                "snapshot_rows_read",
                "snapshot_rows_estimated",
                "snapshot_chunks",
                "snapshot_chunks_read"
            ]
        );
        assert_eq!(p.snapshot("app.t"), TableProgress { rows: 40, estimated: Some(100), chunks: 3, chunks_read: 1 });
    }
}
