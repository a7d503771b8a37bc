/**
 * Resume by version through the whole client: the anchor advances with every live event, the
 * next socket asks for since = the anchor, duplicates are dropped, a gap resyncs; and the counters
 * (protocol-error closes apart, resumes by events vs by snapshot).
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { event, eventFor, harness, snapshot, untilNextSocket, white } from './helpers.js';

test('after live events 11..50 a reconnect resumes with since=50', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  const first = h.last();
  assert.equal(first.url, 'ws://gateway:8000/ws?canvas=c1&since=0&refusal=frame');
  first.open();
  first.send(snapshot(10));
  for (let v = 11; v <= 50; v++) {
    first.send(eventFor(v));
    assert.equal(h.client.version, v, 'the anchor advances with every live event');
  }
  first.serverClose(1012);
  untilNextSocket(h);
  const next = h.last();
  assert.equal(next.url, 'ws://gateway:8000/ws?canvas=c1&since=50&refusal=frame');
  assert.equal(next.query.get('canvas'), 'c1');
  assert.equal(next.since, 50);
  assert.equal(next.query.get('refusal'), 'frame');
  next.open();
  next.send(eventFor(51));
  assert.equal(h.client.version, 51);
  assert.equal(h.client.counters.eventsApplied, 41);
});

test('a gap triggers a resync: the jumped event is not applied, the next socket asks for since = last applied', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  const first = h.last();
  first.open();
  first.send(snapshot(10));
  first.send(event(11, 0, 0, '#110000'));
  first.send(event(12, 1, 0, '#120000'));
  first.send(event(14, 3, 0, '#140000')); // 13 is missing
  assert.equal(h.client.state, 'backoff');
  assert.deepEqual(first.closeCalls, [{ code: 1000, reason: 'gap_resync' }], 'the socket was closed normally');
  assert.equal(h.client.version, 12);
  assert.deepEqual(h.client.canvas.get(3, 0), [255, 255, 255], 'the jumped event was not applied');
  assert.equal(h.client.counters.gapsSeen, 1);
  assert.equal(h.client.counters.reconnects.gap_resync, 1);

  first.send(event(15, 2, 2, '#150000')); // late frames of the left socket are not applied either
  assert.equal(h.client.version, 12);

  untilNextSocket(h);
  const second = h.last();
  assert.equal(second.since, 12);
  second.open();
  second.send(event(11, 0, 0, '#110000')); // duplicates (a server resending) are dropped
  second.send(event(12, 1, 0, '#120000'));
  second.send(event(13, 2, 0, '#130000'));
  second.send(event(14, 3, 0, '#140000'));
  assert.equal(h.client.version, 14);
  assert.equal(h.client.counters.duplicatesDropped, 2);
  assert.deepEqual(h.client.canvas.get(3, 0), [0x14, 0, 0]);
  assert.deepEqual(h.client.canvas.get(2, 0), [0x13, 0, 0]);
});

test('a snapshot sets the canvas and the anchor; an older one is dropped', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  const bytes = white(4, 4);
  bytes.set([1, 2, 3], 0);
  h.last().send(snapshot(30, { bytes }));
  assert.equal(h.client.version, 30);
  assert.deepEqual(h.client.canvas.get(0, 0), [1, 2, 3]);
  h.last().send(snapshot(20));
  assert.equal(h.client.version, 30);
  assert.deepEqual(h.client.canvas.get(0, 0), [1, 2, 3]);
  assert.equal(h.client.counters.staleSnapshots, 1);
});

test('counters: protocol-error closes apart from other closes', () => {
  const h = harness({ random: 0, budgetFailures: 100 });
  h.client.connect();
  const codes = [1002, 1003, 1007, 1009, 1012, 1013, 1006, 1001, 1000, 1012];
  for (const code of codes) {
    h.last().open();
    h.last().serverClose(code);
    untilNextSocket(h);
  }
  const c = h.client.counters;
  assert.deepEqual(c.protocolErrorCloses, { 1002: 1, 1003: 1, 1007: 1, 1009: 1 });
  assert.deepEqual(c.closes, { 1000: 1, 1001: 1, 1006: 1, 1012: 2, 1013: 1 });
  assert.deepEqual(c.reconnects, { protocol_error: 4, close_1012: 2, close_1013: 1, dropped_1006: 1, close_1001: 1, close_1000: 1 });
});

test('counters: resumes served by events vs by snapshots', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  h.last().send(snapshot(10)); // the first snapshot (since=0) is not a resume
  h.last().serverClose(1012);
  untilNextSocket(h);

  h.last().open(); // since=10, the node still holds the events
  h.last().send(event(11));
  h.last().send(event(12));
  h.last().serverClose(1012);
  untilNextSocket(h);

  h.last().open(); // since=12, the node does not hold them: a snapshot
  h.last().send(snapshot(40));
  h.last().send(event(41));
  h.last().serverClose(1012);
  untilNextSocket(h);

  h.last().open(); // since=41, nothing new yet: not counted
  h.last().serverClose(1012);
  untilNextSocket(h);

  const c = h.client.counters;
  assert.equal(c.resumesByEvents, 1);
  assert.equal(c.resumesBySnapshot, 1);
  assert.equal(c.snapshotsApplied, 2);
  assert.equal(c.eventsApplied, 3);
  assert.equal(h.last().since, 41);
});

test('a malformed frame resyncs; an unknown frame type is ignored', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  h.last().send(snapshot(10));
  h.last().send({ type: 'hello', anything: 1 });
  assert.equal(h.client.state, 'probation');
  assert.equal(h.client.counters.unknownFrames, 1);
  h.last().send('{"type":"event","canvas":"c1","version":11'); // truncated JSON
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.client.counters.badFrames, 1);
  assert.equal(h.client.counters.reconnects.bad_frame, 1);
  untilNextSocket(h);
  assert.equal(h.last().since, 10);
});

test('the client canvas ends equal to the publisher: hash of events applied across reconnects', async () => {
  const h = harness({ random: 0 });
  const truth = white(4, 4);
  const apply = (f) => truth.set([parseInt(f.color.slice(1, 3), 16), parseInt(f.color.slice(3, 5), 16), parseInt(f.color.slice(5, 7), 16)], (f.y * 4 + f.x) * 3);
  h.client.connect();
  h.last().open();
  h.last().send(snapshot(0));
  let served = 0; // the server's position for this session
  for (let v = 1; v <= 120; v++) {
    const f = eventFor(v);
    apply(f);
    if (v % 25 === 0) {
      // The server drops the session; the client resumes from its anchor and the server replays.
      h.last().serverClose(1012);
      untilNextSocket(h);
      h.last().open();
      served = h.last().since;
      for (let w = served + 1; w < v; w++) h.last().send(eventFor(w));
    }
    h.last().send(f);
  }
  assert.equal(h.client.version, 120);
  const expected = createHash('sha256').update(truth).digest('hex');
  assert.equal(await h.client.hash(), expected);
});

test('a welcome frame names the serving node without touching the stream', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  const s = h.last();
  s.open();
  assert.equal(h.client.node, null);
  s.send(JSON.stringify({ type: 'welcome', node: 'ws-2', canvas: 'c1', since: 0 }));
  assert.equal(h.client.node, 'ws-2');
  s.send(snapshot(3));
  s.send(eventFor(4));
  assert.equal(h.client.version, 4);
  assert.equal(h.client.counters.unknownFrames, 0);
  assert.equal(h.client.counters.badFrames, 0);
});

test('the epoch of the welcome goes back with every reconnect; another epoch makes the next snapshot the base', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  const first = h.last();
  assert.equal(first.query.get('epoch'), null, 'a first connect names no epoch');
  first.open();
  first.send({ type: 'welcome', node: 'ws-1', canvas: 'c1', since: 0, epoch: 'T1-0' });
  first.send(snapshot(10));
  first.send(eventFor(11));
  first.send(eventFor(12));
  assert.equal(h.client.epoch, 'T1-0');
  first.serverClose(1012);
  untilNextSocket(h);

  const second = h.last();
  assert.equal(second.url, 'ws://gateway:8000/ws?canvas=c1&since=12&epoch=T1-0&refusal=frame');
  assert.equal(h.client.nextUrl, second.url);
  second.open();
  // The topic was recreated: the node names another epoch and sends its history's snapshot,
  // older than the anchor, which replaces the canvas instead of being dropped as stale.
  second.send({ type: 'welcome', node: 'ws-2', canvas: 'c1', since: 0, epoch: 'T2-0' });
  const bytes = white(4, 4);
  bytes.set([9, 8, 7], 0);
  second.send(snapshot(3, { bytes }));
  assert.equal(h.client.version, 3);
  assert.deepEqual(h.client.canvas.get(0, 0), [9, 8, 7]);
  second.send(eventFor(4));
  assert.equal(h.client.version, 4);
  const c = h.client.counters;
  assert.deepEqual([c.epochChanges, c.staleSnapshots, c.resumesBySnapshot], [1, 0, 1]);
  second.serverClose(1012);
  untilNextSocket(h);
  assert.equal(h.last().url, 'ws://gateway:8000/ws?canvas=c1&since=4&epoch=T2-0&refusal=frame');

  // An older node names no epoch: the client keeps its anchor and resumes by since alone.
  h.last().open();
  h.last().send({ type: 'welcome', node: 'ws-old', canvas: 'c1', since: 4 });
  h.last().send(eventFor(5));
  assert.deepEqual([h.client.version, h.client.epoch], [5, null]);
  h.last().serverClose(1012);
  untilNextSocket(h);
  assert.equal(h.last().url, 'ws://gateway:8000/ws?canvas=c1&since=5&refusal=frame');
});
