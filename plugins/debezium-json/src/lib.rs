//! Decodes Debezium JSON change events (`before` / `after` / `op`, with or without the
//! `schema` + `payload` envelope): `c` and `r` insert, `d` deletes, `u` becomes update-before +
//! update-after — or delete + insert when the primary key changed. Tombstones (empty messages or
//! `null`) are skipped.

use sluice_guest::json::push_debezium;
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
            push_debezium(&mut out, &self.schema, &self.key, message, i)?;
        }
        Ok(vec![out.finish()?])
    }
}

sluice_guest::export_decoder!(DebeziumJson);
