// The cross-language vectors' JavaScript side (run by tests/test_js_client.py): reads the cases the Python library
// made -- a parameters document, a key and an identity for the keyed ChaCha20 bits, values -- and prints this
// client's reports of them, and Python's float formatting of a list of doubles, as one JSON object.
// Usage: node test/support/vectors.js CASES.json

import { readFileSync } from 'node:fs';

import { ToPLRandomizer, pythonFloat } from '../../src/index.js';
import { KeyedBits } from './keyed-bits.js';

const input = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const key = Uint8Array.from(input.key.match(/../g), (byte) => parseInt(byte, 16));
const reports = [];
for (const { parameters, identity, values } of input.cases) {
  const client = await ToPLRandomizer.fromJson(parameters);
  reports.push(client.reportBatch(values, new KeyedBits(key, identity)).toJson());
}
const words = input.words.map(({ identity, count }) => Array.from(new KeyedBits(key, identity).words(count), String));
process.stdout.write(JSON.stringify({ reports, floats: input.floats.map(pythonFloat), words }));
