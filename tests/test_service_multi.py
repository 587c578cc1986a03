"""Several service processes on one database, SQLite and PostgreSQL: concurrent creations, writers whose batches
alternate between processes or race each other, processes started at once on a fresh database.

Two applications made by ``create_app`` on one database URL are two processes as far as the database can tell
(each has its own connection and its own mechanisms in memory); the last test runs real ``dpstream serve``
processes.  The reference of every released value is the library's release with the stream's key, which is
what one process releases (tests/test_service_api.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.client import ToPLClient
from dpstream.noise.bits import make_bits
from dpstream.release import BinaryTreeCounter, ToPLCollector, ToPS
from dpstream.service import create_app
from dpstream.service.mechanisms import derive_key
from dpstream.service.storage import SCHEMA_VERSION, open_storage
from service_helpers import ServeProcess

TOKEN = "multi-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOPS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 100, "max_range": 4096}
BT = {"epsilon": 1.0, "upper_bound": 100.0, "max_range": 4096}
COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 300, "max_range": 4096, "buckets": 64}
SEED = 11


@pytest.fixture
def apps(database_url):
    """Two applications on one fresh database, as two processes would be."""
    made = [create_app(database=database_url, token=TOKEN) for _ in range(2)]
    yield made
    for app in made:
        app.state.storage.close()


def _values(n, seed=0):
    return np.random.default_rng(seed).integers(0, 80, n).astype(float)


def _post(app, path, document):
    return TestClient(app).post(path, json=document, headers=AUTH)


def test_concurrent_creations_over_two_processes_take_each_name_once(apps):
    requests = [(kind, f"{kind[0]}{i}", process) for kind, count in (("stream", 24), ("collector", 8))
                for i in range(count) for process in (0, 1)]
    order = np.random.default_rng(1).permutation(len(requests))

    def create(index):
        kind, name, process = requests[index]
        params = {**TOPS, "seed": SEED} if kind == "stream" else COLLECTOR
        return kind, name, _post(apps[process], f"/{kind}s", {"name": name, **params}).status_code

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(create, order.tolist()))
    assert {status for _, _, status in answers} <= {201, 409}
    created = sorted((kind, name) for kind, name, status in answers if status == 201)
    assert created == sorted({(kind, name) for kind, name, _ in requests})  # every name once
    storage = apps[0].state.storage
    ids = [source.id for kind in ("stream", "collector") for source in storage.sources(kind)]
    assert len(ids) == len(set(ids)) == len(created)
    for app in apps:
        http = TestClient(app)
        for kind, name in created:
            assert http.get(f"/{kind}s/{name}").status_code == 200


def test_writers_alternating_between_processes_release_what_one_process_does(apps):
    methods = {"t": ("tops", TOPS, ToPS), "b": ("bt", BT, BinaryTreeCounter)}
    data = {name: _values(1200, seed=index) for index, name in enumerate(methods)}
    for name, (method, params, _) in methods.items():
        assert _post(apps[0], "/streams", {"name": name, "method": method, **params, "seed": SEED}).status_code == 201

    def write(name):  # batch i goes to process i % 2, as a round-robin balancer sends them
        released = []
        for i, first in enumerate(range(0, 1200, 100)):
            answer = _post(apps[i % 2], f"/streams/{name}/values",
                           {"values": data[name][first:first + 100].tolist(), "first_position": first})
            assert answer.status_code == 200, answer.text
            released += answer.json()["released"]
        return released

    with ThreadPoolExecutor(len(methods)) as pool:
        results = dict(zip(methods, pool.map(write, methods)))
    for name, (_, params, cls) in methods.items():
        expected = cls(**params, key=derive_key(SEED)).release(data[name])
        held = 1200 - expected.size
        assert [r["position"] for r in results[name]] == list(range(held, 1200))
        assert [r["value"] for r in results[name]] == expected.tolist()
        for app in apps:
            assert TestClient(app).get(f"/streams/{name}").json()["position"] == 1200
            ledger = TestClient(app).get(f"/streams/{name}/ledger?limit=100").json()["ledger"]
            assert [row["first_position"] for row in ledger] == list(range(0, 1200, 100))


def test_a_batch_sent_to_both_processes_at_once_is_ingested_once(apps):
    values = _values(800, seed=5)
    assert _post(apps[0], "/streams", {"name": "s", **TOPS, "seed": SEED}).status_code == 201
    released = []
    with ThreadPoolExecutor(2) as pool:
        for first in range(0, 800, 100):  # a client that retries through the other process before an answer
            document = {"values": values[first:first + 100].tolist(), "first_position": first}
            answers = list(pool.map(_post, apps, ["/streams/s/values"] * 2, [document] * 2))
            assert [answer.status_code for answer in answers] == [200, 200], [a.text for a in answers]
            assert answers[0].json() == answers[1].json()
            released += answers[0].json()["released"]
    assert [r["value"] for r in released] == ToPS(**TOPS, key=derive_key(SEED)).release(values).tolist()
    assert TestClient(apps[1]).get("/streams/s").json()["position"] == 800


def test_writers_appending_through_both_processes_at_once_get_contiguous_positions(apps):
    hold, size, batches, writers = TOPS["hold"], TOPS["hold"], 6, 4  # one batch fills the hold-out
    assert _post(apps[0], "/streams", {"name": "s", **TOPS, "seed": SEED}).status_code == 201
    data = [_values(size * batches, seed=20 + writer).reshape(batches, size) for writer in range(writers)]

    def write(writer):  # no first_position: each batch goes wherever the stream is when it is committed
        return [_post(apps[writer % 2], "/streams/s/values", {"values": batch.tolist()}) for batch in data[writer]]

    with ThreadPoolExecutor(writers) as pool:
        answers = list(pool.map(write, range(writers)))
    total = writers * batches * size
    ordered = np.full(total, np.nan)
    released = {}
    for writer, batch_answers in enumerate(answers):
        for batch, answer in zip(data[writer], batch_answers):
            assert answer.status_code == 200, answer.text
            rows = answer.json()["released"]
            # where a batch's released values start tells where it landed; the one that released none is the hold-out
            start = rows[0]["position"] if rows else 0
            assert len(rows) == (size if start else 0)
            for row in rows:
                released[row["position"]] = row["value"]
            assert np.isnan(ordered[start:start + size]).all()
            ordered[start:start + size] = batch
    assert not np.isnan(ordered).any()
    assert sorted(released) == list(range(hold, total))
    expected = ToPS(**TOPS, key=derive_key(SEED)).release(ordered)
    assert [released[p] for p in range(hold, total)] == expected.tolist()
    assert TestClient(apps[0]).get("/streams/s").json()["position"] == total


def test_a_collector_serves_and_accepts_the_theta_another_process_published(apps):
    assert _post(apps[0], "/collectors", {"name": "c", **COLLECTOR}).status_code == 201
    before = TestClient(apps[1]).get("/collectors/c/parameters").text  # the second process has it in memory
    values = _values(900, seed=3)
    first = ToPLClient("http://testserver", "c", TOKEN, bits=11, http=TestClient(apps[0])).send(values[:300])
    assert first == [] and TestClient(apps[0]).get("/collectors/c").json()["threshold"] is not None
    after = TestClient(apps[1]).get("/collectors/c/parameters").text
    assert after != before and after == TestClient(apps[0]).get("/collectors/c/parameters").text
    released = ToPLClient("http://testserver", "c", TOKEN, bits=12, http=TestClient(apps[1])).send(values[300:])
    local = ToPLCollector(**COLLECTOR)
    for part, bits in ((values[:300], 11), (values[300:], 12)):
        batch = local.client().report_batch(part, bits=make_bits(bits))
        expected = local.receive_batch(batch.mechanism, batch.report)
    assert [r["value"] for r in released] == expected.tolist()
    assert [r["position"] for r in released] == list(range(300, 900))


def test_a_postgresql_writer_of_a_source_waits_for_another_process(postgres_server, monkeypatch):
    from dpstream.service import storage as module

    url = postgres_server.new_database()
    first, second = open_storage(url), open_storage(url)
    order = []

    def write_second():
        with second.writer(7):
            order.append("second")

    try:
        with first.writer(7):
            waiting = threading.Thread(target=write_second)
            with second.writer(8):  # another source: not held up
                order.append("other")
            waiting.start()
            waiting.join(0.3)
            order.append("first")
        waiting.join(5)
        assert order == ["other", "first", "second"]
        monkeypatch.setattr(module, "WRITER_WAIT_SECONDS", 0.2)
        with first.writer(7), pytest.raises(module.ConflictError, match="another process has been writing"):
            with second.writer(7):
                pass
    finally:
        first.close()
        second.close()


def test_processes_started_at_once_on_a_fresh_database_share_one_schema(database_url):
    barrier = threading.Barrier(4)

    def start(_):
        barrier.wait()
        return open_storage(database_url)

    with ThreadPoolExecutor(4) as pool:
        storages = list(pool.map(start, range(4)))
    try:
        assert [storage.schema_version() for storage in storages] == [SCHEMA_VERSION] * 4
        assert storages[0]._query("SELECT COUNT(*) FROM dpstream_schema") == [(1,)]
    finally:
        for storage in storages:
            storage.close()


def test_two_serve_processes_started_at_once_share_one_database(database_url, tmp_path):
    servers = [ServeProcess(database_url, token=TOKEN).launch() for _ in range(2)]
    try:
        for server in servers:
            server.wait()
        clients = [httpx.Client(base_url=server.url, headers=AUTH, timeout=30) for server in servers]
        names = [(f"s{i}", process) for i in range(30) for process in (0, 1)]
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(
                lambda job: clients[job[1]].post("/streams", json={"name": job[0], **TOPS, "seed": SEED}).status_code,
                names))
        assert sorted(statuses) == [201] * 30 + [409] * 30
        values = _values(21_000, seed=8)
        single = create_app(database=f"sqlite:///{tmp_path}/single.db", token=TOKEN)  # one process, the same seed
        assert _post(single, "/streams", {"name": "s0", **TOPS, "seed": SEED}).status_code == 201
        released, alone = [], []
        for i, first in enumerate(range(0, 1000, 125)):
            document = {"values": values[first:first + 125].tolist(), "first_position": first}
            answer = clients[i % 2].post("/streams/s0/values", json=document)
            assert answer.status_code == 200, answer.text
            released += answer.json()["released"]
            alone += _post(single, "/streams/s0/values", document).json()["released"]
        for server in servers:  # no request failed (a 500 is logged)
            assert "failed" not in server.log.read_text(), server.log.read_text()[-2000:]
        # the first process is killed while it may be writing a large batch: the other one takes the batch on
        document = {"values": values[1000:].tolist(), "first_position": 1000}
        killer = threading.Timer(0.03, servers[0].kill)
        killer.start()
        try:
            clients[0].post("/streams/s0/values", json=document)
        except httpx.TransportError:
            pass
        killer.join()
        answer = clients[1].post("/streams/s0/values", json=document)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        alone += _post(single, "/streams/s0/values", document).json()["released"]
        single.state.storage.close()
        assert [r["value"] for r in released] == [r["value"] for r in alone]
        assert [r["position"] for r in released] == [r["position"] for r in alone] == list(range(100, 21_000))
        assert clients[1].get("/streams/s0").json()["position"] == 21_000
        for client in clients:
            client.close()
    finally:
        for server in servers:
            server.stop()
