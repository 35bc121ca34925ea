//! `@incr` reads of changelog tables (§5.4–§5.6): window, TTL, visibility wait and the three
//! increment types, producing the base columns plus `__DORIS_BINLOG_OP__`,
//! `__DORIS_BINLOG_TSO__` and `__DORIS_BINLOG_LSN__`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int8Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

use crate::engine::Engine;
use crate::sql::{Session, SqlError};
use crate::storage::{ChangeOp, ChangeRecord, KeysType, TSO_LOGICAL_BITS, Table, build_array};
use crate::types::{Value, parse_datetime};

/// `__DORIS_BINLOG_OP__`.
pub const BINLOG_OP: &str = "__DORIS_BINLOG_OP__";
/// `__DORIS_BINLOG_TSO__`.
pub const BINLOG_TSO: &str = "__DORIS_BINLOG_TSO__";
/// `__DORIS_BINLOG_LSN__`.
pub const BINLOG_LSN: &str = "__DORIS_BINLOG_LSN__";

/// MySQL error of a window that cannot be read yet (`ERR_INCR_WINDOW_NOT_READY`).
pub const ERR_INCR_WINDOW_NOT_READY: u16 = 5100;
/// MySQL error of a visibility wait that timed out (`ERR_INCR_VISIBLE_WAIT_TIMEOUT`).
pub const ERR_INCR_VISIBLE_WAIT_TIMEOUT: u16 = 5101;

/// Default `change_visible_timeout_ms`.
pub const DEFAULT_VISIBLE_TIMEOUT_MS: u64 = 10_000;
/// Default `changelog.ttl_seconds` / `binlog.ttl_seconds`.
pub const DEFAULT_TTL_SECONDS: i64 = 86_400;

/// `incrementType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncrementType {
    /// Inserts only.
    AppendOnly,
    /// Net change per key between start and end.
    MinDelta,
    /// Every change.
    Detail,
}

/// Parsed `@incr(...)` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct IncrParams {
    /// Window start (ms since the epoch), inclusive.
    pub start_ms: Option<i64>,
    /// Window end (ms since the epoch), exclusive.
    pub end_ms: Option<i64>,
    /// Mode (default MIN_DELTA).
    pub increment_type: IncrementType,
}

fn unsupported() -> SqlError {
    SqlError { code: 1105, message: "Unsupported parameter in incr query".into() }
}

/// The offset of a session `time_zone` from UTC in ms (UTC, `±HH:MM`, and the +08:00 zones
/// Doris installs default to); unknown names count as UTC.
pub fn tz_offset_ms(tz: &str) -> i64 {
    let tz = tz.trim();
    if let Some(rest) = tz.strip_prefix('+').or_else(|| tz.strip_prefix('-')) {
        let sign = if tz.starts_with('-') { -1 } else { 1 };
        let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
        if let (Ok(h), Ok(m)) = (h.parse::<i64>(), m.parse::<i64>()) {
            return sign * (h * 3_600_000 + m * 60_000);
        }
    }
    match tz {
        "Asia/Shanghai" | "PRC" | "Asia/Hong_Kong" | "Asia/Singapore" | "Asia/Taipei" | "CST" => 8 * 3_600_000,
        "Asia/Seoul" | "Asia/Tokyo" => 9 * 3_600_000,
        _ => 0,
    }
}

fn parse_time(s: &str, offset_ms: i64) -> Result<i64, SqlError> {
    let bad = || SqlError { code: 1105, message: "Invalid TIMESTAMP format in incr clause".into() };
    let b = s.as_bytes();
    let shape = b.len() == 19
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return Err(bad());
    }
    let us = parse_datetime(s, 0).ok_or_else(bad)?;
    Ok(us / 1000 - offset_ms)
}

impl IncrParams {
    /// Validates `(key, value)` pairs as written, times in the session time zone.
    pub fn parse(pairs: &[(String, String)], session: &Session) -> Result<IncrParams, SqlError> {
        let offset = tz_offset_ms(session.vars.get("time_zone").map(String::as_str).unwrap_or("UTC"));
        let mut p = IncrParams { start_ms: None, end_ms: None, increment_type: IncrementType::MinDelta };
        for (k, v) in pairs {
            match k.as_str() {
                "startTimestamp" => p.start_ms = Some(parse_time(v, offset)?),
                "endTimestamp" => p.end_ms = Some(parse_time(v, offset)?),
                "incrementType" => {
                    p.increment_type = match v.as_str() {
                        "APPEND_ONLY" => IncrementType::AppendOnly,
                        "MIN_DELTA" => IncrementType::MinDelta,
                        "DETAIL" => IncrementType::Detail,
                        _ => return Err(unsupported()),
                    }
                }
                _ => return Err(unsupported()),
            }
        }
        Ok(p)
    }
}

/// Property names of a changelog table: the seeds' `changelog.*`, or Doris' `binlog.*`.
struct Naming {
    binlog: bool,
}

impl Naming {
    fn of(t: &Table) -> Naming {
        Naming { binlog: t.schema.property("changelog.enable") != Some("true") }
    }
    fn prefix(&self) -> &'static str {
        if self.binlog { "binlog" } else { "changelog" }
    }
    fn expired(&self) -> String {
        if self.binlog {
            "Row binlog offset has expired according to binlog.ttl_seconds".into()
        } else {
            "Changelog offset has expired according to changelog.ttl_seconds".into()
        }
    }
}

fn err(message: impl Into<String>) -> SqlError {
    SqlError { code: 1105, message: message.into() }
}

/// Waits for the transactions on `db.table` that were running when the read began, up to
/// `change_visible_timeout_ms`; then fails with 5101.
async fn wait_visible(
    engine: &Engine,
    db: &str,
    table: &str,
    session: &Session,
    end_ms: Option<i64>,
) -> Result<(), SqlError> {
    let eventual = session.vars.get("enable_eventual_consistent_change").is_some_and(|v| v == "true" || v == "1");
    if eventual && end_ms.is_none() {
        return Ok(());
    }
    let timeout_ms = session
        .vars
        .get("change_visible_timeout_ms")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_VISIBLE_TIMEOUT_MS);
    let pending = engine.in_flight(db, table);
    let Some(&watermark) = pending.last() else {
        return Ok(());
    };
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let still: Vec<i64> = engine.in_flight(db, table).into_iter().filter(|id| *id <= watermark).collect();
        if still.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let (db_id, table_id) = {
                let st = engine.lock();
                (st.db(db).map(|d| d.id).unwrap_or(-1), st.table(db, table).map(|t| t.id).unwrap_or(-1))
            };
            let now = engine.clock.now_ms();
            let current = engine.current_tso();
            return Err(SqlError {
                code: ERR_INCR_VISIBLE_WAIT_TIMEOUT,
                message: format!(
                    "ERR_INCR_VISIBLE_WAIT_TIMEOUT: reason=VISIBLE_WAIT_TIMEOUT, timeout waiting previous transactions \
                     finish for time-based read, txnIdWatermark={watermark} dbId={db_id} tableIds=[{table_id}], \
                     requestedEndTimestampMs={}, currentTSO={current}, currentTSOPhysicalTimeMs={now}, \
                     retryAfterMs=1000, timeoutMs={timeout_ms}",
                    end_ms.unwrap_or(-1)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads `db.table@incr(params)` as one RecordBatch (field names as Doris spells them).
pub async fn read(
    engine: &Arc<Engine>,
    db: &str,
    table: &str,
    pairs: &[(String, String)],
    session: &Session,
) -> Result<RecordBatch, SqlError> {
    let params = IncrParams::parse(pairs, session)?;
    let (naming, keys_type, key_count, historical, ttl_ms) = {
        let st = engine.lock();
        let t = st.table(db, table)?;
        if !t.schema.changelog_enabled() {
            return Err(err("INCR query requires ROW binlog enabled on base table."));
        }
        let naming = Naming::of(t);
        let ttl = t
            .schema
            .property(&format!("{}.ttl_seconds", naming.prefix()))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(DEFAULT_TTL_SECONDS);
        (naming, t.schema.keys_type, t.schema.key_count, t.schema.changelog_historical(), ttl * 1000)
    };
    if params.increment_type == IncrementType::MinDelta && keys_type == KeysType::Unique && !historical {
        return Err(err(format!(
            "MIN_DELTA INCR query requires base table to enable {}.need_historical_value=true",
            naming.prefix()
        )));
    }
    let now = engine.clock.now_ms();
    if let Some(end) = params.end_ms
        && end > now
    {
        let current = engine.current_tso();
        return Err(SqlError {
            code: ERR_INCR_WINDOW_NOT_READY,
            message: format!(
                "ERR_INCR_WINDOW_NOT_READY: reason=END_AFTER_CURRENT_TSO, endTimestamp exceeds the maximum supported \
                 time for an INCR read: requestedEndTimestampMs={end}, CURRENT_TSO_PHYSICAL_TIME={now}, \
                 currentTSO={current}, currentTSOPhysicalTimeMs={now}, retryAfterMs={}",
                end - now
            ),
        });
    }
    wait_visible(engine, db, table, session, params.end_ms).await?;
    // Retention is judged against the clock when the read runs.
    let horizon_ms = now - ttl_ms;
    if let Some(start) = params.start_ms
        && start <= horizon_ms
        && params.increment_type == IncrementType::MinDelta
    {
        return Err(err(naming.expired()));
    }
    let from = params.start_ms.map(|s| s << TSO_LOGICAL_BITS).unwrap_or(i64::MIN);
    let to = params.end_ms.map(|e| e << TSO_LOGICAL_BITS).unwrap_or(i64::MAX);
    let (schema_cols, records): (Vec<crate::storage::Column>, Vec<ChangeRecord>) = {
        let st = engine.lock();
        let t = st.table(db, table).map_err(SqlError::from)?;
        let recs =
            t.changelog.iter().filter(|r| r.tso >= from && r.tso < to && r.commit_ms > horizon_ms).cloned().collect();
        (t.schema.columns.clone(), recs)
    };
    let ncols = schema_cols.len();
    let rows: Vec<ChangeRow> = match (params.increment_type, keys_type) {
        (IncrementType::AppendOnly, _) => records
            .into_iter()
            .filter(|r| r.op == ChangeOp::Append)
            .map(|r| ChangeRow::new(r.after, ChangeOp::Append, r.tso, r.lsn))
            .collect(),
        (IncrementType::Detail, _) | (IncrementType::MinDelta, KeysType::Duplicate) => {
            records.into_iter().map(|r| ChangeRow::new(r.after, r.op, r.tso, r.lsn)).collect()
        }
        (IncrementType::MinDelta, _) => min_delta(records, key_count),
    };
    let mut fields: Vec<Field> = schema_cols.iter().map(|c| Field::new(&c.name, c.ty.arrow_type(), true)).collect();
    fields.push(Field::new(BINLOG_OP, DataType::Int8, false));
    fields.push(Field::new(BINLOG_TSO, DataType::Int64, false));
    fields.push(Field::new(BINLOG_LSN, DataType::Int64, false));
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(ncols + 3);
    for (ci, c) in schema_cols.iter().enumerate() {
        // Records written before an ADD COLUMN lack the new trailing columns.
        arrays.push(build_array(&c.ty, rows.iter().map(|r| r.values.get(ci).unwrap_or(&Value::Null))).map_err(err)?);
    }
    arrays.push(Arc::new(Int8Array::from_iter_values(rows.iter().map(|r| r.op as i8))));
    arrays.push(Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.tso))));
    arrays.push(Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.lsn))));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| err(e.to_string()))
}

/// One output row of an `@incr` read.
#[derive(Debug, Clone, PartialEq)]
struct ChangeRow {
    values: Vec<Value>,
    op: ChangeOp,
    tso: i64,
    lsn: i64,
}

impl ChangeRow {
    fn new(values: Vec<Value>, op: ChangeOp, tso: i64, lsn: i64) -> ChangeRow {
        ChangeRow { values, op, tso, lsn }
    }
}

/// MIN_DELTA: per key, the state before the window (from the first record's before image)
/// against the state at its end (the last record).
fn min_delta(records: Vec<ChangeRecord>, key_count: usize) -> Vec<ChangeRow> {
    let mut order: Vec<Vec<Value>> = Vec::new();
    let mut by_key: BTreeMap<Vec<Value>, Vec<ChangeRecord>> = BTreeMap::new();
    for r in records {
        let key: Vec<Value> = r.after.iter().take(key_count).cloned().collect();
        let e = by_key.entry(key.clone()).or_default();
        if e.is_empty() {
            order.push(key);
        }
        e.push(r);
    }
    let mut out = Vec::new();
    let mut keyed: Vec<(i64, i64, Vec<ChangeRow>)> = Vec::new();
    for key in order {
        let Some(recs) = by_key.remove(&key) else { continue };
        let (Some(first), Some(last)) = (recs.first(), recs.last()) else { continue };
        let before: Option<Vec<Value>> = match first.op {
            ChangeOp::Append => None,
            ChangeOp::UpdateBefore | ChangeOp::Delete => Some(first.after.clone()),
            ChangeOp::UpdateAfter => first.before.clone(),
        };
        let after: Option<Vec<Value>> = match last.op {
            ChangeOp::Append | ChangeOp::UpdateAfter => Some(last.after.clone()),
            ChangeOp::Delete => None,
            // An update is recorded as a before/after pair; a trailing before image means the
            // after image follows in the same commit and was cut by nothing: treat as present.
            ChangeOp::UpdateBefore => Some(last.after.clone()),
        };
        let (tso, lsn) = (last.tso, last.lsn);
        let rows = match (before, after) {
            (None, Some(a)) => vec![ChangeRow::new(a, ChangeOp::Append, tso, lsn)],
            (Some(b), Some(a)) if b != a => {
                vec![
                    ChangeRow::new(b, ChangeOp::UpdateBefore, tso, lsn),
                    ChangeRow::new(a, ChangeOp::UpdateAfter, tso, lsn),
                ]
            }
            (Some(b), None) => vec![ChangeRow::new(b, ChangeOp::Delete, tso, lsn)],
            _ => vec![],
        };
        keyed.push((tso, lsn, rows));
    }
    keyed.sort_by_key(|(tso, lsn, _)| (*tso, *lsn));
    for (_, _, rows) in keyed {
        out.extend(rows);
    }
    out
}
