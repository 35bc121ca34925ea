//! The event model: what a source reader hands the runtime, and what flows on to the sinks.
//!
//! A stream carries data and schema changes of any number of tables, in order: a
//! [`SchemaChange`] for a table applies to every batch of that table after it. Barriers are the
//! runtime's own and never reach a component as an event.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::Batch;

/// A table as its source names it (`db.table` for databases; the source's name for generated
/// data). Transforms are instantiated per table, and a sink maps it to the table it writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(Arc<str>);

impl TableId {
    pub fn new(name: impl Into<Arc<str>>) -> TableId {
        TableId(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A table's schema from this point of the stream on: its first schema, or a change to it.
#[derive(Debug, Clone)]
pub struct SchemaChange {
    pub table: TableId,
    /// The columns of the batches of `table` that follow.
    pub schema: SchemaRef,
    /// The table's key columns, for a sink that creates the table.
    pub primary_key: Vec<String>,
    /// The statement the source saw, when there was one (for logs and sinks that replay DDL).
    pub ddl: Option<String>,
}

/// What a source reader produces.
#[derive(Debug)]
pub enum Event {
    /// Rows of one table. An empty batch means "nothing new, but the position moved".
    Data { table: TableId, batch: Batch },
    /// The schema of `table` changes before the next batch of it.
    SchemaChange(SchemaChange),
}

impl Event {
    /// Rows of `table`.
    pub fn data(table: &TableId, batch: Batch) -> Event {
        Event::Data { table: table.clone(), batch }
    }
}
