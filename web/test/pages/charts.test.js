// Unit tests of the /fleet charts' pure parts (web/pages/charts.js): what each chart draws from
// the gateway's history samples.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bands, nodeIds, ownership, series } from '../../pages/charts.js';

const n = (id, state, sessions, partitions, rate = null) => ({ id, state, sessions, partitions, records_per_sec: rate });
// A kill of ws-1 at t=2000 (its partitions move to ws-2), its return at 4000, failback at 5000.
const samples = [
  { at_ms: 1000, nodes: [n('ws-1', 'HEALTHY', 5, [0, 1], 10), n('ws-2', 'HEALTHY', 5, [2, 3], 12)] },
  { at_ms: 2000, nodes: [n('ws-1', 'DOWN', 0, []), n('ws-2', 'HEALTHY', 5, [2, 3], 11)] },
  { at_ms: 3000, nodes: [n('ws-1', 'DOWN', 0, []), n('ws-2', 'HEALTHY', 10, [0, 1, 2, 3], 20)] },
  { at_ms: 4000, nodes: [n('ws-1', 'UP', 0, []), n('ws-2', 'HEALTHY', 10, [0, 1, 2, 3], 21)] },
  { at_ms: 5000, nodes: [n('ws-1', 'HEALTHY', 5, [0, 1], 9), n('ws-2', 'HEALTHY', 5, [2, 3], 10)] },
];

test('series and node ids follow the samples', () => {
  assert.deepEqual(nodeIds(samples), ['ws-1', 'ws-2']);
  assert.deepEqual(series(samples, 'ws-1', 'sessions'), [[1000, 5], [2000, 0], [3000, 0], [4000, 0], [5000, 5]]);
  assert.deepEqual(series(samples, 'ws-1', 'records_per_sec'), [[1000, 10], [5000, 9]], 'samples without a rate are left out');
  assert.deepEqual(series(samples, 'ws-3', 'sessions'), []);
});

test('a DOWN stretch is one band, to the next sample', () => {
  assert.deepEqual(bands(samples, 'ws-1', (x) => x.state === 'DOWN'), [{ from: 2000, to: 4000 }]);
  assert.deepEqual(bands(samples, 'ws-2', (x) => x.state === 'DOWN'), []);
  const tail = [...samples, { at_ms: 6000, nodes: [n('ws-1', 'DOWN', 0, [])] }];
  assert.deepEqual(bands(tail, 'ws-1', (x) => x.state === 'DOWN'), [{ from: 2000, to: 4000 }, { from: 6000, to: 6000 }]);
});

test('ownership shows the takeover and the failback as segments per partition', () => {
  const segs = ownership(samples, 4).filter((s) => s.partition === 0);
  assert.deepEqual(segs, [
    { partition: 0, node: 'ws-1', from: 1000, to: 2000 },
    { partition: 0, node: 'ws-2', from: 3000, to: 5000 },
    { partition: 0, node: 'ws-1', from: 5000, to: 5000 },
  ]);
  const p2 = ownership(samples, 4).filter((s) => s.partition === 2);
  assert.deepEqual(p2, [{ partition: 2, node: 'ws-2', from: 1000, to: 5000 }]);
  assert.deepEqual(ownership(samples, 1).map((s) => s.partition).sort(), [0, 0, 0], 'partitions past the count are left out');
});
