"""Random range queries and their error metrics (Section 5.1, Eq. 9, Appendix F).

A range query ``V(i, j)`` is the sum of the values at positions ``i .. j - 1`` of the released
part of the stream.  A random query draws two positions uniformly (with replacement) from the
released part and sorts them, as the paper's experiments do; an empty query (``i == j``) has
zero error and counts as length 1 in the normalized metrics.  A query of fixed length ``L``
(:func:`fixed_length_queries`) starts at a uniform position and covers ``L`` values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["METRICS", "RangeQueries", "error_metrics", "fixed_length_queries", "prefix_range_sums", "random_queries"]

#: The metrics every experiment reports, in this order.
METRICS = ("mse", "mae", "mmse", "mmae")


@dataclass(frozen=True, kw_only=True)
class RangeQueries:
    """Query ranges [starts, stops) over positions of the released part."""

    starts: np.ndarray
    stops: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return self.stops - self.starts


def random_queries(rng: np.random.Generator, n: int, count: int) -> RangeQueries:
    """``count`` random queries over ``n`` released positions.

    >>> q = random_queries(np.random.default_rng(0), 100, 5)
    >>> bool(np.all(q.starts <= q.stops)), bool(q.stops.max() < 100)
    (True, True)
    """
    if n < 1 or count < 1:
        raise ValueError(f"need at least one position and one query, got n={n}, count={count}.")
    ends = np.sort(rng.integers(0, n, size=(count, 2)), axis=1)
    return RangeQueries(starts=ends[:, 0], stops=ends[:, 1])


def fixed_length_queries(rng: np.random.Generator, n: int, count: int, length: int) -> RangeQueries:
    """``count`` queries of exactly ``length`` values each, starting uniformly over ``n`` released positions.

    >>> q = fixed_length_queries(np.random.default_rng(0), 100, 5, 30)
    >>> q.lengths.tolist(), bool(q.stops.max() <= 100)
    ([30, 30, 30, 30, 30], True)
    """
    if n < 1 or count < 1:
        raise ValueError(f"need at least one position and one query, got n={n}, count={count}.")
    if not 1 <= length <= n:
        raise ValueError(f"query length must be between 1 and the {n:,} released positions, got {length!r}.")
    starts = rng.integers(0, n - length + 1, size=count)
    return RangeQueries(starts=starts, stops=starts + length)


def prefix_range_sums(values: np.ndarray, queries: RangeQueries) -> np.ndarray:
    """Exact sums of ``values`` over each query range, from one prefix sum.

    >>> prefix_range_sums(np.arange(5.0), RangeQueries(starts=np.array([0, 1]), stops=np.array([5, 3]))).tolist()
    [10.0, 3.0]
    """
    prefix = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
    return prefix[queries.stops] - prefix[queries.starts]


def error_metrics(estimates: np.ndarray, truth: np.ndarray, queries: RangeQueries) -> dict[str, float]:
    """MSE (Eq. 9), MAE, and their per-value normalized versions MMSE and MMAE (Appendix F).

    >>> q = RangeQueries(starts=np.array([0, 0]), stops=np.array([2, 4]))
    >>> error_metrics(np.array([3.0, 2.0]), np.array([1.0, 2.0]), q)
    {'mse': 2.0, 'mae': 1.0, 'mmse': 0.5, 'mmae': 0.5}
    """
    errors = np.asarray(estimates, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    normalized = errors / np.maximum(queries.lengths, 1)
    return {
        "mse": float(np.mean(errors**2)),
        "mae": float(np.mean(np.abs(errors))),
        "mmse": float(np.mean(normalized**2)),
        "mmae": float(np.mean(np.abs(normalized))),
    }
