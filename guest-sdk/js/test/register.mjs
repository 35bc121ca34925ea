// Runs the SDK under Node: `sluice:plugin/host@0.1.0` (the host's imports inside a component) is
// a recording stub, and `apache-arrow` comes from $SLUICE_JS_TOOLS/node_modules.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
