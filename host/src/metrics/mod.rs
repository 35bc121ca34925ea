//! The counters of a run: the runtime's own, and those components register (a Doris sink's load
//! metrics, a lookup's cache counters), shown as Prometheus text at `/metrics`, in status lines
//! and in a progress bar.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One value a component reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Without the `sluice_` prefix.
    pub name: &'static str,
    pub help: &'static str,
    /// Labels beside `pipeline`, e.g. `[("table", "dim.dim_city")]`.
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

/// A component's counters.
pub trait MetricSource: Send + Sync {
    fn metrics(&self) -> Vec<Metric>;
}

/// Units of a source's planned work (tablets of a scan, chunks of a snapshot) and how many are
/// read, for the progress bar.
#[derive(Debug, Default)]
pub struct SplitProgress {
    total: AtomicU64,
    done: AtomicU64,
    unit: Mutex<&'static str>,
}

impl SplitProgress {
    /// Back to nothing known, at the start of a run.
    pub fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
    }

    /// `total` more `unit`s to read, `done` of them already read.
    pub fn planned(&self, unit: &'static str, total: u64, done: u64) {
        *self.unit.lock().unwrap_or_else(|p| p.into_inner()) = unit;
        self.total.fetch_add(total, Ordering::Relaxed);
        self.read(done);
    }

    /// `n` more units read.
    pub fn read(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    pub fn unit(&self) -> &'static str {
        *self.unit.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counters of one pipeline, shared by its runs, status lines and `/metrics`.
#[derive(Default)]
pub struct Stats {
    pub rows_read: AtomicU64,
    pub rows_transformed: AtomicU64,
    pub rows_written: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Transactions (or whatever a sink commits) committed.
    pub txns_committed: AtomicU64,
    pub restarts: AtomicU64,
    /// Planned and finished splits of the current run's sources.
    pub splits: Arc<SplitProgress>,
    components: Mutex<Vec<Arc<dyn MetricSource>>>,
}

impl Stats {
    /// Report `source`'s counters too.
    pub fn register(&self, source: Arc<dyn MetricSource>) {
        self.components.lock().unwrap_or_else(|p| p.into_inner()).push(source);
    }

    /// The value of the component metric `name` summed over its labels (0 if none reports it).
    pub fn component_value(&self, name: &str) -> u64 {
        self.component_metrics().iter().filter(|m| m.name == name).map(|m| m.value).sum()
    }

    fn component_metrics(&self) -> Vec<Metric> {
        let components = self.components.lock().unwrap_or_else(|p| p.into_inner()).clone();
        components.iter().flat_map(|c| c.metrics()).collect()
    }
}

/// The counters in Prometheus' text format.
pub fn metrics_text(stats: &Stats, pipeline: &str) -> String {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let own = [
        ("rows_read", "Rows read by the sources.", g(&stats.rows_read)),
        ("rows_transformed", "Rows out of the transforms.", g(&stats.rows_transformed)),
        ("rows_written", "Rows handed to the sinks.", g(&stats.rows_written)),
        ("checkpoints", "Checkpoints completed.", g(&stats.checkpoints)),
        ("txns_committed", "Stream Load transactions committed.", g(&stats.txns_committed)),
        ("restarts", "Restarts from the last checkpoint after a failure.", g(&stats.restarts)),
    ];
    let mut out = String::new();
    let mut put = |m: &Metric| {
        let labels: String = m.labels.iter().map(|(k, v)| format!(",{k}=\"{v}\"")).collect();
        out.push_str(&format!(
            "# HELP sluice_{name} {help}\n# TYPE sluice_{name} counter\nsluice_{name}{{pipeline=\"{pipeline}\"{labels}}} {v}\n",
            name = m.name,
            help = m.help,
            v = m.value
        ));
    };
    for (name, help, value) in own {
        put(&Metric { name, help, labels: Vec::new(), value });
    }
    for m in stats.component_metrics() {
        put(&m);
    }
    out
}

/// A status line: rows through the pipeline, the last checkpoint and commits.
pub fn status_line(stats: &Stats, checkpoint: u64, since: std::time::Instant) {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    tracing::info!(
        "rows read {} → transformed {} → written {} | checkpoint {checkpoint} ({:.1}s ago) | loads committed {}",
        g(&stats.rows_read),
        g(&stats.rows_transformed),
        g(&stats.rows_written),
        since.elapsed().as_secs_f64(),
        g(&stats.txns_committed)
    );
}

/// A progress bar on a terminal: rows read of a bounded source, or splits read of a source that
/// planned them (with the rows read beside it; the bar ends when they are read). Stops with its
/// guard.
pub fn progress_bar(quiet: bool, total_rows: Option<u64>, stats: Arc<Stats>) -> Option<ProgressGuard> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let splits = stats.splits.total();
    let unit = stats.splits.unit();
    let (total, template) = match total_rows {
        Some(rows) => (rows, "{bar:40} {pos}/{len} rows  {per_sec}  eta {eta}".to_string()),
        None if splits > 0 => (splits, format!("{{bar:40}} {{pos}}/{{len}} {unit}  {{msg}} rows  eta {{eta}}")),
        None => return None,
    };
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let task = tokio::spawn(async move {
        loop {
            let rows = stats.rows_read.load(Ordering::Relaxed);
            if total_rows.is_some() {
                shown.set_position(rows);
            } else {
                shown.set_message(rows.to_string());
                shown.set_position(stats.splits.done());
                if shown.position() >= total {
                    shown.finish();
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
    Some(ProgressGuard { bar, task })
}

/// Keeps a progress bar going; clears it when dropped.
pub struct ProgressGuard {
    bar: indicatif::ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl MetricSource for Fixed {
        fn metrics(&self) -> Vec<Metric> {
            vec![Metric { name: "lookup_hits", help: "Hits.", labels: vec![("table", "dim.c".into())], value: 7 }]
        }
    }

    #[test]
    fn component_metrics_carry_their_labels() {
        let stats = Stats::default();
        stats.rows_read.store(3, Ordering::Relaxed);
        stats.register(Arc::new(Fixed));
        let text = metrics_text(&stats, "p");
        assert!(text.contains("sluice_rows_read{pipeline=\"p\"} 3\n"), "{text}");
        assert!(
            text.contains("# TYPE sluice_lookup_hits counter\nsluice_lookup_hits{pipeline=\"p\",table=\"dim.c\"} 7\n")
        );
        assert_eq!(stats.component_value("lookup_hits"), 7);
    }
}
