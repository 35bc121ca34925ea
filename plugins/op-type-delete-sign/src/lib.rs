//! Decodes Kafka-style change messages `{"op_type": "delete", "data": {"id": 1, "name": "zhangsan"}}`:
//! `delete` rows become deletes (Doris' `__DORIS_DELETE_SIGN__ = 1`), every other `op_type`
//! upserts. The fields of `data` become columns of the declared schema.

use sluice_guest::json::push_op_type;
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
            push_op_type(&mut out, &self.schema, &self.op_field, &self.data_field, message, i)?;
        }
        Ok(vec![out.finish()?])
    }
}

sluice_guest::export_decoder!(OpTypeDeleteSign);
