"""Event-time buckets closed by a watermark: :class:`WatermarkAggregate`, a :class:`UnitAggregate` fed in time order.

Rows arrive in some order (a file's rows, files one after another).  The *watermark* is the
newest event time seen before a row, minus a public allowed lateness ``D``; a bucket is *closed*
once the watermark reaches its end.  A row whose bucket is closed is **late**: dropped and not
counted in any released value (:attr:`WatermarkAggregate.dropped` counts them, not printed).
Every other row is held until its bucket closes, and the rows of closed buckets are fed to the
aggregate in time order (rows of one time in arrival order), which then releases every closed
bucket.  ``D = 0`` is the aggregate's own rule with ``late="drop"``: a row of a bucket before the
newest one seen is late.

Which rows are late depends on the arrival order of the rows alone (not on how they are grouped
into batches): the rule is applied row by row.  The local ``aggregate --allowed-lateness D`` and
the streaming query (:mod:`dpstream.spark.streaming_aggregate`) apply it to the same order, so they
release the same values.  As with ``late="drop"``, the guarantee holds for inputs whose arrival
order is public: a row that runs ahead moves the watermark for every unit.

The end of the input (:meth:`WatermarkAggregate.flush`) closes every bucket; a streaming query
has no end, and releases only the buckets the watermark has closed.  :func:`buckets_closed` says
how many buckets a batch's rows would close, before any work (a long gap closes every bucket in it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dpstream.release.aggregate import Released, UnitAggregate

__all__ = ["WatermarkAggregate", "buckets_closed"]

_NS = 1_000_000_000
_NEVER = -(2**62)
_COLUMNS = ("times", "units", "values", "partitions")


class WatermarkAggregate:
    """``aggregate`` (a :class:`UnitAggregate`, its late policy ``"drop"``) fed through a watermark of allowed
    lateness ``lateness`` seconds (see the module docstring).

    >>> from dpstream.noise.sampler import ZeroNoise
    >>> agg = UnitAggregate(epsilon=1.0, bucket=60, window=120, unit_bound=9.0, late="drop", noise=ZeroNoise())
    >>> marked = WatermarkAggregate(agg, lateness=60)
    >>> t = np.array([0, 70, 10, 130, 20]) * 10**9  # 10 s: within the lateness; 20 s: its bucket closed by 130 s
    >>> out = list(marked.release(t, np.array(["a", "b", "c", "a", "b"]), np.ones(5)))
    >>> [r.values.tolist() for r in out], marked.dropped, marked.flush().values.tolist()
    ([[2.0]], 1, [1.0, 1.0])
    """

    def __init__(self, aggregate: UnitAggregate, *, lateness: int) -> None:
        if aggregate.late_policy != "drop":
            raise ValueError("a watermark drops late rows: the aggregate's late policy must be 'drop'.")
        if int(lateness) != lateness or lateness < 0:
            raise ValueError(f"the allowed lateness must be a whole number of seconds >= 0, got {lateness!r}.")
        self.aggregate, self.lateness = aggregate, int(lateness)
        self.newest = _NEVER
        self.dropped = 0
        self.position = 0
        self.pending: dict[str, Any] = {name: np.zeros(0, dtype=kind) for name, kind in
                                        zip(_COLUMNS, (np.int64, object, np.float64, object))}
        self.pending["partitions"] = None

    def release(self, times: np.ndarray, units: Any, values: np.ndarray, partitions: Any = None, *,
                skip: np.ndarray | None = None) -> Iterator[Released]:
        """Take rows in arrival order (times int64 nanoseconds); yield what the buckets they close release.  Rows
        marked in ``skip`` (a missing value, ``--missing skip``) are numbered but not read, their times neither."""
        times = np.asarray(times, dtype=np.int64)
        units, values = np.asarray(units, dtype=object), np.asarray(values, dtype=np.float64)
        self._check(values)
        self.position += times.size
        if skip is not None and np.any(skip):
            read = ~np.asarray(skip, dtype=bool)
            times, units, values = times[read], units[read], values[read]
            partitions = None if partitions is None else np.asarray(partitions, dtype=object)[read]
        size = self.aggregate.bucket * _NS
        before = np.maximum.accumulate(np.r_[self.newest, times[:-1]]) if times.size else times
        closed = np.where(before == _NEVER, _NEVER, (before - self.lateness * _NS) // size)
        late = times // size < closed
        self.dropped += int(late.sum())
        keep = ~late
        new = {"times": times[keep], "units": units[keep], "values": values[keep],
               "partitions": None if partitions is None else np.asarray(partitions, dtype=object)[keep]}
        self.pending = {name: None if new[name] is None else
                        np.concatenate([self.pending[name], new[name]]) if self.pending[name] is not None
                        else new[name] for name in _COLUMNS}
        if times.size:
            self.newest = max(self.newest, int(times.max()))
        if self.newest != _NEVER:
            yield from self._close((self.newest - self.lateness * _NS) // size)

    def flush(self) -> Released:
        """The end of the input: every held row fed and every bucket released (:meth:`UnitAggregate.flush`)."""
        parts = list(self._close(None))
        parts.append(self.aggregate.flush())
        return Released(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("buckets", "partitions",
                                                                                    "values")))

    def _close(self, bucket: int | None) -> Iterator[Released]:
        """Feed the held rows of the buckets before ``bucket`` (None: all) in time order and release those buckets."""
        held = self.pending["times"]
        ready = held // (self.aggregate.bucket * _NS) < bucket if bucket is not None else np.ones(held.size, bool)
        if ready.any():
            order = np.flatnonzero(ready)[np.argsort(held[ready], kind="stable")]
            rows = {name: None if column is None else column[order] for name, column in self.pending.items()}
            self.pending = {name: None if column is None else column[~ready] for name, column in self.pending.items()}
            yield from self.aggregate.release_parts(rows["times"], rows["units"], rows["values"], rows["partitions"])
        agg = self.aggregate
        if bucket is not None and agg._open is not None and bucket > agg._open:
            agg._flushed = False
            yield from agg._advance_to(bucket)  # the buckets the watermark closed, with no row after them yet

    def _check(self, values: np.ndarray) -> None:
        """Refuse a value outside [0, B] here, in arrival order, so the message numbers its row as read."""
        agg = self.aggregate
        fed, agg.position = agg.position, self.position
        try:
            agg._check_values(values)
        finally:
            agg.position = fed

    # -- snapshots ---------------------------------------------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data (numpy arrays inside, :mod:`dpstream.durable.encoding` encodes them); SECRET:
        it holds the aggregate's snapshot and the held rows."""
        pending = {name: None if column is None else column.tolist() for name, column in self.pending.items()}
        return {"aggregate": self.aggregate.state, "lateness": self.lateness, "newest": self.newest,
                "dropped": self.dropped, "position": self.position, "pending": pending}

    @classmethod
    def from_state(cls, state: dict[str, Any], aggregate: UnitAggregate) -> WatermarkAggregate:
        """The watermark a :attr:`state` snapshot describes, around ``aggregate`` (restored from its
        ``state["aggregate"]`` by the caller, who holds its key)."""
        marked = cls(aggregate, lateness=int(state["lateness"]))
        marked.newest, marked.dropped = int(state["newest"]), int(state["dropped"])
        marked.position = int(state["position"])
        kinds = {"times": np.int64, "units": object, "values": np.float64, "partitions": object}
        marked.pending = {name: None if column is None else np.asarray(column, dtype=kinds[name])
                          for name, column in state["pending"].items()}
        return marked


def buckets_closed(agg: UnitAggregate, times: Any, skip: np.ndarray | None = None) -> np.ndarray:
    """How many buckets ``agg.release_parts(times, ...)`` would close before each row (a gap between two rows closes
    every bucket in between; ``skip`` marks rows left out), from the times alone and before any work: public, as
    the times are, so that a caller can refuse a gap that would take minutes to release.

    >>> agg = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=1.0)
    >>> buckets_closed(agg, np.array([0, 1800, 7200, 3600, 30 * 86400]) * _NS).tolist()
    [0, 0, 2, 0, 718]
    """
    buckets = np.asarray(times).astype("datetime64[ns]").astype(np.int64) // (agg.bucket * _NS)
    if not buckets.size:
        return buckets
    first = int(buckets[0]) if agg.start is None else agg.start // (agg.bucket * _NS)
    prior = first - first % agg.width if agg._open is None else agg._open
    seen = buckets if skip is None else np.where(skip, prior, buckets)  # a skipped row's time is not read
    return np.diff(np.maximum.accumulate(np.concatenate(([prior], seen))))
