"""``/aggregates`` of ``dpstream serve``: UnitAggregate's release, fed in batches over HTTP, stored and continued."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.client import Client, ServiceError
from dpstream.io.times import NS, format_times
from dpstream.release.aggregate import UnitAggregate
from dpstream.service import create_app
from dpstream.service.mechanisms import derive_key
from dpstream.service.routers import aggregates

TOKEN = "aggregate-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: A day of 30-minute buckets per unit window, two public partitions.
CREATE = {"epsilon": 1.0, "bucket": "30m", "unit_window": "1d", "unit_bound": 30.0, "upper_bound": 5.0,
          "clip": True, "partitions": ["north", "south"], "unit_max_partitions": 1, "unit_max_rows": 60}
LIBRARY = {"epsilon": 1.0, "bucket": 1800, "window": 86400, "unit_bound": 30.0, "upper_bound": 5.0, "clip": True,
           "partitions": ["north", "south"], "max_partitions": 1, "max_rows": 60}
START = 1_704_067_200  # 2024-01-01T00:00:00Z


def _rows(n, seed=0, days=3):
    """n rows of 40 meters over ``days`` days, in time order: epoch seconds, meters, kWh (some above B), feeders."""
    rng = np.random.default_rng(seed)
    seconds = np.sort(START + rng.integers(0, days * 86400, n))
    units = rng.integers(0, 40, n).astype(str)
    values = np.round(rng.exponential(1.5, n), 3)
    partitions = np.where(rng.random(n) < 0.6, "north", "south")
    return seconds, units, values, partitions


def _batch(rows, lo, hi, *, iso=False, **extra):
    seconds, units, values, partitions = rows
    times = format_times(seconds[lo:hi] * NS) if iso else seconds[lo:hi].tolist()
    return {"times": times, "units": units[lo:hi].tolist(), "values": values[lo:hi].tolist(),
            "partitions": partitions[lo:hi].tolist(), **extra}


def _library(rows, cuts, seed, flush=True):
    """What UnitAggregate with the service's key releases for the same rows, batch by batch."""
    seconds, units, values, partitions = rows
    agg = UnitAggregate(**LIBRARY, key=derive_key(seed))
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        out.append(agg.release(seconds[lo:hi] * NS, units[lo:hi], values[lo:hi], partitions[lo:hi]))
    if flush:
        out.append(agg.flush())
    buckets = format_times(np.concatenate([o.buckets for o in out]))
    names = np.array(LIBRARY["partitions"])[np.concatenate([o.partitions for o in out])].tolist()
    return list(zip(buckets, names, np.concatenate([o.values for o in out]).tolist()))


def _triples(released):
    return [(r["bucket"], r["partition"], r["value"]) for r in released]


def _app(url):
    return create_app(database=url, token=TOKEN)


@pytest.fixture
def http(tmp_path):
    app = _app(f"sqlite:///{tmp_path}/agg.db")
    yield TestClient(app)
    app.state.storage.close()


def _create(http, name="load", seed=11, **changes):
    answer = http.post("/aggregates", json={"name": name, **CREATE, "seed": seed, **changes}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_batches_release_what_the_library_releases_with_the_same_key(http):
    described = _create(http)
    assert described["position"] == 0 and described["released"] == 0 and "warning" in described
    assert described["parameters"]["bucket"] == "30m" and "seed" not in described["parameters"]
    rows = _rows(3000)
    cuts = [0, 700, 701, 1900, 3000]
    released = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        answer = http.post("/aggregates/load/rows", headers=AUTH,
                           json=_batch(rows, lo, hi, iso=lo == 701, first_position=lo, flush=hi == 3000))
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
    expected = _library(rows, cuts, seed=11)
    assert len(expected) == 2 * 3 * 48  # three days of buckets, two partitions
    assert _triples(released) == expected  # bit-identical values, in the order released
    assert [r["position"] for r in released] == list(range(len(expected)))
    page = http.get("/aggregates/load/released?after=99&limit=50").json()["released"]
    assert _triples(page) == expected[100:150]
    facts = http.get("/aggregates/load", headers=AUTH).json()
    assert facts["position"] == 3000 and facts["released"] == len(expected) and facts["windows"] == 3
    assert facts["guarantee"] == "each unit's readings in each UTC day: ε = 1; over 3 days: ε = 3 by composition"
    assert "unit level" in facts["privacy"] and facts["budget"]["epsilon"] == 1.0
    ledger = http.get("/aggregates/load/ledger", headers=AUTH).json()["ledger"]
    assert [row["count"] for row in ledger] == [700, 1, 1199, 1100]
    assert [a["name"] for a in http.get("/aggregates").json()["aggregates"]] == ["load"]


def test_another_seed_draws_other_noise(http):
    rows = _rows(400, days=1)
    outputs = []
    for name, seed in (("a", 1), ("b", 2)):
        _create(http, name, seed=seed)
        answer = http.post(f"/aggregates/{name}/rows", json=_batch(rows, 0, 400, flush=True), headers=AUTH)
        outputs.append([r["value"] for r in answer.json()["released"]])
    assert len(outputs[0]) == len(outputs[1]) == 96 and outputs[0] != outputs[1]


def test_a_retried_batch_gets_the_first_answer_and_is_not_ingested_twice(http):
    _create(http)
    rows = _rows(1000)
    first = http.post("/aggregates/load/rows", json=_batch(rows, 0, 600, first_position=0), headers=AUTH).json()
    second = http.post("/aggregates/load/rows", json=_batch(rows, 600, 1000, first_position=600),
                       headers=AUTH).json()
    assert first["released"] and second["released"]
    for lo, hi, answer in ((0, 600, first), (600, 1000, second)):
        again = http.post("/aggregates/load/rows", json=_batch(rows, lo, hi, first_position=lo), headers=AUTH)
        assert again.status_code == 200 and again.json() == answer
    assert http.get("/aggregates/load", headers=AUTH).json()["position"] == 1000
    inside = _batch(rows, 999, 1000, first_position=1000)  # the open bucket's: it closes nothing
    for _ in range(2):
        assert http.post("/aggregates/load/rows", json=inside, headers=AUTH).json() == {"released": []}
    assert http.get("/aggregates/load", headers=AUTH).json()["position"] == 1001
    changed = _batch(rows, 0, 600, first_position=0)
    changed["values"][5] += 1.0
    refused = http.post("/aggregates/load/rows", json=changed, headers=AUTH)
    assert refused.status_code == 409 and "not the one ingested there" in refused.json()["message"]
    gap = http.post("/aggregates/load/rows", json=_batch(rows, 0, 10, first_position=1200), headers=AUTH)
    assert gap.status_code == 409 and "gap" in gap.json()["message"]


def test_a_new_app_on_the_same_database_continues_identically(database_url):
    rows = _rows(2400)
    cuts = [0, 900, 1700, 2400]
    released = []
    for step, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        # a restart before every batch: the state comes from the database alone, sealed under a database key
        app = create_app(database=database_url, token=TOKEN, database_key=b"k" * 32)
        try:
            client = Client("http://testserver", TOKEN, http=TestClient(app))
            if step == 0:
                client.create_aggregate("load", **{**CREATE, "seed": 5})
            batch = _batch(rows, lo, hi)
            released += client.send_rows("load", batch["times"], batch["units"], batch["values"],
                                         batch["partitions"], first_position=lo, flush=hi == cuts[-1])
        finally:
            app.state.storage.close()
    assert _triples(released) == _library(rows, cuts, seed=5)
    assert released[-1]["position"] == len(released) - 1


def _refused(http, path, document, status=422):
    answer = http.post(path, json=document, headers=AUTH)
    assert answer.status_code == status, answer.text
    message = answer.json()["message"]
    assert "\n" not in message and answer.json()["status"] == status
    return message


@pytest.mark.parametrize("change, words", [
    ({"unit_bound": -1}, "unit_bound must be a finite number > 0, got -1"),
    ({"unit_bound": "thirty"}, "unit_bound"),
    ({"bucket": "7m", "unit_window": "1h"}, "whole number of buckets"),
    ({"bucket": "1.5h"}, "bucket must be a positive integer and s, m, h or d"),
    ({"statistic": "median"}, "statistic must be one of sum, count, mean, got 'median'"),
    ({"start": "yesterday"}, "start[0]: the time 'yesterday' is not ISO 8601"),
    ({"partitions": ["a", "a"]}, "partitions must be distinct names"),
    ({"period": 48}, "an aggregate takes no parameter 'period'"),
])
def test_bad_parameters_are_one_line_422s_and_create_nothing(http, change, words):
    assert words in _refused(http, "/aggregates", {"name": "bad", **CREATE, **change})
    assert http.get("/aggregates/bad").status_code == 404


def test_bad_rows_are_one_line_errors_and_change_nothing(http):
    _create(http)
    rows = _rows(200, days=1)
    assert http.post("/aggregates/load/rows", json=_batch(rows, 0, 100), headers=AUTH).status_code == 200
    before = http.get("/aggregates/load").json(), http.get("/aggregates/load/released").json()
    good = _batch(rows, 100, 103)
    iso = _batch(rows, 100, 103, iso=True)
    assert "times[1]: the time 'noon' is not ISO 8601" in _refused(
        http, "/aggregates/load/rows", {**iso, "times": [iso["times"][0], "noon", iso["times"][2]]})
    assert "times[2]: the time '2024-01-01T00:00:00Z' is not epoch seconds" in _refused(
        http, "/aggregates/load/rows", {**good, "times": good["times"][:2] + ["2024-01-01T00:00:00Z"]})
    late = {**good, "times": [good["times"][0], START, good["times"][2]]}  # a bucket released already
    assert "row 102: its bucket was released already" in _refused(http, "/aggregates/load/rows", late)
    assert "is not one of the public partitions" in _refused(
        http, "/aggregates/load/rows", {**good, "partitions": ["north", "east", "south"]})
    assert "units must have one entry per row (3), got 2" in _refused(
        http, "/aggregates/load/rows", {**good, "units": ["a", "b"]})
    assert "values[0] must be a number, got null" in _refused(
        http, "/aggregates/load/rows", {**good, "values": [None, 1, 2]})
    assert "unknown field(s) unit" in _refused(http, "/aggregates/load/rows", {**good, "unit": ["a"] * 3})
    assert "no aggregate named 'nope'" in _refused(http, "/aggregates/nope/rows", good, status=404)
    assert http.get("/aggregates/nope").status_code == 404
    assert http.get("/aggregates/nope/released").status_code == 404
    assert http.post("/aggregates/load/rows", json=good).status_code == 401
    assert (http.get("/aggregates/load").json(), http.get("/aggregates/load/released").json()) == before
    assert http.post("/aggregates/load/rows", json=good, headers=AUTH).status_code == 200  # still at its position


@pytest.mark.parametrize("limit", ["MAX_CLOSED", "MAX_GAP"])
def test_a_batch_may_not_release_a_gap_of_more_than_its_limit(http, monkeypatch, limit):
    monkeypatch.setattr(aggregates, limit, 900)
    _create(http)
    rows = _rows(100, days=1)
    http.post("/aggregates/load/rows", json=_batch(rows, 0, 100), headers=AUTH)
    before = http.get("/aggregates/load").json()
    far = _batch(rows, 99, 100)
    released = len(http.get("/aggregates/load/released").json()["released"])
    far["times"] = [START + 11 * 86400]  # the buckets of 11 days of 96 values, less those released, close
    total = 11 * 96 - released  # of which the open bucket's 2 values are not a gap's
    assert total - 2 > 900 >= 10 * 96 - released - (2 if limit == "MAX_GAP" else 0)
    message = _refused(http, "/aggregates/load/rows", far)
    if limit == "MAX_GAP":  # refused before any work, naming the row and its gap
        assert "row 101: its time 2024-01-12T00:00:00Z comes " in message, message
        assert f"the gaps of this batch would release {total - 2:,} empty bucket values" in message, message
        assert "more than the 900 a batch may; the service refuses so long a gap" in message, message
    else:
        assert f"this batch would release {total:,} bucket values, more than the 900 one batch may" in message
    assert http.get("/aggregates/load").json() == before
    far["times"] = [START + 10 * 86400]
    assert len(http.post("/aggregates/load/rows", json=far, headers=AUTH).json()["released"]) == 10 * 96 - released


def test_a_late_row_is_dropped_when_the_aggregate_says_so(http):
    _create(http, late="drop")
    rows = _rows(200, days=1)
    http.post("/aggregates/load/rows", json=_batch(rows, 0, 150), headers=AUTH)
    late = _batch(rows, 150, 153)
    late["times"][1] = START
    assert http.post("/aggregates/load/rows", json=late, headers=AUTH).status_code == 200
    assert http.get("/aggregates/load", headers=AUTH).json()["position"] == 153


def test_a_name_is_taken_once(http):
    _create(http)
    assert "exists already" in _refused(http, "/aggregates", {"name": "load", **CREATE}, status=409)
    with pytest.raises(ServiceError, match="exists already"):
        Client("http://testserver", TOKEN, http=http).create_aggregate("load", **CREATE)


def test_the_rows_consumed_are_shown_to_the_tokens_holder_only(http):
    """An aggregate's rows are data under its unit-level relation: without the token its facts and ledger leave
    out the rows consumed (position, each batch's first_position and count); with it they are there."""
    _create(http)
    rows = _rows(1000)
    for lo, hi in ((0, 3), (3, 10)):
        assert http.post("/aggregates/load/rows", json=_batch(rows, lo, hi, first_position=lo),
                         headers=AUTH).status_code == 200
    public = http.get("/aggregates/load").json()
    listed = http.get("/aggregates").json()["aggregates"][0]
    ledger = http.get("/aggregates/load/ledger").json()["ledger"]
    assert "position" not in public and "position" not in listed and public["released"] == listed["released"]
    assert ledger and all("count" not in row and "first_position" not in row for row in ledger)
    assert "10" not in [str(v) for v in public.values()]
    assert http.get("/aggregates/load", headers=AUTH).json()["position"] == 10
    assert [row["count"] for row in http.get("/aggregates/load/ledger", headers=AUTH).json()["ledger"]] == [3, 7]
    wrong = {"Authorization": "Bearer not-the-token"}
    assert "position" not in http.get("/aggregates/load", headers=wrong).json()


# -- private partition selection ---------------------------------------------------------------------------------------

#: Partitions not known in advance: "north" listed, the others selected per day (threshold 16 units at delta 1e-3).
PRIVATE = {**CREATE, "partitions": ["north"], "partition_selection": "private", "selection_delta": 1e-3}


def _private_rows(n, seed=0, days=3):
    """Rows of 40 meters: u0..u19 feed "north" (public), u20..u39 "south" (selected: 20 units a day, above the
    threshold), and one meter alone feeds "lonely" (a partition of one unit's rows: never to be named)."""
    seconds, units, values, _ = _rows(n, seed=seed, days=days)
    partitions = np.where(units.astype(int) < 20, "north", "south")
    alone = np.arange(n) % 50 == 7
    units, partitions = units.astype(object), partitions.astype(object)
    units[alone], partitions[alone] = "solo", "lonely"
    return seconds, units.astype(str), values, partitions.astype(str)


def _library_private(rows, cuts, seed):
    """What UnitAggregate with the service's key releases, as (bucket, partition, value), and its partitions' names."""
    seconds, units, values, partitions = rows
    agg = UnitAggregate(**{**LIBRARY, "partitions": ["north"]}, partition_selection="private", selection_delta=1e-3,
                        key=derive_key(seed))
    out = [agg.release(seconds[lo:hi] * NS, units[lo:hi], values[lo:hi], partitions[lo:hi])
           for lo, hi in zip(cuts[:-1], cuts[1:])] + [agg.flush()]
    names = np.array(agg.partition_names, dtype=object)[np.concatenate([o.partitions for o in out])].tolist()
    buckets = format_times(np.concatenate([o.buckets for o in out]))
    return list(zip(buckets, names, np.concatenate([o.values for o in out]).tolist())), agg.partition_names


def test_private_partitions_are_selected_as_the_library_selects_them_and_their_positions_name_them(http):
    described = _create(http, **PRIVATE)
    assert described["partitions"] == ["north"] and "δ = 0.001" in described["guarantee"]
    rows = _private_rows(3000)
    cuts = [0, 700, 1900, 3000]
    released, answers = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        answer = http.post("/aggregates/load/rows", headers=AUTH,
                           json=_batch(rows, lo, hi, first_position=lo, flush=hi == 3000))
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
        released += answer.json()["released"]
    expected, names = _library_private(rows, cuts, seed=11)
    assert _triples(released) == expected  # bit-identical, in the order released
    assert names == ["north", "south"] and {r["partition"] for r in released} == {"north", "south"}
    assert len(expected) == 2 * 3 * 48  # south selected every day, lonely never
    positions = [r["position"] for r in released]
    stride = aggregates.PARTITION_STRIDE
    assert positions == sorted(positions) and [p // stride for p in positions] == list(range(len(positions)))
    facts = http.get("/aggregates/load").json()
    assert facts["partitions"] == names and [facts["partitions"][p % stride] for p in positions] == [
        r["partition"] for r in released]
    assert facts["released"] == len(expected) and facts["windows"] == 3
    everything = http.get(f"/aggregates/load/released?limit={len(expected)}").text
    assert "lonely" not in everything and "solo" not in everything and "lonely" not in str(facts)
    page = http.get(f"/aggregates/load/released?after={positions[99]}&limit=50").json()["released"]
    assert _triples(page) == expected[100:150]
    for (lo, hi), answer in zip(zip(cuts[:-1], cuts[1:]), answers):  # a retry is answered from the stored buckets
        again = http.post("/aggregates/load/rows", headers=AUTH,
                          json=_batch(rows, lo, hi, first_position=lo, flush=hi == 3000))
        assert again.status_code == 200 and again.json() == answer
    assert http.get("/aggregates/load", headers=AUTH).json()["position"] == 3000


def test_private_selection_continues_identically_in_a_new_app(database_url):
    rows = _private_rows(2400, seed=3)
    cuts = [0, 500, 1300, 2400]
    released = []
    for step, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        app = create_app(database=database_url, token=TOKEN)  # a restart before every batch
        try:
            client = Client("http://testserver", TOKEN, http=TestClient(app))
            if step == 0:
                client.create_aggregate("load", **{**PRIVATE, "seed": 5})
            batch = _batch(rows, lo, hi)
            released += client.send_rows("load", batch["times"], batch["units"], batch["values"],
                                         batch["partitions"], first_position=lo, flush=hi == cuts[-1])
        finally:
            app.state.storage.close()
    assert _triples(released) == _library_private(rows, cuts, seed=5)[0]


@pytest.mark.parametrize(("change", "words"), [
    ({"partition_selection": "secret"}, "partition_selection must be one of public, private, got 'secret'"),
    ({"unit_max_partitions": None}, "private partition selection needs max_partitions"),
    ({"selection_delta": 0.5}, "selection_delta must lie in (0, 0.001], got 0.5"),
    ({"selection_epsilon": 2.0}, "selection_epsilon must lie strictly between 0 and epsilon 1"),
    ({"replace": True}, "add/remove relation only"),
    # accepted and ignored under public selection, where the command refuses them
    ({"partition_selection": "public"}, "selection_delta applies with partition_selection private only"),
    ({"partition_selection": None, "selection_delta": None, "selection_epsilon": 0.5},
     "selection_epsilon applies with partition_selection private only"),
])
def test_bad_selection_parameters_are_one_line_422s(http, change, words):
    assert words in _refused(http, "/aggregates", {"name": "bad", **PRIVATE, **change})
    assert http.get("/aggregates/bad").status_code == 404
