"""The budget ledger of a state: what each stream has spent, on which input positions, and when.

An entry says that input positions ``[first, last)`` of one stream were read by a mechanism
``method`` under an ``(epsilon, delta)`` guarantee about a neighbour relation (kept as text).
A keyed release (one stream per key) records the input *rows* ``[first, last)`` of all its keys
in one entry, with ``keys`` the number of keys the rows fed (their streams so far) and the
guarantee of each key's stream: the budget is spent per key.
Entries of one stream never overlap: releasing the same positions a second time would spend the
budget a second time, so :func:`add_entry` refuses it.  Post-processing only; nothing here draws
noise or reads data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from dpstream._checks import check_epsilon, check_nonnegative_int, check_probability
from dpstream.durable.format import StateDamagedError, StateError

__all__ = ["BudgetError", "LedgerEntry", "add_entry", "ledger_table", "utc_now"]


class BudgetError(StateError):
    """A spend that would release input positions already released under the same state."""


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second, e.g. ``2025-03-01T12:00:00Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One spend: input positions ``[first, last)`` of ``stream`` released by ``method``.

    Attributes
    ----------
    stream : str
        Which stream (``"stream"`` for a command's one stream, the key for per-key streams).
    first, last : int
        The 0-based input positions covered, ``first`` included, ``last`` excluded.
    epsilon, delta : float
        The guarantee of the release on these positions.
    neighbours : str
        The neighbour relation the guarantee is about, in words (``str(EVENT_LEVEL)``).
    method : str
        What released them, e.g. ``"tops"``.
    time : str
        When the spend was first recorded, UTC ISO 8601.
    keys : int or None
        For per-key streams: how many keys the rows ``[first, last)`` feed (counted over the
        release so far); the guarantee is then each key's.  None for one stream.

    Examples
    --------
    >>> a = LedgerEntry(stream="s", first=0, last=10, epsilon=1.0, delta=0.0, neighbours="event level",
    ...                 method="tops", time="2025-01-01T00:00:00Z")
    >>> a.size, a.overlaps(replace(a, first=9, last=20)), a.overlaps(replace(a, first=10, last=20))
    (10, True, False)
    """

    stream: str
    first: int
    last: int
    epsilon: float
    delta: float
    neighbours: str
    method: str
    time: str
    keys: int | None = None

    def __post_init__(self) -> None:
        for name in ("stream", "neighbours", "method", "time"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a string, got {getattr(self, name)!r}.")
        for name in ("neighbours", "method"):
            if not getattr(self, name).strip():
                raise ValueError(f"{name} must not be empty, got {getattr(self, name)!r}.")
        object.__setattr__(self, "first", check_nonnegative_int(self.first, "first"))
        object.__setattr__(self, "last", check_nonnegative_int(self.last, "last"))
        if self.last <= self.first:
            raise ValueError(f"last must be > first (positions [first, last) must not be empty), "
                             f"got first={self.first}, last={self.last}.")
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))
        if self.keys is not None:
            object.__setattr__(self, "keys", check_nonnegative_int(self.keys, "keys"))

    @property
    def size(self) -> int:
        """How many positions the entry covers."""
        return self.last - self.first

    def overlaps(self, other: LedgerEntry) -> bool:
        """Whether both cover a common position of the same stream."""
        return self.stream == other.stream and self.first < other.last and other.first < self.last

    def to_json(self) -> dict[str, Any]:
        """The entry as plain JSON data (floats are finite, so they are exact in JSON); ``keys`` only when set."""
        return {field.name: getattr(self, field.name) for field in fields(self)
                if field.name != "keys" or self.keys is not None}

    @classmethod
    def from_json(cls, data: Any, where: str) -> LedgerEntry:
        """The entry that :meth:`to_json` gave; ``where`` names it in errors."""
        names = {field.name for field in fields(cls)}
        if not isinstance(data, dict) or set(data) not in (names, names - {"keys"}):
            raise StateDamagedError(f"{where} is malformed: expected the fields {sorted(names)}.")
        try:
            return cls(**data)
        except (TypeError, ValueError) as error:
            raise StateDamagedError(f"{where} is malformed: {error}") from None


def _describe(index: int, entry: LedgerEntry) -> str:
    return (f"ledger entry {index + 1}: positions [{entry.first}, {entry.last}) by {entry.method}, "
            f"epsilon {entry.epsilon!r}, at {entry.time}")


def add_entry(entries: list[LedgerEntry], entry: LedgerEntry, *, mergeable_from: int) -> LedgerEntry:
    """Append ``entry`` to ``entries`` (in place), or extend the entry it continues; return the result.

    The latest entry of the same stream is extended instead of adding a line when it sits at index
    ``mergeable_from`` or later (it was made in the current session), ends exactly at
    ``entry.first`` and has the same epsilon, delta, neighbours and method: a run that records
    each chunk it releases leaves one entry per run (per-key streams: with the latest count of keys).

    Raises
    ------
    BudgetError
        If ``entry`` covers a position of its stream that an entry already covers.

    Examples
    --------
    >>> entries = []
    >>> first = LedgerEntry(stream="s", first=0, last=10, epsilon=1.0, delta=0.0, neighbours="event level",
    ...                     method="tops", time="2025-01-01T00:00:00Z")
    >>> add_entry(entries, first, mergeable_from=0).last
    10
    >>> add_entry(entries, replace(first, first=10, last=25), mergeable_from=0).last, len(entries)
    (25, 1)
    >>> add_entry(entries, replace(first, first=20, last=30), mergeable_from=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    dpstream.durable.ledger.BudgetError: input positions [20, 30) of stream 's' were already released ...
    """
    for index, old in enumerate(entries):
        if old.overlaps(entry):
            raise BudgetError(
                f"input positions [{entry.first}, {entry.last}) of stream {entry.stream!r} were already released "
                f"under this state ({_describe(index, old)}); releasing them again would spend the budget again."
            )
    same_stream = [index for index, old in enumerate(entries) if old.stream == entry.stream]
    if same_stream and same_stream[-1] >= mergeable_from:
        index = same_stream[-1]
        old = entries[index]
        if (old.last == entry.first and (old.epsilon, old.delta, old.neighbours, old.method)
                == (entry.epsilon, entry.delta, entry.neighbours, entry.method)):
            entries[index] = replace(old, last=entry.last, keys=entry.keys)
            return entries[index]
    entries.append(entry)
    return entry


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) if column in right else cell.ljust(width)
                      for column, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def _counted(rows: list[list[str]], right: set[int], columns: tuple[int, ...],
             counts: bool) -> tuple[list[list[str]], set[int]]:
    """``rows`` and their right-aligned columns, without ``columns`` (the counts) unless ``counts``."""
    if counts:
        return rows, right
    kept = [index for index in range(len(rows[0])) if index not in columns]
    return [[row[index] for index in kept] for row in rows], {kept.index(index) for index in right if index in kept}


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else repr(float(value))


def ledger_table(entries: Sequence[LedgerEntry], *, counts: bool = True) -> str:
    """The ledger as a text table, then the totals per stream and, for several streams, overall.

    ``counts=False`` leaves out the positions and the numbers of values (rows of a release whose relation makes
    them data, such as a unit-level aggregate).

    The entries of one stream cover disjoint positions of one release, so they compose in
    parallel: the stream's total is its largest epsilon and delta.  Across streams the table
    gives both bounds: the sum (sequential composition, when one individual's data can lie in
    every stream) and the largest (parallel, when each individual's data lies in one stream).
    Entries under different neighbour relations are totalled separately: they do not compose.

    Examples
    --------
    >>> entry = LedgerEntry(stream="stream", first=0, last=1000, epsilon=0.5, delta=0.0,
    ...                     neighbours="event level", method="tops", time="2025-01-01T00:00:00Z")
    >>> print(ledger_table([entry, replace(entry, first=1000, last=1500, time="2025-01-02T00:00:00Z")]))
    #  stream  positions [first, last)  values  method  epsilon  delta  time (UTC)            relation
    1  stream               [0, 1,000)   1,000  tops        0.5    0.0  2025-01-01T00:00:00Z  [1]
    2  stream           [1,000, 1,500)     500  tops        0.5    0.0  2025-01-02T00:00:00Z  [1]
    relations: [1] event level
    <BLANKLINE>
    totals (the entries of one stream cover disjoint positions and compose in parallel)
    stream  entries  values  epsilon  delta  relation
    stream        2   1,500      0.5    0.0  [1]
    """
    if not entries:
        return "the ledger is empty: nothing has been released under this state."
    relations = list(dict.fromkeys(entry.neighbours for entry in entries))
    label = {relation: f"[{number}]" for number, relation in enumerate(relations, start=1)}
    keyed = any(entry.keys is not None for entry in entries)

    def keys(count: int | None) -> list[str]:  # the keys column, in ledgers with per-key streams only
        return ([] if count is None else [f"{count:,}"]) if not keyed else ["-" if count is None else f"{count:,}"]

    rows = [["#", "stream", "positions [first, last)", "values", *(["keys"] if keyed else []), "method", "epsilon",
             "delta", "time (UTC)", "relation"]]
    rows += [[str(index), entry.stream, f"[{entry.first:,}, {entry.last:,})", _number(entry.size), *keys(entry.keys),
              entry.method, _number(entry.epsilon), _number(entry.delta), entry.time, label[entry.neighbours]]
             for index, entry in enumerate(entries, start=1)]
    lines = _table(*_counted(rows, {0, 2, 3, 4, 6, 7} if keyed else {0, 2, 3, 5, 6}, (2, 3), counts))
    lines.append("relations: " + "; ".join(f"{label[relation]} {relation}" for relation in relations))
    if keyed:
        lines.append("per-key streams: positions are the input's rows over all keys, keys how many keys they fed; "
                     "epsilon and delta are each key's, spent on that key's stream (someone whose values fall under "
                     "k keys spends k times them)")
    lines += ["", "totals (the entries of one stream cover disjoint positions and compose in parallel)"]
    groups: dict[tuple[str, str], list[LedgerEntry]] = {}
    for entry in entries:
        groups.setdefault((entry.stream, entry.neighbours), []).append(entry)
    rows = [["stream", "entries", "values", *(["keys"] if keyed else []), "epsilon", "delta", "relation"]]
    rows += [[stream, str(len(group)), _number(sum(e.size for e in group)),
              *keys(max((e.keys for e in group if e.keys is not None), default=None)),
              _number(max(e.epsilon for e in group)), _number(max(e.delta for e in group)), label[relation]]
             for (stream, relation), group in groups.items()]
    lines += _table(*_counted(rows, {1, 2, 3, 4, 5} if keyed else {1, 2, 3, 4}, (2,), counts))
    for relation in relations:
        totals = [group for (_, rel), group in groups.items() if rel == relation]
        if len(totals) > 1:
            epsilons = [max(e.epsilon for e in group) for group in totals]
            deltas = [max(e.delta for e in group) for group in totals]
            lines.append(
                f"all {len(totals)} streams under {label[relation]}: epsilon {_number(math.fsum(epsilons))}, delta "
                f"{_number(min(1.0, math.fsum(deltas)))} if one individual's data can lie in every stream "
                f"(sequential composition); epsilon {_number(max(epsilons))}, delta {_number(max(deltas))} if each "
                "individual's data lies in one stream (parallel composition)"
            )
    return "\n".join(lines)
