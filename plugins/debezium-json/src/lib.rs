//! Decodes Debezium JSON change events (`before` / `after` / `op`, with or without the
//! `schema` + `payload` envelope): `c` and `r` insert, `d` deletes, `u` becomes update-before +
//! update-after — or delete + insert when the primary key changed. Tombstones (empty messages or
//! `null`) are skipped.

use serde_json::{Map, Value as Json};
use sluice_guest::json::{kind_of, parse_object, push_object};
use sluice_guest::prelude::*;

struct DebeziumJson {
    schema: SchemaRef,
    key: Vec<String>,
}

impl Decode for DebeziumJson {
    fn info() -> PluginInfo {
        PluginInfo::new("debezium-json", "Debezium JSON change events to row changes")
            .config_key("key", None, "primary-key columns, comma separated; a change of key becomes delete + insert")
            .example_input("id BIGINT, name VARCHAR(64)")
    }

    fn init(config: &Config, declared: SchemaRef) -> Result<(Self, SchemaRef)> {
        config.reject_unknown(&["key"])?;
        let key: Vec<String> = config
            .get("key")
            .map(|k| k.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
            .unwrap_or_default();
        for k in &key {
            if declared.field_with_name(k).is_err() {
                return Err(Error::new(format!("config `key`: column `{k}` is not in the declared schema")));
            }
        }
        Ok((DebeziumJson { schema: declared.clone(), key }, declared))
    }

    fn decode(&mut self, messages: &[&[u8]]) -> Result<Vec<Batch>> {
        let mut out = BatchBuilder::new(self.schema.clone())?;
        for (i, message) in messages.iter().enumerate() {
            if message.iter().all(u8::is_ascii_whitespace) || message.trim_ascii() == b"null" {
                continue; // tombstone
            }
            let mut event = parse_object(message, i)?;
            if let Some(Json::Object(payload)) = event.remove("payload") {
                event = payload;
            }
            let image = |name: &str| -> Result<Option<&Map<String, Json>>> {
                match event.get(name) {
                    None | Some(Json::Null) => Ok(None),
                    Some(Json::Object(row)) => Ok(Some(row)),
                    Some(other) => {
                        Err(Error::new(format!("`{name}` must be an object, got {}", kind_of(other))).at_row(i))
                    }
                }
            };
            let (before, after) = (image("before")?, image("after")?);
            let op = event.get("op").and_then(Json::as_str).ok_or_else(|| Error::new("event has no `op`").at_row(i))?;
            let missing = |name: &str| Error::new(format!("op `{op}` needs a `{name}` image")).at_row(i);
            let mut push = |kind, row| push_object(&mut out, &self.schema, kind, row).map_err(|e| e.at_row(i));
            match op {
                "c" | "r" => push(RowKind::Insert, after.ok_or_else(|| missing("after"))?)?,
                "d" => push(RowKind::Delete, before.ok_or_else(|| missing("before"))?)?,
                "u" => {
                    let after = after.ok_or_else(|| missing("after"))?;
                    match before {
                        Some(before) if self.key_changed(before, after) => {
                            push(RowKind::Delete, before)?;
                            push(RowKind::Insert, after)?;
                        }
                        Some(before) => {
                            push(RowKind::UpdateBefore, before)?;
                            push(RowKind::UpdateAfter, after)?;
                        }
                        None => push(RowKind::UpdateAfter, after)?,
                    }
                }
                "t" | "m" => {} // truncate and message events carry no rows
                other => return Err(Error::new(format!("unknown op `{other}` (expected c, r, u, d)")).at_row(i)),
            }
        }
        Ok(vec![out.finish()?])
    }
}

impl DebeziumJson {
    fn key_changed(&self, before: &Map<String, Json>, after: &Map<String, Json>) -> bool {
        self.key.iter().any(|k| before.get(k) != after.get(k))
    }
}

sluice_guest::export_decoder!(DebeziumJson);
