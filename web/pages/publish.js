/**
 * publish.js — the `/` page's writes: one POST of a JSON body to the gateway, retried with the same
 * `Idempotency-Key` (so a retry after a network error or a 503 is applied once). It never throws:
 * it resolves to what happened, for the page to show.
 *
 * Retried: a network error, a 503 (publisher rebuilding, Kafka unavailable, outcome unknown), a
 * 504 (the gateway got no answer from the publisher in time: outcome unknown) and a 409 with
 * Retry-After (the first attempt with that key is still running), up to `attempts` times.
 *
 * `fetch` and `sleep` are injectable, so the unit tests drive it without a network.
 */

const ATTEMPTS = 3;

/** A fresh Idempotency-Key. `crypto.randomUUID` exists only in secure contexts (https, localhost). */
export function newKey() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const wait = (ms) => new Promise((r) => setTimeout(r, ms));

/** Seconds of a Retry-After header as ms (1 s when absent or unreadable), at most 5 s. */
function retryAfterMs(res) {
  const s = Number(res.headers.get('Retry-After'));
  return Math.min(5000, Number.isFinite(s) && s > 0 ? s * 1000 : 1000);
}

/** Reads an error body `{"error","message","field"?}` (or any text) into one short string. */
async function describeError(res) {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // body unreadable: the status says enough
  }
  try {
    const b = JSON.parse(text);
    if (b && typeof b === 'object' && ('error' in b || 'message' in b)) {
      return `${b.error ?? 'error'}: ${b.message ?? ''}${b.field ? ` (field ${b.field})` : ''}`;
    }
  } catch {
    // not JSON
  }
  return text.slice(0, 200) || res.statusText || 'no body';
}

/**
 * @typedef {{ok: true, body: any} | {ok: false, error: string}} PostOutcome `body` is the answer's
 *   JSON (null without one); `error` says why it failed ("network error: …", "HTTP 400 …")
 */

/**
 * Posts `body` (JSON) to `url`, retrying as described above. Never throws.
 * @param {string} url
 * @param {unknown} body
 * @param {{fetch?: typeof fetch, sleep?: (ms: number) => Promise<void>, attempts?: number, key?: string}} [opts]
 * @returns {Promise<PostOutcome>}
 */
export async function postJson(url, body, opts = {}) {
  const doFetch = opts.fetch ?? ((...a) => fetch(...a));
  const sleep = opts.sleep ?? wait;
  const attempts = opts.attempts ?? ATTEMPTS;
  const key = opts.key ?? newKey();
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const last = attempt === attempts;
    let res;
    try {
      res = await doFetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify(body),
      });
    } catch (err) {
      if (!last) {
        await sleep(500 * attempt);
        continue;
      }
      return { ok: false, error: `network error: ${err instanceof Error ? err.message : String(err)}` };
    }
    if (res.ok) {
      let answer = null;
      try {
        answer = await res.json();
      } catch {
        // 2xx without a JSON body: still done
      }
      return { ok: true, body: answer };
    }
    const retryable = res.status === 503 || res.status === 504 || (res.status === 409 && res.headers.has('Retry-After'));
    if (retryable && !last) {
      await sleep(retryAfterMs(res));
      continue;
    }
    return { ok: false, error: `HTTP ${res.status} ${await describeError(res)}` };
  }
  return { ok: false, error: 'no attempt made' };
}
