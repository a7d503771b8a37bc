/**
 * fleet-client.js — the browser client of the canvas fleet: the I/O shell around machine.js.
 *
 * A {@link FleetClient} connects to the gateway's
 * `/ws?canvas=<id>&since=<version>&epoch=<epoch>&refusal=frame` (`epoch` once a `welcome` named
 * one), keeps a {@link Canvas} in sync from the frames, and owns reconnection. It decides nothing itself:
 * it turns socket callbacks, timers, page visibility and method calls into events for the pure
 * `transition` function (machine.js), stamps each with the clock and a random number, and performs
 * the effects it gets back (open or close a socket, set or cancel a timer, apply a frame to the
 * canvas, tell the page). Events are processed one at a time, in order: an event raised while
 * effects are being performed (a socket constructor that throws, a callback that calls `close()`)
 * waits in a queue.
 *
 * Everything with a side effect is injectable (WebSocket, setTimeout/clearTimeout, Math.random,
 * Date.now, document), with browser defaults, so tests drive it with fakes. Without a `document`
 * (Node, workers) the page is taken as visible.
 *
 * Gateways: `url` is one gateway's base, or a list of them (replicas of the same fleet). Attempts
 * go to the first; machine.js's `nextGateway` picks the next: a failed attempt moves on to the
 * next URL (wrapping around), a dropped session retries its gateway once, a reconnect notice stays.
 * The backoff is the same as with one URL (rotating does not reset it) and the resume position
 * (since, epoch) carries over: any gateway can serve it.
 *
 * Channels (issue 33): a client made without `canvas` follows one channel per connection with
 * `subscribe(channel, handlers)` (`/ws?channel=<id>&since=&epoch=&refusal=frame`): the frames
 * keep the {@link Subscription}'s state by the channel's model. The models come in with the
 * `models` option; index.js (the package's entry) passes the four built-in ones (models/*.js).
 * This file imports none of them: the gateway serves the library's files one by one, and a page
 * that follows a canvas with the `canvas` option may load this file alone.
 *
 * Usage:
 *   import { FleetClient } from './fleet-client.js';
 *   const client = new FleetClient({ url: 'ws://localhost:8000', canvas: 'c1' });
 *   // or, with two gateways: url: ['wss://gw-a.example', 'wss://gw-b.example']
 *   client.onState((state, info) => render(state, info));   // show info.message + a retry button when closed
 *   client.onCanvas((canvas, pixel) => draw(canvas, pixel)); // pixel is null after a snapshot
 *   client.connect();
 */

import { Canvas, sha256Hex } from './canvas.js';
import { BUDGET_EXHAUSTED, BUDGET_MESSAGE, CLOSED_BY_USER, DEFAULTS, PHASES, initialState, nextGateway, pickConfig, sentEpoch, transition } from './machine.js';
import { buildChannelUrl, buildUrl, isChannelId, parseChannelFrame, parseFrame } from './protocol.js';

export { Canvas, BUDGET_EXHAUSTED, BUDGET_MESSAGE, CLOSED_BY_USER, DEFAULTS, PHASES, transition, initialState, nextGateway, isChannelId };

/**
 * @typedef {import('./machine.js').Phase} Phase
 * @typedef {import('./machine.js').StateInfo} StateInfo
 * @typedef {import('./machine.js').Counters} Counters
 * @typedef {import('./machine.js').MachineState} MachineState
 * @typedef {import('./machine.js').MachineEvent} MachineEvent
 * @typedef {import('./machine.js').Effect} Effect
 * @typedef {{x:number, y:number, color:string, version:number}} ChangedPixel
 * @typedef {StateInfo & {gatewayUrl?: string}} ClientStateInfo what `onState` gets: the machine's
 *   info, plus `gatewayUrl` (the base URL of `info.gateway`) when it names a gateway
 * @typedef {object} Model a channel model (models/*.js): `name`, `stateful`, `initial()`,
 *   `fromState(json)`, `check(data, state?)` (null when the data is a publication of the model,
 *   else what is wrong), `apply(state, data)` (must not throw for data `check` accepted) and
 *   `canonical(state)` (the string or bytes the hash is of)
 * @property {boolean} stateful
 * @property {(json: unknown) => unknown} fromState
 * @property {(data: unknown, state?: any) => string | null} check
 * @property {(state: any, data: unknown) => unknown} apply
 * @property {(state: any) => string | Uint8Array} canonical
 * @typedef {object} SubscriptionHandlers
 * @property {(data: unknown, version: number, info: {channel: string, publishedAtMs: number | null}) => void} [onPublication]
 *   after each publication was applied to the state (`sub.state` is the new one)
 * @property {(state: unknown, version: number) => void} [onState] when a `state` frame replaced the whole state
 * @property {(info: ResetInfo) => void} [onReset] after a `reset` moved the position
 * @typedef {{channel: string, version: number, epoch: string, previousVersion: number, previousEpoch: string | null}} ResetInfo
 */

/**
 * The minimal WebSocket surface the client uses (the browser's WebSocket has it).
 * @typedef {object} SocketLike
 * @property {((ev: unknown) => void) | null} onopen
 * @property {((ev: {data: unknown}) => void) | null} onmessage
 * @property {((ev: unknown) => void) | null} onerror
 * @property {((ev: {code?: number, reason?: string}) => void) | null} onclose
 * @property {(code?: number, reason?: string) => void} close
 */

/**
 * Options. Besides these, any key of DEFAULTS (machine.js) may be given to override it:
 * baseDelayMs, maxDelayMs, jitter, noticeJitterMs, stableMs, connectTimeoutMs, closeWaitMs,
 * budgetFailures, budgetWindowMs, hiddenMultiplier (durations in ms).
 * @typedef {object} FleetClientOptions
 * @property {string | string[]} url the gateway's WebSocket base, e.g. `ws://host:8000`, or a
 *   non-empty list of them (gateway replicas), tried in turn (see Gateways above)
 * @property {string} [canvas] canvas id: follow this canvas by the canvas protocol (`canvas=`,
 *   `snapshot`/`event` frames; onCanvas); without it, use `subscribe(channel)`
 * @property {Readonly<Record<string, Model>>} [models] the channel models by name (index.js passes
 *   the built-in ones; this file alone knows none)
 * @property {string} [path] endpoint path, `/ws` by default
 * @property {string | (() => string | null | undefined)} [token] the client token (JWT) when the
 *   fleet requires one, sent as `token=`; a function is called before every attempt, so a session
 *   closed with 1008 because its token expired reconnects with a fresh one
 * @property {new (url: string) => SocketLike} [WebSocket] socket constructor; `globalThis.WebSocket` by default
 * @property {(fn: () => void, ms: number) => unknown} [setTimeout] timer start; `globalThis.setTimeout` by default
 * @property {(handle: any) => void} [clearTimeout] timer cancel; `globalThis.clearTimeout` by default
 * @property {() => number} [random] a number in [0, 1); `Math.random` by default
 * @property {() => number} [now] the clock in ms since the epoch; `Date.now` by default
 * @property {{visibilityState?: string, addEventListener?: Function, removeEventListener?: Function} | null} [document]
 *   page visibility source; `globalThis.document` by default (absent outside browsers); null to ignore
 * @property {number} [logLimit] lines kept in `log` (100 by default)
 * @property {(state: Phase, info: ClientStateInfo) => void} [onState] same as calling `onState(fn)`
 * @property {(canvas: Canvas, changed: ChangedPixel | null) => void} [onCanvas] same as `onCanvas(fn)`
 * @property {(line: string) => void} [onLog] same as `onLog(fn)`
 */

/**
 * The active subscription's record in its client.
 * @typedef {{channel: string, handlers: SubscriptionHandlers, held: unknown, sub: Subscription | null}} SubRecord
 */

/** A reconnecting WebSocket client for one canvas, or for one channel subscription at a time. */
export class FleetClient {
  /** @type {MachineState} */ #state;
  /** @type {readonly string[]} the gateways' bases, in order */ #bases;
  /** @type {string | null} null: a channel client (subscribe) */ #canvasId;
  /** @type {Readonly<Record<string, Model>>} */ #models;
  /** @type {SubRecord | null} the active subscription */ #sub = null;
  #path;
  #token;
  #WebSocket;
  #setTimeout;
  #clearTimeout;
  #random;
  #now;
  #document;
  #logLimit;

  /** @type {SocketLike | null} */ #socket = null;
  #socketAttempt = 0;
  /** @type {Map<string, unknown>} timer name → handle */ #timers = new Map();
  /** @type {MachineEvent[]} */ #queue = [];
  #busy = false;
  /** @type {Canvas | null} */ #canvas = null;
  /** @type {ClientStateInfo} */ #info = { attempt: 0 };
  /** @type {string[]} */ #log = [];
  #listeners = { state: new Set(), canvas: new Set(), log: new Set() };
  /** @type {(() => void) | null} */ #onVisibility = null;

  /**
   * @param {FleetClientOptions} options
   * @throws {TypeError} without url, with an empty url list or one with a non-string, with a canvas
   *   that is not a non-empty string, with a model that is not one, or without a WebSocket implementation
   * @throws {RangeError} when a tunable is invalid (all problems listed at once)
   */
  constructor(options) {
    const o = options ?? /** @type {FleetClientOptions} */ ({});
    this.#bases = gatewayList(o);
    if (o.canvas !== undefined && (typeof o.canvas !== 'string' || !o.canvas)) {
      throw new TypeError('FleetClient: canvas is required to be a non-empty string when given (leave it out to subscribe to channels)');
    }
    this.#canvasId = o.canvas ?? null;
    this.#models = modelTable(o.models);
    this.#path = o.path ?? '/ws';
    if (o.token !== undefined && o.token !== null && typeof o.token !== 'string' && typeof o.token !== 'function') {
      throw new TypeError('FleetClient: token must be a string or a function returning one');
    }
    this.#token = o.token ?? null;
    this.#WebSocket = o.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== 'function') throw new TypeError('FleetClient: no WebSocket implementation');
    this.#setTimeout = o.setTimeout ?? ((fn, ms) => globalThis.setTimeout(fn, ms));
    this.#clearTimeout = o.clearTimeout ?? ((h) => globalThis.clearTimeout(h));
    this.#random = o.random ?? Math.random;
    this.#now = o.now ?? Date.now;
    this.#document = o.document === undefined ? globalThis.document ?? null : o.document;
    this.#logLimit = o.logLimit ?? 100;
    this.#state = initialState(pickConfig(/** @type {Record<string, unknown>} */ (o)), this.#bases.length);
    if (o.onState) this.onState(o.onState);
    if (o.onCanvas) this.onCanvas(o.onCanvas);
    if (o.onLog) this.onLog(o.onLog);
  }

  // ---- commands -------------------------------------------------------------------------------

  /**
   * Starts connecting (from `idle`, or again from `closed`). No effect in other states. A channel
   * client connects by `subscribe` (and again with this after `close()`).
   * @returns {this}
   * @throws {Error} on a channel client without a subscription
   */
  connect() {
    this.#needTarget('connect');
    this.#watchVisibility(true);
    this.#dispatch({ type: 'connect' });
    return this;
  }

  /**
   * Intentional close (the user left): closes the socket with 1000, cancels every timer, and never
   * reconnects until `connect()` or `retry()` is called. @returns {this}
   */
  close() {
    this.#dispatch({ type: 'disconnect' });
    this.#watchVisibility(false);
    return this;
  }

  /**
   * Manual retry: from `closed` (e.g. after "connection lost — retry") starts again with a fresh
   * backoff and retry budget; from `backoff` connects now. Resumes from the last version applied.
   * @returns {this}
   * @throws {Error} on a channel client without a subscription
   */
  retry() {
    this.#needTarget('retry');
    this.#watchVisibility(true);
    this.#dispatch({ type: 'retry' });
    return this;
  }

  /**
   * Tells the client whether the page is hidden (done automatically from `document` when there is
   * one). While hidden, failure delays are multiplied by `hiddenMultiplier`.
   * @param {boolean} hidden
   * @returns {this}
   */
  setHidden(hidden) {
    this.#dispatch({ type: 'visibility', hidden: Boolean(hidden) });
    return this;
  }

  /**
   * Subscribes to a channel and connects (from `idle` or `closed`) with `channel=<id>`. One
   * subscription per connection for now: another `subscribe` while this one is active throws,
   * until `sub.unsubscribe()`. The subscription's position (since, epoch) and state survive
   * reconnects; the handlers are called after each change (see SubscriptionHandlers).
   * @param {string} channel `name` or `namespace:name`
   * @param {SubscriptionHandlers} [handlers]
   * @returns {Subscription}
   * @throws {TypeError} for a channel id that is not one, or a handler that is not a function
   * @throws {Error} on a canvas client, on a client that knows no models, or while a subscription is active
   */
  subscribe(channel, handlers = {}) {
    if (this.#canvasId !== null) {
      throw new Error(`FleetClient: this client follows canvas ${this.#canvasId} (the canvas option); subscribe on a client made without it`);
    }
    if (!isChannelId(channel)) {
      throw new TypeError(`FleetClient.subscribe: ${JSON.stringify(channel)} is not a channel id (name or namespace:name, each part of A-Z a-z 0-9 _ -, at most 128 bytes)`);
    }
    const h = handlers ?? {};
    for (const k of /** @type {const} */ (['onPublication', 'onState', 'onReset'])) {
      if (h[k] !== undefined && typeof h[k] !== 'function') throw new TypeError(`FleetClient.subscribe: ${k} must be a function`);
    }
    if (Object.keys(this.#models).length === 0) {
      throw new Error('FleetClient.subscribe: this client knows no channel models: import FleetClient from the package (index.js), or pass models');
    }
    if (this.#sub) {
      throw new Error(`FleetClient.subscribe: this connection already has a subscription (to ${this.#sub.channel}); one subscription per connection for now, several channels per connection come later: unsubscribe() it first`);
    }
    /** @type {SubRecord} */
    const record = { channel, handlers: { onPublication: h.onPublication, onState: h.onState, onReset: h.onReset }, held: undefined, sub: null };
    record.sub = new Subscription(channel, { view: () => this.#view(record), unsubscribe: () => this.#unsubscribe(record) });
    this.#sub = record;
    this.#dispatch({ type: 'subscribe', channel });
    this.connect();
    return record.sub;
  }

  /** @returns {Subscription | null} the active subscription, if any */
  get subscription() {
    return this.#sub?.sub ?? null;
  }

  /** A channel client with nothing to connect to refuses to. */
  #needTarget(what) {
    if (this.#canvasId === null && !this.#sub) throw new Error(`FleetClient.${what}: nothing to connect to: subscribe(channel) first`);
  }

  /** What a subscription shows of itself, read from the machine while it is the active one. */
  #view(record) {
    const s = this.#state;
    const active = this.#sub === record;
    const model = active ? s.model : null;
    const held = active && s.base !== null;
    return {
      model,
      version: active ? s.version : 0,
      epoch: active ? s.epoch : null,
      state: held ? (s.stateless ? null : record.held) : undefined,
      impl: model !== null && Object.hasOwn(this.#models, model) ? this.#models[model] : null,
    };
  }

  /** Ends the active subscription: closes the connection (one subscription per connection). */
  #unsubscribe(record) {
    if (this.#sub !== record) return;
    this.#sub = null;
    this.#dispatch({ type: 'disconnect' });
    this.#watchVisibility(false);
  }

  /** Calls one of the active subscription's handlers; one that throws is reported. */
  #call(record, name, ...args) {
    const fn = record.handlers[name];
    if (!fn || this.#sub !== record) return;
    try {
      fn(...args);
    } catch (err) {
      report(err);
    }
  }

  // ---- callbacks ------------------------------------------------------------------------------

  /**
   * Called on every change of state, with what the page may show: `info.delayMs` in backoff,
   * `info.reason` and `info.message` in closed (reason "retry budget exhausted", message
   * "connection lost — retry": offer a button that calls `retry()`).
   * `info.gateway` (connecting: the index of the gateway this attempt uses; backoff: of the one the
   * next attempt will use) comes with `info.gatewayUrl`, that gateway's base URL.
   * @param {(state: Phase, info: ClientStateInfo) => void} fn
   * @returns {() => void} unsubscribe
   */
  onState(fn) {
    return this.#subscribe('state', fn);
  }

  /**
   * Called after each change of the canvas: `changed` is the pixel an event set, or null after a
   * snapshot replaced the whole canvas.
   * @param {(canvas: Canvas, changed: ChangedPixel | null) => void} fn
   * @returns {() => void} unsubscribe
   */
  onCanvas(fn) {
    return this.#subscribe('canvas', fn);
  }

  /**
   * Called with each line of the short log (transitions, failures, notices, ignored stale events),
   * prefixed with the time (UTC, `HH:MM:SS.mmm`).
   * @param {(line: string) => void} fn
   * @returns {() => void} unsubscribe
   */
  onLog(fn) {
    return this.#subscribe('log', fn);
  }

  // ---- getters --------------------------------------------------------------------------------

  /** @returns {Phase} idle, connecting, probation, stable, backoff or closed */
  get state() {
    return this.#state.phase;
  }

  /** @returns {ClientStateInfo} the info of the last state change */
  get info() {
    return { ...this.#info };
  }

  /** @returns {number} the last version applied (0 = nothing yet); the next socket asks for since = this */
  get version() {
    return this.#state.version;
  }

  /** @returns {string | null} the epoch of the canvas's stream from the last `welcome` (sent back as `epoch=`), null before it */
  get epoch() {
    return this.#state.epoch;
  }

  /** @returns {string | null} the node serving the current (or last) session, from its `welcome` frame */
  get node() {
    return this.#state.node ?? null;
  }

  /** @returns {number} id of the current (or last) attempt; 0 before the first */
  get attempt() {
    return this.#state.attempt;
  }

  /** @returns {number} failures since the last stable connection (the backoff exponent) */
  get failures() {
    return this.#state.failures;
  }

  /** @returns {Counters} a copy of the counters */
  get counters() {
    return structuredClone(this.#state.counters);
  }

  /** @returns {Canvas | null} the canvas (live object: width, height, pixels), null before the first snapshot */
  get canvas() {
    return this.#canvas;
  }

  /** @returns {string[]} the short log, oldest first */
  get log() {
    return [...this.#log];
  }

  /**
   * @returns {string} the base URL of the gateway the client is on: the current socket's; in
   *   backoff and closed, the one the next attempt will use (one of the `url` option's)
   */
  get gateway() {
    return this.#bases[this.#state.gateway] ?? this.#bases[0];
  }

  /** @returns {string[]} every gateway's base URL, in the order given */
  get gateways() {
    return [...this.#bases];
  }

  /** @returns {string | null} the URL the next attempt will open (null: a channel client without a subscription) */
  get nextUrl() {
    return this.#urlFor(this.gateway, this.#state.version, sentEpoch(this.#state));
  }

  /** The handshake URL of an attempt: the canvas's, or the active subscription's channel's. */
  #urlFor(base, since, epoch) {
    if (this.#canvasId !== null) return buildUrl(base, this.#canvasId, since, this.#path, epoch, this.#currentToken());
    if (!this.#sub) return null;
    return buildChannelUrl(base, this.#sub.channel, since, this.#path, epoch, this.#currentToken());
  }

  /** The token for the next attempt (the option's value, or what its function returns now). */
  #currentToken() {
    const t = typeof this.#token === 'function' ? this.#token() : this.#token;
    return typeof t === 'string' && t ? t : null;
  }

  /**
   * @returns {Promise<string | null>} lowercase hex SHA-256 of the canvas bytes, null without a
   *   canvas; on a channel client, the active subscription's `hash()` (null without one)
   */
  hash() {
    if (this.#canvasId === null) return this.#sub?.sub ? this.#sub.sub.hash() : Promise.resolve(null);
    return this.#canvas ? this.#canvas.hash() : Promise.resolve(null);
  }

  // ---- the loop -------------------------------------------------------------------------------

  /** Queues an event and, unless already inside the loop, runs the loop until the queue is empty. */
  #dispatch(event) {
    this.#queue.push(event);
    if (this.#busy) return;
    this.#busy = true;
    try {
      while (this.#queue.length > 0) {
        const ev = /** @type {MachineEvent} */ (this.#queue.shift());
        const { state, effects } = transition(this.#state, { ...ev, now: this.#now(), rand: this.#random() });
        this.#state = state;
        for (const fx of effects) this.#perform(fx);
      }
    } finally {
      this.#busy = false;
    }
  }

  /** @param {Effect} fx */
  #perform(fx) {
    switch (fx.type) {
      case 'open_socket':
        return this.#open(fx.attempt, fx.since, fx.epoch, fx.gateway);
      case 'close_socket':
        if (this.#socket && this.#socketAttempt === fx.attempt) {
          try {
            this.#socket.close(fx.code, fx.reason);
          } catch {
            // Already closing or closed: nothing to do.
          }
        }
        return;
      case 'set_timer': {
        this.#cancelTimer(fx.timer);
        const { timer, attempt } = fx;
        const handle = this.#setTimeout(() => {
          if (this.#timers.get(timer) === handle) this.#timers.delete(timer);
          this.#dispatch({ type: 'timer', timer, attempt });
        }, fx.delayMs);
        this.#timers.set(timer, handle);
        return;
      }
      case 'cancel_timer':
        return this.#cancelTimer(fx.timer);
      case 'apply_snapshot':
        this.#canvas = new Canvas(fx.width, fx.height, fx.pixels);
        return this.#emit('canvas', this.#canvas, null);
      case 'apply_event':
        if (!this.#canvas) return; // cannot happen: the machine applies events only after a snapshot
        this.#canvas.set(fx.x, fx.y, fx.rgb);
        return this.#emit('canvas', this.#canvas, { x: fx.x, y: fx.y, color: fx.color, version: fx.version });
      case 'apply_state':
      case 'apply_publication':
      case 'apply_reset':
        return this.#applyChannel(fx);
      case 'notify': {
        /** @type {ClientStateInfo} */
        const info = { ...fx.info };
        if (info.gateway !== undefined) info.gatewayUrl = this.#bases[info.gateway];
        this.#info = info;
        return this.#emit('state', fx.phase, { ...info });
      }
      case 'log':
        return this.#line(fx.line);
    }
  }

  /** A channel frame's effect on the active subscription: its state, then its handler. */
  #applyChannel(fx) {
    const r = this.#sub;
    if (!r) return; // unsubscribed while this frame's event waited in the queue
    if (fx.type === 'apply_state') {
      r.held = fx.state;
      return this.#call(r, 'onState', this.#view(r).state, fx.version);
    }
    if (fx.type === 'apply_reset') {
      const { version, epoch, previousVersion, previousEpoch } = fx;
      return this.#call(r, 'onReset', { channel: r.channel, version, epoch, previousVersion, previousEpoch });
    }
    const impl = this.#view(r).impl;
    if (impl?.stateful) {
      try {
        r.held = impl.apply(r.held, fx.data);
      } catch (err) {
        // A model whose check let through data its apply refuses (not one of the built-in ones).
        this.#line(`publication ${fx.version} not applied: ${err instanceof Error ? err.message : String(err)}`);
        report(err);
      }
    }
    return this.#call(r, 'onPublication', fx.data, fx.version, { channel: r.channel, publishedAtMs: fx.publishedAtMs });
  }

  /** A frame of the current socket, parsed by the canvas or the channel protocol. */
  #parse(data) {
    if (this.#canvasId !== null) return parseFrame(data, this.#canvasId);
    const r = this.#sub;
    // No subscription: the socket was left (unsubscribe), and the machine ignores its frames.
    if (!r) return { type: 'unknown_frame', frameType: 'no subscription' };
    const s = this.#state;
    const state = s.base !== null && !s.stateless ? r.held : undefined;
    return parseChannelFrame(data, { channel: r.channel, models: this.#models, model: s.model, state });
  }

  /** Opens the socket of an attempt on a gateway; its callbacks feed events tagged with that attempt. */
  #open(attempt, since, epoch, gateway = 0) {
    const url = this.#urlFor(this.#bases[gateway] ?? this.#bases[0], since, epoch);
    let ws;
    try {
      if (url === null) throw new Error('no subscription');
      ws = new this.#WebSocket(url);
    } catch (err) {
      // e.g. a SyntaxError for a malformed URL: a failed attempt like any other (queued, so it is
      // processed after the effects of the current event).
      this.#line(`socket constructor failed: ${err instanceof Error ? err.message : String(err)}`);
      this.#dispatch({ type: 'close', attempt, code: 1006, reason: 'constructor failed' });
      return;
    }
    this.#socket = ws;
    this.#socketAttempt = attempt;
    ws.onopen = () => this.#dispatch({ type: 'open', attempt });
    ws.onmessage = (m) => this.#dispatch({ ...this.#parse(m?.data), attempt });
    ws.onerror = () => this.#dispatch({ type: 'error', attempt });
    ws.onclose = (e) => this.#dispatch({ type: 'close', attempt, code: e?.code ?? 1006, reason: e?.reason ?? '' });
  }

  #cancelTimer(name) {
    if (!this.#timers.has(name)) return;
    this.#clearTimeout(this.#timers.get(name));
    this.#timers.delete(name);
  }

  #line(text) {
    const line = `${new Date(this.#now()).toISOString().slice(11, 23)} ${text}`;
    this.#log.push(line);
    if (this.#log.length > this.#logLimit) this.#log.splice(0, this.#log.length - this.#logLimit);
    this.#emit('log', line);
  }

  // ---- listeners and visibility ---------------------------------------------------------------

  #subscribe(kind, fn) {
    if (typeof fn !== 'function') throw new TypeError(`on${kind[0].toUpperCase()}${kind.slice(1)}: a function is required`);
    this.#listeners[kind].add(fn);
    return () => this.#listeners[kind].delete(fn);
  }

  /** Calls listeners; one that throws is reported and does not disturb the client or the others. */
  #emit(kind, ...args) {
    for (const fn of [...this.#listeners[kind]]) {
      try {
        fn(...args);
      } catch (err) {
        report(err);
      }
    }
  }

  /** Starts (on) or stops (off) following `document.visibilityState`, when there is a document. */
  #watchVisibility(on) {
    const doc = this.#document;
    if (!doc || typeof doc.addEventListener !== 'function') return;
    if (on && !this.#onVisibility) {
      this.#onVisibility = () => this.#dispatch({ type: 'visibility', hidden: doc.visibilityState === 'hidden' });
      doc.addEventListener('visibilitychange', this.#onVisibility);
      this.#onVisibility();
    } else if (!on && this.#onVisibility) {
      doc.removeEventListener?.('visibilitychange', this.#onVisibility);
      this.#onVisibility = null;
    }
  }
}

/**
 * The gateways' bases from the `url` option: one string, or a non-empty array of non-empty strings
 * (copied and frozen, so the caller's array may change afterwards).
 * @param {{url?: unknown, urls?: unknown}} o the options
 * @returns {readonly string[]}
 * @throws {TypeError} naming the problem
 */
function gatewayList(o) {
  const { url } = o;
  if (url === undefined && o.urls !== undefined) {
    throw new TypeError('FleetClient: there is no urls option: pass url, a string or an array of strings');
  }
  if (typeof url === 'string' && url) return Object.freeze([url]);
  if (!Array.isArray(url)) throw new TypeError('FleetClient: url is required (e.g. ws://host:8000)');
  if (url.length === 0) throw new TypeError('FleetClient: url is an empty array (list at least one gateway, e.g. ws://host:8000)');
  url.forEach((u, i) => {
    if (typeof u !== 'string' || !u) {
      const got = typeof u === 'string' ? 'an empty string' : u === null ? 'null' : typeof u;
      throw new TypeError(`FleetClient: url[${i}] must be a non-empty string (got ${got})`);
    }
  });
  return Object.freeze([...url]);
}

/** Reports an error a page's callback threw, without letting it disturb the client. */
function report(err) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(err);
  else console.error('FleetClient listener failed:', err);
}

/**
 * The `models` option, checked and frozen: name → model.
 * @param {unknown} models
 * @returns {Readonly<Record<string, Model>>}
 * @throws {TypeError} naming a model that lacks a function or `stateful`
 */
function modelTable(models) {
  if (models === undefined || models === null) return Object.freeze({});
  if (typeof models !== 'object') throw new TypeError('FleetClient: models must be an object of models by name');
  /** @type {Record<string, Model>} */
  const out = {};
  for (const [name, m] of Object.entries(models)) {
    const ok = m && typeof m.stateful === 'boolean' && ['fromState', 'check', 'apply', 'canonical'].every((f) => typeof m[f] === 'function');
    if (!ok) throw new TypeError(`FleetClient: models.${name} is not a model (stateful, fromState, check, apply, canonical)`);
    out[name] = m;
  }
  return Object.freeze(out);
}

/**
 * One channel subscription, made by `FleetClient.subscribe`. While active it shows the channel's
 * position and state as the client keeps them; after `unsubscribe()` it keeps the last ones.
 */
export class Subscription {
  #channel;
  #link;
  /** @type {ReturnType<SubscriptionLink['view']> | null} the view at unsubscribe */ #final = null;

  /**
   * @typedef {{view: () => {model: string | null, version: number, epoch: string | null, state: unknown, impl: Model | null},
   *   unsubscribe: () => void}} SubscriptionLink
   * @param {string} channel
   * @param {SubscriptionLink} link
   */
  constructor(channel, link) {
    this.#channel = channel;
    this.#link = link;
  }

  #view() {
    return this.#final ?? this.#link.view();
  }

  /** @returns {string} the channel id */
  get channel() {
    return this.#channel;
  }

  /** @returns {boolean} until `unsubscribe()` */
  get active() {
    return this.#final === null;
  }

  /** @returns {string | null} the channel's model (stream, latest, json, pixels), from the welcome; null before it */
  get model() {
    return this.#view().model;
  }

  /** @returns {number} the position: the last version applied (0 = nothing held) */
  get version() {
    return this.#view().version;
  }

  /** @returns {string | null} the epoch of the position (its history), null before a welcome named one */
  get epoch() {
    return this.#view().epoch;
  }

  /**
   * @returns {unknown} the state held: latest/json a JSON value, pixels a Canvas (live), stream
   *   null; undefined while none is held (before the first `state`, after a reset until the next)
   */
  get state() {
    return this.#view().state;
  }

  /**
   * The state's hash, as the publisher's `GET /channels/{id}` gives it: lowercase hex SHA-256 of
   * the model's canonical form (pixels: the RGB bytes; latest/json: the canonical JSON; stream: `null`).
   * @returns {Promise<string | null>} null while no state is held
   */
  hash() {
    const { impl, state } = this.#view();
    if (!impl || state === undefined) return Promise.resolve(null);
    const c = impl.canonical(state);
    return sha256Hex(typeof c === 'string' ? new TextEncoder().encode(c) : c);
  }

  /** Ends the subscription and closes the client's connection (one subscription per connection). */
  unsubscribe() {
    if (this.#final) return;
    this.#final = this.#link.view();
    this.#link.unsubscribe();
  }
}
