//! A Doris sink's settings, resolved from its `[[sink]]` table, and the labels its loads get.

use std::sync::Arc;
use std::time::Duration;

use super::super::DorisSink;
use crate::doris::Label;
use crate::doris::format::BodyFormat;

/// Batch-mode flush thresholds.
#[derive(Debug, Clone)]
pub struct BatchMode {
    pub max_rows: u64,
    pub max_bytes: u64,
    pub interval: Duration,
    pub queue_size: usize,
}

/// A sink's settings, resolved from its `[[sink]]` table.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    pub default_db: String,
    pub default_table: String,
    pub label_prefix: String,
    pub two_phase: bool,
    pub enable_delete: bool,
    pub ignore_update_before: bool,
    pub buffer_size: usize,
    pub buffer_count: usize,
    pub max_retries: u32,
    pub batch_mode: Option<BatchMode>,
    /// `properties.*`, sent as Stream Load headers.
    pub properties: Vec<(String, String)>,
    pub format: BodyFormat,
    pub gzip: bool,
    pub group_commit: bool,
    pub user_columns: bool,
    pub read_timeout: Duration,
    /// Stream Loads open at once per writer (`max_open_loads`).
    pub max_open_loads: usize,
    /// Stream Loads open at once across the writers of a `sluice serve` tenant.
    pub load_permits: Option<Arc<tokio::sync::Semaphore>>,
    /// The pipeline has a dead-letter target: rows Doris filters out of a load go there.
    pub dead_letters: bool,
    /// The Doris transactions the sink's loads hold per database (`max_running_txns_per_db`).
    pub(crate) txns: Arc<crate::sinks::doris::budget::TxnBudget>,
}

/// The label grammar of Doris: `^[-_A-Za-z0-9:]{1,128}$`.
pub fn is_valid_label(label: &str) -> bool {
    !label.is_empty() && label.len() <= 128 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_:".contains(&b))
}

fn label_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

impl SinkSettings {
    /// Resolve a sink config. `default_prefix` is the pipeline's stable id.
    pub fn new(cfg: &DorisSink, default_prefix: &str, read_timeout: Duration) -> Result<Self, (String, String)> {
        let (db, table) = match (&cfg.table, &cfg.database) {
            (Some(t), _) => t.split_once('.').unwrap_or(("", t.as_str())),
            (None, Some(d)) => (d.as_str(), ""),
            (None, None) => ("", ""),
        };
        let mut properties: Vec<(String, String)> = cfg
            .properties
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect();
        // A whole database is written as JSON lines unless told otherwise, as the connector's
        // database sync does: any text value fits (a tab, a newline), columns matched by name.
        if cfg.database.is_some() && !properties.iter().any(|(k, _)| k.eq_ignore_ascii_case("format")) {
            properties.push(("format".into(), "json".into()));
        }
        let get = |k: &str| properties.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
        let format = BodyFormat::from_properties(get).map_err(|m| ("sink.properties.format".to_string(), m))?;
        let gzip = match get("compress_type").map(|c| c.to_ascii_lowercase()) {
            None => false,
            Some(c) if c.is_empty() => false,
            Some(c) if c == "gz" => true,
            Some(c) => {
                return Err(("sink.properties.compress_type".into(), format!("expected \"gz\" or \"\", got {c:?}")));
            }
        };
        if gzip && format == BodyFormat::Arrow {
            return Err(("sink.properties.compress_type".into(), "the arrow format is not compressed".into()));
        }
        let group_commit = get("group_commit").is_some_and(|g| !g.eq_ignore_ascii_case("off_mode"));
        if get("label").is_some() {
            return Err((
                "sink.properties.label".into(),
                "labels are made by Sluice (see `label_prefix`); remove this property".into(),
            ));
        }
        let label_prefix = cfg.label_prefix.clone().unwrap_or_else(|| default_prefix.to_string());
        if !is_valid_label(&label_prefix) || label_prefix.len() > 64 {
            return Err((
                "sink.label_prefix".into(),
                format!("{label_prefix:?}: expected 1-64 characters of A-Z, a-z, 0-9, `-`, `_` or `:`"),
            ));
        }
        if format == BodyFormat::Arrow && cfg.enable_delete && !cfg.ignore.update_before {
            return Err((
                "sink.properties.format".into(),
                "the arrow format cannot carry deletes; set `enable_delete = false` or use csv/json".into(),
            ));
        }
        let batch_mode = cfg.enable.batch_mode.then_some(BatchMode {
            max_rows: cfg.buffer_flush.max_rows,
            max_bytes: cfg.buffer_flush.max_bytes.0,
            interval: cfg.buffer_flush.interval.0,
            queue_size: cfg.flush.queue_size as usize,
        });
        Ok(SinkSettings {
            default_db: db.to_string(),
            default_table: table.to_string(),
            label_prefix,
            // Group commit loads carry no label, so they cannot be pre-committed.
            two_phase: cfg.enable_2pc && batch_mode.is_none() && !group_commit,
            enable_delete: cfg.enable_delete,
            ignore_update_before: cfg.ignore.update_before,
            buffer_size: cfg.buffer_size.0.max(1) as usize,
            buffer_count: cfg.buffer_count.max(1) as usize,
            max_retries: cfg.max_retries,
            batch_mode,
            user_columns: get("columns").is_some(),
            properties,
            format,
            gzip,
            group_commit,
            read_timeout,
            max_open_loads: cfg.max_open_loads.max(1) as usize,
            load_permits: None,
            dead_letters: false,
            txns: Arc::new(crate::sinks::doris::budget::TxnBudget::new(cfg.max_running_txns_per_db as usize, 1)),
        })
    }

    pub(super) fn label(&self, db: &str, table: &str, worker: u32, checkpoint: u64, run: u64, seq: u32) -> Label {
        let tail = if seq == 0 { String::new() } else { format!("_{seq}") };
        let label =
            format!("{}_{}_{}_{worker}_{checkpoint}_{run}{tail}", self.label_prefix, label_safe(db), label_safe(table));
        if label.len() <= 128 {
            return Label::new(label);
        }
        use sha2::Digest;
        let hash = sha2::Sha256::digest(format!("{db}.{table}").as_bytes());
        let short: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
        Label::new(format!("{}_{short}_{worker}_{checkpoint}_{run}{tail}", self.label_prefix))
    }
}
