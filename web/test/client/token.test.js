/**
 * token.test.js — the `token` option: sent as `token=` on every attempt; a function is asked
 * again for each attempt, so a session closed with 1008 ("token expired") reconnects with a fresh
 * token.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FleetClient } from '../../client/fleet-client.js';
import { harness, snapshot, untilNextSocket } from './helpers.js';

test('a string token is sent on every attempt, percent-encoded', () => {
  const h = harness({ token: 'aaa.bb+b.c/c=' });
  h.client.connect();
  assert.equal(h.last().query.get('token'), 'aaa.bb+b.c/c=');
  assert.match(h.last().url, /&token=aaa\.bb%2Bb\.c%2Fc%3D&refusal=frame$/);
  h.last().open();
  h.last().serverClose(1006);
  untilNextSocket(h);
  assert.equal(h.last().query.get('token'), 'aaa.bb+b.c/c=');
});

test('a token function is asked before each attempt: an expired session reconnects with a fresh token', () => {
  let n = 0;
  const h = harness({ token: () => `jwt-${++n}` });
  h.client.connect();
  assert.equal(h.last().query.get('token'), 'jwt-1');
  h.last().open();
  h.last().send({ type: 'welcome', node: 'ws-1', canvas: 'c1', since: 0, epoch: 'e-0' });
  h.last().send(snapshot(0));
  h.last().serverClose(1008, 'token expired');
  untilNextSocket(h);
  assert.equal(h.last().query.get('token'), 'jwt-2');
  assert.equal(h.last().query.get('epoch'), 'e-0', 'it holds version 0 of that history');
  assert.equal(h.client.counters.closes['1008'], 1);
});

test('no token, or an empty one, sends no token parameter', () => {
  for (const token of [undefined, null, '', () => null]) {
    const h = harness({ token });
    h.client.connect();
    assert.equal(h.last().query.has('token'), false, String(token));
  }
});

test('a token of another type is refused at construction', () => {
  assert.throws(() => new FleetClient({ url: 'ws://g:1', canvas: 'c1', WebSocket: class {}, token: 42 }), TypeError);
});
