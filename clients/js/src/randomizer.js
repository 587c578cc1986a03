// ToPL's client side (Python: dpstream.release.ToPLRandomizer): from the collector's public parameters, a
// report for each value -- Square Wave at threshold_epsilon while no theta is published, then the Hybrid
// mechanism (PM with probability hybrid_alpha / 2^62, else SR) at epsilon on the value truncated at theta and
// mapped to [-1, 1].  Draws: two words per Square Wave report, three per HM report (branch, rounding, report),
// read from the bit source in the order of the values, exactly as the Python randomizer reads them, so the
// same words give the same reports in both languages.

import { SystemBits } from './bits.js';
import { DENOMINATOR, MASK62 } from './exact.js';
import { WindowRandomizer } from './grid.js';
import { PM_REPORT, SR_REPORT, SW_REPORT, dumpReports, parametersId, parseParameters } from './wire.js';

const MIN_EPSILON = 1e-12;
const MAX_LOCAL_EPSILON = 30;
const MAX_SW_GRID = 2 ** 16;
const MAX_PM_GRID = 2 ** 20;
/** At or below this epsilon HM uses SR only (Wang et al.'s eps* ~ 0.61). */
const HM_PM_THRESHOLD = 0.61;

function fail(message) {
  throw new Error(`ToPL parameters: ${message}`);
}

function checkBudget(value, name) {
  if (!(value >= MIN_EPSILON && value <= MAX_LOCAL_EPSILON)) {
    fail(`${name} must be in [${MIN_EPSILON}, ${MAX_LOCAL_EPSILON}] for a local randomizer, got ${value}.`);
  }
}

function checkGrid(value, name, low, high) {
  if (!(value >= low && value <= high)) fail(`${name} must be an integer in [${low}, ${high}], got ${value}.`);
}

/** One batch of reports: mechanism codes, grid indices, and the id of the parameters they were made with. */
export class ReportBatch {
  /**
   * @param {Int8Array} mechanism
   * @param {Int32Array} report
   * @param {string} parameters
   */
  constructor(mechanism, report, parameters) {
    this.mechanism = mechanism;
    this.report = report;
    this.parameters = parameters;
  }

  get length() {
    return this.report.length;
  }

  /** The batch in the wire format, byte for byte as Python writes it. */
  toJson() {
    return dumpReports(this.mechanism, this.report, this.parameters);
  }
}

export class ToPLRandomizer {
  /**
   * Use ToPLRandomizer.fromJson: it checks the document first.
   * @param {object} fields checked fields of parseParameters
   * @param {boolean} clip clip values outside [0, B] into it (the client's own policy) instead of refusing them
   */
  constructor(fields, clip) {
    const { epsilon, threshold_epsilon: thresholdEpsilon, upper_bound: upperBound, threshold } = fields;
    checkBudget(epsilon, 'epsilon');
    checkBudget(thresholdEpsilon, 'threshold_epsilon');
    if (!(upperBound > 0)) fail(`upper_bound must be a finite number > 0, got ${upperBound}.`);
    if (threshold !== null && !(threshold > 0 && threshold <= upperBound)) {
      fail(`threshold must be in (0, upper_bound ${upperBound}], got ${threshold}.`);
    }
    checkGrid(fields.buckets, 'buckets', 2, MAX_SW_GRID);
    checkGrid(fields.stream_grid, 'stream_grid', 1, MAX_PM_GRID);
    const { square_wave: sw, stochastic_rounding: sr, piecewise: pm, hybrid_alpha: alpha } = fields.mechanisms;
    if (fields.mechanisms.denominator_bits !== 62) {
      fail(`mechanisms.denominator_bits must be 62, got ${fields.mechanisms.denominator_bits}.`);
    }
    if (sw.grid !== fields.buckets) fail(`mechanisms.square_wave.grid is ${sw.grid}, not buckets ${fields.buckets}.`);
    if (pm.grid !== fields.stream_grid) fail(`mechanisms.piecewise.grid is ${pm.grid}, not stream_grid ${fields.stream_grid}.`);
    if (sr.grid !== 1 || sr.window !== 1) fail('mechanisms.stochastic_rounding must have grid 1 and window 1.');
    if (alpha > DENOMINATOR || (epsilon <= HM_PM_THRESHOLD && alpha !== 0n)) {
      fail(`mechanisms.hybrid_alpha must be in [0, 2^62], and 0 at epsilon <= ${HM_PM_THRESHOLD}, got ${alpha}.`);
    }
    this.epsilon = epsilon;
    this.thresholdEpsilon = thresholdEpsilon;
    this.upperBound = upperBound;
    this.threshold = threshold;
    this.buckets = fields.buckets;
    this.streamGrid = fields.stream_grid;
    this.clip = clip;
    this.parametersId = fields.id;
    this.squareWave = new WindowRandomizer('square_wave', sw, thresholdEpsilon, 0, 1);
    this.stochasticRounding = new WindowRandomizer('stochastic_rounding', sr, epsilon, -1, 1);
    this.piecewise = new WindowRandomizer('piecewise', pm, epsilon, -1, 1);
    this.hybridAlpha = alpha;
  }

  /**
   * A randomizer from a parameters document (version 2), after checking it: its format, fields and types, that
   * its id matches its content, and that every mechanism is a distribution with an exact probability ratio of
   * at most e^epsilon at the budget it is published with.
   * @param {string} text
   * @param {{clip?: boolean}} [options]
   * @returns {Promise<ToPLRandomizer>}
   */
  static async fromJson(text, { clip = false } = {}) {
    const fields = parseParameters(text);
    const id = await parametersId(fields);
    if (id !== fields.id) {
      fail(`id ${JSON.stringify(fields.id)} does not match the content (its hash is ${JSON.stringify(id)}): `
        + 'the document was altered.');
    }
    return new ToPLRandomizer(fields, clip);
  }

  /**
   * The values checked (finite, in [0, B], or clipped into it when clip is set), as float64.
   * @param {ArrayLike<number>} values
   * @returns {Float64Array}
   */
  checkValues(values) {
    const out = Float64Array.from(values, Number);
    for (let k = 0; k < out.length; k += 1) {
      const value = out[k];
      if (!Number.isFinite(value) || typeof values[k] === 'boolean') {
        throw new Error(`value at position ${k} (0-based) is ${values[k]}, not a finite number.`);
      }
      if (value < 0 || value > this.upperBound) {
        if (!this.clip) {
          throw new Error(`value at position ${k} (0-based) is ${value}, outside [0, ${this.upperBound}] `
            + '(clip: true clips it).');
        }
        out[k] = Math.min(Math.max(value, 0), this.upperBound);
      }
    }
    return out;
  }

  /**
   * A report for each value (one client's value each), drawing from bits (default the platform's CSPRNG).
   * @param {ArrayLike<number>} values
   * @param {import('./bits.js').BitSource} [bits]
   * @returns {ReportBatch}
   */
  reportBatch(values, bits = new SystemBits()) {
    const checked = this.checkValues(values);
    const size = checked.length;
    const mechanism = new Int8Array(size);
    const report = new Int32Array(size);
    if (this.threshold === null) {
      const words = bits.words(2 * size);
      for (let k = 0; k < size; k += 1) {
        mechanism[k] = SW_REPORT;
        report[k] = this.squareWave.sample(checked[k] / this.upperBound, words[2 * k] & MASK62,
          words[2 * k + 1] & MASK62);
      }
    } else {
      const theta = this.threshold;
      const words = bits.words(3 * size);
      for (let k = 0; k < size; k += 1) {
        const unit = Math.min(Math.max((2 * Math.min(checked[k], theta)) / theta - 1, -1), 1);
        const usesPm = (words[3 * k] & MASK62) < this.hybridAlpha;
        const core = usesPm ? this.piecewise : this.stochasticRounding;
        mechanism[k] = usesPm ? PM_REPORT : SR_REPORT;
        report[k] = core.sample(unit, words[3 * k + 1] & MASK62, words[3 * k + 2] & MASK62);
      }
    }
    return new ReportBatch(mechanism, report, this.parametersId);
  }
}
