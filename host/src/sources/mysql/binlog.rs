//! Following the binlog of a MySQL/MariaDB server (ROW format): the row events of the source's
//! tables as change events, a transaction at a time, with the position after the transaction's
//! commit as the reader's position, so a restart neither loses nor repeats a transaction.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use futures::StreamExt;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::binlog::value::BinlogValue;
use serde::{Deserialize, Serialize};
use sluice_guest::batch::{BatchBuilder, RowKind, Value, format_datetime_micros};

use super::Table;
use crate::runtime::{Event, Restartable};

/// A binlog position: the file and the offset of the next event to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
}

/// The server's current binlog position (`SHOW MASTER STATUS`); an error that says how to turn
/// the binlog on when it is off.
pub async fn current(conn: &mut mysql_async::Conn) -> anyhow::Result<BinlogPosition> {
    use mysql_async::prelude::Queryable;
    let row: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await?;
    let Some(row) = row else {
        anyhow::bail!(
            "the MySQL server has no binlog (SHOW MASTER STATUS is empty): start it with `log_bin` on, `binlog_format = ROW` and a `server_id`"
        );
    };
    let file: String = row.get(0).unwrap_or_default();
    let pos: u64 = row.get(1).unwrap_or(4);
    Ok(BinlogPosition { file, pos })
}

/// An open binlog stream and the changes of the transaction being read.
pub struct Follower {
    stream: mysql_async::BinlogStream,
    tables: Arc<Vec<Table>>,
    by_name: HashMap<String, usize>,
    /// The file of the events being read.
    file: String,
    /// Rows of the open transaction, per table: kind and values as text.
    open: Vec<(usize, RowKind, Vec<Option<String>>)>,
    /// Batches of a committed transaction still to hand out, and the position after it.
    ready: VecDeque<Event>,
    committed: Option<BinlogPosition>,
}

impl Follower {
    /// Open the stream at `at`, as replica `server_id`.
    pub async fn open(
        pool: &mysql_async::Pool,
        server_id: u32,
        at: &BinlogPosition,
        tables: Arc<Vec<Table>>,
    ) -> anyhow::Result<Follower> {
        let conn = pool.get_conn().await.map_err(|e| Restartable::error(e.to_string()))?;
        let request =
            mysql_async::BinlogStreamRequest::new(server_id).with_filename(at.file.as_bytes()).with_pos(at.pos);
        let stream = conn.get_binlog_stream(request).await.map_err(|e| {
            let text = e.to_string();
            if text.contains("Could not find first log file") || text.contains("1236") {
                anyhow::anyhow!(
                    "the binlog at {}:{} is gone from the server ({text}); the changes since then cannot be read: start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`",
                    at.file,
                    at.pos
                )
            } else {
                Restartable::error(format!("opening the binlog at {}:{}: {text}", at.file, at.pos))
            }
        })?;
        let by_name = tables.iter().enumerate().map(|(i, t)| (format!("{}.{}", t.db, t.name), i)).collect();
        Ok(Follower {
            stream,
            tables,
            by_name,
            file: at.file.clone(),
            open: Vec::new(),
            ready: VecDeque::new(),
            committed: None,
        })
    }

    /// The next batch of a committed transaction and, with its last batch, the position after the
    /// transaction.
    pub async fn next(&mut self) -> anyhow::Result<(Event, Option<BinlogPosition>)> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                let at = if self.ready.is_empty() { self.committed.take() } else { None };
                return Ok((event, at));
            }
            let Some(event) = self.stream.next().await else {
                return Err(Restartable::error("the MySQL server closed the binlog stream"));
            };
            let event = event.map_err(|e| Restartable::error(format!("reading the binlog: {e}")))?;
            let end = u64::from(event.header().log_pos());
            match event.read_data()? {
                Some(EventData::RotateEvent(r)) => {
                    // The name may carry a checksum's bytes after it (MariaDB's first rotate).
                    let name: String = r
                        .name()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                        .collect();
                    self.file = name;
                }
                Some(EventData::RowsEvent(rows)) => self.rows(&rows)?,
                Some(EventData::XidEvent(_)) => self.commit(end)?,
                Some(EventData::QueryEvent(q)) if q.query().trim().eq_ignore_ascii_case("COMMIT") => {
                    self.commit(end)?
                }
                _ => {}
            }
        }
    }

    /// Keep the rows of a row event of one of the source's tables.
    fn rows(&mut self, rows: &RowsEventData<'_>) -> anyhow::Result<()> {
        let Some(tme) = self.stream.get_tme(rows.table_id()) else { return Ok(()) };
        let name = format!("{}.{}", tme.database_name(), tme.table_name());
        let Some(&index) = self.by_name.get(&name) else { return Ok(()) };
        let table = &self.tables[index];
        let key: Vec<usize> =
            table.primary_key.iter().filter_map(|k| table.columns.iter().position(|c| &c.name == k)).collect();
        for row in rows.rows(tme) {
            let (before, after) = row?;
            let text = |r: &mysql_async::binlog::row::BinlogRow| -> anyhow::Result<Vec<Option<String>>> {
                (0..table.columns.len()).map(|i| value_text(table, i, r.as_ref(i))).collect()
            };
            match (before, after) {
                (None, Some(a)) => self.open.push((index, RowKind::Insert, text(&a)?)),
                (Some(b), None) => self.open.push((index, RowKind::Delete, text(&b)?)),
                (Some(b), Some(a)) => {
                    let (b, a) = (text(&b)?, text(&a)?);
                    // A changed primary key is a delete of the old key and an insert of the new.
                    if key.iter().any(|&k| b[k] != a[k]) {
                        self.open.push((index, RowKind::Delete, b));
                        self.open.push((index, RowKind::Insert, a));
                    } else {
                        self.open.push((index, RowKind::UpdateBefore, b));
                        self.open.push((index, RowKind::UpdateAfter, a));
                    }
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The transaction is committed: its rows become batches (one per run of a table), handed out
    /// before anything after it.
    fn commit(&mut self, end: u64) -> anyhow::Result<()> {
        let rows = std::mem::take(&mut self.open);
        let mut i = 0;
        while i < rows.len() {
            let table = rows[i].0;
            let t = &self.tables[table];
            let mut builder = BatchBuilder::new(t.schema.clone()).map_err(|e| anyhow::anyhow!(e.message))?;
            while i < rows.len() && rows[i].0 == table {
                let values: Vec<Value<'_>> =
                    rows[i].2.iter().map(|v| v.as_deref().map_or(Value::Null, Value::Str)).collect();
                builder.push(rows[i].1, &values).map_err(|e| anyhow::anyhow!("`{}`: {}", t.id, e.message))?;
                i += 1;
            }
            let batch = builder.finish().map_err(|e| anyhow::anyhow!(e.message))?;
            self.ready.push_back(Event::data(&t.id, batch));
        }
        let at = BinlogPosition { file: self.file.clone(), pos: end };
        if self.ready.is_empty() {
            // Nothing of ours: an empty batch moves the position on.
            let t = &self.tables[0];
            self.ready.push_back(Event::data(
                &t.id,
                sluice_guest::batch::Batch::new(arrow::record_batch::RecordBatch::new_empty(t.schema.clone())),
            ));
        }
        self.committed = Some(at);
        Ok(())
    }
}

/// A binlog value as the text the snapshot reads for the same column.
fn value_text(table: &Table, column: usize, value: Option<&BinlogValue<'_>>) -> anyhow::Result<Option<String>> {
    use mysql_async::Value as V;
    let c = &table.columns[column];
    let t = c.column_type.to_ascii_lowercase();
    let Some(value) = value else { return Ok(None) };
    let v = match value {
        BinlogValue::Value(v) => v,
        BinlogValue::Jsonb(_) | BinlogValue::JsonDiff(_) => {
            anyhow::bail!("`{}`.`{}`: MySQL 8's binary JSON in the binlog is not decoded yet", table.id, c.name)
        }
    };
    Ok(match v {
        V::NULL => None,
        V::Bytes(b) if t.starts_with("bit") => {
            Some(b.iter().fold(0u128, |n, byte| (n << 8) | u128::from(*byte)).to_string())
        }
        V::Bytes(b) if t.starts_with("timestamp") => {
            // Seconds since the epoch (and a fraction): UTC wall time, as the snapshot reads it.
            let text = String::from_utf8_lossy(b);
            let (secs, frac) = text.split_once('.').unwrap_or((&text, ""));
            let secs: i64 =
                secs.parse().map_err(|_| anyhow::anyhow!("`{}`.`{}`: timestamp {text:?}", table.id, c.name))?;
            let micros: i64 = format!("{frac:0<6}")[..6].parse().unwrap_or(0);
            Some(format_datetime_micros(secs * 1_000_000 + micros))
        }
        V::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        V::Int(i) => Some(i.to_string()),
        V::UInt(u) => Some(u.to_string()),
        V::Float(f) => Some(f.to_string()),
        V::Double(d) => Some(d.to_string()),
        V::Date(y, mo, d, ..) if t.starts_with("date") && !t.starts_with("datetime") => {
            Some(format!("{y:04}-{mo:02}-{d:02}"))
        }
        V::Date(y, mo, d, h, mi, s, us) => Some(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")),
        V::Time(neg, d, h, mi, s, us) => {
            Some(format!("{}{:02}:{mi:02}:{s:02}.{us:06}", if *neg { "-" } else { "" }, u32::from(*h) + d * 24))
        }
    })
}
