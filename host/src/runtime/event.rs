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
    /// What changed, as the statement said it. Empty: this is the table's schema as the source
    /// found it (its first announcement in a run), which a sink creates or checks its table
    /// against.
    pub alter: Vec<Alter>,
    /// An announcement of the table as a restored position knows it: the target may be ahead of
    /// it (changes applied after that position, before the checkpoint that would have recorded
    /// them completed), and the source replays those changes.
    pub resumed: bool,
}

impl SchemaChange {
    /// The schema of `table` as the source found it.
    pub fn announce(table: &TableId, schema: SchemaRef, primary_key: Vec<String>) -> SchemaChange {
        SchemaChange { table: table.clone(), schema, primary_key, ddl: None, alter: Vec::new(), resumed: false }
    }

    /// This announcement, of a run restored from a checkpoint.
    pub fn resumed(self) -> SchemaChange {
        SchemaChange { resumed: true, ..self }
    }

    /// Whether this is a change of a table that existed before it (not an announcement).
    pub fn is_change(&self) -> bool {
        !self.alter.is_empty()
    }
}

/// One step of a schema change, by column name; the column's type (after the change) is in the
/// change's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alter {
    /// A new column, with its default (unquoted text) and comment when the statement gave them.
    AddColumn {
        name: String,
        default: Option<String>,
        comment: Option<String>,
    },
    DropColumn {
        name: String,
    },
    RenameColumn {
        from: String,
        to: String,
    },
    /// The column's type changed; `from` is its type before (as the sink would write it).
    ModifyColumn {
        name: String,
        from: String,
    },
    /// Every row of the table was removed (`TRUNCATE TABLE`).
    Truncate,
    /// The table was created by a statement in the stream (not found at the start).
    CreateTable,
    /// A statement about the table the source could not follow (the reason).
    Unsupported {
        reason: String,
    },
}

impl fmt::Display for Alter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Alter::AddColumn { name, .. } => write!(f, "add column `{name}`"),
            Alter::DropColumn { name } => write!(f, "drop column `{name}`"),
            Alter::RenameColumn { from, to } => write!(f, "rename column `{from}` to `{to}`"),
            Alter::ModifyColumn { name, from } => write!(f, "change the type of `{name}` (was {from})"),
            Alter::Truncate => f.write_str("truncate"),
            Alter::CreateTable => f.write_str("create table"),
            Alter::Unsupported { reason } => write!(f, "unsupported: {reason}"),
        }
    }
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
