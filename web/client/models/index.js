/**
 * models/index.js — the four models a channel's namespace may have, by the name a `welcome` frame
 * gives. Each is a module with the same shape (see the README): `name`, `stateful`, `initial()`,
 * `fromState(stateJson)`, `check(data, state?)`, `apply(state, data)`, `canonical(state)`.
 */

import * as json from './json.js';
import * as latest from './latest.js';
import * as pixels from './pixels.js';
import * as stream from './stream.js';

export { canonicalJson } from './canonical.js';
export { mergePatch } from './json.js';

/** The built-in models by name. */
export const MODELS = Object.freeze({ stream, latest, json, pixels });
