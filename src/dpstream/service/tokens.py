"""Scoped bearer tokens: their roles and scopes, kept hashed in the database, and the contributors' rate limit.

A token is ``dpst_`` and 43 characters of URL-safe base64 (256 random bits).  The database keeps its
SHA-256 (``tokens.digest``, unique, so a request's token is found by one indexed lookup), never the
token: it is shown once, when created.  Every request reads its token's row (nothing is cached), so a
revocation holds at once in every process serving the database.

Roles (the service's bootstrap token, ``dpstream serve --token``, is an admin):

* ``admin`` -- everything: create, configure and archive sources, issue and revoke tokens, any batch;
* ``producer`` -- post values to the streams, and rows to the aggregates, of its scope (``stream:NAME``,
  ``aggregate:NAME``; ``stream:*`` for every stream);
* ``contributor`` -- post ToPL reports to ONE collector (``collector:NAME``), at most ``max_batch`` a
  batch and ``rate`` reports a ``window`` of seconds; may be public inside an app;
* ``reader`` -- the reads withheld from the public (an aggregate's rows consumed: data under its
  unit-level relation); every other read is public.

The rate limit is a fixed window counted in the token's row by one conditional ``UPDATE`` (the
database decides, whatever process asks): every report sent counts, accepted or not.  The count is
committed without waiting for the disk (SQLite: ``synchronous=NORMAL`` for that transaction, in WAL mode;
PostgreSQL: ``synchronous_commit = off``): it is at once visible to every process and survives a crash of
the service, and it reaches the disk with the next durable commit (the batch's own, which follows it), so
only a power loss can forget the counts of the last moments -- a batch's worth of waiting saved on each.

>>> spec = token_spec({"role": "contributor", "collector": "fares", "rate": 600, "window": "1m"})
>>> spec.scope, spec.rate, spec.window, spec.max_batch
(('collector:fares',), 600, 60, 100)
>>> token_spec({"role": "producer"})
Traceback (most recent call last):
ValueError: a producer token needs streams or aggregates (names, or "*" for all of a kind).
>>> digest("dpst_x") == digest("dpst_x") != digest("dpst_y")
True
>>> Principal(role="admin").scope_text(), Principal(role="producer", scope=("stream:a", "stream:*")).scope_text()
('an admin', "a producer for stream 'a', stream '*'")
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dpstream.io.times import duration_text, parse_duration
from dpstream.service.parsing import MAX_BATCH, NAME
from dpstream.service.storage import PostgresStorage, SQLiteStorage, Storage

__all__ = ["BOOTSTRAP", "PREFIX", "ROLES", "Principal", "RateLimited", "TokenSpec", "TokenStore", "digest",
           "token_spec"]

#: The roles, from the widest.
ROLES = ("admin", "producer", "contributor", "reader")
#: The beginning of every token the service issues (so that a leaked one is recognized by secret scanners).
PREFIX = "dpst_"
#: The id of the service's bootstrap token (``--token``) in answers and the access log.
BOOTSTRAP = "bootstrap"
#: A contributor's limits when none is given: reports a window, the window, reports a batch.
DEFAULT_RATE, DEFAULT_WINDOW, DEFAULT_MAX_BATCH = 1000, 3600, 100

_COLUMNS = "id, role, scope, note, rate, window_seconds, max_batch, created, revoked"
_FIELDS = {"admin": {"role", "note"}, "reader": {"role", "note"},
           "producer": {"role", "note", "streams", "aggregates"},
           "contributor": {"role", "note", "collector", "rate", "window", "max_batch"}}


def digest(token: str) -> str:
    """The SHA-256 of a token, hex: what the database keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class TokenSpec:
    """What a token may do: its role, its scope (``kind:name`` entries) and a contributor's limits."""

    role: str
    scope: tuple[str, ...] = ()
    note: str = ""
    rate: int | None = None
    window: int | None = None
    max_batch: int | None = None


@dataclass(frozen=True)
class Principal(TokenSpec):
    """The holder of a request's token: the token's ``id`` (public: never the token) and its :class:`TokenSpec`."""

    id: str = BOOTSTRAP
    created: str = ""
    revoked: str | None = None

    def allows(self, role: str, kind: str | None = None, name: str | None = None) -> bool:
        """Whether the token may do what ``role`` may (for source ``kind:name``): an admin may everything."""
        if self.role == "admin" or (role == "reader" and self.role == "reader"):
            return True
        if role != self.role:
            return False
        return f"{kind}:{name}" in self.scope or (role == "producer" and f"{kind}:*" in self.scope)

    def describe(self) -> dict[str, Any]:
        """The token's public facts (never the token, never its digest)."""
        facts: dict[str, Any] = {"id": self.id, "role": self.role, "scope": list(self.scope), "note": self.note}
        if self.role == "contributor":
            facts.update(rate=self.rate, window=duration_text(self.window), max_batch=self.max_batch)
        return {**facts, "created": self.created, "revoked": self.revoked}

    def scope_text(self) -> str:
        """The role and scope in words, for refusals: "a contributor for collector 'fares'"."""
        where = ", ".join(f"{entry.split(':', 1)[0]} {entry.split(':', 1)[1]!r}" for entry in self.scope)
        article = "an" if self.role == "admin" else "a"
        return f"{article} {self.role}" + (f" for {where}" if where else "")


class RateLimited(Exception):
    """A contributor's batch beyond its rate: ``retry_after`` seconds until its window ends."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _names(value: object, kind: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{kind}s must be a list of {kind} names (or \"*\"), got {json.dumps(value)[:80]}.")
    for name in value:
        if not isinstance(name, str) or not (name == "*" or NAME.fullmatch(name)):
            raise ValueError(f"{kind}s: {json.dumps(name)[:80]} is not a {kind} name (nor \"*\").")
    return [f"{kind}:{name}" for name in dict.fromkeys(value)]


def _count(document: dict[str, Any], name: str, default: int, maximum: int) -> int:
    value = document.get(name, default)
    if type(value) is not int or not 1 <= value <= maximum:
        raise ValueError(f"{name} must be an integer from 1 to {maximum:,}, got {json.dumps(value)[:80]}.")
    return value


def token_spec(document: dict[str, Any]) -> TokenSpec:
    """The token a creation request asks for (``POST /tokens``, ``dpstream token create``); ValueError naming
    what is wrong."""
    role = document.get("role")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {json.dumps(role)[:80]}.")
    unknown = sorted(set(document) - _FIELDS[role])
    if unknown:
        raise ValueError(f"a {role} token takes no {', '.join(map(repr, unknown))}; it takes "
                         f"{', '.join(sorted(_FIELDS[role]))}.")
    note = document.get("note", "")
    if not isinstance(note, str) or len(note) > 200:
        raise ValueError(f"note must be a text of at most 200 characters, got {json.dumps(note)[:80]}.")
    if role == "producer":
        scope = [entry for kind in ("stream", "aggregate") if f"{kind}s" in document
                 for entry in _names(document[f"{kind}s"], kind)]
        if not scope:
            raise ValueError('a producer token needs streams or aggregates (names, or "*" for all of a kind).')
        return TokenSpec(role=role, scope=tuple(scope), note=note)
    if role != "contributor":
        return TokenSpec(role=role, note=note)
    collector = document.get("collector")
    if not isinstance(collector, str) or not NAME.fullmatch(collector):
        raise ValueError(f"a contributor token needs collector, the name of one collector, got "
                         f"{json.dumps(collector)[:80]}.")
    rate = _count(document, "rate", DEFAULT_RATE, 10**9)
    window = parse_duration(document.get("window", duration_text(DEFAULT_WINDOW)), "window")
    max_batch = _count(document, "max_batch", min(DEFAULT_MAX_BATCH, rate), min(MAX_BATCH, rate))
    return TokenSpec(role=role, scope=(f"collector:{collector}",), note=note, rate=rate, window=window,
                     max_batch=max_batch)


def _principal(row: tuple) -> Principal:
    return Principal(id=row[0], role=row[1], scope=tuple(json.loads(row[2])), note=row[3],
                     rate=None if row[4] is None else int(row[4]), window=None if row[5] is None else int(row[5]),
                     max_batch=None if row[6] is None else int(row[6]), created=row[7], revoked=row[8])


class TokenStore:
    """The ``tokens`` table of a :class:`~dpstream.service.storage.Storage` (its connection, lock and dialect).

    ``clock`` gives the seconds since the epoch that the rate windows count in (injectable for tests).
    """

    def __init__(self, storage: Storage, clock: Callable[[], float] = time.time) -> None:
        self.storage, self.clock = storage, clock

    def create(self, spec: TokenSpec) -> tuple[str, Principal]:
        """Issue a token: ``(token, its principal)``; the token is shown here only, the database keeps its digest."""
        token, token_id = PREFIX + secrets.token_urlsafe(32), secrets.token_hex(6)
        created = _now()
        with self.storage._lock, self.storage._transaction() as cursor:
            cursor.execute(self.storage._sql(
                "INSERT INTO tokens (id, digest, role, scope, note, rate, window_seconds, max_batch, window_start, "
                "used, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?)"),
                (token_id, digest(token), spec.role, json.dumps(list(spec.scope)), spec.note, spec.rate, spec.window,
                 spec.max_batch, created))
        return token, Principal(**vars(spec), id=token_id, created=created)

    def tokens(self) -> list[Principal]:
        """Every token issued, revoked ones too, oldest first (their public facts)."""
        return [_principal(row) for row in self.storage._query(f"SELECT {_COLUMNS} FROM tokens ORDER BY created, id")]

    def get(self, token_id: str) -> Principal | None:
        """The token of that id, or None."""
        rows = self.storage._query(f"SELECT {_COLUMNS} FROM tokens WHERE id = ?", (token_id,))
        return _principal(rows[0]) if rows else None

    def revoke(self, token_id: str) -> Principal | None:
        """Revoke the token (None when there is none); revoked again, it keeps its first time."""
        with self.storage._lock, self.storage._transaction() as cursor:
            cursor.execute(self.storage._sql("UPDATE tokens SET revoked = ? WHERE id = ? AND revoked IS NULL"),
                           (_now(), token_id))
        return self.get(token_id)

    @contextmanager
    def _counting(self) -> Iterator[Any]:
        """A transaction of the storage whose commit does not wait for the disk (see the module's docstring)."""
        with self.storage._lock:
            sqlite = isinstance(self.storage, SQLiteStorage)
            if sqlite:  # between transactions: the connection's setting, back to FULL right after
                self.storage._connection.execute("PRAGMA synchronous = NORMAL")
            try:
                with self.storage._transaction() as cursor:
                    if isinstance(self.storage, PostgresStorage):
                        cursor.execute("SET LOCAL synchronous_commit = off")
                    yield cursor
            finally:
                if sqlite:
                    self.storage._connection.execute("PRAGMA synchronous = FULL")

    def find(self, token: str) -> Principal | None:
        """The holder of ``token`` (revoked or not), or None: one lookup of its digest by the unique index."""
        wanted = digest(token)
        rows = self.storage._query(f"SELECT {_COLUMNS}, digest FROM tokens WHERE digest = ?", (wanted,))
        if not rows or not hmac.compare_digest(rows[0][-1], wanted):
            return None
        return _principal(rows[0][:-1])

    def charge(self, principal: Principal, count: int) -> None:
        """Count ``count`` reports in the contributor's current window; RateLimited (nothing counted) when they
        would pass its rate, PermissionError when the token was revoked meanwhile.  One conditional UPDATE:
        processes sharing the database share the count."""
        now = self.clock()
        start = int(now // principal.window) * principal.window
        with self._counting() as cursor:
            cursor.execute(self.storage._sql(
                "UPDATE tokens SET used = CASE WHEN window_start = ? THEN used + ? ELSE ? END, window_start = ? "
                "WHERE id = ? AND revoked IS NULL AND ? <= rate AND (window_start <> ? OR used + ? <= rate)"),
                (start, count, count, start, principal.id, count, start, count))
            if cursor.rowcount == 1:
                return
            cursor.execute(self.storage._sql("SELECT revoked FROM tokens WHERE id = ?"), (principal.id,))
            revoked = cursor.fetchall()[0][0]
        if revoked is not None:  # revoked since the request's token was read
            raise PermissionError(f"token {principal.id} was revoked at {revoked}.")
        wait = max(1, math.ceil(start + principal.window - now))
        raise RateLimited(f"token {principal.id} may send {principal.rate:,} reports every "
                          f"{duration_text(principal.window)}; this batch of {count:,} would pass that: retry in "
                          f"{wait} s.", wait)
