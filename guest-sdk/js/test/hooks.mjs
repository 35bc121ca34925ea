import { pathToFileURL } from 'node:url';

const tools = process.env.SLUICE_JS_TOOLS;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('sluice:plugin/host@')) {
    return { url: new URL('./host-stub.mjs', import.meta.url).href, shortCircuit: true };
  }
  if (specifier === 'apache-arrow' && tools) {
    return next(specifier, { ...context, parentURL: pathToFileURL(`${tools}/package.json`).href });
  }
  return next(specifier, context);
}
