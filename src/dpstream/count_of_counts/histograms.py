"""Count-of-counts histograms of single regions (Kuo et al., Sections 3 and 4).

Three views of the groups of one region (Section 3): ``H[i]``, the number of groups of size
``i``; the cumulative histogram ``Hc[i] = H[0] + ... + H[i]``; and the unattributed histogram
``Hg``, the sorted group sizes.  Internally a histogram is *sparse*: the distinct sizes in
increasing order and their positive counts, so a region with a few thousand distinct sizes
costs a few thousand numbers however large the public bound ``K`` is.

Isotonic regression (the post-processing of Sections 4.2 and 4.3) lives here too:
:func:`isotonic_l2` (pool-adjacent-violators through ``scipy.optimize.isotonic_regression``)
and :func:`isotonic_l1` (exact, integer, by recursive threshold splitting).  Both are
post-processing: pure functions, no randomness, no privacy cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "LevelHistograms",
    "from_cumulative",
    "from_unattributed",
    "isotonic_l1",
    "isotonic_l2",
    "largest_remainder_round",
    "project_to_simplex",
    "to_cumulative",
    "to_dense",
    "to_sparse",
    "to_unattributed",
]


def _as_int_array(values: object, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}.")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        if (
            not np.issubdtype(array.dtype, np.floating)
            or not np.all(np.isfinite(array))
            or np.any(array != np.rint(array))
        ):
            raise ValueError(f"{name} must hold integers, got {array[:5].tolist()}...")
    return array.astype(np.int64)


def to_sparse(group_sizes: object) -> tuple[np.ndarray, np.ndarray]:
    """Distinct sizes and their counts from a list of group sizes (``Hg`` or unsorted).

    >>> [a.tolist() for a in to_sparse([3, 1, 3, 2, 1])]
    [[1, 2, 3], [2, 1, 2]]
    """
    sizes = _as_int_array(group_sizes, "group sizes")
    if sizes.size and sizes.min() < 0:
        raise ValueError(f"group sizes must be >= 0, got {int(sizes.min())}.")
    distinct, counts = np.unique(sizes, return_counts=True)
    return distinct.astype(np.int64), counts.astype(np.int64)


def to_dense(sizes: np.ndarray, counts: np.ndarray, max_size: int) -> np.ndarray:
    """``H`` of length ``max_size + 1``; groups larger than ``max_size`` count as ``max_size`` (Section 4.1).

    >>> to_dense(np.array([1, 2, 3]), np.array([2, 1, 2]), 2).tolist()
    [0, 2, 3]
    """
    capped = np.minimum(np.asarray(sizes, dtype=np.int64), max_size)
    return np.bincount(capped, weights=counts, minlength=max_size + 1).astype(np.int64)


def to_cumulative(sizes: np.ndarray, counts: np.ndarray, max_size: int) -> np.ndarray:
    """``Hc`` of length ``max_size + 1`` (sizes capped at ``max_size``); its last entry is ``G``.

    >>> to_cumulative(np.array([1, 2, 3]), np.array([2, 1, 2]), 3).tolist()
    [0, 2, 3, 5]
    """
    return np.cumsum(to_dense(sizes, counts, max_size))


def from_cumulative(cumulative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sparse ``H`` from a non-decreasing integer ``Hc``.

    >>> [a.tolist() for a in from_cumulative(np.array([0, 2, 3, 5]))]
    [[1, 2, 3], [2, 1, 2]]
    """
    dense = np.diff(np.asarray(cumulative, dtype=np.int64), prepend=0)
    if dense.size and dense.min() < 0:
        raise ValueError("a cumulative histogram must be non-decreasing and start at >= 0.")
    sizes = np.flatnonzero(dense)
    return sizes.astype(np.int64), dense[sizes]


def to_unattributed(sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``Hg``: every group's size, smallest first.

    >>> to_unattributed(np.array([1, 2, 3]), np.array([2, 1, 2])).tolist()
    [1, 1, 2, 3, 3]
    """
    return np.repeat(np.asarray(sizes, dtype=np.int64), np.asarray(counts, dtype=np.int64))


def from_unattributed(unattributed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sparse ``H`` from ``Hg`` (the same as :func:`to_sparse`)."""
    return to_sparse(unattributed)


def isotonic_l2(values: np.ndarray, lower: float = -np.inf, upper: float = np.inf) -> np.ndarray:
    """``argmin ||x - values||_2`` over non-decreasing ``x`` with ``lower <= x <= upper``.

    Pool-adjacent-violators (``scipy.optimize.isotonic_regression``), then clipping: clipping
    the unconstrained solution of a chain isotonic regression to a box is optimal for the
    boxed problem (every pooled block's mean is moved to the nearest feasible value, and
    blocks only merge at the bounds, where clipping already makes them equal).

    >>> isotonic_l2(np.array([-1.0, 3.0, 2.0]), lower=0.0).tolist()
    [0.0, 2.5, 2.5]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    from scipy.optimize import isotonic_regression  # here: scipy.optimize slows every CLI start by 0.3 s

    fitted = isotonic_regression(values).x
    return np.clip(fitted, lower, upper)


def isotonic_l1(
    values: np.ndarray,
    lower: int | np.ndarray,
    upper: int | np.ndarray,
    *,
    starts: np.ndarray | None = None,
) -> np.ndarray:
    """``argmin ||x - values||_1`` over non-decreasing integer ``x`` in ``[lower, upper]``.

    Exact for integer ``values``.  ``starts`` splits ``values`` into independent consecutive
    segments (one isotonic problem each, with its own bounds ``lower[j]``, ``upper[j]``), so
    many regions are solved in one vectorised pass.

    The algorithm is threshold splitting (the threshold theorem for separable convex
    isotonic problems): for a segment whose solution lies in ``[lo, hi]`` and ``m = (lo+hi)//2``,
    the best non-decreasing choice between the values ``m`` and ``m + 1`` (a 0/1 problem:
    each entry ``<= m`` prefers ``m``, each entry ``> m`` prefers ``m + 1``; the best split point
    maximises a prefix sum) tells which entries of *some* optimal solution are ``<= m`` and
    which are ``> m``.  The segment splits there into two independent problems.  Each
    range is first narrowed to the segment's data range (clipping to it never hurts), so the
    depth is about ``log2`` of the data spread; every level costs ``O(n)`` numpy work.  The
    solution takes values among the data and the bounds, as L1 isotonic solutions (medians of
    pooled blocks) may.

    >>> isotonic_l1(np.array([0, 3, 1, 1, 9]), 0, 6).tolist()
    [0, 1, 1, 1, 6]
    """
    y = _as_int_array(values, "values")
    n = y.size
    starts = np.array([0], dtype=np.int64) if starts is None else np.asarray(starts, dtype=np.int64)
    if n == 0:
        return y.copy()
    ends = np.append(starts[1:], n)
    lo = np.broadcast_to(np.asarray(lower, dtype=np.int64), starts.shape).copy()
    hi = np.broadcast_to(np.asarray(upper, dtype=np.int64), starts.shape).copy()
    if np.any(lo > hi):
        raise ValueError(f"isotonic bounds need lower <= upper, got {lo[lo > hi][:3]} > {hi[lo > hi][:3]}.")
    result = np.empty(n, dtype=np.int64)
    while starts.size:
        keep = ends > starts
        starts, ends, lo, hi = starts[keep], ends[keep], lo[keep], hi[keep]
        if starts.size == 0:
            break
        lengths = ends - starts
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        index = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))
        data = y[index]
        # narrow every range to the segment's data range
        lo, hi = (
            np.clip(np.minimum.reduceat(data, offsets), lo, hi),
            np.clip(np.maximum.reduceat(data, offsets), lo, hi),
        )
        done = lo == hi
        if done.any():
            result[np.repeat(index, np.repeat(done, lengths))] = np.repeat(lo[done], lengths[done])
        mid = (lo + hi) // 2
        # +1 where the entry prefers mid (y <= mid), -1 where it prefers mid + 1
        step = np.where(data <= np.repeat(mid, lengths), 1, -1)
        prefix = np.cumsum(step) - step  # sum of the entries before each position, globally
        best_value, best_local = _first_max(prefix, offsets, lengths)
        end_value = np.add.reduceat(step, offsets) + prefix[offsets]
        split = starts + np.where(end_value > best_value, lengths, best_local)
        active = ~done
        starts = np.concatenate((starts[active], split[active]))
        ends_new = np.concatenate((split[active], ends[active]))
        lo = np.concatenate((lo[active], mid[active] + 1))
        hi = np.concatenate((mid[active], hi[active]))
        order = np.argsort(starts, kind="stable")
        starts, ends, lo, hi = starts[order], ends_new[order], lo[order], hi[order]
    return result


def _first_max(values: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest value of every consecutive segment and its first position within the segment.

    Two reductions and a comparison, with no arithmetic on ``values``, so nothing can overflow
    whatever the number of entries.

    >>> [a.tolist() for a in _first_max(np.array([1, 3, 3, 2, 5]), np.array([0, 3]), np.array([3, 2]))]
    [[3, 5], [1, 1]]
    """
    best = np.maximum.reduceat(values, offsets)
    local = np.arange(values.size) - np.repeat(offsets, lengths)
    at_best = values == np.repeat(best, lengths)
    return best, np.minimum.reduceat(np.where(at_best, local, values.size), offsets)


def project_to_simplex(rows: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Row-wise ``argmin ||x - row||_2`` subject to ``x >= 0`` and ``sum(x) = total`` (Section 4.1).

    The exact solution ``x = max(row - theta, 0)`` with ``theta`` found by sorting (Held,
    Wolfe and Crowder 1974).  Rows with total 0 project to zeros.

    >>> project_to_simplex(np.array([[3.0, -1.0, 1.0]]), np.array([2])).tolist()
    [[2.0, 0.0, 0.0]]
    """
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    totals = np.asarray(totals, dtype=np.float64).reshape(-1, 1)
    ordered = -np.sort(-rows, axis=1)
    excess = np.cumsum(ordered, axis=1) - totals
    ranks = np.arange(1, rows.shape[1] + 1)
    inside = ordered - excess / ranks > 0
    last = rows.shape[1] - 1 - np.argmax(inside[:, ::-1], axis=1)
    theta = excess[np.arange(rows.shape[0]), last] / (last + 1)
    projected = np.maximum(rows - theta[:, None], 0.0)
    projected[totals[:, 0] == 0] = 0.0
    return projected


def largest_remainder_round(rows: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Row-wise integer rounding that keeps each row's sum at ``total`` (Section 4.1).

    With ``r = total - sum(floor(x))``, the ``r`` cells with the largest fractional parts are
    rounded up and the rest down.

    >>> largest_remainder_round(np.array([[0.6, 0.7, 1.7]]), np.array([3])).tolist()
    [[0, 1, 2]]
    """
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    floors = np.floor(rows)
    fractions = rows - floors
    missing = np.clip(np.asarray(totals, dtype=np.int64) - floors.sum(axis=1).astype(np.int64), 0, rows.shape[1])
    order = np.argsort(-fractions, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(rows.shape[1])[None, :].repeat(rows.shape[0], 0), axis=1)
    return floors.astype(np.int64) + (ranks < missing[:, None])


@dataclass(frozen=True, kw_only=True)
class LevelHistograms:
    """Sparse count-of-counts histograms of every region of one level.

    Row ``r`` says that region ``node[r]`` has ``count[r] > 0`` groups of size ``size[r]``;
    rows are sorted by ``(node, size)`` and unique.  ``n_nodes`` counts the regions of the
    level, including any without groups.
    """

    node: np.ndarray
    size: np.ndarray
    count: np.ndarray
    n_nodes: int

    @classmethod
    def from_groups(cls, node: np.ndarray, size: np.ndarray, n_nodes: int) -> LevelHistograms:
        """Histograms from one ``(node, size)`` pair per group (any order)."""
        node = np.asarray(node, dtype=np.int64)
        size = np.asarray(size, dtype=np.int64)
        order = np.lexsort((size, node))
        return cls.from_sorted(node[order], size[order], np.ones(node.size, dtype=np.int64), n_nodes)

    @classmethod
    def from_sorted(cls, node: np.ndarray, size: np.ndarray, count: np.ndarray, n_nodes: int) -> LevelHistograms:
        """Histograms from rows sorted by ``(node, size)``; equal rows are added, zero counts dropped."""
        if node.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(node=empty, size=empty, count=empty, n_nodes=n_nodes)
        new = np.ones(node.size, dtype=bool)
        new[1:] = (node[1:] != node[:-1]) | (size[1:] != size[:-1])
        starts = np.flatnonzero(new)
        total = np.add.reduceat(np.asarray(count, dtype=np.int64), starts)
        keep = total > 0
        return cls(node=node[starts][keep], size=size[starts][keep], count=total[keep], n_nodes=n_nodes)

    def groups(self) -> np.ndarray:
        """The number of groups ``G`` of every region."""
        return np.bincount(self.node, weights=self.count, minlength=self.n_nodes).astype(np.int64)

    def distinct_sizes(self) -> np.ndarray:
        """How many distinct group sizes every region has."""
        return np.bincount(self.node, minlength=self.n_nodes).astype(np.int64)

    def max_size(self) -> int:
        """The largest group size of the level (0 if there are no groups)."""
        return int(self.size.max()) if self.size.size else 0

    def aggregate(self, parent: np.ndarray, n_parents: int) -> LevelHistograms:
        """The parents' histograms as sums of their children's (``parent[node]`` for each node)."""
        node = np.asarray(parent, dtype=np.int64)[self.node]
        order = np.lexsort((self.size, node))
        return LevelHistograms.from_sorted(node[order], self.size[order], self.count[order], n_parents)

    def region(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Sparse ``(sizes, counts)`` of one region."""
        lo, hi = np.searchsorted(self.node, [index, index + 1])
        return self.size[lo:hi], self.count[lo:hi]
