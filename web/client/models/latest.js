/**
 * latest.js — the `latest` model: the state is the last publication's data (any JSON value; null at
 * version 0). Its hash is of the state's canonical JSON (canonical.js).
 */

import { canonicalJson } from './canonical.js';

/** The model's name, as a `welcome` frame names it. */
export const name = 'latest';
/** Whether the model has a state that a `state` frame brings. */
export const stateful = true;

/** @returns {null} the state at version 0 */
export function initial() {
  return null;
}

/**
 * The state from a `state` frame's `state`: the value itself.
 * @param {unknown} json any JSON value
 * @returns {unknown}
 * @throws {TypeError} when there is none (undefined)
 */
export function fromState(json) {
  if (json === undefined) throw new TypeError('no state');
  return json;
}

/**
 * Whether `data` is a publication of this model: any JSON value is.
 * @param {unknown} data
 * @returns {string | null} null, or what is wrong
 */
export function check(data) {
  return data === undefined ? 'no data' : null;
}

/**
 * @param {unknown} state
 * @param {unknown} data
 * @returns {unknown} the new state: the publication's data
 */
export function apply(state, data) {
  return data;
}

/**
 * @param {unknown} state
 * @returns {string} the canonical JSON the hash is of
 */
export function canonical(state) {
  return canonicalJson(state);
}
