// ToPL's wire format (Python: dpstream.release.topl_wire): the parameters document a collector publishes
// (version 2: the masses above 2^53 as decimal strings) and the reports document clients send back.

import { pythonFloat } from './exact.js';

export const PARAMETERS_FORMAT = 'dpstream.topl.parameters/2';
export const PARAMETERS_FORMAT_V1 = 'dpstream.topl.parameters/1';
export const REPORTS_FORMAT = 'dpstream.topl.reports/1';
/** Mechanism codes of a report: Square Wave (threshold phase), then HM's two branches SR and PM. */
export const SW_REPORT = 0;
export const SR_REPORT = 1;
export const PM_REPORT = 2;

const WHAT = 'ToPL parameters';
const FIELDS = ['format', 'epsilon', 'threshold_epsilon', 'upper_bound', 'threshold', 'buckets', 'stream_grid',
  'mechanisms', 'id'];
const MECHANISM_FIELDS = ['square_wave', 'stochastic_rounding', 'piecewise', 'hybrid_alpha', 'denominator_bits'];
const CORE_FIELDS = ['grid', 'window', 'p', 'q', 'extra'];
/** The fields Python writes as floats (repr) in the canonical form the id hashes; every other number is an int. */
const FLOAT_FIELDS = new Set(['epsilon', 'threshold_epsilon', 'upper_bound', 'threshold']);
const DECIMAL = /^(0|[1-9][0-9]{0,18})$/;

function fail(message) {
  throw new Error(`${WHAT}${message}`);
}

function checkFields(object, expected, where) {
  const missing = expected.filter((key) => !(key in object));
  const unknown = Object.keys(object).filter((key) => !expected.includes(key)).sort();
  if (missing.length) fail(`${where} miss the field(s) ${missing.join(', ')}.`);
  if (unknown.length) fail(`${where} have unknown field(s) ${unknown.join(', ')}.`);
}

/**
 * Refuse a document in which JSON.parse met an integer it could not hold exactly (beyond 2^53); the float fields
 * are floats whatever their size (Python writes an upper bound of 1e16 as 1e+16, which JSON.parse reads exactly).
 */
function checkSafeNumbers(node, path) {
  if (typeof node === 'number' && Number.isInteger(node) && !Number.isSafeInteger(node) && !FLOAT_FIELDS.has(path)) {
    fail(`: ${path} is ${node}, an integer beyond 2^53 that JSON.parse cannot read exactly.`);
  } else if (node !== null && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) checkSafeNumbers(value, path ? `${path}.${key}` : key);
  }
}

function decimal(value, where) {
  if (typeof value !== 'string' || !DECIMAL.test(value)) {
    fail(`: mechanisms.${where} must be a string of decimal digits in version 2, got ${JSON.stringify(value)}.`);
  }
  return BigInt(value);
}

function isNumber(value) {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Parse a parameters document (version 2) and check its format, fields and types; returns its fields with the
 * masses as BigInt.  The values (budgets, grids, the exact privacy ratio) are checked by ToPLRandomizer.
 * @param {string} text
 * @returns {object}
 */
export function parseParameters(text) {
  if (typeof text !== 'string') throw new TypeError(`${WHAT} must be a JSON string, got ${typeof text}.`);
  let document;
  try {
    document = JSON.parse(text);
  } catch (error) {
    fail(` are not valid JSON: ${error.message.replace(/\s+/g, ' ')}.`); // one line, whatever the text held
  }
  if (document === null || typeof document !== 'object' || Array.isArray(document)) {
    fail(` must be a JSON object, got ${Array.isArray(document) ? 'an array' : typeof document}.`);
  }
  if (document.format === PARAMETERS_FORMAT_V1) {
    fail(` are version 1 ("${PARAMETERS_FORMAT_V1}"), whose integers above 2^53 JSON.parse cannot read exactly: `
      + 'ask the service for version 2 (GET /collectors/NAME/parameters?version=2).');
  }
  if (document.format !== PARAMETERS_FORMAT) {
    const shown = 'format' in document ? `format ${JSON.stringify(document.format)}` : 'no format field';
    fail(` must have "format": "${PARAMETERS_FORMAT}", got ${shown}.`);
  }
  checkFields(document, FIELDS, '');
  checkSafeNumbers(document, '');
  for (const key of ['epsilon', 'threshold_epsilon', 'upper_bound']) {
    if (!isNumber(document[key])) fail(`: ${key} must be a number, got ${JSON.stringify(document[key])}.`);
  }
  if (document.threshold !== null && !isNumber(document.threshold)) {
    fail(`: threshold must be a number or null, got ${JSON.stringify(document.threshold)}.`);
  }
  for (const key of ['buckets', 'stream_grid']) {
    if (!Number.isSafeInteger(document[key])) fail(`: ${key} must be an integer, got ${JSON.stringify(document[key])}.`);
  }
  if (typeof document.id !== 'string') fail(`: id must be a string, got ${JSON.stringify(document.id)}.`);
  const mechanisms = document.mechanisms;
  if (mechanisms === null || typeof mechanisms !== 'object' || Array.isArray(mechanisms)) {
    fail(`: mechanisms must be an object, got ${JSON.stringify(mechanisms)}.`);
  }
  checkFields(mechanisms, MECHANISM_FIELDS, '.mechanisms');
  const cores = {};
  for (const name of MECHANISM_FIELDS.slice(0, 3)) {
    const core = mechanisms[name];
    if (core === null || typeof core !== 'object' || Array.isArray(core)) {
      fail(`: mechanisms.${name} must be an object, got ${JSON.stringify(core)}.`);
    }
    checkFields(core, CORE_FIELDS, `.mechanisms.${name}`);
    for (const key of ['grid', 'window', 'extra']) {
      if (!Number.isSafeInteger(core[key])) fail(`: mechanisms.${name}.${key} must be an integer, got ${JSON.stringify(core[key])}.`);
    }
    cores[name] = { grid: core.grid, window: core.window, extra: core.extra,
      p: decimal(core.p, `${name}.p`), q: decimal(core.q, `${name}.q`) };
  }
  return {
    epsilon: document.epsilon,
    threshold_epsilon: document.threshold_epsilon,
    upper_bound: document.upper_bound,
    threshold: document.threshold,
    buckets: document.buckets,
    stream_grid: document.stream_grid,
    mechanisms: { ...cores, hybrid_alpha: decimal(mechanisms.hybrid_alpha, 'hybrid_alpha'),
      denominator_bits: mechanisms.denominator_bits },
    id: document.id,
  };
}

/**
 * The canonical JSON Python hashes for the id: sorted keys, no spaces, floats as repr, masses as integers.
 * @param {unknown} value
 * @param {string} key the field's name (floats are told from integers by it: JSON.parse makes 1.0 the number 1)
 * @returns {string}
 */
function canonical(value, key = '') {
  if (value === null) return 'null';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') return FLOAT_FIELDS.has(key) ? pythonFloat(value) : String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  const keys = Object.keys(value).sort();
  return `{${keys.map((name) => `${JSON.stringify(name)}:${canonical(value[name], name)}`).join(',')}}`;
}

/**
 * The id of parameters (as parseParameters returns them): the first 16 hex digits of the SHA-256 of their
 * canonical version-1 JSON without id -- one id for both versions of a document.  Needs crypto.subtle (Node 20+,
 * and browsers in a secure context: https, or http on localhost).
 * @param {object} fields
 * @returns {Promise<string>}
 */
export async function parametersId(fields) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) {
    throw new Error('checking the ToPL parameters needs crypto.subtle (a secure context: https, or http on localhost).');
  }
  const body = { ...fields, format: PARAMETERS_FORMAT_V1 };
  delete body.id;
  const text = canonical(body);
  const digest = new Uint8Array(await subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return Array.from(digest.subarray(0, 8), (byte) => byte.toString(16).padStart(2, '0')).join('');
}

/**
 * The reports document of a batch, byte for byte as Python's ReportBatch.to_json() writes it.
 * @param {ArrayLike<number>} mechanism
 * @param {ArrayLike<number>} report
 * @param {string} parameters the id of the parameters the reports were made with
 * @returns {string}
 */
export function dumpReports(mechanism, report, parameters) {
  return `{"format":"${REPORTS_FORMAT}","mechanism":[${Array.from(mechanism).join(',')}],`
    + `"parameters":${JSON.stringify(parameters)},"report":[${Array.from(report).join(',')}]}`;
}
