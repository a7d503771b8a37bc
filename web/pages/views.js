/**
 * views.js — the pure parts of the `/` page's channel views, without the DOM (unit-tested in
 * web/test/pages/views.test.js):
 *
 * - {@link pageChannel}: the channel a page address names (`?channel=`, or `?canvas=` as an alias).
 * - {@link jsonLines}: a JSON value (a `json` document, a `latest` value) as the lines of its
 *   pretty-printed text, each line's tokens classed for colouring and tagged with its JSON Pointer,
 *   keys sorted (as the servers' JSON and the hashes' canonical form have them, so a reconnect
 *   does not reorder the document). The lines' text is `JSON.stringify(value, null, 2)` of the
 *   value with sorted keys.
 * - {@link changedPaths} / {@link isChanged}: what differs between two versions of the value, so
 *   the page can mark what the last publications changed.
 * - {@link StreamLog}: a `stream` channel's publications as the page keeps them: the last `limit`
 *   (oldest dropped), cleared by a reset or a new state.
 */

import { isChannelId } from '../client/protocol.js';

/** The channel of `/` without a query: a canvas, as before channels. */
export const DEFAULT_CHANNEL = 'c1';

/** What a bad id gets: the rules of a channel id. */
const ID_RULES = 'use name or namespace:name, each part of A-Z a-z 0-9 _ -, at most 128 characters';

/**
 * The channel a page's query names: `channel`, else `canvas` (the old name, still in links), else
 * {@link DEFAULT_CHANNEL}. An empty parameter counts as absent.
 * @param {string} search `location.search`, e.g. `?channel=scores:final`
 * @returns {{id: string, error: string | null}} `error` when `id` is not a channel id
 */
export function pageChannel(search) {
  const q = new URLSearchParams(search);
  const id = q.get('channel') || q.get('canvas') || DEFAULT_CHANNEL;
  return { id, error: channelIdError(id) };
}

/**
 * @param {string} id
 * @returns {string | null} what is wrong with `id` as a channel id, or null
 */
export function channelIdError(id) {
  if (isChannelId(id)) return null;
  if (id === '') return `enter a channel id (${ID_RULES})`;
  return `invalid channel id ${JSON.stringify(id.slice(0, 80))}: ${ID_RULES}`;
}

/**
 * @typedef {'key' | 'string' | 'number' | 'boolean' | 'null' | 'punct'} TokenKind
 * @typedef {{text: string, kind: TokenKind}} Token
 * @typedef {{path: string, depth: number, tokens: Token[]}} JsonLine one line of the text:
 *   `path` is the JSON Pointer of the member or element the line shows (`""` for the document)
 */

const INDENT = '  ';

/** @param {unknown} v @returns {v is Record<string, unknown>} */
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A JSON Pointer (RFC 6901) reference token. */
const pointer = (parent, key) => `${parent}/${String(key).replaceAll('~', '~0').replaceAll('/', '~1')}`;

/** @param {unknown} v @returns {Token} */
function scalar(v) {
  if (v === null || v === undefined) return { text: 'null', kind: 'null' };
  if (typeof v === 'string') return { text: JSON.stringify(v), kind: 'string' };
  if (typeof v === 'number') return { text: Number.isFinite(v) ? String(JSON.stringify(v)) : 'null', kind: Number.isFinite(v) ? 'number' : 'null' };
  if (typeof v === 'boolean') return { text: String(v), kind: 'boolean' };
  return { text: JSON.stringify(v) ?? 'null', kind: 'string' };
}

/**
 * The lines of `value` pretty-printed (two spaces per level, object keys sorted).
 * @param {unknown} value a JSON value
 * @returns {JsonLine[]}
 */
export function jsonLines(value) {
  /** @type {JsonLine[]} */
  const out = [];
  /**
   * @param {unknown} v
   * @param {string} path
   * @param {number} depth
   * @param {Token[]} lead the tokens before the value on its first line (the key)
   * @param {boolean} comma whether a comma follows the value
   */
  const walk = (v, path, depth, lead, comma) => {
    const tail = comma ? [{ text: ',', kind: /** @type {TokenKind} */ ('punct') }] : [];
    const pad = { text: INDENT.repeat(depth), kind: /** @type {TokenKind} */ ('punct') };
    const entries = Array.isArray(v) ? v.map((x, i) => [i, x]) : isObject(v) ? Object.keys(v).sort().map((k) => [k, v[k]]) : null;
    if (entries === null || entries.length === 0) {
      const t = entries === null ? scalar(v) : { text: Array.isArray(v) ? '[]' : '{}', kind: /** @type {TokenKind} */ ('punct') };
      out.push({ path, depth, tokens: [pad, ...lead, t, ...tail] });
      return;
    }
    const [open, close] = Array.isArray(v) ? ['[', ']'] : ['{', '}'];
    out.push({ path, depth, tokens: [pad, ...lead, { text: open, kind: 'punct' }] });
    entries.forEach(([k, x], i) => {
      const key = Array.isArray(v) ? [] : [{ text: JSON.stringify(k), kind: /** @type {TokenKind} */ ('key') }, { text: ': ', kind: /** @type {TokenKind} */ ('punct') }];
      walk(x, pointer(path, k), depth + 1, key, i < entries.length - 1);
    });
    out.push({ path, depth, tokens: [pad, { text: close, kind: 'punct' }, ...tail] });
  };
  walk(value, '', 0, [], false);
  return out;
}

/**
 * The text of lines from {@link jsonLines}.
 * @param {JsonLine[]} lines
 * @returns {string}
 */
export function linesText(lines) {
  return lines.map((l) => l.tokens.map((t) => t.text).join('')).join('\n');
}

/**
 * The JSON Pointers of what differs from `before` to `after`: a member or element that was added
 * or whose scalar value changed, or, for a value that changed kind (an object became a number, an
 * array changed length), that value's own path. Removed members are not listed: they are no
 * longer shown.
 * @param {unknown} before
 * @param {unknown} after
 * @param {string} [path]
 * @returns {string[]}
 */
export function changedPaths(before, after, path = '') {
  if (isObject(before) && isObject(after)) {
    return Object.keys(after).flatMap((k) => (Object.hasOwn(before, k) ? changedPaths(before[k], after[k], pointer(path, k)) : [pointer(path, k)]));
  }
  if (Array.isArray(before) && Array.isArray(after) && before.length === after.length) {
    return after.flatMap((x, i) => changedPaths(before[i], x, pointer(path, i)));
  }
  const scalars = !isContainer(before) && !isContainer(after);
  return scalars && Object.is(before, after) ? [] : [path];
}

/** @param {unknown} v */
const isContainer = (v) => v !== null && typeof v === 'object';

/**
 * Whether a line of `path` shows something in `changed` (from {@link changedPaths}): the path
 * itself, or inside one.
 * @param {string} path
 * @param {string[]} changed
 * @returns {boolean}
 */
export function isChanged(path, changed) {
  return changed.some((c) => path === c || path.startsWith(`${c}/`));
}

/**
 * @typedef {{version: number, data: unknown, publishedAtMs: number | null}} StreamItem
 */

/**
 * A stream channel's publications as the page shows them: the last `limit`, oldest first.
 * `received` counts every publication since the last clear (so the page can say how many it no
 * longer shows); `note` says where the list starts (a state's version, a reset).
 */
export class StreamLog {
  /** @type {StreamItem[]} */ items = [];
  received = 0;
  /** @type {string} */ note = '';
  #limit;

  /** @param {number} limit at least 1 */
  constructor(limit) {
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError('StreamLog: limit must be a positive integer');
    this.#limit = limit;
  }

  /** @returns {number} */
  get limit() {
    return this.#limit;
  }

  /** @returns {number} publications received since the last clear that are no longer kept */
  get dropped() {
    return this.received - this.items.length;
  }

  /**
   * Adds a publication at the end; drops the oldest beyond the limit.
   * @param {StreamItem} item
   * @returns {number} how many were dropped from the front (0 or 1)
   */
  push(item) {
    this.items.push(item);
    this.received += 1;
    if (this.items.length <= this.#limit) return 0;
    this.items.shift();
    return 1;
  }

  /**
   * Forgets every publication (a reset, a new state): the list starts again.
   * @param {string} note where it starts now
   */
  clear(note) {
    this.items = [];
    this.received = 0;
    this.note = note;
  }
}

/**
 * A stream item's line: `v<version>  <HH:MM:SS.mmm UTC of its publication>  <data as compact JSON>`.
 * @param {StreamItem} item
 * @returns {{version: string, time: string, data: string}}
 */
export function streamItemText(item) {
  const t = Number.isFinite(item.publishedAtMs) ? new Date(/** @type {number} */ (item.publishedAtMs)).toISOString().slice(11, 23) : '';
  return { version: `v${item.version}`, time: t, data: JSON.stringify(item.data) ?? 'null' };
}
