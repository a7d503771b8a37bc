/**
 * Several gateways through the whole client (shell + machine), with a fake clock and fake sockets:
 * the `url` option as a list, which gateway each attempt goes to (a failed attempt moves on, a
 * dropped session retries its gateway once, a notice stays), the backoff across gateways, and the
 * resume position carried from one gateway to the next.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FleetClient } from '../../client/fleet-client.js';
import { eventFor, harness, snapshot, untilNextSocket } from './helpers.js';

const A = 'ws://gw-a:8000';
const B = 'ws://gw-b:8000';
const C = 'ws://gw-c:8000';

/** The base URL a fake socket was opened on. */
const base = (socket) => socket.url.slice(0, socket.url.indexOf('/ws?'));

/** A harness that records each applied version: a snapshot's, then each event's. */
function recording(opts) {
  const h = harness(opts);
  const applied = [];
  h.client.onCanvas((_canvas, changed) => applied.push(changed ? changed.version : h.client.version));
  return { ...h, applied };
}

const welcome = (node, epoch = 'E-0') => ({ type: 'welcome', node, canvas: 'c1', since: 0, epoch });

test('the first gateway refuses: the client connects via the second and gets every version once, in order', () => {
  const h = recording({ url: [A, B], random: 0 });
  h.client.connect();
  assert.equal(base(h.last()), A, 'the first attempt goes to the first URL');
  assert.equal(h.client.gateway, A);
  h.last().fail(); // connection refused: error, then close 1006, no welcome

  assert.equal(h.client.state, 'backoff');
  assert.equal(h.client.gateway, B, 'in backoff, gateway names the next attempt');
  assert.equal(h.client.info.gatewayUrl, B);
  assert.equal(untilNextSocket(h), 1000, 'the usual first backoff delay');
  const b = h.last();
  assert.equal(base(b), B);
  assert.equal(b.since, 0);
  const connecting = h.states.filter((s) => s.state === 'connecting').map((s) => s.info.gatewayUrl);
  assert.deepEqual(connecting, [A, B], 'the connecting state names its gateway');

  b.open();
  b.send(welcome('ws-1'));
  b.send(snapshot(5));
  for (let v = 6; v <= 12; v++) b.send(eventFor(v));
  assert.deepEqual(h.applied, [5, 6, 7, 8, 9, 10, 11, 12]);
  assert.equal(h.client.version, 12);
  const c = h.client.counters;
  assert.equal(c.duplicatesDropped, 0);
  assert.equal(c.gapsSeen, 0);
  h.clock.advance(10_000);
  assert.equal(h.client.state, 'stable');
  assert.equal(h.client.gateway, B, 'the client stays on the gateway that works');
  assert.deepEqual(h.sockets.map(base), [A, B], 'A was tried once, then B');
});

test('a session on A drops, A then fails: the client moves to B and resumes with the same since and epoch', () => {
  const h = recording({ url: [A, B], random: 0 });
  h.client.connect();
  const a1 = h.last();
  a1.open();
  a1.send(welcome('ws-1', 'E-7'));
  a1.send(snapshot(3));
  a1.send(eventFor(4));
  a1.send(eventFor(5));
  h.clock.advance(10_000);
  assert.equal(h.client.state, 'stable');
  a1.serverClose(1012); // the established session drops (the node behind A went away)

  assert.equal(untilNextSocket(h), 1000);
  const a2 = h.last();
  assert.equal(base(a2), A, 'a dropped session retries the same gateway first');
  assert.equal(a2.since, 5);
  a2.fail(); // ...and A is gone too

  assert.equal(untilNextSocket(h), 2000, 'moving to B does not reset the backoff');
  const b = h.last();
  assert.equal(base(b), B);
  assert.equal(b.since, 5, 'the resume position carries over to the other gateway');
  assert.equal(b.query.get('epoch'), 'E-7');
  b.open();
  b.send(welcome('ws-2', 'E-7'));
  b.send(eventFor(6));
  b.send(eventFor(7));
  assert.deepEqual(h.applied, [3, 4, 5, 6, 7], 'no gap, no duplicate');
  const c = h.client.counters;
  assert.equal(c.gapsSeen, 0);
  assert.equal(c.duplicatesDropped, 0);
  assert.equal(c.resumesByEvents, 1);
  assert.equal(c.snapshotsApplied, 1, 'B resumed by events, no second snapshot');
  assert.equal(h.client.node, 'ws-2');
});

test('a dropped session retries its gateway once: when that session drops too, the next gateway', () => {
  const h = harness({ url: [A, B], random: 0 });
  h.client.connect();
  const serve = (s) => {
    s.open();
    s.send(welcome('ws-1'));
    s.send(snapshot(1));
  };
  serve(h.last());
  h.last().serverClose(1001); // established, dropped (before stable)
  untilNextSocket(h);
  assert.equal(base(h.last()), A);
  serve(h.last());
  h.last().serverClose(1001); // the one retry was served but dropped too
  untilNextSocket(h);
  assert.equal(base(h.last()), B);
  serve(h.last());
  h.last().serverClose(1001);
  untilNextSocket(h);
  assert.equal(base(h.last()), B, 'a drop on B retries B once');
  assert.deepEqual(h.sockets.map(base), [A, A, B, B]);
});

test('a reconnect notice stays on the same gateway (it routes the reconnect to the new node)', () => {
  const h = harness({ url: [A, B], random: 0 });
  h.client.connect();
  h.last().fail();
  untilNextSocket(h); // now on B
  const b = h.last();
  b.open();
  b.send(welcome('ws-1'));
  b.send(snapshot(9));
  b.send({ type: 'reconnect', reason: 'PARTITIONS_REVOKED', retry_after_ms: 250 });
  assert.equal(h.client.gateway, B);
  assert.equal(untilNextSocket(h), 250);
  assert.equal(base(h.last()), B);
  assert.equal(h.last().since, 9);
  assert.equal(h.client.failures, 1, 'the notice was not a failure');
});

test('all gateways down: each one in turn, the delays grow to the cap and stay there (no tight loop)', () => {
  const h = harness({ url: [A, B, C], random: 0, budgetFailures: 1000 });
  h.client.connect();
  const delays = [];
  for (let i = 0; i < 12; i++) {
    h.last().fail();
    delays.push(untilNextSocket(h));
  }
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000, 30000, 30000, 30000]);
  for (let i = 1; i < delays.length; i++) assert.ok(delays[i] >= delays[i - 1], `delay ${i} went down`);
  assert.deepEqual(h.sockets.map(base), [A, B, C, A, B, C, A, B, C, A, B, C, A]);
  assert.equal(h.client.failures, 12, 'rotation never reset the failure count');
  // Ten more minutes with the fleet still down: at most one attempt per 15 s (the cap's lowest jitter).
  const before = h.sockets.length;
  const end = h.clock.t + 600_000;
  for (;;) {
    const n = h.sockets.length;
    h.last().fail();
    if (h.clock.runUntil(() => h.sockets.length > n, end - h.clock.t) === null) break;
  }
  const attempts = h.sockets.length - before;
  assert.ok(attempts >= 10 && attempts <= 600_000 / 15_000, `${attempts} attempts in 10 minutes`);
});

test('all gateways down, with jitter: never back to the base delay while rotating', () => {
  const h = harness({ url: [A, B], random: () => Math.random(), budgetFailures: 1000 });
  h.client.connect();
  for (let n = 1; n <= 10; n++) {
    h.last().fail();
    const d = untilNextSocket(h);
    const raw = Math.min(30000, 1000 * 2 ** (n - 1));
    assert.ok(d >= raw / 2 && d <= raw, `failure ${n}: ${d} ms outside [${raw / 2}, ${raw}]`);
  }
});

test('all down with the default budget: closed after 8 failures; retry() goes on with the next gateway', () => {
  const h = harness({ url: [A, B], random: 0 });
  h.client.connect();
  while (h.client.state !== 'closed') {
    h.last().fail();
    if (h.client.state === 'backoff') untilNextSocket(h);
  }
  assert.equal(h.client.info.reason, 'retry budget exhausted');
  assert.equal(h.sockets.length, 8);
  assert.deepEqual(h.sockets.map(base), [A, B, A, B, A, B, A, B]);
  assert.equal(h.client.gateway, A, 'the next attempt goes to the gateway after the last one that failed');
  h.client.retry();
  assert.equal(base(h.last()), A);
});

test('one URL, as a string or a one-element array: every attempt goes to it', () => {
  for (const url of [A, [A]]) {
    const h = harness({ url, random: 0 });
    h.client.connect();
    h.last().fail();
    untilNextSocket(h);
    h.last().open();
    h.last().send(welcome('ws-1'));
    h.last().serverClose(1006);
    untilNextSocket(h);
    h.last().fail();
    untilNextSocket(h);
    assert.deepEqual(h.sockets.map(base), [A, A, A, A]);
    assert.deepEqual(h.client.gateways, [A]);
    assert.equal(h.client.gateway, A);
  }
});

test('nextUrl and gateway follow the rotation', () => {
  const h = harness({ url: [A, B], random: 0 });
  assert.equal(h.client.nextUrl, `${A}/ws?canvas=c1&since=0&refusal=frame`);
  h.client.connect();
  h.last().fail();
  assert.equal(h.client.nextUrl, `${B}/ws?canvas=c1&since=0&refusal=frame`);
  assert.ok(h.client.log.some((l) => /next gateway 1/.test(l)), 'the move is logged');
});

test('the url option: a string or a non-empty array of non-empty strings', () => {
  const opts = { canvas: 'c1', WebSocket: class {}, document: null };
  const make = (extra) => new FleetClient({ ...opts, ...extra });
  const fails = (extra, pattern) => assert.throws(() => make(extra), (err) => err instanceof TypeError && pattern.test(err.message), JSON.stringify(extra));
  fails({}, /^FleetClient: url is required \(e\.g\. ws:\/\/host:8000\)$/);
  fails({ url: '' }, /url is required/);
  fails({ url: 42 }, /url is required/);
  fails({ url: [] }, /url is an empty array/);
  fails({ url: [A, 42] }, /url\[1\] must be a non-empty string \(got number\)/);
  fails({ url: [''] }, /url\[0\] must be a non-empty string \(got an empty string\)/);
  fails({ url: [A, null] }, /url\[1\] .*got null/);
  fails({ urls: [A, B] }, /there is no urls option/);
  fails({ url: [A], canvas: '' }, /canvas is required/);

  const list = [A, B];
  const client = make({ url: list });
  list.push(C);
  list[0] = 'ws://changed';
  assert.deepEqual(client.gateways, [A, B], 'the list is copied');
  const copy = client.gateways;
  copy.pop();
  assert.deepEqual(client.gateways, [A, B], 'the getter returns a copy');
});
