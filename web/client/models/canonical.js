/**
 * canonical.js — the canonical JSON text of a state, for its hash (the design's hash rules, RFC
 * 8785 JCS): object keys sorted recursively (by UTF-16 code units, as `Array.prototype.sort`
 * does), no whitespace, strings and numbers as `JSON.stringify` writes them (the ECMAScript number
 * form JCS prescribes). The `latest` and `json` models hash the UTF-8 bytes of this text.
 */

/**
 * The canonical JSON text of a JSON value.
 * @param {unknown} value a JSON value (null, boolean, finite number, string, array, plain object)
 * @returns {string}
 * @throws {TypeError} for a value JSON cannot represent (undefined, a function, a symbol, a bigint)
 */
export function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const o = /** @type {Record<string, unknown>} */ (value);
    const keys = Object.keys(o).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
  }
  const text = typeof value === 'bigint' ? undefined : JSON.stringify(value);
  if (text === undefined) throw new TypeError(`canonicalJson: ${typeof value} is not JSON`);
  return text;
}
