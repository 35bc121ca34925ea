//! What a component is to a pipeline file: the traits its options implement (checked, asked what
//! they reach, built), and a `type`'s entry in the registry ([`super::registry`]).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use super::build::BuildContext;
use super::model::PipelineFile;
use super::options::{EntryResult, read};
use crate::runtime::{Sink, Source, Transform};

/// A component type: its name in `type = "…"` and how its options are read.
pub struct Kind<T: ?Sized> {
    pub name: &'static str,
    pub read: fn(toml::Table) -> EntryResult<Arc<T>>,
}

/// The checks a component's options need beyond what serde says: `Err((key, message))`, with
/// the key as written in the file (`source.table`).
pub type Checked = Result<(), (String, String)>;

/// What an entry reaches beyond the rows it is given: the connections it opens, the Doris
/// tables it reads and writes, the files of the host it opens. `sluice serve` checks it against
/// the tenant's grants before a pipeline runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Connection names, as resolved (a Doris entry naming none reaches the default one).
    pub connections: Vec<String>,
    /// Doris tables read, `db.table`.
    pub reads: Vec<String>,
    /// Doris tables written, `db.table`, or `db.*` for a sink that names its tables as the rows
    /// come (each one is then checked as it is written).
    pub writes: Vec<String>,
    /// Files of the host opened (a `file` source's path).
    pub files: Vec<std::path::PathBuf>,
    /// Plugins loaded, as named in the file.
    pub plugins: Vec<std::path::PathBuf>,
}

/// What an entry answers when it cannot say what it reaches: it is not offered to tenants.
pub fn unknown_reach() -> Result<Reach, String> {
    Err("this type is not available to tenants of `sluice serve`".into())
}

/// The Doris connection an entry names (`connection`, else the default one) as a [`Reach`].
pub fn doris_reach(file: &PipelineFile, connection: Option<&str>) -> Result<Reach, String> {
    let (name, _) = file.doris(connection)?;
    Ok(Reach { connections: vec![name.to_string()], ..Reach::default() })
}

/// A `[[source]]` entry.
#[async_trait]
pub trait SourceConfig: Debug + Send + Sync + AsAny {
    /// `name = "…"`, when given.
    fn name(&self) -> Option<&str>;
    fn validate(&self, _file: &PipelineFile) -> Checked {
        Ok(())
    }
    /// What it reaches (see [`Reach`]); the error says why it cannot be offered to tenants.
    fn reach(&self, _file: &PipelineFile) -> Result<Reach, String> {
        unknown_reach()
    }
    /// `name` is the source's name in the pipeline (and the key of its state).
    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>>;
}

/// A `[[transform]]` entry.
#[async_trait]
pub trait TransformConfig: Debug + Send + Sync + AsAny {
    fn name(&self) -> Option<&str>;
    fn validate(&self, _file: &PipelineFile) -> Checked {
        Ok(())
    }
    fn reach(&self, _file: &PipelineFile) -> Result<Reach, String> {
        unknown_reach()
    }
    /// The sandbox limits a plugin asks for (none: the transform runs no plugin).
    fn plugin_limits(&self) -> Option<&crate::wasm::PluginLimits> {
        None
    }
    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Transform>>;
}

/// Where a sink used as the `[dead_letter]` keeps the letters, for `sluice dlq` to read them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetterStore<'a> {
    /// A file of JSON lines, relative to the pipeline file.
    File(&'a std::path::Path),
    /// A Doris table (`db.table`, when named) through a connection (none: the default one).
    Doris { table: Option<&'a str>, connection: Option<&'a str> },
}

/// A `[[sink]]` entry.
#[async_trait]
pub trait SinkConfig: Debug + Send + Sync + AsAny {
    fn name(&self) -> Option<&str>;
    fn validate(&self, _file: &PipelineFile) -> Checked {
        Ok(())
    }
    fn reach(&self, _file: &PipelineFile) -> Result<Reach, String> {
        unknown_reach()
    }
    /// Where it keeps what it writes when it is the `[dead_letter]` (none: it cannot be read back).
    fn letter_store(&self) -> Option<LetterStore<'_>> {
        None
    }
    /// Whether it writes the rows before updates (`RowKind::UpdateBefore`): when no sink does and
    /// no transform runs, a source may leave them out.
    fn writes_update_before(&self) -> bool {
        true
    }
    /// The same sink with labels of its own for replay `id` (none: its labels need no change).
    fn relabeled(&self, _id: &str) -> Option<Arc<dyn SinkConfig>> {
        None
    }
    /// `name` is the sink's name in the pipeline (and the key of its state).
    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Sink>>;
}

pub(super) const fn source<T: SourceConfig + DeserializeOwned + 'static>(name: &'static str) -> Kind<dyn SourceConfig> {
    fn read_as<T: SourceConfig + DeserializeOwned + 'static>(t: toml::Table) -> EntryResult<Arc<dyn SourceConfig>> {
        Ok(Arc::new(read::<T>(t)?))
    }
    Kind { name, read: read_as::<T> }
}

pub(super) const fn transform<T: TransformConfig + DeserializeOwned + 'static>(
    name: &'static str,
) -> Kind<dyn TransformConfig> {
    fn read_as<T: TransformConfig + DeserializeOwned + 'static>(
        t: toml::Table,
    ) -> EntryResult<Arc<dyn TransformConfig>> {
        Ok(Arc::new(read::<T>(t)?))
    }
    Kind { name, read: read_as::<T> }
}

pub(super) const fn sink<T: SinkConfig + DeserializeOwned + 'static>(name: &'static str) -> Kind<dyn SinkConfig> {
    fn read_as<T: SinkConfig + DeserializeOwned + 'static>(t: toml::Table) -> EntryResult<Arc<dyn SinkConfig>> {
        Ok(Arc::new(read::<T>(t)?))
    }
    Kind { name, read: read_as::<T> }
}

/// The `name = "…"` of any entry.
pub trait GivenName {
    fn given_name(&self) -> Option<&str>;
}

impl GivenName for dyn SourceConfig {
    fn given_name(&self) -> Option<&str> {
        self.name()
    }
}

impl GivenName for dyn TransformConfig {
    fn given_name(&self) -> Option<&str> {
        self.name()
    }
}

impl GivenName for dyn SinkConfig {
    fn given_name(&self) -> Option<&str> {
        self.name()
    }
}

/// A component's options as their own type (for tests and tools that know it).
pub trait AsAny {
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
