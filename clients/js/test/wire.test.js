import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ReportBatch, ToPLRandomizer, parseParameters } from '../src/index.js';
import { documents, resealed } from './support/fixtures.js';

test('the documents the Python library writes are read, with their masses exact', async () => {
  const before = await ToPLRandomizer.fromJson(documents.before);
  const after = await ToPLRandomizer.fromJson(documents.after);
  assert.equal(before.threshold, null);
  assert.equal(after.threshold, 30);
  assert.equal(after.hybridAlpha, 1814557055283096576n); // 2^62 (1 - e^-1/2), beyond 2^53: a string on the wire
  assert.equal(after.parametersId, JSON.parse(documents.after).id);
  assert.equal(after.squareWave.outputs, 32 + after.squareWave.window);
});

test('a reports document is written byte for byte as Python writes it', () => {
  const batch = new ReportBatch(Int8Array.of(0, 0), Int32Array.of(5, 9), '0123456789abcdef');
  assert.equal(batch.toJson(),
    '{"format":"dpstream.topl.reports/1","mechanism":[0,0],"parameters":"0123456789abcdef","report":[5,9]}');
});

test('a float field beyond 2^53 (a large bound) is a float, not an inexact integer', async () => {
  // Python's ToPLRandomizer(epsilon=1.0, upper_bound=1e16, buckets=32, stream_grid=64).to_json(): documents.before
  // with upper_bound 1e16 and its id; JSON.parse reads 1e16 as an integer number, which used to be refused
  const text = documents.before.replace('"upper_bound":100.0', '"upper_bound":1e16')
    .replace(/"id":"[0-9a-f]+"/, '"id":"56947d8cf196319e"');
  const client = await ToPLRandomizer.fromJson(text);
  assert.equal(client.upperBound, 1e16);
  assert.equal(client.parametersId, '56947d8cf196319e');
});

test('bad documents are refused in one line that says what is wrong', async () => {
  const good = JSON.parse(documents.after);
  const cases = [
    ['{"a": 1', /are not valid JSON/],
    ['[1]', /must be a JSON object, got an array/],
    [documents.version1, /are version 1 .* ask the service for version 2/],
    [JSON.stringify({ ...good, format: 'dpstream.topl.parameters/3' }), /got format "dpstream.topl.parameters\/3"/],
    [JSON.stringify({ ...good, colour: 'red' }), /have unknown field\(s\) colour/],
    [JSON.stringify({ ...good, epsilon: '1' }), /epsilon must be a number, got "1"/],
    [JSON.stringify({ ...good, epsilon: 2 }), /does not match the content/],
    [documents.after.replace('"hybrid_alpha":"1814557055283096576"', '"hybrid_alpha":1814557055283096576'),
      /hybrid_alpha is 1814557055283096600, an integer beyond 2\^53/],
    [documents.after.replace('"hybrid_alpha":"1814557055283096576"', '"hybrid_alpha":"+1"'),
      /mechanisms.hybrid_alpha must be a string of decimal digits in version 2/],
  ];
  for (const [text, message] of cases) {
    await assert.rejects(ToPLRandomizer.fromJson(text), message, text.slice(0, 80));
  }
  for (const [text] of cases) {
    await assert.rejects(ToPLRandomizer.fromJson(text), (error) => !error.message.includes('\n'));
  }
});

test('resealed documents whose mechanisms are not epsilon-LDP at their budget are refused', async () => {
  const tooLikely = await resealed(documents.after, (document) => {
    const sr = document.mechanisms.stochastic_rounding; // p + q = 2^62: move mass from q to p
    [sr.p, sr.q] = [String(BigInt(sr.p) + 1000n), String(BigInt(sr.q) - 1000n)];
  });
  await assert.rejects(ToPLRandomizer.fromJson(tooLikely),
    /mechanisms.stochastic_rounding has the probability ratio \d+\/\d+, above e\^1: its reports would not be 1-LDP/);
  const notADistribution = await resealed(documents.after, (document) => {
    document.mechanisms.piecewise.q = String(BigInt(document.mechanisms.piecewise.q) + 1n);
  });
  await assert.rejects(ToPLRandomizer.fromJson(notADistribution), /masses sum to \d+, not 2\^62/);
  const biggerBudget = await resealed(documents.after, (document) => {
    document.epsilon = 0.9; // the masses of epsilon = 1 published as 0.9: a ratio above e^0.9
  });
  await assert.rejects(ToPLRandomizer.fromJson(biggerBudget), /above e\^0.9/);
  const hybrid = await resealed(documents.small, (document) => {
    document.mechanisms.hybrid_alpha = '1';
  });
  await assert.rejects(ToPLRandomizer.fromJson(hybrid), /hybrid_alpha must be in \[0, 2\^62\], and 0 at epsilon <= 0.61/);
  const grid = await resealed(documents.after, (document) => {
    document.buckets = 64;
  });
  await assert.rejects(ToPLRandomizer.fromJson(grid), /square_wave.grid is 32, not buckets 64/);
  const bigTheta = await resealed(documents.after, (document) => {
    document.threshold = 150;
  });
  await assert.rejects(ToPLRandomizer.fromJson(bigTheta), /threshold must be in \(0, upper_bound 100\], got 150/);
  assert.equal(parseParameters(documents.small).mechanisms.hybrid_alpha, 0n);
});
