"""The service's storage, the same tests on SQLite and on a PostgreSQL server of the tests' own."""

from __future__ import annotations

import os
import re
import sqlite3
import stat

import numpy as np
import pytest

from dpstream.service.secrets import SecretError
from dpstream.service.storage import (
    SCHEMA_VERSION,
    ConflictError,
    DatabaseKeyError,
    SchemaError,
    StorageError,
    open_storage,
)

PUBLIC = {"threshold": None, "privacy": {"epsilon": 1.0, "delta": 0.0, "statement": "1-DP"}}


@pytest.fixture
def storage(database_url):
    opened = open_storage(database_url)
    yield opened
    opened.close()


def _source(storage, name="s", kind="stream"):
    return storage.create_source(kind=kind, name=name, params={"method": "tops", "epsilon": 1.0}, public=PUBLIC,
                                 key=b"\x00secret-key\xff" * 2, state='{"format": "x"}')


def _commit(storage, source, first, count, released, state="s1"):
    positions = np.arange(first + count - released, first + count)
    storage.commit_batch(source=source, first_position=first, count=count, digest=f"d{first}", state=state,
                         public={**PUBLIC, "threshold": 3.0}, epsilon=1.0, delta=0.0, positions=positions,
                         times=positions * 0.5, values=positions * 0.25)


def test_sources_are_created_once_and_read_back_with_secrets_only_on_request(storage):
    made = _source(storage)
    assert storage.source("stream", "s").id == made.id
    public = storage.source("stream", "s")
    assert public.key is None and public.state is None
    secret = storage.source("stream", "s", secret=True)
    assert secret.key == b"\x00secret-key\xff" * 2 and secret.state == '{"format": "x"}'
    assert all(s.key is None and s.state is None for s in storage.sources("stream"))
    with pytest.raises(ConflictError, match="exists already"):
        _source(storage)
    _source(storage, kind="collector")  # another kind, its own names
    assert [s.name for s in storage.sources("collector")] == ["s"]
    assert storage.source("stream", "missing") is None


def test_a_batch_commits_its_values_ledger_and_state_together(storage):
    source = _source(storage)
    _commit(storage, source, 0, 10, 4, state="after-10")
    row = storage.source("stream", "s", secret=True)
    assert (row.position, row.released, row.state, row.public["threshold"]) == (10, 4, "after-10", 3.0)
    assert storage.released(source.id, after=None, limit=100) == [(p, p * 0.5, p * 0.25) for p in range(6, 10)]
    entry = storage.ledger_entry(source.id, 0)
    assert (entry.count, entry.digest, entry.epsilon) == (10, "d0", 1.0)
    assert storage.ledger_entry(source.id, 5) is None


def test_a_batch_from_a_stale_position_writes_nothing(storage):
    source = _source(storage)
    _commit(storage, source, 0, 10, 10, state="after-10")
    with pytest.raises(ConflictError):
        _commit(storage, source, 0, 10, 10, state="stale")
    row = storage.source("stream", "s", secret=True)
    assert (row.position, row.state) == (10, "after-10")
    assert len(storage.released(source.id, after=None, limit=100)) == 10
    assert len(storage.ledger(source.id)) == 1


def test_a_failure_inside_the_transaction_rolls_everything_back(storage):
    source = _source(storage)
    _commit(storage, source, 0, 10, 10)
    positions = np.array([10, 10])  # the second row breaks the primary key after the state was updated
    with pytest.raises(Exception):  # noqa: B017  (sqlite3 or psycopg's integrity error)
        storage.commit_batch(source=source, first_position=10, count=2, digest="d", state="broken",
                             public=PUBLIC, epsilon=1.0, delta=0.0, positions=positions, times=positions * 1.0,
                             values=positions * 1.0)
    row = storage.source("stream", "s", secret=True)
    assert (row.position, row.state) == (10, "s1")
    assert storage.ledger_entry(source.id, 10) is None


def test_released_pages_in_position_order(storage):
    source = _source(storage)
    _commit(storage, source, 0, 50, 50)
    first = storage.released(source.id, after=None, limit=20)
    assert [r[0] for r in first] == list(range(20))
    assert [r[0] for r in storage.released(source.id, after=first[-1][0], limit=20)] == list(range(20, 40))
    assert [r[0] for r in storage.released(source.id, after=39, limit=20)] == list(range(40, 50))
    assert storage.released(source.id, after=49, limit=20) == []
    assert [r[0] for r in storage.released(source.id, after=9, before=13, limit=20)] == [10, 11, 12]


def test_the_schema_is_versioned_and_a_reopened_database_continues(database_url):
    storage = open_storage(database_url)
    source = _source(storage)
    _commit(storage, source, 0, 5, 5)
    storage.close()
    again = open_storage(database_url)
    assert again.schema_version() == SCHEMA_VERSION
    assert again.source("stream", "s").position == 5
    again.close()


def test_a_database_of_a_newer_dpstream_is_refused(database_url):
    storage = open_storage(database_url)
    with storage._transaction() as cursor:
        cursor.execute(storage._sql("UPDATE dpstream_schema SET version = ?"), (SCHEMA_VERSION + 1,))
    storage.close()
    with pytest.raises(SchemaError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this dpstream"):
        open_storage(database_url)


def test_a_database_of_other_tables_is_refused(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE people (name TEXT)").connection.commit()
    os.chmod(path, 0o600)
    with pytest.raises(SchemaError, match=r"holds tables \(people\) but no dpstream schema"):
        open_storage(f"sqlite:///{path}")


def test_the_sqlite_file_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "secret.db"
    storage = open_storage(f"sqlite:///{path}")
    _commit(storage, _source(storage), 0, 3, 3)
    for name in (path, tmp_path / "secret.db-wal"):
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600, name
    storage.close()
    os.chmod(path, 0o644)
    with pytest.raises(StorageError, match="has mode 0644: it holds secret keys"):
        open_storage(f"sqlite:///{path}")


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_the_sqlite_wal_and_shm_files_are_the_owners_only(tmp_path, suffix):
    path = tmp_path / "secret.db"
    previous = os.umask(0)  # a umask that would let SQLite's own files be read by anyone
    try:
        storage = open_storage(f"sqlite:///{path}")
        _commit(storage, _source(storage), 0, 3, 3)
        for name in (path, tmp_path / "secret.db-wal", tmp_path / "secret.db-shm"):
            assert stat.S_IMODE(os.stat(name).st_mode) == 0o600, name
        storage.close()
    finally:
        os.umask(previous)
    companion = tmp_path / f"secret.db{suffix}"
    companion.touch()
    os.chmod(companion, 0o640)
    with pytest.raises(StorageError, match=re.escape(f"database file {companion} has mode 0640: it holds pages of the "
                                                     f"database and its secret keys") + ".*" +
                       re.escape(f"run chmod 600 {companion}.")):
        open_storage(f"sqlite:///{path}")
    os.chmod(companion, 0o600)
    again = open_storage(f"sqlite:///{path}")
    assert again.source("stream", "s").position == 3
    again.close()


@pytest.mark.parametrize("url, message", [
    ("mysql://x", "must start with sqlite:/// or postgresql://"),
    ("sqlite://", "names no file"),
    ("sqlite:////nonexistent-dir/x.db", "cannot open it"),
    ("postgresql://nobody:hidden-password@127.0.0.1:1/x", "database postgresql://127.0.0.1:1/x: "),
])
def test_bad_database_urls_are_one_clear_error(url, message):
    with pytest.raises(StorageError, match=re.escape(message)) as error:
        open_storage(url)
    assert "hidden-password" not in str(error.value) and "\n" not in str(error.value)


def test_an_older_database_is_migrated_or_refused(database_url, monkeypatch):
    from dpstream.service import storage as module

    opened = open_storage(database_url)
    with opened._transaction() as cursor:
        cursor.execute(opened._sql("UPDATE dpstream_schema SET version = ?"), (SCHEMA_VERSION - 1,))
    opened.close()
    monkeypatch.delitem(module.MIGRATIONS, SCHEMA_VERSION - 1)  # an older version no migration is known for
    with pytest.raises(SchemaError, match=f"cannot migrate to {SCHEMA_VERSION}"):
        open_storage(database_url)
    monkeypatch.setitem(module.MIGRATIONS, SCHEMA_VERSION - 1, ("CREATE TABLE migrated (x INTEGER)",))
    migrated = open_storage(database_url)
    assert migrated.schema_version() == SCHEMA_VERSION and migrated._query("SELECT COUNT(*) FROM migrated") == [(0,)]
    migrated.close()


DATABASE_KEY = bytes(range(32))


def test_a_database_key_seals_the_secret_columns(database_url):
    storage = open_storage(database_url, database_key=DATABASE_KEY)
    source = _source(storage)
    _commit(storage, source, 0, 3, 3, state='{"held": "raw values"}')
    secret = storage.source("stream", "s", secret=True)
    assert secret.key == b"\x00secret-key\xff" * 2 and secret.state == '{"held": "raw values"}'
    raw = storage._query("SELECT secret_key, secret_state FROM sources")
    assert b"secret-key" not in bytes(raw[0][0]) and "raw values" not in raw[0][1]
    storage.close()
    again = open_storage(database_url, database_key=DATABASE_KEY)
    assert again.source("stream", "s", secret=True).state == '{"held": "raw values"}'
    again.close()
    with pytest.raises(DatabaseKeyError, match="keeps its secrets encrypted: give the service its key"):
        open_storage(database_url)
    with pytest.raises(DatabaseKeyError, match="not the one its secrets were encrypted with"):
        open_storage(database_url, database_key=bytes(32))


def test_a_sealed_secret_cannot_move_to_another_row(database_url):
    storage = open_storage(database_url, database_key=DATABASE_KEY)
    _source(storage, "a")
    _source(storage, "b")
    with storage._transaction() as cursor:  # copy a's sealed key over b's
        cursor.execute("SELECT secret_key FROM sources WHERE name = 'a'")
        sealed = cursor.fetchall()[0][0]
        cursor.execute(storage._sql("UPDATE sources SET secret_key = ? WHERE name = 'b'"), (sealed,))
    with pytest.raises(SecretError, match=r"does not open with this key \(stream/b/secret_key\)"):
        storage.source("stream", "b", secret=True)
    storage.close()


def test_a_key_for_a_database_made_without_one_is_refused(database_url):
    open_storage(database_url).close()
    with pytest.raises(DatabaseKeyError, match="was made without a database key"):
        open_storage(database_url, database_key=DATABASE_KEY)
