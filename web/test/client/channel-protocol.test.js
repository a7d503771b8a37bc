/**
 * The channel protocol's pure parts (protocol.js): channel ids, the handshake URL, and the parsing
 * of every channel frame with each field checked.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODELS } from '../../client/models/index.js';
import { MAX_CHANNEL_BYTES, buildChannelUrl, isChannelId, parseChannelFrame } from '../../client/protocol.js';
import { b64, white } from './helpers.js';

test('channel ids: name or namespace:name, [A-Za-z0-9_-], at most 128 bytes', () => {
  const good = ['c1', 'scores:m1', 'A-z_0:9-_', 'x'.repeat(128), `${'n'.repeat(60)}:${'m'.repeat(67)}`];
  const bad = ['', ':a', 'a:', 'a:b:c', 'a b', 'é', 'a/b', 'x'.repeat(129), 'a::b', null, 42, undefined];
  for (const id of good) assert.equal(isChannelId(id), true, String(id));
  for (const id of bad) assert.equal(isChannelId(id), false, String(id));
  assert.equal(MAX_CHANNEL_BYTES, 128);
});

test('the channel handshake URL', () => {
  const table = [
    [['ws://g:8000', 'c1', 0], 'ws://g:8000/ws?channel=c1&since=0&refusal=frame'],
    [['ws://g:8000/', 'scores:m1', 12, '/ws', 'T-0'], 'ws://g:8000/ws?channel=scores%3Am1&since=12&epoch=T-0&refusal=frame'],
    [['wss://h/fleet', 'chat:lobby', 40, 'ws', 'E_1', 'a+b'], 'wss://h/fleet/ws?channel=chat%3Alobby&since=40&epoch=E_1&token=a%2Bb&refusal=frame'],
  ];
  for (const [args, url] of table) {
    assert.equal(buildChannelUrl(...args), url);
    assert.equal(new URL(url).searchParams.get('channel'), args[1]);
  }
});

const ctx = (extra = {}) => ({ channel: 'scores:m1', models: MODELS, model: 'json', ...extra });
const parse = (frame, extra) => parseChannelFrame(typeof frame === 'string' ? frame : JSON.stringify(frame), ctx(extra));
const W = { type: 'welcome', node: 'ws-1', channel: 'scores:m1', model: 'json', since: 12, epoch: 'T-0' };

test('welcome: node, channel, model (one the client knows), since, epoch', () => {
  assert.deepEqual(parse(W, { model: null }), { type: 'welcome', node: 'ws-1', epoch: 'T-0', model: 'json', stateless: false });
  assert.deepEqual(parse({ ...W, model: 'stream' }), { type: 'welcome', node: 'ws-1', epoch: 'T-0', model: 'stream', stateless: true });
  assert.equal(parse({ ...W, epoch: 'not an epoch!' }).epoch, null, 'an epoch that is not one is none, as in the canvas protocol');
  assert.equal(parse({ ...W, epoch: undefined }).epoch, null);
  const bad = [
    [{ ...W, channel: 'scores:m2' }, /another channel/],
    [{ ...W, channel: undefined }, /another channel/],
    [{ ...W, node: 7 }, /welcome node/],
    [{ ...W, model: 'counter' }, /welcome model "counter" \(this client knows stream, latest, json, pixels\)/],
    [{ ...W, model: undefined }, /welcome model/],
    [{ ...W, model: 'toString' }, /welcome model/],
    [{ ...W, since: -1 }, /welcome since/],
    [{ ...W, since: '12' }, /welcome since/],
  ];
  for (const [frame, pattern] of bad) {
    const got = parse(frame);
    assert.equal(got.type, 'bad_frame', JSON.stringify(frame));
    assert.match(got.detail, pattern);
  }
  assert.match(parseChannelFrame(JSON.stringify(W), { ...ctx(), models: {} }).detail, /knows none/);
});

test('state: the model\'s form, checked by the model', () => {
  assert.deepEqual(parse({ type: 'state', channel: 'scores:m1', version: 12, state: { a: 1 } }), { type: 'state', version: 12, state: { a: 1 } });
  assert.deepEqual(parse({ type: 'state', channel: 'scores:m1', version: 0, state: null }, { model: 'latest' }), { type: 'state', version: 0, state: null });
  const px = parse({ type: 'state', channel: 'scores:m1', version: 3, state: { width: 2, height: 1, pixels: b64(white(2, 1)) } }, { model: 'pixels' });
  assert.equal(px.type, 'state');
  assert.deepEqual([px.state.width, px.state.height, px.state.get(1, 0)], [2, 1, [255, 255, 255]]);
  const bad = [
    [{ type: 'state', channel: 'c1', version: 1, state: {} }, {}, /another channel/],
    [{ type: 'state', channel: 'scores:m1', version: -1, state: {} }, {}, /state version/],
    [{ type: 'state', channel: 'scores:m1', version: 1.5, state: {} }, {}, /state version/],
    [{ type: 'state', channel: 'scores:m1', version: 1 }, {}, /state: no state/],
    [{ type: 'state', channel: 'scores:m1', version: 1, state: {} }, { model: null }, /before a welcome/],
    [{ type: 'state', channel: 'scores:m1', version: 1, state: {} }, { model: 'stream' }, /a stream has no state/],
    [{ type: 'state', channel: 'scores:m1', version: 1, state: { width: 2, height: 2, pixels: b64(white(2, 1)) } }, { model: 'pixels' }, /state: canvas 2x2 needs 12 bytes/],
    [{ type: 'state', channel: 'scores:m1', version: 1, state: { width: 2, height: 2 } }, { model: 'pixels' }, /state: pixels state: pixels/],
  ];
  for (const [frame, extra, pattern] of bad) {
    const got = parse(frame, extra);
    assert.equal(got.type, 'bad_frame', JSON.stringify(frame));
    assert.match(got.detail, pattern);
  }
});

test('publication: version ≥ 1, data checked by the model (and against the state held)', () => {
  const P = { type: 'publication', channel: 'scores:m1', version: 13, data: { a: null }, published_at_ms: 1764400000000 };
  assert.deepEqual(parse(P), { type: 'publication', version: 13, data: { a: null }, publishedAtMs: 1764400000000 });
  assert.deepEqual(parse({ ...P, data: null, published_at_ms: undefined }), { type: 'publication', version: 13, data: null, publishedAtMs: null });
  const pixel = { x: 1, y: 0, color: '#ff0000' };
  assert.equal(parse({ ...P, data: pixel }, { model: 'pixels' }).type, 'publication');
  const canvas = MODELS.pixels.initial({ width: 1, height: 1 });
  const bad = [
    [{ ...P, channel: 'scores' }, {}, /another channel/],
    [{ ...P, version: 0 }, {}, /publication version/],
    [{ ...P, version: '13' }, {}, /publication version/],
    [{ ...P, data: undefined }, {}, /publication data/],
    [P, { model: null }, /before a welcome/],
    [{ ...P, published_at_ms: 'now' }, {}, /published_at_ms/],
    [{ ...P, data: { x: 1, y: 0, color: 'red' } }, { model: 'pixels' }, /publication data: pixel color/],
    [{ ...P, data: [1] }, { model: 'pixels' }, /publication data: pixel: an object/],
    [{ ...P, data: pixel }, { model: 'pixels', state: canvas }, /publication data: pixel \(1, 0\) off the 1x1 canvas/],
  ];
  for (const [frame, extra, pattern] of bad) {
    const got = parse(frame, extra);
    assert.equal(got.type, 'bad_frame', JSON.stringify(frame));
    assert.match(got.detail, pattern);
  }
});

test('reset: version and epoch, both required', () => {
  const R = { type: 'reset', channel: 'scores:m1', version: 40, epoch: 'T-1' };
  assert.deepEqual(parse(R), { type: 'reset', version: 40, epoch: 'T-1' });
  assert.deepEqual(parse(R, { model: null }), { type: 'reset', version: 40, epoch: 'T-1' });
  for (const [frame, pattern] of [
    [{ ...R, channel: 'x' }, /another channel/],
    [{ ...R, version: -2 }, /reset version/],
    [{ ...R, epoch: undefined }, /reset epoch/],
    [{ ...R, epoch: 'a b' }, /reset epoch/],
  ]) {
    assert.match(parse(frame).detail ?? '', pattern, JSON.stringify(frame));
  }
});

test('reconnect and error as in the canvas protocol; an error may name the channel', () => {
  assert.deepEqual(parse({ type: 'reconnect', reason: 'SHUTDOWN', retry_after_ms: 250 }), { type: 'notice', reason: 'SHUTDOWN', retryAfterMs: 250 });
  const E = { type: 'error', code: 'not_allowed', message: 'no', retry_after_ms: 1000 };
  const refused = { type: 'refused', code: 'not_allowed', message: 'no', retryAfterMs: 1000 };
  assert.deepEqual(parse(E), refused);
  assert.deepEqual(parse({ ...E, channel: 'scores:m1' }), refused);
  assert.match(parse({ ...E, channel: 'other' }).detail, /error of another channel/);
});

test('not JSON, binary, no type, canvas frames, unknown types', () => {
  assert.match(parseChannelFrame(new Uint8Array(2), ctx()).detail, /binary/);
  assert.match(parse('{"type":').detail, /not JSON/);
  assert.match(parse({ kind: 'x' }).detail, /no type/);
  assert.match(parse({ type: 'snapshot', canvas: 'c1' }).detail, /canvas snapshot frame on a channel session/);
  assert.match(parse({ type: 'event', canvas: 'c1' }).detail, /canvas event frame/);
  assert.deepEqual(parse({ type: 'presence', channel: 'scores:m1' }), { type: 'unknown_frame', frameType: 'presence' });
});
