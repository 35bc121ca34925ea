import assert from 'node:assert/strict';
import { test } from 'node:test';

import { tableFromIPC, tableToIPC, tableFromArrays } from 'apache-arrow';

import { calls } from './host-stub.mjs';
import {
  BatchBuilder,
  Config,
  DELETE,
  INSERT,
  PluginError,
  counterAdd,
  dorisField,
  dorisType,
  exportDecoder,
  exportTransform,
  log,
  schemaOf,
} from '../sluice-guest.js';

const cols = (spec) => spec.map(([name, dataType, nullable = true]) => ({ name, dataType, nullable }));

test('Doris types map to the Arrow fields the WIT names, and back', () => {
  const cases = [
    ['BOOLEAN', 'Bool', 'BOOLEAN'],
    ['TINYINT', 'Int8', 'TINYINT'],
    ['SMALLINT', 'Int16', 'SMALLINT'],
    ['INT', 'Int32', 'INT'],
    ['INT(11)', 'Int32', 'INT'],
    ['BIGINT', 'Int64', 'BIGINT'],
    ['FLOAT', 'Float32', 'FLOAT'],
    ['DOUBLE', 'Float64', 'DOUBLE'],
    ['DATE', 'Date32<DAY>', 'DATE'],
    ['DATETIME', 'Timestamp<SECOND>', 'DATETIME'],
    ['DATETIME(3)', 'Timestamp<MILLISECOND>', 'DATETIME(3)'],
    ['DATETIME(6)', 'Timestamp<MICROSECOND>', 'DATETIME(6)'],
    ['DECIMAL(10,2)', 'Decimal[10e+2]', 'DECIMAL(10,2)'],
    ['DECIMAL', 'Decimal[9e0]', 'DECIMAL(9,0)'],
    ['DECIMALV2', 'Decimal[27e+9]', 'DECIMAL(27,9)'],
    ['STRING', 'Utf8', 'STRING'],
    ['VARCHAR(64)', 'Utf8', 'VARCHAR(64)'],
    ['varchar(8)', 'Utf8', 'VARCHAR(8)'],
    ['CHAR', 'Utf8', 'CHAR'],
    ['LARGEINT', 'Utf8', 'LARGEINT'],
    ['JSONB', 'Utf8', 'JSON'],
    ['ARRAY<INT>', 'Utf8', 'ARRAY<INT>'],
  ];
  for (const [doris, arrow, back] of cases) {
    const f = dorisField('c', doris);
    assert.equal(String(f.type), arrow, doris);
    assert.equal(dorisType(f), back, doris);
  }
  // The same from a schema read back from IPC (generic type instances there).
  const schema = schemaOf(cases.map(([doris], i) => ({ name: `c${i}`, dataType: doris, nullable: true })));
  const read = tableFromIPC(tableToIPC(new BatchBuilder(schema).finish().data, 'stream')).schema;
  assert.deepEqual(read.fields.map(dorisType), cases.map(([, , back]) => back));
});

test('a type Sluice cannot carry is an error naming the column and the type', () => {
  assert.throws(() => dorisField('price', 'MONEY'), { message: 'column `price`: unknown Doris type `MONEY`' });
  assert.throws(() => dorisField('p', 'DECIMAL(40,2)'), {
    message: 'column `p`: type `DECIMAL(40,2)`: DECIMAL needs 1 <= precision <= 38 and scale <= precision',
  });
  assert.throws(() => dorisField('t', 'DATETIME(9)'), { message: 'column `t`: type `DATETIME(9)`: DATETIME precision must be 0-6' });
  assert.throws(() => dorisField('v', 'VARCHAR(x)'), { message: 'column `v`: type `VARCHAR(x)`: arguments must be integers' });
});

test('config: values, defaults, parsing and unknown keys', () => {
  const c = new Config([['prefix', 'p_'], ['n', '12']]);
  assert.equal(c.get('prefix'), 'p_');
  assert.equal(c.getOr('missing', 'd'), 'd');
  assert.equal(c.parseOr('n', 5), 12);
  assert.equal(c.parseOr('missing', 5), 5);
  assert.throws(() => new Config([['n', '1.5']]).parseOr('n', 0), { message: 'config `n` = "1.5": `1.5` is not an integer' });
  assert.throws(() => c.rejectUnknown(['prefix']), { message: 'unknown config key `n`; known keys: prefix' });
});

const studentTrans = {
  name: 'student-trans',
  configKeys: [['prefix', 'prefix_', 'text put in front of every name']],
  exampleInput: 'name VARCHAR(256), age INT',
  init(config, input) {
    config.rejectUnknown(['prefix']);
    this.prefix = config.getOr('prefix', 'prefix_');
    return input;
  },
  process(batch) {
    const names = batch.column('name').map((n) => (n === null ? null : this.prefix + n));
    const ages = batch.column('age').map((a) => (a === null ? null : a + 1));
    return [batch.replaceColumn('name', names).replaceColumn('age', ages)];
  },
};

test('an exported transform describes itself, checks its config and rewrites columns', () => {
  const t = exportTransform(studentTrans);
  assert.deepEqual(t.describe(), {
    name: 'student-trans',
    description: '',
    configKeys: [{ name: 'prefix', defaultValue: 'prefix_', description: 'text put in front of every name' }],
    exampleInput: 'name VARCHAR(256), age INT',
  });
  assert.throws(() => t.init([['prefx', 'x']], { columns: [] }), {
    payload: { message: 'unknown config key `prefx`; known keys: prefix', row: undefined },
  });
  const out = t.init([['prefix', 'p_']], { columns: cols([['name', 'VARCHAR(256)'], ['age', 'INT', false]]) });
  assert.deepEqual(out.columns, cols([['name', 'VARCHAR(256)'], ['age', 'INT', false]]));

  const schema = schemaOf(cols([['name', 'VARCHAR(256)'], ['age', 'INT', false]]));
  const input = tableFromArrays({ name: ['James', null], age: Int32Array.from([18, 28]) });
  const ipc = tableToIPC(input, 'stream');
  const [batch] = t.process({ table: 'db.t', arrowIpc: ipc, rowKinds: Uint8Array.from([0, 3]) });
  assert.equal(batch.table, 'db.t');
  assert.deepEqual([...batch.rowKinds], [0, 3]);
  const back = tableFromIPC(batch.arrowIpc);
  assert.deepEqual([...back.getChild('name')], ['p_James', null]);
  assert.deepEqual([...back.getChild('age')], [19, 29]);
  assert.equal(String(back.schema.fields[1].type), String(schema.fields[1].type));
});

test('what a plugin throws becomes the WIT error: PluginError with its row, anything else named', () => {
  const refuse = exportTransform({
    process() {
      throw new PluginError('refusing this batch', 0);
    },
  });
  const input = { table: undefined, arrowIpc: tableToIPC(tableFromArrays({ id: [1, 2] }), 'stream'), rowKinds: new Uint8Array() };
  assert.throws(() => refuse.process(input), { payload: { message: 'refusing this batch', row: 0 } });
  const broken = exportTransform({
    process(batch) {
      return batch.nothing.here;
    },
  });
  assert.throws(() => broken.process(input), (e) => {
    assert.match(e.payload.message, /^TypeError: .*here.* \(at sdk\.test\.mjs:\d+, in process\)$/);
    assert.equal(e.payload.row, undefined);
    return true;
  });
  assert.throws(() => exportTransform({ process: (b) => [b.replaceColumn('nope', [])] }).process(input), {
    payload: { message: 'the batch has no column `nope`; its columns are id', row: undefined },
  });
});

test('BatchBuilder converts JSON values to the column types, rounding decimals half away from zero', () => {
  const schema = schemaOf(
    cols([
      ['id', 'BIGINT', false],
      ['n', 'INT'],
      ['price', 'DECIMAL(10,2)'],
      ['ok', 'BOOLEAN'],
      ['day', 'DATE'],
      ['at', 'DATETIME'],
      ['doc', 'JSON'],
      ['x', 'DOUBLE'],
    ]),
  );
  const b = new BatchBuilder(schema, 'db.t');
  b.push({ id: 1, n: '7', price: '1.005', ok: 'true', day: '2024-01-02', at: '2024-01-02 03:04:05', doc: { a: 1 }, x: '2.5' });
  b.push({ id: '2', price: -1.005, ok: 0 }, DELETE);
  b.push({ id: 3n, price: '12e-1' });
  assert.throws(() => b.push({ n: 1 }), { message: 'column `id` is NOT NULL and the row has no value for it' });
  assert.throws(() => b.push({ id: 4, n: 'seven' }), { message: 'column `n`: `seven` is not an integer' });
  assert.throws(() => b.push({ id: 4, price: 'abc' }), { message: 'column `price`: `abc` is not a decimal number' });
  const out = b.finish();
  assert.equal(out.table, 'db.t');
  assert.equal(out.numRows, 3);
  assert.deepEqual([...out.rowKinds], [INSERT, DELETE, INSERT]);
  const t = tableFromIPC(tableToIPC(out.data, 'stream'));
  assert.deepEqual([...t.getChild('id')], [1n, 2n, 3n]);
  assert.deepEqual([...t.getChild('n')], [7, null, null]);
  assert.deepEqual([...t.getChild('price')].map((v) => (v === null ? null : String(v))), ['101', '-101', '120']);
  assert.deepEqual([...t.getChild('ok')], [true, false, null]);
  assert.deepEqual([...t.getChild('day')], [Date.UTC(2024, 0, 2), null, null]);
  assert.deepEqual([...t.getChild('at')], [Date.UTC(2024, 0, 2, 3, 4, 5), null, null]);
  assert.deepEqual([...t.getChild('doc')], ['{"a":1}', null, null]);
  assert.deepEqual([...t.getChild('x')], [2.5, null, null]);
  assert.equal(t.schema.fields[0].nullable, false);
  assert.equal(dorisType(t.schema.fields[6]), 'JSON');
});

test('an exported decoder splits the messages and returns its batches', () => {
  const d = exportDecoder({
    init(config, declared) {
      this.schema = declared;
      return declared;
    },
    decode(messages) {
      const b = new BatchBuilder(this.schema);
      messages.forEach((m, i) => {
        const event = JSON.parse(new TextDecoder().decode(m));
        try {
          b.push(event.data, event.op_type === 'delete' ? DELETE : INSERT);
        } catch (e) {
          throw e.atRow(i);
        }
      });
      return [b.finish()];
    },
  });
  d.init([], { columns: cols([['id', 'BIGINT', false], ['name', 'VARCHAR(64)']]) });
  const text = ['{"op_type":"insert","data":{"id":1,"name":"a"}}', '{"op_type":"delete","data":{"id":2}}'];
  const bytes = new TextEncoder().encode(text.join(''));
  const offsets = Uint32Array.from([0, text[0].length, text[0].length + text[1].length]);
  const [batch] = d.decode({ data: bytes, offsets });
  const t = tableFromIPC(batch.arrowIpc);
  assert.deepEqual([...t.getChild('id')], [1n, 2n]);
  assert.deepEqual([...t.getChild('name')], ['a', null]);
  assert.deepEqual([...batch.rowKinds], [INSERT, DELETE]);
  const bad = new TextEncoder().encode('{"data":{"name":"x"}}');
  assert.throws(() => d.decode({ data: bad, offsets: Uint32Array.from([0, bad.length]) }), {
    payload: { message: 'column `id` is NOT NULL and the row has no value for it', row: 0 },
  });
});

test('log and counters reach the host', () => {
  calls.length = 0;
  log('info', 'hello');
  counterAdd('rows', 3);
  assert.deepEqual(calls, [
    ['log', 'info', 'hello'],
    ['counterAdd', 'rows', 3n],
  ]);
});

test('columns are read and written whole: nulls, non-ASCII text, and values that do not fit', () => {
  const t = exportTransform({
    process(batch) {
      const names = batch.column('name');
      const ids = batch.column('id');
      const small = batch.column('small');
      return [
        batch
          .replaceColumn('name', names.map((n) => (n === null ? null : `${n}!`)))
          .replaceColumn('id', ids.map((v) => (v === null ? null : v * 2n)))
          .replaceColumn('small', small.map((v) => (v === null ? null : v + 1))),
      ];
    },
  });
  const schema = schemaOf(cols([['name', 'STRING'], ['id', 'BIGINT'], ['small', 'SMALLINT']]));
  const input = new BatchBuilder(schema);
  input.push({ name: 'héllo', id: 1, small: 1 });
  input.push({ name: null, id: null, small: null });
  input.push({ name: 'plain', id: '-5', small: -2 });
  const ipc = tableToIPC(input.finish().data, 'stream');
  const [out] = t.process({ table: undefined, arrowIpc: ipc, rowKinds: new Uint8Array() });
  const back = tableFromIPC(out.arrowIpc);
  assert.deepEqual([...back.getChild('name')], ['héllo!', null, 'plain!']);
  assert.deepEqual([...back.getChild('id')], [2n, null, -10n]);
  assert.deepEqual([...back.getChild('small')], [2, null, -1]);
  assert.equal(back.getChild('name').nullCount, 1);

  const overflow = exportTransform({ process: (b) => [b.replaceColumn('small', [40000, null, 1])] });
  assert.throws(() => overflow.process({ table: undefined, arrowIpc: ipc, rowKinds: new Uint8Array() }), {
    payload: { message: '"40000" does not fit a Int16 column (row 0)', row: undefined },
  });
});

test('a batch handed back untouched goes back as the bytes it came in', () => {
  const ipc = tableToIPC(tableFromArrays({ id: [1, 2] }), 'stream');
  const [out] = exportTransform({ process: (b) => [b] }).process({ table: 'db.t', arrowIpc: ipc, rowKinds: new Uint8Array() });
  assert.equal(out.arrowIpc, ipc);
  assert.equal(out.table, 'db.t');
});
