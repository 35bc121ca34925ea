//! Snapshot scans of a Doris table. `_query_plan` names the tablets once, on the coordinator;
//! they are cut into splits of `request.tablet.size`, and worker `w` of `n` reads splits `w`,
//! `w + n`, … over Arrow Flight SQL (`SELECT … TABLET(…)`).

use std::sync::Arc;

use anyhow::Context;
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{DorisTable, transient};
use crate::Batch;
use crate::doris::scan::{FlightReader, tablet_sql};
use crate::metrics::SplitProgress;
use crate::runtime::{Event, Position, Restartable, SourceReader, SplitEnumerator, TableId};

/// The splits of a snapshot: one `TABLET(…)` statement and its number of tablets each.
pub struct ScanPlan {
    pub source: DorisTable,
    pub splits: Vec<(String, u64)>,
    pub parallelism: usize,
}

/// Ask the FE for the table's tablets (`_query_plan`, with the projection and filter) and cut
/// them into splits.
pub async fn plan(source: &DorisTable, parallelism: usize) -> anyhow::Result<ScanPlan> {
    let d = &source.config;
    let fields = source.fields();
    let filter = d.filter.query.as_deref();
    let mut plan_sql = format!("SELECT {fields} FROM {}", source.quoted());
    if let Some(f) = filter.filter(|f| !f.trim().is_empty()) {
        plan_sql.push_str(&format!(" WHERE {f}"));
    }
    let tablets = source.conn.client.query_plan(&source.db, &source.name, &plan_sql).await.map_err(transient)?;
    let splits = tablets
        .chunks(d.request.tablet.size.max(1) as usize)
        .map(|ids| (tablet_sql(&fields, &source.db, &source.name, ids, filter), ids.len() as u64))
        .collect();
    Ok(ScanPlan { source: source.clone(), splits, parallelism })
}

#[async_trait]
impl SplitEnumerator for ScanPlan {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let position = ScanPosition::restore(position, &self.source.config.table)?;
        Ok(Box::new(DorisScan::new(self, worker, position).await?))
    }
}

#[async_trait]
impl SourceReader for DorisScan {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        Ok(self.next_batch().await?.map(|b| Event::data(&self.id, b)))
    }

    fn position(&self) -> serde_json::Value {
        DorisScan::position(self).to_value()
    }
}

/// The reader of worker `w`'s splits: split `w`, `w + n`, … of the plan, one `TABLET(…)` statement
/// each. Its position is the split and the rows of it already delivered, so a restart re-reads
/// only what no checkpoint covers; a stream that breaks is re-opened (up to `request_retries`
/// times) and skips the rows already delivered.
pub struct DorisScan {
    schema: SchemaRef,
    reader: FlightReader,
    table: String,
    id: TableId,
    statements: Vec<String>,
    /// Tablets of each split (for progress).
    split_tablets: Vec<u64>,
    progress: Arc<SplitProgress>,
    split: usize,
    /// Rows of the current split delivered so far (across re-opens and restarts).
    delivered: u64,
    /// Rows of the current split seen on the open stream.
    seen: u64,
    stream: Option<(arrow_flight::decode::FlightRecordBatchStream, Vec<arrow_flight::Ticket>)>,
    retries_left: u32,
    max_retries: u32,
}

/// Where a scan reader stands: its `split`-th split, `rows` of it delivered.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ScanPosition {
    pub split: usize,
    pub rows: u64,
}

impl Position for ScanPosition {}

impl DorisScan {
    /// The reader of worker `worker` of the plan, at `position`.
    pub async fn new(plan: &ScanPlan, worker: usize, position: ScanPosition) -> anyhow::Result<Self> {
        let n = plan.parallelism;
        let (statements, split_tablets): (Vec<String>, Vec<u64>) =
            plan.splits.iter().skip(worker).step_by(n).cloned().unzip();
        let source = &plan.source;
        source.progress.planned("tablets", split_tablets.iter().sum(), split_tablets.iter().take(position.split).sum());
        Ok(Self {
            schema: source.schema.clone(),
            reader: source.flight().await?,
            table: source.config.table.clone(),
            id: source.table.clone(),
            statements,
            split_tablets,
            progress: source.progress.clone(),
            split: position.split,
            delivered: position.rows,
            seen: 0,
            stream: None,
            retries_left: source.conn.section.request_retries,
            max_retries: source.conn.section.request_retries,
        })
    }

    pub fn position(&self) -> ScanPosition {
        ScanPosition { split: self.split, rows: self.delivered }
    }

    async fn open(&mut self) -> anyhow::Result<()> {
        let sql = &self.statements[self.split];
        let (_, mut tickets) =
            self.reader.execute(sql).await.map_err(transient).with_context(|| format!("scanning `{}`", self.table))?;
        tickets.reverse();
        let first = tickets.pop().with_context(|| format!("scanning `{}`: Doris returned no ticket", self.table))?;
        let stream = self.reader.stream(first).await.map_err(transient)?;
        self.stream = Some((stream, tickets));
        self.seen = 0;
        Ok(())
    }
}

impl DorisScan {
    /// The next batch of the snapshot, or `None` once every split is read.
    pub async fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
        use futures::StreamExt;
        loop {
            if self.split >= self.statements.len() {
                return Ok(None);
            }
            if self.stream.is_none() {
                self.open().await?;
            }
            let (stream, tickets) = self.stream.as_mut().expect("opened above");
            match stream.next().await {
                Some(Ok(batch)) => {
                    let start = self.seen;
                    self.seen += batch.num_rows() as u64;
                    if self.seen <= self.delivered {
                        continue; // delivered before a restart or a broken stream
                    }
                    let skip = self.delivered.saturating_sub(start) as usize;
                    let batch = batch.slice(skip, batch.num_rows() - skip);
                    self.delivered = self.seen;
                    let columns = batch
                        .columns()
                        .iter()
                        .zip(self.schema.fields())
                        .map(
                            |(c, f)| {
                                if c.data_type() == f.data_type() { Ok(c.clone()) } else { cast(c, f.data_type()) }
                            },
                        )
                        .collect::<Result<Vec<_>, _>>();
                    let batch =
                        columns.and_then(|c| RecordBatch::try_new(self.schema.clone(), c)).with_context(|| {
                            format!("scanning `{}`: the table's columns changed during the scan", self.table)
                        })?;
                    return Ok(Some(Batch::new(batch)));
                }
                Some(Err(e)) => {
                    if self.retries_left == 0 {
                        return Err(Restartable::error(format!(
                            "scanning `{}` (split {}): the stream broke {} times; last: {e}",
                            self.table,
                            self.split,
                            self.max_retries + 1
                        )));
                    }
                    self.retries_left -= 1;
                    tracing::warn!(table = %self.table, split = self.split, "scan stream broke, re-reading the split: {e}");
                    self.stream = None;
                }
                None => {
                    if let Some(next) = tickets.pop() {
                        let s = self.reader.stream(next).await.map_err(transient)?;
                        self.stream.as_mut().expect("open").0 = s;
                        continue;
                    }
                    self.progress.read(self.split_tablets[self.split]);
                    self.split += 1;
                    self.delivered = 0;
                    self.stream = None;
                    self.retries_left = self.max_retries;
                }
            }
        }
    }
}
