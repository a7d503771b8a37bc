/**
 * board.js — the `/` page's drawing of a canvas on a `<canvas>` element, scaled ×`scale` (CSS px
 * and backing-store px per canvas pixel): a whole canvas's RGB bytes go into an ImageData on an
 * offscreen canvas that is drawn scaled (no smoothing); one pixel paints one scale×scale square.
 */

export class Board {
  /** @type {HTMLCanvasElement} */ #el;
  /** @type {CanvasRenderingContext2D} */ #ctx;
  /** @type {HTMLCanvasElement} */ #offscreen;
  /** @type {CanvasRenderingContext2D} */ #offCtx;
  #scale;
  width = 0;
  height = 0;

  /**
   * @param {HTMLCanvasElement} el
   * @param {number} scale
   */
  constructor(el, scale) {
    this.#el = el;
    this.#scale = scale;
    this.#ctx = /** @type {CanvasRenderingContext2D} */ (el.getContext('2d', { alpha: false }));
    this.#offscreen = document.createElement('canvas');
    this.#offCtx = /** @type {CanvasRenderingContext2D} */ (this.#offscreen.getContext('2d'));
  }

  /** Sizes the board for a w×h canvas (a resize clears it). */
  size(w, h) {
    if (w === this.width && h === this.height) return;
    this.width = w;
    this.height = h;
    this.#el.width = w * this.#scale;
    this.#el.height = h * this.#scale;
    this.#el.style.width = `${w * this.#scale}px`;
    this.#offscreen.width = w;
    this.#offscreen.height = h;
  }

  /**
   * Draws the whole canvas: RGB bytes → ImageData (offscreen, 1:1) → drawn ×scale.
   * @param {{width: number, height: number, pixels: Uint8Array}} canvas
   */
  drawAll(canvas) {
    this.size(canvas.width, canvas.height);
    const img = this.#offCtx.createImageData(canvas.width, canvas.height);
    const src = canvas.pixels;
    const dst = img.data;
    for (let i = 0, j = 0; i < src.length; i += 3, j += 4) {
      dst[j] = src[i];
      dst[j + 1] = src[i + 1];
      dst[j + 2] = src[i + 2];
      dst[j + 3] = 255;
    }
    this.#offCtx.putImageData(img, 0, 0);
    this.#ctx.imageSmoothingEnabled = false;
    this.#ctx.drawImage(this.#offscreen, 0, 0, canvas.width * this.#scale, canvas.height * this.#scale);
  }

  /** Draws one pixel. */
  drawPixel(x, y, color) {
    this.#ctx.fillStyle = color;
    this.#ctx.fillRect(x * this.#scale, y * this.#scale, this.#scale, this.#scale);
  }

  /** A blank (white) board of w×h. */
  drawBlank(w, h) {
    this.size(w, h);
    this.#ctx.fillStyle = '#ffffff';
    this.#ctx.fillRect(0, 0, w * this.#scale, h * this.#scale);
  }

  /** The canvas pixel under a pointer event, or null when outside. */
  pixelAt(e) {
    const rect = this.#el.getBoundingClientRect();
    if (rect.width <= 0 || rect.height <= 0) return null;
    const x = Math.floor(((e.clientX - rect.left) / rect.width) * this.width);
    const y = Math.floor(((e.clientY - rect.top) / rect.height) * this.height);
    if (x < 0 || y < 0 || x >= this.width || y >= this.height) return null;
    return { x, y };
  }
}
