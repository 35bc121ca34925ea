//! What a transform is to the runtime. A [`Transform`] is built once; each worker makes its own
//! [`TransformInstance`] per table and schema, lazily, when the first batch of that table (or a
//! change of its schema) arrives.

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::future::BoxFuture;

use super::event::TableId;
use crate::Batch;

/// A configured transform.
pub trait Transform: Send + Sync {
    /// An instance for worker `worker`'s batches of `table` with columns `input`; `state` is the
    /// instance's state in the last checkpoint, if it keeps one. May block (a plugin is
    /// instantiated).
    fn instance(
        &self,
        worker: usize,
        table: &TableId,
        input: &SchemaRef,
        state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>>;

    /// What it is, for `sluice check`.
    fn describe(&self) -> String;
}

/// One worker's instance of a transform for one table.
#[async_trait]
pub trait TransformInstance: Send {
    fn output_schema(&self) -> &SchemaRef;

    /// Transform one batch.
    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>>;

    /// Its state, taken at a checkpoint barrier, for instances that keep one.
    fn snapshot(&self) -> Option<serde_json::Value> {
        None
    }

    /// An instance whose work on a batch may overlap the next batches' (a lookup waiting on its
    /// queries) offers it here; the worker keeps up to `max_in_flight` of them going and passes
    /// their output on in input order.
    fn concurrent(&self) -> Option<&dyn ConcurrentTransform> {
        None
    }
}

/// The overlapping form of a transform (see [`TransformInstance::concurrent`]).
pub trait ConcurrentTransform: Send + Sync {
    /// The work on `batch`, owning everything it needs.
    fn start(&self, batch: Batch) -> BoxFuture<'static, anyhow::Result<Vec<Batch>>>;
    /// Batches that may be in flight at once.
    fn max_in_flight(&self) -> usize;
}
