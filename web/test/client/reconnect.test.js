/**
 * Reconnection through the whole client (shell + machine) with a fake clock and fake sockets:
 * backoff growth and reset, attempt-tied timers, the single reconnect timer, intentional close,
 * reconnect notices and refusals, the retry budget, and page visibility.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FleetClient } from '../../client/fleet-client.js';
import { harness, snapshot, untilNextSocket } from './helpers.js';

const MINUTES = 60_000;

test('open-then-close repeatedly makes the delay grow (open alone never resets it)', () => {
  const h = harness({ random: 0, budgetFailures: 100 });
  h.client.connect();
  const delays = [];
  for (let i = 0; i < 8; i++) {
    h.last().open(); // the server accepts...
    h.last().serverClose(1000); // ...and closes at once
    delays.push(untilNextSocket(h));
  }
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
  assert.equal(h.client.failures, 8);
  assert.equal(h.client.counters.opens, 8);
  assert.equal(h.client.counters.stable, 0);
});

test('the delay also grows with jitter (a server that accepts and closes at once)', () => {
  const h = harness({ random: () => Math.random(), budgetFailures: 100 });
  h.client.connect();
  let previousMax = 0;
  for (let n = 1; n <= 6; n++) {
    h.last().open();
    h.last().serverClose(1002);
    const d = untilNextSocket(h);
    const raw = Math.min(30000, 1000 * 2 ** (n - 1));
    assert.ok(d >= raw / 2 && d <= raw, `failure ${n}: ${d} ms outside [${raw / 2}, ${raw}]`);
    assert.ok(d >= previousMax / 2, 'never back to the base');
    previousMax = raw;
  }
});

test('only a connection stable for the full period resets the backoff (stable − 1 ms does not)', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 1000); // failure 1

  h.last().open();
  h.clock.advance(9_999); // one ms short of stableMs
  assert.equal(h.client.state, 'probation');
  h.last().serverClose(1012);
  assert.equal(untilNextSocket(h), 2000, 'closing at stable − 1 ms still grows the delay');

  h.last().open();
  h.clock.advance(10_000);
  assert.equal(h.client.state, 'stable');
  assert.equal(h.client.failures, 0);
  h.last().serverClose(1012);
  assert.equal(untilNextSocket(h), 1000, 'after a full stable period the delay is back to the base');
});

test("an old socket's stability timer cannot reset the new socket's backoff", () => {
  // clearTimeout does nothing: attempt 1's stable timer fires, during attempt 2's probation.
  const h = harness({ random: 0, leakyClear: true });
  const t0 = h.clock.t;
  h.client.connect();
  h.last().open(); // attempt 1: its stable timer is due at t0 + 10 000
  h.clock.advance(8_500);
  h.last().serverClose(1012); // failure 1 → retry after 1 000 ms
  assert.equal(untilNextSocket(h), 1000);
  const second = h.last();
  second.open(); // attempt 2 at t0 + 9 500, in probation until t0 + 19 500
  h.clock.advance(t0 + 10_000 - h.clock.t); // attempt 1's stable timer fires now
  assert.equal(h.client.state, 'probation', 'attempt 2 is not stable yet');
  assert.equal(h.client.failures, 1, 'the backoff was not reset');
  assert.ok(h.client.counters.staleEvents >= 1);
  assert.equal(h.client.counters.stable, 0);
  h.clock.advance(1);
  second.serverClose(1012);
  assert.equal(untilNextSocket(h), 2000, 'the next delay still grows');
});

test('many close and error events leave exactly one reconnect timer', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  const first = h.last();
  first.open();
  // A storm: errors, closes with different codes, repeated; then events of the socket we left.
  first.error();
  first.error();
  first.serverClose(1006);
  first.fail();
  first.serverClose(1012);
  first.serverClose(1013);
  first.error();
  h.clock.advance(1); // let the client's own close handshake finish
  first.serverClose(1000);
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.clock.pending(), 1, 'one timer: the reconnect timer');
  assert.equal(h.client.failures, 1, 'one failure, not seven');
  assert.deepEqual(h.client.counters.reconnects, { dropped_1006: 1 });

  untilNextSocket(h);
  assert.equal(h.sockets.length, 2);
  // Late events of the first socket cannot touch the second one.
  first.serverClose(1012);
  first.error();
  first.send({ type: 'reconnect', reason: 'SHUTDOWN', retry_after_ms: 0 });
  assert.equal(h.client.state, 'connecting');
  assert.deepEqual(h.last().closeCalls, []);
  assert.equal(h.client.counters.staleEvents, 3);
  h.clock.advance(9_000); // less than the connect timeout: nothing else may open a socket
  assert.equal(h.sockets.length, 2, 'no second socket from a second timer');

  // The same while connecting (a failed handshake: error then close 1006, repeated).
  const second = h.last();
  second.fail();
  second.fail();
  second.error();
  assert.equal(h.clock.pending(), 1);
  untilNextSocket(h);
  assert.equal(h.sockets.length, 3);
  h.clock.advance(9_000);
  assert.equal(h.sockets.length, 3);
});

for (const leakyClear of [false, true]) {
  const how = leakyClear ? ' (even if timer cancels were lost)' : '';
  test(`an intentional close never reconnects${how}`, () => {
    for (const when of ['connecting', 'probation', 'stable', 'backoff']) {
      const h = harness({ random: 0, leakyClear });
      h.client.connect();
      const sock = h.last();
      if (when !== 'connecting') sock.open();
      if (when === 'stable') h.clock.advance(10_000);
      if (when === 'backoff') sock.serverClose(1012);
      assert.equal(h.client.state, when);

      h.client.close();
      assert.equal(h.client.state, 'closed');
      assert.equal(h.client.info.reason, 'closed by user');
      if (when !== 'backoff') assert.deepEqual(sock.closeCalls[0], { code: 1000, reason: 'client closed' });
      if (!leakyClear) assert.equal(h.clock.pending(), 0, `${when}: every timer cancelled`);

      // Late events of the closed socket, and a lot of time.
      sock.error();
      sock.serverClose(1006);
      h.clock.advance(60 * MINUTES);
      assert.equal(h.sockets.length, 1, `${when}: zero new sockets`);
      assert.equal(h.client.state, 'closed');
    }
  });
}

test("attempt 1's connect timeout cannot close attempt 2's healthy socket", () => {
  const h = harness({ random: 0, leakyClear: true }); // attempt 1's timers are not cancelled
  const t0 = h.clock.t;
  h.client.connect(); // attempt 1: connect timeout due at t0 + 10 000
  h.clock.advance(100);
  h.last().fail(); // failed handshake → retry after 1 000 ms
  untilNextSocket(h);
  const second = h.last();
  second.open(); // attempt 2 is healthy from t0 + 1 100
  h.clock.advance(t0 + 10_500 - h.clock.t); // past attempt 1's timeout (and its close wait)
  assert.deepEqual(second.closeCalls, [], 'attempt 2 was not closed');
  assert.equal(h.client.state, 'probation');
  assert.equal(h.sockets.length, 2);
  h.clock.advance(1_000);
  assert.equal(h.client.state, 'stable');
});

test("attempt 1's connect timeout cannot close attempt 2 while attempt 2 is still connecting", () => {
  const h = harness({ random: 0, leakyClear: true });
  const t0 = h.clock.t;
  h.client.connect(); // attempt 1: connect timeout due at t0 + 10 000
  h.clock.advance(100);
  h.last().fail();
  untilNextSocket(h); // attempt 2 at t0 + 1 100: its own timeout is due at t0 + 11 100
  const second = h.last();
  h.clock.advance(t0 + 10_500 - h.clock.t); // attempt 1's timeout fired at t0 + 10 000
  assert.equal(h.client.state, 'connecting');
  assert.deepEqual(second.closeCalls, [], 'attempt 2 was not closed by attempt 1 timer');
  second.open(); // a slow but successful handshake
  assert.equal(h.client.state, 'probation');
  h.clock.advance(10_000);
  assert.equal(h.client.state, 'stable');
  assert.equal(h.sockets.length, 2);
});

test('a connect timeout closes a socket that never opens, and counts as a failure', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.clock.advance(9_999);
  assert.equal(h.client.state, 'connecting');
  h.clock.advance(1);
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.sockets[0].closeCalls.length, 1);
  assert.equal(h.client.counters.reconnects.connect_timeout, 1);
  assert.equal(untilNextSocket(h), 1000);
});

test('a socket error without a close gives up after closeWaitMs', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  h.last().readyState = 3; // a broken socket that will never report its close
  h.last().error();
  assert.equal(h.client.state, 'probation');
  h.clock.advance(1_999);
  assert.equal(h.client.state, 'probation');
  h.clock.advance(1);
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.client.counters.reconnects.socket_error, 1);
});

test('a reconnect notice reconnects after retry_after_ms + jitter without growing the backoff or spending the budget', () => {
  const h = harness({ random: 0.5 });
  h.client.connect();
  h.last().open();
  h.last().serverClose(1012); // failure 1: 1 000 · (1 − 0.5 · 0.5) = 750 ms
  assert.equal(untilNextSocket(h), 750);

  const second = h.last();
  second.open();
  second.send(snapshot(5));
  second.send({ type: 'reconnect', reason: 'FAILBACK_TO_RECOVERED_SERVER', retry_after_ms: 250 });
  assert.equal(h.client.state, 'backoff');
  assert.deepEqual(second.closeCalls, [{ code: 1000, reason: 'reconnect notice' }], 'closed normally');
  assert.equal(untilNextSocket(h), Math.round(250 + 0.5 * 125), 'retry_after_ms + jitter (at most half of it)');
  assert.equal(h.last().since, 5);
  assert.equal(h.client.failures, 1, 'the notice did not count as a failure');

  // Many notices in a row never exhaust the budget.
  for (let i = 0; i < 30; i++) {
    h.last().open();
    h.last().send({ type: 'reconnect', reason: 'PARTITIONS_REVOKED', retry_after_ms: 250 });
    untilNextSocket(h);
  }
  assert.notEqual(h.client.state, 'closed');
  assert.equal(h.client.counters.reconnects.reconnect_notice, 31);

  h.last().open();
  h.last().serverClose(1012); // failure 2: 2 000 · 0.75
  assert.equal(untilNextSocket(h), 1500, 'the backoff continues from failure 1, not from 32');
});

test('notice jitter stays within [retry_after_ms, retry_after_ms + min(noticeJitterMs, retry_after_ms / 2)]', () => {
  for (const r of [0, 0.3, 0.999999]) {
    const h = harness({ random: r });
    h.client.connect();
    h.last().open();
    h.last().send({ type: 'reconnect', reason: 'MAINTENANCE', retry_after_ms: 250 });
    const d = untilNextSocket(h);
    assert.ok(d >= 250 && d <= 375, `r=${r}: ${d}`);
  }
});

test('a paced notice (retry_after_ms 0: the node spread the notices) is followed at once', () => {
  const h = harness({ random: 0.999999 });
  h.client.connect();
  h.last().open();
  h.last().send({ type: 'reconnect', reason: 'FAILBACK_TO_RECOVERED_SERVER', retry_after_ms: 0 });
  assert.equal(untilNextSocket(h), 0);
});

test('an error frame with retry_after_ms then close 1013 waits at least that long, as a failure', () => {
  const h = harness({ random: 0.999 });
  h.client.connect();
  h.last().open();
  h.last().send({ type: 'error', code: 'no_owner', message: 'no node owns partition 3', retry_after_ms: 5000 });
  h.last().serverClose(1013);
  assert.equal(h.client.state, 'backoff');
  assert.equal(h.client.info.cause, 'refused');
  const d = untilNextSocket(h);
  assert.ok(d >= 5000 && d <= 5500, `waited ${d} ms`);
  assert.equal(h.client.failures, 1, 'a refusal is a failure');
  assert.deepEqual(h.client.counters.reconnects, { refused: 1 }, 'the 1013 after the frame is not a second reconnect');
  assert.equal(h.client.counters.refusals, 1);

  // A refusal with a short retry_after_ms still waits the (grown) backoff.
  h.last().open();
  h.last().send({ type: 'error', code: 'no_owner', message: '', retry_after_ms: 10 });
  h.last().serverClose(1013);
  const d2 = untilNextSocket(h);
  assert.ok(d2 >= 1000 && d2 <= 2000, `second refusal waited ${d2} ms`);
});

test('retry budget: 8 failures within 2 minutes → closed "retry budget exhausted"; retry() starts again', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.last().open();
  h.last().send(snapshot(5));
  for (let i = 1; i <= 8; i++) {
    if (i > 1) h.last().open();
    h.last().serverClose(1006);
    if (i < 8) untilNextSocket(h);
  }
  assert.equal(h.client.state, 'closed');
  const last = h.states[h.states.length - 1];
  assert.equal(last.state, 'closed');
  assert.equal(last.info.reason, 'retry budget exhausted');
  assert.equal(last.info.message, 'connection lost — retry');
  assert.equal(h.client.counters.budgetExhausted, 1);
  assert.ok(h.clock.t - h.states[0].at < 120_000, 'the 8 failures happened within the window');

  h.clock.advance(60 * MINUTES);
  assert.equal(h.sockets.length, 8, 'no more attempts after the budget ran out');

  h.client.retry();
  assert.equal(h.client.state, 'connecting');
  assert.equal(h.sockets.length, 9);
  assert.equal(h.last().since, 5, 'resumes from the last version applied');
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 1000, 'retry() starts with a fresh backoff');
});

test('failures spread wider than the window never exhaust the budget', () => {
  const h = harness({ random: 0, baseDelayMs: 6000, maxDelayMs: 6000, budgetFailures: 3, budgetWindowMs: 10_000 });
  h.client.connect();
  for (let i = 0; i < 20; i++) {
    h.last().open();
    h.last().serverClose(1006);
    untilNextSocket(h);
  }
  assert.notEqual(h.client.state, 'closed');
});

test('a stable connection clears the budget window', () => {
  const h = harness({ random: 0, budgetFailures: 3 });
  h.client.connect();
  const start = h.clock.t;
  for (let round = 0; round < 5; round++) {
    h.last().open();
    h.last().serverClose(1006); // a failure (the second of its episode after the first round)
    untilNextSocket(h);
    h.last().open();
    h.clock.advance(10_000); // stable: the episode is over
    h.last().serverClose(1012); // the first failure of the next episode
    untilNextSocket(h);
  }
  assert.ok(h.clock.t - start < 120_000, '10 failures within the default window');
  assert.notEqual(h.client.state, 'closed');
});

test('while the page is hidden, failure delays are multiplied by 4', () => {
  const h = harness({ random: 0 });
  h.client.connect();
  h.client.setHidden(true);
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 4 * 1000);
  h.client.setHidden(false);
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 2000);
});

test('page visibility comes from document when there is one', () => {
  const listeners = new Map();
  const doc = {
    visibilityState: 'hidden',
    addEventListener: (name, fn) => listeners.set(name, fn),
    removeEventListener: (name) => listeners.delete(name),
  };
  const h = harness({ random: 0, document: doc });
  h.client.connect();
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 4000, 'hidden from the start');
  doc.visibilityState = 'visible';
  listeners.get('visibilitychange')();
  h.last().open();
  h.last().serverClose(1006);
  assert.equal(untilNextSocket(h), 2000);
  h.client.close();
  assert.equal(listeners.size, 0, 'the listener is removed on close');
});

test('works without document (Node): no crash, the page counts as visible', () => {
  assert.equal(typeof globalThis.document, 'undefined');
  class NoopSocket {
    close() {}
  }
  const client = new FleetClient({ url: 'ws://x', canvas: 'c1', WebSocket: NoopSocket, setTimeout: () => 0, clearTimeout: () => {} });
  client.connect();
  assert.equal(client.state, 'connecting');
  client.close();
  assert.equal(client.state, 'closed');
});

test('a socket constructor that throws is a failed attempt, not a crash', () => {
  const h = harness({ random: 0 });
  let calls = 0;
  const client = new FleetClient({
    url: 'ws://gateway:8000',
    canvas: 'c1',
    WebSocket: class {
      constructor() {
        calls++;
        throw new SyntaxError('bad url');
      }
    },
    setTimeout: h.clock.setTimeout,
    clearTimeout: h.clock.clearTimeout,
    random: () => 0,
    now: h.clock.now,
    document: null,
  });
  client.connect();
  assert.equal(client.state, 'backoff');
  assert.equal(h.clock.pending(), 1);
  h.clock.advance(1000);
  assert.equal(calls, 2);
});

test('a listener that throws does not break the client', () => {
  const h = harness({ random: 0 });
  const original = console.error;
  console.error = () => {};
  try {
    h.client.onState(() => {
      throw new Error('page bug');
    });
    h.client.connect();
    h.last().open();
    assert.equal(h.client.state, 'probation');
  } finally {
    console.error = original;
  }
});

test('a listener may call close() from inside a callback', () => {
  const h = harness({ random: 0 });
  h.client.onState((state) => {
    if (state === 'backoff') h.client.close();
  });
  h.client.connect();
  h.last().open();
  h.last().serverClose(1012);
  assert.equal(h.client.state, 'closed');
  h.clock.advance(10 * MINUTES);
  assert.equal(h.sockets.length, 1);
});

test('onLog gets a short log of transitions', () => {
  const lines = [];
  const h = harness({ random: 0, logLimit: 5 });
  h.client.onLog((l) => lines.push(l));
  h.client.connect();
  h.last().open();
  h.last().serverClose(1012);
  assert.ok(lines.some((l) => /idle -> connecting attempt=1 since=0/.test(l)), lines.join('\n'));
  assert.ok(lines.some((l) => /connecting -> probation/.test(l)));
  assert.ok(lines.some((l) => /probation -> backoff .*cause=close_1012 delayMs=1000/.test(l)));
  assert.match(lines[0], /^\d\d:\d\d:\d\d\.\d\d\d /);
  assert.ok(h.client.log.length <= 5);
});
