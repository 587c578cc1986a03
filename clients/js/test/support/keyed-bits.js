// The keyed ChaCha20 bit source of Python's dpstream.noise.KeyedBits, for the cross-language test vectors: the
// stream key is HMAC-SHA256(key, "dpstream.noise.KeyedBits/v1\0" + encode_identity(identity)), the keystream that
// of ChaCha20 (RFC 8439) with a zero nonce from block 0, and word i is its bytes 8i..8i+7 read little-endian.
// Deterministic: for tests only, never for real reports.

import { chacha20 } from '@noble/ciphers/chacha.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';

const DOMAIN = new TextEncoder().encode('dpstream.noise.KeyedBits/v1\0');
const BLOCK = 64;

function concat(parts) {
  const out = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function tagged(tag, payload) {
  const length = new Uint8Array(8);
  new DataView(length.buffer).setBigUint64(0, BigInt(payload.length));
  return concat([new TextEncoder().encode(tag), length, payload]);
}

/** Two's complement big-endian on (bit_length + 8) // 8 bytes, as Python's int.to_bytes(..., signed=True). */
function integerBytes(value) {
  const magnitude = value < 0n ? -value - 1n : value; // bit_length of value, sign apart
  const bits = magnitude === 0n ? 0 : magnitude.toString(2).length;
  const size = Math.floor((bits + 8) / 8);
  let twos = value < 0n ? (1n << BigInt(8 * size)) + value : value;
  const out = new Uint8Array(size);
  for (let k = size - 1; k >= 0; k -= 1) {
    out[k] = Number(twos & 0xffn);
    twos >>= 8n;
  }
  return out;
}

/**
 * Python's encode_identity: a string (s), an integer (i: a number or a bigint), bytes (b: a Uint8Array) or a
 * tuple (t: an array), each a tag, its payload's length on 8 bytes big-endian, and the payload.
 */
export function encodeIdentity(identity) {
  if (typeof identity === 'string') return tagged('s', new TextEncoder().encode(identity));
  if (typeof identity === 'bigint' || Number.isSafeInteger(identity)) return tagged('i', integerBytes(BigInt(identity)));
  if (identity instanceof Uint8Array) return tagged('b', identity);
  if (Array.isArray(identity)) return tagged('t', concat(identity.map(encodeIdentity)));
  throw new TypeError(`an identity is a string, an integer, bytes or an array of these, got ${identity}.`);
}

export class KeyedBits {
  /**
   * @param {Uint8Array} key at least 16 bytes
   * @param {unknown} identity see encodeIdentity
   */
  constructor(key, identity) {
    if (!(key instanceof Uint8Array) || key.length < 16) throw new RangeError('key must be at least 16 bytes.');
    this.subkey = hmac(sha256, key, concat([DOMAIN, encodeIdentity(identity)]));
    this.block = 0; // the next keystream block to make
    this.buffer = new Uint8Array(0); // keystream bytes made and not yet given
  }

  /** The next n words of the stream. */
  words(n) {
    const need = 8 * n - this.buffer.length;
    if (need > 0) {
      const blocks = Math.ceil(need / BLOCK);
      const stream = chacha20(this.subkey, new Uint8Array(12), new Uint8Array(blocks * BLOCK), undefined, this.block);
      this.block += blocks;
      this.buffer = concat([this.buffer, stream]);
    }
    const bytes = this.buffer.slice(0, 8 * n);
    this.buffer = this.buffer.slice(8 * n);
    const view = new DataView(bytes.buffer);
    return BigUint64Array.from({ length: n }, (_, k) => view.getBigUint64(8 * k, true));
  }
}
