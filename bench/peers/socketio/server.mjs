/**
 * The Socket.IO peer of the benchmarks: what a team would write instead of the fleet.
 *
 * One Node.js process: a Kafka consumer (@platformatic/kafka 1.x, a maintained pure-JS client that
 * runs on Node.js 20.19+; 2.x needs Node.js 22) reads the same topic as the fleet and emits every
 * record to the room named after its key (the canvas or channel id), its value parsed as JSON, so
 * that clients receive the record's JSON as it was written (a fleet pixel event, or a format-2
 * publication whose data is any JSON) and not a string holding it; Socket.IO 4 serves WebSocket
 * clients (transport `websocket` only) that join rooms, with
 * connection state recovery on (Socket.IO's own resume: missed packets are replayed to a client
 * that reconnects within `maxDisconnectionDuration`).
 *
 * Environment: PORT (8090), HOST (127.0.0.1), KAFKA_BOOTSTRAP (localhost:9092), KAFKA_TOPIC
 * (canvas-events), GROUP (socketio-peer-<pid>; a fresh group starts at the latest offsets).
 *
 * GET /health answers 200 {"ready":true,...} once the consumer has joined its group, has its
 * partitions assigned and knows the offsets it fetches from, so a record produced after that is
 * delivered; 503 {"ready":false,...} before.
 *
 * Protocol for clients (Engine.IO 4 over WebSocket, https://socket.io/docs/v4/socket-io-protocol/):
 * connect to ws://host:PORT/socket.io/?EIO=4&transport=websocket, read the Engine.IO open packet
 * `0{...}`, send `40` (connect to the main namespace; answered by `40{"sid":...}`), then emit
 * `join` with a canvas or channel id and an ack id N (`42N["join","c1"]`), answered by
 * `43N[{"joined":"c1"}]` once the socket is in the room. Events arrive as
 * `42["event",<the record value, as JSON>,<recovery offset>]`. The server pings with `2` every 25 s; the client must answer `3`.
 */

import { createServer } from 'node:http';
import { Server } from 'socket.io';
import { Consumer, jsonDeserializer, stringDeserializers } from '@platformatic/kafka';

const port = Number(process.env.PORT || 8090);
const host = process.env.HOST || '127.0.0.1';
const bootstrap = process.env.KAFKA_BOOTSTRAP || 'localhost:9092';
const topic = process.env.KAFKA_TOPIC || 'canvas-events';
const group = process.env.GROUP || `socketio-peer-${process.pid}`;

const log = (...args) => console.error('socketio-peer:', ...args);
process.on('uncaughtException', (e) => {
  log('uncaught exception', e);
  process.exit(1);
});
process.on('unhandledRejection', (e) => {
  log('unhandled rejection', e);
  process.exit(1);
});

let consumer = null;
let stream = null;
let offsetsKnown = false;
let emitted = 0;

/** Partitions of `topic` assigned to this consumer (0 before the group's first assignment). */
const assignedPartitions = () =>
  (consumer?.assignments ?? []).filter((a) => a.topic === topic).reduce((n, a) => n + a.partitions.length, 0);
const ready = () => offsetsKnown && assignedPartitions() > 0;

const http = createServer((req, res) => {
  if (req.url === '/health') {
    const ok = ready();
    res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ready: ok, assigned_partitions: assignedPartitions(), offsets_known: offsetsKnown, emitted }));
    return;
  }
  res.writeHead(404).end();
});

const io = new Server(http, {
  transports: ['websocket'],
  perMessageDeflate: false,
  connectionStateRecovery: { maxDisconnectionDuration: 2 * 60 * 1000, skipMiddlewares: true },
});
io.on('connection', (socket) => {
  socket.on('join', (canvas, ack) => {
    if (typeof canvas !== 'string') {
      if (typeof ack === 'function') ack({ error: 'canvas must be a string' });
      return;
    }
    socket.join(canvas);
    if (typeof ack === 'function') ack({ joined: canvas });
  });
});

http.on('error', (e) => {
  log('HTTP server error', e);
  process.exit(1);
});
http.listen(port, host, () => log(`listening on ${host}:${port}, topic ${topic} at ${bootstrap}, group ${group}`));

/** A record value: its JSON, parsed; its text when it is not JSON. */
const valueOf = (data) => {
  try {
    return jsonDeserializer(data);
  } catch {
    return data?.toString('utf-8');
  }
};

consumer = new Consumer({
  groupId: group,
  clientId: 'socketio-peer',
  bootstrapBrokers: [bootstrap],
  // Keys and headers as strings; values parsed as JSON (socket.io serialises them again once per
  // emit, not once per client), a value that is not JSON passed on as its text.
  deserializers: { ...stringDeserializers, value: valueOf },
  sessionTimeout: 10000,
  heartbeatInterval: 1000,
});
consumer.on('error', (e) => log('consumer error', e));

// The topic may be brand new: retry until its metadata is there (about 30 s at most).
for (let attempt = 1; ; attempt++) {
  try {
    stream = await consumer.consume({ topics: [topic], mode: 'latest', autocommit: true });
    break;
  } catch (e) {
    if (attempt >= 30) throw e;
    log(`consume(${topic}) failed (attempt ${attempt}), retrying in 1 s:`, e?.message ?? e);
    await new Promise((r) => setTimeout(r, 1000));
  }
}
// 'offsets' follows the listing of the positions to fetch from (after each join/rebalance).
stream.on('offsets', () => {
  if (!offsetsKnown && assignedPartitions() > 0) {
    offsetsKnown = true;
    log(`consuming ${topic}: ${assignedPartitions()} partitions assigned, starting at the latest offsets`);
  }
});
stream.on('data', (message) => {
  emitted++;
  io.to(message.key).emit('event', message.value);
});
stream.on('error', (e) => log('consumer stream error', e));

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  log('stopping');
  await stream?.close().catch(() => {});
  await consumer.close(true).catch(() => {});
  io.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
