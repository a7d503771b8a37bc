/**
 * canvas.js — the canvas model: width × height RGB pixels, unset = white (255, 255, 255).
 *
 * The canonical bytes are the row-major RGB array (`width * height * 3` bytes: pixel (x, y) starts
 * at `(y * width + x) * 3`), exactly what a snapshot's base64 `pixels` carries; the canvas hash is
 * the lowercase hex SHA-256 of those bytes (the publisher's `GET /canvases/{id}` answers the same
 * hash, so a page can check it is in sync). Uses only `atob` and `crypto.subtle`, present in
 * browsers and in Node ≥ 18 as globals.
 */

/** A canvas of RGB pixels. `pixels` is the canonical byte array and may be read directly. */
export class Canvas {
  /**
   * @param {number} width pixels per row (> 0)
   * @param {number} height rows (> 0)
   * @param {Uint8Array} [pixels] width*height*3 bytes, row-major RGB, taken as is;
   *   all white when omitted
   */
  constructor(width, height, pixels) {
    if (!Number.isSafeInteger(width) || !Number.isSafeInteger(height) || width <= 0 || height <= 0) {
      throw new RangeError(`canvas size ${width}x${height}`);
    }
    const size = width * height * 3;
    if (pixels && pixels.length !== size) {
      throw new RangeError(`canvas ${width}x${height} needs ${size} bytes, got ${pixels.length}`);
    }
    /** @readonly */ this.width = width;
    /** @readonly */ this.height = height;
    /** @readonly Canonical bytes: row-major RGB. */
    this.pixels = pixels ?? new Uint8Array(size).fill(255);
  }

  /**
   * A canvas from a snapshot's fields.
   * @param {number} width
   * @param {number} height
   * @param {string} base64 base64 of width*height*3 bytes
   * @returns {Canvas}
   * @throws {RangeError} when the bytes are not valid base64 of the right length
   */
  static fromBase64(width, height, base64) {
    const bytes = decodeBase64(base64);
    if (!bytes) throw new RangeError('pixels are not base64');
    return new Canvas(width, height, bytes);
  }

  /**
   * Whether (x, y) is on the canvas.
   * @param {number} x column, 0-based
   * @param {number} y row, 0-based
   */
  contains(x, y) {
    return Number.isSafeInteger(x) && Number.isSafeInteger(y) && x >= 0 && y >= 0 && x < this.width && y < this.height;
  }

  /**
   * The colour of pixel (x, y).
   * @param {number} x
   * @param {number} y
   * @returns {[number, number, number]} r, g, b (0–255)
   */
  get(x, y) {
    const i = this.#offset(x, y);
    return [this.pixels[i], this.pixels[i + 1], this.pixels[i + 2]];
  }

  /**
   * Sets pixel (x, y).
   * @param {number} x
   * @param {number} y
   * @param {ArrayLike<number>} rgb r, g, b (0–255)
   */
  set(x, y, rgb) {
    const i = this.#offset(x, y);
    this.pixels[i] = rgb[0];
    this.pixels[i + 1] = rgb[1];
    this.pixels[i + 2] = rgb[2];
  }

  /**
   * Applies an event: sets pixel (x, y) to its colour.
   * @param {{x:number, y:number, color:string}} event `color` as `#rrggbb`
   * @throws {RangeError} when the pixel is off the canvas or the colour is malformed
   */
  applyEvent(event) {
    const rgb = parseColor(event.color);
    if (!rgb) throw new RangeError(`colour ${event.color}`);
    this.set(event.x, event.y, rgb);
  }

  /** @returns {Canvas} an independent copy */
  clone() {
    return new Canvas(this.width, this.height, this.pixels.slice());
  }

  /** @returns {Promise<string>} lowercase hex SHA-256 of the canonical bytes */
  hash() {
    return sha256Hex(this.pixels);
  }

  #offset(x, y) {
    if (!this.contains(x, y)) throw new RangeError(`pixel (${x}, ${y}) off a ${this.width}x${this.height} canvas`);
    return (y * this.width + x) * 3;
  }
}

/**
 * Parses `#rrggbb` (either case).
 * @param {unknown} color
 * @returns {[number, number, number] | null} r, g, b, or null when malformed
 */
export function parseColor(color) {
  if (typeof color !== 'string' || !/^#[0-9a-fA-F]{6}$/.test(color)) return null;
  const n = parseInt(color.slice(1), 16);
  return [(n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff];
}

/**
 * Decodes standard base64 (with or without padding).
 * @param {string} text
 * @returns {Uint8Array | null} the bytes, or null when `text` is not base64
 */
export function decodeBase64(text) {
  let binary;
  try {
    binary = atob(text);
  } catch {
    return null;
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * Lowercase hex SHA-256 of some bytes, with Web Crypto (`crypto.subtle.digest`).
 * @param {Uint8Array} bytes
 * @returns {Promise<string>} 64 hex digits
 */
export async function sha256Hex(bytes) {
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', bytes));
  let hex = '';
  for (const b of digest) hex += b.toString(16).padStart(2, '0');
  return hex;
}
