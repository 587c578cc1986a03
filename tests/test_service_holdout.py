"""The service keeps a stream's hold-out apart from its state, one sealed row per batch: fed in many batches, and
read back by another process between them, a stream releases exactly what one batch does; the rows go when the
hold-out ends; with a database key no held-out value is in clear; a database of schema version 1 continues."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.release import PAK, ToPLCollector, ToPS
from dpstream.service import create_app
from dpstream.service.mechanisms import APART_FORMAT, derive_key, snapshot
from dpstream.service.storage import SCHEMA_VERSION, open_storage

TOKEN = "holdout-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARAMS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 300, "max_range": 4096}
DATABASE_KEY = bytes(range(32))
CLASSES = {"tops": ToPS, "pak": PAK}


def _values(size: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 80.0, size)  # distinct doubles: their bytes are recognizable


def _app(path, database_key=None):
    return create_app(database=f"sqlite:///{path}", token=TOKEN, database_key=database_key)


def _send(http, name, values, first):
    answer = http.post(f"/streams/{name}/values", json={"values": values.tolist(), "first_position": first},
                       headers=AUTH)
    assert answer.status_code == 200, answer.text
    return answer.json()["released"]


def _rows(path) -> list[tuple]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT source_id, first_position, count, secret_values FROM holdout "
                                  "ORDER BY first_position").fetchall()


@pytest.mark.parametrize("method", list(CLASSES))
def test_a_hold_out_fed_in_many_batches_by_two_processes_releases_what_one_batch_does(tmp_path, method):
    path = tmp_path / "service.db"
    values = _values(700)
    first, second = _app(path), _app(path)  # two processes on one file: each batch finds its copy left behind
    try:
        https = [TestClient(first), TestClient(second)]
        answer = https[0].post("/streams", json={"name": "s", "method": method, **PARAMS, "seed": 5}, headers=AUTH)
        assert answer.status_code == 201, answer.text
        released, cuts = [], [0, 1, 2, 50, 51, 170, 299, 300, 301, 450, 700]
        for index, (start, end) in enumerate(zip(cuts, cuts[1:])):
            released += _send(https[index % 2], "s", values[start:end], start)
            rows = _rows(path)
            if end < PARAMS["hold"]:  # one row per batch so far, in position order, nothing in the state
                assert [(row[1], row[2]) for row in rows] == [(a, b - a) for a, b in zip(cuts, cuts[1:index + 2])]
                state = first.state.storage.source("stream", "s", secret=True).state
                assert json.loads(state)["format"] == APART_FORMAT and len(state) < 2000
            else:
                assert rows == []  # the hold-out is over: its raw values are gone
    finally:
        first.state.storage.close()
        second.state.storage.close()
    expected = CLASSES[method](**PARAMS, key=derive_key(5)).release(values)
    assert [row["position"] for row in released] == list(range(PARAMS["hold"], 700))
    assert np.array_equal([row["value"] for row in released], expected)  # bit for bit


def test_a_collectors_held_reports_are_stored_apart_and_choose_the_same_theta(tmp_path):
    from dpstream.noise.bits import make_bits

    params = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 200, "max_range": 1024}
    path = tmp_path / "service.db"
    local, bits, values = ToPLCollector(**params), make_bits(4), _values(200)
    app = _app(path)
    try:
        http = TestClient(app)
        assert http.post("/collectors", json={"name": "c", **params}, headers=AUTH).status_code == 201
        for start, end in ((0, 60), (60, 150), (150, 200)):
            if start == 60:  # the next batches are taken by a process that reads the hold-out from its rows
                app.state.storage.close()
                app = _app(path)
                http = TestClient(app)
            batch = local.client().report_batch(values[start:end], bits=bits)  # the hold-out's Square Wave reports
            local.receive_batch(batch.mechanism, batch.report)
            answer = http.post("/collectors/c/reports", headers=AUTH, content=batch.to_json(),
                               params={"first_position": start})
            assert answer.status_code == 200, answer.text
            assert len(_rows(path)) == (0 if end == params["hold"] else 1 + (start > 0))
        assert http.get("/collectors/c").json()["threshold"] == local.threshold is not None
    finally:
        app.state.storage.close()


def test_with_a_database_key_no_held_out_value_is_in_clear(tmp_path):
    values = _values(250)
    for key, clear in ((None, True), (DATABASE_KEY, False)):
        path = tmp_path / f"{clear}.db"
        app = _app(path, key)
        try:
            http = TestClient(app)
            http.post("/streams", json={"name": "s", "method": "tops", **PARAMS, "seed": 5}, headers=AUTH)
            for start in range(0, 250, 50):
                _send(http, "s", values[start:start + 50], start)
        finally:
            app.state.storage.close()
        rows = _rows(path)
        assert len(rows) == 5
        data = path.read_bytes() + (tmp_path / f"{clear}.db-wal").read_bytes()
        # every value's 8 bytes (and a row's worth of them) are in the files only without a key
        assert all((value.tobytes() in data) == clear for value in values)
        assert all((values[row[1]:row[1] + row[2]].tobytes() in bytes(row[3])) == clear for row in rows)
        if not clear:  # and a sealed row does not open as another row (its position is its associated data)
            opened = open_storage(f"sqlite:///{path}", database_key=key)
            with sqlite3.connect(path) as connection:
                connection.execute("UPDATE holdout SET secret_values = ? WHERE first_position = 50", (rows[2][3],))
            with pytest.raises(Exception, match="does not open with this key"):
                opened.source("stream", "s", secret=True)
            opened.close()


def test_a_database_of_schema_version_1_with_its_hold_out_in_the_state_continues(tmp_path):
    path = tmp_path / "service.db"
    values = _values(600)
    app = _app(path)
    try:
        http = TestClient(app)
        http.post("/streams", json={"name": "s", "method": "tops", **PARAMS, "seed": 5}, headers=AUTH)
        _send(http, "s", values[:120], 0)
    finally:
        app.state.storage.close()
    older = ToPS(**PARAMS, key=derive_key(5))
    older.release(values[:120])
    with sqlite3.connect(path) as connection:  # as version 1 left it: the held-out values inside the state
        connection.execute("UPDATE sources SET secret_state = ?", (snapshot(older),))
        connection.execute("DROP TABLE holdout")
        connection.execute("ALTER TABLE sources DROP COLUMN archived")  # added by version 3
        connection.execute("UPDATE dpstream_schema SET version = 1")
    app = _app(path)
    try:
        assert app.state.storage.schema_version() == SCHEMA_VERSION
        http = TestClient(app)
        released = _send(http, "s", values[120:200], 120)
        assert [(row[1], row[2]) for row in _rows(path)] == [(0, 200)]  # the first batch moves them all to a row
        released += _send(http, "s", values[200:600], 200)
    finally:
        app.state.storage.close()
    expected = ToPS(**PARAMS, key=derive_key(5)).release(values)
    assert np.array_equal([row["value"] for row in released], expected) and _rows(path) == []
