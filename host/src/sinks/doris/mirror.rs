//! A Doris sink's tables read back over Arrow Flight SQL, for `sluice verify`.

use std::sync::Arc;

use anyhow::Context;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::TryStreamExt;

use super::TableNames;
use crate::doris::scan::{FlightReader, flight_error, quote};
use crate::doris::{DorisConnection, DorisError};
use crate::runtime::TableId;
use crate::runtime::mirror::{KeyRange, MirrorTarget};

/// The tables a Doris sink writes, and Flight SQL sessions to read them (kept between reads).
pub(crate) struct DorisMirror {
    conn: Arc<DorisConnection>,
    names: Option<TableNames>,
    /// `db.table` of a sink without `database`.
    default: String,
    idle: tokio::sync::Mutex<Vec<FlightReader>>,
}

impl DorisMirror {
    pub(super) fn new(conn: Arc<DorisConnection>, names: Option<TableNames>, default: String) -> DorisMirror {
        DorisMirror { conn, names, default, idle: Default::default() }
    }

    /// A reader of Doris tables by name (`db.table`), with no sink's names.
    pub(crate) fn reader(conn: Arc<DorisConnection>, table: String) -> DorisMirror {
        DorisMirror::new(conn, None, table)
    }

    async fn session(&self) -> anyhow::Result<FlightReader> {
        if let Some(reader) = self.idle.lock().await.pop() {
            return Ok(reader);
        }
        let addrs = self.conn.flight_addrs(-1).await?;
        let timeout = self.conn.section.request_connect_timeout.0;
        let tls = self.conn.flight_tls()?;
        Ok(FlightReader::connect_any(&addrs, self.conn.client.credentials(), timeout, tls.as_ref()).await?)
    }
}

/// Every batch `sql` returns.
async fn read_all(reader: &mut FlightReader, sql: &str) -> Result<Vec<RecordBatch>, DorisError> {
    let (_, tickets) = reader.execute(sql).await?;
    let mut out = Vec::new();
    for ticket in tickets {
        let stream = reader.stream(ticket).await?;
        let url = reader.url().to_string();
        out.extend(stream.try_collect::<Vec<_>>().await.map_err(|e| flight_error(&url, e))?);
    }
    Ok(out)
}

#[async_trait]
impl MirrorTarget for DorisMirror {
    fn target(&self, table: &TableId) -> String {
        TableNames::target(self.names.as_ref(), table, || self.default.clone())
    }

    async fn read(
        &self,
        target: &str,
        columns: &[String],
        key: Option<&str>,
        range: &KeyRange,
    ) -> anyhow::Result<Vec<RecordBatch>> {
        let (db, table) = target.split_once('.').with_context(|| format!("`{target}` is not `db.table`"))?;
        let columns: Vec<String> = columns.iter().map(|c| quote(c)).collect();
        let literal = |v: &str| mysql_async::Value::from(v).as_sql(false);
        let filter = key.map(|k| range.filter(&quote(k), literal)).unwrap_or_default();
        let sql = format!("SELECT {} FROM {}.{}{filter}", columns.join(", "), quote(db), quote(table));
        let mut reader = self.session().await?;
        let batches = read_all(&mut reader, &sql).await.with_context(|| format!("reading Doris table `{target}`"))?;
        self.idle.lock().await.push(reader);
        Ok(batches)
    }
}
