//! Reading an entry's table into its options, with errors that name the key and say what is
//! expected.

use serde::de::DeserializeOwned;

/// An entry's key at fault (relative to its table) and what is wrong.
pub type EntryResult<T> = Result<T, (Option<String>, String)>;

/// Read a component's table into its options.
pub fn read<T: DeserializeOwned>(table: toml::Table) -> EntryResult<T> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let key = key_of(e.path());
        (key, humane(first_line(&e.into_inner().to_string())))
    })
}

/// `sink[0].enable_2pc` → `sink.enable_2pc`: the line already says which table it is.
pub(super) fn key_of(path: &serde_path_to_error::Path) -> Option<String> {
    let parts: Vec<String> = path
        .iter()
        .filter_map(|seg| match seg {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
            _ => None,
        })
        .collect();
    if parts.is_empty() { None } else { Some(parts.join(".")) }
}

/// Serde's wording, turned around to say what is expected first.
pub(super) fn humane(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        let expected = match expected {
            "a boolean" => "true or false",
            "u32" | "u64" | "i64" => "a whole number",
            other => other,
        };
        let got = got.strip_prefix("string ").unwrap_or(got);
        return format!("expected {expected}, got {got}");
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        return format!("unknown key {rest}");
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("missing required key {rest}");
    }
    message.to_string()
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s).trim()
}
