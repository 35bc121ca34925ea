// Returns every batch unchanged, in JavaScript: the baseline of the plugin boundary benchmark
// (the batch is still read from and written to Arrow IPC, as every JavaScript plugin's is).
import { exportTransform } from 'sluice-guest';

export const transformer = exportTransform({
  name: 'passthrough',
  description: 'Returns every batch unchanged (benchmark baseline)',
  process: (batch) => [batch],
});
