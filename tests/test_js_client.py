"""The JavaScript ToPL client (``clients/js``): its own unit tests under Node, and cross-language test vectors.

The vectors feed the same parameters, values and deterministic bits (the keyed ChaCha20 of
:class:`~dpstream.noise.KeyedBits`, ``@noble/ciphers`` on the JavaScript side) to the Python randomizer
and the JavaScript one, and require identical reports documents, byte for byte: every mechanism
(Square Wave; HM's SR and PM branches; SR alone at epsilon <= 0.61) at budgets from 0.05 to 30,
default and small grids, values at the edges of the range, of the grids and of theta.  They are made
here from the Python code, so they cannot go stale.  Node 20.19+ and npm are needed (``make test``
installs Debian's when missing); the npm packages come from the registry (``npm ci``).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import sync_playwright

from dpstream.client import Client
from dpstream.noise.bits import KeyedBits
from dpstream.release import ToPLCollector, ToPLRandomizer
from dpstream.service import create_app
from service_helpers import TOKEN as SERVICE_TOKEN
from service_helpers import ServeProcess, free_port

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "js"
TOKEN = "js-client-token-0123456789"
#: Debian's Chromium (make test installs it); Playwright's own browser downloads are never used.
CHROMIUM = Path("/usr/bin/chromium")


def run(*command: str, cwd: Path = PACKAGE, timeout: float = 300) -> subprocess.CompletedProcess:
    """``command`` in ``cwd``; a failure shows its output."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout[-4000:]}" \
                                 f"\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="session")
def node_package() -> Path:
    """``clients/js`` with its locked dependencies installed (``npm ci``)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are missing: apt-get install nodejs npm (make test installs them).")
    version = run("node", "--version").stdout.strip().lstrip("v").split(".")
    assert (int(version[0]), int(version[1])) >= (20, 19), f"the JavaScript client needs Node 20.19+, got {version}"
    run("npm", "ci", "--no-audit", "--no-fund")
    return PACKAGE


def test_the_javascript_unit_tests_pass(node_package):
    run("npm", "test", cwd=node_package)


def _cases(rng: np.random.Generator) -> list[tuple[ToPLRandomizer, np.ndarray]]:
    """Parameters over budgets, grids and both phases, each with values at the edges and inside the range."""
    cases = []
    for k, epsilon in enumerate([0.05, 0.3, 0.61, 0.62, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]):
        bound = float([1.0, 100.0, 1657.0, 0.37, 5e6][k % 5])
        small = k % 2 == 1  # small grids on half the cases, the defaults (SW 1024, PM from epsilon) on the others
        grids = {"buckets": 16 + 7 * k, "stream_grid": 32 + 5 * k} if small else {}
        for threshold in (None, bound * [0.37, 1.0, 0.05][k % 3]):
            client = ToPLRandomizer(epsilon=epsilon, upper_bound=bound, threshold=threshold,
                                    threshold_epsilon=[epsilon, 1.5, 0.2][k % 3], **grids)
            grid = client.buckets if threshold is None else client.stream_grid
            edges = [0.0, bound, 5e-324, bound * (1 - 2**-53), *(bound * np.arange(0, grid + 1, max(1, grid // 40))
                                                                  / grid)]
            if threshold is not None:
                edges += [threshold, np.nextafter(threshold, 0), np.nextafter(threshold, np.inf), threshold / 2]
            values = np.concatenate([np.minimum(edges, bound), rng.uniform(0, bound, 300 - len(edges))])
            cases.append((client, values))
    return cases


def test_javascript_and_python_randomizers_make_identical_reports_from_the_same_bits(node_package, tmp_path):
    rng = np.random.default_rng(27)
    key = rng.bytes(32)
    cases = _cases(rng)
    floats = np.concatenate([rng.standard_normal(1500) * 10.0 ** rng.integers(-30, 30, 1500),
                             rng.uniform(0, 2000, 500), [0.1, 1.0, 1e16, 1e-5, 123456789.125, 2.0**70]])
    words = [{"identity": ["words", 7], "count": 700}, {"identity": "x", "count": 3}]
    document = {"key": key.hex(), "floats": floats.tolist(), "words": words,
                "cases": [{"parameters": client.to_json(), "identity": ["vectors", k], "values": values.tolist()}
                          for k, (client, values) in enumerate(cases)]}
    (tmp_path / "cases.json").write_text(json.dumps(document))
    answer = json.loads(run("node", "test/support/vectors.js", str(tmp_path / "cases.json"),
                            cwd=node_package).stdout)
    for spec, written in zip(words, answer["words"], strict=True):  # the bit source itself first
        identity = tuple(spec["identity"]) if isinstance(spec["identity"], list) else spec["identity"]
        assert written == [str(w) for w in KeyedBits(key=key, identity=identity).words(spec["count"]).tolist()]
    assert answer["floats"] == [repr(float(x)) for x in floats]  # the id's canonical JSON
    mechanisms = set()
    for k, ((client, values), javascript) in enumerate(zip(cases, answer["reports"], strict=True)):
        python = client.report_batch(values, KeyedBits(key=key, identity=("vectors", k))).to_json()
        assert javascript == python, f"case {k}: {client!r}"
        mechanisms |= set(json.loads(python)["mechanism"])
    assert mechanisms == {0, 1, 2} and sum(values.size for _, values in cases) == 6000


def test_the_service_publishes_version_2_and_version_1_on_request(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/parameters.db", token=TOKEN)
    try:
        http = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
        assert http.post("/collectors", json={"name": "c", "epsilon": 1.0, "upper_bound": 100.0, "hold": 10,
                                              "max_range": 256}).status_code == 201
        new, old = http.get("/collectors/c/parameters"), http.get("/collectors/c/parameters?version=1")
        assert json.loads(new.text)["format"] == "dpstream.topl.parameters/2"
        assert json.loads(old.text)["format"] == "dpstream.topl.parameters/1"
        assert http.get("/collectors/c/parameters?version=2").text == new.text
        assert ToPLRandomizer.from_json(new.text) == ToPLRandomizer.from_json(old.text)
        assert json.loads(new.text)["id"] == json.loads(old.text)["id"]
        refused = http.get("/collectors/c/parameters?version=3")
        assert refused.status_code == 422
        assert refused.json()["message"] == "query parameter version must be one of [1, 2], got 3."
    finally:
        app.state.storage.close()


# -- against a live dpstream serve -----------------------------------------------------------------------------

#: The collector of the live tests: theta from 200 threshold reports, then HM reports.
COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 200, "max_range": 4096, "buckets": 64}


def report_token(admin: Client, collector: str) -> str:
    """The token the JavaScript client posts reports with: a contributor's of ``collector`` only, as an app would
    ship (its rate and batch size above what the test sends, counting the batches a restart makes it send again)."""
    return admin.create_token("contributor", collector=collector, rate=100_000, window="1h", max_batch=1_000,
                              note="the JavaScript client's test")["token"]


class StaticFiles:
    """``clients/js`` served over HTTP on a free port of 127.0.0.1 (the page's origin), in a thread."""

    def __init__(self) -> None:
        handler = functools.partial(_QuietHandler, directory=str(PACKAGE))
        self.http = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.origin = f"http://127.0.0.1:{self.http.server_port}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # no access log on the test's output
        pass


@pytest.fixture
def page_origin() -> Iterator[StaticFiles]:
    files = StaticFiles()
    yield files
    files.stop()


def test_a_static_page_in_chromium_posts_reports_that_the_collector_releases(node_package, page_origin, tmp_path):
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test installs it).")
    server = ServeProcess(f"sqlite:///{tmp_path}/page.db", options=("--cors-origin", page_origin.origin)).start()
    try:
        with Client(server.url, SERVICE_TOKEN) as admin:
            admin.create_collector("web", **COLLECTOR)
            token = report_token(admin, "web")
        values = np.random.default_rng(5).uniform(0, 100, 600).round(2)
        parameters = ToPLRandomizer(**{k: COLLECTOR[k] for k in ("epsilon", "upper_bound", "buckets")},
                                    threshold=37.5).to_json()
        words = KeyedBits(key=bytes(32), identity="page").words(3 * values.size)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                 args=["--no-sandbox", "--disable-dev-shm-usage"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{page_origin.origin}/examples/index.html")
            page.fill("input[name=service]", server.url)
            page.fill("input[name=collector]", "web")
            page.fill("input[name=token]", token)
            page.fill("textarea[name=values]", "\n".join(map(str, values)))
            page.click("button[type=submit]")
            page.wait_for_selector("#status[data-state=done], #status[data-state=error]", timeout=30_000)
            status, shown = page.text_content("#status"), page.text_content("#released")
            in_page = page.evaluate(_IN_PAGE, {"parameters": parameters, "values": values.tolist(),
                                               "words": [str(w) for w in words.tolist()]})
            browser.close()
        assert status == "sent 600 reports; the collector released 400 estimates" and errors == []
        check = Client(server.url)  # the Python side reads the released estimates
        released = list(check.all_released("web", after=-1, kind="collectors"))
        assert check.collector("web")["position"] == 600
        assert [row["position"] for row in released] == list(range(200, 600))
        rows = [line.split("\t") for line in shown.splitlines()]  # what the page showed: the same estimates
        assert [(int(position), float(value)) for position, value in rows] == [
            (row["position"], row["value"]) for row in released]
        # the randomizer as the browser runs it, given the same words as Python's, makes the same reports
        assert in_page == ToPLRandomizer.from_json(parameters).report_batch(values, _Words(words)).to_json()
    finally:
        server.stop()


#: In the page: the client's module, a parameters document and given words -> the reports document.
_IN_PAGE = """async ({parameters, values, words}) => {
    const { ToPLRandomizer } = await import('../src/index.js');
    const given = BigUint64Array.from(words, BigInt);
    let read = 0;
    const bits = { words: (n) => given.subarray(read, (read += n)) };
    return (await ToPLRandomizer.fromJson(parameters)).reportBatch(values, bits).toJson();
}"""


class _Words:
    """A bit source that gives these words, in order."""

    def __init__(self, words: np.ndarray) -> None:
        self.left = words

    def words(self, n: int) -> np.ndarray:
        out, self.left = self.left[:n], self.left[n:]
        return out


def test_a_server_killed_and_restarted_during_javascript_sends_loses_and_duplicates_no_report(node_package, tmp_path):
    server = ServeProcess(f"sqlite:///{tmp_path}/restart.db").start()
    values = np.random.default_rng(6).uniform(0, 100, 4000).round(3)
    (tmp_path / "values.json").write_text(json.dumps(values.tolist()))
    key = bytes(range(32))
    try:
        with Client(server.url, SERVICE_TOKEN) as admin:
            admin.create_collector("c", **COLLECTOR)
            token = report_token(admin, "c")
        sender = subprocess.Popen(["node", "test/support/send-keyed.js", server.url, "c", token, key.hex(),
                                   "restart", str(tmp_path / "values.json"), "100"],
                                  cwd=node_package, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sending = []
        for mark in (700, 2000):  # SIGKILL the server while reports come in, then start it again on its port
            deadline = time.monotonic() + 60
            while _position(server) < mark and time.monotonic() < deadline and sender.poll() is None:
                time.sleep(0.01)
            sending.append(sender.poll() is None)
            server.kill()
            server.start()
        out, err = sender.communicate(timeout=120)
        assert sender.returncode == 0, err[-3000:]
        released = json.loads(out)
        check = Client(server.url)
        assert sending == [True, True] and server.starts == 3 and check.collector("c")["position"] == values.size
        assert [row["position"] for row in released] == list(range(200, values.size))
        assert list(check.all_released("c", after=-1, kind="collectors")) == released
        # the same reports as Python's from the same bits: each batch randomized once, in order
        collector, bits = ToPLCollector(**COLLECTOR), KeyedBits(key=key, identity="restart")
        expected = [collector.receive_json(ToPLRandomizer.from_json(collector.parameters_json())
                                           .report_batch(values[start:start + 100], bits).to_json())
                    for start in range(0, values.size, 100)]
        assert [row["value"] for row in released] == np.concatenate(expected).tolist()
    finally:
        server.stop()


def _position(server: ServeProcess) -> int:
    try:
        return httpx.get(f"{server.url}/collectors/c", timeout=1.0).json()["position"]
    except (httpx.TransportError, ValueError, KeyError):
        return 0
