"""Decodes Kafka-style change messages `{"op_type": "delete", "data": {"id": 1, "name": "zhangsan"}}`,
in Python: `delete` rows become deletes (Doris' `__DORIS_DELETE_SIGN__ = 1`), every other `op_type`
upserts. The fields of `data` become columns of the declared schema."""

import json

from sluice_guest import DELETE, INSERT, BatchBuilder, Decoder, Error, export_decoder


class OpTypeDeleteSign(Decoder):
    name = "op-type-delete-sign"
    description = "Kafka `op_type` JSON to upserts and deletes"
    config_keys = [
        ("op_field", "op_type", "field holding the operation; `delete` deletes the row"),
        ("data_field", "data", "field holding the row's columns"),
    ]
    example_input = "id BIGINT, name VARCHAR(64)"

    def init(self, config, declared):
        config.reject_unknown(["op_field", "data_field"])
        self.schema = declared
        self.op_field = config.get_or("op_field", "op_type")
        self.data_field = config.get_or("data_field", "data")
        return declared

    def decode(self, messages):
        out = BatchBuilder(self.schema)
        for i, message in enumerate(messages):
            try:
                event = json.loads(message)
            except ValueError as e:
                raise Error(f"invalid JSON: {e}", i) from None
            if not isinstance(event, dict):
                raise Error("message must be a JSON object", i)
            op = event.get(self.op_field)
            if op is not None and not isinstance(op, str):
                raise Error(f"`{self.op_field}` must be a string, got {type(op).__name__}", i)
            data = event.get(self.data_field)
            if not isinstance(data, dict):
                raise Error(f"message has no `{self.data_field}` object", i)
            kind = DELETE if op is not None and op.lower() == "delete" else INSERT
            try:
                out.push(data, kind)
            except Error as e:
                raise e.at_row(i) from None
        return [out.finish()]


EventDecoder = export_decoder(OpTypeDeleteSign)
