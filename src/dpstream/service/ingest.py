"""The ingest transaction: one batch of values (or reports) through a source's mechanism into the database.

:class:`LiveSources` keeps each source's mechanism in memory, loaded from the database on first use,
with one lock per source.  :func:`ingest` runs one batch under that lock: the mechanism checks the
batch first and refuses it whole, then the released values, the ledger row and the mechanism's new
secret state are committed in one transaction
(:meth:`Storage.commit_batch <dpstream.service.storage.Storage.commit_batch>`) before the answer is
made.  After any failure the mechanism in memory is dropped and reloaded from the database, so a
refused or failed batch changes nothing.

During a hold-out the values held so far are not part of the stored state: the batch appends its own
held-out values as one row (:class:`~dpstream.service.storage.HeldRows`) in the same transaction, and
the batch that ends the hold-out deletes the rows; a reload reads the state and the rows together.

Several processes may serve one database, so the mechanism in memory is only a copy of the database's:
each batch takes the source's writer lock (:meth:`Storage.writer <dpstream.service.storage.Storage.writer>`:
PostgreSQL's writers of one source wait for each other, whatever their process), reads the source's
committed position and reloads the mechanism when another process moved it on.  A batch whose commit
finds the source moved meanwhile (SQLite, where writers do not wait: another process committed there
first), or that the mechanism refuses while the source moved, is tried again on the reloaded mechanism
(at most :data:`ATTEMPTS` times): no process refuses a batch on the strength of a position or
parameters the database has left behind.

An archived source (:meth:`Storage.archive <dpstream.service.storage.Storage.archive>`) refuses every batch
(410), whichever process holds its mechanism: the committed row is read before each try, and the commit
itself is conditional on the row being live, so a batch racing the archive writes nothing.

A retry of a batch whose answer was lost names the same ``first_position``: it is recognized by the
ledger (same length, same HMAC of its content under the source's key) and answered with the values
released the first time, never ingested twice.  An aggregate's released values are numbered apart from
its rows (:class:`Rows`): its ledger row records, after the HMAC, where the batch's released values are.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpstream.service import mechanisms
from dpstream.service.answers import released_json, released_rows_json, standard_errors
from dpstream.service.errors import ApiError, unprocessable
from dpstream.service.storage import ArchivedError, ConflictError, HeldRows, Source, Storage

__all__ = ["ATTEMPTS", "Answer", "LiveSources", "Rows", "batch_digest", "ingest"]

#: How many times a batch is tried on a reloaded mechanism while other processes move its source on.
ATTEMPTS = 8


def batch_digest(key: bytes, *arrays: np.ndarray) -> str:
    """HMAC-SHA256 of a batch under the source's key: recognizes a retry, and tells nothing about the values
    to whoever reads the ledger without the key (a plain hash of a few raw values could be inverted by guessing)."""
    digest = hmac.new(key, digestmod=hashlib.sha256)
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:32]


@dataclass
class _Live:
    """A source's mechanism in memory, at ``position``; dropped after any failure and reloaded."""

    source: Source
    mechanism: Any
    position: int
    key: bytes
    #: How many of its held-out values the database keeps apart (the ``holdout`` rows): a batch appends the rest.
    held_apart: int = 0


class LiveSources:
    """The mechanisms of the streams and collectors, loaded from the database on first use and whenever the
    database moved on without them, one lock each."""

    def __init__(self, storage: Storage, on_commit: Callable[[str, int], None] | None = None) -> None:
        self.storage = storage
        #: Told ``(kind, count)`` after each batch committed (the service's metrics); never a retry answered.
        self.on_commit = on_commit
        self._live: dict[tuple[str, str], _Live] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, kind: str, name: str) -> threading.Lock:
        """The lock of one source: hold it while using its mechanism."""
        with self._guard:
            return self._locks.setdefault((kind, name), threading.Lock())

    def public(self, kind: str, name: str) -> Source:
        """The source's public columns (404 when there is none)."""
        source = self.storage.source(kind, name)
        if source is None:
            raise ApiError(404, f"no {kind} named {name!r}.")
        return source

    def archive(self, kind: str, name: str) -> Source:
        """Archive the source (:meth:`Storage.archive <dpstream.service.storage.Storage.archive>`; 404 when there is
        none) under its lock, and forget its mechanism."""
        with self.lock(kind, name):
            source = self.storage.archive(kind, name)
            self.drop(kind, name)
        if source is None:
            raise ApiError(404, f"no {kind} named {name!r}.")
        return source

    def _stored(self, kind: str, name: str) -> tuple[int, int]:
        """The source's committed ``(id, position)``: 404 when there is none, 410 when it was archived."""
        try:
            stored = self.storage.position(kind, name)
        except ArchivedError as error:
            raise ApiError(410, str(error)) from None
        if stored is None:
            raise ApiError(404, f"no {kind} named {name!r}.")
        return stored

    def source_id(self, kind: str, name: str) -> int:
        """The source's id (404 when there is none); it never changes, so the one in memory is good."""
        live = self._live.get((kind, name))
        if live is not None:
            return live.source.id
        return self._stored(kind, name)[0]

    def live(self, kind: str, name: str) -> _Live:
        """The source's mechanism as the database has it now (call with its lock held): loaded on first use, and
        again when the committed position is not the one in memory (another process moved the source on); 410 once
        it was archived."""
        stored = self._stored(kind, name)
        live = self._live.get((kind, name))
        if live is None or (live.source.id, live.position) != stored:
            try:  # sources are never deleted: it is there, unless archived meanwhile
                source = self.storage.source(kind, name, secret=True)
            except ArchivedError as error:
                raise ApiError(410, str(error)) from None
            mechanism, apart = mechanisms.restore_stored(mechanisms.mechanism_class(kind, source.params), source.state,
                                                         key=source.key, held=source.held)
            live = _Live(source=replace(source, key=None, state=None, held=None), mechanism=mechanism,
                         position=source.position, key=source.key, held_apart=apart)
            self._live[(kind, name)] = live
        return live

    def drop(self, kind: str, name: str) -> None:
        """Forget the source's mechanism: the next use reloads it from the database."""
        self._live.pop((kind, name), None)


def ingest(sources: LiveSources, kind: str, name: str, first_position: int | None, inputs: Any,
           times: np.ndarray | None, release: Callable[[Any], np.ndarray | Rows], answer: Answer | None = None
           ) -> bytes:
    """Ingest one batch under the source's lock; the answer's JSON.

    ``inputs`` is a stream's values, or a collector's ``(mechanism, report)`` arrays, or an aggregate's arrays
    of rows; ``release`` gives the mechanism's released values for them (a TypeError or ValueError refuses the
    batch, 422), or :class:`Rows` when they are not at the batch's last positions.  ``times`` are the values'
    times (now when None).  ``answer`` makes the JSON of the released rows (default :func:`released_rows_json`).
    """
    with sources.lock(kind, name):
        try:
            with sources.storage.writer(sources.source_id(kind, name)):
                for _ in range(ATTEMPTS):
                    live = sources.live(kind, name)
                    try:
                        return _ingest_at(sources, live, first_position, inputs, times, release, answer)
                    except _Moved as moved:
                        sources.drop(kind, name)
                        reason = str(moved)
                    except BaseException:
                        sources.drop(kind, name)
                        raise
        except ConflictError as error:  # another process kept the source too long
            reason = str(error)
        except ArchivedError as error:  # archived while the mechanism refused the batch
            raise ApiError(410, str(error)) from None
    raise ApiError(409, f"{kind} {name!r}: {reason} Retry the batch.")


@dataclass(frozen=True)
class Rows:
    """Released values at positions of their own rather than at the batch's last ones (an aggregate's buckets, in
    the order released): from position ``first``, with their ``times`` (seconds); at ``positions`` when given
    (increasing, not necessarily consecutive: an aggregate with private partitions numbers each value's
    partition in its position)."""

    first: int
    times: np.ndarray
    values: np.ndarray
    positions: np.ndarray | None = None


#: The JSON answer of released ``(position, time, value)`` rows of a source.
Answer = Callable[[Source, Sequence[tuple[int, float, float]]], bytes]


class _Moved(Exception):
    """Another process moved the source on while this one ingested the batch: reload the mechanism and try again."""


def _ingest_at(sources: LiveSources, live: _Live, first_position: int | None, inputs: Any,
               times: np.ndarray | None, release: Callable[[Any], np.ndarray | Rows], answer: Answer | None
               ) -> bytes:
    """One try of :func:`ingest` on the mechanism ``live`` (the database's when it was read); _Moved when that was
    left behind before the commit."""
    kind, name = live.source.kind, live.source.name
    count = (inputs if kind == "stream" else inputs[0]).size
    digest = batch_digest(live.key, *((inputs,) if kind == "stream" else inputs))
    position = live.position
    start = position if first_position is None else first_position
    if start < position:
        return _retry(sources.storage, live.source, start, count, digest, position, answer)
    if start > position:
        raise ApiError(409, f"{kind} {name!r} is at position {position}; a batch at first_position {start} "
                            f"would leave a gap (send positions {position}..{start - 1} first).")
    moved = f"the source moved past position {position} while this batch was ingested."
    try:
        with unprocessable():  # the mechanism checks the batch first and refuses it whole
            released = release(live.mechanism)
    except Exception:  # refused by parameters another process may have changed meanwhile (a collector's theta)
        if sources.storage.position(kind, name) != (live.source.id, position):
            raise _Moved(moved) from None
        raise
    if isinstance(released, Rows):  # where they are goes into the ledger, to answer a retry: first + span
        positions = np.arange(released.first, released.first + released.values.size) if released.positions is None \
            else released.positions
        stamps, released = released.times, released.values
        span = int(positions[-1]) + 1 - int(positions[0]) if positions.size else 0
        digest = f"{digest}:{int(positions[0]) if positions.size else 0}+{span}"
    else:
        held = count - released.size  # the released positions are the batch's last ones
        positions = np.arange(position + held, position + count)
        stamps = np.full(released.size, time.time()) if times is None else times[held:]
    facts = mechanisms.facts(kind, live.mechanism, live.source.params.get("delta"))  # a zCDP one's target delta
    public = {**live.source.public, **facts}
    state, held = mechanisms.split_snapshot(live.mechanism)
    rows = None if held is None or held.size == live.held_apart else HeldRows(
        first_position=live.held_apart, count=held.size - live.held_apart, data=held[live.held_apart:].tobytes())
    try:
        sources.storage.commit_batch(source=live.source, first_position=position, count=count, digest=digest,
                                     state=state, public=public, epsilon=facts["privacy"]["epsilon"],
                                     delta=facts["privacy"]["delta"], positions=positions, times=stamps,
                                     values=released, held=rows, forget_held=held is None and live.held_apart > 0)
    except ConflictError as error:
        raise _Moved(str(error)) from None
    live.held_apart = 0 if held is None else held.size
    live.position = position + count
    if sources.on_commit is not None:
        sources.on_commit(kind, count)
    live.source = replace(live.source, public=public, position=live.position)
    if answer is not None:
        return answer(live.source, list(zip(positions.tolist(), stamps.tolist(), released.tolist())))
    return released_json(positions.tolist(), stamps.tolist(), released.tolist(),
                         errors=standard_errors(live.source, positions.tolist()))


def _retry(storage: Storage, source: Source, start: int, count: int, digest: str, position: int,
           answer: Answer | None) -> bytes:
    """The answer to a batch sent again at ``start``: the values released the first time (409 if it differs)."""
    entry = storage.ledger_entry(source.id, start)
    stored, _, span = ("", "", "") if entry is None else entry.digest.partition(":")
    if entry is None or entry.count != count or stored != digest:
        raise ApiError(409, f"{source.kind} {source.name!r} is at position {position}; the batch at "
                            f"first_position {start} is not the one ingested there (a retry must resend the "
                            "same values).")
    first, released = (start, count) if not span else (int(part) for part in span.split("+"))
    rows = storage.released(source.id, after=first - 1, before=first + released, limit=released)
    return released_rows_json(rows, source) if answer is None else answer(source, rows)
