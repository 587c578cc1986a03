// dpstream's ToPL client for browsers and Node: randomize values locally with the exact grid randomizers of the
// Python library (crypto.getRandomValues, BigInt arithmetic) and post only the reports to `dpstream serve`.

export { SystemBits } from './bits.js';
export { ServiceError, Retry, ToPLClient } from './client.js';
export { exactFraction, expLowerBound, pythonFloat } from './exact.js';
export { WindowRandomizer } from './grid.js';
export { ReportBatch, ToPLRandomizer } from './randomizer.js';
export {
  PARAMETERS_FORMAT, PM_REPORT, REPORTS_FORMAT, SR_REPORT, SW_REPORT, dumpReports, parametersId, parseParameters,
} from './wire.js';
