// Decodes Kafka-style change messages `{"op_type": "delete", "data": {"id": 1, "name": "zhangsan"}}`,
// in JavaScript: `delete` rows become deletes (Doris' `__DORIS_DELETE_SIGN__ = 1`), every other
// `op_type` upserts. The fields of `data` become columns of the declared schema.
import { BatchBuilder, DELETE, INSERT, PluginError, exportDecoder } from 'sluice-guest';

const utf8 = new TextDecoder();

export const eventDecoder = exportDecoder({
  name: 'op-type-delete-sign',
  description: 'Kafka `op_type` JSON to upserts and deletes',
  configKeys: [
    ['op_field', 'op_type', 'field holding the operation; `delete` deletes the row'],
    ['data_field', 'data', "field holding the row's columns"],
  ],
  exampleInput: 'id BIGINT, name VARCHAR(64)',

  init(config, declared) {
    config.rejectUnknown(['op_field', 'data_field']);
    this.schema = declared;
    this.opField = config.getOr('op_field', 'op_type');
    this.dataField = config.getOr('data_field', 'data');
    return declared;
  },

  decode(messages) {
    const out = new BatchBuilder(this.schema);
    messages.forEach((message, i) => {
      let event;
      try {
        event = JSON.parse(utf8.decode(message));
      } catch (e) {
        throw new PluginError(`invalid JSON: ${e.message}`, i);
      }
      if (event === null || typeof event !== 'object' || Array.isArray(event)) {
        throw new PluginError('message must be a JSON object', i);
      }
      const op = event[this.opField];
      if (op !== undefined && op !== null && typeof op !== 'string') {
        throw new PluginError(`\`${this.opField}\` must be a string, got ${typeof op}`, i);
      }
      const data = event[this.dataField];
      if (data === null || typeof data !== 'object' || Array.isArray(data)) {
        throw new PluginError(`message has no \`${this.dataField}\` object`, i);
      }
      const kind = typeof op === 'string' && op.toLowerCase() === 'delete' ? DELETE : INSERT;
      try {
        out.push(data, kind);
      } catch (e) {
        throw e instanceof PluginError ? e.atRow(i) : e;
      }
    });
    return [out.finish()];
  },
});
