// Types of dpstream's JavaScript ToPL client (the package is plain ES modules; these describe src/index.js).

/** Anything that gives uniform 64-bit words, n at a time, continuing one stream. */
export interface BitSource {
  words(n: number): BigUint64Array;
}

/** Uniform words from globalThis.crypto.getRandomValues: the only source for real reports. */
export class SystemBits implements BitSource {
  constructor();
  words(n: number): BigUint64Array;
}

/** An error answer of the service (status and message), or no answer at all (status null and the cause). */
export class ServiceError extends Error {
  constructor(status: number | null, message: string);
  readonly status: number | null;
  /** The service's message (without the status). */
  readonly detail: string;
}

export interface RetryOptions {
  attempts?: number;
  firstDelay?: number;
  maxDelay?: number;
  totalSeconds?: number;
}

/** Tries after a network failure, a timeout or a 5xx: exponential backoff with full jitter (seconds). */
export class Retry {
  constructor(options?: RetryOptions);
  readonly attempts: number;
  readonly firstDelay: number;
  readonly maxDelay: number;
  readonly totalSeconds: number;
  pause(tried: number): number;
}

export interface Released {
  position: number;
  time: number;
  value: number;
}

export interface ClientOptions {
  /** A bearer token that may post reports to the collector. */
  token?: string;
  /** Clip values outside [0, B] into it instead of refusing them. */
  clip?: boolean;
  /** The randomness of the reports (default SystemBits; a deterministic source for tests only). */
  bits?: BitSource;
  retry?: Retry;
  /** Seconds before a request is given up (and tried again). */
  timeout?: number;
  fetch?: typeof fetch;
}

export class ToPLClient {
  constructor(url: string, collector: string, options?: ClientOptions);
  /** Where this client's last batch ended (null until its first batch). */
  position: number | null;
  /** The collector's current parameters, checked. */
  parameters(): Promise<ToPLRandomizer>;
  /** Randomize locally and post the reports; the estimates the collector released. */
  send(values: ArrayLike<number>, options?: { firstPosition?: number | null }): Promise<Released[]>;
  /** Give up the batches sent without an answer; how many there were. */
  discard(): number;
}

export class ReportBatch {
  constructor(mechanism: Int8Array, report: Int32Array, parameters: string);
  readonly mechanism: Int8Array;
  readonly report: Int32Array;
  readonly parameters: string;
  readonly length: number;
  /** The reports document, byte for byte as the Python library writes it. */
  toJson(): string;
}

export class WindowRandomizer {
  readonly grid: number;
  readonly window: number;
  readonly p: bigint;
  readonly q: bigint;
  readonly extra: number;
  readonly outputs: number;
  sample(value: number, rounding: bigint, draw: bigint): number;
  sampleGrid(input: bigint, draw: bigint): bigint;
}

export class ToPLRandomizer {
  static fromJson(text: string, options?: { clip?: boolean }): Promise<ToPLRandomizer>;
  readonly epsilon: number;
  readonly thresholdEpsilon: number;
  readonly upperBound: number;
  readonly threshold: number | null;
  readonly buckets: number;
  readonly streamGrid: number;
  readonly clip: boolean;
  readonly parametersId: string;
  readonly squareWave: WindowRandomizer;
  readonly stochasticRounding: WindowRandomizer;
  readonly piecewise: WindowRandomizer;
  readonly hybridAlpha: bigint;
  checkValues(values: ArrayLike<number>): Float64Array;
  reportBatch(values: ArrayLike<number>, bits?: BitSource): ReportBatch;
}

export const PARAMETERS_FORMAT: 'dpstream.topl.parameters/2';
export const REPORTS_FORMAT: 'dpstream.topl.reports/1';
export const SW_REPORT: 0;
export const SR_REPORT: 1;
export const PM_REPORT: 2;
export function parseParameters(text: string): object;
export function parametersId(fields: object): Promise<string>;
export function dumpReports(mechanism: ArrayLike<number>, report: ArrayLike<number>, parameters: string): string;
export function exactFraction(x: number): { num: bigint; den: bigint };
export function expLowerBound(x: number): { num: bigint; den: bigint };
export function pythonFloat(x: number): string;
