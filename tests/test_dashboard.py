"""The dashboard in a real browser: Debian's headless Chromium, driven by Playwright, against ``dpstream serve``.

One server (a subprocess on a free port of 127.0.0.1, SQLite in a temporary directory) and one
browser serve the whole module; each test opens its own page and fails on any console error.
Chromium comes from Debian's ``chromium`` package (``make test`` installs it): Playwright's own
browser downloads are never used.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from dpstream.client import Client, ToPLClient
from dpstream.release.revisions import Leaves, closed_count, revise
from service_helpers import TOKEN, ServeProcess

CHROMIUM = Path("/usr/bin/chromium")
#: How long a page may take to show what the server holds (milliseconds): the page polls every 2 s.
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    database = tmp_path_factory.mktemp("dashboard") / "dashboard.db"
    process = ServeProcess(f"sqlite:///{database}").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Iterator[Client]:
    with Client(server.url, TOKEN) as api:
        yield api


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test installs it).")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


class Visit:
    """A page of the dashboard, with every console error, page error and request it made."""

    def __init__(self, page: Page, url: str) -> None:
        self.page, self.url = page, url
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("request", lambda request: self.requests.append(request.url))
        page.goto(url + "/")

    def card(self, kind: str, name: str) -> str:
        return f'section.source[data-kind="{kind}"][data-name="{name}"]'

    def wait_for_count(self, kind: str, name: str, count: int) -> None:
        """Wait until the card's chart holds ``count`` released values."""
        self.page.wait_for_selector(f'{self.card(kind, name)} svg.chart[data-count="{count}"]', timeout=WAIT_MS)

    def wait_for_fact(self, kind: str, name: str, fact: str, text: str) -> None:
        """Wait until the card shows ``text`` as ``fact`` (the facts are refreshed every 2 s)."""
        self.page.wait_for_selector(f'{self.card(kind, name)} dd[data-fact="{fact}"]:text-is("{text}")',
                                    timeout=WAIT_MS)

    def fact(self, kind: str, name: str, fact: str) -> str:
        return self.page.text_content(f'{self.card(kind, name)} dd[data-fact="{fact}"]')


@pytest.fixture
def visit(browser: Browser, server: ServeProcess) -> Iterator[Visit]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Visit(context.new_page(), server.url)
    finally:
        context.close()


def _values(seed: int, size: int, high: float) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, high, size).round(2)


def test_a_fed_stream_is_charted_and_follows_new_values_live(visit: Visit, client: Client) -> None:
    hold = 200
    client.create_stream("meters", epsilon=1.0, upper_bound=100.0, hold=hold, seed=11)
    client.send("meters", _values(1, 1000, 60.0))
    facts = client.stream("meters")
    assert facts["released"] == 1000 - hold
    visit.page.reload()
    visit.wait_for_count("stream", "meters", facts["released"])
    points = visit.page.get_attribute(f'{visit.card("stream", "meters")} polyline.series', "points").split()
    window = int(visit.page.input_value("#window"))
    assert len(points) == facts["released"] - window + 1  # fewer windows than pixels: one point per window
    assert visit.fact("stream", "meters", "released") == "800"
    assert visit.fact("stream", "meters", "threshold") == f"{facts['threshold']:g}"
    assert visit.fact("stream", "meters", "guarantee") == (
        "each value is protected at ε = 1 (event level); the stream's guarantee is ε = 1 however long it runs")
    assert visit.page.locator("[data-server]").count() == 0  # the cards served are replaced by live ones
    words = visit.page.text_content(f'{visit.card("stream", "meters")} p.privacy')
    assert words.startswith("Event-level differential privacy, ε = 1:") and "for tests only" in words
    assert visit.page.text_content(f'{visit.card("stream", "meters")} p.statement') == facts["privacy"]
    visit.page.wait_for_selector(f'{visit.card("stream", "meters")} .live.on', timeout=WAIT_MS)

    released = [row["value"] for row in client.all_released("meters")]
    _assert_last_average(visit, "stream", "meters", released, window, upper_bound=100.0)

    client.send("meters", _values(2, 300, 60.0))  # arrives by the events stream
    visit.wait_for_count("stream", "meters", facts["released"] + 300)
    last = visit.page.get_attribute(f'{visit.card("stream", "meters")} svg.chart', "data-last")
    assert int(last) == 1299
    assert visit.errors == []


def _assert_last_average(visit: Visit, kind: str, name: str, released: list[float], window: int, *,
                         upper_bound: float) -> None:
    """The chart's last point is the mean of the last ``window`` released values.

    The page keeps a running sum over up to 1.5 x 20,000 values: each addition or subtraction
    rounds by at most 2^-53 of a partial sum bounded by window * B, hence the tolerance."""
    shown = float(visit.page.get_attribute(f"{visit.card(kind, name)} svg.chart", "data-last-average"))
    expected = float(np.mean(released[-window:]))
    assert shown == pytest.approx(expected, rel=0, abs=2 * len(released) * 2**-53 * upper_bound)


def test_streams_and_collectors_appear_without_reloading(visit: Visit, client: Client, server: ServeProcess) -> None:
    visit.page.wait_for_selector("#status:has-text('updated')", timeout=WAIT_MS)
    client.create_stream("counts", method="bt", epsilon=0.5, upper_bound=10.0, seed=3)
    client.send("counts", _values(3, 250, 10.0))
    client.create_collector("app", epsilon=2.0, upper_bound=100.0, hold=100)
    visit.wait_for_count("stream", "counts", 250)
    assert visit.page.text_content(f'{visit.card("stream", "counts")} .method') == "binary tree"
    empty = visit.page.wait_for_selector(f'{visit.card("collector", "app")} svg.chart text.nodata', timeout=WAIT_MS)
    assert empty.text_content() == "no released value yet (the first 100 choose θ)"
    assert visit.fact("collector", "app", "threshold") == "chosen after 100 values"

    reports = ToPLClient(server.url, "app", TOKEN, bits=5)
    try:
        released = reports.send(_values(4, 400, 50.0))
    finally:
        reports.close()
    assert len(released) == 300
    visit.wait_for_count("collector", "app", 300)
    visit.wait_for_fact("collector", "app", "position", "400")
    assert visit.fact("collector", "app", "threshold") == f"{client.collector('app')['threshold']:g}"
    words = visit.page.text_content(f'{visit.card("collector", "app")} p.privacy')
    assert words.startswith("Local differential privacy, ε = 2:")
    assert visit.errors == []


def test_sources_beyond_the_open_event_streams_are_polled(visit: Visit, client: Client) -> None:
    names = [f"many-{i}" for i in range(5)]
    for i, name in enumerate(names):
        client.create_stream(name, method="bt", epsilon=1.0, upper_bound=1.0, seed=i)
        client.send(name, _values(i, 10 + i, 1.0))
    visit.page.reload()
    for i, name in enumerate(names):
        visit.wait_for_count("stream", name, 10 + i)
    visit.page.wait_for_function("() => [...document.querySelectorAll('.live')]"
                                 ".some(label => label.textContent.startsWith('updated every'))", timeout=WAIT_MS)
    polled = [name for name in names
              if visit.page.text_content(f'{visit.card("stream", name)} .live').startswith("updated every")]
    assert polled  # more sources than event streams the page opens: the last ones are polled
    client.send(polled[-1], _values(99, 5, 1.0))
    visit.wait_for_count("stream", polled[-1], 10 + names.index(polled[-1]) + 5)
    assert visit.errors == []


def test_the_page_asks_only_its_own_server_and_shows_no_secret(visit: Visit, client: Client,
                                                               server: ServeProcess) -> None:
    client.create_stream("quiet", epsilon=1.0, upper_bound=5.0, hold=50, seed=4)
    client.send("quiet", _values(5, 80, 5.0))
    visit.wait_for_count("stream", "quiet", 30)
    visit.page.select_option("#window", "10")
    visit.page.wait_for_selector(f'{visit.card("stream", "quiet")} p.caption:has-text("over 10 released")')
    assert visit.requests and all(url.startswith(server.url + "/") for url in visit.requests)
    page = httpx.get(server.url + "/")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("dashboard.js", "dashboard.css", "favicon.svg"):
        assert httpx.get(f"{server.url}/static/{asset}").status_code == 200
    text = visit.page.content()
    assert "pickle" not in text and '"state"' not in text
    assert visit.errors == []


def test_a_long_stream_shows_its_most_recent_values(visit: Visit, client: Client) -> None:
    client.create_stream("long", method="bt", epsilon=1.0, upper_bound=10.0, seed=6)
    client.send("long", _values(7, 25_000, 10.0), times=1.7e9 + np.arange(25_000.0))  # one value a second
    visit.page.reload()
    visit.wait_for_count("stream", "long", 20_000)  # the page keeps the last 20,000 released values at load
    caption = visit.page.text_content(f'{visit.card("stream", "long")} p.caption')
    assert "the last 20,000 of 25,000 released values (positions 5,000 to 24,999)" in caption
    visit.page.select_option("#window", "1000")
    visit.page.wait_for_selector(f'{visit.card("stream", "long")} p.caption:has-text("over 1,000 released")')
    released = [row["value"] for row in client.all_released("long", after=4_999)]
    _assert_last_average(visit, "stream", "long", released, 1000, upper_bound=10.0)
    visit.page.select_option("#axis", "time")  # 20,000 s: ticks at round hours of the clock
    visit.page.wait_for_selector(f'{visit.card("stream", "long")} p.caption:has-text("by the time")')
    labels = visit.page.eval_on_selector_all(f'{visit.card("stream", "long")} text.label.x',
                                             "labels => labels.map(label => label.textContent)")
    assert len(labels) >= 3 and all(re.fullmatch(r"[0-2][0-9]:[0-5][0-9]", label) for label in labels), labels
    assert visit.errors == []


def test_a_periodic_stream_shows_its_revised_values_beside_the_first_release(visit: Visit, client: Client) -> None:
    """The page revises the closed periods it holds as dpstream.release.revisions does; the first release is faint."""
    period, hold = 48, 100
    client.create_stream("days", epsilon=1.0, upper_bound=10.0, hold=hold, period=period, seed=8)
    client.send("days", _values(8, 1000, 8.0))
    facts = client.stream("days")
    assert facts["leaves"]["length"] == period and facts["leaves"]["first_position"] == hold
    visit.page.reload()
    visit.wait_for_count("stream", "days", facts["released"])
    card = visit.card("stream", "days")
    assert visit.page.get_attribute(f"{card} polyline.series", "class") == "series faint"
    assert visit.page.locator(f"{card} polyline.revised").count() == 1
    assert "Blue: the revised values" in visit.page.text_content(f"{card} p.caption")
    layout = facts["leaves"]
    leaves = Leaves(length=layout["length"], phase=layout["phase"], chunk=layout["chunk"],
                    shape=None if layout["shape"] is None else np.array(layout["shape"]))
    revised = revise([row["value"] for row in client.all_released("days")], leaves)
    window = int(visit.page.input_value("#window"))
    shown = float(visit.page.get_attribute(f"{card} svg.chart", "data-last-revised"))
    assert shown == pytest.approx(float(np.mean(revised[-window:])), rel=1e-9, abs=1e-9)
    assert closed_count(revised.size, leaves) < revised.size  # the open period is drawn as released
    assert visit.errors == []


def test_the_page_shows_each_source_and_its_guarantee_before_its_script_runs(browser: Browser, client: Client,
                                                                           server: ServeProcess,
                                                                           tmp_path: Path) -> None:
    client.create_stream("plain", epsilon=0.5, upper_bound=10.0, hold=50, seed=9)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(server.url + "/")
        card = 'section.source[data-kind="stream"][data-name="plain"]'
        assert page.text_content(f"{card} .name") == "plain"
        assert page.text_content(f'{card} dd[data-fact="guarantee"]') == (
            "each value is protected at ε = 0.5 (event level); the stream's guarantee is ε = 0.5 however long it runs")
        assert page.text_content(f"{card} p.statement") == client.stream("plain")["privacy"]
        page.screenshot(path=str(tmp_path / "without-script.png"), full_page=True)
    finally:
        context.close()


def test_an_aggregate_is_charted_one_line_per_partition_with_its_unit_level_guarantee(visit: Visit,
                                                                                      client: Client) -> None:
    client.create_aggregate("feeders", epsilon=1.0, bucket="1h", unit_window="1d", unit_bound=30.0, upper_bound=5.0,
                            clip=True, partitions=["north", "south"], unit_max_partitions=1, unit="meter", seed=12)
    rng = np.random.default_rng(12)
    seconds = np.sort(1_704_067_200 + rng.integers(0, 2 * 86400, 2000))
    units = rng.integers(0, 30, 2000)
    client.send_rows("feeders", seconds.tolist(), [f"m{u}" for u in units], rng.exponential(1.0, 2000).round(3),
                     ["north" if u < 15 else "south" for u in units], flush=True)
    facts = client.aggregate("feeders")
    released = list(client.all_released("feeders", kind="aggregates"))
    assert facts["released"] == len(released) == 2 * 48
    visit.page.reload()
    visit.wait_for_count("aggregate", "feeders", len(released))
    card = visit.card("aggregate", "feeders")
    assert visit.fact("aggregate", "feeders", "guarantee") == facts["guarantee"] == (
        "each meter's readings in each UTC day: ε = 1; over 2 days: ε = 2 by composition")
    assert visit.fact("aggregate", "feeders", "partitions") == "north, south"
    assert visit.page.locator(f'{card} dd[data-fact="position"]').count() == 0  # the rows consumed: data
    words = visit.page.text_content(f"{card} p.privacy")
    assert words.startswith("Unit-level differential privacy, ε = 1 per unit and window:")
    window = int(visit.page.input_value("#window"))  # 100 > the 48 buckets of each partition: the mean of all
    for name in ("north", "south"):
        line = f'{card} polyline.series[data-partition="{name}"]'
        values = [row["value"] for row in released if row["partition"] == name]
        shown = float(visit.page.get_attribute(line, "data-last-average"))
        assert shown == pytest.approx(float(np.mean(values[-window:])), rel=1e-12, abs=1e-9)
    assert "One line per partition: north (red), south (blue)." in visit.page.text_content(f"{card} p.caption")
    assert visit.errors == []
