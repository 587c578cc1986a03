"""Archiving streams, collectors and aggregates (``DELETE /{kind}s/{name}``): no more batches in any process, key and
state erased, released values and ledger kept, the name kept taken."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.client import Client, ServiceError
from dpstream.service import create_app
from dpstream.service.storage import SCHEMA_VERSION, ArchivedError, ConflictError, open_storage

TOKEN = "archive-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STREAM = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 20, "max_range": 4096}
COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 50, "max_range": 4096, "buckets": 64}
AGGREGATE = {"epsilon": 1.0, "bucket": "30m", "unit_window": "1d", "unit_bound": 30.0, "upper_bound": 5.0}


def _app(url):
    return create_app(database=url, token=TOKEN)


@pytest.fixture
def app(tmp_path):
    application = _app(f"sqlite:///{tmp_path}/archive.db")
    yield application
    application.state.storage.close()


def _created(http, kind, body):
    answer = http.post(f"/{kind}s", json=body, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _values(n, seed=0):
    return np.random.default_rng(seed).integers(0, 60, n).astype(float)


def _row(database, kind, name):
    """The source's row as the database holds it, secret columns included, read without the service."""
    rows = database._query("SELECT id, secret_key, secret_state, archived FROM sources WHERE kind = ? AND name = ?",
                           (kind, name))
    return rows[0]


def _readable(http, kind, name):
    return (http.get(f"/{kind}s/{name}", headers=AUTH).json(),
            http.get(f"/{kind}s/{name}/released?limit=1000").json(),
            http.get(f"/{kind}s/{name}/ledger", headers=AUTH).json())


def test_an_archived_stream_refuses_batches_erases_its_secrets_and_keeps_what_it_released(app):
    http = TestClient(app)
    _created(http, "stream", {"name": "s", **STREAM, "seed": 3})
    values = _values(30)
    sent = http.post("/streams/s/values", json={"values": values.tolist()}, headers=AUTH)
    assert sent.status_code == 200 and len(sent.json()["released"]) == 10
    _created(http, "stream", {"name": "h", **STREAM, "hold": 100})  # still holding its values out
    assert http.post("/streams/h/values", json={"values": values.tolist()}, headers=AUTH).json()["released"] == []
    _, key, state, archived = _row(app.state.storage, "stream", "s")
    assert key and state and archived is None
    held_id = _row(app.state.storage, "stream", "h")[0]
    assert app.state.storage._query("SELECT COUNT(*) FROM holdout WHERE source_id = ?", (held_id,)) == [(1,)]
    before = _readable(http, "stream", "s")

    answer = http.delete("/streams/s", headers=AUTH)
    assert answer.status_code == 200, answer.text
    facts = answer.json()
    assert facts["archived"] is True and facts["archived_at"] and facts["position"] == 30
    _, key, state, archived = _row(app.state.storage, "stream", "s")
    assert bytes(key) == b"" and state == "" and archived == facts["archived_at"]
    assert http.delete("/streams/h", headers=AUTH).status_code == 200
    assert app.state.storage._query("SELECT COUNT(*) FROM holdout WHERE source_id = ?", (held_id,)) == [(0,)]
    with pytest.raises(ArchivedError, match="was archived"):
        app.state.storage.source("stream", "s", secret=True)

    refused = http.post("/streams/s/values", json={"values": [1.0, 2.0]}, headers=AUTH)
    assert refused.status_code == 410 and "archived" in refused.json()["message"]
    again = http.post("/streams/s/values", json={"values": values.tolist(), "first_position": 0}, headers=AUTH)
    assert again.status_code == 410  # a retry of the batch ingested is refused too: its key is gone
    described, released, ledger = _readable(http, "stream", "s")
    assert released == before[1] and ledger == before[2] and len(released["released"]) == 10
    assert {k: v for k, v in described.items() if k not in ("archived", "archived_at")} == before[0]
    assert described["archived"] is True and described["archived_at"] == facts["archived_at"]
    assert [s["archived"] for s in http.get("/streams").json()["streams"]] == [True, True]
    repeated = http.delete("/streams/s", headers=AUTH)  # archived again: the same answer, the first time kept
    assert repeated.status_code == 200 and repeated.json() == facts


def test_the_name_of_an_archived_source_stays_taken(app):
    http = TestClient(app)
    _created(http, "stream", {"name": "s", **STREAM})
    http.delete("/streams/s", headers=AUTH)
    answer = http.post("/streams", json={"name": "s", **STREAM}, headers=AUTH)
    assert answer.status_code == 409 and "archived" in answer.json()["message"]
    assert "choose another name" in answer.json()["message"]
    assert http.get("/streams/s").json()["archived"] is True
    _created(http, "collector", {"name": "s", **COLLECTOR})  # another kind's name is its own


def test_archiving_needs_the_token_and_a_source(app):
    http = TestClient(app)
    _created(http, "stream", {"name": "s", **STREAM})
    _created(http, "collector", {"name": "c", **COLLECTOR})
    _created(http, "aggregate", {"name": "g", **AGGREGATE})
    for path in ("/streams/s", "/collectors/c", "/aggregates/g"):
        assert http.delete(path).status_code == 401
        assert http.delete(path, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 403
    assert "archived" not in http.get("/streams/s").json()
    for path in ("/streams/none", "/collectors/none", "/aggregates/none"):
        answer = http.delete(path, headers=AUTH)
        assert answer.status_code == 404 and "no " in answer.json()["message"]


def test_a_collector_and_an_aggregate_archive_alike_through_the_client(app):
    http = TestClient(app)
    client = Client("http://testserver", TOKEN, http=http)
    client.create_collector("c", **COLLECTOR)
    client.create_aggregate("g", seed=5, **AGGREGATE)
    client.send_rows("g", [1_704_067_200, 1_704_070_000], ["a", "b"], [1.0, 2.0], flush=True)
    before = {kind: _readable(http, kind, name) for kind, name in (("collector", "c"), ("aggregate", "g"))}
    assert client.archive("collector", "c")["archived"] is True
    assert client.archive("aggregate", "g")["archived"] is True
    for kind, name in (("collector", "c"), ("aggregate", "g")):
        _, key, state, archived = _row(app.state.storage, kind, name)
        assert bytes(key) == b"" and state == "" and archived is not None
        assert _readable(http, kind, name)[1:] == before[kind][1:]
    with pytest.raises(ServiceError) as refused:
        client.send_rows("g", [1_704_080_000], ["a"], [1.0])
    assert refused.value.status == 410 and "archived" in refused.value.message
    assert http.get("/collectors/c/parameters").status_code == 410
    reports = http.post("/collectors/c/reports", content=b'{"x": 1}', headers=AUTH)
    assert reports.status_code in (410, 422)  # a malformed batch is refused before the collector is read
    with pytest.raises(ValueError, match="kind must be"):
        client.archive("streams", "s")


def test_a_process_holding_the_source_in_memory_refuses_a_batch_after_another_archived_it(database_url):
    first, second = _app(database_url), _app(database_url)
    try:
        one, two = TestClient(first), TestClient(second)
        _created(one, "stream", {"name": "s", **STREAM})
        assert one.post("/streams/s/values", json={"values": _values(25).tolist()}, headers=AUTH).status_code == 200
        assert two.post("/streams/s/values", json={"values": _values(5, 1).tolist()},
                        headers=AUTH).status_code == 200  # the second process holds the mechanism now
        ledger = two.get("/streams/s/ledger").json()
        assert one.delete("/streams/s", headers=AUTH).status_code == 200
        refused = two.post("/streams/s/values", json={"values": [1.0]}, headers=AUTH)
        assert refused.status_code == 410 and "archived" in refused.json()["message"]
        assert two.get("/streams/s/ledger").json() == ledger and two.get("/streams/s").json()["position"] == 30
    finally:
        first.state.storage.close()
        second.state.storage.close()


def test_a_batch_racing_the_archive_commits_nothing(app, monkeypatch):
    """The batch read the live row, then another process archived it before the commit: the commit is refused."""
    http = TestClient(app)
    _created(http, "stream", {"name": "s", **STREAM})
    storage = app.state.storage
    commit = storage.commit_batch

    def archived_first(**batch):
        storage.archive("stream", "s")  # as another process would, between the read and the commit
        return commit(**batch)

    monkeypatch.setattr(storage, "commit_batch", archived_first)
    refused = http.post("/streams/s/values", json={"values": _values(25).tolist()}, headers=AUTH)
    assert refused.status_code == 410, refused.text
    assert storage._query("SELECT COUNT(*) FROM ledger") == [(0,)]
    assert storage._query("SELECT COUNT(*) FROM released") == [(0,)]
    assert http.get("/streams/s").json()["position"] == 0


def test_a_database_of_schema_version_2_gains_the_archive_column_and_an_encrypted_one_archives(database_url):
    storage = open_storage(database_url, database_key=bytes(range(32)))
    storage.create_source(kind="stream", name="s", params={}, public={}, key=b"k" * 32, state='{"held": "raw"}')
    with storage._transaction() as cursor:  # as version 2 left it: no archived column
        cursor.execute("ALTER TABLE sources DROP COLUMN archived")
        cursor.execute("UPDATE dpstream_schema SET version = 2")
    storage.close()
    storage = open_storage(database_url, database_key=bytes(range(32)))
    try:
        assert storage.schema_version() == SCHEMA_VERSION
        assert storage.source("stream", "s", secret=True).state == '{"held": "raw"}'  # the sealed state still opens
        archived = storage.archive("stream", "s")
        assert archived.archived is not None and storage.archive("stream", "s") == archived
        _, key, state, _ = _row(storage, "stream", "s")
        assert bytes(key) == b"" and state == ""  # erased, not sealed: nothing of the old key is left
        with pytest.raises(ArchivedError):
            storage.position("stream", "s")
        with pytest.raises(ConflictError, match="was archived"):
            storage.create_source(kind="stream", name="s", params={}, public={}, key=b"n" * 32, state="{}")
        assert storage.archive("stream", "none") is None
    finally:
        storage.close()
