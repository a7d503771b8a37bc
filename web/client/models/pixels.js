/**
 * pixels.js — the `pixels` model: the state is a width × height RGB canvas (a {@link Canvas} of
 * canvas.js); a publication's data is `{"x":1,"y":2,"color":"#ff0000"}`; a `state` frame's
 * `state` is `{"width":64,"height":64,"pixels":"<base64 of the row-major RGB bytes>"}`. The hash is
 * of the RGB bytes, as the canvas protocol's.
 *
 * Unlike the other models, `apply` sets the pixel in place and returns the same canvas (a copy per
 * publication would cost width × height × 3 bytes); `sub.state` is that live canvas.
 */

import { Canvas, parseColor } from '../canvas.js';

/** The model's name, as a `welcome` frame names it. */
export const name = 'pixels';
/** Whether the model has a state that a `state` frame brings. */
export const stateful = true;

const isUint = (v) => Number.isSafeInteger(v) && v >= 0;

/**
 * The state at version 0: an all-white canvas of the channel's size (which only the namespace's
 * configuration, or a `state` frame, tells).
 * @param {{width:number, height:number}} size
 * @returns {Canvas}
 * @throws {RangeError} without a valid size
 */
export function initial(size) {
  return new Canvas(size?.width ?? NaN, size?.height ?? NaN);
}

/**
 * The state from a `state` frame's `state`.
 * @param {unknown} json `{"width","height","pixels":<base64 of width*height*3 bytes>}`
 * @returns {Canvas}
 * @throws {TypeError | RangeError} naming the field that is wrong
 */
export function fromState(json) {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new TypeError('pixels state: an object expected');
  const { width, height, pixels } = /** @type {Record<string, unknown>} */ (json);
  if (!isUint(width) || !isUint(height) || width === 0 || height === 0) throw new RangeError('pixels state: width and height');
  if (typeof pixels !== 'string') throw new TypeError('pixels state: pixels (base64) expected');
  return Canvas.fromBase64(/** @type {number} */ (width), /** @type {number} */ (height), pixels);
}

/**
 * Whether `data` is a publication of this model: `{x, y, color}` with x, y integers ≥ 0 and color
 * `#rrggbb`, and, given the canvas it applies to, (x, y) on it.
 * @param {unknown} data
 * @param {Canvas} [state] the canvas held, if any
 * @returns {string | null} null, or what is wrong
 */
export function check(data, state) {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return 'pixel: an object {x, y, color} expected';
  const { x, y, color } = /** @type {Record<string, unknown>} */ (data);
  if (!isUint(x) || !isUint(y)) return 'pixel coordinates';
  if (!parseColor(color)) return 'pixel color';
  if (state && !state.contains(/** @type {number} */ (x), /** @type {number} */ (y))) {
    return `pixel (${x}, ${y}) off the ${state.width}x${state.height} canvas`;
  }
  return null;
}

/**
 * Sets the pixel, in place.
 * @param {Canvas} state
 * @param {{x:number, y:number, color:string}} data
 * @returns {Canvas} the same canvas
 * @throws {RangeError} when the pixel is off the canvas or the colour malformed
 */
export function apply(state, data) {
  state.applyEvent(data);
  return state;
}

/**
 * @param {Canvas} state
 * @returns {Uint8Array} the row-major RGB bytes the hash is of
 */
export function canonical(state) {
  return state.pixels;
}
