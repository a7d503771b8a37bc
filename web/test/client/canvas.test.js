/**
 * The canvas model (snapshot decode, event apply, hash = SHA-256 of the canonical bytes) and the
 * protocol's frame parsing and URL.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { Canvas, decodeBase64, parseColor, sha256Hex } from '../../client/canvas.js';
import { buildUrl, closeCause, isProtocolError, parseFrame } from '../../client/protocol.js';
import { b64, harness, snapshot, white } from './helpers.js';

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** Distinct bytes for a width × height canvas. */
function pattern(width, height) {
  const bytes = new Uint8Array(width * height * 3);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 37 + 11) & 0xff;
  return bytes;
}

test('snapshot decode: base64 of row-major RGB bytes', () => {
  const bytes = pattern(3, 2);
  const c = Canvas.fromBase64(3, 2, b64(bytes));
  assert.equal(c.width, 3);
  assert.equal(c.height, 2);
  assert.deepEqual([...c.pixels], [...bytes]);
  // pixel (x, y) starts at (y * width + x) * 3
  assert.deepEqual(c.get(2, 1), [bytes[15], bytes[16], bytes[17]]);
  assert.deepEqual(c.get(0, 1), [bytes[9], bytes[10], bytes[11]]);
});

test('a new canvas is white', () => {
  const c = new Canvas(2, 2);
  assert.deepEqual([...c.pixels], Array(12).fill(255));
});

test('event apply sets exactly one pixel', () => {
  const c = new Canvas(4, 3);
  c.applyEvent({ x: 1, y: 2, color: '#ff8001' });
  const expected = white(4, 3);
  expected.set([0xff, 0x80, 0x01], (2 * 4 + 1) * 3);
  assert.deepEqual([...c.pixels], [...expected]);
  assert.throws(() => c.applyEvent({ x: 4, y: 0, color: '#000000' }), RangeError);
  assert.throws(() => c.applyEvent({ x: 0, y: 0, color: 'red' }), RangeError);
});

test('hash equals the SHA-256 of the canonical bytes', async () => {
  const white64 = new Canvas(64, 64);
  assert.equal(await white64.hash(), sha256(white(64, 64)));
  const bytes = pattern(5, 7);
  const c = new Canvas(5, 7, bytes.slice());
  assert.equal(await c.hash(), sha256(bytes));
  c.applyEvent({ x: 4, y: 6, color: '#00ff00' });
  bytes.set([0, 255, 0], (6 * 5 + 4) * 3);
  assert.equal(await c.hash(), sha256(bytes));
  assert.match(await c.hash(), /^[0-9a-f]{64}$/);
  assert.equal(await sha256Hex(new Uint8Array(0)), sha256(new Uint8Array(0)));
});

test('the client canvas: snapshot then events, hash equal to node:crypto', async () => {
  const h = harness({ random: 0 });
  const changes = [];
  h.client.onCanvas((canvas, changed) => changes.push(changed));
  assert.equal(await h.client.hash(), null, 'no canvas before the first snapshot');
  h.client.connect();
  h.last().open();
  const bytes = pattern(4, 4);
  h.last().send(snapshot(7, { bytes }));
  h.last().send({ type: 'event', canvas: 'c1', version: 8, x: 3, y: 3, color: '#0a0b0c', published_at_ms: 1 });
  bytes.set([10, 11, 12], (3 * 4 + 3) * 3);
  assert.deepEqual(changes, [null, { x: 3, y: 3, color: '#0a0b0c', version: 8 }]);
  assert.deepEqual([...h.client.canvas.pixels], [...bytes]);
  assert.equal(await h.client.hash(), sha256(bytes));
});

test('parseColor and decodeBase64', () => {
  assert.deepEqual(parseColor('#ff0000'), [255, 0, 0]);
  assert.deepEqual(parseColor('#A0b1C2'), [0xa0, 0xb1, 0xc2]);
  for (const bad of ['ff0000', '#ff000', '#gg0000', '#ff00000', null, 7]) assert.equal(parseColor(bad), null);
  assert.deepEqual([...decodeBase64('AAEC')], [0, 1, 2]);
  assert.equal(decodeBase64('***'), null);
});

test('parseFrame: the five frame types', () => {
  const bytes = pattern(2, 1);
  assert.deepEqual(parseFrame(JSON.stringify({ type: 'snapshot', canvas: 'c1', version: 12, width: 2, height: 1, pixels: b64(bytes) }), 'c1'),
    { type: 'snapshot', version: 12, width: 2, height: 1, pixels: bytes });
  assert.deepEqual(
    parseFrame('{"type":"event","canvas":"c1","version":13,"x":1,"y":2,"color":"#ff0000","published_at_ms":1764400000000}', 'c1'),
    { type: 'event', version: 13, x: 1, y: 2, color: '#ff0000', rgb: [255, 0, 0], publishedAtMs: 1764400000000 });
  assert.deepEqual(parseFrame('{"type":"reconnect","reason":"FAILBACK_TO_RECOVERED_SERVER","retry_after_ms":250}', 'c1'),
    { type: 'notice', reason: 'FAILBACK_TO_RECOVERED_SERVER', retryAfterMs: 250 });
  assert.deepEqual(parseFrame('{"type":"error","code":"no_owner","message":"m","retry_after_ms":1000}', 'c1'),
    { type: 'refused', code: 'no_owner', message: 'm', retryAfterMs: 1000 });
  assert.deepEqual(parseFrame('{"type":"error","code":"not_served_here","message":"m"}', 'c1'),
    { type: 'refused', code: 'not_served_here', message: 'm', retryAfterMs: 0 });
  assert.deepEqual(parseFrame('{"type":"welcome","node":"ws-1","canvas":"c1","since":0,"epoch":"q5XGvJ9mR2yqH7Y1cjTQfA-0"}', 'c1'),
    { type: 'welcome', node: 'ws-1', epoch: 'q5XGvJ9mR2yqH7Y1cjTQfA-0' });
  // An older server names none; a value that is not an epoch is not sent back.
  for (const epoch of [undefined, null, '', 'a b', 'a&since=1', 7, 'x'.repeat(101)]) {
    const frame = JSON.stringify({ type: 'welcome', node: 'ws-1', canvas: 'c1', since: 0, epoch });
    assert.deepEqual(parseFrame(frame, 'c1'), { type: 'welcome', node: 'ws-1', epoch: null }, String(epoch));
  }
  assert.deepEqual(parseFrame('{"type":"hello"}', 'c1'), { type: 'unknown_frame', frameType: 'hello' });
});

test('parseFrame: untrustworthy frames are bad frames, never exceptions', () => {
  const cases = [
    new ArrayBuffer(4),
    'not json',
    'null',
    '{"no":"type"}',
    JSON.stringify(snapshot(1, { canvas: 'c2' })),
    JSON.stringify({ ...snapshot(1), pixels: b64(new Uint8Array(5)) }),
    JSON.stringify({ ...snapshot(1), pixels: '***' }),
    JSON.stringify({ ...snapshot(1), width: 0 }),
    JSON.stringify({ ...snapshot(1), version: -1 }),
    '{"type":"event","canvas":"c1","version":0,"x":1,"y":2,"color":"#ff0000"}',
    '{"type":"event","canvas":"c1","version":1.5,"x":1,"y":2,"color":"#ff0000"}',
    '{"type":"event","canvas":"c1","version":3,"x":-1,"y":2,"color":"#ff0000"}',
    '{"type":"event","canvas":"c1","version":3,"x":1,"y":2,"color":"red"}',
    '{"type":"event","canvas":"other","version":3,"x":1,"y":2,"color":"#ff0000"}',
  ];
  for (const data of cases) assert.equal(parseFrame(data, 'c1').type, 'bad_frame', String(data));
});

test('buildUrl and close codes', () => {
  assert.equal(buildUrl('ws://host:8000', 'c1', 0), 'ws://host:8000/ws?canvas=c1&since=0&refusal=frame');
  assert.equal(buildUrl('wss://host/fleet/', 'a-b_C', 50), 'wss://host/fleet/ws?canvas=a-b_C&since=50&refusal=frame');
  assert.equal(buildUrl('ws://host:8000', 'c1', 50, '/ws', 'q5X-_G-0'), 'ws://host:8000/ws?canvas=c1&since=50&epoch=q5X-_G-0&refusal=frame');
  assert.equal(buildUrl('ws://host:8000', 'c1', 50, '/ws', null), 'ws://host:8000/ws?canvas=c1&since=50&refusal=frame');
  assert.equal(buildUrl('ws://host:8000', 'c1', 5, '/ws', 'e-0', 'a.b+c/d=.e'), 'ws://host:8000/ws?canvas=c1&since=5&epoch=e-0&token=a.b%2Bc%2Fd%3D.e&refusal=frame');
  assert.equal(buildUrl('ws://host:8000', 'c1', 5, '/ws', null, ''), 'ws://host:8000/ws?canvas=c1&since=5&refusal=frame');
  for (const code of [1002, 1003, 1007, 1009]) assert.equal(isProtocolError(code), true);
  for (const code of [1000, 1001, 1006, 1008, 1011, 1012, 1013]) assert.equal(isProtocolError(code), false);
  assert.equal(closeCause(1006), 'dropped_1006');
  assert.equal(closeCause(1007), 'protocol_error');
  assert.equal(closeCause(1012), 'close_1012');
});
