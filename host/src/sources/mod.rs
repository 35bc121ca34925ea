//! The sources: one module per `type`, each owning its options, their checks and its split
//! enumerator and readers (see [`crate::runtime::source`]).

pub(crate) mod cdc;
pub mod datagen;
pub mod doris;
pub mod file;
pub mod kafka;
pub mod letters;
pub mod mysql;
pub mod postgres;

use serde::{Deserialize, Serialize};

/// `scan.startup.mode` of a CDC source (Flink CDC's names): where it starts reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartupMode {
    /// A snapshot of every table, then the log from the position taken before it (the default,
    /// as Flink CDC's).
    #[default]
    Initial,
    /// A snapshot of every table, and then the source is exhausted.
    Snapshot,
    /// Only the log, from now.
    LatestOffset,
    /// Only the log, from the oldest position the server keeps.
    EarliestOffset,
    /// Only the log, from a position given (`specific_offset`).
    SpecificOffset,
    /// Only the log, from a time given (`timestamp_millis`).
    Timestamp,
    /// No rows: the tables announced (so a sink creates them), whatever the startup mode. Set
    /// by a source's `schema_only = true` (what `--create-table-only` runs), never by this key.
    #[serde(skip)]
    SchemaOnly,
}

impl StartupMode {
    /// Its name in a pipeline file.
    pub fn name(self) -> &'static str {
        match self {
            StartupMode::Initial => "initial",
            StartupMode::Snapshot => "snapshot",
            StartupMode::LatestOffset => "latest-offset",
            StartupMode::EarliestOffset => "earliest-offset",
            StartupMode::SpecificOffset => "specific-offset",
            StartupMode::Timestamp => "timestamp",
            StartupMode::SchemaOnly => "schema-only",
        }
    }

    /// Only the log is read, no snapshot.
    pub fn log_only(self) -> bool {
        matches!(
            self,
            StartupMode::LatestOffset
                | StartupMode::EarliestOffset
                | StartupMode::SpecificOffset
                | StartupMode::Timestamp
        )
    }

    /// The mode a source with `schema_only` reads in.
    pub fn unless_schema_only(self, schema_only: bool) -> StartupMode {
        if schema_only { StartupMode::SchemaOnly } else { self }
    }
}

impl std::fmt::Display for StartupMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The position of a reader that counts the rows it delivered.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RowPosition {
    rows: u64,
}

impl crate::runtime::Position for RowPosition {}

/// An instant, `micros` after the epoch, as wall time in `zone` (none: UTC): how a source shows
/// a TIMESTAMP (MySQL) or TIMESTAMPTZ (PostgreSQL) value in a Doris DATETIME.
pub(crate) fn wall_time(zone: Option<chrono_tz::Tz>, micros: i64) -> String {
    let Some(zone) = zone else { return sluice_guest::batch::format_datetime_micros(micros) };
    use chrono::{Offset, TimeZone};
    let offset =
        zone.offset_from_utc_datetime(&chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default().naive_utc());
    let shift = i64::from(offset.fix().local_minus_utc()) * 1_000_000;
    sluice_guest::batch::format_datetime_micros(micros + shift)
}

/// `server_time_zone` of connection `key`: none for UTC.
pub(crate) fn time_zone(zone: Option<&str>, key: &str) -> anyhow::Result<Option<chrono_tz::Tz>> {
    match zone {
        None => Ok(None),
        Some(z) if z.eq_ignore_ascii_case("UTC") => Ok(None),
        Some(z) => Ok(Some(z.parse::<chrono_tz::Tz>().map_err(|_| {
            anyhow::anyhow!(
                "{key}.server_time_zone: {z:?} is not a time zone name; give one such as \"UTC\" or \"Asia/Shanghai\""
            )
        })?)),
    }
}

/// A whole-name regex for `key` (`source.include`), or the error naming it.
pub(crate) fn regex(key: &str, pattern: &str) -> Result<regex::Regex, (String, String)> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| (key.to_string(), format!("not a regex: {e}")))
}

/// For `skip_serializing_if` of counters.
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}
