//! A log follower's transactions on their way out: the rows of the open transaction gathered
//! into batches (one per run of a table, at most `batch_rows` rows), handed out one at a time,
//! the transaction's last event with the position after it. Batches are handed out as they fill
//! ([`Release::AsTheyFill`], PostgreSQL's stream) or once the transaction commits
//! ([`Release::AtCommit`], the binlog). The events of one transaction are the same however often
//! it is read, so a position inside one (the events already returned) names the same rows after
//! a restart.

use std::collections::VecDeque;

use sluice_guest::batch::{BatchBuilder, RowKind, Value};

use super::CdcTable;
use crate::runtime::{Event, SchemaChange};

/// A row of the open transaction: its table (an index into the follower's tables), its kind and
/// its values as Doris text.
type Row = (usize, RowKind, Vec<Option<String>>);

/// When a transaction's batches may be handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Each as soon as it is full (or the next row is another table's).
    AsTheyFill,
    /// All of them once the transaction commits.
    AtCommit,
}

pub(crate) struct Transactions<At> {
    open: Vec<Row>,
    /// Batches of the open transaction not yet handed out ([`Release::AtCommit`]).
    held: VecDeque<Event>,
    ready: VecDeque<Event>,
    /// The position after the transaction whose events `ready` ends with.
    committed: Option<At>,
    /// Events of the first transaction already returned before a restart.
    skip: u64,
    /// Rows per batch at most.
    batch_rows: usize,
    release: Release,
}

impl<At> Transactions<At> {
    /// Leaving out the first `skip` events of the first transaction; batches of at most
    /// `batch_rows` rows, handed out as `release` says.
    pub fn new(skip: u64, batch_rows: usize, release: Release) -> Transactions<At> {
        let (open, held, ready) = (Vec::new(), VecDeque::new(), VecDeque::new());
        Transactions { open, held, ready, committed: None, skip, batch_rows, release }
    }

    /// The next event of a committed transaction and, with its last, the position after it.
    pub fn pop(&mut self) -> Option<(Event, Option<At>)> {
        while let Some(event) = self.ready.pop_front() {
            let at = if self.ready.is_empty() { self.committed.take() } else { None };
            // Returned before a restart.
            if self.skip > 0 && at.is_none() {
                self.skip -= 1;
                continue;
            }
            self.skip = 0;
            return Some((event, at));
        }
        None
    }

    /// Whether the open transaction holds no row.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// A row of `tables[t]` in the open transaction.
    pub fn push<T: CdcTable>(
        &mut self,
        tables: &[T],
        t: usize,
        kind: RowKind,
        row: Vec<Option<String>>,
    ) -> anyhow::Result<()> {
        if self.open.last().is_some_and(|(last, ..)| *last != t) || self.open.len() >= self.batch_rows {
            self.flush(tables)?;
        }
        self.open.push((t, kind, row));
        Ok(())
    }

    /// A change of a table's schema, after the rows before it.
    pub fn schema_change<T: CdcTable>(&mut self, tables: &[T], change: SchemaChange) -> anyhow::Result<()> {
        self.flush(tables)?;
        self.out().push_back(Event::SchemaChange(change));
        Ok(())
    }

    /// Where the open transaction's events go.
    fn out(&mut self) -> &mut VecDeque<Event> {
        match self.release {
            Release::AsTheyFill => &mut self.ready,
            Release::AtCommit => &mut self.held,
        }
    }

    /// The transaction ends at `at`: its events are ready to hand out (a batch of no rows of
    /// `tables[0]` when nothing of it is followed, so the position still moves on).
    pub fn commit<T: CdcTable>(&mut self, tables: &[T], at: At) -> anyhow::Result<()> {
        self.flush(tables)?;
        self.ready.append(&mut self.held);
        if self.ready.is_empty() {
            self.ready.push_back(tables[0].nothing());
        }
        self.committed = Some(at);
        Ok(())
    }

    /// The open rows become a batch.
    pub fn flush<T: CdcTable>(&mut self, tables: &[T]) -> anyhow::Result<()> {
        let Some(&(t, ..)) = self.open.first() else { return Ok(()) };
        let table = &tables[t];
        let mut builder = BatchBuilder::new(table.schema().clone()).map_err(|e| anyhow::anyhow!(e.message))?;
        for (_, kind, row) in self.open.drain(..) {
            let values: Vec<Value<'_>> = row.iter().map(|v| v.as_deref().map_or(Value::Null, Value::Str)).collect();
            builder.push(kind, &values).map_err(|e| anyhow::anyhow!("`{}`: {}", table.id(), e.message))?;
        }
        let batch = builder.finish().map_err(|e| anyhow::anyhow!(e.message))?;
        let event = Event::data(table.id(), batch);
        self.out().push_back(event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::SchemaRef;
    use sluice_guest::batch::RowKind;
    use sluice_guest::types::{ColumnDef, DorisType, arrow_schema};

    use super::{Release, Transactions};
    use crate::runtime::{Event, TableId};
    use crate::sources::cdc::CdcTable;

    #[derive(Clone)]
    struct T(TableId, SchemaRef);

    impl CdcTable for T {
        fn id(&self) -> &TableId {
            &self.0
        }
        fn name(&self) -> &str {
            self.0.as_str()
        }
        fn schema(&self) -> &SchemaRef {
            &self.1
        }
        fn primary_key(&self) -> &[String] {
            &[]
        }
        fn integer_key(&self) -> Option<&str> {
            None
        }
        fn column(&self, _name: &str) -> Option<usize> {
            Some(0)
        }
    }

    fn tables() -> Vec<T> {
        let schema = arrow_schema(&[ColumnDef::new("v", DorisType::Int, true)]);
        vec![T(TableId::new("db.a"), schema.clone()), T(TableId::new("db.b"), Arc::clone(&schema))]
    }

    /// (table, rows) of each event handed out, and the positions that came with them.
    fn drain(tx: &mut Transactions<u64>) -> Vec<(String, usize, Option<u64>)> {
        std::iter::from_fn(|| tx.pop())
            .map(|(e, at)| match e {
                Event::Data { table, batch } => (table.as_str().to_string(), batch.num_rows(), at),
                Event::SchemaChange(c) => (format!("schema {}", c.table.as_str()), 0, at),
            })
            .collect()
    }

    fn row(v: i32) -> Vec<Option<String>> {
        vec![Some(v.to_string())]
    }

    fn events(want: &[(&str, usize, Option<u64>)]) -> Vec<(String, usize, Option<u64>)> {
        want.iter().map(|&(t, n, at)| (t.to_string(), n, at)).collect()
    }

    #[test]
    fn a_transaction_is_one_batch_per_run_of_a_table_and_its_last_event_carries_the_position() {
        let t = tables();
        let rows = [(0, 1), (0, 2), (0, 3), (1, 4), (0, 5)];
        // At commit: nothing before it, then every batch.
        let mut tx = Transactions::new(0, 2, Release::AtCommit);
        for (table, v) in rows {
            tx.push(&t, table, RowKind::Insert, row(v)).unwrap();
        }
        assert!(tx.pop().is_none(), "nothing is handed out before the commit");
        tx.commit(&t, 7).unwrap();
        let whole = [("db.a", 2, None), ("db.a", 1, None), ("db.b", 1, None), ("db.a", 1, Some(7))];
        assert_eq!(drain(&mut tx), events(&whole));
        // As they fill: the same batches, the full ones before the commit.
        let mut tx = Transactions::new(0, 2, Release::AsTheyFill);
        for (table, v) in rows {
            tx.push(&t, table, RowKind::Insert, row(v)).unwrap();
        }
        assert_eq!(drain(&mut tx), events(&whole[..3]));
        tx.commit(&t, 7).unwrap();
        assert_eq!(drain(&mut tx), events(&whole[3..]));
    }

    #[test]
    fn an_empty_transaction_moves_the_position_with_a_batch_of_no_rows() {
        let t = tables();
        let mut tx = Transactions::new(0, usize::MAX, Release::AtCommit);
        tx.commit(&t, 9).unwrap();
        assert_eq!(drain(&mut tx), [("db.a".to_string(), 0, Some(9))]);
    }

    #[test]
    fn a_restart_inside_a_transaction_leaves_out_what_was_returned_but_keeps_its_end() {
        let t = tables();
        // Two of the first transaction's three events were returned before the restart.
        let mut tx = Transactions::new(2, 1, Release::AsTheyFill);
        for v in 1..=3 {
            tx.push(&t, 0, RowKind::Insert, row(v)).unwrap();
        }
        tx.commit(&t, 5).unwrap();
        assert_eq!(drain(&mut tx), [("db.a".to_string(), 1, Some(5))]);
        // The next transaction is whole.
        tx.push(&t, 1, RowKind::Delete, row(1)).unwrap();
        tx.commit(&t, 6).unwrap();
        assert_eq!(drain(&mut tx), [("db.b".to_string(), 1, Some(6))]);
    }
}
