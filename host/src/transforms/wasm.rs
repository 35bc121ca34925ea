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
use crate::runtime::dead_letter::RowRejected;
use crate::runtime::{TableId, Transform, TransformInstance};
use crate::wasm::{CpuBudget, Plugin, PluginError, PluginKind, PluginLimits};

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

    fn reach(&self, _file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach { plugins: vec![self.plugin.clone()], ..Default::default() })
    }

    fn plugin_limits(&self) -> Option<&crate::wasm::PluginLimits> {
        Some(&self.limits)
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
        let (path, limits, gate, budget) = match &ctx.confinement {
            None => (ctx.base_dir.join(&self.plugin), self.limits.clone(), None, None),
            Some(c) => (
                confined_plugin(&self.plugin, &c.plugin_dirs)?,
                capped(&self.limits, &c.plugin_limits),
                c.plugin_calls.clone(),
                c.plugin_budget.clone(),
            ),
        };
        let plugin = runtime.load_with_budget(&path, limits, budget.clone())?;
        let gate = Gate { calls: gate, budget };
        let config = plugin_config(&self.config);
        match (plugin.kind(), &self.schema) {
            (PluginKind::Decoder, Some(schema)) => {
                let columns = sluice_guest::types::parse_columns(schema).map_err(|e| anyhow::anyhow!(e.message))?;
                let declared = sluice_guest::types::arrow_schema(&columns);
                Ok(Arc::new(Decoder { plugin, config, declared, gate }))
            }
            (PluginKind::Decoder, None) => anyhow::bail!(
                "transform.schema: plugin `{}` is a decoder: give the columns it decodes messages into, `schema = \"id BIGINT, name VARCHAR(64)\"`",
                plugin.name()
            ),
            (_, Some(_)) => anyhow::bail!(
                "transform.schema: plugin `{}` is a transform, which takes the columns it is given; `schema` is for decoder plugins",
                plugin.name()
            ),
            (_, None) => Ok(Arc::new(Wasm { plugin, config, gate })),
        }
    }
}

/// A tenant's plugin: a prebuilt `.wasm` component named by its file name, found in one of
/// `dirs` (never a path of the server, never a crate to build).
fn confined_plugin(plugin: &std::path::Path, dirs: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let name = plugin.to_string_lossy();
    let bare = plugin.components().count() == 1 && !name.starts_with('.');
    if !bare || !name.ends_with(".wasm") {
        anyhow::bail!(
            "transform.plugin: {name:?}: name a prebuilt `.wasm` component by its file name (upload it with `PUT /api/v1/plugins/<name>.wasm`); paths and plugin crates are not accepted by `sluice serve`"
        );
    }
    dirs.iter().map(|d| d.join(plugin)).find(|p| p.is_file()).ok_or_else(|| {
        anyhow::anyhow!("transform.plugin: there is no plugin `{name}`; upload it with `PUT /api/v1/plugins/{name}`")
    })
}

/// `asked`, held to a tenant's `cap`: the smaller of each.
fn capped(asked: &PluginLimits, cap: &PluginLimits) -> PluginLimits {
    PluginLimits {
        memory: asked.memory.min(cap.memory),
        timeout: asked.timeout.min(cap.timeout),
        fuel: match (asked.fuel, cap.fuel) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        },
    }
}

/// What a plugin call waits for in `sluice serve`: the tenant's CPU budget out of debt, then a
/// turn on its share of the plugin threads.
#[derive(Clone, Default)]
struct Gate {
    calls: Option<Arc<tokio::sync::Semaphore>>,
    budget: Option<Arc<CpuBudget>>,
}

impl Gate {
    async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if let Some(b) = &self.budget {
            b.wait().await;
        }
        match &self.calls {
            Some(g) => g.acquire().await.ok(),
            None => None,
        }
    }
}

/// A loaded plugin and the settings for its `init`.
pub struct Wasm {
    plugin: Plugin,
    config: Vec<(String, String)>,
    gate: Gate,
}

impl Transform for Wasm {
    fn instance(
        &self,
        _worker: usize,
        _table: &TableId,
        input: &SchemaRef,
        _state: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn TransformInstance>> {
        Ok(Box::new(WasmInstance(self.plugin.transform(&self.config, input)?, self.gate.clone())))
    }

    fn describe(&self) -> String {
        self.plugin.name().to_string()
    }
}

/// A worker's instance of a plugin; it runs on the worker's thread.
struct WasmInstance(crate::wasm::PluginTransform, Gate);

#[async_trait]
impl TransformInstance for WasmInstance {
    fn output_schema(&self) -> &SchemaRef {
        self.0.output_schema()
    }

    async fn process(&mut self, batch: Batch) -> anyhow::Result<Vec<Batch>> {
        let _turn = self.1.turn().await;
        tokio::task::block_in_place(|| self.0.process(&batch)).map_err(PluginError::into_anyhow)
    }
}

/// A decoder plugin over raw messages: batches whose `value` column holds one message per row.
pub struct Decoder {
    plugin: Plugin,
    config: Vec<(String, String)>,
    declared: SchemaRef,
    gate: Gate,
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
        Ok(Box::new(DecoderInstance { instance, value, input: input.clone(), gate: self.gate.clone() }))
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
    gate: Gate,
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
        let turn = self.gate.turn().await;
        let decoded = tokio::task::block_in_place(|| self.instance.decode(&messages));
        drop(turn);
        decoded.map_err(|e| {
            // A rejected message: say where it came from.
            let origin = match &e {
                PluginError::Rejected { row: Some(r), .. } => self.origin(&batch, *r as usize),
                _ => None,
            };
            match (e.into_anyhow(), origin) {
                (e, None) => e,
                (e, Some(origin)) => match e.downcast::<RowRejected>() {
                    Ok(mut r) => {
                        r.text = format!("{} (the message at {origin})", r.text);
                        r.into()
                    }
                    Err(e) => anyhow::anyhow!("{e} (the message at {origin})"),
                },
            }
        })
    }
}
