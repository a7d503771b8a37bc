/**
 * The client's package (web/client/package.json) is publishable and consistent: its entry and
 * declarations exist, every module the entry loads is in `files`, and index.d.ts declares exactly
 * the values index.js exports.
 */

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const dir = new URL('../../client/', import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8'));

/** The relative modules a file imports or re-exports, resolved against its URL. */
function imports(url) {
  const text = readFileSync(url, 'utf8');
  return [...text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"](\.[^'"]+)['"]/gm)].map((m) => new URL(m[1], url));
}

test('package.json: publishable, entry and types exist', () => {
  assert.equal(pkg.private, undefined, 'not private');
  assert.equal(pkg.name, 'fleet-client');
  assert.match(pkg.version, /^\d+\.\d+\.\d+$/);
  assert.equal(pkg.license, 'Apache-2.0');
  assert.equal(pkg.type, 'module');
  assert.deepEqual(pkg.exports['.'], { types: './index.d.ts', default: './index.js' });
  assert.equal(pkg.types, './index.d.ts');
  for (const f of [pkg.exports['.'].types, pkg.exports['.'].default, pkg.main]) assert.ok(existsSync(new URL(f, dir)), f);
});

test('package.json: files holds every module the entry loads', () => {
  const seen = new Set();
  const walk = (url) => {
    if (seen.has(url.href)) return;
    seen.add(url.href);
    for (const next of imports(url)) walk(next);
  };
  walk(new URL('index.js', dir));
  const listed = (rel) => pkg.files.some((f) => (f.endsWith('/') ? rel.startsWith(f) : rel === f));
  for (const href of seen) {
    const rel = href.slice(dir.href.length);
    assert.ok(listed(rel), `${rel} is loaded by index.js but not in files`);
  }
  assert.ok(seen.size >= 10);
});

test('index.d.ts declares exactly the values index.js exports', async () => {
  const dts = readFileSync(new URL('index.d.ts', dir), 'utf8');
  const declared = [...dts.matchAll(/^export (?:function|const|class) (\w+)/gm)].map((m) => m[1]);
  const runtime = Object.keys(await import(new URL('index.js', dir).href));
  assert.deepEqual([...new Set(declared)].sort(), runtime.sort());
});
