"""zCDP sources of ``dpstream serve``: streams of ``bt-zcdp``, ``sqrt-zcdp`` and ``tops-zcdp`` and aggregates with
``"noise": "gaussian"``, each at the rho its (epsilon, delta) target affords; stored and continued by a new
process, stated in rho, charged to zCDP budgets in rho, refused in one line when asked for what cannot run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.accounting import rho_for, zcdp_epsilon
from dpstream.durable.encoding import decode
from dpstream.io.times import NS, format_times
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.banded import BLOCK
from dpstream.release.registry import mechanism
from dpstream.service import create_app
from dpstream.service.mechanisms import derive_key

TOKEN = "zcdp-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: A non-default delta: a restored mechanism no longer knows it, the service must still state it.
DELTA = 1e-5
SHAPES = {"bt-zcdp": {"max_range": 512}, "sqrt-zcdp": {"max_range": 256}, "tops-zcdp": {"max_range": 1024,
                                                                                      "hold": 300},
          "banded-zcdp": {"max_range": 64}}
START = 1_704_067_200  # 2024-01-01T00:00:00Z


def _app(url):
    return create_app(database=url, token=TOKEN)


@pytest.fixture
def http(tmp_path):
    app = _app(f"sqlite:///{tmp_path}/zcdp.db")
    yield TestClient(app)
    app.state.storage.close()


def _values(n, seed=0):
    return np.round(np.random.default_rng(seed).gamma(2.0, 4.0, size=n).clip(0, 50), 2)


def _library(method, values, seed):
    """What the registry's mechanism releases with the service's key, and it (for its standard errors)."""
    built = mechanism(method).cls(epsilon=1.0, delta=DELTA, upper_bound=50.0, **SHAPES[method], key=derive_key(seed))
    return built.release(values), built


@pytest.mark.parametrize("method", sorted(SHAPES))
def test_a_new_process_before_every_batch_continues_a_zcdp_stream_as_the_library(tmp_path, method):
    url, values, cuts = f"sqlite:///{tmp_path}/{method}.db", _values(1500), [0, 250, 251, 900, 1500]
    released, ledgers = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):  # a new service each batch: the mechanism comes from its stored state
        app = _app(url)
        http = TestClient(app)
        if lo == 0:
            answer = http.post("/streams", json={"name": "z", "method": method, "epsilon": 1.0, "delta": DELTA,
                                                 "upper_bound": 50.0, **SHAPES[method], "seed": 5}, headers=AUTH)
            assert answer.status_code == 201, answer.text
        answer = http.post("/streams/z/values", json={"values": values[lo:hi].tolist(), "first_position": lo},
                           headers=AUTH)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        facts, ledgers = http.get("/streams/z").json(), http.get("/streams/z/ledger").json()["ledger"]
        app.state.storage.close()
    expected, library = _library(method, values, seed=5)
    start = SHAPES[method].get("hold", 0)
    assert [r["position"] for r in released] == list(range(start, 1500))
    assert [r["value"] for r in released] == expected.tolist()  # bit-identical to one run of the library
    rho = rho_for(1.0, DELTA)
    assert facts["budget"]["rho"] == facts["budget"]["rho_spent"] == pytest.approx(rho, rel=1e-9)
    assert facts["budget"]["delta"] == DELTA and facts["budget"]["epsilon"] <= 1.0  # stated at the target's delta
    assert facts["budget"]["epsilon"] == pytest.approx(zcdp_epsilon(facts["budget"]["rho"], DELTA))
    assert facts["privacy"].startswith(f"{facts['budget']['rho']:g}-zCDP, so (1, 1e-05)-DP")
    assert [row["count"] for row in ledgers] == [250, 1, 649, 600]
    assert {(row["rho"], row["delta"]) for row in ledgers} == {(facts["budget"]["rho"], DELTA)}
    assert all(facts["budget"]["epsilon"] <= row["epsilon"] <= 1.0 for row in ledgers)  # ToPS: a bound until theta
    errors = library.standard_errors([r["position"] for r in released])  # ToPS's from the end of its hold-out
    assert np.array_equal([r["standard_error"] for r in released], errors)
    if method != "tops-zcdp":
        assert released[0]["standard_error"] < released[1]["standard_error"]  # not one shared number


def test_the_public_reads_carry_the_sqrt_stream_s_standard_errors(http):
    assert http.post("/streams", json={"name": "s", "method": "sqrt-zcdp", "epsilon": 1.0, "delta": DELTA,
                                       "upper_bound": 50.0, "max_range": 256, "seed": 2}, headers=AUTH).is_success
    values = _values(300)
    posted = http.post("/streams/s/values", json={"values": values.tolist()}, headers=AUTH).json()["released"]
    page = http.get("/streams/s/released?after=99&limit=10").json()["released"]
    assert page == posted[100:110]
    _, library = _library("sqrt-zcdp", values, seed=2)
    assert [r["standard_error"] for r in page] == library.standard_errors(np.arange(100, 110)).tolist()
    with http.stream("GET", "/streams/s/events?after=297") as events:
        # "retry" and a blank line, then per event: id, event, data, blank (an 11th line waits for a keep-alive)
        lines = [line for _, line in zip(range(10), events.iter_lines()) if line.startswith("data:")]
    assert [json.loads(line[5:])["standard_error"] for line in lines] == \
        library.standard_errors([298, 299]).tolist()


@pytest.mark.parametrize(("body", "message"), [
    ({"method": "bt-zcdp"}, "the binary tree under zCDP needs delta"),
    ({"method": "sqrt-zcdp"}, "the square-root factorization under zCDP needs delta"),
    ({"method": "tops-zcdp", "hold": 300}, "ToPS under zCDP needs delta"),
    ({"method": "bt", "delta": 1e-6}, "method 'bt' takes no parameter 'delta'"),
    ({"method": "tops", "delta": 1e-6}, "method 'tops' takes no parameter 'delta'"),
    ({"method": "bt-zcdp", "delta": 1e-6, "rho": 0.1}, "method 'bt-zcdp' takes no parameter 'rho'"),
    ({"method": "bt", "rho": 0.1}, "method 'bt' takes no parameter 'rho'"),
    ({"method": "sqrt-zcdp", "delta": 2.0}, "delta"),
    ({"method": "bt-zcdp", "delta": 0}, "delta must lie strictly between 0 and 1 to convert zCDP, got 0"),
    ({"method": "bt-zcdp", "delta": "1e-6"}, "delta must be a real number, got '1e-6'"),
    ({"method": "bt-zcdp", "delta": 1e-300, "epsilon": 1e-12}, "epsilon 1e-12 at delta 1e-300 affords rho 3.817e-28"),
    ({"method": "tops-zcdp", "hold": 300, "delta": 1e-6, "epsilon": 1e-12},
     "sqrt(2 rho), rho = 1e-12 (the threshold's budget under zCDP, unless threshold_epsilon) must be in"),
])
def test_zcdp_streams_that_could_never_run_are_one_line_422s(http, body, message):
    answer = http.post("/streams", json={"name": "bad", "epsilon": 1.0, "upper_bound": 50.0, **body}, headers=AUTH)
    assert answer.status_code == 422 and message in answer.json()["message"], answer.text
    assert "\n" not in answer.json()["message"]
    assert http.get("/streams/bad").status_code == 404


def test_a_zcdp_stream_is_charged_its_rho_and_refused_by_a_pure_budget(http):
    assert http.post("/budgets", json={"name": "pure", "epsilon": 5.0}, headers=AUTH).status_code == 201
    assert http.post("/budgets", json={"name": "z", "rho": 0.05}, headers=AUTH).status_code == 201
    stream = {"method": "bt-zcdp", "epsilon": 1.0, "delta": 1e-6, "upper_bound": 10.0, "max_range": 64}
    refused = http.post("/streams", json={"name": "a", **stream, "budget": "pure"}, headers=AUTH)
    assert refused.status_code == 422 and "\n" not in refused.json()["message"], refused.text
    assert "zCDP" in refused.json()["message"]
    assert http.get("/streams/a").status_code == 404 and http.get("/budgets/pure").json()["charges"] == []
    made = [http.post("/streams", json={"name": f"s{i}", **stream, "budget": "z"}, headers=AUTH) for i in range(3)]
    rho = rho_for(1.0, 1e-6)  # 0.0244: two fit in 0.05, a third does not
    assert [answer.status_code for answer in made] == [201, 201, 409], made[2].text
    shown = http.get("/budgets/z").json()
    assert [charge["rho"] for charge in shown["charges"]] == [pytest.approx(rho, rel=1e-9)] * 2
    assert shown["spent"]["rho"] == pytest.approx(2 * rho, rel=1e-9)
    assert shown["charges"][0]["statement"].startswith(f"{rho:g}-zCDP")


#: A day of hourly buckets per unit window; Gaussian noise at the rho of (1, DELTA) per window.
AGGREGATE = {"epsilon": 1.0, "bucket": "1h", "unit_window": "1d", "unit_bound": 10.0, "upper_bound": 2.0,
             "clip": True, "noise": "gaussian", "delta": DELTA}


def _rows(n, seed=0, days=3):
    rng = np.random.default_rng(seed)
    return np.sort(START + rng.integers(0, days * 86400, n)), rng.integers(0, 30, n).astype(str), \
        np.round(rng.exponential(0.8, n), 3)


def test_a_gaussian_aggregate_continues_in_a_new_process_as_the_library(tmp_path):
    url, (seconds, units, values), cuts = f"sqlite:///{tmp_path}/agg.db", _rows(2000), [0, 600, 1400, 2000]
    released = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        app = _app(url)
        http = TestClient(app)
        if lo == 0:
            answer = http.post("/aggregates", json={"name": "g", **AGGREGATE, "seed": 3}, headers=AUTH)
            assert answer.status_code == 201, answer.text
        batch = {"times": seconds[lo:hi].tolist(), "units": units[lo:hi].tolist(), "values": values[lo:hi].tolist(),
                 "first_position": lo, "flush": hi == 2000}
        answer = http.post("/aggregates/g/rows", json=batch, headers=AUTH)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        facts, ledger = http.get("/aggregates/g").json(), http.get("/aggregates/g/ledger").json()["ledger"]
        app.state.storage.close()
    rho = rho_for(1.0, DELTA)
    agg = UnitAggregate(bucket=3600, window=86400, unit_bound=10.0, upper_bound=2.0, clip=True, rho=rho,
                        key=derive_key(3))
    out = [agg.release(seconds[lo:hi] * NS, units[lo:hi], values[lo:hi]) for lo, hi in zip(cuts[:-1], cuts[1:])]
    out.append(agg.flush())
    assert [(r["bucket"], r["value"]) for r in released] == list(zip(
        format_times(np.concatenate([o.buckets for o in out])), np.concatenate([o.values for o in out]).tolist()))
    assert len(released) == 72 and {r["standard_error"] for r in released} == {agg.standard_error()}
    assert facts["budget"]["rho"] == pytest.approx(rho, rel=1e-9) and facts["budget"]["delta"] == DELTA
    assert facts["parameters"]["noise"] == "gaussian" and facts["windows"] == 3
    words = f"each unit's readings in each UTC day: ρ = {facts['budget']['rho']:g} (ε = 1, δ = 1e-05); over 3 windows"
    assert facts["guarantee"].startswith(words)
    assert {row["rho"] for row in ledger} == {facts["budget"]["rho"]} and len(ledger) == 3


@pytest.mark.parametrize(("changes", "message"), [
    ({"delta": None}, '"noise": "gaussian" needs delta'),
    ({"noise": "laplace"}, 'delta applies with "noise": "gaussian" only'),
    ({"noise": "poisson"}, 'noise must be "laplace" or "gaussian"'),
    ({"delta": 0}, "delta"),
    ({"partition_selection": "private", "partitions": None}, "zCDP (rho) applies with public partitions only"),
])
def test_gaussian_aggregates_that_could_never_run_are_one_line_422s(http, changes, message):
    document = {"name": "bad", **AGGREGATE, **changes}
    answer = http.post("/aggregates", json={k: v for k, v in document.items() if v is not None}, headers=AUTH)
    assert answer.status_code == 422 and message in answer.json()["message"], answer.text
    assert "\n" not in answer.json()["message"]
    assert http.get("/aggregates/bad").status_code == 404


def test_a_laplace_aggregate_states_no_rho(http):
    document = {k: v for k, v in AGGREGATE.items() if k not in ("noise", "delta")}
    facts = http.post("/aggregates", json={"name": "l", **document}, headers=AUTH).json()
    assert "rho" not in facts["budget"] and facts["budget"] == {"epsilon": 1.0, "delta": 0.0, "epsilon_spent": 0.0,
                                                                "delta_spent": 0.0}


def test_a_zcdp_stream_charged_to_a_budget_continues_on_either_database(database_url):
    values, released = _values(700), []
    for lo, hi in ((0, 300), (300, 700)):
        app = _app(database_url)
        http = TestClient(app)
        if lo == 0:
            assert http.post("/budgets", json={"name": "b", "rho": 0.1, "delta": DELTA}, headers=AUTH).is_success
            answer = http.post("/streams", json={"name": "z", "method": "bt-zcdp", "epsilon": 1.0, "delta": DELTA,
                                                 "upper_bound": 50.0, **SHAPES["bt-zcdp"], "seed": 8, "budget": "b"},
                               headers=AUTH)
            assert answer.status_code == 201, answer.text
        answer = http.post("/streams/z/values", json={"values": values[lo:hi].tolist()}, headers=AUTH)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        budget, facts = http.get("/budgets/b").json(), http.get("/streams/z").json()
        app.state.storage.close()
    assert [r["value"] for r in released] == _library("bt-zcdp", values, seed=8)[0].tolist()
    assert budget["spent"]["rho"] == facts["budget"]["rho"] == pytest.approx(rho_for(1.0, DELTA), rel=1e-9)
    assert budget["spent"]["delta"] == facts["budget"]["delta"] == DELTA


DATABASE_KEY = bytes(range(32))


def test_a_banded_stream_crosses_a_block_in_new_processes_as_the_library_and_keeps_its_history_sealed(tmp_path):
    url, values = f"sqlite:///{tmp_path}/banded.db", _values(BLOCK + 500, seed=3)
    cuts = [0, 3000, BLOCK + 7, BLOCK + 500]
    released = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):  # a new service each batch: the block's noise from the key and history
        app = create_app(database=url, token=TOKEN, database_key=DATABASE_KEY)
        http = TestClient(app)
        if lo == 0:
            answer = http.post("/streams", json={"name": "b", "method": "banded-zcdp", "epsilon": 1.0, "delta": DELTA,
                                                 "upper_bound": 50.0, **SHAPES["banded-zcdp"], "seed": 6}, headers=AUTH)
            assert answer.status_code == 201, answer.text
        batch = {"values": values[lo:hi].tolist(), "first_position": lo}
        answer = http.post("/streams/b/values", json=batch, headers=AUTH)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        again = http.post("/streams/b/values", json=batch, headers=AUTH)  # a retry: the values stored, not new noise
        assert again.status_code == 200 and again.json()["released"] == answer.json()["released"]
        changed = http.post("/streams/b/values", json={**batch, "values": (values[lo:hi] + 1).tolist()}, headers=AUTH)
        assert changed.status_code == 409, changed.text
        storage = app.state.storage
        (sealed_key, sealed_state), = storage._query("SELECT secret_key, secret_state FROM sources WHERE name = 'b'")
        state = json.loads(storage.source("stream", "b", secret=True).state)
        assert derive_key(6) not in bytes(sealed_key)  # the key and the state sealed alike with the database key
        assert "history" not in sealed_state and sealed_state != storage.source("stream", "b", secret=True).state
        storage.close()
    expected, library = _library("banded-zcdp", values, seed=6)
    assert [r["position"] for r in released] == list(range(BLOCK + 500))
    assert [r["value"] for r in released] == expected.tolist()  # bit-identical to one run of the library
    counter = decode(state["state"])["counter"]  # the stored history is masked by the key's pad, never in the clear
    assert "history" not in counter and len(counter["masked_history"]) == 63
    assert not np.any(np.asarray(counter["masked_history"]) == library._history)
