/* The dashboard of dpstream serve.
 *
 * Lists the streams and collectors of this server and charts, for each, the moving average of its
 * released values, updated live from the server-sent events of /streams/NAME/events (or by polling
 * /streams/NAME/released for the sources beyond LIVE_AT_ONCE).  Plain JavaScript and SVG: no
 * library and nothing from another host, so it works offline.  It reads public endpoints only, and
 * every text that comes from the server is set as textContent, never parsed as HTML.
 *
 * The moving average is computed here from released values: post-processing, no privacy cost.  For a
 * periodic stream (its facts carry its public leaves) the page also draws the revised values: each closed
 * period's total (the sum of its released values) spread over its positions by the period's public shape,
 * the same post-processing as dpstream.release.revisions; the first release is drawn faint beside them.
 *
 * An aggregate (population sums, counts or means under unit-level privacy) is polled from
 * /aggregates/NAME/released: its chart draws one line per partition, the moving average of its released
 * buckets by the bucket's start; its card never shows the rows it consumed (data under its relation).
 */
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  /** Released values kept per source: the most recent KEEP to 1.5 KEEP. */
  const KEEP = 20000;
  /** Rows asked for per GET of released values (the server caps larger limits). */
  const PAGE = 10000;
  /** Event streams open at once: a browser opens about 6 connections per host, and the page needs some. */
  const LIVE_AT_ONCE = 4;
  /** Milliseconds between two refreshes of the facts (and polls of the sources without events). */
  const REFRESH_MS = 2000;
  /** The chart's coordinates (the SVG scales to the card's width). */
  const WIDTH = 640;
  const HEIGHT = 210;
  const PAD = { left: 58, right: 14, top: 10, bottom: 26 };
  /** The label of a source whose released values are polled rather than streamed. */
  const POLLED = `updated every ${REFRESH_MS / 1000} s`;
  /** Round steps of a time axis, in seconds. */
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const METHODS = { tops: "ToPS", bt: "binary tree", pak: "PAK", collector: "ToPL", "bt-zcdp": "binary tree (zCDP)",
    "sqrt-zcdp": "square-root factorization (zCDP)", "tops-zcdp": "ToPS (zCDP)",
    "banded-zcdp": "banded square-root factorization (zCDP)" };
  /** Partitions drawn per aggregate, each in its own colour (the caption names them; dashboard.css draws them). */
  const COLOURS = ["red", "blue", "green", "orange", "purple", "grey"];
  const PARTITION_LINES = COLOURS.length;

  /** "stream/NAME" or "collector/NAME" -> what the page knows of that source. */
  const sources = new Map();
  let liveCount = 0;
  let windowSize = 100;
  /** What the x axis shows: "position" in the stream or "time" of release (or as sent with the values). */
  let axis = "position";
  let drawScheduled = false;

  // -- small helpers ----------------------------------------------------------------------------

  function element(tag, attributes = {}, text = undefined, namespace = null) {
    const node = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const svg = (tag, attributes = {}, text = undefined) => element(tag, attributes, text, SVG);

  function number(x, digits = 4) {
    if (x === null || x === undefined) return "--";
    if (Number.isInteger(x)) return x.toLocaleString("en-US");
    if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(digits - 1).replace(/\.?0+e/, "e");
    return x.toLocaleString("en-US", { maximumSignificantDigits: digits });
  }

  function endpoint(source) {
    return `${source.kind}s/${encodeURIComponent(source.name)}`;
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!response.ok) throw new Error(`GET ${url} answered ${response.status}`);
    return response.json();
  }

  /** The step of 1, 2 or 5 times a power of ten nearest to span / count (by ratio). */
  function niceStep(span, count) {
    const raw = span / count;
    const power = 10 ** Math.floor(Math.log10(raw));
    const distance = (m) => Math.abs(Math.log((m * power) / raw));
    return [1, 2, 5, 10].reduce((best, m) => (distance(m) < distance(best) ? m : best)) * power;
  }

  function ticks(low, high, count) {
    const step = niceStep(high - low, count);
    const out = [];
    for (let t = Math.ceil(low / step) * step; t <= high + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
    return out;
  }

  /** Ticks of a time axis (seconds since 1970) at round steps of clock time, and their labels. */
  function timeTicks(low, high, count) {
    const span = high - low;
    if (span < 1) return { values: [low], label: (t) => clock(t, 1, 0) };
    const raw = span / count;
    const step = TIME_STEPS.find((candidate) => candidate >= raw) ?? Math.ceil(raw / 86400) * 86400;
    const values = [];
    for (let t = Math.ceil(low / step) * step; t <= high; t += step) values.push(t);
    return { values, label: (t) => clock(t, step, span) };
  }

  function clock(t, step, span) {
    const date = new Date(t * 1000);
    const time = date.toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit",
      second: step < 60 ? "2-digit" : undefined });
    return span > 86400 ? `${date.getDate()}/${date.getMonth() + 1} ${time}` : time;
  }

  // -- the words of the guarantee -----------------------------------------------------------------

  function inWords(kind, budget) {
    const zcdp = budget.rho === undefined || budget.rho === null ? "" : ` This (ε, δ) is implied by ρ = ` +
      `${number(budget.rho)} zero-concentrated DP (zCDP): ρ's add up when releases compose, the ε's they imply do not.`;
    return inPureWords(kind, budget) + zcdp;
  }

  function inPureWords(kind, budget) {
    const eps = budget.epsilon;
    const factor = `e^${number(eps)} ≈ ${number(Math.exp(eps), 3)}`;
    const delta = budget.delta > 0 ? ` (plus at most δ = ${number(budget.delta, 3)} in absolute probability)` : "";
    if (kind === "collector") {
      return `Local differential privacy, ε = ${number(eps)}${budget.delta > 0 ? `, δ = ${number(budget.delta, 3)}` : ""}: ` +
        "every client randomizes its own value before sending it, so this server never sees a raw value; " +
        `whatever a client's value, its report is at most ${factor} times as likely as it would be under any other ` +
        `value${delta}. θ and the released values are computed from the reports alone (post-processing).`;
    }
    if (kind === "aggregate") {
      return `Unit-level differential privacy, ε = ${number(eps)}${budget.delta > 0 ? `, δ = ${number(budget.delta, 3)}` : ""} ` +
        "per unit and window: adding or removing all of one unit's rows in one window (within the bounds the " +
        `release enforces) changes the probability of anything it publishes by at most a factor ${factor}${delta}; ` +
        "over several windows the guarantees add up, as the line above says. The averages drawn here are " +
        "post-processing and cost nothing more.";
    }
    return `Event-level differential privacy, ε = ${number(eps)}${budget.delta > 0 ? `, δ = ${number(budget.delta, 3)}` : ""}: ` +
      "replacing any single value of this stream changes the probability of anything it publishes, " +
      `over its whole life, by at most a factor ${factor}${delta}. The budget covers every released value; ` +
      "the averages drawn here are post-processing and cost nothing more.";
  }

  // What the budget guarantees, in words that cannot be read as budget left or exhausted (the server writes
  // the same words into the page it serves: guarantee_in_words in dashboard.py).
  function guaranteeInWords(kind, facts) {
    if (kind === "aggregate") return facts.guarantee;
    const budget = facts.budget;
    let level = `ε = ${number(budget.epsilon)}`;
    if (budget.delta > 0) level += `, δ = ${number(budget.delta, 3)}`;
    const relation = /neighbours: ([^:;]+)/.exec(facts.privacy);
    const where = relation ? relation[1] : "event level";
    if (budget.rho !== undefined && budget.rho !== null) {  // zCDP: rho is what it spends; (ε, δ) is implied
      const rho = `ρ = ${number(budget.rho)}`;
      return `each value is protected at ${rho} (zCDP), which implies (ε, δ) = (${number(budget.epsilon)}, ` +
        `${number(budget.delta, 3)}) (${where}); the stream's guarantee is ${rho} however long it runs`;
    }
    if (kind === "collector") {
      return `each client's report is protected at ${level} (local, randomized by the client); ` +
        `the collector's guarantee is ${level} however many reports arrive`;
    }
    return `each value is protected at ${level} (${where}); the stream's guarantee is ${level} however long it runs`;
  }

  // -- one card per source ----------------------------------------------------------------------

  function makeCard(kind, name) {
    const card = element("section", { class: "source", "data-kind": kind, "data-name": name });
    const title = element("h3");
    const method = element("span", { class: "method" });
    const live = element("span", { class: "live" }, "loading");
    title.append(element("span", { class: "name" }, name), method, live);
    const facts = element("dl", { class: "facts" });
    const fact = {};
    const labels = kind === "aggregate" ? [
      ["windows", "windows released"],
      ["released", "values released"],
      ["partitions", "partitions released"],
      ["guarantee", "guarantee"],
    ] : [
      ["threshold", "θ (threshold)"],
      ["position", kind === "collector" ? "reports received" : "values received"],
      ["released", "values released"],
      ["guarantee", "guarantee"],
    ];
    for (const [key, label] of labels) {
      facts.append(element("dt", {}, label));
      fact[key] = facts.appendChild(element("dd", { "data-fact": key }, "--"));
    }
    const chart = svg("svg", {
      class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "data-count": 0,
      "aria-label": `moving average of the values released by ${name}`,
    });
    const caption = element("p", { class: "caption" });
    const words = element("p", { class: "privacy" });
    const details = element("details");
    const statement = element("p", { class: "statement" });
    details.append(element("summary", {}, "the exact guarantee"), statement);
    card.append(title, facts, chart, caption, words, details);
    return { card, method, live, fact, chart, caption, words, statement };
  }

  function showFacts(source) {
    const { facts, view } = source;
    if (source.kind === "aggregate") {
      view.method.textContent = facts.parameters.statistic || "sum";
      view.fact.windows.textContent = number(facts.windows);
      view.fact.partitions.textContent = (facts.partitions || []).filter((name) => name !== "").join(", ") || "--";
    } else {
      view.method.textContent = METHODS[source.kind === "collector" ? "collector" : facts.method] || facts.method;
      const hold = facts.parameters.hold ?? facts.hold;
      view.fact.threshold.textContent = facts.threshold === null || facts.threshold === undefined
        ? (hold ? `chosen after ${number(hold)} values` : "--") : number(facts.threshold, 6);
      view.fact.position.textContent = number(facts.position);
    }
    view.fact.released.textContent = number(facts.released);
    view.fact.guarantee.textContent = guaranteeInWords(source.kind, facts);
    let words = inWords(source.kind, facts.budget);
    if (facts.seeded) {
      words += ` This ${source.kind === "aggregate" ? "aggregate" : "stream"} was created with a seed: for tests only, ` +
        "its noise can be recomputed.";
    }
    view.words.textContent = words;
    view.statement.textContent = facts.privacy;
  }

  function setLive(source, text, on) {
    source.view.live.textContent = text;
    source.view.live.classList.toggle("on", on);
  }

  // -- released values --------------------------------------------------------------------------

  function add(source, rows) {
    let added = false;
    for (const row of rows) {
      if (row.position <= source.last) continue;
      const time = row.time ?? Date.parse(row.bucket) / 1000; // an aggregate's: the bucket's start
      source.positions.push(row.position);
      source.values.push(row.value);
      source.times.push(time);
      source.partitions.push(row.partition ?? "");
      source.lastTime = time;
      source.last = row.position;
      added = true;
    }
    if (!added) return;
    const extra = source.values.length - KEEP;
    if (extra > KEEP / 2) { // trimmed in steps, so that a fast stream costs O(1) per value
      source.positions.splice(0, extra);
      source.values.splice(0, extra);
      source.times.splice(0, extra);
      source.partitions.splice(0, extra);
    }
    source.dirty = true;
    scheduleDraw();
  }

  /** Every released value after source.last, a page at a time, until the server answers an empty list. */
  async function catchUp(source) {
    for (;;) {
      const page = await getJSON(`${endpoint(source)}/released?after=${source.last}&limit=${PAGE}`);
      if (page.released.length === 0) return;
      add(source, page.released);
    }
  }

  function listen(source) {
    const events = new EventSource(`${endpoint(source)}/events?after=${source.last}`);
    events.addEventListener("released", (event) => add(source, [JSON.parse(event.data)]));
    events.addEventListener("open", () => setLive(source, "live", true));
    events.addEventListener("error", () => setLive(source, "reconnecting", false));
    source.events = events;
  }

  async function start(source) {
    source.busy = true;
    source.started = true;
    try {
      if (source.kind !== "aggregate") source.last = Math.max(source.last, source.facts.position - 1 - KEEP);
      await catchUp(source);
      source.dirty = true;
      scheduleDraw();
      if (source.kind !== "aggregate" && liveCount < LIVE_AT_ONCE) { // aggregates have no events: polled
        liveCount += 1;
        listen(source);
      } else {
        setLive(source, POLLED, true);
      }
    } finally {
      source.busy = false;
    }
  }

  async function poll(source) {
    if (source.events || source.busy) return;
    source.busy = true;
    try {
      await catchUp(source);
      setLive(source, POLLED, true);
    } finally {
      source.busy = false;
    }
  }

  // -- the chart --------------------------------------------------------------------------------

  function scheduleDraw() {
    if (drawScheduled) return;
    drawScheduled = true;
    requestAnimationFrame(() => {
      drawScheduled = false;
      for (const source of sources.values()) {
        if (source.dirty) {
          source.dirty = false;
          draw(source);
        }
      }
    });
  }

  /**
   * The mean of every window of w consecutive values (one pass, running sum): n - w + 1 means, the
   * first ending at index w - 1; with fewer than w values, the mean of all of them.
   */
  function movingAverage(values, w) {
    const width = Math.min(w, values.length);
    const out = new Float64Array(values.length - width + 1);
    let sum = 0;
    for (let i = 0; i < values.length; i += 1) {
      sum += values[i];
      if (i >= width) sum -= values[i - width];
      if (i >= width - 1) out[i - width + 1] = sum / width;
    }
    return out;
  }

  /**
   * The revised values of the kept released values, or null for a stream without leaves: each closed leaf
   * whose values are all kept is its total spread by the shape (flat without one); the rest as released.
   */
  function revise(source) {
    const leaves = source.facts.leaves;
    if (!leaves || leaves.length < 2) return null;
    const { positions, values } = source;
    const out = Float64Array.from(values);
    const offsetAt = (position) => {
      const clock = position - leaves.first_position + leaves.phase;
      return (leaves.chunk ? clock % leaves.chunk : clock) % leaves.length;
    };
    const weight = (i) => (leaves.shape ? leaves.shape[offsetAt(positions[i])] : 1);
    let start = 0;
    for (let i = 0; i < values.length; i += 1) {
      const closes = offsetAt(positions[i] + 1) === 0;
      if (i + 1 < values.length && !closes) continue;
      const whole = offsetAt(positions[start]) === 0 || positions[start] === leaves.first_position;
      if (closes && whole) {
        let total = 0;
        let mass = 0;
        for (let j = start; j <= i; j += 1) { total += values[j]; mass += weight(j); }
        for (let j = start; j <= i; j += 1) out[j] = mass > 0 ? (total * weight(j)) / mass : total / (i - start + 1);
      }
      start = i + 1;
    }
    return out;
  }

  /**
   * The grid and tick labels of a chart that holds the values ys along xs (positions, or times when byTime);
   * its scales px and py.
   */
  function frame(chart, ys, xs, byTime) {
    const left = PAD.left;
    const right = WIDTH - PAD.right;
    const top = PAD.top;
    const bottom = HEIGHT - PAD.bottom;
    let low = Math.min(...ys);
    let high = Math.max(...ys);
    if (high - low < 1e-9 * Math.max(1, Math.abs(high))) {
      low -= 1;
      high += 1;
    }
    const margin = (high - low) * 0.06;
    low -= margin;
    high += margin;
    const start = Math.min(...xs);
    const end = Math.max(...xs);
    const xSpan = Math.max(end - start, byTime ? 1e-3 : 1);
    const px = (x) => left + ((x - start) / xSpan) * (right - left);
    const py = (y) => bottom - ((y - low) / (high - low)) * (bottom - top);
    for (const t of ticks(low, high, 4)) {
      chart.append(svg("line", { class: "grid", x1: left, y1: py(t), x2: right, y2: py(t) }),
        svg("text", { class: "label y", x: left - 6, y: py(t) + 4, "text-anchor": "end" }, number(t, 4)));
    }
    const xTicks = byTime ? timeTicks(start, end, 5) : { values: end > start ? ticks(start, end, 5) : [start],
      label: number };
    for (const t of xTicks.values) {
      chart.append(svg("text", { class: "label x", x: px(t), y: HEIGHT - 8, "text-anchor": "middle" }, xTicks.label(t)));
    }
    return { px, py };
  }

  /** The points attribute of a polyline through (xs[b], values[b]); a single point drawn as a short dash. */
  function polyline(px, py, xs, values) {
    let points = "";
    for (let b = 0; b < xs.length; b += 1) points += `${px(xs[b]).toFixed(1)},${py(values[b]).toFixed(1)} `;
    if (xs.length === 1) points += `${(px(xs[0]) + 2).toFixed(1)},${py(values[0]).toFixed(1)}`;
    return points.trim();
  }

  /** Empty axes; with no value, a line that says why. */
  function clear(chart, why) {
    chart.replaceChildren();
    const [left, right, top, bottom] = [PAD.left, WIDTH - PAD.right, PAD.top, HEIGHT - PAD.bottom];
    chart.append(svg("line", { class: "axis", x1: left, y1: bottom, x2: right, y2: bottom }),
      svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: bottom }));
    if (why) {
      chart.append(svg("text", { class: "nodata", x: (left + right) / 2, y: (top + bottom) / 2, "text-anchor": "middle" },
        why));
    }
  }

  /**
   * An aggregate's chart: for each partition (the first PARTITION_LINES of its public list that were released),
   * the moving average of its released buckets, by the start of the bucket that ends each window.
   */
  function drawAggregate(source) {
    const { chart, caption } = source.view;
    const n = source.values.length;
    chart.setAttribute("data-count", n);
    chart.setAttribute("data-last", n ? source.last : "");
    clear(chart, n ? "" : "no bucket released yet (a bucket is released when it closes)");
    if (n === 0) {
      caption.textContent = "";
      return;
    }
    const seen = new Set(source.partitions);
    const names = (source.facts.partitions || [""]).filter((name) => seen.has(name)).slice(0, PARTITION_LINES);
    const room = 2 * (WIDTH - PAD.left - PAD.right);
    const series = names.map((name) => {
      const values = [];
      const times = [];
      source.partitions.forEach((partition, i) => {
        if (partition === name) { values.push(source.values[i]); times.push(source.times[i]); }
      });
      const average = movingAverage(values, windowSize);
      const step = Math.max(1, Math.ceil(average.length / room)); // at most about one point per half pixel
      const ys = [];
      const xs = [];
      for (let k = 0; k < average.length; k += step) { ys.push(average[k]); xs.push(times[k + values.length - average.length]); }
      return { name, ys, xs, last: average[average.length - 1] };
    });
    const { px, py } = frame(chart, series.flatMap((line) => line.ys), series.flatMap((line) => line.xs), true);
    series.forEach((line, i) => {
      chart.append(svg("polyline", { class: `series p${i}`, "data-partition": line.name,
        "data-last-average": line.last, points: polyline(px, py, line.xs, line.ys) }));
    });
    const when = new Date(source.lastTime * 1000).toISOString().replace(".000Z", "Z");
    const over = windowSize === 1 ? "each released bucket" : `moving average over ${number(windowSize)} released buckets`;
    const lines = names.length > 1 || names[0] !== ""
      ? ` One line per partition: ${series.map((line, i) => `${line.name} (${COLOURS[i]})`).join(", ")}` +
        `${seen.size > names.length ? ` (the first ${names.length} of ${seen.size})` : ""}.` : "";
    caption.textContent = `${over[0].toUpperCase()}${over.slice(1)}, by the start of its bucket; ` +
      `${number(n)} released values; the last bucket ${when}.${lines}`;
  }

  function draw(source) {
    if (source.kind === "aggregate") {
      drawAggregate(source);
      return;
    }
    const { chart, caption } = source.view;
    const n = source.values.length;
    chart.setAttribute("data-count", n);
    chart.setAttribute("data-last", n ? source.last : "");
    chart.setAttribute("data-last-average", "");
    const hold = source.facts.parameters.hold ?? source.facts.hold;
    const why = source.facts.threshold === null && hold ? ` (the first ${number(hold)} choose θ)` : "";
    clear(chart, n ? "" : `no released value yet${why}`);
    if (n === 0) {
      caption.textContent = "";
      return;
    }
    const average = movingAverage(source.values, windowSize);
    const offset = n - average.length; // average[k] ends at source.positions[k + offset]
    const m = average.length;
    chart.setAttribute("data-last-average", average[m - 1]);
    const revised = revise(source);
    const revisedAverage = revised ? movingAverage(revised, windowSize) : null;
    chart.setAttribute("data-last-revised", revised ? revisedAverage[m - 1] : "");
    const along = axis === "time" ? source.times : source.positions;
    const buckets = Math.min(m, 2 * (WIDTH - PAD.left - PAD.right));
    const xs = new Float64Array(buckets);
    const ys = new Float64Array(buckets);
    const rs = new Float64Array(revised ? buckets : 0);
    for (let b = 0; b < buckets; b += 1) {
      const from = Math.floor((b * m) / buckets);
      const to = Math.max(from + 1, Math.floor(((b + 1) * m) / buckets));
      let sum = 0;
      let revisedSum = 0;
      for (let i = from; i < to; i += 1) {
        sum += average[i];
        if (revised) revisedSum += revisedAverage[i];
      }
      ys[b] = sum / (to - from);
      if (revised) rs[b] = revisedSum / (to - from);
      xs[b] = (along[from + offset] + along[to - 1 + offset]) / 2;
    }
    const first = source.positions[0];
    const last = source.positions[n - 1];
    // The x axis runs from where the first window ends to where the last one does.
    const { px, py } = frame(chart, [...ys, ...rs], xs, axis === "time");
    const line = (values) => polyline(px, py, xs, values);
    chart.append(svg("polyline", { class: revised ? "series faint" : "series", points: line(ys) }));
    if (revised) chart.append(svg("polyline", { class: "revised", points: line(rs) }));
    const total = Math.max(source.facts.released, n);
    const span = total > n ? `the last ${number(n)} of ${number(total)} released values` : `${number(n)} released values`;
    const when = new Date(source.lastTime * 1000).toLocaleString("en-GB", { hour12: false });
    const over = n < windowSize ? `the mean of all ${number(n)} released values so far (fewer than ${number(windowSize)})`
      : `moving average over ${number(windowSize)} released values, by the ${axis} of the value that ends each window`;
    const both = revised ? " Blue: the revised values (each closed period's released total spread by its public " +
      "shape: post-processing, they change when a period closes); faint: the first release, as published." : "";
    caption.textContent = `${over[0].toUpperCase()}${over.slice(1)}; ${span} ` +
      `(positions ${number(first)} to ${number(last)}); last release ${when}.${both}`;
  }

  // -- the lists --------------------------------------------------------------------------------

  function update(kind, list, container) {
    container.querySelectorAll("[data-server]").forEach((node) => node.remove()); // the cards served: now live
    if (list.length === 0) {
      const how = `POST /${kind}s`;
      container.replaceChildren(element("p", { class: "empty" }, `None yet: create one with ${how} (needs the token).`));
      return;
    }
    container.querySelector(".empty")?.remove();
    for (const facts of list) {
      const key = `${kind}/${facts.name}`;
      let source = sources.get(key);
      if (!source) {
        const view = makeCard(kind, facts.name);
        source = { kind, name: facts.name, view, facts, positions: [], values: [], times: [], last: -1, lastTime: 0,
          partitions: [], events: null, busy: false, started: false, dirty: true };
        sources.set(key, source);
        container.append(view.card);
        showFacts(source);
      } else {
        const thresholdChanged = source.facts.threshold !== facts.threshold;
        source.facts = facts;
        showFacts(source);
        if (thresholdChanged && source.values.length === 0) source.dirty = true;
      }
      if (!source.started) {
        start(source).catch((error) => {
          source.started = false; // tried again at the next refresh
          setLive(source, `not loaded (${error.message}); trying again`, false);
        });
      } else {
        poll(source).catch(() => setLive(source, "cannot reach the server; trying again", false));
      }
    }
    scheduleDraw();
  }

  async function refresh() {
    const status = document.getElementById("status");
    try {
      const [streams, collectors, aggregates] = await Promise.all([getJSON("streams"), getJSON("collectors"),
        getJSON("aggregates")]);
      update("stream", streams.streams, document.getElementById("streams"));
      update("collector", collectors.collectors, document.getElementById("collectors"));
      update("aggregate", aggregates.aggregates, document.getElementById("aggregates"));
      status.textContent = `updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`;
      status.classList.remove("error");
    } catch (error) {
      status.textContent = `cannot reach the server (${error.message}); trying again`;
      status.classList.add("error");
    }
    setTimeout(refresh, REFRESH_MS);
  }

  function redrawAll() {
    windowSize = Number(document.getElementById("window").value);
    axis = document.getElementById("axis").value;
    for (const source of sources.values()) source.dirty = true;
    scheduleDraw();
  }

  document.getElementById("window").addEventListener("change", redrawAll);
  document.getElementById("axis").addEventListener("change", redrawAll);
  redrawAll();
  refresh();
})();
