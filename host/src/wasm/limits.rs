//! Per-instance limits: memory (a `ResourceLimiter`), wall time per call (epoch deadline) and
//! optional fuel.

use std::time::Duration;

use serde::Deserialize;

/// Limits of one plugin instance, from the `limits` table of a plugin in the pipeline file:
///
/// ```toml
/// [transform.limits]
/// memory = "256MB"   # linear memory cap per instance
/// timeout = "3s"     # wall time per call (init, process, decode)
/// fuel = 5000000000  # optional instruction budget per call; off by default
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginLimits {
    /// Largest linear memory an instance may grow to, in bytes (default 256 MiB).
    #[serde(deserialize_with = "de_size")]
    pub memory: u64,
    /// Longest a single call may run (default 3 s).
    #[serde(with = "humantime_serde_compat")]
    pub timeout: Duration,
    /// Fuel units per call (roughly one per WebAssembly instruction); `None` disables metering.
    pub fuel: Option<u64>,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self { memory: 256 * 1024 * 1024, timeout: Duration::from_secs(3), fuel: None }
    }
}

fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(b) => Ok(b),
        Size::Text(t) => t
            .parse::<bytesize::ByteSize>()
            .map(|b| b.as_u64())
            .map_err(|e| serde::de::Error::custom(format!("expected a size such as \"256MB\", got {t:?}: {e}"))),
    }
}

mod humantime_serde_compat {
    use std::time::Duration;

    use serde::Deserialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text)
            .map_err(|e| serde::de::Error::custom(format!("expected a duration such as \"3s\", got {text:?}: {e}")))
    }
}

/// Enforces the memory cap and remembers that it did, so a trap can be reported as the limit.
pub(crate) struct MemoryLimiter {
    pub(crate) limit: u64,
    /// The size the plugin asked for when it hit the cap.
    pub(crate) exceeded: Option<u64>,
    /// The size of the plugin's largest linear memory (memories never shrink).
    pub(crate) largest: u64,
}

impl MemoryLimiter {
    pub(crate) fn new(limit: u64) -> Self {
        Self { limit, exceeded: None, largest: 0 }
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.limit {
            self.exceeded = Some(desired as u64);
            return Err(wasmtime::format_err!("memory limit of {} bytes exceeded", self.limit));
        }
        self.largest = self.largest.max(desired as u64);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_from_toml_with_units_and_defaults() {
        let l: PluginLimits = toml::from_str("memory = \"64MiB\"\ntimeout = \"500ms\"").unwrap();
        assert_eq!(l.memory, 64 * 1024 * 1024);
        assert_eq!(l.timeout, Duration::from_millis(500));
        assert_eq!(l.fuel, None);
        let err = toml::from_str::<PluginLimits>("timeout = \"soon\"").unwrap_err().to_string();
        assert!(err.contains("expected a duration such as \"3s\""), "{err}");
        assert!(
            toml::from_str::<PluginLimits>("memroy = 1").unwrap_err().to_string().contains("unknown field `memroy`")
        );
    }
}
