import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Retry, ServiceError, SystemBits, ToPLClient } from '../src/index.js';
import { FakeCollector } from './support/fake-service.js';
import { documents } from './support/fixtures.js';

const QUICK = new Retry({ attempts: 4, firstDelay: 0.001, maxDelay: 0.005, totalSeconds: 5 });

/** The CSPRNG, counting the words read (a batch randomized twice would read twice). */
class CountingBits extends SystemBits {
  constructor() {
    super();
    this.read = 0;
  }

  words(n) {
    this.read += n;
    return super.words(n);
  }
}

function setUp(hold = 20) {
  const service = new FakeCollector(documents, hold);
  const bits = new CountingBits();
  const client = new ToPLClient('http://service.test/', 'c', { token: 't', bits, retry: QUICK, fetch: service.fetch });
  return { service, client, bits };
}

const values = (n) => Array.from({ length: n }, (_, k) => (k * 7) % 100);

test('threshold reports first, as many as the collector still holds out, then the stream reports', async () => {
  const { service, client, bits } = setUp(20);
  const released = await client.send(values(30));
  assert.deepEqual(service.posts.map(([first, body]) => [first, JSON.parse(body).report.length]), [[0, 20], [20, 10]]);
  assert.deepEqual(JSON.parse(service.posts[0][1]).mechanism, Array(20).fill(0));
  assert.deepEqual(released.map((row) => row.position), Array.from({ length: 10 }, (_, k) => 20 + k));
  assert.equal(bits.read, 2 * 20 + 3 * 10);
  assert.equal(client.position, 30);
});

test('a batch whose answer was lost is sent again unchanged at its position, never randomized again', async () => {
  const { service, client, bits } = setUp(0);
  service.lose = 2;
  const released = await client.send(values(50));
  assert.equal(service.posts.length, 3);
  assert.ok(service.posts.every(([first, body]) => first === 0 && body === service.posts[0][1]));
  assert.equal(service.position, 50);
  assert.equal(released.length, 50);
  assert.equal(bits.read, 3 * 50);
});

test('5xx answers are tried again; a 4xx is not', async () => {
  const { service, client } = setUp(0);
  service.errors = 2;
  assert.equal((await client.send(values(5))).length, 5);
  await assert.rejects(client.send(values(5), { firstPosition: 99 }),
    (error) => error instanceof ServiceError && error.status === 409 && /at position 5, not 99/.test(error.message));
  assert.equal(service.posts.length, 2);
});

test('a 429 is sent again after its Retry-After when that fits, else it is the caller\'s', async () => {
  const { service, client, bits } = setUp(0);
  service.limited = 2;
  assert.equal((await client.send(values(5))).length, 5);
  assert.equal(service.posts.length, 1); // the two refusals did nothing: one batch reached the collector
  const read = bits.read;
  const perBatch = read; // the words one batch of 5 values reads
  service.limited = 1;
  service.retryAfter = '3600'; // beyond the retry's total seconds: not waited for
  const began = Date.now();
  await assert.rejects(client.send(values(5)),
    (error) => error instanceof ServiceError && error.status === 429 && /over its rate/.test(error.message));
  assert.ok(Date.now() - began < 1000);
  assert.equal((await client.send(values(5))).length, 5); // the unanswered batch, sent unchanged
  assert.equal(bits.read, read + perBatch); // randomized once
});

test('when other clients moved the collector on, the same reports go to its new position', async () => {
  const { service, client } = setUp(0);
  await client.send(values(5));
  service.moveOn(7);
  await client.send(values(5));
  assert.deepEqual(service.posts.map(([first]) => first), [0, 5, 12]);
  assert.equal(service.posts[1][1], service.posts[2][1]);
  assert.equal(client.position, 17);
});

test('an unreachable service is a ServiceError without a status, and the unanswered batch is kept', async () => {
  const { service, client, bits } = setUp(0);
  service.lose = 1;
  const fetch = service.fetch;
  client.fetch = async (url, init) => { // the POST is taken, its answer lost, then the service goes away
    const answer = fetch(url, init);
    if (init.method === 'POST') service.down = true;
    return answer;
  };
  await assert.rejects(client.send(values(8)),
    (error) => error instanceof ServiceError && error.status === null
      && /^POST \/collectors\/c\/reports\?first_position=0: no answer after 4 tries in \d+\.\d s \(TypeError: fetch failed \(ECONNREFUSED\)\)\.$/.test(error.message));
  assert.equal(bits.read, 3 * 8);
  client.fetch = fetch;
  service.down = false;
  const released = await client.send(values(8)); // the same document again: answered as the first time
  assert.equal(released.length, 8);
  assert.equal(bits.read, 3 * 8);
  assert.equal(service.position, 8);
  assert.equal(new Set(service.posts.map(([, body]) => body)).size, 1);
  assert.equal(client.discard(), 0);
});

test('discard gives an unanswered batch up: its values are randomized anew', async () => {
  const { service, client, bits } = setUp(0);
  service.down = true;
  await assert.rejects(client.send(values(4)), ServiceError);
  assert.equal(client.discard(), 0); // the parameters were never read: nothing was randomized
  service.down = false;
  service.lose = 4; // every try of the batch loses its answer
  await assert.rejects(client.send(values(4)), ServiceError);
  assert.equal(client.discard(), 1);
  await client.send(values(4)); // new reports, after the first ones: the values are now reported twice
  assert.equal(bits.read, 2 * 3 * 4);
  assert.deepEqual(service.posts.map(([first]) => first), [0, 0, 0, 0, 0, 4]);
  assert.equal(service.position, 8);
});

test('an answer that is not JSON is refused in one line', async () => {
  const client = new ToPLClient('http://service.test', 'c', {
    retry: QUICK, fetch: async () => new Response('<html>\n<body>a proxy page</body></html>'),
  });
  await assert.rejects(client.send([1]), (error) => /^Error: ToPL parameters are not valid JSON: /.test(String(error))
    && !error.message.includes('\n'));
  await assert.rejects(client.facts(), (error) => error instanceof ServiceError && error.status === null
    && error.message === 'GET /collectors/c: the answer is not JSON: "<html>\\n<body>a proxy page</body></html>".');
});
