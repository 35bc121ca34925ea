//! Decodes Kafka-style change messages `{"op_type": "delete", "data": {"id": 1, "name": "zhangsan"}}`:
//! `delete` rows become deletes (Doris' `__DORIS_DELETE_SIGN__ = 1`), every other `op_type`
//! upserts. The fields of `data` become columns of the declared schema.

use sluice_guest::json::{kind_of, parse_object, push_object};
use sluice_guest::prelude::*;

struct OpTypeDeleteSign {
    schema: SchemaRef,
    op_field: String,
    data_field: String,
}

impl Decode for OpTypeDeleteSign {
    fn info() -> PluginInfo {
        PluginInfo::new("op-type-delete-sign", "Kafka `op_type` JSON to upserts and deletes")
            .config_key("op_field", Some("op_type"), "field holding the operation; `delete` deletes the row")
            .config_key("data_field", Some("data"), "field holding the row's columns")
            .example_input("id BIGINT, name VARCHAR(64)")
    }

    fn init(config: &Config, declared: SchemaRef) -> Result<(Self, SchemaRef)> {
        config.reject_unknown(&["op_field", "data_field"])?;
        let plugin = OpTypeDeleteSign {
            schema: declared.clone(),
            op_field: config.get_or("op_field", "op_type").to_string(),
            data_field: config.get_or("data_field", "data").to_string(),
        };
        Ok((plugin, declared))
    }

    fn decode(&mut self, messages: &[&[u8]]) -> Result<Vec<Batch>> {
        let mut out = BatchBuilder::new(self.schema.clone())?;
        for (i, message) in messages.iter().enumerate() {
            let object = parse_object(message, i)?;
            let kind = match object.get(&self.op_field) {
                Some(serde_json::Value::String(op)) if op.eq_ignore_ascii_case("delete") => RowKind::Delete,
                Some(serde_json::Value::String(_)) | None => RowKind::Insert,
                Some(other) => {
                    return Err(
                        Error::new(format!("`{}` must be a string, got {}", self.op_field, kind_of(other))).at_row(i)
                    );
                }
            };
            let data = match object.get(&self.data_field) {
                Some(serde_json::Value::Object(data)) => data,
                Some(other) => {
                    return Err(Error::new(format!("`{}` must be an object, got {}", self.data_field, kind_of(other)))
                        .at_row(i));
                }
                None => return Err(Error::new(format!("message has no `{}` object", self.data_field)).at_row(i)),
            };
            push_object(&mut out, &self.schema, kind, data).map_err(|e| e.at_row(i))?;
        }
        Ok(vec![out.finish()?])
    }
}

sluice_guest::export_decoder!(OpTypeDeleteSign);
