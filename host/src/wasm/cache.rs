//! On-disk cache of compiled components, keyed by the component's content hash and the engine's
//! compatibility hash, so a second start deserializes in milliseconds instead of compiling.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a loaded component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Deserialized from the cache.
    Hit,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// A directory of precompiled components (`<sha256>-<engine hash>.cwasm`).
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$SLUICE_CACHE_DIR`, else `$XDG_CACHE_HOME/sluice/components`, else
    /// `~/.cache/sluice/components`, else a directory under the system temp dir.
    pub fn default_location() -> Self {
        let dir = std::env::var_os("SLUICE_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("sluice/components")))
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/sluice/components")))
            .unwrap_or_else(|| std::env::temp_dir().join("sluice-components"));
        Self::new(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest = Sha256::digest(wasm);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}-{:016x}.cwasm", hasher.finish()))
    }

    /// Load `wasm` as a component: from the cache when present and valid, else compile it and
    /// store the result. A cache that cannot be written only costs the next start a compile.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.entry(engine, wasm);
        if path.is_file() {
            // SAFETY: the file was written by `precompile_component` of an engine with the same
            // compatibility hash (part of the file name), under a cache directory Sluice owns.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compiled plugin in the cache")
                }
            }
        }
        let compiled = engine.precompile_component(wasm)?;
        if let Err(e) = write_atomically(&path, &compiled) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the plugin compile cache");
        }
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((component, CacheOutcome::Compiled))
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
