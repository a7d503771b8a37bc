/**
 * Types of the fleet client (index.js, the package's entry): `FleetClient` with `subscribe`, the
 * `Subscription`, its handlers, the options, the channel models, and the canvas API.
 * Written by hand next to the JavaScript (plain ES modules with JSDoc); web/test/types/example.ts
 * is checked against them with `tsc --noEmit -p web/test/types`.
 */

// ---- JSON and channels -------------------------------------------------------------------------

/** A JSON value, as `JSON.parse` gives it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The model a channel's namespace has, as the `welcome` frame names it. */
export type ModelName = 'stream' | 'latest' | 'json' | 'pixels';

/**
 * Whether `id` is a channel id: `name` or `namespace:name`, each part one or more of
 * `A-Z a-z 0-9 _ -`, at most one `:`, at most 128 bytes in all.
 */
export function isChannelId(id: unknown): id is string;

// ---- the client ---------------------------------------------------------------------------------

/** The connection's phase. */
export type Phase = 'idle' | 'connecting' | 'probation' | 'stable' | 'backoff' | 'closed';

/** The six phases, in the order of a normal life. */
export const PHASES: readonly Phase[];
/** The reason of `closed` when the retry budget is spent. */
export const BUDGET_EXHAUSTED: 'retry budget exhausted';
/** What a page shows for it (with a button calling `retry()`). */
export const BUDGET_MESSAGE: 'connection lost — retry';
/** The reason of `closed` after `close()` (or `unsubscribe()`). */
export const CLOSED_BY_USER: 'closed by user';

/** The reconnect tunables (durations in ms); any of them may be given as an option. */
export interface Tunables {
  /** Backoff of the first failure before jitter (1000). */
  baseDelayMs: number;
  /** Cap of the backoff before jitter (30000). */
  maxDelayMs: number;
  /** Fraction of each delay that is random, in [0, 1] (0.5). */
  jitter: number;
  /** Random extra on a server's `retry_after_ms`, at most half of it (500). */
  noticeJitterMs: number;
  /** Open this long before the backoff resets (10000). */
  stableMs: number;
  /** Per attempt (10000). */
  connectTimeoutMs: number;
  /** After a socket error, how long to wait for its close (2000). */
  closeWaitMs: number;
  /** Failures within `budgetWindowMs` that exhaust the retry budget (8). */
  budgetFailures: number;
  /** The retry budget's window (120000). */
  budgetWindowMs: number;
  /** Factor on failure delays while the page is hidden (4). */
  hiddenMultiplier: number;
}

/** The defaults of the tunables. */
export const DEFAULTS: Readonly<Tunables>;

/** What `onState` is told with each change of phase. */
export interface ClientStateInfo {
  attempt: number;
  /** connecting: the version asked for. */
  since?: number;
  /** connecting: the index (in `url`) of the gateway of this attempt; backoff: of the next one. */
  gateway?: number;
  /** The base URL of `gateway`. */
  gatewayUrl?: string;
  /** backoff/closed after a failure: why (e.g. `gap_resync`, `close_1012`, `refused`). */
  cause?: string;
  /** backoff: ms until the next attempt. */
  delayMs?: number;
  /** Failures since the last stable connection. */
  failures?: number;
  /** closed: why (`BUDGET_EXHAUSTED`, `CLOSED_BY_USER`). */
  reason?: string;
  /** closed by the budget: what to show (`BUDGET_MESSAGE`). */
  message?: string;
}

/** What the client has counted (see the README's Counters). */
export interface Counters {
  sockets: number;
  opens: number;
  stable: number;
  reconnects: Record<string, number>;
  closes: Record<string, number>;
  protocolErrorCloses: Record<string, number>;
  socketErrors: number;
  refusals: number;
  notices: number;
  resumesByEvents: number;
  resumesBySnapshot: number;
  epochChanges: number;
  snapshotsApplied: number;
  staleSnapshots: number;
  eventsApplied: number;
  duplicatesDropped: number;
  gapsSeen: number;
  badFrames: number;
  unknownFrames: number;
  staleEvents: number;
  budgetExhausted: number;
  resets: number;
}

/** The WebSocket surface the client uses (the browser's WebSocket has it). */
export interface SocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  close(code?: number, reason?: string): void;
}

/** Options of `new FleetClient(options)`; any key of `Tunables` may be given too. */
export interface FleetClientOptions extends Partial<Tunables> {
  /** The gateway's WebSocket base (`ws://host:8000`), or a non-empty list of gateway replicas. */
  url: string | readonly string[];
  /**
   * The pixels shorthand: follow this canvas by the canvas protocol (`canvas=`, `snapshot`/`event`
   * frames, `onCanvas`). Without it, use `subscribe(channel)`.
   */
  canvas?: string;
  /** Models to add to the built-in ones, or to replace one of them, by name. */
  models?: Readonly<Record<string, Model<any, any>>>;
  /** Endpoint path (`/ws`). */
  path?: string;
  /** The client token (a JWT), sent as `token=`; a function is asked before every attempt. */
  token?: string | (() => string | null | undefined) | null;
  /** Socket constructor (`globalThis.WebSocket`). */
  WebSocket?: new (url: string) => SocketLike;
  setTimeout?: (fn: () => void, ms: number) => unknown;
  clearTimeout?: (handle: any) => void;
  /** A number in [0, 1) (`Math.random`). */
  random?: () => number;
  /** The clock in ms (`Date.now`). */
  now?: () => number;
  /** Page visibility source (`globalThis.document`); null to ignore. */
  document?: {
    visibilityState?: string;
    addEventListener?: (type: string, fn: () => void) => void;
    removeEventListener?: (type: string, fn: () => void) => void;
  } | null;
  /** Lines kept in `log` (100). */
  logLimit?: number;
  onState?: (state: Phase, info: ClientStateInfo) => void;
  onCanvas?: (canvas: Canvas, changed: ChangedPixel | null) => void;
  onLog?: (line: string) => void;
}

/** A reconnecting WebSocket client: one channel subscription at a time, or one canvas. */
export class FleetClient {
  /**
   * @throws {TypeError} without url, with a canvas that is not a non-empty string, a model that is
   *   not one, or no WebSocket implementation
   * @throws {RangeError} when a tunable is invalid
   */
  constructor(options: FleetClientOptions);

  /**
   * Subscribes to a channel and connects (from idle or closed) with `channel=<id>`. One
   * subscription per connection for now: another while one is active throws, until
   * `sub.unsubscribe()`. `S` is the state's type, `D` a publication's data's (both unchecked:
   * the channel's model decides what they are; see `ModelState`).
   * @throws {TypeError} for an invalid channel id or a handler that is not a function
   * @throws {Error} on a canvas client, or while a subscription is active
   */
  subscribe<S = unknown, D = unknown>(channel: string, handlers?: SubscriptionHandlers<S, D>): Subscription<S, D>;
  /** The active subscription, null without one. */
  readonly subscription: Subscription | null;

  /** Connects from idle, or again from closed (a channel client: resumes its subscription). */
  connect(): this;
  /** Intentional close: never reconnects until `connect()` or `retry()`. */
  close(): this;
  /** From closed: fresh backoff and budget; from backoff: now. */
  retry(): this;
  /** Whether the page is hidden (automatic with a `document`). */
  setHidden(hidden: boolean): this;

  /** Every change of phase. @returns unsubscribe */
  onState(fn: (state: Phase, info: ClientStateInfo) => void): () => void;
  /** Every change of the canvas (canvas option only). @returns unsubscribe */
  onCanvas(fn: (canvas: Canvas, changed: ChangedPixel | null) => void): () => void;
  /** Every line of the short log. @returns unsubscribe */
  onLog(fn: (line: string) => void): () => void;

  readonly state: Phase;
  readonly info: ClientStateInfo;
  /** The last version applied (the subscription's or the canvas's). */
  readonly version: number;
  /** The epoch of the position, null before a welcome named one. */
  readonly epoch: string | null;
  /** The node of the current (or last) session. */
  readonly node: string | null;
  readonly attempt: number;
  readonly failures: number;
  readonly counters: Counters;
  /** The canvas (canvas option), null before its first snapshot and on a channel client. */
  readonly canvas: Canvas | null;
  readonly log: string[];
  /** The base URL of the gateway in use (or of the next attempt's). */
  readonly gateway: string;
  readonly gateways: string[];
  /** The URL the next attempt opens; null on a channel client without a subscription. */
  readonly nextUrl: string | null;
  /** The canvas's hash, or the subscription's; null without either. */
  hash(): Promise<string | null>;
}

/** What `onPublication` is told besides the data and the version. */
export interface PublicationInfo {
  channel: string;
  /** When the publisher took it (ms since the epoch), null when the frame did not say. */
  publishedAtMs: number | null;
}

/** What `onReset` is told: the position is now `version` of `epoch`. */
export interface ResetInfo {
  channel: string;
  version: number;
  epoch: string;
  previousVersion: number;
  previousEpoch: string | null;
}

/** A subscription's callbacks; each is optional. One that throws is reported and changes nothing. */
export interface SubscriptionHandlers<S = unknown, D = unknown> {
  /** After each publication was applied (`sub.state` is the new state). */
  onPublication?: (data: D, version: number, info: PublicationInfo) => void;
  /** When a `state` frame replaced the whole state (after subscribing, a resync, a reset). */
  onState?: (state: S, version: number) => void;
  /** After a `reset` moved the position (a stateful model's state follows in a `state` frame). */
  onReset?: (info: ResetInfo) => void;
}

/** One channel subscription (made by `FleetClient.subscribe`). */
export class Subscription<S = unknown, D = unknown> {
  private constructor();
  readonly channel: string;
  /** Until `unsubscribe()`. */
  readonly active: boolean;
  /** The channel's model, from the welcome; null before it. */
  readonly model: ModelName | (string & {}) | null;
  /** The position: the last version applied (0 = nothing held). */
  readonly version: number;
  /** The epoch of the position, null before a welcome named one. */
  readonly epoch: string | null;
  /**
   * The state held (latest/json: a JSON value; pixels: a live `Canvas`; stream: null), undefined
   * while none is (before the first `state`; after a reset, until the next). Read-only.
   */
  readonly state: S | undefined;
  /** Lowercase hex SHA-256 of the state's canonical form; null while no state is held. */
  hash(): Promise<string | null>;
  /** Ends the subscription and closes the connection; the last position and state stay readable. */
  unsubscribe(): void;
}

// ---- models -------------------------------------------------------------------------------------

/** A channel model: how a state is kept from `state` and `publication` frames. */
export interface Model<S, D = unknown> {
  readonly name: string;
  /** Whether a `state` frame brings a state (all but stream). */
  readonly stateful: boolean;
  /** The state at version 0 (pixels needs the size). */
  initial(size?: { width: number; height: number }): S;
  /** The state from a `state` frame's `state`. @throws for a malformed one */
  fromState(json: unknown): S;
  /** Null when `data` is a publication of this model (applicable to `state`, when given), else what is wrong. */
  check(data: unknown, state?: S): string | null;
  /** The state after a publication (pixels: the same canvas, changed in place). */
  apply(state: S, data: D): S;
  /** What the hash is of: canonical JSON text, or bytes (pixels). */
  canonical(state: S): string | Uint8Array;
}

/** A pixels publication's data. */
export interface PixelData {
  x: number;
  y: number;
  /** `#rrggbb` */
  color: string;
}

/** The state held for each built-in model. */
export interface ModelState {
  stream: null;
  latest: Json;
  json: Json;
  pixels: Canvas;
}

/** The built-in models by name. */
export const MODELS: Readonly<{
  stream: Model<null, Json> & { readonly name: 'stream'; readonly stateful: false; initial(): null };
  latest: Model<Json, Json> & { readonly name: 'latest'; readonly stateful: true; initial(): null };
  json: Model<Json, Json> & { readonly name: 'json'; readonly stateful: true; initial(): { [key: string]: Json } };
  pixels: Model<Canvas, PixelData> & { readonly name: 'pixels'; readonly stateful: true; initial(size: { width: number; height: number }): Canvas };
}>;

/** RFC 7386 JSON merge patch (the arguments are not changed). */
export function mergePatch(target: Json | undefined, patch: Json): Json;

/** Canonical JSON text: keys sorted recursively, `JSON.stringify` numbers and strings. @throws {TypeError} for a non-JSON value */
export function canonicalJson(value: Json): string;

// ---- the canvas ---------------------------------------------------------------------------------

/** The pixel an event set (`onCanvas`). */
export interface ChangedPixel {
  x: number;
  y: number;
  color: string;
  version: number;
}

/** A canvas of RGB pixels (unset = white). */
export class Canvas {
  /** @throws {RangeError} for a bad size or a pixel array of the wrong length */
  constructor(width: number, height: number, pixels?: Uint8Array);
  /** @throws {RangeError} when not base64 of width*height*3 bytes */
  static fromBase64(width: number, height: number, base64: string): Canvas;
  readonly width: number;
  readonly height: number;
  /** Row-major RGB, width*height*3 bytes. */
  pixels: Uint8Array;
  contains(x: number, y: number): boolean;
  get(x: number, y: number): [number, number, number];
  set(x: number, y: number, rgb: ArrayLike<number>): void;
  applyEvent(event: { x: number; y: number; color: string }): void;
  clone(): Canvas;
  /** Lowercase hex SHA-256 of the bytes. */
  hash(): Promise<string>;
}

// ---- the state machine (machine.js; for tests and tools) ---------------------------------------

/** The machine's state (treated as immutable). */
export interface MachineState {
  readonly phase: Phase;
  readonly config: Readonly<Tunables>;
  readonly attempt: number;
  readonly version: number;
  readonly epoch: string | null;
  readonly failures: number;
  readonly counters: Counters;
  readonly gateways: number;
  readonly gateway: number;
  readonly model: string | null;
  readonly [key: string]: unknown;
}

/** An event the machine accepts (see machine.js), stamped with `now` and `rand`. */
export interface MachineEvent {
  type: string;
  attempt?: number;
  now?: number;
  rand?: number;
  [key: string]: unknown;
}

/** An effect the shell performs (see machine.js). */
export interface Effect {
  type: 'open_socket' | 'close_socket' | 'set_timer' | 'cancel_timer' | 'apply_snapshot' | 'apply_event' | 'apply_state' | 'apply_publication' | 'apply_reset' | 'notify' | 'log';
  [key: string]: unknown;
}

/** A fresh machine in idle. @throws {RangeError} listing every invalid setting */
export function initialState(config?: Partial<Tunables>, gateways?: number): MachineState;
/** The pure transition function. */
export function transition(state: MachineState, event: MachineEvent): { state: MachineState; effects: Effect[] };
/** The gateway of the next attempt (see the README's Gateways). */
export function nextGateway(at: { index: number; count: number; outcome: 'failed' | 'dropped' | 'notice'; retried?: boolean }): { index: number; retried: boolean };
