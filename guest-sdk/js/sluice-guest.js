// Writing a Sluice transform or decoder in JavaScript.
//
// A plugin is an object with `init` and `process` (a transform) or `init` and `decode` (a
// decoder); `exportTransform` / `exportDecoder` turn it into the interface componentize-js
// exports for the WIT world (`transform` or `decoder`):
//
//     import { exportTransform } from 'sluice-guest';
//
//     export const transformer = exportTransform({
//       process(batch) {
//         return [batch.replaceColumn('name', batch.column('name').map((n) => n && n.toUpperCase()))];
//       },
//     });
//
// Batches are Apache Arrow tables (the `apache-arrow` package reads and writes the IPC bytes of
// the WIT `batch`), with the row kinds and the target table. A `PluginError` thrown by the plugin
// fails the batch with its message (and row); anything else thrown fails it too, named with its
// type. Values are those of `apache-arrow`: BIGINT is a BigInt, DATE and DATETIME are epoch
// milliseconds, DECIMAL is its unscaled integer (`String(v)`), strings are strings.

import {
  Bool,
  DateDay,
  DateUnit,
  Decimal,
  Field,
  Float32,
  Float64,
  Int16,
  Int32,
  Int64,
  Int8,
  Precision,
  RecordBatch,
  Schema,
  Struct,
  Table,
  TimestampMicrosecond,
  TimestampMillisecond,
  TimestampSecond,
  Type,
  Utf8,
  Vector,
  makeData,
  tableFromIPC,
  tableToIPC,
  vectorFromArray,
} from 'apache-arrow';
import * as host from 'sluice:plugin/host@0.1.0';

/** Row kinds, as the WIT `batch.row-kinds` encodes them (Flink's +I, -U, +U, -D). */
export const INSERT = 0;
export const UPDATE_BEFORE = 1;
export const UPDATE_AFTER = 2;
export const DELETE = 3;

/** What a plugin throws to refuse a batch: the host fails it with `message` (and the row). */
export class PluginError extends Error {
  constructor(message, row) {
    super(message);
    this.name = 'PluginError';
    this.row = row;
  }

  /** The same error, naming the input row (or message) at fault. */
  atRow(row) {
    return new PluginError(this.message, row);
  }
}

/** The plugin's settings from the pipeline file (`[transform.config]`), as text. */
export class Config {
  constructor(pairs) {
    this.values = new Map(pairs);
  }

  get(key) {
    return this.values.get(key);
  }

  getOr(key, fallback) {
    return this.values.has(key) ? this.values.get(key) : fallback;
  }

  /** `parse` of the value of `key` (an integer by default), or `fallback` when it is not set. */
  parseOr(key, fallback, parse = parseStrictInt) {
    if (!this.values.has(key)) return fallback;
    const text = this.values.get(key);
    try {
      return parse(text);
    } catch (e) {
      throw new PluginError(`config \`${key}\` = ${JSON.stringify(text)}: ${e.message}`);
    }
  }

  /** Fail on a key the plugin does not know (a typo must not be ignored). */
  rejectUnknown(known) {
    for (const key of this.values.keys()) {
      if (!known.includes(key)) {
        throw new PluginError(`unknown config key \`${key}\`; known keys: ${known.join(', ') || 'none'}`);
      }
    }
  }
}

function parseStrictInt(text) {
  if (!/^\s*[-+]?\d+\s*$/.test(text)) throw new Error(`\`${text}\` is not an integer`);
  return Number.parseInt(text, 10);
}

/** A batch for one target table: an Arrow table, one row kind per row (empty: all inserts), and
 * the table (`undefined`: the pipeline's sink table). */
export class Batch {
  constructor(table, rowKinds = new Uint8Array(0), target = undefined) {
    this.data = table;
    this.rowKinds = rowKinds;
    this.table = target;
  }

  get numRows() {
    return this.data.numRows;
  }

  get schema() {
    return this.data.schema;
  }

  kind(row) {
    return this.rowKinds.length ? this.rowKinds[row] : INSERT;
  }

  /** The values of column `name`, nulls as `null`. */
  column(name) {
    return valuesOf(this.vector(name));
  }

  /** The Arrow vector of column `name`. */
  vector(name) {
    const v = this.data.getChild(name);
    if (!v) throw this.noColumn(name);
    return v;
  }

  /** This batch with column `name` holding `values` (same type). */
  replaceColumn(name, values) {
    const field = this.data.schema.fields.find((f) => f.name === name);
    if (!field) throw this.noColumn(name);
    const vector = vectorOf(values, field.type);
    if (vector.length !== this.numRows) {
      throw new PluginError(`column \`${name}\` got ${vector.length} values for ${this.numRows} rows`);
    }
    return new Batch(this.data.setChild(name, vector), this.rowKinds, this.table);
  }

  /** Each row as an object of column name to value. */
  *rows() {
    for (const row of this.data) yield row.toJSON();
  }

  /** The same rows, routed to `table` (`db.table`). */
  toTable(table) {
    return new Batch(this.data, this.rowKinds, table);
  }

  noColumn(name) {
    const names = this.data.schema.fields.map((f) => f.name).join(', ');
    return new PluginError(`the batch has no column \`${name}\`; its columns are ${names}`);
  }
}

// --- columns as JavaScript arrays, and back ------------------------------------------------------
//
// Plugins run in an interpreter (no JIT inside a component), so the common column types are read
// and written straight from and to their buffers, a whole column at a time; the rest go through
// apache-arrow's generic getters and builders.

const utf8Decoder = new TextDecoder();
const utf8Encoder = new TextEncoder();

/** What a column type is, by its type id (a schema read from IPC has generic `Int_`, `Float`,
 * `Timestamp_` … instances, not the subclasses a plugin constructs): `int8` … `int64`,
 * `float32`, `float64`, `bool`, `utf8`, `decimal`, `date32`, `timestamp[s|ms|us]`, else `other`. */
function kindOf(type) {
  switch (type.typeId) {
    case Type.Int:
      return type.isSigned ? `int${type.bitWidth}` : 'other';
    case Type.Float:
      return type.precision === Precision.SINGLE ? 'float32' : type.precision === Precision.DOUBLE ? 'float64' : 'other';
    case Type.Bool:
      return 'bool';
    case Type.Utf8:
      return 'utf8';
    case Type.Decimal:
      return type.bitWidth === 128 ? 'decimal' : 'other';
    case Type.Date:
      return type.unit === DateUnit.DAY ? 'date32' : 'other';
    case Type.Timestamp:
      if (type.timezone) return 'other';
      return ['timestamp[s]', 'timestamp[ms]', 'timestamp[us]'][type.unit] ?? 'other';
    default:
      return 'other';
  }
}

const PLAIN_KINDS = ['int8', 'int16', 'int32', 'int64', 'float32', 'float64'];

/** Whether values of this kind are read and written whole from their buffers. */
function isFast(kind) {
  return kind === 'utf8' || PLAIN_KINDS.includes(kind);
}

/** The values of `vector` as an array, nulls as `null`. */
function valuesOf(vector) {
  const out = new Array(vector.length);
  let at = 0;
  for (const data of vector.data) {
    const n = data.length;
    const bitmap = data.nullCount > 0 ? data.nullBitmap : null;
    const kind = kindOf(data.type);
    if (data.offset !== 0 || !isFast(kind)) {
      for (const v of new vector.constructor([data])) out[at++] = v;
      continue;
    }
    if (kind === 'utf8') {
      const offsets = data.valueOffsets;
      const bytes = data.values.subarray(offsets[0], offsets[n]);
      const text = utf8Decoder.decode(bytes);
      // All ASCII (one UTF-16 unit per byte): cut the one decoded string at the byte offsets.
      const ascii = text.length === bytes.length;
      const base = offsets[0];
      for (let i = 0; i < n; i++) {
        if (bitmap && !((bitmap[i >> 3] >> (i & 7)) & 1)) out[at++] = null;
        else if (ascii) out[at++] = text.substring(offsets[i] - base, offsets[i + 1] - base);
        else out[at++] = utf8Decoder.decode(data.values.subarray(offsets[i], offsets[i + 1]));
      }
      continue;
    }
    const values = data.values;
    for (let i = 0; i < n; i++) {
      out[at++] = bitmap && !((bitmap[i >> 3] >> (i & 7)) & 1) ? null : values[i];
    }
  }
  return out;
}

/** A vector of `type` holding `values` (`null` for null). */
function vectorOf(values, type) {
  const kind = kindOf(type);
  if (!isFast(kind) || !Array.isArray(values)) return vectorFromArray(values, type);
  const n = values.length;
  let nullCount = 0;
  let bitmap;
  for (let i = 0; i < n; i++) {
    if (values[i] === null || values[i] === undefined) {
      if (!bitmap) bitmap = new Uint8Array((n + 7) >> 3).fill(0xff);
      bitmap[i >> 3] &= ~(1 << (i & 7));
      nullCount++;
    }
  }
  if (kind === 'utf8') {
    const valueOffsets = new Int32Array(n + 1);
    const parts = new Array(n);
    let chars = 0;
    for (let i = 0; i < n; i++) {
      const v = values[i];
      const text = v === null || v === undefined ? '' : typeof v === 'string' ? v : String(v);
      parts[i] = text;
      chars += text.length;
      valueOffsets[i + 1] = chars;
    }
    let data = utf8Encoder.encode(parts.join(''));
    if (data.length !== chars) {
      // Not all ASCII: byte offsets differ from character offsets, so encode string by string.
      const encoded = parts.map((t) => utf8Encoder.encode(t));
      data = new Uint8Array(encoded.reduce((sum, e) => sum + e.length, 0));
      let pos = 0;
      encoded.forEach((e, i) => {
        data.set(e, pos);
        pos += e.length;
        valueOffsets[i + 1] = pos;
      });
    }
    return new Vector([makeData({ type, length: n, nullCount, nullBitmap: bitmap, valueOffsets, data })]);
  }
  const data = new type.ArrayType(n);
  const big = kind === 'int64';
  const integer = kind.startsWith('int');
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) continue;
    const x = big ? (typeof v === 'bigint' ? v : BigInt(v)) : typeof v === 'bigint' ? Number(v) : v;
    data[i] = x;
    // A typed array wraps what does not fit; a value must never change on its way out.
    if (integer && data[i] !== x) throw new PluginError(`${JSON.stringify(String(v))} does not fit a ${type} column (row ${i})`);
  }
  return new Vector([makeData({ type, length: n, nullCount, nullBitmap: bitmap, data })]);
}

/** Builds a batch row by row, converting JSON-style values (text, numbers) to the types of
 * `schema`: what a decoder needs. */
export class BatchBuilder {
  constructor(schema, table = undefined) {
    this.schema = schema;
    this.table = table;
    this.columns = schema.fields.map(() => []);
    this.kinds = [];
    this.convert = schema.fields.map(converter);
  }

  /** Append a row given as an object (missing columns are null). */
  push(row, kind = INSERT) {
    const n = this.kinds.length;
    const fields = this.schema.fields;
    for (let i = 0; i < fields.length; i++) {
      const f = fields[i];
      const value = row[f.name];
      if (value === undefined || value === null) {
        if (!f.nullable) {
          this.undo(n);
          throw new PluginError(`column \`${f.name}\` is NOT NULL and the row has no value for it`);
        }
        this.columns[i].push(null);
        continue;
      }
      try {
        this.columns[i].push(this.convert[i](value));
      } catch (e) {
        this.undo(n);
        throw new PluginError(`column \`${f.name}\`: ${e.message}`);
      }
    }
    this.kinds.push(kind);
  }

  undo(n) {
    for (const column of this.columns) column.length = n;
  }

  finish() {
    const n = this.kinds.length;
    const children = this.schema.fields.map((f, i) => vectorOf(this.columns[i], f.type).data[0]);
    const data = makeData({ type: new Struct(this.schema.fields), length: n, nullCount: 0, children });
    const kinds = this.kinds.some((k) => k !== INSERT) ? Uint8Array.from(this.kinds) : new Uint8Array(0);
    return new Batch(new Table(new RecordBatch(this.schema, data)), kinds, this.table);
  }
}

function converter(field) {
  const t = field.type;
  switch (kindOf(t)) {
    case 'int8':
    case 'int16':
    case 'int32':
      return (v) => Number(toInteger(v));
    case 'int64':
      return toInteger;
    case 'float32':
    case 'float64':
      return toFloat;
    case 'bool':
      return toBool;
    case 'decimal':
      return (v) => toDecimal(v, t.scale);
    case 'date32':
    case 'timestamp[s]':
    case 'timestamp[ms]':
    case 'timestamp[us]':
      return toEpochMillis;
    default:
      return (v) => (typeof v === 'string' ? v : JSON.stringify(v));
  }
}

function toInteger(v) {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'boolean') return BigInt(v ? 1 : 0);
  if (typeof v === 'number' && Number.isInteger(v)) return BigInt(v);
  if (typeof v === 'string' && /^\s*[-+]?\d+\s*$/.test(v)) return BigInt(v.trim());
  throw new Error(`\`${typeof v === 'string' ? v : JSON.stringify(v)}\` is not an integer`);
}

function toFloat(v) {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n === 'number' && !Number.isNaN(n)) return n;
  throw new Error(`\`${typeof v === 'string' ? v : JSON.stringify(v)}\` is not a number`);
}

function toBool(v) {
  if (typeof v === 'boolean') return v;
  if (v === 0 || v === 1) return v === 1;
  if (typeof v === 'string' && ['true', 'false', '1', '0'].includes(v.toLowerCase())) {
    return ['true', '1'].includes(v.toLowerCase());
  }
  throw new Error(`${JSON.stringify(v)} is not a boolean`);
}

/** A decimal's 128-bit unscaled value at `scale`, rounded half away from zero (as Doris rounds
 * on load), as the four little-endian 32-bit words Arrow stores. */
function toDecimal(v, scale) {
  const text = typeof v === 'number' ? String(v) : v;
  const m = typeof text === 'string' && /^\s*([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?\s*$/.exec(text);
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) {
    throw new Error(`\`${typeof v === 'string' ? v : JSON.stringify(v)}\` is not a decimal number`);
  }
  const digits = m[2] + (m[3] ?? '');
  const shift = scale - (m[3] ?? '').length + Number(m[4] ?? 0);
  let unscaled;
  if (shift >= 0) {
    unscaled = BigInt(digits || '0') * 10n ** BigInt(shift);
  } else {
    const keep = digits.length + shift;
    const head = keep > 0 ? BigInt(digits.slice(0, keep)) : 0n;
    const first = keep >= 0 && keep < digits.length ? Number(digits[keep]) : 0;
    unscaled = head + (first >= 5 ? 1n : 0n);
  }
  if (m[1] === '-') unscaled = -unscaled;
  const words = new Uint32Array(4);
  let rest = BigInt.asUintN(128, unscaled);
  for (let i = 0; i < 4; i++) {
    words[i] = Number(rest & 0xffffffffn);
    rest >>= 32n;
  }
  return words;
}

function toEpochMillis(v) {
  if (typeof v === 'number') return v;
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'string') {
    // `2024-01-02 03:04:05` is a Doris DATETIME: no zone, read as UTC like the rest of Sluice.
    const iso = /^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : /[zZ]|[+-]\d{2}:?\d{2}$/.test(v) ? v : `${v.replace(' ', 'T')}Z`;
    const ms = Date.parse(iso);
    if (!Number.isNaN(ms)) return ms;
  }
  throw new Error(`\`${typeof v === 'string' ? v : JSON.stringify(v)}\` is not a date or datetime`);
}

// --- Doris column types and the Arrow fields that carry them ------------------------------------
//
// The mapping is the one in `wit/sluice.wit` (and the Rust and Python SDKs): integers, floats,
// DECIMAL, DATE and DATETIME have Arrow types of their own; LARGEINT, JSON, ARRAY/MAP/STRUCT,
// CHAR(n) and VARCHAR(n) travel as utf8 with the Doris type in the field's `doris_type` metadata.

export const DORIS_TYPE_KEY = 'doris_type';

const PLAIN = {
  BOOLEAN: () => new Bool(),
  BOOL: () => new Bool(),
  TINYINT: () => new Int8(),
  SMALLINT: () => new Int16(),
  INT: () => new Int32(),
  INTEGER: () => new Int32(),
  BIGINT: () => new Int64(),
  FLOAT: () => new Float32(),
  DOUBLE: () => new Float64(),
  DATE: () => new DateDay(),
  DATEV2: () => new DateDay(),
  STRING: () => new Utf8(),
  TEXT: () => new Utf8(),
};
const TAGGED = ['LARGEINT', 'JSON', 'JSONB', 'VARIANT'];
const NESTED = ['ARRAY', 'MAP', 'STRUCT'];

function field(name, type, nullable, metadata) {
  return new Field(name, type, nullable, metadata ? new Map(Object.entries(metadata)) : undefined);
}

/** The Arrow field for a column `name` of Doris type `dorisType` (`VARCHAR(64)`, `DECIMAL(10,2)`,
 * `DATETIME(3)`, `ARRAY<INT>` …). An unknown type throws, naming the column. */
export function dorisField(name, dorisType, nullable = true) {
  const text = dorisType.trim();
  const upper = text.toUpperCase();
  const bad = (why) => new PluginError(`column \`${name}\`: type \`${text}\`: ${why}`);
  let base = upper;
  let args = [];
  if (upper.includes('(') && !NESTED.some((n) => upper.startsWith(n))) {
    const open = upper.indexOf('(');
    const close = upper.lastIndexOf(')');
    if (close < open || upper.slice(close + 1).trim()) throw bad('unbalanced parentheses');
    base = upper.slice(0, open).trim();
    args = upper.slice(open + 1, close).split(',').map((a) => a.trim());
  }
  const nums = () =>
    args.map((a) => {
      if (!/^\d+$/.test(a)) throw bad('arguments must be integers');
      return Number(a);
    });
  if (PLAIN[base] && (!args.length || ['TINYINT', 'SMALLINT', 'INT', 'INTEGER', 'BIGINT'].includes(base))) {
    return field(name, PLAIN[base](), nullable);
  }
  if (TAGGED.includes(base) && !args.length) {
    return field(name, new Utf8(), nullable, { [DORIS_TYPE_KEY]: base === 'JSONB' ? 'JSON' : base });
  }
  if (NESTED.some((n) => base.startsWith(n))) {
    return field(name, new Utf8(), nullable, { [DORIS_TYPE_KEY]: text });
  }
  if (['DECIMAL', 'DECIMALV3', 'DECIMALV2', 'NUMERIC'].includes(base)) {
    const n = nums();
    const [precision, scale] = n.length ? [n[0], n[1] ?? 0] : base === 'DECIMALV2' ? [27, 9] : [9, 0];
    if (!(precision >= 1 && precision <= 38 && scale >= 0 && scale <= precision)) {
      throw bad('DECIMAL needs 1 <= precision <= 38 and scale <= precision');
    }
    return field(name, new Decimal(scale, precision, 128), nullable);
  }
  if (['DATETIME', 'DATETIMEV2', 'TIMESTAMP'].includes(base)) {
    const precision = nums()[0] ?? 0;
    if (!(precision >= 0 && precision <= 6)) throw bad('DATETIME precision must be 0-6');
    const type =
      precision === 0 ? new TimestampSecond() : precision <= 3 ? new TimestampMillisecond() : new TimestampMicrosecond();
    return field(name, type, nullable);
  }
  if (base === 'CHAR' || base === 'VARCHAR') {
    const n = nums();
    if (!n.length) return field(name, new Utf8(), nullable, base === 'CHAR' ? { [DORIS_TYPE_KEY]: 'CHAR' } : undefined);
    return field(name, new Utf8(), nullable, { [DORIS_TYPE_KEY]: `${base}(${n[0]})` });
  }
  throw new PluginError(`column \`${name}\`: unknown Doris type \`${text}\``);
}

/** The Doris type of an Arrow field: its `doris_type` metadata, else the natural Doris type of
 * its Arrow type. */
export function dorisType(f) {
  const tagged = f.metadata.get(DORIS_TYPE_KEY);
  if (tagged) return tagged;
  const t = f.type;
  const natural = {
    bool: 'BOOLEAN',
    int8: 'TINYINT',
    int16: 'SMALLINT',
    int32: 'INT',
    int64: 'BIGINT',
    float32: 'FLOAT',
    float64: 'DOUBLE',
    date32: 'DATE',
    utf8: 'STRING',
    'timestamp[s]': 'DATETIME',
    'timestamp[ms]': 'DATETIME(3)',
    'timestamp[us]': 'DATETIME(6)',
    decimal: `DECIMAL(${t.precision},${t.scale})`,
  }[kindOf(t)];
  if (!natural) throw new PluginError(`column \`${f.name}\`: Arrow type ${t} has no Doris type`);
  return natural;
}

/** The Arrow schema of WIT columns (`{name, dataType, nullable}`). */
export function schemaOf(columns) {
  return new Schema(columns.map((c) => dorisField(c.name, c.dataType, c.nullable)));
}

/** The WIT columns of an Arrow schema, with their Doris types. */
export function columnsOf(schema) {
  return schema.fields.map((f) => ({ name: f.name, dataType: dorisType(f), nullable: f.nullable }));
}

// --- the component's exports --------------------------------------------------------------------

/** A line in the host's log, tagged with the plugin's name (`trace` … `error`). */
export function log(level, message) {
  host.log(level, message);
}

/** Add `delta` to the plugin's counter `name` (`sluice_plugin_<name>_total`). */
export function counterAdd(name, delta) {
  host.counterAdd(name, BigInt(delta));
}

function info(plugin, fallbackName) {
  return {
    name: plugin.name ?? fallbackName,
    description: plugin.description ?? '',
    configKeys: (plugin.configKeys ?? []).map(([name, defaultValue, description]) => ({
      name,
      defaultValue: defaultValue ?? undefined,
      description,
    })),
    exampleInput: plugin.exampleInput ?? undefined,
  };
}

/** The WIT error for what the plugin threw: a `PluginError` keeps its message and row; anything
 * else is named with its type and, when the stack tells, the plugin's file, line and function. */
function failed(e) {
  if (e instanceof PluginError) return { payload: { message: e.message, row: e.row } };
  let message = e instanceof Error ? `${e.name}: ${e.message}` : `uncaught ${typeof e}: ${String(e)}`;
  const at = e instanceof Error ? whereThrown(e.stack) : undefined;
  if (at) message += ` (at ${at})`;
  return { payload: { message, row: undefined } };
}

/** `file:line, in function` of the innermost stack frame in the plugin's own code (not the SDK's,
 * not a package's). In a component the frames point into the bundle; the line table the build
 * appends to it (`globalThis.__SLUICE_SOURCE_MAP__`) holds exactly the plugin's own lines. */
function whereThrown(stack) {
  if (typeof stack !== 'string') return undefined;
  const map = globalThis.__SLUICE_SOURCE_MAP__;
  for (const frame of stack.split('\n')) {
    // SpiderMonkey: `name@file:line:column`; V8: `    at name (file:line:column)`.
    const m = /^(?:\s*at )?(?:([\w$.<>]*)@|([\w$.<>]+) \()?\(?(.*?):(\d+):(\d+)\)?$/.exec(frame);
    if (!m) continue;
    const fn = (m[1] ?? m[2] ?? '').split('.').pop();
    let source = m[3];
    let line = Number(m[4]);
    if (map) {
      const own = map.lines[line];
      if (!own) continue;
      [source, line] = [map.sources[own[0]], own[1]];
    } else if (/node_modules|sluice-guest\.js$/.test(source)) {
      continue;
    }
    return `${source.split('/').pop()}:${line}${fn ? `, in ${fn}` : ''}`;
  }
  return undefined;
}

function guarded(f) {
  try {
    return f();
  } catch (e) {
    throw failed(e);
  }
}

function initWith(plugin, config, witSchema) {
  return guarded(() => {
    const schema = schemaOf(witSchema.columns);
    const configured = new Config(config);
    const out = plugin.init ? plugin.init(configured, schema) : defaultInit(plugin, configured, schema);
    return { columns: columnsOf(out ?? schema) };
  });
}

function defaultInit(plugin, config, schema) {
  config.rejectUnknown((plugin.configKeys ?? []).map(([k]) => k));
  return schema;
}

/** The input batches' tables, and the bytes each was read from: a table handed back untouched
 * goes back as those bytes. */
const readFrom = new WeakMap();

function fromWit(batch) {
  const table = tableFromIPC(batch.arrowIpc);
  readFrom.set(table, batch.arrowIpc);
  return new Batch(table, batch.rowKinds, batch.table);
}

function toWit(batch) {
  const arrowIpc = readFrom.get(batch.data) ?? tableToIPC(batch.data, 'stream');
  return { table: batch.table, arrowIpc, rowKinds: Uint8Array.from(batch.rowKinds) };
}

/** The `transformer` interface componentize-js exports for the `transform` world. `plugin` has
 * `name`, `description`, `configKeys` (`[key, default, description]`), `exampleInput`,
 * `init(config, schema)` (optional: keeps the schema) and `process(batch)` → batches. */
export function exportTransform(plugin) {
  return {
    describe: () => info(plugin, 'js-transform'),
    init: (config, input) => initWith(plugin, config, input),
    process: (input) => guarded(() => plugin.process(fromWit(input)).map(toWit)),
  };
}

/** The `eventDecoder` interface componentize-js exports for the `decoder` world: `plugin` has
 * `init(config, declared)` and `decode(messages)` (a list of `Uint8Array`) → batches. */
export function exportDecoder(plugin) {
  return {
    describe: () => info(plugin, 'js-decoder'),
    init: (config, declared) => initWith(plugin, config, declared),
    decode: (input) =>
      guarded(() => {
        const { data, offsets } = input;
        const messages = [];
        for (let i = 0; i + 1 < offsets.length; i++) messages.push(data.subarray(offsets[i], offsets[i + 1]));
        return plugin.decode(messages).map(toWit);
      }),
  };
}
