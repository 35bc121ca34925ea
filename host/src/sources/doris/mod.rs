//! `type = "doris"`: a Doris table read over Arrow Flight SQL — a snapshot scan
//! ([`snapshot`]), or its changelog followed with `@incr` windows after (or instead of) one
//! ([`changelog`]), with the consumer's progress optionally kept in an offset table
//! ([`offsets`]).

mod changelog;
mod config;
mod mirror;
pub mod offsets;
mod snapshot;

use std::sync::Arc;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;

pub use config::*;

use crate::doris::scan::{FlightReader, quote};
use crate::doris::{DorisConnection, DorisError};
use crate::metrics::SplitProgress;
use crate::pipeline::{BuildContext, Checked, PipelineFile, SourceConfig};
use crate::runtime::{Restartable, Source, SplitEnumerator, TableId, Transform};
use crate::transforms::normalize::Normalize;

/// A Doris source's connection and what its readers share.
#[derive(Clone)]
pub struct DorisTable {
    pub config: DorisSource,
    pub conn: Arc<DorisConnection>,
    /// The FEs' Arrow Flight SQL addresses, in the order to try them.
    pub flight_addrs: Vec<String>,
    /// Arrow Flight SQL over TLS (`enable_tls`).
    pub flight_tls: Option<tonic::transport::ClientTlsConfig>,
    pub table: TableId,
    pub db: String,
    pub name: String,
    /// The columns read (`read.field`, else all).
    pub schema: SchemaRef,
    pub offsets: Option<offsets::OffsetTable>,
    pub progress: Arc<SplitProgress>,
    /// How old the changelog position is (`@incr` modes).
    pub age: Arc<changelog::PositionAge>,
}

impl DorisTable {
    /// A Flight SQL session with the FE.
    pub async fn flight(&self) -> anyhow::Result<FlightReader> {
        let timeout = self.conn.section.request_connect_timeout.0;
        FlightReader::connect_any(&self.flight_addrs, self.conn.client.credentials(), timeout, self.flight_tls.as_ref())
            .await
            .map_err(transient)
    }

    /// `read.field` as a quoted select list (`*` when absent).
    pub fn fields(&self) -> String {
        fields(&self.config)
    }

    /// `` `db`.`table` ``
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote(&self.db), quote(&self.name))
    }
}

/// `read.field` as a quoted select list (`*` when absent).
fn fields(d: &DorisSource) -> String {
    match &d.read.field {
        Some(f) if !f.trim().is_empty() => {
            f.split(',').map(|c| quote(c.trim().trim_matches('`'))).collect::<Vec<_>>().join(", ")
        }
        _ => "*".to_string(),
    }
}

/// A Doris client error as the runtime should see it: one that a restart may mend (Doris
/// unreachable, slow, or a stream that broke) is restartable.
pub fn transient(e: DorisError) -> anyhow::Error {
    if e.is_transient() { Restartable::caused_by(e) } else { e.into() }
}

#[async_trait]
impl SourceConfig for DorisSource {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The table read, and the changelog's offset table (written) when there is one.
    fn reach(&self, file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        let mut reach = crate::pipeline::doris_reach(file, self.connection.as_deref())?;
        reach.reads.push(self.table.clone());
        reach.writes.extend(self.changelog.offset_table.clone());
        Ok(reach)
    }

    fn validate(&self, file: &PipelineFile) -> Checked {
        self.check(file)
    }

    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let conn = ctx.doris(self.connection.as_deref()).await?;
        let age = Arc::new(changelog::PositionAge::new(name));
        ctx.stats.register(age.clone());
        let (db, table) = self.table.split_once('.').context("source.table: expected `db.table`")?;
        let flight_addrs = conn.flight_addrs(self.flight_sql_port).await?;
        let offsets = match (&self.changelog.offset_table, &self.changelog.consumer_id) {
            (Some(table), Some(consumer)) => {
                let url = conn.jdbc_url().context("changelog.offset_table")?;
                let ssl = conn.tls.as_ref().map(|t| t.mysql_config()).transpose()?.flatten();
                Some(offsets::OffsetTable::new(url, &conn.section.username, &conn.password, table, consumer, ssl)?)
            }
            _ => None,
        };
        let mut source = DorisTable {
            config: self.clone(),
            flight_tls: conn.flight_tls()?,
            conn,
            flight_addrs,
            table: TableId::new(self.table.as_str()),
            db: db.to_string(),
            name: table.to_string(),
            schema: Arc::new(arrow::datatypes::Schema::empty()),
            offsets,
            progress: ctx.stats.splits.clone(),
            age,
        };
        let sql = format!("SELECT {} FROM {} LIMIT 0", source.fields(), source.quoted());
        let (schema, _) = source
            .flight()
            .await?
            .execute(&sql)
            .await
            .with_context(|| format!("reading the schema of `{}`", self.table))?;
        source.schema = schema;
        Ok(Arc::new(source))
    }
}

#[async_trait]
impl Source for DorisTable {
    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    async fn enumerator(&self, restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        if self.config.scan.mode == ScanMode::Snapshot {
            Ok(Box::new(snapshot::plan(self, restored.len()).await?))
        } else {
            Ok(Box::new(changelog::ChangelogEnumerator::new(self, restored).await?))
        }
    }

    fn implied_transforms(&self) -> Vec<(String, Arc<dyn Transform>)> {
        if !self.config.dedup {
            return Vec::new();
        }
        let normalize = Normalize { primary_key: self.config.primary_key_columns() };
        vec![("normalize".to_string(), Arc::new(normalize) as Arc<dyn Transform>)]
    }

    fn describe(&self) -> String {
        format!("doris {} ({:?})", self.table, self.config.scan.mode)
    }

    fn mirror(&self) -> Option<Arc<dyn crate::runtime::mirror::MirrorSource>> {
        Some(self.mirror_of())
    }
}
