// Sources of uniform 64-bit words: crypto.getRandomValues (the only one for real reports), or any object with
// words(n) -> BigUint64Array (a deterministic source for tests, e.g. the keyed ChaCha20 of test/support).

/** The largest request getRandomValues serves at once: 65,536 bytes. */
const CHUNK_WORDS = 8192;

/**
 * @typedef {{words(n: number): BigUint64Array}} BitSource
 */

/** Uniform words from the platform's CSPRNG (globalThis.crypto.getRandomValues: Node 20+ and every browser). */
export class SystemBits {
  constructor() {
    if (typeof globalThis.crypto?.getRandomValues !== 'function') {
      throw new Error('crypto.getRandomValues is missing: the ToPL client needs a cryptographic random source.');
    }
  }

  /**
   * @param {number} n
   * @returns {BigUint64Array}
   */
  words(n) {
    const out = new BigUint64Array(n);
    for (let start = 0; start < n; start += CHUNK_WORDS) {
      globalThis.crypto.getRandomValues(out.subarray(start, Math.min(n, start + CHUNK_WORDS)));
    }
    return out;
  }
}

/**
 * A uniform float in [0, 1) from the CSPRNG (53 bits), for the pauses between retries only (never for a report).
 * @returns {number}
 */
export function uniformPause() {
  const word = new SystemBits().words(1)[0];
  return Number(word >> 11n) / 2 ** 53;
}
