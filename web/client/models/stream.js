/**
 * stream.js — the `stream` model: no state (null at every version); a publication is any JSON
 * value, passed on and not kept. Its hash is of the text `null`.
 */

/** The model's name, as a `welcome` frame names it. */
export const name = 'stream';
/** Whether the model has a state that a `state` frame brings (a stream has none). */
export const stateful = false;

/** @returns {null} the state at version 0: nothing */
export function initial() {
  return null;
}

/**
 * The state from a `state` frame's `state`: a stream's is null.
 * @param {unknown} json
 * @returns {null}
 * @throws {TypeError} for anything but null
 */
export function fromState(json) {
  if (json !== null) throw new TypeError('a stream has no state (null expected)');
  return null;
}

/**
 * Whether `data` is a publication of this model: any JSON value is.
 * @param {unknown} data
 * @returns {string | null} null
 */
export function check(data) {
  return data === undefined ? 'no data' : null;
}

/**
 * @param {null} state
 * @param {unknown} data
 * @returns {null} the state after the publication: still nothing
 */
export function apply(state, data) {
  return null;
}

/**
 * @param {null} state
 * @returns {string} `null`, the text the hash is of
 */
export function canonical(state) {
  return 'null';
}
