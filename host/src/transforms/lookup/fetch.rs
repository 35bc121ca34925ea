//! Reading the dimension table: the connection pool, the query text and retries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, StringArray};
use mysql_async::prelude::Queryable;
use sluice_guest::types::DorisType;

use super::LookupTransform;
use super::cache::{Key, Matches};
use super::{DimColumn, LookupError, LookupMetrics};
use crate::pipeline::DorisSection;

/// Dimension rows: the key columns' text, then the value columns' text.
type TextRow = Vec<Option<String>>;

/// The dimension table and the pool that reads it.
pub(super) struct Dimension {
    /// `db.table` as configured.
    pub table: String,
    /// Key columns, in the order of `keys`.
    pub keys: Vec<DimColumn>,
    /// Columns brought back.
    pub values: Vec<DimColumn>,
    pool: mysql_async::Pool,
    /// `` SELECT `k1`, …, `v1`, … FROM `db`.`table` ``
    select: String,
    max_retries: u32,
    /// How long one query may take (`doris.request_read_timeout`).
    timeout: Duration,
    metrics: Arc<LookupMetrics>,
}

/// `jdbc:mysql://host:port[/db][?…]` → (host, port).
pub(crate) fn host_port(url: &str) -> Result<(String, u16), LookupError> {
    let bad = || LookupError::Config(format!("doris.jdbc_url: expected jdbc:mysql://host:port, got {url:?}"));
    let rest = url.strip_prefix("jdbc:mysql://").ok_or_else(bad)?;
    let addr = rest.split(['/', '?', ',']).next().unwrap_or_default();
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
        None => (addr, 9030),
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// `` `name` `` with backticks doubled.
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

impl Dimension {
    pub async fn connect(
        cfg: &LookupTransform,
        doris: &DorisSection,
        password: &str,
        connections: usize,
        metrics: Arc<LookupMetrics>,
    ) -> Result<Dimension, LookupError> {
        let url = doris
            .jdbc_url
            .as_deref()
            .ok_or_else(|| LookupError::Config("a lookup needs `doris.jdbc_url` (jdbc:mysql://host:9030)".into()))?;
        let (host, port) = host_port(url)?;
        let at = format!("{host}:{port}");
        let constraints = mysql_async::PoolConstraints::new(0, connections.max(1))
            .ok_or_else(|| LookupError::Config("invalid connection pool size".into()))?;
        let ssl = match crate::doris::tls::TlsSettings::of("doris", doris) {
            Some(tls) => tls.mysql_config().map_err(|e| LookupError::Config(format!("{e:#}")))?,
            None => None,
        };
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(host)
            .tcp_port(port)
            .user(Some(doris.username.clone()))
            .pass(Some(password.to_string()))
            .prefer_socket(false)
            .stmt_cache_size(0)
            .ssl_opts(ssl)
            .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints));
        let (db, name) = cfg.table.split_once('.').unwrap_or(("", cfg.table.as_str()));
        let mut dim = Dimension {
            table: cfg.table.clone(),
            keys: Vec::new(),
            values: Vec::new(),
            pool: mysql_async::Pool::new(opts),
            select: String::new(),
            max_retries: cfg.max_retries,
            timeout: doris.request_read_timeout.0,
            metrics,
        };
        let from = format!("{}.{}", quote(db), quote(name));
        let described = dim.query(&format!("DESC {from}"), false).await.map_err(|e| {
            let message = match e {
                LookupError::Query { message, .. } => message,
                other => other.to_string(),
            };
            LookupError::Describe { table: cfg.table.clone(), at: at.clone(), message }
        })?;
        let mut columns = Vec::new();
        for row in described {
            let (Some(Some(field)), Some(Some(ty))) = (row.first(), row.get(1)) else { continue };
            let ty =
                DorisType::parse(ty).map_err(|e| LookupError::Data { table: cfg.table.clone(), message: e.message })?;
            columns.push(DimColumn { name: field.clone(), ty });
        }
        let find = |column: &str| {
            columns.iter().find(|c| c.name.eq_ignore_ascii_case(column)).cloned().ok_or_else(|| {
                LookupError::NoDimensionColumn {
                    table: cfg.table.clone(),
                    column: column.to_string(),
                    columns: columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
                }
            })
        };
        dim.keys = cfg.keys.iter().map(|k| find(k)).collect::<Result<_, _>>()?;
        dim.values = if cfg.columns.is_empty() {
            columns.iter().filter(|c| !dim.keys.iter().any(|k| k.name == c.name)).cloned().collect()
        } else {
            cfg.columns.iter().map(|c| find(c)).collect::<Result<_, _>>()?
        };
        let list: Vec<String> = dim.keys.iter().chain(&dim.values).map(|c| quote(&c.name)).collect();
        dim.select = format!("SELECT {} FROM {from}", list.join(", "));
        Ok(dim)
    }

    pub async fn close(&self) {
        let _ = self.pool.clone().disconnect().await;
    }

    /// Run `sql`, retrying with backoff (0.5s, 1s, 2s, … with jitter) up to `max_retries` times;
    /// `lookup` counts it in the metrics.
    async fn query(&self, sql: &str, lookup: bool) -> Result<Vec<TextRow>, LookupError> {
        use backon::BackoffBuilder;
        let mut attempt = 0u32;
        let mut waits = crate::retry::backoff(Duration::from_millis(500), self.max_retries as usize).build();
        loop {
            let started = Instant::now();
            let query = async {
                let mut conn = self.pool.get_conn().await?;
                conn.query::<mysql_async::Row, _>(sql).await
            };
            let result = match tokio::time::timeout(self.timeout, query).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {:?} (`doris.request_read_timeout`)", self.timeout)),
            };
            if lookup {
                self.metrics.record_query(started.elapsed(), result.is_ok());
            }
            match result {
                Ok(rows) => return Ok(rows.into_iter().map(text_row).collect()),
                Err(e) if attempt < self.max_retries => {
                    attempt += 1;
                    let wait = waits.next().unwrap_or(Duration::from_millis(500));
                    tracing::warn!(table = %self.table, "lookup query failed, retrying in {wait:?}: {e}");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    return Err(LookupError::Query {
                        table: self.table.clone(),
                        attempts: attempt + 1,
                        retries: self.max_retries,
                        message: e,
                    });
                }
            }
        }
    }

    /// The dimension rows of `keys`, grouped by key. Keys without rows are absent.
    pub async fn fetch(&self, keys: &[Key]) -> Result<HashMap<Key, Matches>, LookupError> {
        let literal = |key: &Key| -> Vec<String> {
            key.iter().zip(&self.keys).map(|(text, col)| sql_literal(text, &col.ty)).collect()
        };
        let sql = if self.keys.len() == 1 {
            let list: Vec<String> = keys.iter().map(|k| literal(k).remove(0)).collect();
            format!("{} WHERE {} IN ({})", self.select, quote(&self.keys[0].name), list.join(", "))
        } else {
            let cols: Vec<String> = self.keys.iter().map(|c| quote(&c.name)).collect();
            let list: Vec<String> = keys.iter().map(|k| format!("({})", literal(k).join(", "))).collect();
            format!("{} WHERE ({}) IN ({})", self.select, cols.join(", "), list.join(", "))
        };
        let rows = self.query(&sql, true).await?;
        self.group(rows)
    }

    /// Every row of the table, grouped by key (`cache.mode = "full"`).
    pub async fn fetch_all(&self) -> Result<HashMap<Key, Matches>, LookupError> {
        let rows = self.query(&self.select, true).await?;
        self.group(rows)
    }

    fn group(&self, rows: Vec<TextRow>) -> Result<HashMap<Key, Matches>, LookupError> {
        use std::sync::atomic::Ordering;
        self.metrics.rows_fetched.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let n = self.keys.len();
        let mut key_texts: Vec<Vec<Option<String>>> = Vec::with_capacity(n);
        for (i, col) in self.keys.iter().enumerate() {
            let texts: StringArray = rows.iter().map(|r| r.get(i).cloned().flatten()).collect();
            let texts: ArrayRef = Arc::new(texts);
            key_texts.push(
                canonical(&texts, &col.ty)
                    .map_err(|message| LookupError::Data { table: self.table.clone(), message })?,
            );
        }
        let mut grouped: HashMap<Key, Vec<Vec<Option<String>>>> = HashMap::new();
        for (r, row) in rows.into_iter().enumerate() {
            let key: Option<Key> = key_texts.iter_mut().map(|k| k[r].take()).collect();
            if let Some(key) = key {
                grouped.entry(key).or_default().push(row.into_iter().skip(n).collect());
            }
        }
        Ok(grouped.into_iter().map(|(k, v)| (k, Arc::new(v))).collect())
    }
}

fn text_row(row: mysql_async::Row) -> TextRow {
    row.unwrap()
        .into_iter()
        .map(|v| match v {
            mysql_async::Value::NULL => None,
            mysql_async::Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            other => Some(other.as_sql(true).trim_matches('\'').to_string()),
        })
        .collect()
}

/// A key value as an escaped SQL literal: integers as numbers, everything else as a quoted string
/// that Doris converts to the column's type.
fn sql_literal(text: &str, ty: &DorisType) -> String {
    let value = match ty.arrow_type() {
        t if t.is_integer() => match text.parse::<i64>() {
            Ok(i) => mysql_async::Value::Int(i),
            Err(_) => mysql_async::Value::Bytes(text.as_bytes().to_vec()),
        },
        _ => mysql_async::Value::Bytes(text.as_bytes().to_vec()),
    };
    value.as_sql(false)
}

/// Each value of `array` converted to `ty` and written the one way Sluice writes values, so stream
/// keys and dimension keys compare equal when their values are equal (`12.3` and `12.30` as a
/// DECIMAL(10,2), `7` as INT and as text). A value that does not convert is `None`.
pub(super) fn canonical(array: &ArrayRef, ty: &DorisType) -> Result<Vec<Option<String>>, String> {
    let converted = arrow::compute::cast(array, &ty.arrow_type()).map_err(|e| e.to_string())?;
    let data = arrow::array::RecordBatch::try_from_iter([("k", converted)]).map_err(|e| e.to_string())?;
    let batch = crate::Batch::new(data);
    Ok(batch.rows().map(|r| r.get("k").ok().filter(|v| !v.is_null()).map(|v| v.to_string())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdbc_urls() {
        assert_eq!(host_port("jdbc:mysql://127.0.0.1:9030").unwrap(), ("127.0.0.1".into(), 9030));
        assert_eq!(host_port("jdbc:mysql://fe:19030/dim?useSSL=false").unwrap(), ("fe".into(), 19030));
        assert_eq!(host_port("jdbc:mysql://fe").unwrap(), ("fe".into(), 9030));
        assert!(host_port("mysql://fe:1").is_err());
    }

    #[test]
    fn literals_are_escaped() {
        let varchar = DorisType::parse("VARCHAR(10)").unwrap();
        assert_eq!(sql_literal("a'b\\c", &varchar), r"'a\'b\\c'");
        assert_eq!(sql_literal("42", &DorisType::parse("BIGINT").unwrap()), "42");
        assert_eq!(sql_literal("2024-01-02", &DorisType::parse("DATE").unwrap()), "'2024-01-02'");
        assert_eq!(quote("we`ird"), "`we``ird`");
    }

    #[test]
    fn equal_values_have_one_canonical_text() {
        let texts: ArrayRef = Arc::new(StringArray::from(vec![Some("12.3"), Some("12.300"), None, Some("x")]));
        let dec = DorisType::parse("DECIMAL(10,2)").unwrap();
        assert_eq!(canonical(&texts, &dec).unwrap(), [Some("12.30".into()), Some("12.30".into()), None, None]);
        let ints: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![7]));
        assert_eq!(canonical(&ints, &DorisType::parse("VARCHAR(5)").unwrap()).unwrap(), [Some("7".into())]);
    }
}
