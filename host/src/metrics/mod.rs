//! The counters of a run: the runtime's own, and those components register (a Doris sink's load
//! metrics, a lookup's cache counters), shown as Prometheus text at `/metrics`, in status lines
//! and in a progress bar.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// One value a component reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Without the `sluice_` prefix.
    pub name: &'static str,
    pub help: &'static str,
    /// Labels beside `pipeline`, e.g. `[("table", "dim.dim_city")]`.
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
    pub kind: MetricKind,
}

/// What a component's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricKind {
    /// A count that only grows.
    #[default]
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A gauge kept in milliseconds and shown in seconds (a name ending in `_seconds`).
    Milliseconds,
}

impl Metric {
    pub fn counter(name: &'static str, help: &'static str, labels: Vec<(&'static str, String)>, value: u64) -> Metric {
        Metric { name, help, labels, value, kind: MetricKind::Counter }
    }

    pub fn gauge(name: &'static str, help: &'static str, labels: Vec<(&'static str, String)>, value: u64) -> Metric {
        Metric { name, help, labels, value, kind: MetricKind::Gauge }
    }
}

/// A component's counters.
pub trait MetricSource: Send + Sync {
    /// Its series, as `/metrics` shows them.
    fn metrics(&self) -> Vec<Metric>;

    /// A sink that loads: its loads so far, as the run's report, its last line and `serve`'s API
    /// read them (summed over the sinks by [`Stats::loads`]).
    fn loads(&self) -> Option<LoadCounts> {
        None
    }
}

/// What a sink that loads (Doris') says of its loads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadCounts {
    pub succeeded: u64,
    pub failed: u64,
    /// Bytes loaded.
    pub bytes: u64,
    pub loaded_rows: u64,
    /// Rows the target refused (within the load's `max_filter_ratio`).
    pub filtered_rows: u64,
    /// Loads tried again under their label.
    pub load_retries: u64,
    /// Commits tried again after a failure.
    pub commit_retries: u64,
}

impl std::ops::Add for LoadCounts {
    type Output = LoadCounts;

    fn add(self, o: LoadCounts) -> LoadCounts {
        LoadCounts {
            succeeded: self.succeeded + o.succeeded,
            failed: self.failed + o.failed,
            bytes: self.bytes + o.bytes,
            loaded_rows: self.loaded_rows + o.loaded_rows,
            filtered_rows: self.filtered_rows + o.filtered_rows,
            load_retries: self.load_retries + o.load_retries,
            commit_retries: self.commit_retries + o.commit_retries,
        }
    }
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

/// Histograms of one pipeline, for "how long" questions.
#[derive(Debug, Clone)]
pub struct Timings {
    /// From a checkpoint's barrier to its completion (written, committed, announced).
    pub checkpoint: Histogram,
    /// Committing a checkpoint's transactions in every sink.
    pub commit: Histogram,
    /// One Stream Load, from its start to Doris' answer.
    pub load: Histogram,
    /// From the first row read after a checkpoint to the commit that makes it visible.
    pub lag: Histogram,
}

impl Default for Timings {
    fn default() -> Self {
        let seconds = || Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]);
        Self { checkpoint: seconds(), commit: seconds(), load: seconds(), lag: seconds() }
    }
}

/// A completed checkpoint, as the live view shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckpointRecord {
    pub id: u64,
    /// Unix time of its completion, in milliseconds.
    pub at_ms: u64,
    pub duration_ms: u64,
    /// Bytes of the checkpoint as written.
    pub bytes: u64,
    /// Transactions it committed.
    pub committed: u64,
}

/// Checkpoints the history keeps.
const HISTORY: usize = 50;

/// Counters of one pipeline, shared by its runs, status lines and `/metrics`.
#[derive(Default)]
pub struct Stats {
    pub rows_read: AtomicU64,
    pub rows_transformed: AtomicU64,
    pub rows_written: AtomicU64,
    /// Rows set aside in the dead-letter target (committed or not yet).
    pub dead_letters: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Transactions (or whatever a sink commits) committed.
    pub txns_committed: AtomicU64,
    pub restarts: AtomicU64,
    /// Planned and finished splits of the current run's sources.
    pub splits: Arc<SplitProgress>,
    pub timings: Timings,
    /// Unix milliseconds of the first row read since the last checkpoint (0: none yet).
    pub unread_since_ms: AtomicU64,
    history: Mutex<std::collections::VecDeque<CheckpointRecord>>,
    components: Mutex<Vec<Arc<dyn MetricSource>>>,
    /// `[verify]`'s last comparison.
    verified: Mutex<Option<crate::verify::Verified>>,
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Stats {
    /// Report `source`'s counters too.
    pub fn register(&self, source: Arc<dyn MetricSource>) {
        self.components.lock().unwrap_or_else(|p| p.into_inner()).push(source);
    }

    /// The component series `name` summed over its labels (0 if none reports it): a look at
    /// what `/metrics` shows. Code that acts on a count reads a typed one ([`Stats::loads`]).
    pub fn component_value(&self, name: &str) -> u64 {
        self.component_metrics().iter().filter(|m| m.name == name).map(|m| m.value).sum()
    }

    /// The loads of every sink that loads, summed.
    pub fn loads(&self) -> LoadCounts {
        let components = self.components.lock().unwrap_or_else(|p| p.into_inner()).clone();
        components.iter().filter_map(|c| c.loads()).fold(LoadCounts::default(), |a, b| a + b)
    }

    /// `[verify]` compared the copy with its source.
    pub fn verified(&self, v: crate::verify::Verified) {
        *self.verified.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    }

    /// `[verify]`'s last comparison, if one ran.
    pub fn last_verified(&self) -> Option<crate::verify::Verified> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every component's counters.
    /// What the sources say of how far they are (CDC sources: the lag behind the server's log,
    /// and each table's snapshot), one object per source, as `sluice serve`'s API shows it.
    pub fn sources(&self) -> Vec<serde_json::Value> {
        let mut by_source: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
        for m in self.component_metrics() {
            let label = |k: &str| m.labels.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            let Some(source) = label("source") else { continue };
            let entry = by_source
                .entry(source.clone())
                .or_insert_with(|| serde_json::json!({ "source": source, "tables": serde_json::Map::new() }));
            match (m.name, label("table")) {
                ("source_lag_seconds", _) => entry["lag_seconds"] = serde_json::json!(m.value as f64 / 1000.0),
                ("source_lag_bytes", _) => entry["lag_bytes"] = serde_json::json!(m.value),
                ("source_position_age_seconds", _) => {
                    entry["position_age_seconds"] = serde_json::json!(m.value as f64 / 1000.0)
                }
                ("source_lag_messages", _) => {
                    let partition = label("partition").unwrap_or_default();
                    entry["partitions"][&partition] = serde_json::json!(m.value);
                }
                (name, Some(table)) if name.starts_with("snapshot_") => {
                    entry["tables"][&table][name.trim_start_matches("snapshot_")] = serde_json::json!(m.value)
                }
                _ => {}
            }
        }
        by_source.into_values().collect()
    }

    pub fn component_metrics(&self) -> Vec<Metric> {
        let components = self.components.lock().unwrap_or_else(|p| p.into_inner()).clone();
        components.iter().flat_map(|c| c.metrics()).collect()
    }

    /// Rows were read: the lag clock starts if it is not running.
    pub fn rows_arrived(&self, rows: u64) {
        self.rows_read.fetch_add(rows, Ordering::Relaxed);
        let _ = self.unread_since_ms.compare_exchange(0, now_ms(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Checkpoint `record` completed: its timings and the lag of what it made visible.
    pub fn checkpoint_completed(&self, record: CheckpointRecord) {
        self.timings.checkpoint.observe(record.duration_ms as f64 / 1000.0);
        let since = self.unread_since_ms.swap(0, Ordering::Relaxed);
        if since > 0 {
            self.timings.lag.observe(record.at_ms.saturating_sub(since) as f64 / 1000.0);
        }
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(record);
    }

    /// The last completed checkpoints, oldest first.
    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

/// The pipelines of a process, exposed as one Prometheus registry: every series labelled with
/// its `pipeline` (and `tenant`, under `sluice serve`).
#[derive(Clone, Default)]
pub struct Pipelines {
    all: Arc<Mutex<Vec<Registered>>>,
    /// Tenants' plugin CPU budgets (`sluice serve`), labelled `tenant`.
    budgets: Arc<Mutex<Vec<TenantBudget>>>,
}

/// A tenant's name and its plugin CPU budget.
type TenantBudget = (String, Arc<crate::wasm::CpuBudget>);

#[derive(Clone)]
struct Registered {
    key: String,
    labels: Vec<(String, String)>,
    stats: Arc<Stats>,
}

impl Pipelines {
    /// Expose `stats` under `key` (replacing what was there), labelled `labels`.
    pub fn add(&self, key: &str, labels: Vec<(String, String)>, stats: Arc<Stats>) {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|r| r.key != key);
        all.push(Registered { key: key.to_string(), labels, stats });
    }

    /// Expose tenant `tenant`'s plugin CPU budget: the CPU spent and the time calls were paused.
    pub fn add_budget(&self, tenant: &str, budget: Arc<crate::wasm::CpuBudget>) {
        self.budgets.lock().unwrap_or_else(|p| p.into_inner()).push((tenant.to_string(), budget));
    }

    pub fn remove(&self, key: &str) {
        self.all.lock().unwrap_or_else(|p| p.into_inner()).retain(|r| r.key != key);
    }

    /// The registry in the OpenMetrics text format.
    pub fn text(&self) -> String {
        let mut registry = Registry::with_prefix("sluice");
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl std::fmt::Debug for Pipelines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pipelines")
    }
}

/// One series: the labels and the value.
type Series = (Vec<(String, String)>, SeriesValue);

enum SeriesValue {
    Counter(u64),
    Gauge(i64),
    GaugeSeconds(f64),
    Seconds(f64),
    Histogram(Histogram),
}

impl Collector for Pipelines {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // name → (help, type, series), so each family is described once.
        let mut families: std::collections::BTreeMap<String, (&'static str, MetricType, Vec<Series>)> =
            Default::default();
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        for r in &all {
            let s = &r.stats;
            let mut put = |name: &str, help: &'static str, extra: &[(&'static str, String)], v: SeriesValue| {
                let ty = match v {
                    SeriesValue::Counter(_) | SeriesValue::Seconds(_) => MetricType::Counter,
                    SeriesValue::Gauge(_) | SeriesValue::GaugeSeconds(_) => MetricType::Gauge,
                    SeriesValue::Histogram(_) => MetricType::Histogram,
                };
                let mut labels = r.labels.clone();
                labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
                families.entry(name.to_string()).or_insert((help, ty, Vec::new())).2.push((labels, v));
            };
            let own = [
                ("rows_read", "Rows read by the sources.", g(&s.rows_read)),
                ("rows_transformed", "Rows out of the transforms.", g(&s.rows_transformed)),
                ("rows_written", "Rows handed to the sinks.", g(&s.rows_written)),
                ("dead_letters", "Rows set aside in the dead-letter target, with their reasons.", g(&s.dead_letters)),
                ("checkpoints", "Checkpoints completed.", g(&s.checkpoints)),
                ("txns_committed", "Stream Load transactions committed.", g(&s.txns_committed)),
                ("restarts", "Restarts from the last checkpoint after a failure.", g(&s.restarts)),
            ];
            for (name, help, v) in own {
                put(name, help, &[], SeriesValue::Counter(v));
            }
            let t = &s.timings;
            let hist = [
                ("checkpoint_duration_seconds", "From a checkpoint's barrier to its completion.", &t.checkpoint),
                ("commit_latency_seconds", "Committing a checkpoint's transactions in every sink.", &t.commit),
                ("load_duration_seconds", "One Stream Load, from its start to Doris' answer.", &t.load),
                (
                    "lag_seconds",
                    "From the first row read after a checkpoint to the commit that makes it visible.",
                    &t.lag,
                ),
            ];
            for (name, help, h) in hist {
                put(name, help, &[], SeriesValue::Histogram(h.clone()));
            }
            for m in s.component_metrics() {
                let v = match m.kind {
                    MetricKind::Counter => SeriesValue::Counter(m.value),
                    MetricKind::Gauge => SeriesValue::Gauge(m.value as i64),
                    MetricKind::Milliseconds => SeriesValue::GaugeSeconds(m.value as f64 / 1000.0),
                };
                put(m.name, m.help, &m.labels, v);
            }
            if let Some(v) = s.last_verified() {
                let at = SeriesValue::Gauge((v.at_ms / 1000) as i64);
                put("verify_last_timestamp_seconds", "Unix time of [verify]'s last comparison.", &[], at);
                for t in &v.tables {
                    let table = [("table", t.source.clone())];
                    let failed = SeriesValue::Gauge(i64::from(t.error.is_some()));
                    put("verify_failed", "1 when [verify] could not compare the table.", &table, failed);
                    for (name, help, n) in [
                        ("verify_rows_compared", "Source rows [verify] compared last time.", t.compared),
                        (
                            "verify_rows_differing",
                            "Rows whose values differ in Doris, as [verify] last found.",
                            t.differing,
                        ),
                        ("verify_rows_missing", "Source rows Doris lacks, as [verify] last found.", t.missing),
                        ("verify_rows_extra", "Doris rows the source lacks, as [verify] last found.", t.extra),
                    ] {
                        put(name, help, &table, SeriesValue::Gauge(n as i64));
                    }
                }
            }
        }
        for (tenant, b) in self.budgets.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let labels = vec![("tenant".to_string(), tenant.clone())];
            let cpu = SeriesValue::Seconds(b.spent().as_secs_f64());
            let paused = SeriesValue::Seconds(b.paused().as_secs_f64());
            for (name, help, v) in [
                ("plugin_cpu_seconds", "CPU time the tenant's plugin calls spent from its budget per minute.", cpu),
                ("plugin_paused_seconds", "Time the tenant's plugin calls were paused by its CPU budget.", paused),
            ] {
                families
                    .entry(name.to_string())
                    .or_insert((help, MetricType::Counter, Vec::new()))
                    .2
                    .push((labels.clone(), v));
            }
        }
        for (name, (help, ty, series)) in families {
            let mut family = encoder.encode_descriptor(&name, help, None, ty)?;
            for (labels, v) in &series {
                let e = family.encode_family(labels)?;
                match v {
                    SeriesValue::Counter(c) => ConstCounter::new(*c).encode(e)?,
                    SeriesValue::Gauge(g) => ConstGauge::new(*g).encode(e)?,
                    SeriesValue::GaugeSeconds(g) => ConstGauge::new(*g).encode(e)?,
                    SeriesValue::Seconds(c) => ConstCounter::new(*c).encode(e)?,
                    SeriesValue::Histogram(h) => h.encode(e)?,
                }
            }
        }
        Ok(())
    }
}

/// One pipeline's counters in the OpenMetrics text format (`sluice run --metrics-addr`).
pub fn metrics_text(stats: &Arc<Stats>, pipeline: &str) -> String {
    let one = Pipelines::default();
    one.add(pipeline, vec![("pipeline".into(), pipeline.to_string())], stats.clone());
    one.text()
}

/// A status line: rows through the pipeline, the last checkpoint and commits.
pub fn status_line(stats: &Stats, checkpoint: u64, since: std::time::Instant) {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    // The sources that follow a log: how far behind it they read.
    let lag: Vec<String> = stats
        .sources()
        .iter()
        .filter_map(|s| {
            let seconds = s.get("lag_seconds")?.as_f64()?;
            let bytes = s.get("lag_bytes").and_then(|b| b.as_u64()).unwrap_or(0);
            Some(format!(" | {} behind its log {seconds:.1}s ({bytes} bytes)", s["source"].as_str().unwrap_or("?")))
        })
        .collect();
    tracing::info!(
        "rows read {} → transformed {} → written {} | checkpoint {checkpoint} ({:.1}s ago) | loads committed {}{}",
        g(&stats.rows_read),
        g(&stats.rows_transformed),
        g(&stats.rows_written),
        since.elapsed().as_secs_f64(),
        g(&stats.txns_committed),
        lag.concat()
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
            vec![
                Metric::counter("lookup_hits", "Hits.", vec![("table", "dim.c".into())], 7),
                Metric {
                    kind: MetricKind::Milliseconds,
                    ..Metric::gauge("source_lag_seconds", "Lag.", vec![("source", "s".into())], 1500)
                },
            ]
        }
    }

    #[test]
    fn component_metrics_carry_their_labels() {
        let stats = Arc::new(Stats::default());
        stats.rows_read.store(3, Ordering::Relaxed);
        stats.register(Arc::new(Fixed));
        let text = metrics_text(&stats, "p");
        assert!(text.contains("sluice_rows_read_total{pipeline=\"p\"} 3\n"), "{text}");
        assert!(
            text.contains(
                "# TYPE sluice_lookup_hits counter\nsluice_lookup_hits_total{pipeline=\"p\",table=\"dim.c\"} 7\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE sluice_checkpoint_duration_seconds histogram\n"), "{text}");
        assert!(
            text.contains(
                "# TYPE sluice_source_lag_seconds gauge\nsluice_source_lag_seconds{pipeline=\"p\",source=\"s\"} 1.5\n"
            ),
            "{text}"
        );
        assert_eq!(stats.component_value("lookup_hits"), 7);
    }
}
