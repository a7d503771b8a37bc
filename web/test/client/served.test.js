/**
 * The gateway serves the library's files one by one (gateway/src/assets.rs: `/client/<file>`), and
 * the pages load fleet-client.js from it: every module a served file imports must be served too,
 * or the pages break. (The gateway's own test checks the same for `import` lines; this one also
 * covers `export … from`, and runs with the web tests, before any cargo build.) index.js brings
 * in models/, served as `/client/models/<file>`.
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const root = new URL('../../../', import.meta.url);

test('every module a served client file imports is served', () => {
  const assets = readFileSync(new URL('gateway/src/assets.rs', root), 'utf8');
  // Every served file as its path under web/client/ (models/ included).
  const served = [...assets.matchAll(/asset!\("([^"]+)", JS, "web\/client\/([^"]+)"\)/g)].map((m) => m[2]);
  assert.ok(served.includes('fleet-client.js') && served.includes('models/index.js'), `served client files: ${served.join(', ')}`);
  for (const file of served) {
    const text = readFileSync(new URL(`web/client/${file}`, root), 'utf8');
    const specs = [...text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]/gm)].map((m) => m[1] ?? m[2]);
    const dir = file.includes('/') ? file.slice(0, file.lastIndexOf('/') + 1) : '';
    for (const spec of specs) {
      const path = new URL(spec, `file:///x/${dir}`).pathname.slice(3);
      assert.ok(spec.startsWith('.') && served.includes(path), `${file} imports ${spec}, which the gateway does not serve`);
    }
  }
});
