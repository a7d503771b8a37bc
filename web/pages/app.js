/**
 * app.js — the canvas page (`/`): one canvas, live, through the fleet client; click to paint.
 *
 * - Canvas id from `?canvas=<id>` (default c1), checked like the server does (1–64 of
 *   A-Z a-z 0-9 - _); the form `#canvas-form` switches canvas by navigating to `/?canvas=<id>`.
 * - `FleetClient` (/client/fleet-client.js) keeps the canvas in sync and owns reconnection; this
 *   page only shows what it says: phase (`#state`), serving node (`#node`), version (`#version`),
 *   events per second over the last 5 s (`#rate`), backoff/closed message (`#message`), a retry
 *   button when the retry budget is spent (`#retry`), the last 20 log lines (`#log`, newest first)
 *   and the counters (`#counters`, JSON, refreshed at most every 500 ms).
 * - `#board` is the canvas scaled ×8: the snapshot's RGB bytes go into an ImageData on an
 *   offscreen canvas that is drawn scaled (no smoothing); an event paints one 8×8 square.
 * - Clicking the board posts the pixel with the chosen colour to the gateway
 *   (`POST /api/canvases/{id}/pixels`, with an `Idempotency-Key`, so a retry after a network error
 *   or a 503 is applied once). Errors go to the log; nothing here throws at the page.
 *
 * For debugging and tests: `window.fleetClient` (the FleetClient, null when the id is invalid) and
 * `window.fleetPage` (`{canvasId, scale, error}`).
 */

import { FleetClient, BUDGET_EXHAUSTED } from '/client/fleet-client.js';
import { Board } from './board.js';
import { postJson } from './publish.js';

const DEFAULT_CANVAS = 'c1';
const CANVAS_ID = /^[A-Za-z0-9_-]{1,64}$/;
const SCALE = 8; // CSS px (and backing-store px) per canvas pixel
const DEFAULT_SIZE = 64;
const RATE_WINDOW_MS = 5000;
const LOG_LINES = 20;
const COUNTERS_EVERY_MS = 500; // also the period of #rate, #node and the backoff countdown
const PALETTE = [
  '#000000', '#ffffff', '#7f7f7f', '#c3c3c3',
  '#e53935', '#fb8c00', '#fdd835', '#43a047',
  '#00897b', '#1e88e5', '#3949ab', '#8e24aa',
  '#d81b60', '#6d4c41', '#ffb3c7', '#a5d6a7',
];

/**
 * Whether `id` is a canvas id the server accepts.
 * @param {unknown} id
 * @returns {boolean}
 */
export function isValidCanvasId(id) {
  return typeof id === 'string' && CANVAS_ID.test(id);
}

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);

const el = {
  title: $('#canvas-title'),
  form: $('#canvas-form'),
  input: $('#canvas-input'),
  formError: $('#canvas-error'),
  state: $('#state'),
  node: $('#node'),
  version: $('#version'),
  rate: $('#rate'),
  message: $('#message'),
  retry: $('#retry'),
  board: /** @type {HTMLCanvasElement} */ ($('#board')),
  color: /** @type {HTMLInputElement} */ ($('#color')),
  swatches: $('#swatches'),
  cursor: $('#cursor'),
  paintStatus: $('#paint-status'),
  log: $('#log'),
  counters: $('#counters'),
};

// ---- canvas id ------------------------------------------------------------------------------

const requested = new URLSearchParams(location.search).get('canvas');
const canvasId = requested === null || requested === '' ? DEFAULT_CANVAS : requested;
const idError = isValidCanvasId(canvasId) ? null : `invalid canvas id ${JSON.stringify(canvasId.slice(0, 80))}: use 1–64 characters of A-Z a-z 0-9 - _`;

el.input.value = canvasId;
el.title.textContent = idError ? '(invalid id)' : canvasId;
document.title = idError ? 'Canvas fleet — invalid canvas id' : `Canvas fleet — ${canvasId}`;

function showFormError(text) {
  el.formError.textContent = text ?? '';
  el.formError.hidden = !text;
  el.input.setAttribute('aria-invalid', text ? 'true' : 'false');
}

el.form.addEventListener('submit', (e) => {
  e.preventDefault();
  const id = el.input.value.trim();
  if (!isValidCanvasId(id)) {
    showFormError(id === '' ? 'enter a canvas id (1–64 characters of A-Z a-z 0-9 - _)' : `invalid canvas id ${JSON.stringify(id.slice(0, 80))}: use 1–64 characters of A-Z a-z 0-9 - _`);
    el.input.focus();
    return;
  }
  showFormError(null);
  location.assign(`/?canvas=${encodeURIComponent(id)}`);
});
el.input.addEventListener('input', () => showFormError(null));

// ---- log ------------------------------------------------------------------------------------

/** Adds a line at the top of `#log`, keeping the last LOG_LINES. */
function addLogLine(text, kind) {
  const li = document.createElement('li');
  li.textContent = text;
  if (kind) li.className = `page-${kind}`;
  el.log.prepend(li);
  while (el.log.children.length > LOG_LINES) el.log.lastElementChild.remove();
}

/** A page line (paint errors…), stamped like the client's lines (UTC HH:MM:SS.mmm). */
function pageLog(text, kind = 'error') {
  addLogLine(`${new Date().toISOString().slice(11, 23)} ${text}`, kind);
}

// ---- board ----------------------------------------------------------------------------------

const board = new Board(el.board, SCALE);
board.drawBlank(DEFAULT_SIZE, DEFAULT_SIZE);

// ---- palette --------------------------------------------------------------------------------

function markSwatch() {
  const current = el.color.value.toLowerCase();
  for (const b of el.swatches.children) b.setAttribute('aria-pressed', String(b.dataset.color === current));
}

for (const c of PALETTE) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'swatch';
  b.dataset.color = c;
  b.title = c;
  b.setAttribute('aria-label', `colour ${c}`);
  b.style.background = c;
  b.addEventListener('click', () => {
    el.color.value = c;
    markSwatch();
  });
  el.swatches.append(b);
}
el.color.addEventListener('input', markSwatch);
markSwatch();

// ---- painting -------------------------------------------------------------------------------

/** Posts one pixel (publish.js: retried with one Idempotency-Key, so it lands once). Never throws. */
async function paint(x, y, color) {
  const url = `/api/canvases/${encodeURIComponent(canvasId)}/pixels`;
  const what = `paint (${x}, ${y}) ${color}`;
  el.paintStatus.textContent = `${what}…`;
  const r = await postJson(url, { x, y, color });
  if (r.ok) {
    const body = r.body;
    el.paintStatus.textContent = body && Number.isFinite(body.version)
      ? `painted (${x}, ${y}) ${color} → v${body.version} (p${body.partition} @${body.offset})`
      : `painted (${x}, ${y}) ${color}`;
    return;
  }
  el.paintStatus.textContent = `${what} failed`;
  pageLog(`${what} failed: ${r.error}`);
}

// ---- client ---------------------------------------------------------------------------------

/** @type {FleetClient | null} */
let client = null;

/** Event arrival times (performance.now()) within the rate window. */
const eventTimes = [];
const pageStart = performance.now();

function rate(now) {
  while (eventTimes.length > 0 && eventTimes[0] <= now - RATE_WINDOW_MS) eventTimes.shift();
  // Over the last 5 s; during the first seconds of the page, over the time it has been open.
  const span = Math.max(1000, Math.min(RATE_WINDOW_MS, now - pageStart));
  return (eventTimes.length * 1000) / span;
}

/** In backoff: when the next attempt is due (Date.now() ms) and why, for the countdown in #message. */
let backoff = /** @type {{until: number, cause: string} | null} */ (null);

function backoffMessage() {
  if (!backoff) return '';
  const secs = Number.isFinite(backoff.until) ? (Math.max(0, backoff.until - Date.now()) / 1000).toFixed(1) : '?';
  return `reconnecting in ${secs} s${backoff.cause ? ` (${backoff.cause})` : ''}`;
}

function renderState(state, info) {
  el.state.textContent = state;
  el.state.className = `badge phase-${state}`;
  let message = '';
  backoff = null;
  if (state === 'backoff') {
    backoff = { until: Number.isFinite(info?.delayMs) ? Date.now() + info.delayMs : NaN, cause: info?.cause ?? '' };
    message = backoffMessage();
  } else if (state === 'closed') {
    message = info?.message || info?.reason || 'closed';
    if (info?.cause) message += ` (${info.cause})`;
  }
  el.message.textContent = message;
  el.message.className = state === 'closed' ? 'closed' : '';
  el.retry.hidden = !(state === 'closed' && info?.reason === BUDGET_EXHAUSTED);
  renderSession();
}

function renderSession() {
  if (!client) return;
  const node = client.node ?? '—';
  if (el.node.textContent !== node) el.node.textContent = node;
  // client.node is the node of the current or last session: muted while no socket is open.
  const live = client.state === 'probation' || client.state === 'stable';
  el.node.classList.toggle('muted', !live);
  el.node.title = live || !client.node ? '' : 'the node of the last session';
  el.version.textContent = String(client.version);
}

/** Counters as JSON: one top-level key per line, nested maps on the same line. */
function formatCounters(c) {
  const lines = Object.entries(c).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return `{\n${lines.join(',\n')}\n}`;
}

function tick() {
  el.rate.textContent = rate(performance.now()).toFixed(1);
  if (!client) return;
  if (backoff) el.message.textContent = backoffMessage(); // counts down to the next attempt
  renderSession();
  const text = formatCounters(client.counters);
  if (el.counters.textContent !== text) el.counters.textContent = text;
}

if (idError) {
  showFormError(idError);
  el.message.textContent = 'not connected: invalid canvas id';
  el.message.className = 'closed';
  el.board.setAttribute('aria-disabled', 'true');
} else {
  const proto = location.protocol === 'https:' ? 'wss' : 'ws';
  client = new FleetClient({ url: `${proto}://${location.host}`, canvas: canvasId });

  client.onState((state, info) => renderState(state, info));
  client.onLog((line) => {
    addLogLine(line);
    renderSession(); // the serving node is learnt from the welcome frame, which only logs
  });
  client.onCanvas((canvas, changed) => {
    if (changed) {
      eventTimes.push(performance.now());
      if (canvas.width !== board.width || canvas.height !== board.height) board.drawAll(canvas);
      else board.drawPixel(changed.x, changed.y, changed.color);
    } else {
      board.drawAll(canvas);
    }
    el.version.textContent = String(client?.version ?? 0);
  });

  el.retry.addEventListener('click', () => client?.retry());

  el.board.addEventListener('click', (e) => {
    const p = board.pixelAt(e);
    if (!p) return;
    paint(p.x, p.y, el.color.value.toLowerCase()).catch((err) => pageLog(`paint failed: ${err instanceof Error ? err.message : String(err)}`));
  });

  // Leaving the page closes the socket on purpose; coming back from the back/forward cache
  // reconnects (resuming from the last version applied).
  addEventListener('pagehide', () => client?.close());
  addEventListener('pageshow', (e) => {
    if (e.persisted && client?.state === 'closed') client.connect();
  });

  renderState(client.state, client.info);
  client.connect();
}

el.board.addEventListener('mousemove', (e) => {
  const p = board.pixelAt(e);
  el.cursor.textContent = p ? `(${p.x}, ${p.y})` : '';
});
el.board.addEventListener('mouseleave', () => {
  el.cursor.textContent = '';
});

setInterval(tick, COUNTERS_EVERY_MS);
tick();

window.fleetClient = client;
window.fleetPage = { canvasId: idError ? null : canvasId, scale: SCALE, error: idError };
