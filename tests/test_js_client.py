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

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.noise.bits import KeyedBits
from dpstream.release import ToPLRandomizer
from dpstream.service import create_app

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "js"
TOKEN = "js-client-token-0123456789"


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
