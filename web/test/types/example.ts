/**
 * A typed use of the client, checked (never run) by `tsc --noEmit -p web/test/types` against
 * web/client/index.d.ts, imported the way a bundler's user imports the package. The
 * `@ts-expect-error` lines must stay errors: they prove the declarations refuse wrong uses.
 */

import {
  BUDGET_EXHAUSTED,
  Canvas,
  DEFAULTS,
  FleetClient,
  MODELS,
  canonicalJson,
  isChannelId,
  mergePatch,
  type ClientStateInfo,
  type Counters,
  type Json,
  type Model,
  type Phase,
  type PixelData,
  type PublicationInfo,
  type ResetInfo,
  type Subscription,
  type SubscriptionHandlers,
} from 'fleet-client';

// ---- a channel client ---------------------------------------------------------------------------

const client = new FleetClient({
  url: ['wss://gw-a.example.com', 'wss://gw-b.example.com'],
  token: () => localStorage.getItem('jwt'),
  baseDelayMs: 500,
  maxDelayMs: DEFAULTS.maxDelayMs,
  onLog: (line) => console.debug(line),
});

client.onState((state: Phase, info: ClientStateInfo) => {
  if (state === 'closed' && info.reason === BUDGET_EXHAUSTED) console.warn(info.message ?? '');
  if (state === 'connecting') console.info('via', info.gatewayUrl, 'since', info.since);
});

interface Score {
  home: number;
  away: number;
  meta?: { period: number };
}

const scores: Subscription<Score, Partial<Score>> = client.subscribe<Score, Partial<Score>>('scores:m1', {
  onState: (state, version) => render(state.home, state.away, version),
  onPublication: (patch, version, info: PublicationInfo) => {
    const home: number | undefined = patch.home;
    const at: number | null = info.publishedAtMs;
    console.log(home, version, at, info.channel, scores.state?.away);
  },
  onReset: (info: ResetInfo) => console.log(`reset to ${info.version} of ${info.epoch} (was ${info.previousVersion} of ${info.previousEpoch ?? '-'})`),
});

function render(home: number, away: number, version: number): void {
  document.title = `${home}:${away} (v${version})`;
}

const held: Score | undefined = scores.state;
const position: [number, string | null, string | null, boolean] = [scores.version, scores.epoch, scores.model, scores.active];
void scores.hash().then((hex: string | null) => console.log(hex ?? 'no state yet', held, position));
const active: Subscription | null = client.subscription;
scores.unsubscribe();
void active;

// Handlers written apart, with the default (unknown) types: narrowed before use.
const handlers: SubscriptionHandlers = {
  onPublication: (data) => {
    if (typeof data === 'string') console.log(data.toUpperCase());
  },
};
const chat = client.subscribe('chat:lobby', handlers);
chat.unsubscribe();

// A pixels channel: the state is a live Canvas.
const pixels = client.subscribe<Canvas, PixelData>('c1', {
  onPublication: ({ x, y, color }) => console.log(x, y, color, pixels.state?.get(x, y)),
});
if (pixels.state) {
  const [r, g, b]: [number, number, number] = pixels.state.get(0, 0);
  console.log(r, g, b, pixels.state.width * pixels.state.height);
}
pixels.unsubscribe();

const counters: Counters = client.counters;
console.log(counters.gapsSeen, counters.resets, client.version, client.epoch, client.nextUrl?.length, client.gateways);
client.close().retry();
client.setHidden(true).connect();

// ---- the pixels shorthand: the canvas option ----------------------------------------------------

const canvasClient = new FleetClient({
  url: 'ws://localhost:8000',
  canvas: 'c1',
  onCanvas: (canvas, changed) => {
    if (changed) console.log(changed.x, changed.y, changed.color, changed.version);
    else console.log(canvas.width, canvas.height, canvas.pixels.byteLength);
  },
});
const off: () => void = canvasClient.onCanvas((canvas: Canvas) => void canvas.hash());
off();
canvasClient.connect();
void canvasClient.hash();
const c: Canvas | null = canvasClient.canvas;
void c;

// ---- models -------------------------------------------------------------------------------------

const doc: Json = MODELS.json.apply(MODELS.json.initial(), { a: { b: 1 } });
const patched: Json = mergePatch(doc, { a: { b: null, c: [1, 'x'] } });
const text: string = canonicalJson(patched);
const latest: Json = MODELS.latest.apply(MODELS.latest.initial(), 42);
const nothing: null = MODELS.stream.apply(null, 'anything');
const white: Canvas = MODELS.pixels.initial({ width: 2, height: 2 });
const painted: Canvas = MODELS.pixels.apply(white, { x: 0, y: 1, color: '#ff0000' });
const problem: string | null = MODELS.pixels.check({ x: 9, y: 9, color: '#000000' }, painted);
const bytes: string | Uint8Array = MODELS.pixels.canonical(painted);
console.log(text, latest, nothing, problem, bytes, isChannelId('scores:m1'));

// A model of one's own, added by name.
const counter: Model<number, number> = {
  name: 'counter',
  stateful: true,
  initial: () => 0,
  fromState: (json) => (typeof json === 'number' ? json : 0),
  check: (data) => (typeof data === 'number' ? null : 'a number expected'),
  apply: (state, data) => state + data,
  canonical: (state) => String(state),
};
const withCounter = new FleetClient({ url: 'ws://h', models: { counter } });
withCounter.subscribe<number, number>('counters:clicks', { onState: (n) => console.log(n + 1) }).unsubscribe();

// ---- what the declarations refuse ---------------------------------------------------------------

// @ts-expect-error url is required
new FleetClient({ canvas: 'c1' });
// @ts-expect-error url is a string or a list of strings
new FleetClient({ url: 8000 });
// @ts-expect-error a tunable is a number
new FleetClient({ url: 'ws://h', stableMs: '10s' });
// @ts-expect-error the channel is a string
client.subscribe(42);
// @ts-expect-error there is no onData handler
client.subscribe('c1', { onData: () => {} });
// @ts-expect-error the state may not be held yet
const away: number = scores.state.away;
// @ts-expect-error onPublication's data has the subscription's data type
client.subscribe<Score, Partial<Score>>('scores:m2', { onPublication: (patch: string) => patch });
// @ts-expect-error a publication's info has no version (it is the second argument)
client.subscribe('c1', { onPublication: (_d, _v, info) => info.version });
// @ts-expect-error the subscription's state is read-only
scores.state = { home: 1, away: 2 };
// @ts-expect-error subscriptions come from subscribe()
new (scores.constructor as typeof import('fleet-client').Subscription)();
// @ts-expect-error pixels data needs a colour
MODELS.pixels.apply(white, { x: 0, y: 0 });
void away;
