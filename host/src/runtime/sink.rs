//! What a sink is to the runtime (Flink's FLIP-143 `SinkWriter` / `Committer`, Arroyo's
//! `handle_checkpoint` / `handle_commit`).
//!
//! Each worker has a [`SinkWriter`] of every sink. At a checkpoint barrier the writer finishes
//! what it has open and returns its *committables* — for Doris, the pre-committed transactions —
//! which the runtime stores in the checkpoint under the sink's name. Once the checkpoint is
//! durable, the sink's [`Committer`] commits them; after a crash, it commits those of the last
//! checkpoint again (commits are idempotent) and rolls back whatever else it left open, from its
//! own journal.

use async_trait::async_trait;

use super::event::{SchemaChange, TableId};
use crate::Batch;

/// Who a writer is within a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterContext {
    pub worker: usize,
    /// The run number (counts every start of the pipeline; never repeats).
    pub run: u64,
    /// The checkpoint the writer's first writes belong to.
    pub checkpoint: u64,
}

/// A configured sink.
#[async_trait]
pub trait Sink: Send + Sync {
    /// The table a transform names (`batch.table`) to send rows to this sink; `None` for a sink
    /// that claims no table. A batch that names no claimed table goes to the first sink.
    fn claims(&self) -> Option<&str>;

    /// A writer for one worker of one run.
    async fn writer(&self, ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>>;

    /// The sink's committer, shared by every run.
    fn committer(&self) -> &dyn Committer;

    /// Restarts from the last checkpoint allowed in a row after failures (the sink's
    /// `max_retries`), if the sink has a say.
    fn max_restarts(&self) -> Option<u32> {
        None
    }

    /// The tables it writes (a local run shows them at the end).
    fn written_tables(&self) -> Vec<String> {
        Vec::new()
    }

    /// What it writes, for `sluice check`: one line, after checking what can be checked.
    async fn check(&self, _schema: Option<&arrow::datatypes::SchemaRef>) -> anyhow::Result<String>;

    /// What it wrote, read back for `sluice verify` (none: it cannot).
    fn mirror(&self) -> Option<std::sync::Arc<dyn super::mirror::MirrorTarget>> {
        None
    }
}

/// One worker's writer of a sink.
#[async_trait]
pub trait SinkWriter: Send {
    /// Write rows of `table` (the source's table; `batch.table`, when set, is where a transform
    /// routed them).
    async fn write(&mut self, table: &TableId, batch: &Batch) -> anyhow::Result<()>;

    /// `change.table` has `change.schema` from here on (created if the sink has not seen it).
    async fn schema_change(&mut self, _change: &SchemaChange) -> anyhow::Result<()> {
        Ok(())
    }

    /// At the barrier of checkpoint `checkpoint`: finish what is open and return what must be
    /// committed once the checkpoint is durable (opaque to the runtime).
    async fn prepare_commit(&mut self, checkpoint: u64) -> anyhow::Result<serde_json::Value>;

    /// Rows the sink could not deliver since this was last asked (rows Doris filtered out of
    /// a load), for the dead-letter target. Asked right after [`SinkWriter::prepare_commit`].
    fn take_dead_letters(&mut self) -> Vec<super::dead_letter::DeadLetter> {
        Vec::new()
    }

    /// Whether the sink wants a checkpoint now (to commit what it holds open), asked after each
    /// write: the worker asks for one and sends it no more rows until one is under way.
    fn wants_checkpoint(&self) -> bool {
        false
    }

    /// Whether [`SinkWriter::tick`] should be called regularly.
    fn wants_ticks(&self) -> bool {
        false
    }

    /// Called about twice a second when asked for: flush what is due.
    async fn tick(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Commits a sink's checkpoints.
#[async_trait]
pub trait Committer: Send + Sync {
    /// Commit the committables of checkpoint `id`, one per worker. Idempotent: committing what
    /// is already committed succeeds. Returns the number of transactions committed.
    async fn commit(&self, id: u64, committables: &[serde_json::Value]) -> anyhow::Result<u64>;

    /// At the start of a run: `committed` are the last checkpoint's committables, committed
    /// already; roll back everything else the sink left open.
    async fn recover(&self, committed: &[serde_json::Value]) -> anyhow::Result<()>;

    /// Checkpoint `id` is committed: forget what it no longer needs to recover.
    async fn on_checkpoint_complete(&self, _id: u64) -> anyhow::Result<()> {
        Ok(())
    }
}
