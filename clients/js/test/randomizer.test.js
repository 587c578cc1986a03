import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PM_REPORT, SR_REPORT, SW_REPORT, SystemBits, ToPLRandomizer, WindowRandomizer } from '../src/index.js';
import { documents } from './support/fixtures.js';

const D = 1n << 62n;

/** Words given in order (a fake source), counting how many were read. */
class ListBits {
  constructor(words) {
    this.list = words.map(BigInt);
    this.read = 0;
  }

  words(n) {
    const out = BigUint64Array.from(this.list.slice(this.read, this.read + n));
    this.read += n;
    return out;
  }
}

test('a grid input is reported where its draw falls among the exact masses', () => {
  // n = 4, w = 3, r = 1: masses P + 1, P, P in the window, Q outside; w P + r + n Q = 2^62
  const q = 10n ** 17n + 2n;
  const p = (D - 4n * q) / 3n;
  const extra = Number(D - 4n * q - 3n * p);
  assert.equal(extra, 1);
  const core = new WindowRandomizer('test', { grid: 4, window: 3, p, q, extra }, 30, 0, 1);
  const input = 2n;
  assert.equal(core.sampleGrid(input, 0n), 2n); // the first offset holds P + 1 units
  assert.equal(core.sampleGrid(input, p), 2n);
  assert.equal(core.sampleGrid(input, p + 1n), 3n);
  assert.equal(core.sampleGrid(input, 2n * p), 3n);
  assert.equal(core.sampleGrid(input, 2n * p + 1n), 4n);
  assert.equal(core.sampleGrid(input, core.windowMass - 1n), 4n);
  assert.equal(core.sampleGrid(input, core.windowMass), 0n); // outside: 0, 1, then 5, 6 (the window skipped)
  assert.equal(core.sampleGrid(input, core.windowMass + q - 1n), 0n);
  assert.equal(core.sampleGrid(input, core.windowMass + q), 1n);
  assert.equal(core.sampleGrid(input, core.windowMass + 2n * q), 5n);
  assert.equal(core.sampleGrid(input, D - 1n), 6n);
  // rounding: 0.6 of the way from x_2 to x_3 rounds up when the draw is below floor(0.6 2^62)
  const up = BigInt(Math.floor((0.65 * 4 - 2) * 2 ** 62));
  assert.equal(core.sample(0.65, up - 1n, 0n), 3);
  assert.equal(core.sample(0.65, up, 0n), 2);
  assert.equal(core.sample(1, D - 1n, 0n), 4); // the top of the range is grid point n
});

test('each value reads two words (Square Wave) or three (HM), so a batch reads as a loop of single values', async () => {
  for (const text of [documents.before, documents.after]) {
    const client = await ToPLRandomizer.fromJson(text);
    const values = [0, 1, 12.5, 29.999, 30, 30.001, 64, 99.5, 100];
    const words = new SystemBits().words(3 * values.length);
    const batch = client.reportBatch(values, new ListBits([...words]));
    const single = new ListBits([...words]);
    const loop = values.map((value) => client.reportBatch([value], single));
    assert.deepEqual(Array.from(batch.report), loop.map((one) => one.report[0]));
    assert.deepEqual(Array.from(batch.mechanism), loop.map((one) => one.mechanism[0]));
    assert.equal(single.read, (client.threshold === null ? 2 : 3) * values.length);
  }
});

test('reports are on their grids, and HM takes PM as often as hybrid_alpha says', async () => {
  const before = await ToPLRandomizer.fromJson(documents.before);
  const after = await ToPLRandomizer.fromJson(documents.after);
  const values = Array.from({ length: 20000 }, (_, k) => (k * 37) % 101);
  const sw = before.reportBatch(values);
  assert.ok(sw.mechanism.every((code) => code === SW_REPORT));
  assert.ok(sw.report.every((index) => index >= 0 && index < before.squareWave.outputs));
  const hm = after.reportBatch(values);
  const pm = hm.mechanism.filter((code) => code === PM_REPORT).length;
  const alpha = Number(after.hybridAlpha) / 2 ** 62; // 1 - e^-1/2
  assert.ok(Math.abs(pm - alpha * values.length) < 5 * Math.sqrt(values.length * alpha * (1 - alpha)), `${pm}`);
  for (let k = 0; k < values.length; k += 1) {
    const limit = hm.mechanism[k] === SR_REPORT ? 2 : after.piecewise.outputs;
    assert.ok(hm.report[k] >= 0 && hm.report[k] < limit);
  }
});

test('values outside [0, B] are refused in one line, or clipped on request', async () => {
  const client = await ToPLRandomizer.fromJson(documents.after);
  assert.throws(() => client.reportBatch([1, 2, 900]),
    /^Error: value at position 2 \(0-based\) is 900, outside \[0, 100\] \(clip: true clips it\)\.$/);
  assert.throws(() => client.reportBatch([1, Number.NaN]), /value at position 1 \(0-based\) is NaN, not a finite number/);
  const clipping = await ToPLRandomizer.fromJson(documents.after, { clip: true });
  const words = new SystemBits().words(6);
  assert.deepEqual(clipping.reportBatch([-5, 900], new ListBits([...words])),
    clipping.reportBatch([0, 100], new ListBits([...words])));
});
