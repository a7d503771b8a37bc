/**
 * panels.js — the `/` page's views of a channel that is not a canvas, on the DOM (their pure parts
 * are in views.js):
 *
 * - {@link TreeView}: a JSON value (a `json` document, a `latest` value) pretty-printed in a
 *   `<pre>`, keys sorted, its tokens coloured; the lines the last publications changed are marked
 *   (`.changed`, a short highlight). The `<pre>`'s text is the value's `JSON.stringify(v, null, 2)`
 *   with sorted keys. A value of more than {@link PLAIN_LINES} lines is shown as plain text.
 * - {@link StreamView}: a `stream` channel's publications as a scrolling list (`<ol>`, oldest
 *   first, each `<li data-version>`), the last `limit` of them, with a caption that says what it
 *   shows; it keeps to the bottom while the user has not scrolled up.
 *
 * Both draw at most once per frame (`draw()` is called by the page's frame, see app.js).
 */

import { StreamLog, changedPaths, isChanged, jsonLines, linesText, streamItemText } from './views.js';

/** Beyond this many lines a value is drawn as plain text (no colours, no marks). */
export const PLAIN_LINES = 5000;

/** A JSON value in a `<pre>`. */
export class TreeView {
  /** @type {HTMLElement} */ #pre;
  /** @type {HTMLElement} */ #note;
  /** the value drawn last (undefined: none) */ #drawn = /** @type {unknown} */ (undefined);
  /** the value to draw (undefined: none) */ #value = /** @type {unknown} */ (undefined);
  /** whether to mark what changed since the value drawn last */ #mark = false;
  #dirty = false;

  /**
   * @param {HTMLElement} pre
   * @param {HTMLElement} note a line above it that says where the value is from
   */
  constructor(pre, note) {
    this.#pre = pre;
    this.#note = note;
  }

  /**
   * Shows `value` at the next draw.
   * @param {unknown} value
   * @param {boolean} mark whether to mark what changed (a publication), or not (a whole new state)
   */
  show(value, mark) {
    this.#value = value;
    this.#mark = this.#mark || mark;
    this.#dirty = true;
  }

  /**
   * Shows nothing, and `note` (a reset: until the state comes).
   * @param {string} note
   */
  clear(note) {
    this.#value = undefined;
    this.#mark = false;
    this.#dirty = true;
    this.#note.textContent = note;
  }

  /** @param {string} note */
  setNote(note) {
    this.#note.textContent = note;
  }

  /** Draws what changed since the last draw. */
  draw() {
    if (!this.#dirty) return;
    this.#dirty = false;
    const value = this.#value;
    const before = this.#drawn;
    const mark = this.#mark && before !== undefined;
    this.#mark = false;
    this.#drawn = value;
    if (value === undefined) {
      this.#pre.replaceChildren();
      return;
    }
    const lines = jsonLines(value);
    if (lines.length > PLAIN_LINES) {
      this.#pre.textContent = linesText(lines);
      return;
    }
    const changed = mark ? changedPaths(before, value) : [];
    const frag = document.createDocumentFragment();
    lines.forEach((line, i) => {
      const span = document.createElement('span');
      span.className = isChanged(line.path, changed) ? 'line changed' : 'line';
      for (const t of line.tokens) {
        if (t.kind === 'punct') {
          span.append(t.text);
        } else {
          const tok = document.createElement('span');
          tok.className = `j-${t.kind}`;
          tok.textContent = t.text;
          span.append(tok);
        }
      }
      frag.append(span);
      if (i < lines.length - 1) frag.append('\n');
    });
    this.#pre.replaceChildren(frag);
  }
}

/** A stream's publications as a list. */
export class StreamView {
  /** @type {HTMLOListElement} */ #ol;
  /** @type {HTMLElement} */ #caption;
  #log;
  /** the version of the last `<li>` (0: none) */ #lastDrawn = 0;
  #cleared = true;
  #dirty = true;

  /**
   * @param {HTMLOListElement} ol
   * @param {HTMLElement} caption
   * @param {number} limit publications kept
   */
  constructor(ol, caption, limit) {
    this.#ol = ol;
    this.#caption = caption;
    this.#log = new StreamLog(limit);
  }

  /** @returns {StreamLog} what the list holds */
  get log() {
    return this.#log;
  }

  /** @param {import('./views.js').StreamItem} item */
  push(item) {
    this.#log.push(item);
    this.#dirty = true;
  }

  /** @param {string} note where the list starts now */
  clear(note) {
    this.#log.clear(note);
    this.#cleared = true;
    this.#dirty = true;
  }

  /** Brings the list up to date: drops the `<li>`s the log dropped, appends the new ones. */
  draw() {
    if (!this.#dirty) return;
    this.#dirty = false;
    const ol = this.#ol;
    const atBottom = ol.scrollHeight - ol.scrollTop - ol.clientHeight < 8;
    const items = this.#log.items;
    if (this.#cleared) {
      ol.replaceChildren();
      this.#lastDrawn = 0;
      this.#cleared = false;
    }
    const first = items.length > 0 ? items[0].version : Infinity;
    while (ol.firstElementChild && Number(/** @type {HTMLElement} */ (ol.firstElementChild).dataset.version) < first) ol.firstElementChild.remove();
    const frag = document.createDocumentFragment();
    for (const item of items) {
      if (item.version <= this.#lastDrawn) continue;
      const t = streamItemText(item);
      const li = document.createElement('li');
      li.dataset.version = String(item.version);
      for (const [cls, text] of [['s-version', t.version], ['s-time', t.time], ['s-data', t.data]]) {
        const s = document.createElement('span');
        s.className = cls;
        s.textContent = text;
        li.append(s);
      }
      frag.append(li);
      this.#lastDrawn = item.version;
    }
    ol.append(frag);
    if (atBottom) ol.scrollTop = ol.scrollHeight;
    const log = this.#log;
    const shown = log.items.length === 0 ? 'no publications yet' : `v${log.items[0].version}–v${log.items[log.items.length - 1].version}`;
    const of = log.dropped > 0 ? ` (the last ${log.limit} of ${log.received} received)` : '';
    this.#caption.textContent = `${log.note}${log.note ? ' · ' : ''}${shown}${of}`;
  }
}
