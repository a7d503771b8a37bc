/**
 * pages.mjs — drives the live pages in a real headless Chromium (Debian's, through
 * playwright-core) while the Rust end-to-end harness runs kill → recover → failback.
 *
 * Usage: node web/test/browser/pages.mjs --gateway http://127.0.0.1:8000 --canvases a,b
 *        [--channels scores:final,chat:lobby] --out DIR [--chromium /usr/bin/chromium]
 *
 * Protocol with the harness (stdin/stdout, one line each):
 *   → stdout `READY`          every page is `stable` and /fleet shows every node HEALTHY
 *   ← stdin  `FINISH <json>`  publishing stopped; <json> = {"canvases": {"<canvas>": {"version": n,
 *                             "hash": "…"}}, "channels": {"<channel>": {"published": [[version,
 *                             data], …]}}} (`published`: what the harness published to a stream)
 *   → stdout `RESULT <json>`  what the pages showed; exit 0 when every check held, 1 otherwise
 *
 * Canvases open as `/?canvas=<id>` (the old address, still in links), channels as
 * `/?channel=<id>`. While running it samples the pages every 200 ms and records each page's
 * sequence of client states (#state) and serving nodes (#node), and /fleet's sequence of states
 * per node. At FINISH it waits for each canvas page to reach the publisher's head version,
 * compares the page's canvas hash with the publisher's, reads the client's counters, and saves
 * screenshots and the /fleet page as drawn (`fleet.html`). For each channel page it reads
 * `GET /api/channels/{id}` through the gateway and checks what a user sees: the model, the
 * version and the state hash shown in the status line; a json or latest channel's tree, whose text
 * is the publisher's state pretty-printed (keys sorted); a stream's list, which holds the last 200
 * publications the harness made, in order. It reads what /fleet's charts drew: per node the DOWN
 * bands of the sessions chart, per partition the owners of the ownership chart in time order.
 */

import { chromium } from 'playwright-core';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { isDeepStrictEqual } from 'node:util';

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}

const gateway = arg('gateway');
const canvases = (arg('canvases', '') || '').split(',').filter(Boolean);
const channels = (arg('channels', '') || '').split(',').filter(Boolean);
/** The publications a stream page's list keeps (STREAM_LIMIT of web/pages/app.js). */
const STREAM_LIMIT = 200;
const out = arg('out', 'target/browser-artifacts');
const executablePath = arg('chromium', process.env.CHROMIUM_PATH || '/usr/bin/chromium');
if (!gateway || canvases.length === 0) {
  console.error('usage: pages.mjs --gateway URL --canvases a,b --out DIR');
  process.exit(2);
}
mkdirSync(out, { recursive: true });

const say = (line) => process.stdout.write(`${line}\n`);
const note = (line) => process.stderr.write(`[pages] ${line}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Appends `v` to `seq` unless it repeats the last element. */
function push(seq, v) {
  if (v !== undefined && v !== null && v !== '' && seq[seq.length - 1] !== v) seq.push(v);
}

const launchedAt = Date.now();
const browser = await chromium.launch({
  executablePath,
  headless: true,
  // As the machine's probe found: without the background-networking flags Chromium keeps trying
  // hosts this closed network refuses.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
note(`Chromium started in ${Date.now() - launchedAt} ms`);
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
// Uncaught exceptions fail the test; console errors are reported (Chromium also logs network
// failures there, which page code cannot prevent).
const pageErrors = [];
const consoleErrors = [];
const open = async (path) => {
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(`${path}: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${path}: ${m.text()}`); });
  await page.goto(`${gateway}${path}`, { waitUntil: 'load' });
  return page;
};

// Every page at once: each becomes `stable` 10 s after its socket opened, so opening them one after
// the other would add up.
const openedAt = Date.now();
const [canvasList, channelList, fleetPage] = await Promise.all([
  Promise.all(canvases.map((c) => open(`/?canvas=${encodeURIComponent(c)}`))),
  Promise.all(channels.map((c) => open(`/?channel=${encodeURIComponent(c)}`))),
  open('/fleet'),
]);
const canvasPages = Object.fromEntries(canvases.map((c, i) => [c, canvasList[i]]));
const channelPages = Object.fromEntries(channels.map((c, i) => [c, channelList[i]]));
const allPages = { ...canvasPages, ...channelPages };
note(`${Object.keys(allPages).length + 1} pages opened in ${Date.now() - openedAt} ms`);

const seen = { canvases: {}, nodes: {}, fleet: {} };
for (const c of Object.keys(allPages)) { seen.canvases[c] = []; seen.nodes[c] = []; }

async function sample() {
  for (const [c, page] of Object.entries(allPages)) {
    const [state, node] = await page.evaluate(() => [
      document.querySelector('#state')?.textContent?.trim(),
      document.querySelector('#node')?.textContent?.trim(),
    ]).catch(() => [undefined, undefined]);
    push(seen.canvases[c], state);
    push(seen.nodes[c], node);
  }
  const rows = await fleetPage.evaluate(() => [...document.querySelectorAll('#nodes tr[data-node]')]
    .map((tr) => [tr.dataset.node, tr.querySelector('.state')?.textContent?.trim()])).catch(() => []);
  for (const [node, state] of rows) {
    seen.fleet[node] ??= [];
    push(seen.fleet[node], state);
  }
  return rows;
}

let sampling = true;
const sampler = (async () => {
  while (sampling) {
    await sample();
    await sleep(200);
  }
})();

// READY: every page stable, every node HEALTHY on /fleet.
const readyBy = Date.now() + 90_000;
for (;;) {
  const states = Object.values(seen.canvases).map((s) => s[s.length - 1]);
  const nodes = Object.values(seen.fleet).map((s) => s[s.length - 1]);
  if (states.every((s) => s === 'stable') && nodes.length > 0 && nodes.every((s) => s === 'HEALTHY')) break;
  if (Date.now() > readyBy) {
    note(`not ready: canvas states ${JSON.stringify(seen.canvases)}, fleet ${JSON.stringify(seen.fleet)}`);
    await browser.close();
    process.exit(1);
  }
  await sleep(200);
}
note(`every page stable ${Date.now() - openedAt} ms after they were opened`);
say('READY');

// Wait for FINISH with the publisher's truth.
const rl = createInterface({ input: process.stdin });
const truth = await new Promise((resolve) => {
  rl.on('line', (line) => {
    if (line.startsWith('FINISH ')) resolve(JSON.parse(line.slice(7)));
  });
});

const failures = [];
const result = { pages: {}, channels: {}, fleet: seen.fleet, pageErrors, consoleErrors };
for (const [c, page] of Object.entries(canvasPages)) {
  const want = truth.canvases[c];
  const deadline = Date.now() + 60_000;
  let got;
  for (;;) {
    got = await page.evaluate(async () => ({
      version: window.fleetClient.version,
      state: window.fleetClient.state,
      node: window.fleetClient.node,
      hash: await window.fleetClient.hash(),
      counters: window.fleetClient.counters,
    }));
    if ((got.version === want.version && got.state === 'stable') || Date.now() > deadline) break;
    await sleep(250);
  }
  result.pages[c] = { ...got, states: seen.canvases[c], nodes: seen.nodes[c], publisher: want };
  if (got.version !== want.version) failures.push(`${c}: page at version ${got.version}, publisher at ${want.version}`);
  if (got.hash !== want.hash) failures.push(`${c}: page hash ${got.hash} != publisher hash ${want.hash}`);
  if (got.state !== 'stable') failures.push(`${c}: page ends ${got.state}, not stable`);
  await page.screenshot({ path: `${out}/canvas-${c}.png`, fullPage: true });
}
for (const [c, page] of Object.entries(channelPages)) {
  result.channels[c] = await checkChannel(c, page, truth.channels?.[c] ?? {});
  await page.screenshot({ path: `${out}/${shotName(c)}`, fullPage: true });
}
sampling = false;
await sampler;
await sample();
// The charts redraw with each refresh: wait for one after the scenario, then read them.
const drawnAfter = await fleetPage.evaluate(() => window.fleetDashboard.refreshes);
await fleetPage.waitForFunction((n) => window.fleetDashboard.refreshes > n + 1, drawnAfter, { timeout: 10_000 }).catch(() => {});
result.charts = await fleetPage.evaluate(() => {
  // A node's first poll can fail while it is still starting: a band before the node's first
  // non-DOWN sample is that start, counted apart from the DOWN stretches of a node that was up.
  const history = window.fleetDashboard.history;
  const firstUp = (id) => history.find((s) => (s.nodes ?? []).some((n) => n.id === id && n.state !== 'DOWN'))?.at_ms;
  const downBands = {};
  const startBands = {};
  for (const r of document.querySelectorAll('#chart-sessions rect.down-band')) {
    const up = firstUp(r.dataset.node);
    const counts = up !== undefined && Number(r.dataset.from) >= up ? downBands : startBands;
    counts[r.dataset.node] = (counts[r.dataset.node] ?? 0) + 1;
  }
  const owners = {};
  const segs = [...document.querySelectorAll('#chart-ownership rect.owner')]
    .map((r) => ({ p: r.dataset.partition, node: r.dataset.node, from: Number(r.dataset.from) }))
    .sort((a, b) => a.from - b.from);
  for (const s of segs) (owners[s.p] ??= []).push(s.node);
  const lines = [...document.querySelectorAll('#chart-sessions polyline.series')].map((l) => l.dataset.node);
  return { downBands, startBands, owners, sessionLines: lines, samples: window.fleetDashboard.history.length };
});
writeFileSync(`${out}/fleet.html`, await fleetPage.content());
await fleetPage.screenshot({ path: `${out}/fleet.png`, fullPage: true });
result.screenshots = [...canvases.map((c) => `${out}/canvas-${c}.png`), ...channels.map((c) => `${out}/${shotName(c)}`), `${out}/fleet.png`];
if (pageErrors.length) failures.push(`page errors: ${pageErrors.join(' | ')}`);
result.failures = failures;
await browser.close();
say(`RESULT ${JSON.stringify(result)}`);
process.exit(failures.length === 0 ? 0 : 1);

/** A channel page's screenshot: `channel-<namespace>-<name>.png`. */
function shotName(channel) {
  return `channel-${channel.replace(':', '-')}.png`;
}

/** The value with its object keys sorted, recursively (as the page's tree shows it). */
function sortedKeys(v) {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortedKeys(v[k])]));
  return v;
}

/**
 * What a channel page shows once it reached the publisher's version, checked against
 * `GET /api/channels/{id}` (and, for a stream, against what the harness published). Pushes each
 * problem to `failures`; returns what it read.
 */
async function checkChannel(c, page, given) {
  const res = await fetch(`${gateway}/api/channels/${c}`);
  const want = await res.json();
  if (!res.ok) {
    failures.push(`${c}: GET /api/channels/${c} answered ${res.status} ${JSON.stringify(want)}`);
    return { publisher: want };
  }
  const read = () => page.evaluate(() => {
    const text = (sel) => document.querySelector(sel)?.textContent ?? null;
    return {
      state: window.fleetClient?.state,
      model: text('#model'),
      version: Number(text('#version')),
      epoch: text('#epoch'),
      hash: text('#hash'),
      hashVersion: Number(document.querySelector('#hash')?.dataset.version),
      tree: document.querySelector('#tree-view')?.hidden ? null : text('#tree'),
      stream: document.querySelector('#stream-view')?.hidden ? null : [...document.querySelectorAll('#stream li')]
        .map((li) => [Number(li.dataset.version), li.querySelector('.s-data')?.textContent ?? '']),
      caption: text('#stream-caption'),
    };
  });
  const deadline = Date.now() + 60_000;
  let got;
  for (;;) {
    got = await read();
    const caughtUp = got.version === want.version && got.hashVersion === want.version && got.state === 'stable';
    if (caughtUp || Date.now() > deadline) break;
    await sleep(250);
  }
  const shown = { ...got, stream: undefined, streamLength: got.stream?.length ?? null, states: seen.canvases[c], nodes: seen.nodes[c], publisher: { model: want.model, version: want.version, hash: want.hash } };
  const fail = (why) => failures.push(`${c}: ${why}`);
  if (got.state !== 'stable') fail(`page ends ${got.state}, not stable`);
  if (got.model !== want.model) fail(`page shows model ${got.model}, the publisher's is ${want.model}`);
  if (got.version !== want.version) fail(`page at version ${got.version}, publisher at ${want.version}`);
  if (got.hash !== want.hash || got.hashVersion !== want.version) fail(`page hash ${got.hash} (of version ${got.hashVersion}) != publisher hash ${want.hash} (version ${want.version})`);
  if (want.model === 'json' || want.model === 'latest') {
    const pretty = JSON.stringify(sortedKeys(want.state), null, 2);
    if (got.tree !== pretty) fail(`the tree shows ${JSON.stringify(got.tree)}, the publisher's state is ${JSON.stringify(pretty)}`);
  }
  if (want.model === 'stream') {
    const published = Array.isArray(given.published) ? given.published : [];
    const expected = published.slice(-STREAM_LIMIT);
    const items = (got.stream ?? []).map(([v, text]) => {
      try {
        return [v, JSON.parse(text)];
      } catch {
        return [v, `unparsable: ${text}`];
      }
    });
    shown.published = published.length;
    if (published.length <= STREAM_LIMIT) fail(`only ${published.length} publications: the list's bound (${STREAM_LIMIT}) was not reached`);
    if (!isDeepStrictEqual(items, expected)) {
      const firstDiff = items.findIndex((x, i) => !isDeepStrictEqual(x, expected[i]));
      fail(`the list holds ${items.length} items (v${items[0]?.[0]}…v${items.at(-1)?.[0]}), not the last ${expected.length} publications (v${expected[0]?.[0]}…v${expected.at(-1)?.[0]}); first difference at ${firstDiff}: ${JSON.stringify(items[firstDiff])} vs ${JSON.stringify(expected[firstDiff])}`);
    }
  }
  return shown;
}
