/**
 * The channel models (web/client/models/): each model's apply as a table, RFC 7386's appendix A
 * for the json model's merge patch (every example), the state frames' forms, and the canonical
 * text each hash is of.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { Canvas } from '../../client/canvas.js';
import { MODELS, canonicalJson, mergePatch } from '../../client/models/index.js';
import * as json from '../../client/models/json.js';
import * as latest from '../../client/models/latest.js';
import * as pixels from '../../client/models/pixels.js';
import * as stream from '../../client/models/stream.js';
import { b64, white } from './helpers.js';

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

// RFC 7386 appendix A, in order: [original, patch, result].
const RFC7386_APPENDIX_A = [
  [{ a: 'b' }, { a: 'c' }, { a: 'c' }],
  [{ a: 'b' }, { b: 'c' }, { a: 'b', b: 'c' }],
  [{ a: 'b' }, { a: null }, {}],
  [{ a: 'b', b: 'c' }, { a: null }, { b: 'c' }],
  [{ a: ['b'] }, { a: 'c' }, { a: 'c' }],
  [{ a: 'c' }, { a: ['b'] }, { a: ['b'] }],
  [{ a: { b: 'c' } }, { a: { b: 'd', c: null } }, { a: { b: 'd' } }],
  [{ a: [{ b: 'c' }] }, { a: [1] }, { a: [1] }],
  [['a', 'b'], ['c', 'd'], ['c', 'd']],
  [{ a: 'b' }, ['c'], ['c']],
  [{ a: 'foo' }, null, null],
  [{ a: 'foo' }, 'bar', 'bar'],
  [{ e: null }, { a: 1 }, { e: null, a: 1 }],
  [[1, 2], { a: 'b', c: null }, { a: 'b' }],
  [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
];

test('json: every example of RFC 7386 appendix A', () => {
  assert.equal(RFC7386_APPENDIX_A.length, 15);
  for (const [original, patch, result] of RFC7386_APPENDIX_A) {
    const before = structuredClone(original);
    const patchBefore = structuredClone(patch);
    const got = json.apply(original, patch);
    assert.deepEqual(got, result, `${JSON.stringify(original)} + ${JSON.stringify(patch)}`);
    assert.deepEqual(original, before, 'the state is not changed');
    assert.deepEqual(patch, patchBefore, 'the patch is not changed');
    assert.deepEqual(mergePatch(original, patch), result);
  }
});

test('json: a state is never changed by later patches; untouched parts are shared', () => {
  const s0 = json.initial();
  assert.deepEqual(s0, {});
  const s1 = json.apply(s0, { team: { a: 1, b: 2 }, round: 1 });
  const s2 = json.apply(s1, { team: { b: null, c: 3 } });
  const s3 = json.apply(s2, { round: 2 });
  assert.deepEqual([s0, s1, s2, s3], [{}, { team: { a: 1, b: 2 }, round: 1 }, { team: { a: 1, c: 3 }, round: 1 }, { team: { a: 1, c: 3 }, round: 2 }]);
  assert.equal(s3.team, s2.team, 'a member the patch does not touch is the same object');
});

test('json: a "__proto__" member is a member, not a prototype', () => {
  const patch = JSON.parse('{"__proto__":{"x":1},"a":{"__proto__":null}}');
  const got = json.apply({ a: { b: 1 } }, patch);
  assert.equal(Object.getPrototypeOf(got), Object.prototype);
  assert.deepEqual(Object.keys(got), ['a', '__proto__']);
  assert.deepEqual(Object.getOwnPropertyDescriptor(got, '__proto__').value, { x: 1 });
  assert.equal(canonicalJson(got), '{"__proto__":{"x":1},"a":{"b":1}}');
  assert.equal(({}).x, undefined, 'Object.prototype untouched');
});

test('latest: the state is the last publication\'s data', () => {
  const table = [
    [null, { price: 10 }, { price: 10 }],
    [{ price: 10 }, { price: 11 }, { price: 11 }],
    [{ price: 11 }, null, null],
    [null, [1, 2], [1, 2]],
    ['x', 3.5, 3.5],
    [3.5, 'text', 'text'],
    [{ a: 1 }, { b: 2 }, { b: 2 }], // no merging
  ];
  assert.equal(latest.initial(), null);
  for (const [state, data, want] of table) assert.deepEqual(latest.apply(state, data), want, JSON.stringify([state, data]));
});

test('stream: no state, whatever is published', () => {
  assert.equal(stream.initial(), null);
  for (const data of [null, 1, 'a', [1], { a: 1 }]) {
    assert.equal(stream.check(data), null);
    assert.equal(stream.apply(null, data), null);
  }
  assert.equal(stream.fromState(null), null);
  assert.throws(() => stream.fromState({}), TypeError);
  assert.equal(stream.canonical(null), 'null');
  assert.equal(stream.stateful, false);
});

test('pixels: apply sets the pixel in place; check and the state form', () => {
  const c = pixels.initial({ width: 4, height: 3 });
  assert.ok(c instanceof Canvas);
  assert.deepEqual([c.width, c.height, c.get(3, 2)], [4, 3, [255, 255, 255]]);
  const table = [
    [{ x: 0, y: 0, color: '#ff0000' }, [0, 0], [255, 0, 0]],
    [{ x: 3, y: 2, color: '#00FF7f' }, [3, 2], [0, 255, 127]],
    [{ x: 0, y: 0, color: '#010203' }, [0, 0], [1, 2, 3]],
  ];
  for (const [data, [x, y], rgb] of table) {
    assert.equal(pixels.check(data, c), null);
    assert.equal(pixels.apply(c, data), c, 'the same canvas');
    assert.deepEqual(c.get(x, y), rgb);
  }
  const checks = [
    [null, /an object/],
    [[1, 2], /an object/],
    [{ x: -1, y: 0, color: '#000000' }, /coordinates/],
    [{ x: 0.5, y: 0, color: '#000000' }, /coordinates/],
    [{ x: 0, y: 0, color: 'red' }, /color/],
    [{ x: 0, y: 0 }, /color/],
    [{ x: 4, y: 0, color: '#000000' }, /off the 4x3 canvas/],
  ];
  for (const [data, pattern] of checks) assert.match(pixels.check(data, c) ?? '', pattern, JSON.stringify(data));
  assert.equal(pixels.check({ x: 400, y: 0, color: '#000000' }), null, 'without a canvas the size is not checked');
  assert.throws(() => pixels.initial(), RangeError);

  const bytes = white(2, 2);
  bytes.set([9, 8, 7], 3);
  const s = pixels.fromState({ width: 2, height: 2, pixels: b64(bytes) });
  assert.deepEqual(s.get(1, 0), [9, 8, 7]);
  assert.equal(pixels.canonical(s), s.pixels);
  for (const bad of [null, [], { width: 0, height: 2, pixels: b64(bytes) }, { width: 2, height: 2 }, { width: 2, height: 2, pixels: '!!' },
    { width: 3, height: 2, pixels: b64(bytes) }]) {
    assert.throws(() => pixels.fromState(bad), (e) => e instanceof TypeError || e instanceof RangeError, JSON.stringify(bad));
  }
});

test('canonical JSON: keys sorted recursively, JSON.stringify numbers and strings', () => {
  const table = [
    [null, 'null'],
    [true, 'true'],
    [0, '0'],
    [-0, '0'],
    [1e21, '1e+21'],
    [1e-7, '1e-7'],
    [0.000001, '0.000001'],
    [123.456, '123.456'],
    ['é\n"', '"é\\n\\""'],
    [[3, { b: 1, a: 2 }], '[3,{"a":2,"b":1}]'],
    [{ b: { d: 1, c: [{ z: 0, y: null }] }, a: 'x' }, '{"a":"x","b":{"c":[{"y":null,"z":0}],"d":1}}'],
    [{ '\u20ac': 1, '\r': 2, 1: 3, 'ö': 4 }, '{"\\r":2,"1":3,"ö":4,"€":1}'], // UTF-16 code unit order
  ];
  for (const [value, text] of table) assert.equal(canonicalJson(value), text, String(text));
  assert.throws(() => canonicalJson(undefined), TypeError);
  assert.throws(() => canonicalJson({ a: () => 1 }), TypeError);
});

test('each model\'s canonical form is what its hash is of', () => {
  const doc = { b: [1, { d: 2, c: 3 }], a: null };
  assert.equal(json.canonical(doc), '{"a":null,"b":[1,{"c":3,"d":2}]}');
  assert.equal(latest.canonical(doc), json.canonical(doc));
  assert.equal(sha256('null'), '74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b');
});

test('the registry: every model has the same shape', () => {
  assert.deepEqual(Object.keys(MODELS), ['stream', 'latest', 'json', 'pixels']);
  for (const [key, m] of Object.entries(MODELS)) {
    assert.equal(m.name, key);
    assert.equal(typeof m.stateful, 'boolean');
    for (const fn of ['initial', 'fromState', 'check', 'apply', 'canonical']) assert.equal(typeof m[fn], 'function', `${key}.${fn}`);
  }
  assert.deepEqual(Object.entries(MODELS).filter(([, m]) => !m.stateful).map(([k]) => k), ['stream']);
});
