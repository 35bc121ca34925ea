//! The plugin runtime: WebAssembly components behind the WIT contract in `wit/sluice.wit`, run
//! with wasmtime in a sandbox that grants logging and metric counters and nothing else.
//!
//! * Components are compiled once and cached on disk ([`ComponentCache`]).
//! * Each pipeline worker gets its own instance, reused across batches.
//! * Every instance has a memory cap, a wall-time limit per call and optional fuel
//!   ([`PluginLimits`]); a plugin that breaks one fails with an error naming the plugin, the
//!   limit and the batch, and no other instance is affected.
//! * Instances may also share a CPU budget per minute ([`CpuBudget`]): calls that overspend it
//!   are paused, not failed, so the instances together cannot use more CPU than it allows.

mod bindings;
mod budget;
pub mod build;
mod cache;
mod error;
mod instance;
mod limits;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

pub use budget::{CpuBudget, PerMinute};
pub use cache::{CacheOutcome, ComponentCache};
pub use error::PluginError;
pub use instance::{DecoderInstance, PluginInfo, PluginTransform};
pub use limits::PluginLimits;

use instance::StoreState;

/// How often the epoch advances; wall-time limits are enforced to this granularity.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// `transform`: batches in, batches out.
    Transform,
    /// `decoder`: raw messages in, batches with row kinds out.
    Decoder,
}

impl PluginKind {
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Transform => "transform",
            PluginKind::Decoder => "decoder",
        }
    }
}

const TRANSFORM_EXPORT: &str = "sluice:plugin/transformer@0.1.0";
const DECODER_EXPORT: &str = "sluice:plugin/event-decoder@0.1.0";

/// Compiles, caches and instantiates plugins. One per process is enough; it is cheap to share.
pub struct PluginRuntime {
    plain: Engine,
    metered: OnceLock<Engine>,
    cache: ComponentCache,
}

impl PluginRuntime {
    /// A runtime whose compiled components are cached in `cache`.
    pub fn new(cache: ComponentCache) -> Result<Self, PluginError> {
        Ok(Self { plain: new_engine(false)?, metered: OnceLock::new(), cache })
    }

    pub fn cache(&self) -> &ComponentCache {
        &self.cache
    }

    fn engine(&self, fuel: bool) -> Result<Engine, PluginError> {
        if !fuel {
            return Ok(self.plain.clone());
        }
        if let Some(e) = self.metered.get() {
            return Ok(e.clone());
        }
        let engine = new_engine(true)?;
        Ok(self.metered.get_or_init(|| engine).clone())
    }

    /// Load the plugin at `path` (a `.wasm` component or a plugin crate directory, built when
    /// needed) with the given limits.
    pub fn load(&self, path: &Path, limits: PluginLimits) -> Result<Plugin, PluginError> {
        self.load_with_budget(path, limits, None)
    }

    /// [`load`](Self::load), with every call of its instances spending from `budget` (shared
    /// with other plugins) when there is one.
    pub fn load_with_budget(
        &self,
        path: &Path,
        limits: PluginLimits,
        budget: Option<Arc<CpuBudget>>,
    ) -> Result<Plugin, PluginError> {
        let file = build::resolve(path)?;
        let wasm = std::fs::read(&file).map_err(|source| PluginError::Io { path: file.clone(), source })?;
        if !wasm.starts_with(b"\0asm") {
            return Err(PluginError::NotAComponent { path: path.to_path_buf(), detail: "no `\\0asm` header".into() });
        }
        if wasm.get(4..8) == Some(&[1, 0, 0, 0]) {
            return Err(PluginError::NotAComponent {
                path: path.to_path_buf(),
                detail: "it is a core module, not a component".into(),
            });
        }
        let engine = self.engine(limits.fuel.is_some())?;
        let (component, cache_outcome) = self
            .cache
            .load(&engine, &wasm)
            .map_err(|e| PluginError::NotAComponent { path: path.to_path_buf(), detail: format!("{e:#}") })?;
        let ty = component.component_type();
        let exports: Vec<String> = ty.exports(&engine).map(|(name, _)| name.to_string()).collect();
        let kind = if exports.iter().any(|e| e == TRANSFORM_EXPORT) {
            PluginKind::Transform
        } else if exports.iter().any(|e| e == DECODER_EXPORT) {
            PluginKind::Decoder
        } else {
            return Err(PluginError::UnknownWorld { path: path.to_path_buf(), exports: exports.join(", ") });
        };
        let imports: Vec<String> = ty.imports(&engine).map(|(name, _)| name.to_string()).collect();
        if let Some(bad) = imports.iter().find(|i| {
            !i.starts_with("wasi:") && !i.starts_with("sluice:plugin/host@") && !i.starts_with("sluice:plugin/types@")
        }) {
            return Err(PluginError::ForbiddenImport { path: path.to_path_buf(), import: bad.clone() });
        }
        let name = file.file_stem().map(|s| s.to_string_lossy().replace('_', "-")).unwrap_or_else(|| "plugin".into());
        let linker = instance::linker(&engine)
            .map_err(|e| PluginError::Instantiate { plugin: name.clone(), detail: format!("{e:#}") })?;
        Ok(Plugin {
            inner: Arc::new(PluginShared {
                name,
                path: path.to_path_buf(),
                file,
                kind,
                engine,
                component,
                linker,
                limits,
                budget,
            }),
            exports,
            imports,
            cache_outcome,
        })
    }
}

fn new_engine(fuel: bool) -> Result<Engine, PluginError> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.consume_fuel(fuel);
    // Sluice calls plugins synchronously; skipping component-model-async bookkeeping makes a
    // call about 3x cheaper.
    config.concurrency_support(false);
    let engine = Engine::new(&config)
        .map_err(|e| PluginError::Compile { plugin: "(engine)".into(), detail: format!("{e:#}") })?;
    // The epoch drives wall-time limits; the ticker stops once the engine is dropped.
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("sluice-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map_err(|e| PluginError::Compile { plugin: "(engine)".into(), detail: e.to_string() })?;
    Ok(engine)
}

pub(crate) struct PluginShared {
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) file: PathBuf,
    pub(crate) kind: PluginKind,
    pub(crate) engine: Engine,
    pub(crate) component: Component,
    pub(crate) linker: Linker<StoreState>,
    pub(crate) limits: PluginLimits,
    pub(crate) budget: Option<Arc<CpuBudget>>,
}

/// A loaded (compiled) plugin; instantiate it once per worker.
#[derive(Clone)]
pub struct Plugin {
    pub(crate) inner: Arc<PluginShared>,
    exports: Vec<String>,
    imports: Vec<String>,
    cache_outcome: CacheOutcome,
}

impl Plugin {
    /// The plugin's name (its file name without extension).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The path it was loaded from, as given.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The component file (the build artifact when a crate directory was given).
    pub fn file(&self) -> &Path {
        &self.inner.file
    }

    pub fn kind(&self) -> PluginKind {
        self.inner.kind
    }

    pub fn exports(&self) -> &[String] {
        &self.exports
    }

    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    pub fn limits(&self) -> &PluginLimits {
        &self.inner.limits
    }

    /// The CPU budget its calls spend from, if any.
    pub fn budget(&self) -> Option<&Arc<CpuBudget>> {
        self.inner.budget.as_ref()
    }

    /// Whether loading used the compile cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache_outcome
    }

    fn expect(&self, expected: PluginKind) -> Result<(), PluginError> {
        if self.kind() == expected {
            Ok(())
        } else {
            Err(PluginError::WrongWorld {
                path: self.path().to_path_buf(),
                expected: expected.world(),
                actual: self.kind().world(),
            })
        }
    }

    /// What the plugin says about itself (runs `describe` in a throwaway instance).
    pub fn describe(&self) -> Result<PluginInfo, PluginError> {
        instance::describe(self)
    }

    /// A new transform instance, initialised with `config` for batches of `input`.
    pub fn transform(
        &self,
        config: &[(String, String)],
        input: &arrow::datatypes::Schema,
    ) -> Result<PluginTransform, PluginError> {
        self.expect(PluginKind::Transform)?;
        PluginTransform::new(self, config, input)
    }

    /// A new decoder instance, initialised with `config` and the schema declared in the pipeline.
    pub fn decoder(
        &self,
        config: &[(String, String)],
        declared: &arrow::datatypes::Schema,
    ) -> Result<DecoderInstance, PluginError> {
        self.expect(PluginKind::Decoder)?;
        DecoderInstance::new(self, config, declared)
    }
}
