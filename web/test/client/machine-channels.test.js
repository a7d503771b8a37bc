/**
 * The state machine's channel frames, directly: a `state` is a snapshot and a `publication` an
 * event for the anchor rules, the `welcome` names the model (a stream holds its position from it),
 * a `reset` moves the position, and `subscribe` starts a new anchor between connections.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initialState, sentEpoch, transition } from '../../client/machine.js';

/** A channel subscription in `phase`, attempt 3, holding version 10 of epoch T-0 of a json channel. */
function st(phase, extra = {}) {
  return { ...initialState(), phase, attempt: 3, version: 10, epoch: 'T-0', base: {}, model: 'json', stateless: false, served: true, ...extra };
}
/** A stream channel at version 10 of T-0. */
const stream = (phase, extra = {}) => st(phase, { model: 'stream', stateless: true, ...extra });

const fx = (effects) => effects.filter((e) => e.type !== 'notify' && e.type !== 'log').map((e) => (e.timer ? `${e.type}:${e.timer}` : e.type));
const ev = (e) => ({ now: 1_000_000, rand: 0, attempt: 3, ...e });
const RESYNC = ['cancel_timer:connect', 'cancel_timer:close_wait', 'cancel_timer:stable', 'close_socket', 'set_timer:retry'];
const welcome = (model, epoch = 'T-0') => ({ type: 'welcome', node: 'ws-1', epoch, model, stateless: model === 'stream' });
const state = (version, value = { a: 1 }) => ({ type: 'state', version, state: value });
const pub = (version, data = { a: version }) => ({ type: 'publication', version, data, publishedAtMs: 5 });
const reset = (version, epoch) => ({ type: 'reset', version, epoch });
const pick = (s) => ({ version: s.version, epoch: s.epoch, held: s.base !== null, model: s.model, sent: sentEpoch(s) });

// [name, state, event, phase, effects (without notify/log), the position after {version, epoch, held, model, sent}, extra check]
const TABLE = [
  ['first welcome names the model; a json channel holds nothing yet', st('probation', { version: 0, epoch: null, base: null, model: null }),
    welcome('json'), 'probation', [], { version: 0, epoch: 'T-0', held: false, model: 'json', sent: null }],
  ['first welcome of a stream: the position is held at once (its epoch goes back from now on)', st('probation', { version: 0, epoch: null, base: null, model: null }),
    welcome('stream'), 'probation', [], { version: 0, epoch: 'T-0', held: true, model: 'stream', sent: 'T-0' }],
  ['welcome of the same epoch and model keeps the anchor', st('probation'), welcome('json'), 'probation', [],
    { version: 10, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' }],
  ['welcome of another epoch forgets the anchor and the state', st('probation'), welcome('json', 'U-0'), 'probation', [],
    { version: 0, epoch: 'U-0', held: false, model: 'json', sent: null }, (s) => assert.equal(s.counters.epochChanges, 1)],
  ['a stream\'s welcome of another epoch: version 0 of the new epoch, held', stream('probation'), welcome('stream', 'U-0'), 'probation', [],
    { version: 0, epoch: 'U-0', held: true, model: 'stream', sent: 'U-0' }],
  ['welcome naming another model forgets the anchor', st('probation'), welcome('latest'), 'probation', [],
    { version: 0, epoch: 'T-0', held: false, model: 'latest', sent: null }],
  ['state sets the state and the anchor', st('probation', { version: 0, base: null }), state(12), 'probation', ['apply_state'],
    { version: 12, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' },
    (s, e) => assert.deepEqual(e.find((x) => x.type === 'apply_state'), { type: 'apply_state', version: 12, state: { a: 1 } })],
  ['a state older than the anchor is dropped', st('stable'), state(7), 'stable', [],
    { version: 10, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' }, (s) => assert.equal(s.counters.staleSnapshots, 1)],
  ['after another epoch an older state is the base', st('probation', { version: 0, base: null, epoch: 'U-0' }), state(3), 'probation', ['apply_state'],
    { version: 3, epoch: 'U-0', held: true, model: 'json', sent: 'U-0' }],
  ['next publication applied', st('stable'), pub(11), 'stable', ['apply_publication'],
    { version: 11, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' },
    (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'apply_publication'), { type: 'apply_publication', version: 11, data: { a: 11 }, publishedAtMs: 5 });
      assert.equal(s.counters.eventsApplied, 1);
    }],
  ['duplicate publication dropped', st('stable'), pub(10), 'stable', [], { version: 10, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' },
    (s) => assert.equal(s.counters.duplicatesDropped, 1)],
  ['publication gap → resync', st('stable'), pub(12), 'backoff', RESYNC, { version: 10, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' },
    (s) => assert.deepEqual([s.cause, s.counters.gapsSeen], ['gap_resync', 1])],
  ['publication before any state → resync', st('stable', { version: 0, base: null }), pub(1), 'backoff', RESYNC,
    { version: 0, epoch: 'T-0', held: false, model: 'json', sent: null }, (s) => assert.equal(s.cause, 'gap_resync')],
  ['a stream applies publications right after its welcome', stream('probation', { version: 0 }), pub(1, 'hi'), 'probation', ['apply_publication'],
    { version: 1, epoch: 'T-0', held: true, model: 'stream', sent: 'T-0' }],
  ['reset of a stream: the position moves there at once', stream('stable'), reset(40, 'T-0'), 'stable', ['apply_reset'],
    { version: 40, epoch: 'T-0', held: true, model: 'stream', sent: 'T-0' },
    (s, e) => {
      assert.deepEqual(e.find((x) => x.type === 'apply_reset'), { type: 'apply_reset', version: 40, epoch: 'T-0', previousVersion: 10, previousEpoch: 'T-0' });
      assert.equal(s.counters.resets, 1);
    }],
  ['reset of a stateful channel: nothing held until its state', st('stable'), reset(0, 'T-1'), 'stable', ['apply_reset'],
    { version: 0, epoch: 'T-1', held: false, model: 'json', sent: null }],
  ['after a reset, the state that follows is the base', st('stable', { version: 0, epoch: 'T-1', base: null }), state(0, {}), 'stable', ['apply_state'],
    { version: 0, epoch: 'T-1', held: true, model: 'json', sent: 'T-1' }],
  ['a late reset of a socket left behind is not taken', stream('backoff'), reset(40, 'T-0'), 'backoff', [],
    { version: 10, epoch: 'T-0', held: true, model: 'stream', sent: 'T-0' }],
  ['a reset of another attempt is stale', stream('stable'), { ...reset(40, 'T-0'), attempt: 2 }, 'stable', [],
    { version: 10, epoch: 'T-0', held: true, model: 'stream', sent: 'T-0' }, (s) => assert.equal(s.counters.staleEvents, 1)],
  ['subscribe in closed: the anchor starts over', st('closed'), { type: 'subscribe', channel: 'chat:x' }, 'closed', [],
    { version: 0, epoch: null, held: false, model: null, sent: null }],
  ['subscribe in idle', initialState(), { type: 'subscribe', channel: 'chat:x' }, 'idle', [],
    { version: 0, epoch: null, held: false, model: null, sent: null }],
  ['subscribe on a live socket changes nothing', st('stable'), { type: 'subscribe', channel: 'chat:x' }, 'stable', [],
    { version: 10, epoch: 'T-0', held: true, model: 'json', sent: 'T-0' }],
];

test('channel frames: state × event → state, effects, position', async (t) => {
  for (const [name, s, event, phase, effects, position, check] of TABLE) {
    await t.test(name, () => {
      const out = transition(Object.freeze(structuredClone(s)), ev(event));
      assert.equal(out.state.phase, phase);
      assert.deepEqual(fx(out.effects), effects);
      assert.deepEqual(pick(out.state), position);
      if (check) check(out.state, out.effects);
    });
  }
});

test('the next socket asks for the subscription\'s position', () => {
  const open = (s) => transition(s, ev({ type: 'timer', timer: 'retry' })).effects.find((e) => e.type === 'open_socket');
  assert.deepEqual(open(stream('backoff', { version: 40 })), { type: 'open_socket', attempt: 4, since: 40, epoch: 'T-0', gateway: 0 });
  assert.deepEqual(open(st('backoff', { version: 0, epoch: 'T-1', base: null })), { type: 'open_socket', attempt: 4, since: 0, epoch: null, gateway: 0 },
    'a stateful channel waiting for its state after a reset asks for it afresh');
});
