// The Flink Doris quick start's transform, in JavaScript: `name -> concat(prefix, name)`,
// `age -> age + 1`. Every other column passes through unchanged.
import { PluginError, counterAdd, exportTransform } from 'sluice-guest';

export const transformer = exportTransform({
  name: 'student-trans',
  description: 'Prefixes `name` and adds one to `age`, as the Flink Doris quick start',
  configKeys: [['prefix', 'prefix_', 'text put in front of every name']],
  exampleInput: 'name VARCHAR(256), age INT',

  init(config, input) {
    config.rejectUnknown(['prefix']);
    for (const [column, expected] of [['name', 'Utf8'], ['age', 'Int32']]) {
      const field = input.fields.find((f) => f.name === column);
      if (!field) throw new PluginError(`input needs a \`${column}\` column`);
      if (String(field.type) !== expected) {
        throw new PluginError(`column \`${column}\` must be ${expected}, got ${field.type}`);
      }
    }
    this.prefix = config.getOr('prefix', 'prefix_');
    return input;
  },

  process(batch) {
    const prefix = this.prefix;
    const names = batch.column('name').map((n) => (n === null ? null : prefix + n));
    const ages = batch.column('age').map((a) => (a === null ? null : Math.min(a + 1, 2 ** 31 - 1)));
    counterAdd('rows', batch.numRows);
    return [batch.replaceColumn('name', names).replaceColumn('age', ages)];
  },
});
