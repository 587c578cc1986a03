"""Where the service keeps everything: one interface, SQLite (stdlib ``sqlite3``) or PostgreSQL (psycopg 3).

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``dpstream_schema``):

* ``sources`` -- one row per stream, collector or aggregate: its public ``params`` and ``public`` facts
  (JSON: theta, position, privacy statement), its ``position`` (inputs consumed) and
  ``released`` count, and two SECRET columns: ``secret_key`` (the key its noise is derived
  from) and ``secret_state`` (the mechanism's state: held-out raw values, noise).  No method
  that lists or reads sources for an answer returns the secret columns (:class:`Source` has
  them only when asked with ``secret=True``, for the mechanism's own use).
* ``released`` -- every released value with its position and time.
* ``ledger`` -- one row per ingested batch: its first position, length, a digest of its
  content (an HMAC under the source's key, by which an idempotent retry is recognized; not
  served), the budget it was released under and when.
* ``holdout`` -- the held-out values of a source whose hold-out is not over, one SECRET row per
  batch (its first position, count and values), kept apart from ``secret_state`` so that a batch
  appends its own values rather than rewriting them all; deleted in the batch that ends the hold-out
  (raw data the release no longer needs).

:meth:`Storage.archive` erases a source's key, state and held-out rows and records when in ``sources.archived``;
its released values and ledger stay, its name stays taken, and no batch commits on it (:meth:`Storage.commit_batch`
commits on a live row only, so a batch of another process racing the archive writes nothing).

:meth:`Storage.commit_batch` writes a batch's released values, its ledger row, the new
secret state and the batch's held-out values in ONE transaction, and only if the source is still
at the position the batch started from: a crash at any moment leaves either all of them or none.

Several processes may share one database.  Every write is one transaction whose outcome the database
decides: a batch commits only at the position it started from (a second process's batch at the same
position finds it moved and writes nothing), and the creation of a source and of the schema are
serialized -- SQLite's writers by ``BEGIN IMMEDIATE``, PostgreSQL's by a transaction-scoped advisory
lock -- so ids come from the rows committed before (never two alike) and a name is taken once.  On
PostgreSQL the writers of one source also wait for each other while a batch is computed
(:meth:`PostgresStorage.writer`), so that a batch seldom has to be computed again.

With a database key (:mod:`~dpstream.service.secrets`) the two secret columns and the held-out rows
are sealed with AES-256-GCM before they are written (a row's associated data names its source and
first position, so it cannot be moved or reordered); ``dpstream_schema.encryption`` records that the database is
encrypted (a sealed check value), so a missing or wrong key is refused at start.

A database made by another schema version is migrated when a migration is known
(:data:`~dpstream.service.schema.MIGRATIONS`), and refused with a clear error when it is newer than
this dpstream.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np

from dpstream.service.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    ArchivedError,
    DatabaseKeyError,
    SchemaError,
    StorageError,
    prepare_schema,
)
from dpstream.service.secrets import SecretBox
from dpstream.service.sqlite_files import secure_file

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ArchivedError",
    "ConflictError",
    "DatabaseKeyError",
    "HeldRows",
    "LedgerRow",
    "PostgresStorage",
    "SQLiteStorage",
    "SchemaError",
    "Source",
    "Storage",
    "StorageError",
    "open_storage",
]

_KINDS = ("stream", "collector", "aggregate")

#: PostgreSQL advisory lock keys (see :meth:`Storage._serialize`): the schema's creation and migration, and the
#: creation of sources.
SCHEMA_LOCK = 0x64707374_00000001
SOURCES_LOCK = 0x64707374_00000002
#: The first of the two keys of a source's writer lock (:meth:`PostgresStorage.writer`); the second is its id.
WRITER_LOCKS = 0x64707374
#: How long a batch waits for another process to finish writing the same source before it is refused (409).
WRITER_WAIT_SECONDS = 60.0


class ConflictError(Exception):
    """A write lost a race: the source is no longer at the position the batch started from, or exists already."""


@dataclass(frozen=True, kw_only=True)
class HeldRows:
    """Held-out values of one batch as stored: ``count`` values from ``first_position``, ``data`` their bytes."""

    first_position: int
    count: int
    data: bytes


@dataclass(frozen=True, kw_only=True)
class Source:
    """A stream or collector row.  ``key``, ``state`` and ``held`` (the bytes of the held-out values stored apart,
    in position order: see :meth:`Storage.source`) are SECRET and None unless read with ``secret=True``."""

    id: int
    kind: str
    name: str
    params: dict[str, Any]
    public: dict[str, Any]
    position: int
    released: int
    created: str
    #: When the source was archived (None while it is live).
    archived: str | None = None
    key: bytes | None = None
    state: str | None = None
    held: bytes | None = None


@dataclass(frozen=True, kw_only=True)
class LedgerRow:
    """One ingested batch: positions ``first_position .. first_position + count - 1``."""

    first_position: int
    count: int
    digest: str
    epsilon: float
    delta: float
    recorded: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


_PUBLIC_COLUMNS = "id, kind, name, params, public, position, released, created, archived"
_LEDGER_COLUMNS = "first_position, count, digest, epsilon, delta, recorded"


def _held_where(source: Source, first_position: int) -> str:
    """The associated data of a sealed held-out row: its source and first position."""
    return f"{source.kind}/{source.name}/holdout/{first_position}"


def _ledger_row(row: tuple) -> LedgerRow:
    return LedgerRow(first_position=int(row[0]), count=int(row[1]), digest=row[2], epsilon=float(row[3]),
                     delta=float(row[4]), recorded=row[5])


class Storage:
    """The service's database.  Subclasses provide the connection and the dialect; every method is thread-safe."""

    placeholder = "?"
    blob_type = "BLOB"
    real_type = "DOUBLE PRECISION"
    #: What follows the released table's definition: SQLite stores it in its primary key's order.
    clustered = ""
    #: The query of the names of the tables in the database.
    tables_query = ""

    def __init__(self, box: SecretBox | None = None) -> None:
        self._lock = threading.RLock()
        self._box = box
        self._connection: Any = None

    def _start(self, driver_error: type[Exception], refusal: Callable[[Exception], str], *setup: str) -> None:
        """Run the ``setup`` statements on the new connection and prepare the schema.  On any failure the
        connection is closed; a ``driver_error`` is raised again as a StorageError of message ``refusal(error)``."""
        try:
            for statement in setup:
                self._setup(statement)
            self._prepare_schema()
        except driver_error as error:
            self._connection.close()
            raise StorageError(refusal(error)) from None
        except BaseException:  # a refused schema or key: the connection goes with the storage
            self._connection.close()
            raise

    def _setup(self, statement: str) -> None:
        self._connection.execute(statement)

    # -- the dialect ---------------------------------------------------------------------------

    def _sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:  # pragma: no cover - each dialect has its own
        raise NotImplementedError
        yield

    @contextmanager
    def _reading(self) -> Iterator[Any]:  # pragma: no cover - each dialect has its own
        """A read-only transaction whose queries all see one snapshot of the database."""
        raise NotImplementedError
        yield

    def _query(self, text: str, args: Sequence[Any] = ()) -> list[tuple]:  # pragma: no cover
        raise NotImplementedError

    def _insert_released(self, cursor: Any, source_id: int, positions: np.ndarray, times: np.ndarray,
                         values: np.ndarray) -> None:
        cursor.executemany(self._sql("INSERT INTO released (source_id, position, time, value) VALUES (?, ?, ?, ?)"),
                           zip([source_id] * positions.size, positions.tolist(), times.tolist(), values.tolist()))

    def _serialize(self, cursor: Any, lock: int) -> None:
        """Wait, inside a transaction, until no other one of this ``lock`` runs, in any process; held until commit.

        Nothing to do for SQLite, whose ``BEGIN IMMEDIATE`` already admits one writer at a time."""

    @contextmanager
    def writer(self, source_id: int) -> Iterator[None]:
        """Hold the right to write the source while a batch is computed and committed, against every other process;
        ConflictError after :data:`WRITER_WAIT_SECONDS` of waiting.

        Nothing for SQLite: its commits are serialized and conditional on the position, a batch that loses the
        race is tried again (:func:`dpstream.service.ingest.ingest`)."""
        yield

    def _tables(self, cursor: Any) -> set[str]:
        cursor.execute(self.tables_query)
        return {row[0] for row in cursor.fetchall()}

    # -- the schema ----------------------------------------------------------------------------

    def _prepare_schema(self) -> None:
        with self._lock, self._transaction() as cursor:
            self._serialize(cursor, SCHEMA_LOCK)  # processes started at once: one creates, the others see it made
            prepare_schema(cursor, tables=self._tables(cursor), sql=self._sql, box=self._box, database=self.describe(),
                           words={"blob": self.blob_type, "real": self.real_type, "clustered": self.clustered})

    def _seal_key(self, key: bytes, kind: str, name: str) -> bytes:
        return key if self._box is None else self._box.seal(key, f"{kind}/{name}/secret_key")

    def _seal_state(self, state: str, kind: str, name: str) -> str:
        return state if self._box is None else self._box.seal_text(state, f"{kind}/{name}/secret_state")

    @property
    def encrypted(self) -> bool:
        """Whether the secret columns are sealed with a database key."""
        return self._box is not None

    def schema_version(self) -> int:
        """The schema version of the database."""
        return int(self._query("SELECT version FROM dpstream_schema")[0][0])

    def describe(self) -> str:  # pragma: no cover
        """The database, for messages (never with a password)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sources -------------------------------------------------------------------------------

    def create_source(self, *, kind: str, name: str, params: dict[str, Any], public: dict[str, Any], key: bytes,
                      state: str) -> Source:
        """Add a stream or collector; ConflictError if one of that kind has the name already."""
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}.")
        now = _now()
        with self._lock, self._transaction() as cursor:
            self._serialize(cursor, SOURCES_LOCK)  # the name check and MAX(id) see every source committed before
            cursor.execute(self._sql("SELECT archived FROM sources WHERE kind = ? AND name = ?"), (kind, name))
            rows = cursor.fetchall()
            if rows:
                raise ConflictError(f"a {kind} named {name!r} exists already." if rows[0][0] is None else
                                    f"a {kind} named {name!r} was archived at {rows[0][0]}; its name stays taken "
                                    "(its released values and ledger are kept under it): choose another name.")
            cursor.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM sources")
            source_id = int(cursor.fetchall()[0][0])
            cursor.execute(self._sql(
                "INSERT INTO sources (id, kind, name, params, public, position, released, secret_key, secret_state, "
                "created, updated) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?)"),
                (source_id, kind, name, json.dumps(params, allow_nan=False), json.dumps(public, allow_nan=False),
                 self._seal_key(key, kind, name), self._seal_state(state, kind, name), now, now))
        return Source(id=source_id, kind=kind, name=name, params=params, public=public, position=0, released=0,
                      created=now)

    def _source(self, row: tuple, secret: bool) -> Source:
        extra = {}
        if secret:
            if row[8] is not None:
                raise ArchivedError(row[1], row[2], row[8])
            key, state = bytes(row[9]), row[10]
            if self._box is not None:
                key = self._box.open(key, f"{row[1]}/{row[2]}/secret_key")
                state = self._box.open_text(state, f"{row[1]}/{row[2]}/secret_state")
            extra = {"key": key, "state": state}
        return Source(id=int(row[0]), kind=row[1], name=row[2], params=json.loads(row[3]), public=json.loads(row[4]),
                      position=int(row[5]), released=int(row[6]), created=row[7], archived=row[8], **extra)

    def source(self, kind: str, name: str, *, secret: bool = False) -> Source | None:
        """The stream or collector of that name, or None.  ``secret=True`` adds the key, the state and the held-out
        values stored apart (never serve them), read in one snapshot of the database: another process's batch
        committed meanwhile is in all of them or in none; ArchivedError for an archived source (they are gone)."""
        query = f"SELECT {_PUBLIC_COLUMNS} FROM sources WHERE kind = ? AND name = ?"
        if not secret:
            rows = self._query(query, (kind, name))
            return self._source(rows[0], False) if rows else None
        with self._lock, self._reading() as cursor:
            cursor.execute(self._sql(query.replace(" FROM", ", secret_key, secret_state FROM")), (kind, name))
            rows = cursor.fetchall()
            if not rows:
                return None
            cursor.execute(self._sql("SELECT first_position, count, secret_values FROM holdout WHERE source_id = ? "
                                     "ORDER BY first_position"), (rows[0][0],))
            held = cursor.fetchall()
        source = self._source(rows[0], True)
        return replace(source, held=self._open_held(source, held))

    def _open_held(self, source: Source, rows: list[tuple]) -> bytes:
        """The held-out values of ``rows`` (in position order), opened and joined; StorageError on a gap."""
        parts, expected = [], 0
        for first, count, data in rows:
            if int(first) != expected:
                raise StorageError(f"database {self.describe()}: the held-out values of {source.kind} "
                                   f"{source.name!r} jump from position {expected} to {int(first)}.")
            data = bytes(data)
            if self._box is not None:
                data = self._box.open(data, _held_where(source, expected))
            parts.append(data)
            expected += int(count)
        return b"".join(parts)

    def position(self, kind: str, name: str) -> tuple[int, int] | None:
        """The source's ``(id, position)`` as committed now (None when there is none): whether a mechanism kept in
        memory is still the database's (another process may have moved the source on).  ArchivedError once archived."""
        rows = self._query("SELECT id, position, archived FROM sources WHERE kind = ? AND name = ?", (kind, name))
        if rows and rows[0][2] is not None:
            raise ArchivedError(kind, name, rows[0][2])
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def archive(self, kind: str, name: str) -> Source | None:
        """Archive the source (None when there is none): record when, erase its key, state and held-out values in one
        transaction (nothing can derive or draw its noise again); archived again, it keeps its first time."""
        now = _now()
        with self._lock, self._transaction() as cursor:
            cursor.execute(self._sql("UPDATE sources SET archived = ?, updated = ?, secret_key = ?, secret_state = '' "
                                     "WHERE kind = ? AND name = ? AND archived IS NULL"), (now, now, b"", kind, name))
            cursor.execute(self._sql("DELETE FROM holdout WHERE source_id IN "
                                     "(SELECT id FROM sources WHERE kind = ? AND name = ?)"), (kind, name))
        return self.source(kind, name)

    def sources(self, kind: str) -> list[Source]:
        """Every stream (or collector), by name, public columns only."""
        rows = self._query(f"SELECT {_PUBLIC_COLUMNS} FROM sources WHERE kind = ? ORDER BY name", (kind,))
        return [self._source(row, False) for row in rows]

    # -- batches -------------------------------------------------------------------------------

    def commit_batch(self, *, source: Source, first_position: int, count: int, digest: str, state: str,
                     public: dict[str, Any], epsilon: float, delta: float, positions: np.ndarray, times: np.ndarray,
                     values: np.ndarray, held: HeldRows | None = None, forget_held: bool = False) -> None:
        """Commit one ingested batch in one transaction: released values, ledger row, secret state, public facts,
        and the batch's ``held`` values appended to the source's hold-out (``forget_held``: delete the source's
        held-out rows first, the hold-out is over).

        ConflictError (and nothing written) when the source is no longer at ``first_position`` or was archived
        meanwhile (by any process: the condition is the committing statement's own).  The state and
        the held-out values are sealed first when the storage has a database key.
        """
        now, source_id = _now(), source.id
        state = self._seal_state(state, source.kind, source.name)
        sealed = None if held is None or self._box is None else self._box.seal(held.data, _held_where(source,
                                                                                                  held.first_position))
        with self._lock, self._transaction() as cursor:
            cursor.execute(self._sql(
                "UPDATE sources SET position = position + ?, released = released + ?, secret_state = ?, public = ?, "
                "updated = ? WHERE id = ? AND position = ? AND archived IS NULL"),
                (count, int(positions.size), state, json.dumps(public, allow_nan=False), now, source_id,
                 first_position))
            if cursor.rowcount != 1:
                raise ConflictError(f"the source moved past position {first_position} while this batch was ingested.")
            cursor.execute(self._sql(
                "INSERT INTO ledger (source_id, first_position, count, digest, epsilon, delta, recorded) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)"), (source_id, first_position, count, digest, epsilon, delta, now))
            if positions.size:
                self._insert_released(cursor, source_id, positions, times, values)
            if forget_held:
                cursor.execute(self._sql("DELETE FROM holdout WHERE source_id = ?"), (source_id,))
            if held is not None:
                cursor.execute(self._sql("INSERT INTO holdout (source_id, first_position, count, secret_values) "
                                         "VALUES (?, ?, ?, ?)"),
                               (source_id, held.first_position, held.count, held.data if sealed is None else sealed))

    def ledger_entry(self, source_id: int, first_position: int) -> LedgerRow | None:
        """The batch that started at ``first_position``, or None."""
        rows = self._query(f"SELECT {_LEDGER_COLUMNS} FROM ledger WHERE source_id = ? AND first_position = ?",
                           (source_id, first_position))
        return _ledger_row(rows[0]) if rows else None

    def ledger(self, source_id: int, *, limit: int = 100) -> list[LedgerRow]:
        """The last ``limit`` batches, oldest first."""
        rows = self._query(f"SELECT {_LEDGER_COLUMNS} FROM ledger WHERE source_id = ? "
                           "ORDER BY first_position DESC LIMIT ?", (source_id, limit))
        return [_ledger_row(row) for row in reversed(rows)]

    def released(self, source_id: int, *, after: int | None, limit: int,
                 before: int | None = None) -> list[tuple[int, float, float]]:
        """Released ``(position, time, value)`` in position order: after ``after`` (all when None), before
        ``before`` (no end when None), at most ``limit``."""
        low = -1 if after is None else after
        end, bound = ("", ()) if before is None else (" AND position < ?", (before,))
        return self._query(f"SELECT position, time, value FROM released WHERE source_id = ? AND position > ?{end} "
                           "ORDER BY position LIMIT ?", (source_id, low, *bound, limit))


# -- SQLite ------------------------------------------------------------------------------------

#: How long a SQLite connection waits for another process's write before it gives up.
_BUSY_SECONDS = 10.0


class SQLiteStorage(Storage):
    """SQLite in WAL mode with ``synchronous=FULL``: a commit is on disk when it returns.

    The database file and its ``-wal`` and ``-shm`` files are created with mode 0600 (the latter two
    before SQLite opens them, whatever mode SQLite would give them), and an existing one that other
    users can read or write is refused: they hold the secret keys and states.

    Several processes on one machine may open the same file: WAL lets them read while one writes,
    ``BEGIN IMMEDIATE`` admits one writer at a time and the busy timeout makes the others wait for it.
    """

    clustered = " WITHOUT ROWID"
    tables_query = "SELECT name FROM sqlite_master WHERE type = 'table'"

    def __init__(self, path: str, *, box: SecretBox | None = None) -> None:
        super().__init__(box)
        self.path = path
        if path != ":memory:":
            for name in (path, f"{path}-wal", f"{path}-shm"):
                secure_file(name, path)
        try:
            self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as error:
            raise StorageError(f"database {path}: {error}.") from None
        self._start(sqlite3.DatabaseError, lambda error: f"database {path}: {error}.",
                    f"PRAGMA busy_timeout = {int(_BUSY_SECONDS * 1000)}", "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = FULL")

    def _setup(self, statement: str) -> None:
        """Run a statement of the start, waiting as the busy timeout would: SQLite refuses at once, rather than
        waits for, the change to WAL of a new file that another process is changing too (it could deadlock)."""
        deadline = time.monotonic() + _BUSY_SECONDS
        while True:
            try:
                self._connection.execute(statement)
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def describe(self) -> str:
        return f"sqlite:///{self.path}"

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        cursor = self._connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        cursor = self._connection.cursor()
        cursor.execute("BEGIN")  # deferred: in WAL mode its first read fixes the snapshot, and no writer waits
        try:
            yield cursor
        finally:
            cursor.execute("COMMIT")

    def _query(self, text: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._connection.execute(text, tuple(args)).fetchall()


# -- PostgreSQL --------------------------------------------------------------------------------

class PostgresStorage(Storage):
    """PostgreSQL through psycopg 3 (the ``postgres`` extra): one connection, one transaction per commit."""

    placeholder = "%s"
    blob_type = "BYTEA"
    tables_query = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"

    def __init__(self, url: str, *, box: SecretBox | None = None) -> None:
        super().__init__(box)
        try:
            import psycopg
        except ImportError:
            raise StorageError("a postgresql:// database needs the PostgreSQL driver: "
                               "pip install 'dpstream[postgres]'.") from None
        self._psycopg = psycopg
        parts = urlsplit(url)
        self._shown = f"postgresql://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"
        try:
            self._connection = psycopg.connect(url, autocommit=True)
        except psycopg.Error as error:
            raise StorageError(f"database {self._shown}: {_first_line(error)}") from None
        self._start(psycopg.Error, lambda error: f"database {self._shown}: {_first_line(error)}")

    def describe(self) -> str:
        return self._shown

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._connection.transaction(), self._connection.cursor() as cursor:
            yield cursor

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        with self._connection.transaction(), self._connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield cursor

    def _serialize(self, cursor: Any, lock: int) -> None:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))

    @contextmanager
    def writer(self, source_id: int) -> Iterator[None]:
        """A session advisory lock of the source, taken by polling ``pg_try_advisory_lock`` so that the waiting
        does not hold the connection the process's other requests share; PostgreSQL frees it if the process dies."""
        keys, pause = (WRITER_LOCKS, source_id % (1 << 31)), 0.001  # two int4 keys; a shared one only waits
        deadline = time.monotonic() + WRITER_WAIT_SECONDS
        while not self._query("SELECT pg_try_advisory_lock(?, ?)", keys)[0][0]:
            if time.monotonic() > deadline:
                raise ConflictError(f"another process has been writing this source for {WRITER_WAIT_SECONDS:g} s.")
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
        try:
            yield
        finally:
            self._query("SELECT pg_advisory_unlock(?, ?)", keys)

    def _query(self, text: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock, self._connection.cursor() as cursor:
            cursor.execute(self._sql(text), tuple(args))
            return cursor.fetchall()

    def _insert_released(self, cursor: Any, source_id: int, positions: np.ndarray, times: np.ndarray,
                         values: np.ndarray) -> None:
        with cursor.copy("COPY released (source_id, position, time, value) FROM STDIN") as copy:
            for row in zip([source_id] * positions.size, positions.tolist(), times.tolist(), values.tolist()):
                copy.write_row(row)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_storage(url: str, *, database_key: bytes | None = None) -> Storage:
    """The storage of a database URL: ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``postgresql://...``.

    ``database_key`` (32 bytes): seal the secret columns with it (:mod:`dpstream.service.secrets`).
    """
    box = None if database_key is None else SecretBox(database_key)
    if not isinstance(url, str):
        raise TypeError(f"database must be a URL string, got {url!r}.")
    if url.startswith("sqlite://"):
        path = unquote(url[len("sqlite://"):])
        if not path.startswith("/") or path == "/":
            raise StorageError(f"database URL {url!r} names no file; use sqlite:///FILE (relative) or "
                               "sqlite:////ABSOLUTE/FILE.")
        return SQLiteStorage(path[1:], box=box)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStorage(url, box=box)
    raise StorageError(f"database URL must start with sqlite:/// or postgresql://, got {url.split('://')[0]!r}.")
