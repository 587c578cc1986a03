// The finite window randomizer behind Square Wave, SR and PM (Python: dpstream.ldp.grid.WindowRandomizer).
//
// Inputs lie on the n + 1 grid points of [low, high]; grid input i is reported as an index j in [0, n + w) with
// probability m_{j - i} / 2^62 inside the window 0 <= j - i < w (m_k = P + 1 for k < r, P after) and Q / 2^62
// elsewhere.  A real value is first rounded at random to one of its two grid points.  Each value reads two
// uniform integers below 2^62 (the low 62 bits of two words): the first rounds, the second picks the report.
// Only the position of a value on the grid is float64 arithmetic (one rounding, as in Python); every decision
// is a comparison of integers.

import { DENOMINATOR, expLowerBound } from './exact.js';

const SCALE = 2 ** 62; // exact as a double

export class WindowRandomizer {
  /**
   * The randomizer of a parameters document's entry, checked: the masses sum to exactly 2^62 for every input,
   * and the largest ratio (P + [r > 0]) / Q is at most e^epsilon, in exact arithmetic (the certified lower bound
   * of e^epsilon the Python side uses), so every report is epsilon-LDP whatever the document claims.
   * @param {string} name the entry's name, for errors
   * @param {{grid: number, window: number, p: bigint, q: bigint, extra: number}} masses
   * @param {number} epsilon the budget a report of this randomizer spends
   * @param {number} low
   * @param {number} high
   */
  constructor(name, masses, epsilon, low, high) {
    const { grid, window, p, q, extra } = masses;
    const fail = (what) => {
      throw new Error(`ToPL parameters: mechanisms.${name} ${what}.`);
    };
    if (!(Number.isSafeInteger(grid) && grid >= 1 && grid <= 2 ** 24)) fail(`grid must be an integer in [1, 2^24], got ${grid}`);
    if (!(Number.isSafeInteger(window) && window >= 1 && window <= grid)) fail(`window must be an integer in [1, grid], got ${window}`);
    if (!(Number.isSafeInteger(extra) && extra >= 0 && extra < window)) fail(`extra must be an integer in [0, window), got ${extra}`);
    if (!(q >= 1n && p >= q)) fail(`needs p >= q >= 1, got p ${p} and q ${q}`);
    const mass = BigInt(window) * p + BigInt(extra) + BigInt(grid) * q;
    if (mass !== DENOMINATOR) fail(`masses sum to ${mass}, not 2^62: not a distribution`);
    const top = p + (extra > 0 ? 1n : 0n);
    const bound = expLowerBound(epsilon);
    if (top * bound.den > bound.num * q) {
      fail(`has the probability ratio ${top}/${q}, above e^${epsilon}: its reports would not be ${epsilon}-LDP`);
    }
    this.grid = grid;
    this.window = window;
    this.p = p;
    this.q = q;
    this.extra = extra;
    this.low = low;
    this.high = high;
    this.windowMass = BigInt(window) * p + BigInt(extra);
    this.heavy = BigInt(extra) * (p + 1n); // the first r window offsets carry P + 1
  }

  /** N = n + w: reports are the integers 0..N-1. */
  get outputs() {
    return this.grid + this.window;
  }

  /**
   * The report of a value in [low, high] from two uniform integers below 2^62 (rounding, then the report).
   * @param {number} value
   * @param {bigint} rounding
   * @param {bigint} draw
   * @returns {number}
   */
  sample(value, rounding, draw) {
    const u = Math.min(Math.max((value - this.low) * (this.grid / (this.high - this.low)), 0), this.grid);
    const i = Math.min(Math.floor(u), this.grid - 1);
    const threshold = BigInt(Math.floor((u - i) * SCALE)); // exact: a power-of-two scaling of a double
    const input = BigInt(i) + (rounding < threshold ? 1n : 0n);
    return Number(this.sampleGrid(input, draw));
  }

  /**
   * The report of grid input i from one uniform integer U below 2^62: in the window at the offset where U falls
   * among the masses m_k when U < M, else uniform over the n outputs outside it.
   * @param {bigint} input
   * @param {bigint} draw
   * @returns {bigint}
   */
  sampleGrid(input, draw) {
    if (draw < this.windowMass) {
      const offset = draw < this.heavy ? draw / (this.p + 1n) : BigInt(this.extra) + (draw - this.heavy) / this.p;
      return input + offset;
    }
    const outside = (draw - this.windowMass) / this.q;
    return outside < input ? outside : outside + BigInt(this.window);
  }
}
