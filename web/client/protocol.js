/**
 * protocol.js — the fleet's WebSocket protocol as the browser client sees it. Pure: no I/O.
 *
 * - {@link buildUrl}: the handshake URL `…/ws?canvas=<id>&since=<version>[&epoch=<epoch>]&refusal=frame`.
 * - {@link parseFrame}: one server text frame → one state-machine event (see machine.js), with
 *   every field checked, so the machine only ever sees well-formed data.
 * - {@link CLOSE}, {@link isProtocolError}, {@link closeCause}: close codes (RFC 6455 §7.4.1 and
 *   the IANA registry of §11.7) and the reconnect cause each one is counted under.
 *
 * Server → client frames (JSON text):
 *   {"type":"welcome","node":"ws-1","canvas":"c1","since":12,"epoch":"q5XGvJ9mR2yqH7Y1cjTQfA-0"}
 *     (first frame of every session: the serving node, and the epoch of the canvas's stream, which
 *     the client sends back as `epoch=` on every reconnect; another epoch than the one sent means
 *     the canvas's history was replaced (its topic recreated, the canvas reset) and a snapshot follows)
 *   {"type":"snapshot","canvas":"c1","version":12,"width":64,"height":64,"pixels":"<base64>"}
 *   {"type":"event","canvas":"c1","version":13,"x":1,"y":2,"color":"#ff0000","published_at_ms":…}
 *   {"type":"reconnect","reason":"FAILBACK_TO_RECOVERED_SERVER","retry_after_ms":250}
 *   {"type":"error","code":"no_owner","message":"…","retry_after_ms":1000}   (then close 1013)
 * Clients send nothing but control frames, so this module has no encoder.
 *
 * Channels (issue 33): {@link buildChannelUrl} gives `…/ws?channel=<id>&since=<v>[&epoch=<e>]&refusal=frame`
 * and {@link parseChannelFrame} parses that session's frames, each naming its channel:
 *   {"type":"welcome","node":"ws-1","channel":"scores:m1","model":"json","since":12,"epoch":"<epoch>"}
 *   {"type":"state","channel":"scores:m1","version":12,"state":<the model's JSON form>}
 *   {"type":"publication","channel":"scores:m1","version":13,"data":<json>,"published_at_ms":…}
 *   {"type":"reset","channel":"chat:lobby","version":40,"epoch":"<epoch>"}
 *   `reconnect` and `error` as above (an `error` may name the channel).
 * The models (models/*.js) are passed in, so this module imports none of them.
 */

import { decodeBase64, parseColor } from './canvas.js';

/** WebSocket close codes the fleet uses (RFC 6455 §7.4.1; 1012/1013 from the IANA registry). */
export const CLOSE = Object.freeze({
  /** Normal Closure. */
  NORMAL: 1000,
  /** Going Away: the node is shutting down. */
  GOING_AWAY: 1001,
  /** Protocol Error: the client broke the protocol. */
  PROTOCOL_ERROR: 1002,
  /** Unsupported Data (e.g. a binary frame where only text is accepted). */
  UNSUPPORTED_DATA: 1003,
  /** Abnormal Closure: never sent; reported locally when there was no close frame (also a failed handshake). */
  ABNORMAL: 1006,
  /** Invalid Frame Payload Data. */
  INVALID_PAYLOAD: 1007,
  /** Message Too Big. */
  MESSAGE_TOO_BIG: 1009,
  /** Service Restart: a drain ended or the node behind the gateway went away; reconnect with since. */
  SERVICE_RESTART: 1012,
  /** Try Again Later: refused for now, or this client was too slow; reconnect with since after a delay. */
  TRY_AGAIN_LATER: 1013,
});

const PROTOCOL_ERROR_CODES = new Set([1002, 1003, 1007, 1009]);

/**
 * Whether a close code says the client broke the protocol (1002, 1003, 1007, 1009). These are
 * counted apart from other closes: reconnecting the same way will likely fail again.
 * @param {number} code close code
 * @returns {boolean}
 */
export function isProtocolError(code) {
  return PROTOCOL_ERROR_CODES.has(code);
}

/**
 * The reconnect cause a close code is counted under: `dropped_1006` for an abnormal closure,
 * `protocol_error` for 1002/1003/1007/1009, `close_<code>` otherwise (e.g. `close_1012`).
 * @param {number} code close code
 * @returns {string}
 */
export function closeCause(code) {
  if (code === CLOSE.ABNORMAL) return 'dropped_1006';
  if (isProtocolError(code)) return 'protocol_error';
  return `close_${code}`;
}

/**
 * The handshake URL for a canvas.
 * @param {string} base the gateway's WebSocket base, e.g. `ws://host:8000` or `wss://host/fleet`
 * @param {string} canvas canvas id (1–64 of `A-Z a-z 0-9 - _`)
 * @param {number} since last version applied (0 = nothing yet: the server sends a snapshot)
 * @param {string} [path] endpoint path, `/ws` by default
 * @param {string | null} [epoch] the epoch of the last `welcome` (its versions' history); none
 *   before the first (or from a server that named none)
 * @param {string | null} [token] the client token (a JWT) when the fleet requires one: browsers
 *   cannot set headers on a WebSocket, so it travels as `token=`
 * @returns {string} e.g. `ws://host:8000/ws?canvas=c1&since=50&epoch=q5XGvJ9mR2yqH7Y1cjTQfA-0&refusal=frame`
 */
export function buildUrl(base, canvas, since, path = '/ws', epoch = null, token = null) {
  return handshakeUrl('canvas', base, canvas, since, path, epoch, token);
}

/** The handshake URL with `<key>=<id>` first (`canvas` or `channel`), then since, epoch, token. */
function handshakeUrl(key, base, id, since, path, epoch, token) {
  const root = String(base).replace(/\/+$/, '');
  const p = path.startsWith('/') ? path : `/${path}`;
  const e = epoch ? `&epoch=${encodeURIComponent(epoch)}` : '';
  const t = token ? `&token=${encodeURIComponent(token)}` : '';
  return `${root}${p}?${key}=${encodeURIComponent(id)}&since=${since}${e}${t}&refusal=frame`;
}

/** What an epoch looks like (the server's check): 1–100 of `A-Z a-z 0-9 - _`. */
const EPOCH = /^[A-Za-z0-9_-]{1,100}$/;

/**
 * @typedef {{type:'snapshot', version:number, width:number, height:number, pixels:Uint8Array}} SnapshotFrame
 *   the whole canvas at `version`; `pixels` is width*height*3 bytes, row-major RGB
 * @typedef {{type:'event', version:number, x:number, y:number, color:string, rgb:number[], publishedAtMs:number|null}} EventFrame
 *   one pixel change; `color` as sent (`#rrggbb`), `rgb` its three bytes
 * @typedef {{type:'notice', reason:string, retryAfterMs:number}} NoticeFrame
 *   a `reconnect` notice: reconnect after retryAfterMs (ms) plus jitter; not a failure
 * @typedef {{type:'refused', code:string, message:string, retryAfterMs:number}} RefusedFrame
 *   an `error` frame: the server refused the session for now; wait at least retryAfterMs (ms)
 * @typedef {{type:'welcome', node:string, epoch:string|null}} WelcomeFrame
 *   the first frame of a session: which node serves it, and the epoch of the canvas's stream
 *   (null when the server named none, or one that is not an epoch)
 * @typedef {{type:'bad_frame', detail:string}} BadFrame
 *   a frame that cannot be trusted (not JSON, a known type with invalid fields, another canvas)
 * @typedef {{type:'unknown_frame', frameType:string}} UnknownFrame
 *   valid JSON of a type this client does not know: ignored (forward compatibility)
 * @typedef {WelcomeFrame|SnapshotFrame|EventFrame|NoticeFrame|RefusedFrame|BadFrame|UnknownFrame} ParsedFrame
 */

const isUint = (v) => Number.isSafeInteger(v) && v >= 0;
const bad = (detail) => ({ type: 'bad_frame', detail });
/** A non-negative number of ms, or 0 when absent or invalid. */
const ms = (v) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

/**
 * Parses one server frame into a state-machine event (without `attempt`, which the shell adds).
 * Never throws.
 * @param {unknown} data the `MessageEvent.data` (a string for text frames)
 * @param {string} canvas the canvas this client asked for; frames naming another are bad
 * @returns {ParsedFrame}
 */
export function parseFrame(data, canvas) {
  if (typeof data !== 'string') return bad('binary frame');
  let msg;
  try {
    msg = JSON.parse(data);
  } catch {
    return bad('not JSON');
  }
  if (msg === null || typeof msg !== 'object' || typeof msg.type !== 'string') return bad('no type');
  switch (msg.type) {
    case 'welcome':
      return {
        type: 'welcome',
        node: String(msg.node ?? ''),
        epoch: typeof msg.epoch === 'string' && EPOCH.test(msg.epoch) ? msg.epoch : null,
      };
    case 'snapshot': {
      if (msg.canvas !== canvas) return bad('snapshot of another canvas');
      const { version, width, height, pixels } = msg;
      if (!isUint(version)) return bad('snapshot version');
      if (!isUint(width) || !isUint(height) || width === 0 || height === 0) return bad('snapshot size');
      if (typeof pixels !== 'string') return bad('snapshot pixels');
      const bytes = decodeBase64(pixels);
      if (!bytes || bytes.length !== width * height * 3) return bad('snapshot pixels length');
      return { type: 'snapshot', version, width, height, pixels: bytes };
    }
    case 'event': {
      if (msg.canvas !== canvas) return bad('event of another canvas');
      const { version, x, y, color } = msg;
      if (!isUint(version) || version === 0) return bad('event version');
      if (!isUint(x) || !isUint(y)) return bad('event coordinates');
      const rgb = parseColor(color);
      if (!rgb) return bad('event color');
      const publishedAtMs = typeof msg.published_at_ms === 'number' ? msg.published_at_ms : null;
      return { type: 'event', version, x, y, color, rgb, publishedAtMs };
    }
    case 'reconnect':
      return { type: 'notice', reason: String(msg.reason ?? ''), retryAfterMs: ms(msg.retry_after_ms) };
    case 'error':
      return {
        type: 'refused',
        code: String(msg.code ?? ''),
        message: String(msg.message ?? ''),
        retryAfterMs: ms(msg.retry_after_ms),
      };
    default:
      return { type: 'unknown_frame', frameType: msg.type };
  }
}

// ---------------------------------------------------------------------------------------------
// Channels

/** A channel id: `name` or `namespace:name`, each part 1+ of `A-Z a-z 0-9 _ -`. */
const CHANNEL = /^[A-Za-z0-9_-]+(:[A-Za-z0-9_-]+)?$/;
/** The longest channel id, in bytes (its characters are ASCII, so in characters too). */
export const MAX_CHANNEL_BYTES = 128;

/**
 * Whether `id` is a channel id: `name` or `namespace:name`, each part one or more of
 * `A-Z a-z 0-9 _ -`, at most one `:`, at most 128 bytes in all.
 * @param {unknown} id
 * @returns {id is string}
 */
export function isChannelId(id) {
  return typeof id === 'string' && id.length <= MAX_CHANNEL_BYTES && CHANNEL.test(id);
}

/**
 * The handshake URL for a channel.
 * @param {string} base the gateway's WebSocket base, e.g. `ws://host:8000`
 * @param {string} channel channel id
 * @param {number} since the subscription's version (0 = nothing held yet)
 * @param {string} [path] endpoint path, `/ws` by default
 * @param {string | null} [epoch] the epoch of the subscription's position, when it holds one
 * @param {string | null} [token] the client token (a JWT), sent as `token=`
 * @returns {string} e.g. `ws://host:8000/ws?channel=scores%3Am1&since=12&epoch=T-0&refusal=frame`
 */
export function buildChannelUrl(base, channel, since, path = '/ws', epoch = null, token = null) {
  return handshakeUrl('channel', base, channel, since, path, epoch, token);
}

/**
 * The models a channel session may name, as parseChannelFrame needs them: by name, each with
 * `stateful`, `fromState(json)` and `check(data, state?)` (see models/*.js).
 * @typedef {{stateful: boolean, fromState: (json: unknown) => unknown, check: (data: unknown, state?: any) => string | null}} FrameModel
 */

/**
 * What a channel session's frames are parsed against.
 * @typedef {object} ChannelContext
 * @property {string} channel the channel subscribed to; a frame naming another is bad
 * @property {Readonly<Record<string, FrameModel>>} models the models this client knows, by name
 * @property {string | null} model the channel's model, from the last `welcome` (null before one):
 *   `state` and `publication` frames are checked against it
 * @property {unknown} [state] the state held (undefined when none): a publication's data is checked against it
 */

/**
 * @typedef {{type:'welcome', node:string, epoch:string|null, model:string, stateless:boolean}} ChannelWelcomeFrame
 *   the first frame of a channel session: the node, the epoch, and the channel's model
 *   (`stateless` for a model with no state, i.e. stream)
 * @typedef {{type:'state', version:number, state:unknown}} StateFrame
 *   the channel's whole state at `version`, already in the model's form (`fromState`)
 * @typedef {{type:'publication', version:number, data:unknown, publishedAtMs:number|null}} PublicationFrame
 *   one publication, its data checked against the model (and the state held)
 * @typedef {{type:'reset', version:number, epoch:string}} ResetFrame
 *   the position is now `version` of `epoch`; what came between is not coming
 * @typedef {ChannelWelcomeFrame|StateFrame|PublicationFrame|ResetFrame|NoticeFrame|RefusedFrame|BadFrame|UnknownFrame} ParsedChannelFrame
 */

/**
 * Parses one frame of a channel session into a state-machine event (without `attempt`). Every field
 * is checked: the channel (each frame names it), versions (integers ≥ 0; a publication's ≥ 1), the
 * welcome's model (one of `ctx.models`) and `since`, a reset's epoch, a state's form and a
 * publication's data (by the model). Never throws.
 * @param {unknown} data the `MessageEvent.data`
 * @param {ChannelContext} ctx
 * @returns {ParsedChannelFrame}
 */
export function parseChannelFrame(data, ctx) {
  if (typeof data !== 'string') return bad('binary frame');
  let msg;
  try {
    msg = JSON.parse(data);
  } catch {
    return bad('not JSON');
  }
  if (msg === null || typeof msg !== 'object' || typeof msg.type !== 'string') return bad('no type');
  const model = ctx.model !== null && Object.hasOwn(ctx.models, ctx.model) ? ctx.models[ctx.model] : null;
  switch (msg.type) {
    case 'welcome': {
      if (msg.channel !== ctx.channel) return bad('welcome of another channel');
      if (typeof msg.node !== 'string') return bad('welcome node');
      if (typeof msg.model !== 'string' || !Object.hasOwn(ctx.models, msg.model)) {
        return bad(`welcome model ${JSON.stringify(msg.model)} (this client knows ${Object.keys(ctx.models).join(', ') || 'none'})`);
      }
      if (msg.since !== undefined && !isUint(msg.since)) return bad('welcome since');
      const epoch = typeof msg.epoch === 'string' && EPOCH.test(msg.epoch) ? msg.epoch : null;
      return { type: 'welcome', node: msg.node, epoch, model: msg.model, stateless: !ctx.models[msg.model].stateful };
    }
    case 'state': {
      if (msg.channel !== ctx.channel) return bad('state of another channel');
      if (!isUint(msg.version)) return bad('state version');
      if (!model) return bad('state before a welcome named the model');
      try {
        return { type: 'state', version: msg.version, state: model.fromState(msg.state) };
      } catch (err) {
        return bad(`state: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    case 'publication': {
      if (msg.channel !== ctx.channel) return bad('publication of another channel');
      if (!isUint(msg.version) || msg.version === 0) return bad('publication version');
      if (!Object.hasOwn(msg, 'data')) return bad('publication data');
      if (!model) return bad('publication before a welcome named the model');
      const problem = model.check(msg.data, ctx.state);
      if (problem !== null) return bad(`publication data: ${problem}`);
      if (msg.published_at_ms !== undefined && msg.published_at_ms !== null && !isUint(msg.published_at_ms)) return bad('publication published_at_ms');
      return { type: 'publication', version: msg.version, data: msg.data, publishedAtMs: msg.published_at_ms ?? null };
    }
    case 'reset': {
      if (msg.channel !== ctx.channel) return bad('reset of another channel');
      if (!isUint(msg.version)) return bad('reset version');
      if (typeof msg.epoch !== 'string' || !EPOCH.test(msg.epoch)) return bad('reset epoch');
      return { type: 'reset', version: msg.version, epoch: msg.epoch };
    }
    case 'error':
      if (msg.channel !== undefined && msg.channel !== null && msg.channel !== ctx.channel) return bad('error of another channel');
      return parseFrame(data, '');
    case 'reconnect':
      return parseFrame(data, '');
    case 'snapshot':
    case 'event':
      return bad(`a canvas ${msg.type} frame on a channel session`);
    default:
      return { type: 'unknown_frame', frameType: msg.type };
  }
}
