//! Shared fixtures: the plugins built once per test process, a runtime with a shared cache.

use std::path::PathBuf;
use std::sync::OnceLock;

use sluice::wasm::{ComponentCache, Plugin, PluginLimits, PluginRuntime};
use sluice_guest::batch::{Batch, BatchBuilder, RowKind, Value};
use sluice_guest::types::{arrow_schema, parse_columns};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

pub fn plugin_dir(name: &str) -> PathBuf {
    repo_root().join("plugins").join(name)
}

/// The `.wasm` of a plugin, building the whole plugins workspace once per test process.
pub fn plugin_wasm(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(repo_root().join("plugins/Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the plugins failed");
    });
    repo_root().join("plugins/target/wasm32-wasip2/release").join(format!("{}.wasm", name.replace('-', "_")))
}

/// A runtime whose compile cache is shared by every test (and every run) of this target dir.
pub fn runtime() -> &'static PluginRuntime {
    static RUNTIME: OnceLock<PluginRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
        PluginRuntime::new(ComponentCache::new(cache)).expect("runtime starts")
    })
}

pub fn load(name: &str, limits: PluginLimits) -> Plugin {
    runtime().load(&plugin_wasm(name), limits).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// A batch of inserts of `columns` (Doris syntax) with the given rows.
pub fn batch(columns: &str, rows: &[Vec<Value<'_>>]) -> Batch {
    let schema = arrow_schema(&parse_columns(columns).unwrap());
    let mut b = BatchBuilder::new(schema).unwrap();
    for row in rows {
        b.push(RowKind::Insert, row).unwrap();
    }
    b.finish().unwrap()
}

/// Every row of the batches as `kind v1 v2 …` lines.
pub fn lines(batches: &[Batch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            b.rows().map(|r| {
                let values: Vec<String> = r.values().iter().map(|v| v.to_string()).collect();
                format!("{} {}", r.kind().short(), values.join(" "))
            })
        })
        .collect()
}
