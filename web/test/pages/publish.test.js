// Unit tests of the `/` page's writes (web/pages/publish.js): which answers are retried, always
// with the same Idempotency-Key, and what the page is told.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { postJson } from '../../pages/publish.js';

/** A fetch that answers from a script: each entry a Response, or an Error to throw. */
function scripted(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    const a = answers[calls.length - 1];
    if (a instanceof Error) throw a;
    return a;
  };
  return { fetch, calls };
}
const json = (status, body, headers = {}) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json', ...headers } });
const noSleep = async () => {};

test('a 503 and a 504 are retried with the same key; the 201 answer is returned', async () => {
  const { fetch, calls } = scripted([json(503, { error: 'unavailable' }, { 'Retry-After': '1' }), json(504, {}), json(201, { version: 13, partition: 4, offset: 1240 })]);
  const r = await postJson('/api/channels/scores:final/publications', { data: { home: 3 } }, { fetch, sleep: noSleep });
  assert.deepEqual(r, { ok: true, body: { version: 13, partition: 4, offset: 1240 } });
  assert.equal(calls.length, 3);
  const keys = new Set(calls.map((c) => c.init.headers['Idempotency-Key']));
  assert.equal(keys.size, 1, 'one key for every attempt');
  assert.match([...keys][0], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(calls[0].init.body, '{"data":{"home":3}}');
  assert.equal(calls[0].init.method, 'POST');
});

test('a refusal is not retried and is described from its JSON body', async () => {
  const { fetch, calls } = scripted([json(400, { error: 'unknown_namespace', message: 'namespace "nope" is not configured', field: 'channel' })]);
  const r = await postJson('/x', { data: 1 }, { fetch, sleep: noSleep });
  assert.deepEqual(r, { ok: false, error: 'HTTP 400 unknown_namespace: namespace "nope" is not configured (field channel)' });
  assert.equal(calls.length, 1);
});

test('a 409 is retried only with Retry-After (the first attempt with the key still runs)', async () => {
  const retried = scripted([json(409, { error: 'in_progress' }, { 'Retry-After': '1' }), json(201, { version: 1 })]);
  assert.equal((await postJson('/x', {}, { fetch: retried.fetch, sleep: noSleep })).ok, true);
  assert.equal(retried.calls.length, 2);
  const final = scripted([json(409, { error: 'key_reused', message: 'another body' })]);
  assert.deepEqual(await postJson('/x', {}, { fetch: final.fetch, sleep: noSleep }), { ok: false, error: 'HTTP 409 key_reused: another body' });
});

test('network errors are retried up to the attempts, then reported', async () => {
  const waits = [];
  const { fetch, calls } = scripted([new TypeError('fetch failed'), new TypeError('fetch failed'), new TypeError('fetch failed')]);
  const r = await postJson('/x', {}, { fetch, sleep: async (ms) => { waits.push(ms); } });
  assert.deepEqual(r, { ok: false, error: 'network error: fetch failed' });
  assert.equal(calls.length, 3);
  assert.deepEqual(waits, [500, 1000]);
});

test('the last attempt\'s 503 is reported, and a 2xx without JSON is still done', async () => {
  const { fetch } = scripted([json(503, {}), json(503, {}), new Response('busy', { status: 503 })]);
  assert.deepEqual(await postJson('/x', {}, { fetch, sleep: noSleep }), { ok: false, error: 'HTTP 503 busy' });
  const empty = scripted([new Response(null, { status: 204 })]);
  assert.deepEqual(await postJson('/x', {}, { fetch: empty.fetch, sleep: noSleep }), { ok: true, body: null });
});
