// The host's imports, recorded for the tests.
export const calls = [];

export function log(level, message) {
  calls.push(['log', level, message]);
}

export function counterAdd(name, delta) {
  calls.push(['counterAdd', name, delta]);
}
