/**
 * helpers.js — fakes for the client tests: a manual clock with timers, a scriptable WebSocket, and
 * frame builders. No dependencies beyond Node's standard library.
 */

import { FleetClient } from '../../client/fleet-client.js';

/** Start of fake time (ms since the epoch). */
export const T0 = 1_764_400_000_000;

/**
 * A manual clock. `setTimeout`/`clearTimeout`/`now` are bound functions to inject into the client.
 * With `leakyClear`, clearTimeout does nothing: every timer fires, as if a cancel were lost or the
 * timer had already been queued, so only the client's attempt ids can keep it from doing harm.
 */
export class FakeClock {
  /** @param {{leakyClear?: boolean}} [opts] */
  constructor(opts = {}) {
    this.t = T0;
    this.leakyClear = Boolean(opts.leakyClear);
    /** @type {Map<number, {at:number, fn:() => void, network:boolean}>} */
    this.timers = new Map();
    this.seq = 0;
    this.now = () => this.t;
    this.setTimeout = (fn, ms) => this.#add(fn, ms, false);
    this.clearTimeout = (id) => {
      if (!this.leakyClear) this.timers.delete(id);
    };
  }

  /** A timer of the fake network (e.g. a close handshake), not of the client. */
  network(fn, ms) {
    return this.#add(fn, ms, true);
  }

  #add(fn, ms, network) {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, Number(ms) || 0), fn, network });
    return id;
  }

  /** @returns {number} timers the client has pending (network timers excluded) */
  pending() {
    let n = 0;
    for (const t of this.timers.values()) if (!t.network) n++;
    return n;
  }

  /** Fires the earliest timer due at or before `limit`; @returns {boolean} whether one fired */
  #fireNext(limit) {
    let best = null;
    for (const [id, t] of this.timers) {
      if (t.at <= limit && (best === null || t.at < best[1].at || (t.at === best[1].at && id < best[0]))) best = [id, t];
    }
    if (!best) return false;
    this.timers.delete(best[0]);
    this.t = Math.max(this.t, best[1].at);
    best[1].fn();
    return true;
  }

  /** Advances time by `ms`, firing due timers in order. */
  advance(ms) {
    const end = this.t + ms;
    while (this.#fireNext(end));
    this.t = end;
  }

  /**
   * Fires timers in order until `pred()` holds, for at most `maxMs`.
   * @returns {number | null} the ms elapsed when it first held, or null if it never did
   */
  runUntil(pred, maxMs = 600_000) {
    const start = this.t;
    const end = start + maxMs;
    while (!pred()) {
      if (!this.#fireNext(end)) {
        this.t = end;
        return null;
      }
    }
    return this.t - start;
  }
}

/**
 * A scriptable WebSocket class bound to a clock. Instances are recorded in `sockets`. The test plays
 * the server: `open()`, `send(frame)`, `serverClose(code)`, `fail()` (error, then close 1006 as
 * browsers do). The client's `close()` is recorded in `closeCalls`, and its close event arrives
 * 1 ms later (a network timer), as a real close handshake would, late.
 */
export function fakeNetwork(clock) {
  /** @type {FakeSocket[]} */
  const sockets = [];
  class FakeSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      /** @type {{code?:number, reason?:string}[]} */
      this.closeCalls = [];
      this.onopen = null;
      this.onmessage = null;
      this.onerror = null;
      this.onclose = null;
      sockets.push(this);
    }

    /** @returns {URLSearchParams} the handshake query */
    get query() {
      return new URL(this.url).searchParams;
    }

    /** @returns {number} the `since` this socket asked for */
    get since() {
      return Number(this.query.get('since'));
    }

    open() {
      this.readyState = 1;
      this.onopen?.({});
    }

    /** Delivers a frame (an object is sent as JSON text). */
    send(frame) {
      this.onmessage?.({ data: typeof frame === 'string' ? frame : JSON.stringify(frame) });
    }

    serverClose(code = 1000, reason = '') {
      this.readyState = 3;
      this.onclose?.({ code, reason, wasClean: code !== 1006 });
    }

    error() {
      this.onerror?.({});
    }

    fail() {
      this.error();
      this.serverClose(1006);
    }

    close(code, reason) {
      this.closeCalls.push({ code, reason });
      if (this.readyState >= 2) return;
      this.readyState = 2;
      clock.network(() => {
        this.readyState = 3;
        this.onclose?.({ code: code ?? 1005, reason: reason ?? '', wasClean: true });
      }, 1);
    }
  }
  return { FakeSocket, sockets };
}

/**
 * A client wired to fakes.
 * @param {object} [opts] `random` (a number, or a function), `leakyClear`, `document`, `FleetClient`
 *   (the class, fleet-client.js's by default), and any client option
 * @returns {{client: FleetClient, clock: FakeClock, sockets: any[], last: () => any, states: {state:string, info:any, at:number}[], setRandom: (r:number) => void}}
 */
export function harness(opts = {}) {
  const { random = 0, leakyClear = false, FleetClient: Client = FleetClient, ...rest } = opts;
  const clock = new FakeClock({ leakyClear });
  const net = fakeNetwork(clock);
  let r = random;
  const client = new Client({
    url: 'ws://gateway:8000',
    canvas: 'c1',
    WebSocket: net.FakeSocket,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    random: () => (typeof r === 'function' ? r() : r),
    now: clock.now,
    document: null,
    ...rest,
  });
  const states = [];
  client.onState((state, info) => states.push({ state, info, at: clock.t }));
  return {
    client,
    clock,
    sockets: net.sockets,
    last: () => net.sockets[net.sockets.length - 1],
    states,
    setRandom: (v) => {
      r = v;
    },
  };
}

/**
 * Fires timers until a new socket exists.
 * @returns {number} ms from now until it was created
 * @throws when none appears within maxMs
 */
export function untilNextSocket(h, maxMs = 600_000) {
  const n = h.sockets.length;
  const elapsed = h.clock.runUntil(() => h.sockets.length > n, maxMs);
  if (elapsed === null) throw new Error(`no new socket within ${maxMs} ms (state ${h.client.state})`);
  return elapsed;
}

/** Base64 of bytes. */
export function b64(bytes) {
  return Buffer.from(bytes).toString('base64');
}

/** An all-white canvas's bytes. */
export function white(width, height) {
  return new Uint8Array(width * height * 3).fill(255);
}

/** A snapshot frame (a white 4×4 canvas unless bytes are given). */
export function snapshot(version, { canvas = 'c1', width = 4, height = 4, bytes = white(width, height) } = {}) {
  return { type: 'snapshot', canvas, version, width, height, pixels: b64(bytes) };
}

/** An event frame. */
export function event(version, x = 0, y = 0, color = '#ff0000', canvas = 'c1') {
  return { type: 'event', canvas, version, x, y, color, published_at_ms: T0 };
}

/** An event frame whose pixel and colour follow from its version (so a canvas depends on every version). */
export function eventFor(version, width = 4, height = 4) {
  const i = version % (width * height);
  const color = `#${(version * 2654435761 % 0xffffff).toString(16).padStart(6, '0')}`;
  return event(version, i % width, Math.floor(i / width), color);
}
