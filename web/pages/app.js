/**
 * app.js — the channel page (`/`): one channel of any model, live, through the fleet client.
 *
 * - Channel id from `?channel=<id>` (`?canvas=<id>` is the old name, still in links; default c1,
 *   a canvas), checked as the server checks it; the form `#channel-form` opens another by
 *   navigating to `/?channel=<id>`.
 * - `FleetClient.subscribe` (/client/index.js) keeps the channel's state by its model and owns
 *   reconnection; the page learns the model from the subscription (`sub.model`, from the
 *   `welcome`) and shows the view of that model:
 *   - `pixels`: `#board`, the canvas scaled ×8 (board.js); click to paint a pixel
 *     (`POST /api/channels/{id}/publications {"data":{"x","y","color"}}`);
 *   - `json` and `latest`: `#tree`, the document or the value pretty-printed with sorted keys,
 *     what the last publications changed marked (panels.js TreeView);
 *   - `stream`: `#stream`, the last {@link STREAM_LIMIT} publications, oldest first (StreamView);
 *   and, for the three that are not pixels, `#publish-form`, which publishes JSON data
 *   (`POST /api/channels/{id}/publications {"data": …}`). Writes are retried with one
 *   `Idempotency-Key` (publish.js); errors go to the log; nothing here throws at the page.
 * - A `reset` (the channel starts again at version 0 of a new epoch, or a stream's resume beyond
 *   the node's window) clears what the view shows until the state (or the next publications)
 *   comes.
 * - The status line: phase (`#state`), serving node (`#node`), model (`#model`), version
 *   (`#version`), epoch (`#epoch`), publications per second over the last 5 s (`#rate`),
 *   backoff/closed message (`#message`), a retry button when the retry budget is spent (`#retry`),
 *   and the state's hash (`#hash`, `sub.hash()`, with `data-version` the version it is of: what
 *   `GET /api/channels/{id}` answers as `hash`). Then the last 20 log lines (`#log`, newest first)
 *   and the counters (`#counters`, JSON, refreshed at most every 500 ms).
 * - The views draw at most once per animation frame (or every 250 ms when frames do not come, as
 *   in a hidden tab); the board draws each pixel as it comes.
 *
 * For debugging and tests: `window.fleetClient` (the FleetClient, null when the id is invalid),
 * `window.fleetSub` (its Subscription) and `window.fleetPage` (`{channel, scale, error, stream}`,
 * `stream` the StreamLog of a stream channel's list).
 */

import { BUDGET_EXHAUSTED, FleetClient } from '/client/index.js';
import { Board } from './board.js';
import { StreamView, TreeView } from './panels.js';
import { postJson } from './publish.js';
import { channelIdError, pageChannel } from './views.js';

const SCALE = 8; // CSS px (and backing-store px) per canvas pixel
const DEFAULT_SIZE = 64;
const STREAM_LIMIT = 200; // publications a stream's list keeps
const FRAME_FALLBACK_MS = 250;
const RATE_WINDOW_MS = 5000;
const LOG_LINES = 20;
const COUNTERS_EVERY_MS = 500; // also the period of #rate, #node and the backoff countdown
const PALETTE = [
  '#000000', '#ffffff', '#7f7f7f', '#c3c3c3',
  '#e53935', '#fb8c00', '#fdd835', '#43a047',
  '#00897b', '#1e88e5', '#3949ab', '#8e24aa',
  '#d81b60', '#6d4c41', '#ffb3c7', '#a5d6a7',
];
/** What the page calls a channel of each model (the title). */
const KIND = { pixels: 'Canvas', json: 'Document', latest: 'Latest value', stream: 'Stream' };
/** The publish form's hint and example, per model. */
const HINT = {
  json: 'JSON: an RFC 7386 merge patch ({"key": null} removes key); Ctrl+Enter publishes',
  latest: 'JSON: the new value; Ctrl+Enter publishes',
  stream: 'JSON: a message; Ctrl+Enter publishes',
};
const EXAMPLE = { json: '{"home": 1}', latest: '{"bid": 1.0842, "ask": 1.0844}', stream: '{"text": "hello"}' };

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);

const el = {
  kind: $('#kind'),
  title: $('#channel-title'),
  form: $('#channel-form'),
  input: $('#channel-input'),
  formError: $('#channel-error'),
  state: $('#state'),
  node: $('#node'),
  model: $('#model'),
  version: $('#version'),
  epoch: $('#epoch'),
  rate: $('#rate'),
  message: $('#message'),
  retry: $('#retry'),
  hash: $('#hash'),
  waiting: $('#waiting'),
  pixelsView: $('#pixels-view'),
  treeView: $('#tree-view'),
  streamView: $('#stream-view'),
  board: /** @type {HTMLCanvasElement} */ ($('#board')),
  color: /** @type {HTMLInputElement} */ ($('#color')),
  swatches: $('#swatches'),
  cursor: $('#cursor'),
  paintStatus: $('#paint-status'),
  publishForm: $('#publish-form'),
  publishData: /** @type {HTMLTextAreaElement} */ ($('#publish-data')),
  publishGo: $('#publish-go'),
  publishHint: $('#publish-hint'),
  publishStatus: $('#publish-status'),
  log: $('#log'),
  counters: $('#counters'),
};

// ---- channel id -----------------------------------------------------------------------------

const { id: channelId, error: idError } = pageChannel(location.search);

el.input.value = channelId;
el.title.textContent = idError ? '(invalid id)' : channelId;
document.title = idError ? 'Canvas fleet — invalid channel id' : `Canvas fleet — ${channelId}`;

function showFormError(text) {
  el.formError.textContent = text ?? '';
  el.formError.hidden = !text;
  el.input.setAttribute('aria-invalid', text ? 'true' : 'false');
}

el.form.addEventListener('submit', (e) => {
  e.preventDefault();
  const id = el.input.value.trim();
  const problem = channelIdError(id);
  if (problem) {
    showFormError(problem);
    el.input.focus();
    return;
  }
  showFormError(null);
  location.assign(`/?channel=${encodeURIComponent(id)}`);
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

/** A page line (publish errors, resets…), stamped like the client's lines (UTC HH:MM:SS.mmm). */
function pageLog(text, kind = 'error') {
  addLogLine(`${new Date().toISOString().slice(11, 23)} ${text}`, kind);
}

// ---- views ----------------------------------------------------------------------------------

const board = new Board(el.board, SCALE);
board.drawBlank(DEFAULT_SIZE, DEFAULT_SIZE);
const tree = new TreeView($('#tree'), $('#tree-note'));
const stream = new StreamView($('#stream'), $('#stream-caption'), STREAM_LIMIT);

/** The model the views show (null until a welcome named one). */
let model = /** @type {string | null} */ (null);

/** Shows the view of the subscription's model, once the welcome named it (or names another). */
function syncModel() {
  const m = sub?.model ?? null;
  if (m === model) return;
  if (model !== null) {
    // The namespace's model changed: nothing shown is of the new one.
    board.drawBlank(DEFAULT_SIZE, DEFAULT_SIZE);
    tree.clear('');
    stream.clear('');
  }
  model = m;
  const known = m !== null && Object.hasOwn(KIND, m);
  el.waiting.hidden = known;
  if (m !== null && !known) el.waiting.textContent = `this page does not show channels of model ${m}`;
  el.pixelsView.hidden = m !== 'pixels';
  el.treeView.hidden = m !== 'json' && m !== 'latest';
  el.streamView.hidden = m !== 'stream';
  el.publishForm.hidden = !known || m === 'pixels';
  el.model.textContent = m ?? '—';
  el.kind.textContent = known ? KIND[m] : 'Channel';
  el.publishHint.textContent = HINT[m] ?? '';
  el.publishData.placeholder = EXAMPLE[m] ?? '';
  changed();
}

let framePending = false;
let frameTimer = /** @type {ReturnType<typeof setTimeout> | null} */ (null);

/** Asks for a frame: the views, the position and the hash are drawn once for what changed. */
function changed() {
  if (framePending) return;
  framePending = true;
  const run = () => {
    if (!framePending) return;
    framePending = false;
    if (frameTimer !== null) clearTimeout(frameTimer);
    frameTimer = null;
    drawFrame();
  };
  requestAnimationFrame(run);
  frameTimer = setTimeout(run, FRAME_FALLBACK_MS);
}

function drawFrame() {
  tree.draw();
  stream.draw();
  renderPosition();
  refreshHash();
}

let hashing = false;
let hashAgain = false;

/** Shows `sub.hash()` with the version it is of; one at a time, again when asked meanwhile. */
async function refreshHash() {
  if (!sub) return;
  if (hashing) {
    hashAgain = true;
    return;
  }
  hashing = true;
  try {
    do {
      hashAgain = false;
      // hash() reads the state now (the digest then runs on a copy): it is of this version.
      const version = sub.version;
      const h = await sub.hash();
      el.hash.textContent = h ?? '—';
      el.hash.dataset.version = String(version);
    } while (hashAgain);
  } catch (err) {
    pageLog(`hash failed: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    hashing = false;
  }
}

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

// ---- publishing -----------------------------------------------------------------------------

/** The gateway's publish route of this channel (a channel id needs no escaping in a path). */
const publicationsUrl = `/api/channels/${channelId}/publications`;

/** Where a publish landed, from its 201 answer. */
const landed = (body) => (body && Number.isFinite(body.version) ? ` → v${body.version} (p${body.partition} @${body.offset})` : '');

/** Posts one pixel (publish.js: retried with one Idempotency-Key, so it lands once). Never throws. */
async function paint(x, y, color) {
  const what = `paint (${x}, ${y}) ${color}`;
  el.paintStatus.textContent = `${what}…`;
  const r = await postJson(publicationsUrl, { data: { x, y, color } });
  if (r.ok) {
    el.paintStatus.textContent = `painted (${x}, ${y}) ${color}${landed(r.body)}`;
    return;
  }
  el.paintStatus.textContent = `${what} failed`;
  pageLog(`${what} failed: ${r.error}`);
}

/** Publishes the form's JSON. Never throws. */
async function publishForm() {
  let data;
  try {
    data = JSON.parse(el.publishData.value);
  } catch (err) {
    el.publishStatus.textContent = `not JSON: ${err instanceof Error ? err.message : String(err)}`;
    el.publishStatus.className = 'error-text';
    return;
  }
  el.publishStatus.textContent = 'publishing…';
  el.publishStatus.className = '';
  el.publishGo.disabled = true;
  try {
    const r = await postJson(publicationsUrl, { data });
    el.publishStatus.textContent = r.ok ? `published${landed(r.body)}` : 'publish failed (see the log)';
    el.publishStatus.className = r.ok ? '' : 'error-text';
    if (!r.ok) pageLog(`publish failed: ${r.error}`);
  } finally {
    el.publishGo.disabled = false;
  }
}

el.publishForm.addEventListener('submit', (e) => {
  e.preventDefault();
  publishForm();
});
el.publishData.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    el.publishForm.requestSubmit();
  }
});

// ---- client ---------------------------------------------------------------------------------

/** @type {FleetClient | null} */
let client = null;
/** @type {import('/client/index.js').Subscription | null} */
let sub = null;

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
  if (model === null && !idError) {
    // Before any welcome: say whether the page is still connecting or is being refused.
    const failing = (state === 'backoff' || state === 'closed') && info?.cause;
    el.waiting.textContent = failing ? `not served (${info.cause}): see the log` : "waiting for the channel's model (the server's welcome)…";
  }
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
  syncModel();
  renderPosition();
}

function renderPosition() {
  if (!sub) return;
  el.version.textContent = String(sub.version);
  el.epoch.textContent = sub.epoch ?? '—';
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

/** A `state` frame replaced the whole state (the first, a resync, a reset's version 0). */
function onState(state, version) {
  syncModel();
  if (model === 'pixels') board.drawAll(state);
  else if (model === 'stream') stream.clear(version > 0 ? `from version ${version} on (earlier publications are not shown)` : 'from the start');
  else if (model === 'json' || model === 'latest') {
    tree.show(state, false);
    tree.setNote(`${model === 'json' ? 'the document' : 'the last value'}: the state of version ${version}, then each publication applied`);
  }
  changed();
}

/** A publication was applied (`sub.state` is the new state). */
function onPublication(data, version, info) {
  syncModel();
  eventTimes.push(performance.now());
  if (model === 'pixels') {
    const canvas = sub?.state;
    if (canvas && (canvas.width !== board.width || canvas.height !== board.height)) board.drawAll(canvas);
    else board.drawPixel(data.x, data.y, data.color);
  } else if (model === 'stream') {
    stream.push({ version, data, publishedAtMs: info.publishedAtMs });
  } else if (model === 'json' || model === 'latest') {
    tree.show(sub?.state, true);
  }
  changed();
}

/** A `reset`: what was shown is of a history that is gone (or, on a stream, has a gap). The client logs it. */
function onReset(info) {
  syncModel();
  const where = `version ${info.version} of epoch ${info.epoch}`;
  if (model === 'pixels') board.drawBlank(board.width || DEFAULT_SIZE, board.height || DEFAULT_SIZE);
  else if (model === 'stream') stream.clear(`reset to ${where}: the publications before it are not coming`);
  else tree.clear(`reset to ${where}: waiting for the state`);
  changed();
}

if (idError) {
  showFormError(idError);
  el.message.textContent = 'not connected: invalid channel id';
  el.message.className = 'closed';
  el.waiting.textContent = 'no channel';
  el.board.setAttribute('aria-disabled', 'true');
} else {
  const proto = location.protocol === 'https:' ? 'wss' : 'ws';
  client = new FleetClient({ url: `${proto}://${location.host}` });

  client.onState((state, info) => renderState(state, info));
  client.onLog((line) => {
    addLogLine(line);
    renderSession(); // the serving node and the model are learnt from the welcome, which only logs
  });

  el.retry.addEventListener('click', () => client?.retry());

  el.board.addEventListener('click', (e) => {
    const p = board.pixelAt(e);
    if (!p || model !== 'pixels') return;
    paint(p.x, p.y, el.color.value.toLowerCase()).catch((err) => pageLog(`paint failed: ${err instanceof Error ? err.message : String(err)}`));
  });

  // Leaving the page closes the socket on purpose; coming back from the back/forward cache
  // reconnects (resuming from the last version applied).
  addEventListener('pagehide', () => client?.close());
  addEventListener('pageshow', (e) => {
    if (e.persisted && client?.state === 'closed') client.connect();
  });

  renderState(client.state, client.info);
  sub = client.subscribe(channelId, { onState, onPublication, onReset }); // connects
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
window.fleetSub = sub;
window.fleetPage = { channel: idError ? null : channelId, scale: SCALE, error: idError, stream: stream.log };
