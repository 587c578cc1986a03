"""Contribution bounding of privacy units, online: what each unit may add to one aligned window.

Per unit and window (:class:`ContributionBounds`): at most ``max_partitions`` partitions
(PipelineDP's ``max_partitions_contributed``), at most ``max_rows`` rows, and an L1 bound
``limit`` on the sum of its amounts (values already clipped to ``[0, B]`` and rounded to the
public grid, in integer grid units; a count's amount is 1 per row).  Which rows are kept is a
function of the unit's own rows in the window, in the order they arrive:

1. a row whose partition is new to the unit is dropped once the unit has ``max_partitions``
   partitions in the window (its first partitions, in arrival order, are kept);
2. of the rows left, a row is dropped once the unit has ``max_rows`` rows in the window;
3. of the rows kept, each adds its amount until the unit's total reaches ``limit``: the row that
   crosses it adds what is left (it is *scaled* down), later rows add 0.

So a unit's total contribution to a window is at most ``limit``, whatever its rows, and removing
one unit's rows of one window changes nothing else: the bounding of another unit or another
window never reads them.  The state is one row count, one total and up to ``max_partitions``
partition numbers per unit active in the current window (constant memory per active unit),
cleared when the next window begins.  Batches are bounded with numpy group operations (no
Python loop per row); a batch gives what its rows given one at a time give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ContributionBounder", "ContributionBounds", "codes"]


@dataclass(frozen=True)
class ContributionBounds:
    """Per unit and window: the L1 ``limit`` (grid units), ``max_rows`` and ``max_partitions`` (None: no bound)."""

    limit: int
    max_rows: int | None = None
    max_partitions: int | None = None


def codes(labels: Any) -> tuple[list[Any], np.ndarray]:
    """The distinct labels and each row's index among them: a pyarrow array by hashing (its dictionary
    encoding), anything else by sorting (:func:`numpy.unique`).

    >>> codes(np.array(["b", "a", "b"]))
    (['a', 'b'], array([1, 0, 1]))
    """
    if isinstance(labels, (pa.Array, pa.ChunkedArray)):
        encoded = pc.dictionary_encode(labels)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        return encoded.dictionary.to_pylist(), np.asarray(encoded.indices, dtype=np.int64)
    names, inverse = np.unique(np.asarray(labels), return_inverse=True)
    return names.tolist(), inverse.ravel()


def _running(ordered: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The running sum of ``ordered`` within each group (rows grouped, ``rank`` 0 where a group starts)."""
    running = np.cumsum(ordered)
    starts = np.flatnonzero(rank == 0)
    offsets = running[starts] - ordered[starts]
    return running - np.repeat(offsets, np.diff(np.concatenate((starts, [rank.size]))))


def _group_positions(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable order of ``groups`` and, in that order, each row's rank within its group (0, 1, ...)."""
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    sizes = np.diff(np.concatenate((starts, [ordered.size])))
    rank = np.arange(ordered.size) - np.repeat(starts, sizes)
    return order, rank


class ContributionBounder:
    """The bounding of one window at a time (see the module docstring).

    >>> b = ContributionBounder(ContributionBounds(limit=10, max_rows=3))
    >>> b.bound(np.array(["a", "a", "b", "a", "a"]), np.array([4, 4, 20, 4, 4]), np.zeros(5, dtype=np.int64)).tolist()
    [4, 4, 10, 2, 0]
    """

    def __init__(self, bounds: ContributionBounds) -> None:
        self.bounds = bounds
        self._slots: dict[Any, int] = {}
        self._rows = np.zeros(0, dtype=np.int64)
        self._totals = np.zeros(0, dtype=np.int64)
        self._parts = np.zeros((0, bounds.max_partitions or 0), dtype=np.int64)

    @property
    def active(self) -> int:
        """Units with rows in the current window."""
        return len(self._slots)

    def units_per_partition(self, size: int) -> np.ndarray:
        """How many units hold each partition number below ``size`` among their first ``max_partitions`` this window."""
        return np.bincount(self._parts[self._parts >= 0], minlength=size)[:size]

    def clear(self) -> None:
        """A new window: every unit starts again."""
        self._slots.clear()
        self._rows = self._rows[:0]
        self._totals = self._totals[:0]
        self._parts = self._parts[:0]

    def _slots_of(self, units: Any) -> np.ndarray:
        names, inverse = codes(units)
        slots = self._slots
        start = len(slots)
        mapped = np.fromiter((slots.setdefault(name, len(slots)) for name in names), dtype=np.int64,
                             count=len(names))
        grown = len(slots) - start
        if grown:
            self._rows = np.concatenate((self._rows, np.zeros(grown, dtype=np.int64)))
            self._totals = np.concatenate((self._totals, np.zeros(grown, dtype=np.int64)))
            self._parts = np.concatenate((self._parts, np.full((grown, self._parts.shape[1]), -1, dtype=np.int64)))
        return mapped[inverse]

    def bound(self, units: np.ndarray, amounts: np.ndarray, partitions: np.ndarray) -> np.ndarray:
        """The amount each row adds (int64 grid units, 0 for a dropped row), rows of one window in arrival order."""
        if not len(amounts):
            return np.zeros(0, dtype=np.int64)
        slot = self._slots_of(units)
        keep = self._partitions_kept(slot, partitions) if self.bounds.max_partitions is not None else None
        amounts = np.asarray(amounts, dtype=np.int64)
        if keep is not None:
            amounts = np.where(keep, amounts, 0)
        kept_rows = np.ones(slot.size, dtype=bool) if keep is None else keep
        order, rank = _group_positions(slot)
        ordered_slot, ordered_kept = slot[order], kept_rows[order]
        if self.bounds.max_rows is not None:  # rank among the rows that passed step 1
            kept_rank = _running(ordered_kept.astype(np.int64), rank) - 1
            within = ordered_kept & (self._rows[ordered_slot] + kept_rank < self.bounds.max_rows)
        else:
            within = ordered_kept
        counted = np.zeros(slot.size, dtype=bool)
        counted[order] = within
        np.add.at(self._rows, slot[counted], 1)
        ordered_amounts = np.where(within, amounts[order], 0)
        after = self._totals[ordered_slot] + _running(ordered_amounts, rank)  # the unit's total after each row
        limit = self.bounds.limit
        added = np.minimum(after, limit) - np.minimum(after - ordered_amounts, limit)
        last = np.concatenate((rank[1:] == 0, [True]))
        self._totals[ordered_slot[last]] = np.minimum(after[last], limit)
        out = np.empty(slot.size, dtype=np.int64)
        out[order] = added
        return out

    def _partitions_kept(self, slot: np.ndarray, partitions: np.ndarray) -> np.ndarray:
        """Step 1: whether each row's partition is one of its unit's first ``max_partitions``."""
        k = self.bounds.max_partitions
        partitions = np.asarray(partitions, dtype=np.int64)
        base = max(int(partitions.max(initial=0)), int(self._parts.max(initial=0))) + 1
        pairs = slot * base + partitions  # (unit, partition) as one number
        held = self._parts >= 0  # the units' partitions so far: rows x K would not fit in memory for a large K
        known = np.isin(pairs, np.nonzero(held)[0] * base + self._parts[held])
        _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        new = ~known[first]
        firsts = np.sort(first[new])  # the first row of each new (unit, partition), in arrival order
        allowed = np.zeros(first.size, dtype=bool)
        allowed[~new] = True
        if firsts.size:
            order, rank = _group_positions(slot[firsts])
            counts = (self._parts >= 0).sum(axis=1)
            rows = firsts[order]
            ok = counts[slot[rows]] + rank < k
            pair_of_row = inverse.ravel()
            allowed[pair_of_row[rows[ok]]] = True
            taken = rows[ok]  # filled columns are contiguous: the r-th new partition goes to column count + r
            self._parts[slot[taken], (counts[slot[rows]] + rank)[ok]] = partitions[taken]
        return allowed[inverse.ravel()]

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The bounding state as plain data."""
        return {"units": list(self._slots), "rows": self._rows.copy(), "totals": self._totals.copy(),
                "partitions": self._parts.copy()}

    def restore(self, data: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot`."""
        self._slots = {name: index for index, name in enumerate(data["units"])}
        self._rows = np.asarray(data["rows"], dtype=np.int64).copy()
        self._totals = np.asarray(data["totals"], dtype=np.int64).copy()
        # the columns as constructed: a snapshot taken before any row holds no unit, and reshape(0, -1) is ambiguous
        self._parts = np.asarray(data["partitions"], dtype=np.int64).reshape(len(self._slots),
                                                                             self._parts.shape[1]).copy()
