/**
 * fleet.js — the fleet dashboard (`/fleet`): the gateway's `GET /api/fleet`, refreshed every second.
 *
 * - One request at a time: the next starts REFRESH_MS after the previous one started, or as soon
 *   as it ended when it took longer; a request is given up after FETCH_TIMEOUT_MS.
 * - A failed refresh shows `#error` and keeps the last data on screen.
 * - `#nodes`: one `<tr data-node="<id>">` per node with cells `.id`, `.state` (DOWN/UP/HEALTHY/
 *   DRAINING/DEGRADED, class `state-<lowercase>`), `.streak` (`<up_streak>/<up_threshold>`), `.partitions`
 *   (comma-separated), `.sessions`, `.catchup` (status · replayed · per partition last consumed /
 *   target), `.answer` (ms since the last answer, or the last error), `.flags`.
 * - `#publishers`: one `<tr data-publisher="<url>">` per publisher with cells `.url`, `.ready`
 *   (`yes`/`no`, class `state-healthy`/`state-down`), `.preferred` (`preferred` or empty), `.error`
 *   (the last error, if any); a gateway without the list shows "no publishers reported".
 * - `#decisions`: the last 50 lifecycle decisions, newest first (local time, node, action, reason,
 *   a short detail; the full detail is the item's tooltip).
 * - `#summary` (partition count, proxied sessions, poll interval, UP threshold) and `#updated`
 *   (local time of the last successful refresh).
 *
 * - `#chart-*`: the last minutes as pictures ([charts.js](./charts.js)) from `GET /api/fleet/history`,
 *   fetched with each refresh from the last sample on (`?since_ms=`), kept for `history_ms`.
 *
 * `window.fleetDashboard` holds the last data and refresh times, for debugging and tests.
 */

import { drawCharts } from './charts.js';

const REFRESH_MS = 1000;
const FETCH_TIMEOUT_MS = 5000;
const MAX_DECISIONS = 50;
const DETAIL_CHARS = 160;
const STATES = new Set(['DOWN', 'UP', 'HEALTHY', 'DRAINING', 'DEGRADED']);

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);

const el = {
  error: $('#error'),
  summary: $('#summary'),
  updated: $('#updated'),
  tbody: $('#nodes tbody'),
  publishers: $('#publishers tbody'),
  decisions: $('#decisions'),
};

const dashboard = {
  /** @type {any} the last /api/fleet body rendered */
  data: null,
  /** @type {number | null} Date.now() of the last successful refresh */
  updatedAt: null,
  /** @type {string | null} the last refresh error, null after a success */
  error: null,
  refreshes: 0,
  failures: 0,
  /** @type {any[]} history samples, oldest first */
  history: [],
};
window.fleetDashboard = dashboard;

// ---- formatting -----------------------------------------------------------------------------

const pad = (n, w = 2) => String(n).padStart(w, '0');

/** Local time `HH:MM:SS.mmm`. */
export function localTime(ms) {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return '??:??:??.???';
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
const prim = (v) => v === null || ['string', 'number', 'boolean'].includes(typeof v);

function truncate(text, n = DETAIL_CHARS) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

/** Partitions of a catch-up report, numerically sorted (keys of both offset maps). */
function catchupPartitions(c) {
  const keys = new Set([...Object.keys(c.target_offsets ?? {}), ...Object.keys(c.last_consumed_offsets ?? {})]);
  return [...keys].sort((a, b) => Number(a) - Number(b));
}

/**
 * The catch-up cell: `status · N replayed · p0 269/270 p1 … · error: …` (the consumer's position /
 * target; a target is the partition's last stable offset, and a partition is done when its position
 * has reached it. A report without positions shows last consumed / target, done when last consumed
 * ≥ target − 1). `parts` are the per-partition pieces, `behind` true for a partition still short of
 * its target.
 * @returns {{text: string, head: string, parts: {text: string, behind: boolean}[], tail: string}}
 */
export function catchupSummary(c) {
  if (!c || typeof c !== 'object') return { text: '—', head: '—', parts: [], tail: '' };
  const targets = c.target_offsets ?? {};
  const lasts = c.last_consumed_offsets ?? {};
  const positions = c.positions ?? {};
  const head = `${String(c.status ?? '?')} · ${isNum(c.replay_count) ? c.replay_count : 0} replayed`;
  const parts = catchupPartitions(c).map((p) => {
    const t = targets[p];
    const pos = positions[p];
    if (isNum(pos)) {
      return { text: `p${p} ${pos}/${isNum(t) ? t : '–'}`, behind: isNum(t) && pos < t };
    }
    const l = lasts[p];
    return {
      text: `p${p} ${isNum(l) ? l : '–'}/${isNum(t) ? t : '–'}`,
      behind: isNum(t) && t > 0 && !(isNum(l) && l >= t - 1),
    };
  });
  const tail = c.error ? `error: ${c.error}` : '';
  const text = [head, parts.map((x) => x.text).join(' '), tail].filter(Boolean).join(' · ');
  return { text, head, parts, tail };
}

/** A drain report (`{reason, partitions, notified_sessions, force_closed_sessions, duration_ms}`) in a few words. */
function drainReport(r) {
  if (!r || typeof r !== 'object') return '';
  if (r.error) return `error ${r.error.error ?? ''} ${r.error.message ?? ''}`.trim();
  const bits = [];
  if (Array.isArray(r.partitions) && r.partitions.length) bits.push(`partitions ${r.partitions.join(',')}`);
  if (isNum(r.notified_sessions)) bits.push(`notified ${r.notified_sessions}`);
  if (isNum(r.force_closed_sessions)) bits.push(`force-closed ${r.force_closed_sessions}`);
  if (isNum(r.duration_ms)) bits.push(`${r.duration_ms} ms`);
  return bits.length ? bits.join(', ') : flat(r);
}

/** Any JSON value as `k=v k2{…} [a,b]`. */
function flat(v) {
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.every(prim) ? `[${v.join(',')}]` : `[${v.map(flat).join('; ')}]`;
  if (typeof v === 'object') {
    return Object.entries(v)
      .filter(([, x]) => x !== null && x !== undefined)
      .map(([k, x]) => (typeof x === 'object' ? (Array.isArray(x) ? `${k}=${flat(x)}` : `${k}{${flat(x)}}`) : `${k}=${x}`))
      .join(' ');
  }
  return String(v);
}

/** A decision's detail in a few words. */
export function decisionDetail(action, d) {
  if (d === null || d === undefined || (typeof d === 'object' && Object.keys(d).length === 0)) return '';
  if (typeof d !== 'object') return truncate(String(d));
  let text;
  switch (action) {
    case 'transition':
      text = d.from !== undefined && d.to !== undefined ? `${d.from} → ${d.to}` : flat(d);
      break;
    case 'start_recovery': {
      const bits = [];
      if (d.outcome) bits.push(`outcome ${d.outcome}`);
      if (d.catchup && typeof d.catchup === 'object') bits.push(`catch-up ${catchupSummary(d.catchup).text}`);
      text = bits.length ? bits.join(' · ') : flat(d);
      break;
    }
    case 'failback_started': {
      const bits = [];
      if (Array.isArray(d.from)) bits.push(`from ${d.from.length ? d.from.join(', ') : '(none seen)'}`);
      if (Array.isArray(d.partitions)) bits.push(`partitions ${d.partitions.join(',')}`);
      text = bits.length ? bits.join(' · ') : flat(d);
      break;
    }
    case 'failback_completed':
    case 'failback_failed':
      // node id → drain report (or {error})
      text = Object.entries(d)
        .map(([node, r]) => `${node}: ${drainReport(r)}`)
        .join('; ');
      break;
    case 'held_down':
      text = isNum(d.for_ms) ? `no recovery for ${Math.round(d.for_ms / 1000)} s (ejection ${d.ejections ?? '?'} in the window)` : flat(d);
      break;
    case 'drain':
      text = [d.reason, isNum(d.grace_ms) ? `grace ${d.grace_ms} ms` : null].filter(Boolean).join(' · ') || flat(d);
      break;
    case 'drain_completed':
      text = drainReport(d);
      break;
    case 'sessions_moved':
      text = isNum(d.sessions) ? `${d.sessions} session${d.sessions === 1 ? '' : 's'} moved` : flat(d);
      break;
    default:
      text = d.error || d.message ? `${d.error ?? ''} ${d.message ?? ''}`.trim() : flat(d);
  }
  return truncate(text);
}

/** A class for an action's colour: bad (failures, DOWN), good (completions, HEALTHY), or none. */
function actionTone(action, d) {
  if (/_failed$/.test(action)) return 'bad';
  if (action === 'transition' && d && d.to === 'DOWN') return 'bad';
  if (action === 'transition' && d && d.to === 'HEALTHY') return 'good';
  if (/_completed$/.test(action)) return 'good';
  return '';
}

// ---- rendering ------------------------------------------------------------------------------

/** Sets an element's text only when it changed (keeps selections and avoids needless layout). */
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function setAttr(node, name, value) {
  if (value === null || value === undefined || value === '') {
    if (node.hasAttribute(name)) node.removeAttribute(name);
  } else if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

const CELLS = ['id', 'state', 'streak', 'partitions', 'sessions', 'catchup', 'answer', 'flags'];

function newRow(id) {
  const tr = document.createElement('tr');
  tr.dataset.node = id;
  for (const c of CELLS) {
    const td = document.createElement('td');
    td.className = c;
    tr.append(td);
  }
  return tr;
}

function cell(tr, name) {
  return tr.querySelector(`td.${name}`);
}

function renderNode(tr, n, upThreshold) {
  const id = String(n.id);
  const idCell = cell(tr, 'id');
  setText(idCell, id);
  setAttr(idCell, 'title', n.url ? String(n.url) : null);

  const state = STATES.has(n.state) ? n.state : String(n.state ?? '?');
  const stateCell = cell(tr, 'state');
  setText(stateCell, state);
  const stateClass = `state state-${state.toLowerCase()}`;
  if (stateCell.className !== stateClass) stateCell.className = stateClass;

  const streakCell = cell(tr, 'streak');
  setText(streakCell, `${isNum(n.up_streak) ? n.up_streak : 0}/${isNum(upThreshold) ? upThreshold : '?'}`);
  setAttr(streakCell, 'title', n.start_recovery ? `start-recovery this UP episode: ${n.start_recovery}` : null);

  setText(cell(tr, 'partitions'), Array.isArray(n.assigned_partitions) ? n.assigned_partitions.join(', ') : '');
  setText(cell(tr, 'sessions'), String(isNum(n.sessions) ? n.sessions : 0));

  const cu = catchupSummary(n.catchup);
  const cuCell = cell(tr, 'catchup');
  const cuKey = JSON.stringify(cu.parts.map((x) => x.behind)) + cu.text;
  if (cuCell.dataset.key !== cuKey) {
    cuCell.dataset.key = cuKey;
    // The text is cu.text; partitions still behind their target are wrapped in span.behind.
    cuCell.replaceChildren(cu.head);
    cu.parts.forEach((x, i) => {
      cuCell.append(i === 0 ? ' · ' : ' ');
      if (x.behind) {
        const span = document.createElement('span');
        span.className = 'behind';
        span.title = 'behind its target';
        span.textContent = x.text;
        cuCell.append(span);
      } else {
        cuCell.append(x.text);
      }
    });
    if (cu.tail) cuCell.append(` · ${cu.tail}`);
  }

  const answerCell = cell(tr, 'answer');
  if (isNum(n.last_answer_ms_ago)) {
    setText(answerCell, `${n.last_answer_ms_ago} ms ago`);
    answerCell.classList.remove('error-text');
    setAttr(answerCell, 'title', n.last_error ? `last error: ${n.last_error}` : null);
  } else {
    setText(answerCell, n.last_error ? String(n.last_error) : '—');
    answerCell.classList.toggle('error-text', Boolean(n.last_error));
    setAttr(answerCell, 'title', null);
  }

  const flags = [];
  if (n.ready) flags.push('ready');
  if (n.draining) flags.push('draining');
  if (n.start_recovery === 'sent') flags.push('recovery sent');
  if (n.awaiting_failback) flags.push(n.ownership_moved ? 'awaiting failback' : 'out, ownership not moved');
  if (isNum(n.held_down_for_ms)) flags.push(`held down ${Math.ceil(n.held_down_for_ms / 1000)} s`);
  setText(cell(tr, 'flags'), flags.join(', '));
}

function renderNodes(data) {
  const nodes = Array.isArray(data.nodes) ? data.nodes : [];
  /** @type {Map<string, HTMLTableRowElement>} */
  const rows = new Map();
  for (const tr of el.tbody.querySelectorAll('tr[data-node]')) rows.set(tr.dataset.node, tr);
  el.tbody.querySelector('tr.empty')?.remove();

  const seen = new Set();
  for (const n of nodes) {
    const id = String(n?.id ?? '?');
    if (seen.has(id)) continue;
    seen.add(id);
    const tr = rows.get(id) ?? newRow(id);
    renderNode(tr, n, data.up_threshold);
    el.tbody.append(tr); // keeps the API's order (moves an existing row)
  }
  for (const [id, tr] of rows) if (!seen.has(id)) tr.remove();

  if (seen.size === 0) {
    const tr = document.createElement('tr');
    tr.className = 'empty';
    const td = document.createElement('td');
    td.colSpan = CELLS.length;
    td.textContent = 'no nodes configured';
    tr.append(td);
    el.tbody.append(tr);
  }
}

let publishersKey = '';

function renderPublishers(data) {
  const list = Array.isArray(data.publishers) ? data.publishers : [];
  const key = JSON.stringify(list);
  if (key === publishersKey) return;
  publishersKey = key;
  const rows = list.map((p) => {
    const tr = document.createElement('tr');
    tr.dataset.publisher = String(p?.url ?? '?');
    const add = (cls, text) => {
      const td = document.createElement('td');
      td.className = cls;
      td.textContent = text;
      tr.append(td);
      return td;
    };
    add('url', String(p?.url ?? '?'));
    add('ready', p?.ready ? 'yes' : 'no').classList.add('state', p?.ready ? 'state-healthy' : 'state-down');
    add('preferred', p?.preferred ? 'preferred' : '');
    add('error', p?.last_error ? String(p.last_error) : '').classList.toggle('error-text', Boolean(p?.last_error));
    return tr;
  });
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    tr.className = 'empty';
    const td = document.createElement('td');
    td.colSpan = 4;
    td.textContent = 'no publishers reported';
    tr.append(td);
    rows.push(tr);
  }
  el.publishers.replaceChildren(...rows);
}

let decisionsKey = '';

function renderDecisions(data) {
  const list = (Array.isArray(data.decisions) ? data.decisions : []).slice(0, MAX_DECISIONS);
  const key = JSON.stringify(list);
  if (key === decisionsKey) return;
  decisionsKey = key;
  const items = list.map((d) => {
    const li = document.createElement('li');
    const action = String(d?.action ?? '?');
    li.dataset.action = action;
    if (d?.node !== undefined) li.dataset.node = String(d.node);
    const add = (cls, text, tone) => {
      if (li.childNodes.length) li.append(' '); // plain-text separator (ignored by the grid layout)
      const s = document.createElement('span');
      s.className = tone ? `${cls} ${tone}` : cls;
      s.textContent = text;
      li.append(s);
    };
    add('time', isNum(d?.at_ms) ? localTime(d.at_ms) : '—');
    add('node', String(d?.node ?? ''));
    add('action', action, actionTone(action, d?.detail));
    add('reason', String(d?.reason ?? ''));
    add('detail', decisionDetail(action, d?.detail));
    if (d?.detail !== undefined && d?.detail !== null) li.title = JSON.stringify(d.detail, null, 1);
    return li;
  });
  if (items.length === 0) {
    const li = document.createElement('li');
    li.className = 'empty';
    li.textContent = 'no decisions yet';
    items.push(li);
  }
  el.decisions.replaceChildren(...items);
}

function renderSummary(data) {
  const items = [
    ['partition-count', 'partitions', isNum(data.partition_count) ? String(data.partition_count) : '?'],
    ['proxied-sessions', 'proxied sessions', isNum(data.proxied_sessions) ? String(data.proxied_sessions) : '?'],
    ['poll-interval', 'poll interval', isNum(data.poll_interval_ms) ? `${data.poll_interval_ms} ms` : '?'],
    ['up-threshold', 'UP threshold', isNum(data.up_threshold) ? String(data.up_threshold) : '?'],
  ];
  const key = JSON.stringify(items);
  if (el.summary.dataset.key === key) return;
  el.summary.dataset.key = key;
  el.summary.replaceChildren();
  items.forEach(([cls, label, value], i) => {
    if (i > 0) el.summary.append(' · ');
    const span = document.createElement('span');
    span.className = `item ${cls}`;
    const v = document.createElement('span');
    v.className = 'num';
    v.textContent = value;
    span.append(`${label} `, v);
    el.summary.append(span);
  });
}

function render(data) {
  renderSummary(data);
  renderNodes(data);
  renderPublishers(data);
  renderDecisions(data);
}

function showError(text) {
  setText(el.error, text ?? '');
  el.error.hidden = !text;
}

// ---- refresh loop ---------------------------------------------------------------------------

async function fetchFleet() {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const res = await fetch('/api/fleet', { cache: 'no-store', headers: { Accept: 'application/json' }, signal: ctrl.signal });
    const text = await res.text();
    if (!res.ok) {
      let why = text.slice(0, 200);
      try {
        const b = JSON.parse(text);
        if (b && (b.error || b.message)) why = `${b.error ?? ''}: ${b.message ?? ''}`;
      } catch {
        // not JSON
      }
      throw new Error(`HTTP ${res.status}${why ? ` ${why}` : ''}`);
    }
    let data;
    try {
      data = JSON.parse(text);
    } catch {
      throw new Error('the answer is not JSON');
    }
    if (!data || typeof data !== 'object' || !Array.isArray(data.nodes)) throw new Error('unexpected answer (no nodes list)');
    return data;
  } catch (err) {
    if (ctrl.signal.aborted) throw new Error(`no answer within ${FETCH_TIMEOUT_MS / 1000} s`);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** Fetches the history samples after the last one held, appends them and redraws the charts. */
async function refreshHistory(partitionCount) {
  const last = dashboard.history[dashboard.history.length - 1]?.at_ms ?? 0;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const res = await fetch(`/api/fleet/history?since_ms=${last}`, { cache: 'no-store', signal: ctrl.signal });
    if (!res.ok) throw new Error(`HTTP ${res.status} from /api/fleet/history`);
    const body = await res.json();
    const fresh = Array.isArray(body.samples) ? body.samples.filter((x) => isNum(x?.at_ms) && x.at_ms > last) : [];
    const keep = isNum(body.history_ms) ? body.history_ms : 600_000;
    const all = dashboard.history.concat(fresh);
    const newest = all[all.length - 1]?.at_ms ?? 0;
    dashboard.history = all.filter((x) => x.at_ms >= newest - keep);
    drawCharts(dashboard.history, isNum(body.partition_count) ? body.partition_count : partitionCount);
  } finally {
    clearTimeout(timer);
  }
}

async function refresh() {
  const started = performance.now();
  try {
    const data = await fetchFleet();
    render(data);
    await refreshHistory(data.partition_count);
    dashboard.data = data;
    dashboard.updatedAt = Date.now();
    dashboard.error = null;
    dashboard.refreshes += 1;
    setText(el.updated, localTime(dashboard.updatedAt));
    showError(null);
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    dashboard.error = msg;
    dashboard.failures += 1;
    const since = dashboard.updatedAt ? ` — showing the data of ${localTime(dashboard.updatedAt)}` : '';
    showError(`refresh of /api/fleet failed: ${msg}${since}`);
  } finally {
    const wait = Math.max(0, REFRESH_MS - (performance.now() - started));
    setTimeout(refresh, wait);
  }
}

refresh();
