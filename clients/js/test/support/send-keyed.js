// Send values to a collector with the JavaScript client and deterministic bits (the keyed ChaCha20 of Python's
// KeyedBits), retrying patiently; prints the released estimates as JSON.  Run by tests/test_js_service.py while
// the server is killed and restarted: the reports must equal Python's from the same bits, none lost or doubled.
// Usage: node test/support/send-keyed.js URL COLLECTOR TOKEN KEY_HEX IDENTITY VALUES.json BATCH

import { readFileSync } from 'node:fs';

import { Retry, ToPLClient } from '../../src/index.js';
import { KeyedBits } from './keyed-bits.js';

const [url, collector, token, keyHex, identity, file, batch] = process.argv.slice(2);
const key = Uint8Array.from(keyHex.match(/../g), (byte) => parseInt(byte, 16));
const values = JSON.parse(readFileSync(file, 'utf8'));
const client = new ToPLClient(url, collector, {
  token,
  bits: new KeyedBits(key, identity),
  retry: new Retry({ attempts: 400, firstDelay: 0.02, maxDelay: 0.2, totalSeconds: 90 }),
  timeout: 10,
});
const released = [];
for (let start = 0; start < values.length; start += Number(batch)) {
  released.push(...await client.send(values.slice(start, start + Number(batch))));
}
process.stdout.write(JSON.stringify(released));
