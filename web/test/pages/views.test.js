// Unit tests of the `/` page's pure parts (web/pages/views.js): which channel an address names,
// the JSON tree's lines, what changed between two versions, and the stream list's bound.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_CHANNEL, StreamLog, changedPaths, isChanged, jsonLines, linesText, pageChannel, streamItemText } from '../../pages/views.js';

test('the page address names the channel: ?channel=, else ?canvas= (the old name), else c1', () => {
  const table = [
    ['', DEFAULT_CHANNEL, false],
    ['?channel=scores:final', 'scores:final', false],
    ['?canvas=c2', 'c2', false],
    ['?channel=chat:lobby&canvas=c2', 'chat:lobby', false],
    ['?canvas=c2&channel=', 'c2', false], // an empty parameter counts as absent
    ['?channel=scores%3Afinal', 'scores:final', false],
    ['?channel=a:b:c', 'a:b:c', true],
    ['?channel=%20c1', ' c1', true],
    [`?channel=${'x'.repeat(129)}`, 'x'.repeat(129), true],
    [`?channel=${'x'.repeat(128)}`, 'x'.repeat(128), false],
  ];
  for (const [search, id, bad] of table) {
    const got = pageChannel(search);
    assert.equal(got.id, id, search);
    assert.equal(got.error !== null, bad, `${search}: ${got.error}`);
  }
  assert.match(pageChannel('?channel=a:b:c').error, /invalid channel id "a:b:c": use name or namespace:name/);
});

/** The value with its object keys sorted, recursively (what the tree shows). */
const sorted = (v) => (Array.isArray(v) ? v.map(sorted) : v && typeof v === 'object'
  ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v);

test('the tree is the value pretty-printed with sorted keys, for any JSON value', () => {
  const values = [
    null, 0, -1.5, 1e21, true, 'a "quoted"\nline', [], {},
    { home: 2, away: 1 },
    { z: { b: [1, { y: null, x: [] }], a: {} }, 'a/b~c': 'esc', '': 'empty key', ü: 'utf' },
    [[[]], [{}], 'x'],
  ];
  for (const v of values) {
    const text = linesText(jsonLines(v));
    assert.equal(text, JSON.stringify(sorted(v), null, 2), JSON.stringify(v));
    assert.deepEqual(JSON.parse(text), v);
  }
});

test('each line carries the JSON Pointer of what it shows, and its depth', () => {
  const lines = jsonLines({ b: [7, { 'x/y': 1 }], a: 'v' });
  assert.deepEqual(lines.map((l) => [l.path, l.depth]), [
    ['', 0], ['/a', 1], ['/b', 1], ['/b/0', 2], ['/b/1', 2], ['/b/1/x~1y', 3], ['/b/1', 2], ['/b', 1], ['', 0],
  ]);
  const kinds = jsonLines({ k: 'v', n: 1, t: false, z: null }).flatMap((l) => l.tokens.filter((t) => t.kind !== 'punct').map((t) => t.kind));
  assert.deepEqual(kinds, ['key', 'string', 'key', 'number', 'key', 'boolean', 'key', 'null']);
});

test('changedPaths: added and changed members, kind changes, not removals', () => {
  const table = [
    [{ a: 1 }, { a: 1 }, []],
    [{ a: 1 }, { a: 2 }, ['/a']],
    [{ a: 1 }, { a: 1, b: { c: 1 } }, ['/b']],
    [{ a: 1, gone: 2 }, { a: 1 }, []],
    [{ a: { b: 1, c: 2 } }, { a: { b: 1, c: 3 } }, ['/a/c']],
    [{ a: [1, 2] }, { a: [1, 3] }, ['/a/1']],
    [{ a: [1, 2] }, { a: [1, 2, 3] }, ['/a']],
    [{ a: { b: 1 } }, { a: 5 }, ['/a']],
    [{ a: 5 }, { a: [5] }, ['/a']],
    [null, { bid: 1 }, ['']],
    [{ bid: 1 }, 'x', ['']],
    ['x', 'x', []],
    [{ 'a/b': 1 }, { 'a/b': 2 }, ['/a~1b']],
  ];
  for (const [before, after, want] of table) assert.deepEqual(changedPaths(before, after), want, `${JSON.stringify(before)} → ${JSON.stringify(after)}`);
});

test('isChanged marks a changed path and everything inside it, nothing beside it', () => {
  const changed = ['/b', '/c/0'];
  assert.ok(isChanged('/b', changed));
  assert.ok(isChanged('/b/x/y', changed));
  assert.ok(isChanged('/c/0', changed));
  assert.ok(!isChanged('/bb', changed), 'a sibling whose name starts alike');
  assert.ok(!isChanged('/c', changed), 'the parent');
  assert.ok(!isChanged('', changed));
  assert.ok(isChanged('/anything', ['']), 'a whole new value');
});

test('the stream list keeps the last `limit` publications in order and counts the rest', () => {
  const log = new StreamLog(200);
  for (let v = 1; v <= 650; v++) log.push({ version: v, data: { text: `m${v}` }, publishedAtMs: null });
  assert.equal(log.items.length, 200);
  assert.deepEqual(log.items.map((i) => i.version), Array.from({ length: 200 }, (_, i) => 451 + i));
  assert.equal(log.received, 650);
  assert.equal(log.dropped, 450);
  assert.equal(log.push({ version: 651, data: null, publishedAtMs: null }), 1, 'a push past the bound drops one');
  assert.equal(new StreamLog(2).push({ version: 1, data: 1, publishedAtMs: null }), 0);
});

test('a reset (or a new state) clears the stream list and says where it starts', () => {
  const log = new StreamLog(3);
  for (let v = 1; v <= 5; v++) log.push({ version: v, data: v, publishedAtMs: null });
  log.clear('reset to version 2040 of epoch T-1');
  assert.deepEqual(log.items, []);
  assert.equal(log.received, 0);
  assert.equal(log.dropped, 0);
  assert.equal(log.note, 'reset to version 2040 of epoch T-1');
  log.push({ version: 2041, data: 'after', publishedAtMs: null });
  assert.deepEqual(log.items.map((i) => i.version), [2041]);
  assert.throws(() => new StreamLog(0), RangeError);
});

test('a stream item shows its version, its publication time (UTC) and its data as compact JSON', () => {
  assert.deepEqual(streamItemText({ version: 7, data: { text: 'hi', n: [1, 2] }, publishedAtMs: Date.UTC(2026, 0, 2, 3, 4, 5, 678) }),
    { version: 'v7', time: '03:04:05.678', data: '{"text":"hi","n":[1,2]}' });
  assert.deepEqual(streamItemText({ version: 1, data: 'plain', publishedAtMs: null }), { version: 'v1', time: '', data: '"plain"' });
});
