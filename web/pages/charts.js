/**
 * charts.js — the `/fleet` page's pictures of the last minutes, drawn as SVG from the gateway's
 * `GET /api/fleet/history` (one sample per scheduled poll: per node its state, sessions, records
 * applied per second and owned partitions).
 *
 * - `#chart-sessions` and `#chart-rate`: one line per node (`polyline.series[data-node]`), with the
 *   stretches a node was DOWN shaded (`rect.down-band[data-node]`), so a kill is a band and the
 *   sessions moving away and back are the lines crossing it.
 * - `#chart-ownership`: one row per partition, coloured by the node that owned it
 *   (`rect.owner[data-partition][data-node][data-from][data-to]`); a gap is a partition without
 *   an owner.
 *
 * The pure parts (series, bands, segments) are exported for the unit tests; `drawCharts` does the
 * DOM work.
 */

const SVG = 'http://www.w3.org/2000/svg';
/** Node colours by the node's position in the gateway's list. */
export const PALETTE = ['#1f5fbf', '#c2571a', '#1e7b34', '#7b3fb5', '#a8326e', '#2b8a8a', '#8a7a00', '#5f6b76'];

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

/** Node ids in order of first appearance. */
export function nodeIds(samples) {
  const ids = [];
  for (const s of samples) for (const n of s.nodes ?? []) if (!ids.includes(n.id)) ids.push(n.id);
  return ids;
}

/** `[[at_ms, value]…]` of one node's `field` (samples without a number are left out). */
export function series(samples, id, field) {
  const out = [];
  for (const s of samples) {
    const n = (s.nodes ?? []).find((x) => x.id === id);
    if (n && isNum(n[field])) out.push([s.at_ms, n[field]]);
  }
  return out;
}

/**
 * Stretches where `pred(node sample)` held: `[{from, to}]` in ms, `to` being the next sample's time
 * (or the last sample's own when it is the last).
 */
export function bands(samples, id, pred) {
  const out = [];
  let open = null;
  samples.forEach((s, i) => {
    const n = (s.nodes ?? []).find((x) => x.id === id);
    const next = samples[i + 1]?.at_ms ?? s.at_ms;
    if (n && pred(n)) {
      if (open) open.to = next;
      else open = { from: s.at_ms, to: next };
    } else if (open) {
      out.push(open);
      open = null;
    }
  });
  if (open) out.push(open);
  return out;
}

/**
 * Ownership of each partition over time: `[{partition, node, from, to}]`, one per stretch a node
 * owned the partition (two nodes claiming one at once — a hand-over seen mid-way — give two).
 */
export function ownership(samples, partitionCount) {
  const out = [];
  /** @type {Map<string, {partition: number, node: string, from: number, to: number}>} */
  const open = new Map();
  samples.forEach((s, i) => {
    const next = samples[i + 1]?.at_ms ?? s.at_ms;
    const now = new Set();
    for (const n of s.nodes ?? []) {
      for (const p of n.partitions ?? []) {
        if (!isNum(p) || p < 0 || p >= partitionCount) continue;
        const key = `${p}/${n.id}`;
        now.add(key);
        const seg = open.get(key);
        if (seg) seg.to = next;
        else open.set(key, { partition: p, node: n.id, from: s.at_ms, to: next });
      }
    }
    for (const [key, seg] of open) {
      if (!now.has(key)) {
        out.push(seg);
        open.delete(key);
      }
    }
  });
  out.push(...open.values());
  return out.sort((a, b) => a.partition - b.partition || a.from - b.from);
}

// ---- drawing ----------------------------------------------------------------------------------

const W = 900;
const PAD = { left: 56, right: 12, top: 10, bottom: 22 };

function svgEl(name, attrs = {}, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function timeLabel(ms, end) {
  const s = Math.round((end - ms) / 1000);
  if (s <= 0) return 'now';
  return s >= 60 ? `−${Math.floor(s / 60)}m${s % 60 ? ` ${s % 60}s` : ''}` : `−${s}s`;
}

function axes(svg, x, t0, t1, h, yLabels) {
  for (let k = 0; k <= 4; k++) {
    const t = t0 + ((t1 - t0) * k) / 4;
    svg.append(svgEl('text', { x: x(t), y: h - 6, class: 'tick', 'text-anchor': k === 0 ? 'start' : k === 4 ? 'end' : 'middle' }, timeLabel(t, t1)));
  }
  for (const [y, label] of yLabels) {
    svg.append(svgEl('line', { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: 'grid' }));
    svg.append(svgEl('text', { x: PAD.left - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, label));
  }
}

function legend(container, ids) {
  const box = document.createElement('p');
  box.className = 'legend';
  ids.forEach((id, i) => {
    const item = document.createElement('span');
    item.className = 'legend-item';
    item.dataset.node = id;
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = PALETTE[i % PALETTE.length];
    item.append(sw, id);
    box.append(item);
  });
  const down = document.createElement('span');
  down.className = 'legend-item';
  const sw = document.createElement('span');
  sw.className = 'swatch down';
  down.append(sw, 'node DOWN');
  box.append(down);
  container.replaceChildren(box);
}

function lineChart(svg, samples, ids, field, unit) {
  const h = 170;
  svg.setAttribute('viewBox', `0 0 ${W} ${h}`);
  svg.replaceChildren();
  if (samples.length === 0) return;
  const t0 = samples[0].at_ms;
  const t1 = Math.max(samples[samples.length - 1].at_ms, t0 + 1);
  const all = ids.flatMap((id) => series(samples, id, field).map(([, v]) => v));
  const max = Math.max(1, ...all);
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v) => h - PAD.bottom - (v / max) * (h - PAD.top - PAD.bottom);
  ids.forEach((id) => {
    for (const b of bands(samples, id, (n) => n.state === 'DOWN')) {
      svg.append(svgEl('rect', { class: 'down-band', 'data-node': id, 'data-from': b.from, 'data-to': b.to,
        x: x(b.from), y: PAD.top, width: Math.max(1, x(b.to) - x(b.from)), height: h - PAD.top - PAD.bottom }));
    }
  });
  const fmt = (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v >= 10 ? String(Math.round(v)) : v.toFixed(1));
  axes(svg, x, t0, t1, h, [[y(0), `0 ${unit}`], [y(max / 2), fmt(max / 2)], [y(max), fmt(max)]]);
  ids.forEach((id, i) => {
    const pts = series(samples, id, field);
    if (pts.length === 0) return;
    const line = svgEl('polyline', { class: 'series', 'data-node': id, stroke: PALETTE[i % PALETTE.length],
      points: pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ') });
    line.append(svgEl('title', {}, `${id} ${field}`));
    svg.append(line);
  });
}

function ownershipChart(svg, samples, ids, partitionCount) {
  const row = 16;
  const h = PAD.top + PAD.bottom + row * Math.max(1, partitionCount);
  svg.setAttribute('viewBox', `0 0 ${W} ${h}`);
  svg.replaceChildren();
  if (samples.length === 0) return;
  const t0 = samples[0].at_ms;
  const t1 = Math.max(samples[samples.length - 1].at_ms, t0 + 1);
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const labels = [];
  for (let p = 0; p < partitionCount; p++) labels.push([PAD.top + p * row + row / 2 - 4, `p${p}`]);
  axes(svg, x, t0, t1, h, []);
  for (const [yy, label] of labels) svg.append(svgEl('text', { x: PAD.left - 6, y: yy + 8, class: 'tick', 'text-anchor': 'end' }, label));
  for (const seg of ownership(samples, partitionCount)) {
    const i = Math.max(0, ids.indexOf(seg.node));
    const r = svgEl('rect', { class: 'owner', 'data-partition': seg.partition, 'data-node': seg.node, 'data-from': seg.from,
      'data-to': seg.to, fill: PALETTE[i % PALETTE.length], x: x(seg.from), y: PAD.top + seg.partition * row + 2,
      width: Math.max(1, x(seg.to) - x(seg.from)), height: row - 4 });
    r.append(svgEl('title', {}, `p${seg.partition} owned by ${seg.node}`));
    svg.append(r);
  }
}

/**
 * Draws the three charts from the samples (oldest first) into `#chart-sessions`, `#chart-rate`,
 * `#chart-ownership` and the legend into `#chart-legend`.
 */
export function drawCharts(samples, partitionCount) {
  const ids = nodeIds(samples);
  const legendBox = document.querySelector('#chart-legend');
  if (legendBox) legend(legendBox, ids);
  const sessions = document.querySelector('#chart-sessions');
  if (sessions) lineChart(sessions, samples, ids, 'sessions', 'sessions');
  const rate = document.querySelector('#chart-rate');
  if (rate) lineChart(rate, samples, ids, 'records_per_sec', '/s');
  const own = document.querySelector('#chart-ownership');
  if (own) ownershipChart(own, samples, ids, partitionCount);
}
