"""The service database's tables, their version and the migrations of older ones; the errors of opening and using it.

Schema version :data:`SCHEMA_VERSION` is kept in ``dpstream_schema`` (with the sealed check value of
the database key, when there is one).  A database made by an older version is migrated by
:data:`MIGRATIONS` when it is opened, one version at a time in the transaction that checks it; one
made by a newer dpstream is refused.

Version 2 added ``holdout``: the held-out values of a source, one sealed row per batch, stored
apart from its state so that a batch appends its own values instead of rewriting all of them
(:mod:`dpstream.service.storage`).

Version 3 added ``sources.archived``: when the source was archived (NULL while it is live).  An archived
source takes no batch, and its key, state and held-out values are erased.

Version 4 added ``tokens``: the scoped bearer tokens (:mod:`dpstream.service.tokens`), each as the SHA-256 of the
token (never the token), its role and scope, its rate limit and the reports counted in its current window, and
when it was revoked.

Version 5 added ``budgets`` and ``budget_charges``: the service's budget stores
(:mod:`dpstream.service.budgets`), each a total in rho or epsilon with its subject, and the charge of each
source created against one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpstream.service.secrets import SecretBox, SecretError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "ArchivedError", "DatabaseKeyError", "SchemaError", "StorageError",
           "prepare_schema"]

#: The schema this dpstream writes; older ones are migrated by :data:`MIGRATIONS`, newer ones refused.
SCHEMA_VERSION = 5

#: The held-out values of a source: one row per batch, ``count`` values from ``first_position`` (SECRET, sealed
#: with the database key when there is one).  Rows are deleted when the hold-out ends.
_HOLDOUT = """CREATE TABLE holdout (
    source_id BIGINT NOT NULL, first_position BIGINT NOT NULL, count BIGINT NOT NULL, secret_values {blob} NOT NULL,
    PRIMARY KEY (source_id, first_position)){clustered}"""

#: The scoped tokens: ``digest`` is the SHA-256 of the token (hex), never the token; ``scope`` a JSON list of
#: ``kind:name``; a contributor's limit is ``rate`` reports per ``window`` seconds, at most ``max_batch`` a batch,
#: ``used`` of them counted in the window that started at ``window_start`` (seconds since the epoch).
_TOKENS = """CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, role TEXT NOT NULL, scope TEXT NOT NULL, note TEXT NOT NULL,
    rate BIGINT, window_seconds BIGINT, max_batch BIGINT, window_start BIGINT NOT NULL, used BIGINT NOT NULL,
    created TEXT NOT NULL, revoked TEXT)"""

#: The budget stores: a total ``rho`` (``accounting`` ``zcdp``, (epsilon, delta) stated at ``delta``) or ``epsilon``
#: (``pure``), and what it is about (``subject``, fixed by the first charge); each charge names its source
#: (``release``: ``kind name``), once.
_BUDGETS = """CREATE TABLE IF NOT EXISTS budgets (
    name TEXT PRIMARY KEY, accounting TEXT NOT NULL, total {real} NOT NULL, delta {real} NOT NULL, subject TEXT,
    created TEXT NOT NULL)"""
_BUDGET_CHARGES = """CREATE TABLE IF NOT EXISTS budget_charges (
    budget TEXT NOT NULL, release TEXT NOT NULL, amount {real} NOT NULL, statement TEXT NOT NULL,
    charged TEXT NOT NULL, PRIMARY KEY (budget, release))"""

#: ``MIGRATIONS[v]`` lists the statements that take a database from version ``v`` to ``v + 1``; ``{blob}``,
#: ``{real}`` and ``{clustered}`` stand for the dialect's words.
MIGRATIONS: dict[int, tuple[str, ...]] = {1: (_HOLDOUT,), 2: ("ALTER TABLE sources ADD COLUMN archived TEXT",),
                                          3: (_TOKENS,), 4: (_BUDGETS, _BUDGET_CHARGES)}


class StorageError(Exception):
    """The database cannot be used (bad URL, unreadable, insecure file, missing driver)."""


class SchemaError(StorageError):
    """The database was made by a newer dpstream, or is not a dpstream database."""


class DatabaseKeyError(StorageError):
    """The database key is missing, wrong, or given for a database made without one."""


class ArchivedError(Exception):
    """The source was archived: it takes no batch, and its key and state are gone."""

    def __init__(self, kind: str, name: str, archived: str) -> None:
        super().__init__(f"{kind} {name!r} was archived at {archived}: it takes no more batches.")


def _tables() -> tuple[str, ...]:
    return (
        "CREATE TABLE dpstream_schema (version INTEGER NOT NULL, encryption TEXT)",
        """CREATE TABLE sources (
            id BIGINT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
            params TEXT NOT NULL, public TEXT NOT NULL,
            position BIGINT NOT NULL, released BIGINT NOT NULL,
            secret_key {blob} NOT NULL, secret_state TEXT NOT NULL,
            created TEXT NOT NULL, updated TEXT NOT NULL, archived TEXT, UNIQUE (kind, name))""",
        """CREATE TABLE released (
            source_id BIGINT NOT NULL, position BIGINT NOT NULL, time {real} NOT NULL, value {real} NOT NULL,
            PRIMARY KEY (source_id, position)){clustered}""",
        """CREATE TABLE ledger (
            source_id BIGINT NOT NULL, first_position BIGINT NOT NULL, count BIGINT NOT NULL, digest TEXT NOT NULL,
            epsilon {real} NOT NULL, delta {real} NOT NULL, recorded TEXT NOT NULL,
            PRIMARY KEY (source_id, first_position))""",
        _HOLDOUT,
        _TOKENS,
        _BUDGETS,
        _BUDGET_CHARGES,
    )


def prepare_schema(cursor: Any, *, tables: set[str], words: dict[str, str], sql: Callable[[str], str],
                   box: SecretBox | None, database: str) -> None:
    """Create the schema in an empty database, or check (and migrate) the one there, inside a transaction.

    ``tables`` are the names of the tables there, ``words`` the dialect's ``blob``, ``real`` and ``clustered``,
    ``sql`` turns ``?`` into the dialect's placeholder, ``database`` names the database in messages.
    """
    if not tables:
        for statement in _tables():
            cursor.execute(statement.format(**words))
        check = None if box is None else box.check_value()
        cursor.execute(sql("INSERT INTO dpstream_schema (version, encryption) VALUES (?, ?)"), (SCHEMA_VERSION, check))
        return
    if "dpstream_schema" not in tables:
        raise SchemaError(f"database {database} holds tables ({', '.join(sorted(tables))}) but no "
                          "dpstream schema; give the service a database of its own.")
    cursor.execute("SELECT version FROM dpstream_schema")
    rows = cursor.fetchall()
    if len(rows) != 1:
        raise SchemaError(f"database {database}: its schema version table has {len(rows)} rows, not 1.")
    version = int(rows[0][0])
    if version > SCHEMA_VERSION:
        raise SchemaError(f"database {database} has schema version {version}, newer than this "
                          f"dpstream's {SCHEMA_VERSION}: upgrade dpstream to serve it.")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise SchemaError(f"database {database} has schema version {version}, which this dpstream "
                              f"cannot migrate to {SCHEMA_VERSION}.")
        for statement in MIGRATIONS[version]:
            cursor.execute(statement.format(**words))
        version += 1
        cursor.execute(sql("UPDATE dpstream_schema SET version = ?"), (version,))
    cursor.execute("SELECT encryption FROM dpstream_schema")
    _check_key(cursor.fetchall()[0][0], box, database)


def _check_key(check: str | None, box: SecretBox | None, database: str) -> None:
    if check is None and box is not None:
        raise DatabaseKeyError(f"database {database} was made without a database key; its secrets are not "
                               "encrypted: start the service without DPSTREAM_DATABASE_KEY, or on a new database.")
    if check is not None and box is None:
        raise DatabaseKeyError(f"database {database} keeps its secrets encrypted: give the service its key "
                               "(DPSTREAM_DATABASE_KEY).")
    if check is not None:
        try:
            box.verify(check)
        except SecretError:
            raise DatabaseKeyError(f"database {database}: the database key given is not the one its secrets "
                                   "were encrypted with.") from None
