//! Durations (`"10s"`, `"500ms"`) and sizes (`"1MB"`, `"64MiB"`) as written in pipeline files.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// A duration written as text with a unit: `"10s"`, `"500ms"`, `"5m"`, `"1h 30m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub const fn from_secs(s: u64) -> Self {
        Self(std::time::Duration::from_secs(s))
    }

    pub const fn from_millis(ms: u64) -> Self {
        Self(std::time::Duration::from_millis(ms))
    }
}

impl FromStr for Duration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        humantime::parse_duration(s.trim())
            .map(Duration)
            .map_err(|_| format!("expected a duration such as \"10s\" or \"500ms\", got {s:?}"))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// A size in bytes, written as text with a unit (`"1MB"`, `"64MiB"`) or as a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(b) => Ok(ByteSize(b)),
            Raw::Text(t) => t.trim().parse::<bytesize::ByteSize>().map(|b| ByteSize(b.as_u64())).map_err(|_| {
                serde::de::Error::custom(format!("expected a size such as \"1MB\" or \"64MiB\", got {t:?}"))
            }),
        }
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0))
    }
}
