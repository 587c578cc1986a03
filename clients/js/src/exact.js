// Exact integer arithmetic of the grid randomizers: the masses, the certified lower bound on e^eps,
// and Python's float formatting (for the parameters' id).  BigInt only: no float logarithm or exponential.

/** Every probability of a report is a multiple of 2^-62. */
export const DENOMINATOR_BITS = 62n;
export const DENOMINATOR = 1n << DENOMINATOR_BITS;
/** The low 62 bits of a 64-bit word: a uniform integer below 2^62 (never rejected). */
export const MASK62 = DENOMINATOR - 1n;
const EXP_BITS = 256n;

/**
 * A double as an exact fraction num / den in lowest terms (den a power of two).
 * @param {number} x a finite number
 * @returns {{num: bigint, den: bigint}}
 */
export function exactFraction(x) {
  if (!Number.isFinite(x)) throw new RangeError(`${x} is not a finite number.`);
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const high = view.getUint32(0);
  const sign = high >>> 31 ? -1n : 1n;
  const biased = (high >>> 20) & 0x7ff;
  let mantissa = (BigInt(high & 0xfffff) << 32n) | BigInt(view.getUint32(4));
  let exponent;
  if (biased === 0) {
    exponent = -1074n; // subnormal
  } else {
    mantissa |= 1n << 52n;
    exponent = BigInt(biased) - 1075n;
  }
  if (exponent >= 0n) return { num: sign * (mantissa << exponent), den: 1n };
  while (mantissa > 0n && (mantissa & 1n) === 0n && exponent < 0n) { // lowest terms, as Python's Fraction
    mantissa >>= 1n;
    exponent += 1n;
  }
  return { num: sign * mantissa, den: 1n << -exponent };
}

/**
 * A rational L = num / den <= e^x for a double 0 <= x <= 700, within a relative 2^-240 of it: the Taylor series
 * in fixed point, t_0 = 2^256, t_k = floor(t_{k-1} x / k), exactly as Python's dpstream.ldp.grid.exp_lower_bound.
 * @param {number} x
 * @returns {{num: bigint, den: bigint}}
 */
export function expLowerBound(x) {
  if (!(x >= 0 && x <= 700)) throw new RangeError(`expLowerBound needs 0 <= x <= 700, got ${x}.`);
  const { num, den } = exactFraction(x);
  let term = 1n << EXP_BITS;
  let total = term;
  for (let k = 1n; term > 0n; k += 1n) {
    term = (term * num) / (den * k);
    total += term;
  }
  return { num: total, den: 1n << EXP_BITS };
}

/**
 * A double as Python's repr() writes it (what json.dumps writes): the shortest digits that read back as the same
 * double, in fixed notation for decimal exponents -4..15 (with ".0" for whole numbers), else as "1.5e+16".
 * @param {number} x
 * @returns {string}
 */
export function pythonFloat(x) {
  if (!Number.isFinite(x)) throw new RangeError(`${x} is not a finite number.`);
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa, power] = x.toExponential().split('e');
  const sign = mantissa.startsWith('-') ? '-' : '';
  const digits = mantissa.replace('-', '').replace('.', '');
  const exponent = Number(power);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${'0'.repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, '0');
    return `${sign}${whole}.${digits.slice(exponent + 1) || '0'}`;
  }
  const shown = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const magnitude = String(Math.abs(exponent)).padStart(2, '0');
  return `${sign}${shown}e${exponent < 0 ? '-' : '+'}${magnitude}`;
}
