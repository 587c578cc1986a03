import assert from 'node:assert/strict';
import { test } from 'node:test';

import { exactFraction, expLowerBound, pythonFloat } from '../src/index.js';

test('floats are written as Python writes them (repr), for the id of the parameters', () => {
  const cases = [[1, '1.0'], [100, '100.0'], [0.1, '0.1'], [1e-5, '1e-05'], [1.5e-5, '1.5e-05'], [0.0001, '0.0001'],
    [1e16, '1e+16'], [1234567890123456, '1234567890123456.0'], [1e22, '1e+22'], [-2.5, '-2.5'], [0, '0.0'],
    [-0, '-0.0'], [5e-324, '5e-324'], [1.7976931348623157e308, '1.7976931348623157e+308'], [123.456, '123.456'],
    [0.30000000000000004, '0.30000000000000004'], [2 ** 60, '1.152921504606847e+18']];
  for (const [value, written] of cases) assert.equal(pythonFloat(value), written, `${value}`);
  assert.throws(() => pythonFloat(Number.NaN), /not a finite number/);
});

test('a double is read as the exact binary fraction it is', () => {
  assert.deepEqual(exactFraction(0.1), { num: 3602879701896397n, den: 36028797018963968n });
  assert.deepEqual(exactFraction(3), { num: 3n, den: 1n });
  assert.deepEqual(exactFraction(-0.75), { num: -3n, den: 4n });
  assert.deepEqual(exactFraction(5e-324), { num: 1n, den: 1n << 1074n });
});

test('the certified lower bound of e^x is below e^x and within its float', () => {
  const one = expLowerBound(1);
  assert.ok(one.num * 10n ** 16n <= 27182818284590453n * one.den); // e < 2.7182818284590453
  assert.equal(Number((one.num * 10n ** 30n) / one.den) / 1e30, Math.E);
  assert.deepEqual(expLowerBound(0), { num: 1n << 256n, den: 1n << 256n });
  const thirty = expLowerBound(30);
  assert.ok(Math.abs(Number((thirty.num * 1000n) / thirty.den) / 1000 / Math.exp(30) - 1) < 1e-12);
  assert.throws(() => expLowerBound(701), /needs 0 <= x <= 700/);
  assert.throws(() => expLowerBound(-1), /needs 0 <= x <= 700/);
});
