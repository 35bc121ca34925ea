//! The Doris sink's counters, named as the Flink connector's sink metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::doris::fe::LoadResponse;

/// Counters named as the Flink connector's sink metrics.
#[derive(Debug, Default)]
pub struct SinkMetrics {
    /// The pipeline's load-duration histogram.
    pub durations: std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>,
    pub total_flush_load_bytes: AtomicU64,
    pub flush_total_number_rows: AtomicU64,
    pub total_flush_loaded_rows: AtomicU64,
    pub total_flush_time_ms: AtomicU64,
    pub total_flush_succeeded_number: AtomicU64,
    pub total_flush_failed_number: AtomicU64,
    pub total_flush_filtered_rows: AtomicU64,
    pub total_flush_unselected_rows: AtomicU64,
    pub begin_txn_time_ms: AtomicU64,
    pub put_data_time_ms: AtomicU64,
    pub read_data_time_ms: AtomicU64,
    pub write_data_time_ms: AtomicU64,
    pub commit_and_publish_time_ms: AtomicU64,
    pub load_time_ms: AtomicU64,
    /// Batch-mode loads tried again under their label.
    pub load_retries: AtomicU64,
}

impl SinkMetrics {
    pub(super) fn record(&self, r: &LoadResponse, elapsed: Duration) {
        if let Some(h) = self.durations.get() {
            h.observe(elapsed.as_secs_f64());
        }
        let add = |c: &AtomicU64, v: i64| c.fetch_add(v.max(0) as u64, Ordering::Relaxed);
        add(&self.total_flush_load_bytes, r.load_bytes);
        add(&self.flush_total_number_rows, r.number_total_rows);
        add(&self.total_flush_loaded_rows, r.number_loaded_rows);
        add(&self.total_flush_filtered_rows, r.number_filtered_rows);
        add(&self.total_flush_unselected_rows, r.number_unselected_rows);
        add(&self.total_flush_time_ms, elapsed.as_millis() as i64);
        add(&self.begin_txn_time_ms, r.begin_txn_time_ms);
        add(&self.put_data_time_ms, r.stream_load_put_time_ms);
        add(&self.read_data_time_ms, r.read_data_time_ms);
        add(&self.write_data_time_ms, r.write_data_time_ms);
        add(&self.commit_and_publish_time_ms, r.commit_and_publish_time_ms);
        add(&self.load_time_ms, r.load_time_ms);
        self.total_flush_succeeded_number.fetch_add(1, Ordering::Relaxed);
    }

    /// `(name, value)` pairs in the connector's names.
    pub fn values(&self) -> Vec<(&'static str, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("totalFlushLoadBytes", g(&self.total_flush_load_bytes)),
            ("flushTotalNumberRows", g(&self.flush_total_number_rows)),
            ("totalFlushLoadedRows", g(&self.total_flush_loaded_rows)),
            ("totalFlushTimeMs", g(&self.total_flush_time_ms)),
            ("totalFlushSucceededNumber", g(&self.total_flush_succeeded_number)),
            ("totalFlushFailedNumber", g(&self.total_flush_failed_number)),
            ("totalFlushFilteredRows", g(&self.total_flush_filtered_rows)),
            ("totalFlushUnselectedRows", g(&self.total_flush_unselected_rows)),
            ("beginTxnTimeMs", g(&self.begin_txn_time_ms)),
            ("putDataTimeMs", g(&self.put_data_time_ms)),
            ("readDataTimeMs", g(&self.read_data_time_ms)),
            ("writeDataTimeMs", g(&self.write_data_time_ms)),
            ("commitAndPublishTimeMs", g(&self.commit_and_publish_time_ms)),
            ("loadTimeMs", g(&self.load_time_ms)),
        ]
    }
}
