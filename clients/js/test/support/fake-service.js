// A collector of `dpstream serve` in memory, behind a fetch function, with faults on request: answers lost on the
// way back (the batch was taken), 5xx answers, other clients moving the collector on.  It keeps dpstream's rules:
// a batch at the collector's position is taken; the same batch again at its position is answered as the first
// time; anything else at an earlier or later position is a 409.

export class FakeCollector {
  /**
   * @param {{before: string, after: string}} documents the parameters before and after theta is published
   * @param {number} hold the threshold reports taken before theta is published
   */
  constructor(documents, hold) {
    this.documents = documents;
    this.hold = hold;
    this.position = 0;
    this.ledger = new Map(); // first position -> [body, answer]
    this.posts = []; // [first_position, body] of every POST that reached the collector
    this.lose = 0; // the answers of the next `lose` POSTs are lost on the way back (after the collector's work)
    this.errors = 0; // the next `errors` requests are answered 503
    this.limited = 0; // the next `limited` POSTs are answered 429 (a contributor's rate), nothing done
    this.retryAfter = '0'; // their Retry-After
    this.down = false; // no answer at all
    this.fetch = this.fetch.bind(this);
  }

  id() {
    return JSON.parse(this.position >= this.hold ? this.documents.after : this.documents.before).id;
  }

  /** Another client's batch of `count` reports. */
  moveOn(count) {
    this.ledger.set(this.position, ['another client', '{"released":[]}']);
    this.position += count;
  }

  async fetch(url, init = {}) {
    const answer = await this.answer(url, init);
    if (init.method === 'POST' && this.lose > 0) {
      this.lose -= 1;
      throw new TypeError('fetch failed', { cause: { code: 'ECONNRESET' } });
    }
    return answer;
  }

  async answer(url, init) {
    if (this.down) throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } });
    if (this.errors > 0) {
      this.errors -= 1;
      return new Response('{"message":"busy"}', { status: 503 });
    }
    const { pathname, searchParams } = new URL(url);
    if ((init.method ?? 'GET') === 'GET') {
      if (pathname === '/collectors/c') return Response.json({ name: 'c', position: this.position, hold: this.hold });
      if (pathname === '/collectors/c/parameters') {
        return new Response(this.position >= this.hold ? this.documents.after : this.documents.before);
      }
      return new Response('{"message":"not found"}', { status: 404 });
    }
    if (this.limited > 0) {
      this.limited -= 1;
      return Response.json({ message: 'token t is over its rate.' }, { status: 429, headers: { 'Retry-After': this.retryAfter } });
    }
    const first = Number(searchParams.get('first_position'));
    const body = init.body;
    this.posts.push([first, body]);
    const document = JSON.parse(body);
    if (this.ledger.has(first)) {
      const [taken, answer] = this.ledger.get(first);
      if (taken === body) return new Response(answer);
      return Response.json({ message: `another batch is at position ${first}.` }, { status: 409 });
    }
    if (first !== this.position) {
      return Response.json({ message: `the collector is at position ${this.position}, not ${first}.` }, { status: 409 });
    }
    if (document.parameters !== this.id()) {
      return Response.json({ message: 'reports were made with other parameters.' }, { status: 409 });
    }
    const count = document.report.length;
    const released = [];
    for (let at = first; at < first + count; at += 1) {
      if (at >= this.hold) released.push({ position: at, time: 0, value: document.report[at - first] });
    }
    const answer = JSON.stringify({ released });
    this.ledger.set(first, [body, answer]);
    this.position += count;
    return new Response(answer);
  }
}
