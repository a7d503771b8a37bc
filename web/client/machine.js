/**
 * machine.js — the fleet client's connection state machine. Pure: no I/O, no clock, no randomness.
 *
 * ONE function, {@link transition}`(state, event) → {state, effects}`, decides everything: when to
 * open and close sockets, which timers to set, how long to back off, which frames to apply, what to
 * count. The shell (fleet-client.js) feeds it events and performs the effects it returns (data,
 * see {@link Effect}). Every event carries `now` (ms since the epoch) and `rand` (a number in
 * [0, 1)) stamped by the shell, so the same (state, event) always gives the same result.
 *
 * Phases:
 *
 *   idle ──connect──▶ connecting ──open──▶ probation ──stable timer (stableMs)──▶ stable
 *                      │   ▲                    │                                    │
 *     close, error or  │   │ retry timer        │ close, error, gap, refusal,        │ (the same)
 *     connect timeout  │   │ (or retry())       │ bad frame, reconnect notice        │
 *                      ▼   │                    ▼                                    │
 *                     backoff ◀─────────────────┴────────────────────────────────────┘
 *
 *   any failure when the retry budget is spent ──▶ closed (reason "retry budget exhausted")
 *   disconnect, from any phase                 ──▶ closed (reason "closed by user")
 *   closed ──retry() / connect()──▶ connecting
 *
 * Rules (the lessons of the design brief):
 * - A failure (a close, a connect timeout, an error, a refusal, a gap, a bad frame) increments
 *   `failures`; the delay is exponential in it, capped, with random jitter ({@link backoffDelay}).
 *   `failures` returns to 0 only when a socket has stayed open and current for `stableMs`
 *   (probation → stable), never on `open`: a server that accepts and closes at once makes the delay
 *   grow.
 * - A socket `error` does not decide alone: browsers fire `close` right after it, and the close (with
 *   its code) is the failure; if no close comes within `closeWaitMs`, the error is.
 * - A `reconnect` notice is not a failure: reconnect after `retry_after_ms` + jitter; neither the
 *   backoff nor the retry budget moves.
 * - Timers and socket events carry the attempt id they belong to; one for another attempt, or one
 *   that does not fit the phase, is ignored. So attempt 1's connect timeout cannot close attempt
 *   2's socket, and an old stability timer cannot reset the backoff.
 * - Only the move into `backoff` sets the retry timer, and `backoff` ignores closes and errors: at
 *   most one reconnect timer exists.
 * - `disconnect` (the user left) goes to `closed` from anywhere and cancels every timer; only an
 *   explicit `connect`/`retry` leaves `closed`.
 * - Resume: `version` is the last version applied (the anchor); each new socket asks for
 *   `since = version`. An event at or below it is a duplicate (dropped), anchor + 1 is applied, a
 *   jump is a gap: not applied, the socket is closed and reopened with `since` (a resync).
 * - Epoch: the anchor belongs to the history named by the last `welcome`'s `epoch`, which each
 *   new socket sends back. A `welcome` naming another epoch (the topic was recreated, the canvas
 *   reset) means the anchor and the canvas are of a history that no longer exists: both are
 *   forgotten, and the snapshot the server sends next is the new base, even when older. A `welcome`
 *   without an epoch (an older server) clears it: the next socket is resumed by `since` alone.
 * - Channels (issue 33; the shell's `subscribe`): a `state` frame is a snapshot of the channel's
 *   state, a `publication` an event (the same anchor rules: duplicates dropped, a jump is a gap);
 *   the `welcome` names the channel's model, and a stream (no state) holds its position from the
 *   welcome on. A `reset` moves the position to its version of its epoch; a stateful model then
 *   holds nothing (version 0, no epoch sent) until the `state` that follows. `subscribe` (between
 *   connections only) starts a new subscription's anchor from nothing.
 * - Retry budget: `budgetFailures` failures within `budgetWindowMs` (counted since the last stable
 *   connection) → `closed` with reason {@link BUDGET_EXHAUSTED}. While the page is hidden, failure
 *   delays are multiplied by `hiddenMultiplier`.
 * - Gateways: the client may know several gateways (replicas; the shell holds their URLs, the
 *   machine only their count and the index in use). Each failure or notice picks the gateway of
 *   the next attempt with {@link nextGateway}: a failed attempt (no `welcome`) moves on to the next
 *   one, an established session that dropped retries the same gateway once, a notice stays. The
 *   move changes nothing else: the backoff keeps growing across gateways (a fleet that is all down
 *   is not retried in a tight loop), and `since`/`epoch` carry over (any gateway serves a resume).
 */

import { closeCause, isProtocolError } from './protocol.js';

/** @typedef {'idle'|'connecting'|'probation'|'stable'|'backoff'|'closed'} Phase */

/** The six phases, in the order of a normal life. */
export const PHASES = Object.freeze(['idle', 'connecting', 'probation', 'stable', 'backoff', 'closed']);

/** The reason of `closed` when the retry budget is spent. */
export const BUDGET_EXHAUSTED = 'retry budget exhausted';
/** What a page shows for it (with a button calling `retry()`). */
export const BUDGET_MESSAGE = 'connection lost — retry';
/** The reason of `closed` after `disconnect`. */
export const CLOSED_BY_USER = 'closed by user';

/**
 * How an attempt ended, for the choice of the next gateway ({@link nextGateway}):
 * - `failed`: it failed before the session was established (no `welcome` came: connection refused,
 *   error, connect timeout, a refusal, any close), whatever the close code;
 * - `dropped`: a session that had its `welcome` failed (any close, error, gap, bad frame);
 * - `notice`: the server sent a `reconnect` notice (a drain or hand-over; not a failure).
 * @typedef {'failed'|'dropped'|'notice'} GatewayOutcome
 */
/** The three outcomes. */
export const GATEWAY_OUTCOMES = Object.freeze(['failed', 'dropped', 'notice']);

/**
 * Tunables. All durations are in milliseconds.
 * @typedef {object} MachineConfig
 * @property {number} baseDelayMs backoff before jitter after the first failure (delay range [base·(1−jitter), base])
 * @property {number} maxDelayMs cap of the backoff before jitter
 * @property {number} jitter fraction of each backoff delay that is random, in [0, 1]: delay ∈ [d·(1−jitter), d]
 * @property {number} noticeJitterMs random extra on top of a server's retry_after_ms: + [0, noticeJitterMs), at most
 *   half of retry_after_ms
 * @property {number} stableMs how long a socket must stay open and current before the backoff resets
 * @property {number} connectTimeoutMs how long an attempt may stay in `connecting`
 * @property {number} closeWaitMs after a socket `error`, how long to wait for its `close` before giving up on it
 * @property {number} budgetFailures failures within budgetWindowMs that exhaust the retry budget
 * @property {number} budgetWindowMs the retry budget's sliding window
 * @property {number} hiddenMultiplier factor on failure delays while the page is hidden (≥ 1)
 */

/** @type {Readonly<MachineConfig>} */
export const DEFAULTS = Object.freeze({
  baseDelayMs: 1000, // first retry after 0.5–1 s
  maxDelayMs: 30000, // at the cap: 15–30 s
  jitter: 0.5,
  noticeJitterMs: 500,
  stableMs: 10000,
  connectTimeoutMs: 10000,
  closeWaitMs: 2000,
  budgetFailures: 8,
  budgetWindowMs: 120000,
  hiddenMultiplier: 4,
});

/**
 * What the client has counted. Maps are keyed by cause or close code.
 * @typedef {object} Counters
 * @property {number} sockets sockets opened (attempts started)
 * @property {number} opens sockets whose handshake succeeded
 * @property {number} stable times a socket reached `stable`
 * @property {Record<string, number>} reconnects reconnects scheduled, by cause: reconnect_notice,
 *   refused, gap_resync, bad_frame, connect_timeout, socket_error, dropped_1006, protocol_error,
 *   close_<code> (close_1000, close_1001, close_1012, close_1013, …)
 * @property {Record<string, number>} closes closes that ended a session, by code, protocol errors excluded
 * @property {Record<string, number>} protocolErrorCloses closes with 1002, 1003, 1007 or 1009, by code
 * @property {number} socketErrors `error` events of current sockets
 * @property {number} refusals `error` frames (the server refused the session for now)
 * @property {number} notices `reconnect` notices
 * @property {number} resumesByEvents reconnects with since > 0 whose first frame was an event (or a publication)
 * @property {number} resumesBySnapshot reconnects with since > 0 whose first frame was a snapshot (or a state)
 * @property {number} epochChanges welcomes naming another epoch than the one the socket sent (the anchor was forgotten)
 * @property {number} snapshotsApplied snapshots and channel `state` frames applied
 * @property {number} staleSnapshots snapshots (and states) older than the anchor (dropped)
 * @property {number} eventsApplied events and publications applied
 * @property {number} duplicatesDropped events (and publications) at or below the anchor
 * @property {number} gapsSeen events (and publications) past anchor + 1 (each caused a resync)
 * @property {number} resets channel `reset` frames (each moved the position)
 * @property {number} badFrames frames that could not be trusted (each caused a resync)
 * @property {number} unknownFrames frames of an unknown type (ignored)
 * @property {number} staleEvents socket or timer events of another attempt (ignored)
 * @property {number} budgetExhausted times the retry budget ran out
 */

/** @returns {Counters} all zero */
export function emptyCounters() {
  return {
    sockets: 0,
    opens: 0,
    stable: 0,
    reconnects: {},
    closes: {},
    protocolErrorCloses: {},
    socketErrors: 0,
    refusals: 0,
    notices: 0,
    resumesByEvents: 0,
    resumesBySnapshot: 0,
    epochChanges: 0,
    snapshotsApplied: 0,
    staleSnapshots: 0,
    eventsApplied: 0,
    duplicatesDropped: 0,
    gapsSeen: 0,
    badFrames: 0,
    unknownFrames: 0,
    staleEvents: 0,
    budgetExhausted: 0,
    resets: 0,
  };
}

/**
 * The machine's whole state (treated as immutable: transition returns a new object).
 * @typedef {object} MachineState
 * @property {Phase} phase
 * @property {Readonly<MachineConfig>} config
 * @property {number} attempt id of the current (or last) socket; 0 before the first
 * @property {number} version the anchor: last version applied (0 = nothing yet)
 * @property {string | null} epoch the epoch of the anchor's history, from the last `welcome` (null: none known)
 * @property {{width?:number, height?:number} | null} base what the anchor's version is of: the canvas
 *   size, known after the first snapshot; for a channel `{}` once a state is held (a stream: from
 *   the welcome on); null while nothing is held
 * @property {string | null} model the channel's model, from the last `welcome` (null for a canvas)
 * @property {boolean} stateless the channel's model has no state (stream): its position alone is held
 * @property {number} failures failures since the last stable connection (drives the backoff exponent)
 * @property {number[]} failureTimes times (ms) of the failures in the budget window, since the last stable connection
 * @property {boolean} hidden whether the page is hidden
 * @property {boolean} errored the current socket reported `error` (waiting for its close)
 * @property {number | null} resumeFrom since of the current socket when > 0, until its first data frame
 * @property {string | null} cause cause of the last reconnect decision
 * @property {string | null} reason why the client is `closed`
 * @property {number | null} retryAt when (ms) the retry timer fires, in `backoff`
 * @property {Counters} counters
 * @property {string | null} [node] the node serving the current (or last) session, from its `welcome`
 * @property {number} gateways how many gateways the client knows (≥ 1)
 * @property {number} gateway index (in [0, gateways)) of the current socket's gateway; in `backoff`
 *   and `closed`, of the one the next attempt will use
 * @property {boolean} served the current socket got its `welcome` (the session was established)
 * @property {boolean} retried the current gateway is being retried once after a session on it dropped
 */

/**
 * Events the machine accepts. The shell stamps every one with `now` (ms) and `rand` ([0, 1)).
 * Socket and frame events carry the `attempt` of the socket they came from; timer events the
 * `attempt` they were set for.
 * @typedef {{now?:number, rand?:number}} Stamp
 * @typedef {Stamp & (
 *   {type:'connect'} | {type:'disconnect'} | {type:'retry'} | {type:'visibility', hidden:boolean} |
 *   {type:'open', attempt:number} | {type:'error', attempt:number} |
 *   {type:'close', attempt:number, code:number, reason?:string} |
 *   {type:'timer', timer:TimerName, attempt:number} | {type:'subscribe', channel:string} |
 *   (import('./protocol.js').ParsedFrame & {attempt:number}) |
 *   (import('./protocol.js').ParsedChannelFrame & {attempt:number})
 * )} MachineEvent
 */

/**
 * Timers. Each is set at most once per attempt and acts only in its phase, so (attempt, name)
 * identifies it: `connect` (the connect timeout; acts only in `connecting`), `close_wait` (after a
 * socket `error`, the wait for its `close`), `stable` (the probation period; acts only in
 * `probation`), `retry` (the one reconnect timer; acts only in `backoff`).
 * @typedef {'connect'|'close_wait'|'stable'|'retry'} TimerName
 */

/**
 * Effects the shell performs, in order.
 * @typedef {{type:'open_socket', attempt:number, since:number, epoch:string|null, gateway:number} |
 *   {type:'close_socket', attempt:number, code:number, reason:string} |
 *   {type:'set_timer', timer:TimerName, attempt:number, delayMs:number} |
 *   {type:'cancel_timer', timer:TimerName} |
 *   {type:'apply_snapshot', version:number, width:number, height:number, pixels:Uint8Array} |
 *   {type:'apply_event', version:number, x:number, y:number, color:string, rgb:number[]} |
 *   {type:'apply_state', version:number, state:unknown} |
 *   {type:'apply_publication', version:number, data:unknown, publishedAtMs:number|null} |
 *   {type:'apply_reset', version:number, epoch:string, previousVersion:number, previousEpoch:string|null} |
 *   {type:'notify', phase:Phase, info:StateInfo} |
 *   {type:'log', line:string}} Effect
 */

/**
 * What a page is told with each phase change.
 * @typedef {object} StateInfo
 * @property {number} attempt
 * @property {number} [since] connecting: the version asked for
 * @property {number} [gateway] connecting: index of the gateway this attempt uses; backoff: of the
 *   one the next attempt will use
 * @property {string} [cause] backoff/closed after a failure: why
 * @property {number} [delayMs] backoff: how long until the next attempt (ms)
 * @property {number} [failures] failures since the last stable connection
 * @property {string} [reason] closed: why (BUDGET_EXHAUSTED, CLOSED_BY_USER)
 * @property {string} [message] closed by the budget: what to show (BUDGET_MESSAGE)
 */

/**
 * A fresh machine in `idle`.
 * @param {Partial<MachineConfig>} [config] overrides of {@link DEFAULTS}
 * @param {number} [gateways] how many gateways the client knows (1 by default); the first attempt uses index 0
 * @returns {MachineState}
 * @throws {RangeError} listing every invalid setting at once
 */
export function initialState(config = {}, gateways = 1) {
  const cfg = Object.freeze({ ...DEFAULTS, ...pickConfig(config) });
  const problems = [];
  for (const [k, v] of Object.entries(cfg)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) problems.push(`${k}=${v} (a number ≥ 0)`);
  }
  if (cfg.jitter > 1) problems.push(`jitter=${cfg.jitter} (at most 1)`);
  if (cfg.hiddenMultiplier < 1) problems.push(`hiddenMultiplier=${cfg.hiddenMultiplier} (at least 1)`);
  if (cfg.budgetFailures < 1) problems.push(`budgetFailures=${cfg.budgetFailures} (at least 1)`);
  if (cfg.baseDelayMs > cfg.maxDelayMs) problems.push(`baseDelayMs=${cfg.baseDelayMs} above maxDelayMs=${cfg.maxDelayMs}`);
  if (!Number.isSafeInteger(gateways) || gateways < 1) problems.push(`gateways=${gateways} (an integer ≥ 1)`);
  if (problems.length) throw new RangeError(`invalid client settings: ${problems.join(', ')}`);
  return {
    phase: 'idle',
    config: cfg,
    attempt: 0,
    version: 0,
    epoch: null,
    base: null,
    failures: 0,
    failureTimes: [],
    hidden: false,
    errored: false,
    resumeFrom: null,
    cause: null,
    reason: null,
    retryAt: null,
    counters: emptyCounters(),
    gateways,
    gateway: 0,
    served: false,
    retried: false,
    model: null,
    stateless: false,
  };
}

/**
 * The keys of {@link DEFAULTS} found in `options`, so a flat options object can be passed.
 * @param {Record<string, unknown>} options
 * @returns {Partial<MachineConfig>}
 */
export function pickConfig(options) {
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const k of Object.keys(DEFAULTS)) if (options[k] !== undefined) out[k] = options[k];
  return /** @type {Partial<MachineConfig>} */ (out);
}

/**
 * The backoff delay after the n-th consecutive failure: `d = min(maxDelayMs, baseDelayMs · 2^(n−1))`,
 * then `d · (1 − jitter · rand)`, so it lies in [d·(1−jitter), d] and never above the cap.
 * @param {number} failures failures since the last stable connection (≥ 1; 0 is treated as 1)
 * @param {number} rand a random number in [0, 1) (clamped to [0, 1])
 * @param {MachineConfig} config
 * @returns {number} delay in ms (an integer)
 */
export function backoffDelay(failures, rand, config) {
  const n = Math.max(1, failures);
  const d = Math.min(config.maxDelayMs, config.baseDelayMs * 2 ** Math.min(n - 1, 60));
  return Math.round(d * (1 - config.jitter * unit(rand)));
}

/**
 * The delay a server asked for plus jitter: `retryAfterMs + rand · min(noticeJitterMs,
 * retryAfterMs / 2)`. The jitter is at most half the delay asked for, so a notice with
 * `retry_after_ms` 0 (a node that spread its notices itself: each session kept its events until
 * its own notice) is followed at once.
 * @param {number} retryAfterMs the frame's retry_after_ms (ms)
 * @param {number} rand in [0, 1)
 * @param {MachineConfig} config
 * @returns {number} delay in ms (an integer) in [retryAfterMs, retryAfterMs + min(noticeJitterMs, retryAfterMs / 2)]
 */
export function noticeDelay(retryAfterMs, rand, config) {
  const asked = Math.max(0, retryAfterMs);
  return Math.round(asked + unit(rand) * Math.min(config.noticeJitterMs, asked / 2));
}

/**
 * The gateway of the next attempt, after an attempt on gateway `index` ended with `outcome`:
 *
 * | outcome   | retried | next index              | retried after |
 * |-----------|---------|-------------------------|---------------|
 * | `failed`  | any     | (index + 1) mod count   | false         |
 * | `dropped` | false   | index (retry it once)   | true          |
 * | `dropped` | true    | (index + 1) mod count   | false         |
 * | `notice`  | any     | index                   | unchanged     |
 *
 * Why: a failed handshake says this gateway cannot serve now, so the next one is tried at once (as
 * Socket.IO's and Centrifugo's multi-endpoint clients do). A session that was established and then
 * dropped says little about the gateway (the node behind it went away: 1001, 1012; the client was
 * too slow: 1013), so the same gateway is tried once more; if that attempt fails, or its session
 * drops too before it became stable, the next one is tried. A notice comes from a draining node,
 * and the gateway routes the reconnect to the new owner: stay. The close code plays no part. The
 * machine clears `retried` when a session becomes stable. With one gateway the index stays 0.
 * @param {{index:number, count:number, outcome:GatewayOutcome, retried?:boolean}} at
 *   index: the gateway of the attempt that ended; count: the number of gateways; retried: that
 *   attempt was already the one retry of its gateway after a drop
 * @returns {{index:number, retried:boolean}}
 * @throws {RangeError} for a count below 1, an index outside [0, count), an unknown outcome
 */
export function nextGateway({ index, count, outcome, retried = false }) {
  if (!Number.isSafeInteger(count) || count < 1) throw new RangeError(`nextGateway: count=${count} (an integer ≥ 1)`);
  if (!Number.isSafeInteger(index) || index < 0 || index >= count) throw new RangeError(`nextGateway: index=${index} outside [0, ${count})`);
  const advance = { index: (index + 1) % count, retried: false };
  switch (outcome) {
    case 'failed':
      return advance;
    case 'dropped':
      return retried ? advance : { index, retried: true };
    case 'notice':
      return { index, retried: Boolean(retried) };
    default:
      throw new RangeError(`nextGateway: unknown outcome ${String(outcome)} (one of ${GATEWAY_OUTCOMES.join(', ')})`);
  }
}

/**
 * The gateway fields after the current attempt ended with `outcome`.
 * @param {MachineState} s
 * @param {GatewayOutcome} outcome
 * @returns {{gateway:number, retried:boolean}}
 */
function rotate(s, outcome) {
  const next = nextGateway({ index: s.gateway, count: s.gateways, outcome, retried: s.retried });
  return { gateway: next.index, retried: next.retried };
}

/** Clamps to [0, 1]; NaN → 0. */
function unit(r) {
  return r > 0 ? Math.min(r, 1) : 0;
}

/** Phases in which a socket exists and its events matter. */
const LIVE = new Set(['connecting', 'probation', 'stable']);
/** @type {Effect[]} The timers that belong to one attempt's socket. */
const CANCEL_ATTEMPT_TIMERS = Object.freeze([
  Object.freeze({ type: 'cancel_timer', timer: 'connect' }),
  Object.freeze({ type: 'cancel_timer', timer: 'close_wait' }),
  Object.freeze({ type: 'cancel_timer', timer: 'stable' }),
]);
const FRAME_TYPES = new Set(['welcome', 'snapshot', 'event', 'notice', 'refused', 'bad_frame', 'unknown_frame', 'state', 'publication', 'reset']);

/**
 * The transition function: the next state and the effects to perform, for one event.
 * Pure and total: an event that does not apply in the current phase (or belongs to another
 * attempt) leaves the phase as it is and returns no socket or timer effects.
 * @param {MachineState} state
 * @param {MachineEvent} event
 * @returns {{state: MachineState, effects: Effect[]}}
 */
export function transition(state, event) {
  const ev = /** @type {MachineEvent & {now:number, rand:number}} */ ({ now: 0, rand: 0, ...event });
  switch (ev.type) {
    case 'connect':
      if (state.phase === 'idle') return begin(state, []);
      if (state.phase === 'closed') return begin(fresh(state), []);
      return keep(state);
    case 'retry':
      if (state.phase === 'closed') return begin(fresh(state), []);
      if (state.phase === 'backoff') return begin(state, [{ type: 'cancel_timer', timer: 'retry' }]);
      return keep(state);
    case 'disconnect':
      return disconnect(state);
    case 'subscribe':
      return subscribe(state, ev);
    case 'visibility':
      return keep({ ...state, hidden: Boolean(ev.hidden) });
    case 'timer':
      return onTimer(state, ev);
    case 'open':
    case 'error':
    case 'close':
      return onSocket(state, ev);
    default:
      if (FRAME_TYPES.has(ev.type)) return onFrame(state, ev);
      return keep(state);
  }
}

// ---------------------------------------------------------------------------------------------
// User events

/** Leaves `closed` with a clean slate for the backoff and the budget (the anchor is kept). */
function fresh(s) {
  return { ...s, failures: 0, failureTimes: [], reason: null, cause: null };
}

/**
 * The epoch a socket sends: the anchor's, once a snapshot gave the client a canvas. It tells the
 * server the client holds version `since` of that history (version 0 too: the blank canvas), so a
 * resume from 0 is served as events; before any snapshot the client holds nothing, and says so by
 * sending none.
 * @param {MachineState} s
 * @returns {string | null}
 */
export function sentEpoch(s) {
  return s.base !== null ? s.epoch : null;
}

/** Starts a new attempt: a socket asking for since = the anchor (of its epoch), and its connect deadline. */
function begin(s, effects) {
  const attempt = s.attempt + 1;
  const next = {
    ...s,
    phase: /** @type {Phase} */ ('connecting'),
    attempt,
    errored: false,
    served: false,
    resumeFrom: s.version > 0 ? s.version : null,
    retryAt: null,
    counters: bump(s.counters, 'sockets'),
  };
  return {
    state: next,
    effects: [
      ...effects,
      { type: 'open_socket', attempt, since: s.version, epoch: sentEpoch(s), gateway: s.gateway },
      { type: 'set_timer', timer: 'connect', attempt, delayMs: s.config.connectTimeoutMs },
      ...moved(s, next, { attempt, since: s.version, gateway: s.gateway }),
    ],
  };
}

/**
 * A new subscription (the shell's `subscribe`): its anchor starts from nothing (version 0, no
 * epoch, nothing held, no model yet). Only between connections (idle or closed): a live socket's
 * anchor is never swapped under it.
 */
function subscribe(s, ev) {
  if (s.phase !== 'idle' && s.phase !== 'closed') return keep(s);
  const next = { ...s, version: 0, epoch: null, base: null, model: null, stateless: false, resumeFrom: null };
  return { state: next, effects: [log(`subscribe channel=${ev.channel}`)] };
}

/** The user left: cancel everything, close the socket if any, never reconnect. */
function disconnect(s) {
  if (s.phase === 'closed') return keep(s);
  const next = { ...s, phase: /** @type {Phase} */ ('closed'), reason: CLOSED_BY_USER, retryAt: null, errored: false };
  /** @type {Effect[]} */
  const effects = [{ type: 'cancel_timer', timer: 'retry' }, ...CANCEL_ATTEMPT_TIMERS];
  if (LIVE.has(s.phase)) effects.push({ type: 'close_socket', attempt: s.attempt, code: 1000, reason: 'client closed' });
  effects.push(...moved(s, next, { attempt: s.attempt, reason: CLOSED_BY_USER }));
  return { state: next, effects };
}

// ---------------------------------------------------------------------------------------------
// Timers

function onTimer(s, ev) {
  if (ev.attempt !== s.attempt) return stale(s, ev);
  switch (ev.timer) {
    case 'connect':
      if (s.phase !== 'connecting') return keep(s);
      return fail(s, ev, s.errored ? 'socket_error' : 'connect_timeout', { socketOpen: true });
    case 'close_wait':
      if (!LIVE.has(s.phase) || !s.errored) return keep(s);
      return fail(s, ev, 'socket_error', { socketOpen: true, detail: 'no close after error' });
    case 'stable': {
      if (s.phase !== 'probation' || s.errored) return keep(s);
      const next = {
        ...s,
        phase: /** @type {Phase} */ ('stable'),
        failures: 0,
        failureTimes: [],
        retried: false,
        counters: bump(s.counters, 'stable'),
      };
      return { state: next, effects: moved(s, next, { attempt: s.attempt, failures: 0 }) };
    }
    case 'retry':
      if (s.phase !== 'backoff') return keep(s);
      return begin(s, []);
    default:
      return keep(s);
  }
}

// ---------------------------------------------------------------------------------------------
// Socket events

function onSocket(s, ev) {
  if (ev.attempt !== s.attempt) return stale(s, ev);
  // A socket we already left (backoff after our own close, closed by the user): nothing to decide.
  if (!LIVE.has(s.phase)) return keep(s);
  switch (ev.type) {
    case 'open': {
      if (s.phase !== 'connecting' || s.errored) return keep(s);
      const next = { ...s, phase: /** @type {Phase} */ ('probation'), counters: bump(s.counters, 'opens') };
      return {
        state: next,
        effects: [
          { type: 'cancel_timer', timer: 'connect' },
          { type: 'set_timer', timer: 'stable', attempt: s.attempt, delayMs: s.config.stableMs },
          ...moved(s, next, { attempt: s.attempt }),
        ],
      };
    }
    case 'error': {
      // Browsers fire `close` right after `error`; the close (with its code) decides. Until then
      // this socket cannot become stable, and if no close comes within closeWaitMs, the close_wait
      // timer gives up on it.
      const counters = bump(s.counters, 'socketErrors');
      if (s.errored) return keep({ ...s, counters });
      return {
        state: { ...s, errored: true, counters },
        effects: [
          { type: 'cancel_timer', timer: 'stable' },
          { type: 'close_socket', attempt: s.attempt, code: 1000, reason: 'socket error' },
          { type: 'set_timer', timer: 'close_wait', attempt: s.attempt, delayMs: s.config.closeWaitMs },
          log(`socket error attempt=${s.attempt} (waiting for its close)`),
        ],
      };
    }
    case 'close': {
      const code = Number.isSafeInteger(ev.code) ? ev.code : 1006;
      const key = isProtocolError(code) ? 'protocolErrorCloses' : 'closes';
      const counted = { ...s, counters: bumpIn(s.counters, key, String(code)) };
      return fail(counted, ev, closeCause(code), { socketOpen: false, detail: `code=${code}` });
    }
    default:
      return keep(s);
  }
}

// ---------------------------------------------------------------------------------------------
// Frames

function onFrame(s, ev) {
  if (ev.attempt !== s.attempt) return stale(s, ev);
  // Frames only arrive on an open socket; anything else is a late frame of a socket we left.
  if (s.phase !== 'probation' && s.phase !== 'stable') return keep(s);
  switch (ev.type) {
    case 'welcome':
      return onWelcome(s, ev);
    case 'snapshot':
    case 'state':
      return onSnapshot(s, ev);
    case 'event':
    case 'publication':
      return onEvent(s, ev);
    case 'reset':
      return onReset(s, ev);
    case 'notice':
      return onNotice(s, ev);
    case 'refused': {
      const counted = { ...s, counters: bump(s.counters, 'refusals') };
      return fail(counted, ev, 'refused', {
        socketOpen: true,
        minDelayMs: ev.retryAfterMs,
        detail: `code=${ev.code} retry_after_ms=${ev.retryAfterMs}`,
      });
    }
    case 'bad_frame': {
      const counted = { ...s, counters: bump(s.counters, 'badFrames') };
      return fail(counted, ev, 'bad_frame', { socketOpen: true, detail: ev.detail });
    }
    case 'unknown_frame':
      return keep({ ...s, counters: bump(s.counters, 'unknownFrames') });
    default:
      return keep(s);
  }
}

/**
 * A welcome names the node and the epoch. Another epoch than the anchor's: the anchor and the
 * canvas belong to a history that was replaced; forget them (the snapshot that follows is the
 * base, whatever its version; an event before it is a gap).
 */
function onWelcome(s, ev) {
  const epoch = ev.epoch ?? null;
  const servedBy = log(`served by ${ev.node}`);
  // A channel's welcome names its model (a canvas's names none).
  const channel = ev.model === undefined ? {} : { model: ev.model, stateless: Boolean(ev.stateless) };
  let next;
  /** @type {Effect[]} */
  let effects = [servedBy];
  if (epoch !== null && s.epoch !== null && epoch !== s.epoch) {
    next = { ...s, ...channel, node: ev.node, epoch, served: true, version: 0, base: null, counters: bump(s.counters, 'epochChanges') };
    effects = [servedBy, log(`epoch ${s.epoch} -> ${epoch}: the ${s.model ? 'channel' : 'canvas'}'s history was replaced; anchor ${s.version} forgotten`)];
  } else if (ev.model !== undefined && s.model !== null && ev.model !== s.model && s.base !== null) {
    // The namespace's model changed: what is held is of another model.
    next = { ...s, ...channel, node: ev.node, epoch, served: true, version: 0, base: null };
    effects = [servedBy, log(`model ${s.model} -> ${ev.model}: anchor ${s.version} forgotten`)];
  } else {
    next = { ...s, ...channel, node: ev.node, epoch, served: true };
  }
  // A stream has no state to wait for: its position is all it holds, from the welcome on.
  if (next.stateless && next.base === null) next.base = {};
  return { state: next, effects };
}

/**
 * A snapshot (or a channel's `state`) sets the canvas (the state) and the anchor, unless it is
 * older than the anchor.
 */
function onSnapshot(s, ev) {
  const what = ev.type === 'state' ? 'state' : 'snapshot';
  if (ev.version < s.version) {
    return {
      state: { ...s, counters: bump(s.counters, 'staleSnapshots') },
      effects: [log(`stale ${what} version=${ev.version} below anchor=${s.version}, dropped`)],
    };
  }
  let counters = bump(s.counters, 'snapshotsApplied');
  if (s.resumeFrom !== null) counters = bump(counters, 'resumesBySnapshot');
  if (ev.type === 'state') {
    return {
      state: { ...s, version: ev.version, base: {}, resumeFrom: null, counters },
      effects: [{ type: 'apply_state', version: ev.version, state: ev.state }],
    };
  }
  const next = { ...s, version: ev.version, base: { width: ev.width, height: ev.height }, resumeFrom: null, counters };
  return {
    state: next,
    effects: [{ type: 'apply_snapshot', version: ev.version, width: ev.width, height: ev.height, pixels: ev.pixels }],
  };
}

/** An event (or a channel's `publication`): duplicate (drop), next (apply), or gap (resync). */
function onEvent(s, ev) {
  const publication = ev.type === 'publication';
  if (s.base === null) {
    // No canvas yet (the server always starts since=0 with a snapshot): nothing to apply it to.
    return gap(s, ev, publication ? 'publication before any state' : 'event before any snapshot');
  }
  if (ev.version <= s.version) return keep({ ...s, counters: bump(s.counters, 'duplicatesDropped') });
  if (ev.version !== s.version + 1) return gap(s, ev, `expected ${s.version + 1} got ${ev.version}`);
  // (A publication's data was checked against the state held when its frame was parsed.)
  if (!publication && (ev.x >= s.base.width || ev.y >= s.base.height)) {
    const counted = { ...s, counters: bump(s.counters, 'badFrames') };
    return fail(counted, ev, 'bad_frame', { socketOpen: true, detail: `pixel (${ev.x}, ${ev.y}) off the canvas` });
  }
  let counters = bump(s.counters, 'eventsApplied');
  if (s.resumeFrom !== null) counters = bump(counters, 'resumesByEvents');
  return {
    state: { ...s, version: ev.version, resumeFrom: null, counters },
    effects: [
      publication
        ? { type: 'apply_publication', version: ev.version, data: ev.data, publishedAtMs: ev.publishedAtMs }
        : { type: 'apply_event', version: ev.version, x: ev.x, y: ev.y, color: ev.color, rgb: ev.rgb },
    ],
  };
}

/**
 * A channel's `reset`: the position is now `version` of `epoch`, and what came between is not
 * coming. A stream holds that position at once. A stateful model holds nothing until the `state`
 * that follows: version 0 and no epoch sent, so a socket that drops before it asks for the state
 * afresh instead of claiming one it does not have.
 */
function onReset(s, ev) {
  const version = s.stateless ? ev.version : 0;
  const next = { ...s, version, epoch: ev.epoch, base: s.stateless ? {} : null, counters: bump(s.counters, 'resets') };
  return {
    state: next,
    effects: [
      { type: 'apply_reset', version: ev.version, epoch: ev.epoch, previousVersion: s.version, previousEpoch: s.epoch },
      log(`reset to version ${ev.version} of epoch ${ev.epoch} (was ${s.version} of ${s.epoch ?? 'none'})`),
    ],
  };
}

/** A version jump: not applied; close and reconnect with since = the anchor. Counts as a failure. */
function gap(s, ev, detail) {
  const counted = { ...s, counters: bump(s.counters, 'gapsSeen') };
  return fail(counted, ev, 'gap_resync', { socketOpen: true, detail });
}

/**
 * A reconnect notice: leave now, come back after retry_after_ms + jitter, through the same gateway
 * (it routes the new session to the new owner). Not a failure.
 */
function onNotice(s, ev) {
  const delayMs = noticeDelay(ev.retryAfterMs, ev.rand, s.config);
  const next = {
    ...s,
    ...rotate(s, 'notice'),
    phase: /** @type {Phase} */ ('backoff'),
    cause: 'reconnect_notice',
    retryAt: ev.now + delayMs,
    errored: false,
    counters: bumpIn(bump(s.counters, 'notices'), 'reconnects', 'reconnect_notice'),
  };
  return {
    state: next,
    effects: [
      ...CANCEL_ATTEMPT_TIMERS,
      { type: 'close_socket', attempt: s.attempt, code: 1000, reason: 'reconnect notice' },
      { type: 'set_timer', timer: 'retry', attempt: s.attempt, delayMs },
      log(`reconnect notice reason=${ev.reason || '?'} retry_after_ms=${ev.retryAfterMs}`),
      ...moved(s, next, { attempt: s.attempt, cause: 'reconnect_notice', delayMs, failures: s.failures, gateway: next.gateway }),
    ],
  };
}

// ---------------------------------------------------------------------------------------------
// Failure: the one place that grows the backoff, spends the budget and sets the retry timer (and
// picks the next gateway: the move does not reset the backoff).

/**
 * @param {MachineState} s
 * @param {{now:number, rand:number}} ev
 * @param {string} cause reconnect cause (counter key)
 * @param {{socketOpen:boolean, minDelayMs?:number, detail?:string}} opts socketOpen: the socket
 *   still needs closing; minDelayMs: a server's retry_after_ms to wait at least (plus jitter)
 */
function fail(s, ev, cause, opts) {
  const cfg = s.config;
  /** @type {Effect[]} */
  const effects = [...CANCEL_ATTEMPT_TIMERS];
  if (opts.socketOpen) effects.push({ type: 'close_socket', attempt: s.attempt, code: 1000, reason: cause });
  const failures = s.failures + 1;
  const failureTimes = [...s.failureTimes.filter((t) => ev.now - t < cfg.budgetWindowMs), ev.now];
  const detail = opts.detail ? ` ${opts.detail}` : '';
  const outcome = s.served ? 'dropped' : 'failed';
  const gw = rotate(s, outcome);
  /** @type {Effect[]} */
  const moveLog = gw.gateway !== s.gateway ? [log(`next gateway ${gw.gateway} (${outcome} on gateway ${s.gateway})`)] : [];

  if (failureTimes.length >= cfg.budgetFailures) {
    const next = {
      ...s,
      ...gw,
      phase: /** @type {Phase} */ ('closed'),
      failures,
      failureTimes,
      cause,
      reason: BUDGET_EXHAUSTED,
      retryAt: null,
      errored: false,
      counters: bump(s.counters, 'budgetExhausted'),
    };
    effects.push(log(`failure cause=${cause}${detail}: ${failureTimes.length} failures within ${cfg.budgetWindowMs} ms`), ...moveLog);
    effects.push(...moved(s, next, { attempt: s.attempt, cause, failures, reason: BUDGET_EXHAUSTED, message: BUDGET_MESSAGE }));
    return { state: next, effects };
  }

  let delayMs = backoffDelay(failures, ev.rand, cfg);
  if (opts.minDelayMs) delayMs = Math.max(delayMs, noticeDelay(opts.minDelayMs, ev.rand, cfg));
  if (s.hidden) delayMs *= cfg.hiddenMultiplier;
  const next = {
    ...s,
    ...gw,
    phase: /** @type {Phase} */ ('backoff'),
    failures,
    failureTimes,
    cause,
    retryAt: ev.now + delayMs,
    errored: false,
    counters: bumpIn(s.counters, 'reconnects', cause),
  };
  effects.push({ type: 'set_timer', timer: 'retry', attempt: s.attempt, delayMs });
  effects.push(log(`failure cause=${cause}${detail}`), ...moveLog);
  effects.push(...moved(s, next, { attempt: s.attempt, cause, delayMs, failures, gateway: next.gateway }));
  return { state: next, effects };
}

// ---------------------------------------------------------------------------------------------
// Helpers

/** No change of phase, no effects. */
function keep(s) {
  return { state: s, effects: [] };
}

/** An event of another attempt: counted and ignored. */
function stale(s, ev) {
  const what = ev.type === 'timer' ? `${ev.timer} timer` : ev.type;
  return {
    state: { ...s, counters: bump(s.counters, 'staleEvents') },
    effects: [log(`ignored ${what} of attempt ${ev.attempt} (current ${s.attempt})`)],
  };
}

/** The notify and log effects of a phase change. */
function moved(from, to, info) {
  const kv = Object.entries(info)
    .filter(([k]) => k !== 'message')
    .map(([k, v]) => `${k}=${typeof v === 'string' && v.includes(' ') ? JSON.stringify(v) : v}`)
    .join(' ');
  return [
    { type: 'notify', phase: to.phase, info },
    log(`${from.phase} -> ${to.phase} ${kv}`),
  ];
}

/** @returns {Effect} */
function log(line) {
  return { type: 'log', line };
}

/** @returns {Counters} with `key` incremented */
function bump(c, key) {
  return { ...c, [key]: c[key] + 1 };
}

/** @returns {Counters} with `c[map][key]` incremented */
function bumpIn(c, map, key) {
  return { ...c, [map]: { ...c[map], [key]: (c[map][key] ?? 0) + 1 } };
}
