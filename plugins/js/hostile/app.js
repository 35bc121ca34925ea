// A plugin that misbehaves on purpose, in JavaScript, for the sandbox's tests. `mode` picks it on
// `process`: `loop` (never returns), `memory` (allocates until it is stopped), `exception` (throws
// an uncaught TypeError), `error` (refuses the batch naming row 0), or `ok` (passes it).
import { PluginError, exportTransform } from 'sluice-guest';

export const transformer = exportTransform({
  name: 'hostile',
  description: 'Misbehaves on purpose (tests)',
  configKeys: [['mode', 'ok', 'loop, memory, exception, error or ok']],
  exampleInput: 'id BIGINT',

  init(config, input) {
    config.rejectUnknown(['mode']);
    this.mode = config.getOr('mode', 'ok');
    return input;
  },

  process(batch) {
    if (this.mode === 'loop') {
      let n = 0;
      for (;;) n += 1;
    }
    if (this.mode === 'memory') {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
    if (this.mode === 'exception') {
      const missing = undefined;
      return [batch.replaceColumn('id', missing.values)];
    }
    if (this.mode === 'error') throw new PluginError('refusing this batch', 0);
    return [batch];
  },
});
