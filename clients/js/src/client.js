// The HTTP client of one ToPL collector of `dpstream serve` (Python: dpstream.client.ToPLClient): it fetches the
// public parameters, randomizes locally, and posts only the reports, each batch at a first_position, retrying
// safely: a batch whose answer was lost is sent again unchanged at the same position (the service answers it
// from what it released the first time), never randomized again -- a second report of the same values would
// spend their budget twice.

import { SystemBits, uniformPause } from './bits.js';
import { ToPLRandomizer } from './randomizer.js';

/** An error answer of the service (status and message), or no answer at all (status null and the cause). */
export class ServiceError extends Error {
  /**
   * @param {number | null} status
   * @param {string} message
   */
  constructor(status, message) {
    super(status === null ? message : `${status}: ${message}`);
    this.name = 'ServiceError';
    this.status = status;
    this.detail = message;
  }
}

/**
 * How a request is tried again after a network failure, a timeout or a 5xx: at most `attempts` tries within
 * `totalSeconds`, a random pause of up to firstDelay * 2^(k-1) seconds (at most maxDelay) before try k + 1.
 */
export class Retry {
  constructor({ attempts = 6, firstDelay = 0.2, maxDelay = 5, totalSeconds = 60 } = {}) {
    if (!(attempts >= 1 && firstDelay >= 0 && maxDelay >= 0 && totalSeconds >= 0)) {
      throw new RangeError('a retry needs attempts >= 1 and delays and totalSeconds >= 0.');
    }
    Object.assign(this, { attempts, firstDelay, maxDelay, totalSeconds });
  }

  /** The pause (seconds) before the next try, after `tried` tries: full jitter. */
  pause(tried) {
    return uniformPause() * Math.min(this.maxDelay, this.firstDelay * 2 ** (tried - 1));
  }
}

/** How a 409 ends when another process held the source: the batch is tried again where it was. */
const BUSY = 'Retry the batch.';
/** How many times a batch follows the collector when other clients moved it on. */
const MOVES = 64;

/** The seconds a 429 answer asks to wait (its Retry-After in seconds); null for any other answer. */
function retryAfter(answer) {
  if (answer.status !== 429) return null;
  const seconds = Number(answer.headers.get('retry-after') ?? '');
  return answer.headers.get('retry-after') !== null && Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function cause(error) {
  const inner = error?.cause?.code ?? error?.cause?.message;
  const text = `${error?.name ?? 'Error'}: ${String(error?.message ?? error).split('\n')[0]}`;
  return inner ? `${text} (${inner})` : text;
}

export class ToPLClient {
  /**
   * @param {string} url the service, e.g. "https://dp.example.org"
   * @param {string} collector the collector's name
   * @param {object} [options]
   * @param {string} [options.token] the bearer token that may post reports to the collector
   * @param {boolean} [options.clip] clip values outside [0, B] into it before randomizing
   * @param {import('./bits.js').BitSource} [options.bits] the randomness (default crypto.getRandomValues; a
   *   deterministic source for tests only)
   * @param {Retry} [options.retry]
   * @param {number} [options.timeout] seconds before a request is given up (and retried)
   * @param {typeof fetch} [options.fetch] the fetch to use (default globalThis.fetch)
   */
  constructor(url, collector, { token, clip = false, bits, retry = new Retry(), timeout = 60, fetch } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.collector = collector;
    this.clip = clip;
    this.bits = bits ?? new SystemBits();
    this.retry = retry;
    this.timeout = timeout;
    this.fetch = fetch ?? globalThis.fetch.bind(globalThis);
    this.headers = token ? { Authorization: `Bearer ${token}` } : {};
    /** Where this client's last batch ended (null: the collector's position, read on first use). */
    this.position = null;
    /** The reports documents sent without an answer, by their values. */
    this.unanswered = new Map();
  }

  /** One request, tried again as `retry` says after a network failure or a 5xx, and after a 429's Retry-After
   * (a contributor's rate: refused before anything was done) when that fits in the tries and time left; the
   * answer's text. */
  async request(method, path, body) {
    const start = Date.now();
    for (let tried = 1; ; tried += 1) {
      let failure;
      let wait = null;
      try {
        const answer = await this.fetch(`${this.url}${path}`, {
          method,
          headers: body === undefined ? this.headers : { ...this.headers, 'Content-Type': 'application/json' },
          body,
          signal: AbortSignal.timeout(this.timeout * 1000),
        });
        const text = await answer.text();
        wait = retryAfter(answer);
        if (answer.status < 500 && wait === null) {
          if (answer.status >= 400) throw new ServiceError(answer.status, errorMessage(text));
          return text;
        }
        failure = new ServiceError(answer.status, errorMessage(text));
      } catch (error) {
        if (error instanceof ServiceError && error.status < 500 && wait === null) throw error;
        failure = error;
      }
      const pause = wait === null ? this.retry.pause(tried) : wait;
      if (tried >= this.retry.attempts || (Date.now() - start) / 1000 + pause > this.retry.totalSeconds) {
        if (failure instanceof ServiceError) throw failure;
        const seconds = ((Date.now() - start) / 1000).toFixed(1);
        throw new ServiceError(null, `${method} ${path}: no answer after ${tried} tries in ${seconds} s (${cause(failure)}).`);
      }
      await sleep(pause);
    }
  }

  /** One request (see `request`); the answer's JSON. */
  async call(method, path, body) {
    const text = await this.request(method, path, body);
    try {
      return JSON.parse(text);
    } catch {
      throw new ServiceError(null, `${method} ${path}: the answer is not JSON: ${JSON.stringify(text.slice(0, 80))}.`);
    }
  }

  /** The collector's public facts (GET /collectors/NAME): position, hold, parameters, privacy. */
  facts() {
    return this.call('GET', `/collectors/${encodeURIComponent(this.collector)}`);
  }

  /** The collector's current parameters (wire-format version 2), checked (read as text: parsed by the checks). */
  async parameters() {
    const text = await this.request('GET', `/collectors/${encodeURIComponent(this.collector)}/parameters?version=2`);
    return ToPLRandomizer.fromJson(text, { clip: this.clip });
  }

  /**
   * Randomize `values` locally and post the reports; resolves to the estimates the collector released
   * ({position, time, value} each; none for the threshold reports).
   * @param {ArrayLike<number>} values one client's value each
   * @param {{firstPosition?: number}} [options] the collector position of the first report; without it, where
   *   this client's last batch ended (the collector's position on first use), following the collector when other
   *   clients moved it on, with the same reports
   * @returns {Promise<Array<{position: number, time: number, value: number}>>}
   */
  async send(values, { firstPosition } = {}) {
    const all = Float64Array.from(values, Number);
    const released = [];
    let start = 0;
    while (start < all.length) {
      let [count, document] = this.unansweredBatch(all.subarray(start));
      if (document === null) {
        const local = await this.parameters();
        count = all.length - start;
        if (local.threshold === null) { // only the reports still missing before theta is published
          const facts = await this.facts();
          count = Math.min(count, Math.max(facts.hold - facts.position, 0));
          if (count === 0) {
            await sleep(this.retry.pause(1)); // theta is being published: fetch the parameters again
            continue;
          }
        }
        document = local.reportBatch(all.subarray(start, start + count), this.bits).toJson();
        this.unanswered.set(batchKey(all.subarray(start, start + count)), document);
      }
      const at = firstPosition === undefined || firstPosition === null ? null : firstPosition + start;
      released.push(...await this.post(document, count, at));
      this.unanswered.delete(batchKey(all.subarray(start, start + count)));
      start += count;
    }
    return released;
  }

  /** Give up the batches sent without an answer: the next send of their values randomizes them anew. */
  discard() {
    const count = this.unanswered.size;
    this.unanswered.clear();
    return count;
  }

  /** The number and document of an unanswered batch that `values` start with, or [0, null]. */
  unansweredBatch(values) {
    for (const [key, document] of this.unanswered) {
      const count = Number(key.slice(0, key.indexOf(':')));
      if (count <= values.length && batchKey(values.subarray(0, count)) === key) return [count, document];
    }
    return [0, null];
  }

  /**
   * Post one reports document at a first position (retried by `call`).  Without an explicit position it goes
   * where this client's last batch ended; when other clients moved the collector on, the 409 says so and the
   * same document is sent at the collector's new position.
   */
  async post(document, count, explicit) {
    const follow = explicit === null;
    let first = explicit;
    if (follow) first = this.position ?? (await this.facts()).position;
    const path = (at) => `/collectors/${encodeURIComponent(this.collector)}/reports?first_position=${at}`;
    for (let move = 0; move < MOVES; move += 1) {
      try {
        const answer = await this.call('POST', path(first), document);
        this.position = first + count;
        return answer.released;
      } catch (error) {
        if (follow) this.position = first; // sent again, it is answered if it landed there
        if (!(error instanceof ServiceError) || error.status !== 409 || !follow) throw error;
        if (error.detail.endsWith(BUSY)) { // another process held the collector: the batch may have landed
          await sleep(this.retry.pause(1));
          continue;
        }
        const now = (await this.facts()).position;
        if (now <= first) throw error; // not moved on by others: stale parameters, or a conflict
        first = now;
      }
    }
    throw new ServiceError(409, `collector ${JSON.stringify(this.collector)} moved on ${MOVES} times while this batch was sent.`);
  }
}

/** A batch's values recognized again (in this client only: never sent). */
function batchKey(values) {
  return `${values.length}:${Array.from(values).join(',')}`;
}

/** The message of an error answer: its JSON message, else the start of its text. */
function errorMessage(text) {
  try {
    const message = JSON.parse(text).message;
    if (typeof message === 'string') return message;
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 200);
}
