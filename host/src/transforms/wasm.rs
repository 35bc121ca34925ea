//! `type = "wasm"`: a WebAssembly plugin (see [`crate::wasm`]), one instance per worker and table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::Deserialize;

use crate::Batch;
use crate::pipeline::{BuildContext, Checked, PipelineFile, TransformConfig};
use crate::runtime::{TableId, Transform, TransformInstance};
use crate::wasm::{Plugin, PluginLimits};

/// `type = "wasm"`: the options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmTransform {
    pub name: Option<String>,
    /// A `.wasm` component or a plugin crate directory, relative to the pipeline file.
    pub plugin: PathBuf,
    /// Settings handed to the plugin's `init`, as text.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    /// Memory, time and fuel limits of each instance.
    #[serde(default)]
    pub limits: PluginLimits,
}

/// TOML values as the text a plugin's `init` receives.
pub fn plugin_config(config: &BTreeMap<String, toml::Value>) -> Vec<(String, String)> {
    config
        .iter()
        .map(|(k, v)| match v {
            toml::Value::String(s) => (k.clone(), s.clone()),
            other => (k.clone(), other.to_string()),
        })
        .collect()
}

#[async_trait]
impl TransformConfig for WasmTransform {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn validate(&self, _file: &PipelineFile) -> Checked {
        if self.plugin.as_os_str().is_empty() {
            return Err((
                "transform.plugin".into(),
                "expected the path of a `.wasm` component or a plugin crate".into(),
            ));
        }
        Ok(())
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Transform>> {
        let runtime = ctx.plugins()?;
        let path = ctx.base_dir.join(&self.plugin);
        let plugin = runtime.load(&path, self.limits.clone())?;
        Ok(Arc::new(Wasm { plugin, config: plugin_config(&self.config) }))
    }
}

/// A loaded plugin and the settings for its `init`.
pub struct Wasm {
    plugin: Plugin,
    config: Vec<(String, String)>,
}

impl Transform for Wasm {
    fn instance(
        &self,
        _worker: usize,
        _table: &TableId,
        input: &SchemaRef,
        _state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        Ok(Box::new(WasmInstance(self.plugin.transform(&self.config, input)?)))
    }

    fn describe(&self) -> String {
        self.plugin.name().to_string()
    }
}

/// A worker's instance of a plugin; it runs on the worker's thread.
struct WasmInstance(crate::wasm::TransformInstance);

#[async_trait]
impl TransformInstance for WasmInstance {
    fn output_schema(&self) -> &SchemaRef {
        self.0.output_schema()
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        Ok(tokio::task::block_in_place(|| self.0.process(&batch))?)
    }
}
