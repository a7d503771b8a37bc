/**
 * index.js — the package's entry (`import { FleetClient } from 'fleet-client'`): everything
 * fleet-client.js exports, the channel models (models/*.js), and a {@link FleetClient} that knows
 * the four built-in models (stream, latest, json, pixels), so `subscribe` works out of the box.
 *
 * fleet-client.js itself imports no model: the gateway serves the library's files one by one
 * (`/client/<file>`), and a page that follows a canvas may load fleet-client.js alone (the
 * gateway's `/` page loads this file: it subscribes to a channel of any model).
 */

import { FleetClient as CoreFleetClient } from './fleet-client.js';
import { MODELS } from './models/index.js';

export * from './fleet-client.js';
export { MODELS, canonicalJson, mergePatch } from './models/index.js';

/**
 * The client of fleet-client.js with the built-in models (a `models` option adds to them or
 * replaces one by name).
 */
export class FleetClient extends CoreFleetClient {
  /** @param {import('./fleet-client.js').FleetClientOptions} options */
  constructor(options) {
    const o = options ?? /** @type {import('./fleet-client.js').FleetClientOptions} */ ({});
    super({ ...o, models: { ...MODELS, ...(o.models ?? {}) } });
  }
}
