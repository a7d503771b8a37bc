/**
 * json.js — the `json` model: the state is a JSON document (`{}` at version 0) and each
 * publication's data is an RFC 7386 JSON merge patch applied to it. Its hash is of the state's
 * canonical JSON (canonical.js).
 *
 * The merge patch is written here ({@link mergePatch}, RFC 7386 §2) as the client has no
 * dependencies. It never changes its arguments: the result shares the parts of the target the patch
 * does not touch, and a state handed to a page is never modified afterwards.
 */

import { canonicalJson } from './canonical.js';

/** The model's name, as a `welcome` frame names it. */
export const name = 'json';
/** Whether the model has a state that a `state` frame brings. */
export const stateful = true;

/** @returns {{}} the state at version 0: an empty object */
export function initial() {
  return {};
}

/**
 * The state from a `state` frame's `state`: the document itself.
 * @param {unknown} json a JSON document
 * @returns {unknown}
 * @throws {TypeError} when there is none (undefined)
 */
export function fromState(json) {
  if (json === undefined) throw new TypeError('no state');
  return json;
}

/**
 * Whether `data` is a publication of this model: any JSON value is a merge patch (one that is not
 * an object replaces the whole document).
 * @param {unknown} data
 * @returns {string | null} null, or what is wrong
 */
export function check(data) {
  return data === undefined ? 'no data' : null;
}

/**
 * @param {unknown} state
 * @param {unknown} data an RFC 7386 merge patch
 * @returns {unknown} the new state (a new value; `state` is not changed)
 */
export function apply(state, data) {
  return mergePatch(state, data);
}

/**
 * @param {unknown} state
 * @returns {string} the canonical JSON the hash is of
 */
export function canonical(state) {
  return canonicalJson(state);
}

/** @param {unknown} v @returns {v is Record<string, unknown>} a JSON object (not null, not an array) */
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * RFC 7386 JSON merge patch: a patch that is not an object replaces the target; an object patch
 * sets each of its members on the target (made an object first if it is not one), recursively, and
 * a member whose value is null removes that member. Keys are set as own data properties, so a
 * `__proto__` member is a member like any other.
 * @param {unknown} target the document
 * @param {unknown} patch the merge patch
 * @returns {unknown} the patched document (new objects along the patched paths; the arguments are not changed)
 */
export function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  /** @type {Record<string, unknown>} */
  const out = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else Object.defineProperty(out, key, { value: mergePatch(Object.hasOwn(out, key) ? out[key] : undefined, value), writable: true, enumerable: true, configurable: true });
  }
  return out;
}
