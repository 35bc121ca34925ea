//! One Stream Load on the wire: its headers and body, a chunk handed to a streaming load, the
//! reply read when its body ends, a failed load's reason from its error log, and a batch-mode
//! load retried under its label.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::GzEncoder;
use tokio::sync::mpsc;

use super::super::committer::Txn;
use super::{OpenLoad, SinkMetrics, SinkSettings, fatal, from_doris, retry};
use crate::doris::fe::{FeClient, LoadResponse, LoadStatus};
use crate::doris::format::{BodyFormat, DELETE_SIGN};
use crate::doris::{DorisError, Label};
use crate::runtime::{Restartable, is_restartable};

pub(super) fn load_headers(
    settings: &SinkSettings,
    label: Option<&str>,
    columns: &[String],
    with_sign: bool,
    two_phase: bool,
) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(l) = label {
        headers.push(("label".into(), l.into()));
    }
    if settings.format == BodyFormat::Json {
        headers.push(("read_json_by_line".into(), "true".into()));
    }
    if !settings.user_columns && settings.format != BodyFormat::Json {
        let mut cols: Vec<String> = columns.iter().map(|c| format!("`{}`", c.replace('`', "``"))).collect();
        if with_sign {
            cols.push(DELETE_SIGN.into());
        }
        headers.push(("columns".into(), cols.join(",")));
    }
    if with_sign {
        headers.push(("hidden_columns".into(), DELETE_SIGN.into()));
    }
    for (k, v) in &settings.properties {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v.clone()));
    }
    if two_phase {
        headers.push(("two_phase_commit".into(), "true".into()));
    }
    headers
}

pub(super) fn gzip(body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::fast());
    gz.write_all(body)?;
    Ok(gz.finish()?)
}

/// Hand a chunk to the load; a Doris that stops reading for `read_timeout` fails the load.
pub(super) async fn send_chunk(
    open: &mut OpenLoad,
    chunk: Bytes,
    settings: &SinkSettings,
    db: &str,
    table: &str,
) -> anyhow::Result<()> {
    match tokio::time::timeout(settings.read_timeout, open.tx.send(Ok(chunk))).await {
        Ok(Ok(())) => Ok(()),
        // The request ended early: its task has the reason.
        Ok(Err(_)) => match open.task.take().expect("task present while the body is written").await {
            Ok(Err(e)) => Err(from_doris(e)),
            Ok(Ok(r)) => Err(retry(format!(
                "stream load of `{db}.{table}` (label `{}`) ended before its body: {}: {}",
                r.label, r.status, r.message
            ))),
            Err(e) => Err(retry(format!("stream load of `{db}.{table}`: {e}"))),
        },
        Err(_) => Err(retry(format!(
            "stream load of `{db}.{table}`{}: Doris read nothing for {:?} (`request_read_timeout`)",
            open.label.as_deref().map(|l| format!(" (label `{l}`)")).unwrap_or_default(),
            settings.read_timeout
        ))),
    }
}

/// A load that Doris answered.
pub(super) struct Finished {
    pub(super) db: String,
    pub(super) table: String,
    pub(super) label: Label,
    /// With 2PC: its pre-committed transaction.
    pub(super) txn: Option<Txn>,
    /// Rows Doris filtered out of it (`NumberFilteredRows`).
    pub(super) filtered: u64,
    pub(super) error_url: Option<String>,
}

/// How a part of a load's rows fared alone (see [`DorisWriter::set_aside`]).
/// How many loads of one round of [`Writer::set_aside`] are under way at once.
pub(super) const PART_LOADS_AT_ONCE: usize = 4;

pub(super) enum Part {
    Loaded(Txn),
    Refused { label: Label, reason: String },
}

/// The reason of an error log line (`Reason: <reason>. src line [<row>]; `, or in newer Doris
/// `Error: <reason>. Row: <row>`).
pub(super) fn log_reason(line: &str) -> Option<&str> {
    let line = line.lines().next()?.trim();
    let rest = line.strip_prefix("Reason: ").or_else(|| line.strip_prefix("Error: "))?;
    Some(rest.split_once(". src line [").or_else(|| rest.split_once(". Row: ")).map_or(rest, |(r, _)| r).trim())
}

/// End a streaming load's body and read its reply.
pub(super) async fn finish_load(
    client: &FeClient,
    metrics: &SinkMetrics,
    settings: &SinkSettings,
    db: &str,
    table: &str,
    mut open: OpenLoad,
) -> anyhow::Result<Finished> {
    if let Some(gz) = open.gz.take() {
        let mut tail = gz.finish()?;
        open.buf.append(&mut tail);
    }
    open.encoder.finish(&mut open.buf).map_err(fatal)?;
    if !open.buf.is_empty() {
        let chunk = Bytes::from(std::mem::take(&mut open.buf));
        send_chunk(&mut open, chunk, settings, db, table).await?;
    }
    let task = open.task.take().expect("task present while the body is written");
    open.ended.store(true, Ordering::Release);
    let (tx, _) = mpsc::channel(1);
    drop(std::mem::replace(&mut open.tx, tx));
    let (started, label) = (open.started, open.label.clone().unwrap_or_default());
    let reply = match tokio::time::timeout(settings.read_timeout, task).await {
        Ok(Ok(Ok(r))) => r,
        Ok(Ok(Err(e))) => {
            metrics.total_flush_failed_number.fetch_add(1, Ordering::Relaxed);
            return Err(from_doris(e));
        }
        Ok(Err(e)) => return Err(retry(format!("stream load of `{db}.{table}` (label `{label}`): {e}"))),
        Err(_) => {
            return Err(retry(format!(
                "stream load of `{db}.{table}` (label `{label}`): no reply within {:?} of its end (`request_read_timeout`)",
                settings.read_timeout
            )));
        }
    };
    if !reply.is_success() {
        metrics.total_flush_failed_number.fetch_add(1, Ordering::Relaxed);
        return Err(load_failure(client, db, table, &reply).await);
    }
    metrics.record(&reply, started.elapsed());
    if reply.number_filtered_rows > 0 {
        tracing::warn!(
            table = %format!("{db}.{table}"),
            label = %reply.label,
            filtered = reply.number_filtered_rows,
            error_url = reply.error_url.as_deref().unwrap_or(""),
            "Doris filtered rows of a load"
        );
    }
    let mut done = Finished {
        db: db.into(),
        table: table.into(),
        label: reply.label.clone(),
        txn: None,
        filtered: reply.number_filtered_rows.max(0) as u64,
        error_url: reply.error_url.clone(),
    };
    if !settings.two_phase {
        return Ok(done);
    }
    if reply.two_phase_commit.as_deref() != Some("true") {
        return Err(fatal(format!(
            "stream load of `{db}.{table}` (label `{label}`) was not pre-committed although `two_phase_commit: true` was sent"
        )));
    }
    done.txn = Some(Txn { db: db.into(), table: table.into(), label: reply.label, txn_id: reply.txn_id });
    Ok(done)
}

/// A failed load as an error with Doris' `Status`, `Message` and the first lines of its error log.
pub(super) async fn load_failure(client: &FeClient, db: &str, table: &str, reply: &LoadResponse) -> anyhow::Error {
    let errors = match &reply.error_url {
        Some(url) if !url.is_empty() => {
            let log = client.error_log(url, 5).await;
            format!("; see {url}{}", if log.is_empty() { String::new() } else { format!(":\n{log}") })
        }
        _ => String::new(),
    };
    // Rows that Doris refuses are refused again on a retry.
    let data_quality = reply.is_data_quality();
    let e = DorisError::LoadFailed {
        table: format!("{db}.{table}"),
        label: reply.label.to_string(),
        status: reply.status.clone(),
        message: reply.message.clone(),
        errors,
    };
    if data_quality { e.into() } else { Restartable::caused_by(e) }
}

/// One batch-mode load with retries under the same label.
#[allow(clippy::too_many_arguments)]
pub(super) async fn batch_load(
    client: &FeClient,
    metrics: &SinkMetrics,
    settings: &SinkSettings,
    db: &str,
    table: &str,
    label: Option<&str>,
    headers: &[(String, String)],
    body: Bytes,
) -> anyhow::Result<Option<Finished>> {
    use backon::BackoffBuilder;
    let started = Instant::now();
    let mut attempt = 0u32;
    let mut waits = crate::retry::backoff(Duration::from_millis(500), settings.max_retries as usize).build();
    loop {
        let timeout = settings.read_timeout + Duration::from_secs(body.len() as u64 / (1 << 20));
        let permit = match &settings.load_permits {
            Some(p) => Some(p.clone().acquire_owned().await?),
            None => None,
        };
        let result = client.load(db, table, headers, reqwest::Body::from(body.clone()), Some(timeout)).await;
        drop(permit);
        let failure = match result {
            Ok(r) if r.is_success() => {
                metrics.record(&r, started.elapsed());
                return Ok(Some(Finished {
                    db: db.into(),
                    table: table.into(),
                    label: r.label,
                    txn: None,
                    filtered: r.number_filtered_rows.max(0) as u64,
                    error_url: r.error_url,
                }));
            }
            Ok(r) => match r.load_status() {
                // An earlier attempt got through and its reply was lost.
                LoadStatus::LabelAlreadyExists { existing } if existing == "FINISHED" || existing == "VISIBLE" => {
                    tracing::info!(label = label.unwrap_or(""), "load already done by an earlier attempt");
                    metrics.total_flush_succeeded_number.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                _ => load_failure(client, db, table, &r).await,
            },
            Err(e) => from_doris(e),
        };
        let wait = waits.next().filter(|_| is_restartable(&failure));
        let Some(wait) = wait else {
            metrics.total_flush_failed_number.fetch_add(1, Ordering::Relaxed);
            return Err(failure);
        };
        attempt += 1;
        metrics.load_retries.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            label = label.unwrap_or(""),
            attempt,
            "load failed, retrying with the same label in {wait:?}: {failure}"
        );
        tokio::time::sleep(wait).await;
    }
}
