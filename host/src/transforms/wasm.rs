//! `type = "wasm"`: a WebAssembly plugin (see [`crate::wasm`]), one instance per worker and table.
//! A transform plugin takes the batches as they come; a decoder plugin takes the `value` column
//! of raw messages (a `kafka` source with `format = "raw"`) and decodes them into `schema`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::Deserialize;

use crate::Batch;
use crate::pipeline::{BuildContext, Checked, PipelineFile, TransformConfig};
use crate::runtime::{TableId, Transform, TransformInstance};
use crate::wasm::{Plugin, PluginKind, PluginLimits};

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
    /// A decoder plugin: the columns it decodes messages into, in Doris syntax.
    pub schema: Option<String>,
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
        if let Some(schema) = &self.schema {
            sluice_guest::types::parse_columns(schema).map_err(|e| ("transform.schema".to_string(), e.message))?;
        }
        Ok(())
    }

    async fn build(&self, _name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Transform>> {
        let runtime = ctx.plugins()?;
        let path = ctx.base_dir.join(&self.plugin);
        let plugin = runtime.load(&path, self.limits.clone())?;
        let config = plugin_config(&self.config);
        match (plugin.kind(), &self.schema) {
            (PluginKind::Decoder, Some(schema)) => {
                let columns = sluice_guest::types::parse_columns(schema).map_err(|e| anyhow::anyhow!(e.message))?;
                let declared = sluice_guest::types::arrow_schema(&columns);
                Ok(Arc::new(Decoder { plugin, config, declared }))
            }
            (PluginKind::Decoder, None) => anyhow::bail!(
                "transform.schema: plugin `{}` is a decoder: give the columns it decodes messages into, `schema = \"id BIGINT, name VARCHAR(64)\"`",
                plugin.name()
            ),
            (_, Some(_)) => anyhow::bail!(
                "transform.schema: plugin `{}` is a transform, which takes the columns it is given; `schema` is for decoder plugins",
                plugin.name()
            ),
            (_, None) => Ok(Arc::new(Wasm { plugin, config })),
        }
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

/// A decoder plugin over raw messages: batches whose `value` column holds one message per row.
pub struct Decoder {
    plugin: Plugin,
    config: Vec<(String, String)>,
    declared: SchemaRef,
}

impl Transform for Decoder {
    fn instance(
        &self,
        _worker: usize,
        table: &TableId,
        input: &SchemaRef,
        _state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        let Ok(value) = input.index_of("value") else {
            anyhow::bail!(
                "decoder plugin `{}` decodes the `value` column of raw messages, which `{table}` has not ({}); read it with a source that gives raw messages (kafka with format = \"raw\")",
                self.plugin.name(),
                input.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            );
        };
        let instance = self.plugin.decoder(&self.config, &self.declared)?;
        Ok(Box::new(DecoderInstance { instance, value, input: input.clone() }))
    }

    fn describe(&self) -> String {
        format!("{} (decoder)", self.plugin.name())
    }
}

struct DecoderInstance {
    instance: crate::wasm::DecoderInstance,
    /// The index of the `value` column.
    value: usize,
    input: SchemaRef,
}

impl DecoderInstance {
    /// Where message `row` of `batch` came from, when the batch says (`topic`, `partition`,
    /// `offset` columns).
    fn origin(&self, batch: &Batch, row: usize) -> Option<String> {
        let rb = &batch.data;
        let text = |name: &str| -> Option<String> {
            let col = rb.column(self.input.index_of(name).ok()?);
            arrow::util::display::array_value_to_string(col, row).ok()
        };
        Some(format!("topic `{}` partition {} offset {}", text("topic")?, text("partition")?, text("offset")?))
    }
}

#[async_trait]
impl TransformInstance for DecoderInstance {
    fn output_schema(&self) -> &SchemaRef {
        self.instance.output_schema()
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        use arrow::array::{Array, AsArray};
        let values = batch.data.column(self.value);
        let values = values.as_string_opt::<i32>().ok_or_else(|| anyhow::anyhow!("the `value` column is not text"))?;
        let messages: Vec<&[u8]> =
            (0..values.len()).map(|i| if values.is_null(i) { &[][..] } else { values.value(i).as_bytes() }).collect();
        let decoded = tokio::task::block_in_place(|| self.instance.decode(&messages));
        decoded.map_err(|e| {
            let text = e.to_string();
            // `…: row N: …` names the message; say where it came from.
            let row = text.split("row ").nth(1).and_then(|r| r.split(':').next()).and_then(|n| n.parse::<usize>().ok());
            match row.and_then(|r| self.origin(&batch, r)) {
                Some(origin) => anyhow::anyhow!("{text} (the message at {origin})"),
                None => anyhow::anyhow!(text),
            }
        })
    }
}
