/**
 * Channel subscriptions through the whole client (index.js's FleetClient, fake sockets): the
 * handshake URL, welcome → state → publications for each model, the resume position across
 * reconnects, resets, gaps, and one subscription per connection.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { FleetClient as CoreFleetClient } from '../../client/fleet-client.js';
import { Canvas, FleetClient, canonicalJson } from '../../client/index.js';
import { b64, harness, untilNextSocket, white } from './helpers.js';

const sha256 = (data) => createHash('sha256').update(data).digest('hex');
const G = 'ws://gateway:8000';

/** A channel client on fakes (no canvas option), with the built-in models. */
function channelHarness(opts = {}) {
  return harness({ canvas: undefined, models: undefined, ...opts, FleetClient });
}

const welcome = (channel, model, epoch = 'E1', since = 0) => ({ type: 'welcome', node: 'ws-1', channel, model, since, epoch });
const stateFrame = (channel, version, state) => ({ type: 'state', channel, version, state });
const publication = (channel, version, data) => ({ type: 'publication', channel, version, data, published_at_ms: 1764400000000 + version });
const reset = (channel, version, epoch) => ({ type: 'reset', channel, version, epoch });

/** Subscribes with handlers that record every call. */
function subscribeRecording(h, channel) {
  const calls = [];
  const sub = h.client.subscribe(channel, {
    onPublication: (data, version, info) => calls.push(['publication', data, version, info]),
    onState: (state, version) => calls.push(['state', structuredClone(state), version]),
    onReset: (info) => calls.push(['reset', info]),
  });
  return { sub, calls };
}

const pixelState = (w, h, set = []) => {
  const bytes = white(w, h);
  for (const [x, y, rgb] of set) bytes.set(rgb, (y * w + x) * 3);
  return { width: w, height: h, pixels: b64(bytes) };
};

// [model, channel, state frame's state, publications' data, the state after each, the canonical form of the last]
const MODEL_TABLE = [
  ['json', 'scores:m1', { home: 0, away: 0, meta: { period: 1 } },
    [{ home: 1 }, { meta: { period: 2, clock: '10:00' } }, { away: 2, meta: { clock: null } }],
    [{ home: 1, away: 0, meta: { period: 1 } }, { home: 1, away: 0, meta: { period: 2, clock: '10:00' } }, { home: 1, away: 2, meta: { period: 2 } }],
    '{"away":2,"home":1,"meta":{"period":2}}'],
  ['latest', 'prices:eur', { bid: 1.1 },
    [{ bid: 1.2 }, null, [1, 2]],
    [{ bid: 1.2 }, null, [1, 2]],
    '[1,2]'],
];

test('welcome → state → publications keeps sub.state (json, latest), and the hash is of its canonical JSON', async (t) => {
  for (const [model, channel, initial, datas, states, canonical] of MODEL_TABLE) {
    await t.test(model, async () => {
      const h = channelHarness();
      const { sub, calls } = subscribeRecording(h, channel);
      assert.equal(h.last().url, `${G}/ws?channel=${encodeURIComponent(channel)}&since=0&refusal=frame`);
      assert.deepEqual([sub.channel, sub.model, sub.version, sub.epoch, sub.state, sub.active], [channel, null, 0, null, undefined, true]);
      assert.equal(await sub.hash(), null, 'no state held, no hash');
      h.last().open();
      h.last().send(welcome(channel, model));
      assert.deepEqual([sub.model, sub.epoch, sub.state], [model, 'E1', undefined]);
      h.last().send(stateFrame(channel, 10, initial));
      assert.deepEqual([sub.version, sub.state], [10, initial]);
      datas.forEach((data, i) => {
        h.last().send(publication(channel, 11 + i, data));
        assert.deepEqual([sub.version, sub.state], [11 + i, states[i]], `after publication ${11 + i}`);
      });
      assert.deepEqual(calls, [
        ['state', initial, 10],
        ...datas.map((data, i) => ['publication', data, 11 + i, { channel, publishedAtMs: 1764400000011 + i }]),
      ]);
      assert.equal(canonicalJson(sub.state), canonical);
      assert.equal(await sub.hash(), sha256(canonical));
      assert.equal(await h.client.hash(), sha256(canonical), 'the client\'s hash is its subscription\'s');
      assert.equal(h.client.counters.eventsApplied, datas.length);
    });
  }
});

test('pixels: the state is a Canvas, publications set pixels, the hash is of the RGB bytes', async () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'c1');
  assert.equal(h.last().url, `${G}/ws?channel=c1&since=0&refusal=frame`);
  h.last().open();
  h.last().send(welcome('c1', 'pixels'));
  h.last().send(stateFrame('c1', 5, pixelState(3, 2, [[0, 0, [1, 2, 3]]])));
  assert.ok(sub.state instanceof Canvas);
  assert.deepEqual([sub.state.width, sub.state.height, sub.state.get(0, 0)], [3, 2, [1, 2, 3]]);
  h.last().send(publication('c1', 6, { x: 2, y: 1, color: '#ff0000' }));
  h.last().send(publication('c1', 7, { x: 0, y: 0, color: '#00ff00' }));
  assert.deepEqual([sub.version, sub.state.get(2, 1), sub.state.get(0, 0)], [7, [255, 0, 0], [0, 255, 0]]);
  const truth = white(3, 2);
  truth.set([0, 255, 0], 0);
  truth.set([255, 0, 0], (1 * 3 + 2) * 3);
  assert.equal(await sub.hash(), sha256(truth));
  assert.deepEqual(calls.map((c) => c[0]), ['state', 'publication', 'publication']);

  // A pixel off the canvas is a bad frame: not applied, and a resync from the last version.
  h.last().send(publication('c1', 8, { x: 3, y: 0, color: '#000000' }));
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.client.counters.reconnects.bad_frame, 1);
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=c1&since=7&epoch=E1&refusal=frame`);
});

test('stream: no state, every publication to onPublication, the hash of "null"', async () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'chat:lobby');
  h.last().open();
  h.last().send(welcome('chat:lobby', 'stream', 'E1', 0));
  assert.equal(sub.state, null, 'a stream holds its (empty) state from the welcome on');
  for (const [v, data] of [[1, 'hi'], [2, { user: 'a', text: 'yo' }], [3, null]]) h.last().send(publication('chat:lobby', v, data));
  assert.deepEqual(calls.map((c) => [c[0], c[1], c[2]]), [['publication', 'hi', 1], ['publication', { user: 'a', text: 'yo' }, 2], ['publication', null, 3]]);
  assert.deepEqual([sub.version, sub.state, sub.model], [3, null, 'stream']);
  assert.equal(await sub.hash(), sha256('null'));
});

// [model, state, publication data by version] — a session dropped after a few publications resumes
// from the subscription's position, on every model.
const RESUME_TABLE = [
  ['json', { n: 0 }, (v) => ({ n: v })],
  ['latest', null, (v) => v],
  ['pixels', pixelState(4, 4), (v) => ({ x: v % 4, y: 0, color: '#0000ff' })],
  ['stream', null, (v) => `m${v}`],
];

test('the resume URL carries the subscription\'s channel, since and epoch across reconnects', async (t) => {
  for (const [model, initial, dataFor] of RESUME_TABLE) {
    await t.test(model, () => {
      const h = channelHarness();
      const { sub } = subscribeRecording(h, 'ns:ch-1');
      h.last().open();
      h.last().send(welcome('ns:ch-1', model, 'E7'));
      if (model !== 'stream') h.last().send(stateFrame('ns:ch-1', 20, initial));
      else h.last().send(reset('ns:ch-1', 20, 'E7'));
      for (let v = 21; v <= 25; v++) h.last().send(publication('ns:ch-1', v, dataFor(v)));
      h.last().serverClose(1012);
      untilNextSocket(h);
      const next = h.last();
      assert.equal(next.url, `${G}/ws?channel=ns%3Ach-1&since=25&epoch=E7&refusal=frame`);
      assert.deepEqual([next.query.get('channel'), next.since, next.query.get('epoch')], ['ns:ch-1', 25, 'E7']);
      assert.equal(h.client.nextUrl, next.url);
      next.open();
      next.send(welcome('ns:ch-1', model, 'E7', 25));
      next.send(publication('ns:ch-1', 24, dataFor(24))); // a duplicate: dropped
      next.send(publication('ns:ch-1', 26, dataFor(26)));
      assert.equal(sub.version, 26);
      assert.equal(h.client.counters.duplicatesDropped, 1);
      assert.equal(h.client.counters.resumesByEvents, 1);
    });
  }
});

test('a publication gap reconnects with since = the last version applied', () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'scores:m1');
  h.last().open();
  h.last().send(welcome('scores:m1', 'json'));
  h.last().send(stateFrame('scores:m1', 3, {}));
  h.last().send(publication('scores:m1', 4, { a: 4 }));
  h.last().send(publication('scores:m1', 6, { a: 6 })); // 5 is missing
  assert.equal(h.client.state, 'backoff');
  assert.deepEqual(h.sockets[0].closeCalls, [{ code: 1000, reason: 'gap_resync' }]);
  assert.deepEqual([sub.version, sub.state], [4, { a: 4 }], 'the jumped publication was not applied');
  assert.equal(calls.filter((c) => c[0] === 'publication').length, 1);
  assert.deepEqual([h.client.counters.gapsSeen, h.client.counters.reconnects.gap_resync], [1, 1]);
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=scores%3Am1&since=4&epoch=E1&refusal=frame`);
  h.last().open();
  h.last().send(welcome('scores:m1', 'json', 'E1', 4));
  h.last().send(publication('scores:m1', 5, { a: 5 }));
  h.last().send(publication('scores:m1', 6, { a: 6, b: 1 }));
  assert.deepEqual([sub.version, sub.state], [6, { a: 6, b: 1 }]);
});

test('a reset moves a stream\'s position: the next URL carries it, publications go on from it', () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'chat:lobby');
  h.last().open();
  h.last().send(welcome('chat:lobby', 'stream', 'E1'));
  h.last().send(publication('chat:lobby', 1, 'a'));
  h.last().serverClose(1012);
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=chat%3Alobby&since=1&epoch=E1&refusal=frame`);
  h.last().open();
  h.last().send(welcome('chat:lobby', 'stream', 'E1', 1));
  // The node's window starts after 1: the client is moved to 40.
  h.last().send(reset('chat:lobby', 40, 'E1'));
  assert.deepEqual([sub.version, sub.epoch], [40, 'E1']);
  assert.deepEqual(calls.at(-1), ['reset', { channel: 'chat:lobby', version: 40, epoch: 'E1', previousVersion: 1, previousEpoch: 'E1' }]);
  h.last().send(publication('chat:lobby', 41, 'b'));
  assert.equal(sub.version, 41);
  h.last().serverClose(1012);
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=chat%3Alobby&since=41&epoch=E1&refusal=frame`);
  assert.equal(h.client.counters.resets, 1);
});

test('a reset of a stateful channel: nothing held until the state that follows; then the new epoch goes back', () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'scores:m1');
  h.last().open();
  h.last().send(welcome('scores:m1', 'json', 'E1'));
  h.last().send(stateFrame('scores:m1', 7, { a: 1 }));
  h.last().send(publication('scores:m1', 8, { b: 2 }));
  h.last().send(reset('scores:m1', 0, 'E2'));
  assert.deepEqual([sub.version, sub.epoch, sub.state], [0, 'E2', undefined]);
  assert.deepEqual(calls.at(-1), ['reset', { channel: 'scores:m1', version: 0, epoch: 'E2', previousVersion: 8, previousEpoch: 'E1' }]);
  h.last().send(publication('scores:m1', 1, { c: 3 })); // before the state: a gap, and a resync that asks for the state afresh
  assert.equal(h.client.state, 'backoff');
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=scores%3Am1&since=0&refusal=frame`);
  h.last().open();
  h.last().send(welcome('scores:m1', 'json', 'E2'));
  h.last().send(stateFrame('scores:m1', 1, { c: 3 }));
  h.last().send(publication('scores:m1', 2, { d: 4 }));
  assert.deepEqual([sub.version, sub.epoch, sub.state], [2, 'E2', { c: 3, d: 4 }]);
  h.last().serverClose(1012);
  untilNextSocket(h);
  assert.equal(h.last().url, `${G}/ws?channel=scores%3Am1&since=2&epoch=E2&refusal=frame`);
});

test('a welcome of another epoch forgets the state; the state that follows is the base', () => {
  const h = channelHarness();
  const { sub } = subscribeRecording(h, 'scores:m1');
  h.last().open();
  h.last().send(welcome('scores:m1', 'latest', 'E1'));
  h.last().send(stateFrame('scores:m1', 30, 'old'));
  h.last().serverClose(1012);
  untilNextSocket(h);
  h.last().open();
  h.last().send(welcome('scores:m1', 'latest', 'E2'));
  assert.deepEqual([sub.version, sub.state, h.client.counters.epochChanges], [0, undefined, 1]);
  h.last().send(stateFrame('scores:m1', 2, 'new'));
  assert.deepEqual([sub.version, sub.epoch, sub.state], [2, 'E2', 'new']);
});

test('one subscription per connection: a second subscribe throws until unsubscribe()', () => {
  const h = channelHarness();
  const { sub, calls } = subscribeRecording(h, 'scores:m1');
  h.last().open();
  h.last().send(welcome('scores:m1', 'json'));
  h.last().send(stateFrame('scores:m1', 4, { a: 1 }));
  assert.equal(h.client.subscription, sub);
  assert.throws(() => h.client.subscribe('scores:m2'), (e) => e instanceof Error && /already has a subscription \(to scores:m1\)/.test(e.message) && /several channels per connection come later/.test(e.message));
  assert.equal(h.sockets.length, 1, 'the refused subscribe opened nothing');

  sub.unsubscribe();
  assert.equal(h.client.state, 'closed');
  assert.deepEqual(h.sockets[0].closeCalls, [{ code: 1000, reason: 'client closed' }]);
  assert.deepEqual([sub.active, sub.version, sub.epoch, sub.state, sub.model], [false, 4, 'E1', { a: 1 }, 'json'], 'the last position and state stay readable');
  assert.equal(h.client.subscription, null);
  assert.equal(h.client.nextUrl, null);
  h.sockets[0].send(publication('scores:m1', 5, { a: 2 })); // a late frame: no handler call
  assert.equal(calls.length, 1);
  sub.unsubscribe(); // again: nothing

  const second = h.client.subscribe('scores:m2');
  assert.equal(h.client.state, 'connecting');
  assert.equal(h.last().url, `${G}/ws?channel=scores%3Am2&since=0&refusal=frame`, 'a new subscription starts from nothing');
  assert.deepEqual([second.version, second.epoch, second.state], [0, null, undefined]);
  assert.deepEqual([sub.version, sub.state], [4, { a: 1 }], 'the old one is untouched');
});

test('close() keeps the subscription; connect() resumes it', () => {
  const h = channelHarness();
  const { sub } = subscribeRecording(h, 'c1');
  h.last().open();
  h.last().send(welcome('c1', 'latest'));
  h.last().send(stateFrame('c1', 9, 1));
  h.client.close();
  assert.equal(sub.active, true);
  h.client.connect();
  assert.equal(h.last().url, `${G}/ws?channel=c1&since=9&epoch=E1&refusal=frame`);
});

test('wrong uses throw clear errors', () => {
  const h = channelHarness();
  assert.equal(h.client.nextUrl, null);
  assert.throws(() => h.client.connect(), /nothing to connect to: subscribe\(channel\) first/);
  assert.throws(() => h.client.retry(), /nothing to connect to/);
  for (const bad of ['', 'a:b:c', 'a b', 'x'.repeat(129), 42]) {
    assert.throws(() => h.client.subscribe(bad), (e) => e instanceof TypeError && /is not a channel id/.test(e.message), String(bad));
  }
  assert.throws(() => h.client.subscribe('c1', { onState: 'no' }), (e) => e instanceof TypeError && /onState must be a function/.test(e.message));
  assert.equal(h.sockets.length, 0);

  const canvas = harness();
  assert.throws(() => canvas.client.subscribe('c1'), /follows canvas c1 \(the canvas option\)/);
  const core = harness({ canvas: undefined });
  assert.throws(() => core.client.subscribe('c1'), /knows no channel models: import FleetClient from the package/);
  assert.throws(() => new FleetClient({ url: G, WebSocket: class {}, document: null, models: { x: {} } }), /models\.x is not a model/);
  assert.ok(new CoreFleetClient({ url: G, WebSocket: class {}, document: null }), 'a client without canvas is a channel client');
});

test('a welcome naming a model the client does not know is a bad frame', () => {
  const h = channelHarness();
  subscribeRecording(h, 'c1');
  h.last().open();
  h.last().send(welcome('c1', 'counter'));
  assert.equal(h.client.counters.badFrames, 1);
  assert.ok(h.client.log.some((l) => /welcome model "counter"/.test(l)));
});

test('a handler that throws is reported and does not disturb the subscription', () => {
  const reported = [];
  const saved = globalThis.reportError;
  globalThis.reportError = (e) => reported.push(e);
  try {
    const h = channelHarness();
    const sub = h.client.subscribe('c1', { onPublication: () => { throw new Error('page bug'); } });
    h.last().open();
    h.last().send(welcome('c1', 'latest'));
    h.last().send(stateFrame('c1', 0, null));
    h.last().send(publication('c1', 1, 'x'));
    h.last().send(publication('c1', 2, 'y'));
    assert.deepEqual([sub.version, sub.state, reported.length], [2, 'y', 2]);
  } finally {
    globalThis.reportError = saved;
  }
});
