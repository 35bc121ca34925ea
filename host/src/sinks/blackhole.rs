//! `type = "blackhole"`: rows are counted and dropped, like Flink's `blackhole` (for measuring
//! sources and transforms).

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;

use crate::Batch;
use crate::pipeline::{BuildContext, SinkConfig};
use crate::runtime::{Committer, Sink, SinkWriter, TableId, WriterContext};

/// The options: only a name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlackholeSink {
    pub name: Option<String>,
}

#[async_trait]
impl SinkConfig for BlackholeSink {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, _file: &crate::pipeline::PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach::default())
    }

    async fn build(&self, _name: &str, _ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Sink>> {
        Ok(Arc::new(Blackhole))
    }
}

struct Blackhole;

#[async_trait]
impl Sink for Blackhole {
    fn claims(&self) -> Option<&str> {
        None
    }

    async fn writer(&self, _ctx: WriterContext) -> anyhow::Result<Box<dyn SinkWriter>> {
        Ok(Box::new(Blackhole))
    }

    fn committer(&self) -> &dyn Committer {
        self
    }

    async fn check(&self, _schema: Option<&arrow::datatypes::SchemaRef>) -> anyhow::Result<String> {
        Ok("blackhole (rows are dropped)".into())
    }
}

#[async_trait]
impl SinkWriter for Blackhole {
    async fn write(&mut self, _table: &TableId, _batch: &Batch) -> anyhow::Result<()> {
        Ok(())
    }

    async fn prepare_commit(&mut self, _checkpoint: u64) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::Value::Null)
    }
}

#[async_trait]
impl Committer for Blackhole {
    async fn commit(&self, _id: u64, _committables: &[serde_json::Value]) -> anyhow::Result<u64> {
        Ok(0)
    }

    async fn recover(&self, _committed: &[serde_json::Value]) -> anyhow::Result<()> {
        Ok(())
    }
}
