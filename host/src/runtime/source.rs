//! What a source is to the runtime (Flink's FLIP-27 split, in one process).
//!
//! A [`Source`] is built once from its pipeline entry. Each run asks it for a
//! [`SplitEnumerator`], on the coordinator, which lists the source's splits (tablet groups,
//! changelog windows, a table's snapshot chunks, one binlog stream, …) and hands each worker a
//! [`SourceReader`] for its share. A reader's position is its own business: the runtime stores
//! it in the checkpoint as opaque JSON and gives it back on restore, and tells the enumerator
//! when a checkpoint is durable and committed, so that it can publish offsets or open gates.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::event::Event;
use super::transform::Transform;

/// A configured source.
#[async_trait]
pub trait Source: Send + Sync {
    /// The schema of its batches when it is known before reading (single-table sources);
    /// `None` when each table's schema arrives as a schema change.
    fn schema(&self) -> Option<SchemaRef>;

    /// The enumerator of a run of `restored.len()` workers; `restored[w]` is worker `w`'s position
    /// in the last checkpoint.
    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>>;

    /// Transforms the source's options imply, run before the pipeline's own (e.g. `dedup`).
    fn implied_transforms(&self) -> Vec<(String, Arc<dyn Transform>)> {
        Vec::new()
    }

    /// What it reads, for `sluice check`.
    fn describe(&self) -> String;

    /// Its tables, read again by key range for `sluice verify` (none: it cannot).
    fn mirror(&self) -> Option<Arc<dyn super::mirror::MirrorSource>> {
        None
    }
}

/// The coordinator's side of a source in one run.
#[async_trait]
pub trait SplitEnumerator: Send {
    /// The reader of worker `worker`, resuming at `position` (its position in the last
    /// checkpoint, if any).
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>>;

    /// Rows the readers will produce in all, when known (for a progress bar).
    fn total_rows(&self) -> Option<u64> {
        None
    }

    /// Checkpoint `id` is durable and every sink has committed it; `positions` are the readers'
    /// positions in it. Publishing offsets, confirming a replication slot or opening the next
    /// phase belong here, never before.
    async fn on_checkpoint_complete(&mut self, _id: u64, _positions: &[serde_json::Value]) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A worker's side of a source.
#[async_trait]
pub trait SourceReader: Send {
    /// The next event, or `None` once this reader has nothing more to read (bounded sources).
    async fn next(&mut self) -> anyhow::Result<Option<Event>>;

    /// Where the reader stands after the last event it returned.
    fn position(&self) -> serde_json::Value;

    /// Checkpoint `id` is durable and committed. Called between events, so it may come a little
    /// after the checkpoint while a slow read is pending.
    async fn on_checkpoint_complete(&mut self, _id: u64) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A reader's typed position, kept as JSON in the checkpoint.
pub trait Position: Serialize + DeserializeOwned + Default {
    /// The position stored in a checkpoint, or the start when there is none.
    fn restore(value: Option<&serde_json::Value>, source: &str) -> anyhow::Result<Self> {
        match value {
            None => Ok(Self::default()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                anyhow::anyhow!(
                    "the checkpoint's position of source `{source}` ({v}) is not one it wrote ({e}); was the source changed? start over with a new `pipeline.state_dir`"
                )
            }),
        }
    }

    /// As stored in a checkpoint.
    fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
