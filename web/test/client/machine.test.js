/**
 * The pure state machine, directly: the transition table (state × event → state, effects),
 * purity, and the bounds of the backoff and its jitter.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BUDGET_EXHAUSTED,
  CLOSED_BY_USER,
  DEFAULTS,
  GATEWAY_OUTCOMES,
  backoffDelay,
  initialState,
  nextGateway,
  noticeDelay,
  transition,
} from '../../client/machine.js';

/** A state in `phase` with attempt 3 and an anchor at version 10 on a 4×4 canvas. */
function st(phase, extra = {}) {
  return { ...initialState(), phase, attempt: 3, version: 10, base: { width: 4, height: 4 }, ...extra };
}

/** Effects without notify/log, as short strings: `open_socket`, `set_timer:retry`, … */
function fx(effects) {
  return effects
    .filter((e) => e.type !== 'notify' && e.type !== 'log')
    .map((e) => (e.timer ? `${e.type}:${e.timer}` : e.type));
}

function deepFreeze(o) {
  if (o && typeof o === 'object' && !ArrayBuffer.isView(o) && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

const NOW = 1_000_000;
const ev = (e) => ({ now: NOW, rand: 0, ...e });
const CANCEL_ATTEMPT = ['cancel_timer:connect', 'cancel_timer:close_wait', 'cancel_timer:stable'];
const snap = (version) => ({ type: 'snapshot', attempt: 3, version, width: 4, height: 4, pixels: new Uint8Array(48).fill(255) });
const pix = (version) => ({ type: 'event', attempt: 3, version, x: 1, y: 2, color: '#ff0000', rgb: [255, 0, 0] });
const welcome = (epoch) => ({ type: 'welcome', attempt: 3, node: 'ws-2', epoch });

// [name, state, event, expected phase, expected effects (without notify/log), extra check]
const TABLE = [
  // idle
  ['idle + connect opens attempt 1 with since 0', initialState(), { type: 'connect' }, 'connecting',
    ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.equal(s.attempt, 1);
      assert.deepEqual(e.find((x) => x.type === 'open_socket'), { type: 'open_socket', attempt: 1, since: 0, epoch: null, gateway: 0 });
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, DEFAULTS.connectTimeoutMs);
    }],
  ['idle + timer does nothing', initialState(), { type: 'timer', timer: 'retry', attempt: 0 }, 'idle', []],
  ['idle + disconnect → closed', initialState(), { type: 'disconnect' }, 'closed',
    ['cancel_timer:retry', ...CANCEL_ATTEMPT]],
  // connecting
  ['connecting + open → probation with the stable timer', st('connecting'), { type: 'open', attempt: 3 }, 'probation',
    ['cancel_timer:connect', 'set_timer:stable'], (s, e) => {
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, DEFAULTS.stableMs);
      assert.equal(e.find((x) => x.type === 'set_timer').attempt, 3);
    }],
  ['connecting + open of attempt 2 is stale', st('connecting'), { type: 'open', attempt: 2 }, 'connecting', [],
    (s) => assert.equal(s.counters.staleEvents, 1)],
  ['connecting + connect timeout → backoff, socket closed', st('connecting'), { type: 'timer', timer: 'connect', attempt: 3 }, 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s) => {
      assert.equal(s.cause, 'connect_timeout');
      assert.equal(s.counters.reconnects.connect_timeout, 1);
    }],
  ['connecting + connect timeout of attempt 2 is stale', st('connecting'), { type: 'timer', timer: 'connect', attempt: 2 }, 'connecting', []],
  ['connecting + close 1006 (failed handshake) → backoff', st('connecting'), { type: 'close', attempt: 3, code: 1006 }, 'backoff',
    [...CANCEL_ATTEMPT, 'set_timer:retry'], (s) => assert.equal(s.cause, 'dropped_1006')],
  ['connecting + error waits for the close', st('connecting'), { type: 'error', attempt: 3 }, 'connecting',
    ['cancel_timer:stable', 'close_socket', 'set_timer:close_wait'], (s) => assert.equal(s.errored, true)],
  // probation
  ['probation + stable timer → stable, backoff reset', st('probation', { failures: 5, failureTimes: [NOW - 1] }),
    { type: 'timer', timer: 'stable', attempt: 3 }, 'stable', [], (s) => {
      assert.equal(s.failures, 0);
      assert.deepEqual(s.failureTimes, []);
    }],
  ['probation + stable timer of attempt 2 is stale', st('probation', { failures: 5 }),
    { type: 'timer', timer: 'stable', attempt: 2 }, 'probation', [], (s) => assert.equal(s.failures, 5)],
  ['probation + connect timer (leaked, same attempt) does nothing', st('probation'),
    { type: 'timer', timer: 'connect', attempt: 3 }, 'probation', []],
  ['probation + close 1012 → backoff, failures + 1', st('probation', { failures: 2 }),
    { type: 'close', attempt: 3, code: 1012 }, 'backoff', [...CANCEL_ATTEMPT, 'set_timer:retry'], (s, e) => {
      assert.equal(s.failures, 3);
      assert.equal(s.cause, 'close_1012');
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, 4000);
    }],
  ['probation + close of attempt 2 is stale', st('probation'), { type: 'close', attempt: 2, code: 1012 }, 'probation', []],
  ['probation + error → still probation, errored, close_wait', st('probation'), { type: 'error', attempt: 3 }, 'probation',
    ['cancel_timer:stable', 'close_socket', 'set_timer:close_wait']],
  ['errored probation + stable timer cannot make it stable', st('probation', { errored: true, failures: 4 }),
    { type: 'timer', timer: 'stable', attempt: 3 }, 'probation', [], (s) => assert.equal(s.failures, 4)],
  ['errored probation + close_wait → backoff (socket_error)', st('probation', { errored: true }),
    { type: 'timer', timer: 'close_wait', attempt: 3 }, 'backoff', [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'],
    (s) => assert.equal(s.cause, 'socket_error')],
  ['probation + close_wait without an error does nothing', st('probation'),
    { type: 'timer', timer: 'close_wait', attempt: 3 }, 'probation', []],
  ['probation + reconnect notice → backoff, failures unchanged', st('probation', { failures: 2 }),
    { type: 'notice', attempt: 3, reason: 'FAILBACK_TO_RECOVERED_SERVER', retryAfterMs: 250 }, 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s, e) => {
      assert.equal(s.failures, 2);
      assert.deepEqual(s.failureTimes, []);
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, 250);
    }],
  ['probation + refusal → backoff of at least retry_after_ms', st('probation'),
    { type: 'refused', attempt: 3, code: 'no_owner', message: '', retryAfterMs: 5000 }, 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s, e) => {
      assert.equal(s.failures, 1);
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, 5000);
    }],
  ['probation + snapshot → applied, anchor set', st('probation', { version: 0, base: null }), snap(12), 'probation',
    ['apply_snapshot'], (s) => {
      assert.equal(s.version, 12);
      assert.deepEqual(s.base, { width: 4, height: 4 });
    }],
  ['probation + snapshot older than the anchor is dropped', st('probation'), snap(7), 'probation', [],
    (s) => assert.equal(s.version, 10)],
  // epoch (the welcome names the history the anchor belongs to)
  ['probation + first welcome stores its epoch, keeps the anchor', st('probation', { epoch: null }), welcome('T-0'), 'probation', [],
    (s) => {
      assert.deepEqual([s.epoch, s.node, s.version, s.counters.epochChanges], ['T-0', 'ws-2', 10, 0]);
      assert.deepEqual(s.base, { width: 4, height: 4 });
    }],
  ['probation + welcome of the same epoch keeps the anchor', st('probation', { epoch: 'T-0' }), welcome('T-0'), 'probation', [],
    (s) => assert.deepEqual([s.epoch, s.version, s.counters.epochChanges], ['T-0', 10, 0])],
  ['probation + welcome of another epoch forgets the anchor and the canvas', st('probation', { epoch: 'T-0' }), welcome('U-0'), 'probation', [],
    (s) => {
      assert.deepEqual([s.epoch, s.version, s.base, s.counters.epochChanges], ['U-0', 0, null, 1]);
    }],
  ['after another epoch, an older snapshot is the new base', st('probation', { epoch: 'U-0', version: 0, base: null }), snap(3), 'probation',
    ['apply_snapshot'], (s) => assert.deepEqual([s.version, s.counters.staleSnapshots], [3, 0])],
  ['after another epoch, an event before the snapshot is a gap', st('probation', { epoch: 'U-0', version: 0, base: null }), pix(11), 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s) => assert.equal(s.cause, 'gap_resync')],
  ['probation + welcome without an epoch (an older server) clears it, keeps the anchor', st('probation', { epoch: 'T-0' }), welcome(null),
    'probation', [], (s) => assert.deepEqual([s.epoch, s.version, s.counters.epochChanges], [null, 10, 0])],
  ['backoff + retry timer → the socket sends the anchor\'s epoch back', st('backoff', { epoch: 'T-0' }),
    { type: 'timer', timer: 'retry', attempt: 3 }, 'connecting', ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'open_socket'), { type: 'open_socket', attempt: 4, since: 10, epoch: 'T-0', gateway: 0 });
    }],
  ['backoff + retry timer before any snapshot → no epoch (the client holds nothing yet)', st('backoff', { epoch: 'T-0', version: 0, base: null }),
    { type: 'timer', timer: 'retry', attempt: 3 }, 'connecting', ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'open_socket'), { type: 'open_socket', attempt: 4, since: 0, epoch: null, gateway: 0 });
    }],
  ['backoff + retry timer holding version 0 → the epoch goes with since=0', st('backoff', { epoch: 'T-0', version: 0 }),
    { type: 'timer', timer: 'retry', attempt: 3 }, 'connecting', ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'open_socket'), { type: 'open_socket', attempt: 4, since: 0, epoch: 'T-0', gateway: 0 });
    }],
  ['closed + retry() keeps the epoch with the anchor', st('closed', { epoch: 'T-0', reason: BUDGET_EXHAUSTED }), { type: 'retry' }, 'connecting',
    ['open_socket', 'set_timer:connect'], (s, e) => assert.equal(e.find((x) => x.type === 'open_socket').epoch, 'T-0')],
  ['backoff + late welcome of another epoch is not taken', st('backoff', { epoch: 'T-0' }), welcome('U-0'), 'backoff', [],
    (s) => assert.deepEqual([s.epoch, s.version], ['T-0', 10])],
  // stable
  ['stable + next event → applied, anchor advances', st('stable'), pix(11), 'stable', ['apply_event'],
    (s) => assert.equal(s.version, 11)],
  ['stable + duplicate event → dropped', st('stable'), pix(10), 'stable', [],
    (s) => assert.equal(s.counters.duplicatesDropped, 1)],
  ['stable + gap → resync (backoff), not applied', st('stable'), pix(12), 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s) => {
      assert.equal(s.version, 10);
      assert.equal(s.counters.gapsSeen, 1);
      assert.equal(s.cause, 'gap_resync');
    }],
  ['stable + event before any snapshot → resync', st('stable', { version: 0, base: null }), pix(1), 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry']],
  ['stable + event off the canvas → resync as a bad frame', st('stable'), { ...pix(11), x: 4 }, 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry'], (s) => assert.equal(s.counters.badFrames, 1)],
  ['stable + bad frame → resync', st('stable'), { type: 'bad_frame', attempt: 3, detail: 'not JSON' }, 'backoff',
    [...CANCEL_ATTEMPT, 'close_socket', 'set_timer:retry']],
  ['stable + unknown frame → ignored', st('stable'), { type: 'unknown_frame', attempt: 3, frameType: 'hello' }, 'stable', []],
  ['stable + stable timer again does nothing', st('stable'), { type: 'timer', timer: 'stable', attempt: 3 }, 'stable', []],
  ['stable + close 1000 → backoff at the base delay', st('stable'), { type: 'close', attempt: 3, code: 1000 }, 'backoff',
    [...CANCEL_ATTEMPT, 'set_timer:retry'], (s, e) => assert.equal(e.find((x) => x.type === 'set_timer').delayMs, 1000)],
  ['stable + frame of attempt 2 is stale', st('stable'), { ...pix(11), attempt: 2 }, 'stable', [],
    (s) => assert.equal(s.version, 10)],
  ['stable + disconnect → closed, socket closed', st('stable'), { type: 'disconnect' }, 'closed',
    ['cancel_timer:retry', ...CANCEL_ATTEMPT, 'close_socket'], (s) => assert.equal(s.reason, CLOSED_BY_USER)],
  // backoff
  ['backoff + retry timer → connecting attempt 4 with since = anchor', st('backoff'),
    { type: 'timer', timer: 'retry', attempt: 3 }, 'connecting', ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.equal(s.attempt, 4);
      assert.equal(e.find((x) => x.type === 'open_socket').since, 10);
    }],
  ['backoff + retry timer of attempt 2 is stale', st('backoff'), { type: 'timer', timer: 'retry', attempt: 2 }, 'backoff', []],
  ['backoff + close (late, own socket) does not schedule again', st('backoff'), { type: 'close', attempt: 3, code: 1006 }, 'backoff', []],
  ['backoff + error does not schedule again', st('backoff'), { type: 'error', attempt: 3 }, 'backoff', []],
  ['backoff + late frame is not applied', st('backoff'), pix(11), 'backoff', [], (s) => assert.equal(s.version, 10)],
  ['backoff + retry() → connect now, retry timer cancelled', st('backoff', { failures: 3 }), { type: 'retry' }, 'connecting',
    ['cancel_timer:retry', 'open_socket', 'set_timer:connect'], (s) => assert.equal(s.failures, 3)],
  ['backoff + connect() does nothing', st('backoff'), { type: 'connect' }, 'backoff', []],
  ['backoff + disconnect → closed, no socket to close', st('backoff'), { type: 'disconnect' }, 'closed',
    ['cancel_timer:retry', ...CANCEL_ATTEMPT]],
  // closed
  ['closed + retry timer does nothing', st('closed'), { type: 'timer', timer: 'retry', attempt: 3 }, 'closed', []],
  ['closed + close event does nothing', st('closed'), { type: 'close', attempt: 3, code: 1012 }, 'closed', []],
  ['closed + open event does nothing', st('closed'), { type: 'open', attempt: 3 }, 'closed', []],
  ['closed + disconnect does nothing', st('closed'), { type: 'disconnect' }, 'closed', []],
  ['closed + retry() → connecting, fresh budget, same anchor', st('closed', { failures: 8, failureTimes: [1, 2], reason: BUDGET_EXHAUSTED }),
    { type: 'retry' }, 'connecting', ['open_socket', 'set_timer:connect'], (s, e) => {
      assert.equal(s.failures, 0);
      assert.deepEqual(s.failureTimes, []);
      assert.equal(s.reason, null);
      assert.equal(e.find((x) => x.type === 'open_socket').since, 10);
    }],
  ['closed + connect() → connecting', st('closed'), { type: 'connect' }, 'connecting', ['open_socket', 'set_timer:connect']],
  // budget
  ['the 8th failure within the window → closed, budget exhausted', st('probation', { failures: 7, failureTimes: [NOW - 7, NOW - 6, NOW - 5, NOW - 4, NOW - 3, NOW - 2, NOW - 1] }),
    { type: 'close', attempt: 3, code: 1006 }, 'closed', [...CANCEL_ATTEMPT], (s, e) => {
      assert.equal(s.reason, BUDGET_EXHAUSTED);
      const n = e.find((x) => x.type === 'notify');
      assert.equal(n.info.reason, BUDGET_EXHAUSTED);
      assert.equal(n.info.message, 'connection lost — retry');
    }],
  ['failures older than the window do not count', st('probation', { failures: 7, failureTimes: Array.from({ length: 7 }, (_, i) => NOW - 120_000 - i) }),
    { type: 'close', attempt: 3, code: 1006 }, 'backoff', [...CANCEL_ATTEMPT, 'set_timer:retry'],
    (s) => assert.deepEqual(s.failureTimes, [NOW])],
  // visibility
  ...['idle', 'connecting', 'probation', 'stable', 'backoff', 'closed'].map((phase) => [
    `${phase} + visibility hidden keeps the phase`, st(phase), { type: 'visibility', hidden: true }, phase, [],
    (s) => assert.equal(s.hidden, true),
  ]),
  ['hidden: a failure waits hiddenMultiplier times longer', st('probation', { hidden: true }),
    { type: 'close', attempt: 3, code: 1012 }, 'backoff', [...CANCEL_ATTEMPT, 'set_timer:retry'],
    (s, e) => assert.equal(e.find((x) => x.type === 'set_timer').delayMs, 4 * 1000)],
];

test('transition table: state × event → state, effects', async (t) => {
  for (const [name, state, event, phase, effects, check] of TABLE) {
    await t.test(name, () => {
      const input = deepFreeze(structuredClone(state)); // any mutation of the input throws
      const out = transition(input, ev(event));
      assert.equal(out.state.phase, phase);
      assert.deepEqual(fx(out.effects), effects);
      if (out.state.phase !== state.phase) {
        const n = out.effects.filter((e) => e.type === 'notify');
        assert.equal(n.length, 1, 'one notify per phase change');
        assert.equal(n[0].phase, phase);
      } else {
        assert.equal(out.effects.filter((e) => e.type === 'notify').length, 0, 'no notify without a phase change');
      }
      if (check) check(out.state, out.effects);
    });
  }
});

test('transition is deterministic: the same state and event give the same result', () => {
  const s = st('probation', { failures: 2 });
  const e = ev({ type: 'close', attempt: 3, code: 1006, rand: 0.37 });
  assert.deepEqual(transition(s, e), transition(s, e));
});

test('an unknown event type leaves the state as it is', () => {
  const s = st('stable');
  const out = transition(s, ev({ type: 'nonsense' }));
  assert.equal(out.state, s);
  assert.deepEqual(out.effects, []);
});

test('invalid settings are all reported at once', () => {
  assert.throws(() => initialState({ baseDelayMs: -1, jitter: 2, budgetFailures: 0 }), (err) => {
    assert.match(err.message, /baseDelayMs=-1/);
    assert.match(err.message, /jitter=2/);
    assert.match(err.message, /budgetFailures=0/);
    return true;
  });
});

test('jitter stays within its bounds, for edge and random values', () => {
  const cfg = DEFAULTS;
  const rands = [0, Number.MIN_VALUE, 1e-12, 0.25, 0.5, 0.75, 0.999999999, 1 - Number.EPSILON];
  for (let i = 0; i < 5000; i++) rands.push(Math.random());
  for (let n = 1; n <= 40; n++) {
    const d = Math.min(cfg.maxDelayMs, cfg.baseDelayMs * 2 ** (n - 1));
    for (const r of rands) {
      const delay = backoffDelay(n, r, cfg);
      assert.ok(Number.isInteger(delay), `integer ms (n=${n}, r=${r})`);
      assert.ok(delay >= d * (1 - cfg.jitter), `n=${n} r=${r}: ${delay} below ${d * (1 - cfg.jitter)}`);
      assert.ok(delay <= d, `n=${n} r=${r}: ${delay} above ${d}`);
      assert.ok(delay <= cfg.maxDelayMs, 'never above the cap');
    }
  }
  // The first retry is within 0.5–1 s; at the cap, within 15–30 s.
  assert.equal(backoffDelay(1, 0, cfg), 1000);
  assert.equal(backoffDelay(1, 1 - Number.EPSILON, cfg), 500);
  assert.equal(backoffDelay(30, 0, cfg), 30000);
  assert.equal(backoffDelay(30, 1 - Number.EPSILON, cfg), 15000);
  // Jitter actually varies the delay (it is not a constant).
  assert.notEqual(backoffDelay(3, 0, cfg), backoffDelay(3, 0.5, cfg));
  // Out-of-range randoms are clamped, never widen the bounds.
  for (const r of [-1, 1, 2, NaN]) {
    const delay = backoffDelay(2, r, cfg);
    assert.ok(delay >= 1000 && delay <= 2000, `r=${r}: ${delay}`);
  }
  // A server's retry_after_ms plus jitter: at most noticeJitterMs and at most half the delay.
  // (retry_after_ms, greatest delay): 0 is a paced notice, followed at once.
  for (const [asked, most] of [[250, 375], [0, 0], [5000, 5000 + cfg.noticeJitterMs]]) {
    for (const r of rands) {
      const delay = noticeDelay(asked, r, cfg);
      assert.ok(delay >= asked && delay <= most, `notice ${asked} r=${r}: ${delay}`);
    }
  }
});

test('the delay grows with each failure until the cap', () => {
  const delays = Array.from({ length: 8 }, (_, i) => backoffDelay(i + 1, 0, DEFAULTS));
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
});

// ---------------------------------------------------------------------------------------------
// Gateways

// [index, count, outcome, retried] → [next index, retried after]
const ROTATION = [
  // a failed attempt (no welcome) moves on at once, wrapping around, and clears `retried`
  [0, 2, 'failed', false, 1, false],
  [1, 2, 'failed', false, 0, false],
  [0, 2, 'failed', true, 1, false],
  [2, 3, 'failed', false, 0, false],
  // an established session that dropped: the same gateway once, then the next
  [0, 2, 'dropped', false, 0, true],
  [0, 2, 'dropped', true, 1, false],
  [1, 2, 'dropped', true, 0, false],
  [1, 3, 'dropped', false, 1, true],
  // a notice (drain, hand-over): the same gateway routes the reconnect; `retried` untouched
  [0, 2, 'notice', false, 0, false],
  [1, 2, 'notice', true, 1, true],
  // one gateway: always index 0
  [0, 1, 'failed', false, 0, false],
  [0, 1, 'dropped', false, 0, true],
  [0, 1, 'dropped', true, 0, false],
  [0, 1, 'notice', false, 0, false],
];

test('nextGateway: index × count × outcome × retried → next index, retried', () => {
  for (const [index, count, outcome, retried, want, wantRetried] of ROTATION) {
    const got = nextGateway({ index, count, outcome, retried });
    assert.deepEqual(got, { index: want, retried: wantRetried }, `${outcome} on ${index}/${count} retried=${retried}`);
  }
  assert.deepEqual(nextGateway({ index: 0, count: 2, outcome: 'dropped' }), { index: 0, retried: true }, 'retried defaults to false');
  assert.deepEqual([...GATEWAY_OUTCOMES].sort(), ['dropped', 'failed', 'notice']);
});

test('nextGateway: a drop retries the same gateway exactly once, failures visit every gateway in turn', () => {
  let at = { index: 0, retried: false };
  const visited = [];
  for (const outcome of ['dropped', 'dropped', 'failed', 'failed', 'failed', 'dropped', 'failed']) {
    at = nextGateway({ ...at, count: 3, outcome });
    visited.push(at.index);
  }
  assert.deepEqual(visited, [0, 1, 2, 0, 1, 1, 2]);
});

test('nextGateway rejects what it cannot rotate over', () => {
  for (const bad of [
    { index: 0, count: 0, outcome: 'failed' },
    { index: 0, count: 1.5, outcome: 'failed' },
    { index: 2, count: 2, outcome: 'failed' },
    { index: -1, count: 2, outcome: 'failed' },
    { index: 0, count: 2, outcome: 'closed' },
  ]) {
    assert.throws(() => nextGateway(bad), RangeError, JSON.stringify(bad));
  }
});

test('initialState takes the number of gateways (an integer ≥ 1)', () => {
  assert.equal(initialState().gateways, 1);
  const s = initialState({}, 3);
  assert.equal(s.gateways, 3);
  assert.equal(s.gateway, 0);
  for (const bad of [0, -1, 1.5, NaN, '2']) {
    assert.throws(() => initialState({}, /** @type {any} */ (bad)), (err) => err instanceof RangeError && /gateways=/.test(err.message));
  }
});

/** A state with two gateways, on `gateway`, in `phase` (attempt 3, anchor 10 of epoch T-0). */
const two = (phase, extra = {}) => st(phase, { gateways: 2, gateway: 0, epoch: 'T-0', ...extra });
const notify = (e) => e.find((x) => x.type === 'notify');

// [name, state, event, phase, gateway after, retried after, extra check]
const GATEWAY_TABLE = [
  ['a failed handshake (close 1006 while connecting) → the next gateway', two('connecting'),
    { type: 'close', attempt: 3, code: 1006 }, 'backoff', 1, false,
    (s, e) => {
      assert.equal(notify(e).info.gateway, 1, 'backoff tells which gateway comes next');
      assert.ok(e.some((x) => x.type === 'log' && /next gateway 1/.test(x.line)));
    }],
  ['a refusal before any welcome (error frame, then 1013) → the next gateway', two('probation'),
    { type: 'refused', attempt: 3, code: 'no_owner', message: '', retryAfterMs: 1000 }, 'backoff', 1, false],
  ['an open socket that closes before its welcome (1001 from a dying gateway) → the next gateway', two('probation'),
    { type: 'close', attempt: 3, code: 1001 }, 'backoff', 1, false],
  ['a connect timeout → the next gateway, wrapping around', two('connecting', { gateway: 1 }),
    { type: 'timer', timer: 'connect', attempt: 3 }, 'backoff', 0, false],
  ['an established session that drops (1012) → the same gateway once', two('stable', { served: true }),
    { type: 'close', attempt: 3, code: 1012 }, 'backoff', 0, true,
    (s, e) => assert.equal(notify(e).info.gateway, 0)],
  ['an established session that drops with 1006 → the same gateway once too (the code plays no part)', two('probation', { served: true }),
    { type: 'close', attempt: 3, code: 1006 }, 'backoff', 0, true],
  ['a gap on an established session → the same gateway once', two('stable', { served: true }),
    pix(12), 'backoff', 0, true],
  ['the one retry after a drop fails → the next gateway', two('connecting', { retried: true }),
    { type: 'close', attempt: 3, code: 1006 }, 'backoff', 1, false],
  ['the one retry after a drop drops too, before stable → the next gateway', two('probation', { served: true, retried: true }),
    { type: 'close', attempt: 3, code: 1012 }, 'backoff', 1, false],
  ['a reconnect notice → the same gateway, not a failure', two('stable', { served: true, gateway: 1 }),
    { type: 'notice', attempt: 3, reason: 'PARTITIONS_REVOKED', retryAfterMs: 250 }, 'backoff', 1, false,
    (s) => assert.equal(s.failures, 0)],
  ['stable clears retried (the gateway works again)', two('probation', { served: true, retried: true }),
    { type: 'timer', timer: 'stable', attempt: 3 }, 'stable', 0, false],
  ['rotation keeps the backoff growing (failures not reset)', two('connecting', { failures: 4, failureTimes: [NOW - 4, NOW - 3, NOW - 2, NOW - 1] }),
    { type: 'close', attempt: 3, code: 1006 }, 'backoff', 1, false,
    (s, e) => {
      assert.equal(s.failures, 5);
      assert.equal(e.find((x) => x.type === 'set_timer').delayMs, backoffDelay(5, 0, DEFAULTS));
    }],
  ['the failure that spends the budget still picks the next gateway (for retry())', two('connecting', { failures: 7, failureTimes: [NOW - 7, NOW - 6, NOW - 5, NOW - 4, NOW - 3, NOW - 2, NOW - 1] }),
    { type: 'close', attempt: 3, code: 1006 }, 'closed', 1, false],
  ['the retry timer opens the chosen gateway with the same since and epoch', two('backoff', { gateway: 1 }),
    { type: 'timer', timer: 'retry', attempt: 3 }, 'connecting', 1, false,
    (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'open_socket'), { type: 'open_socket', attempt: 4, since: 10, epoch: 'T-0', gateway: 1 });
      assert.equal(notify(e).info.gateway, 1);
      assert.equal(s.served, false, 'a new attempt has no welcome yet');
    }],
  ['a welcome marks the session established', two('probation'),
    { type: 'welcome', attempt: 3, node: 'ws-2', epoch: 'T-0' }, 'probation', 0, false,
    (s) => assert.equal(s.served, true)],
];

test('transition table: which gateway the next attempt uses', async (t) => {
  for (const [name, state, event, phase, gateway, retried, check] of GATEWAY_TABLE) {
    await t.test(name, () => {
      const out = transition(deepFreeze(structuredClone(state)), ev(event));
      assert.equal(out.state.phase, phase);
      assert.equal(out.state.gateway, gateway, 'gateway');
      assert.equal(out.state.retried, retried, 'retried');
      assert.equal(out.state.version, state.version, 'the anchor carries over');
      assert.equal(out.state.epoch, state.epoch, 'the epoch carries over');
      if (check) check(out.state, out.effects);
    });
  }
});
