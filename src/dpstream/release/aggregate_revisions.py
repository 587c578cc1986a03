"""Revised values of a unit aggregate: each closed window's total spread over its buckets by a profile.

:class:`~dpstream.release.aggregate.UnitAggregate` releases each bucket once, when it closes, and
never changes it.  Once a whole window (a UTC day) has been released its buckets can be estimated
again from what was published.

The least-squares part is already done.  A window measures one node per bucket and one for the
window (``d = 2``; more levels with ``levels``), and all of them are drawn when the window opens
and made consistent at once (Hay et al., exactly): the first release of every bucket is the
least-squares estimate from **every node of its window**, and the window's total -- the sum of
its first release -- is the least-squares combination of the window node and the leaves' sum
(with equal variances ``v`` per node and ``W`` buckets, ``(W z + S) / (W + 1)``, variance
``v W / (W + 1)``, as is each bucket's).  No later measurement covers a past window, so
least squares over every node measured so far changes nothing: revising by least squares alone
would return the first release.

What does help is what the buckets do not measure well.  One bucket's noise (scale ``dC/eps``)
can exceed the population's load in it, while the window total errs by about one node's noise.
So the revised value of a bucket is the window's released total spread by the **profile** of the
previous windows: the mean of the first release of the last ``history`` windows (only those at
the same place in a cycle of ``cycle`` windows: ``cycle=7`` with days reads the same weekday),
clipped at 0 and normalised to sum to 1, per partition.  The revised buckets of a window sum to
its least-squares total exactly; with no noise and a stream whose windows share one profile they
equal the truth.  A window with no earlier closed window (or whose profile is all zero) keeps
its first release (its least-squares estimate), as does the open window (not all of its
buckets released yet, so its total is not).  The profile trades variance for bias: the spread
bucket errs by the window total's share (``p_j^2 v W / (W + 1)`` for profile ``p``) plus how far
the day's shape is from the profile (the units study: 31% median error of the 30-minute load
instead of 84%, docs/units.md).

Privacy
-------
Post-processing: it reads only the released values and public parameters (the bucket, the
window, ``history``, ``cycle``), spends nothing, and returns a new array; the first release is
never changed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["revise_released", "revise_windows"]

_NS = 1_000_000_000


def revise_windows(first: object, *, history: int = 28, cycle: int = 1) -> np.ndarray:
    """The revised values of consecutive closed windows, shape ``(windows, partitions, buckets)``.

    ``first[k, p]`` is the first release of window ``k`` (consecutive windows, the first at
    position 0 of a cycle or not: only differences of positions are read) in partition ``p``.
    Window ``k`` is spread by the sum of windows ``k - cycle, k - 2 cycle, ...`` not before
    ``k - history``; without one, its first release is kept.  Vectorized.

    >>> first = np.array([[[1.0, 3.0]], [[5.0, 1.0]], [[2.0, 2.0]]])
    >>> revise_windows(first).tolist()  # window 1 by [1, 3], window 2 by [1+5, 3+1]
    [[[1.0, 3.0]], [[1.5, 4.5]], [[2.4, 1.6]]]
    >>> revise_windows(first, history=1).tolist()  # window 2 by window 1 alone
    [[[1.0, 3.0]], [[1.5, 4.5]], [[3.3333333333333335, 0.6666666666666666]]]
    """
    values = np.asarray(first, dtype=np.float64)
    if values.ndim != 3:
        raise ValueError(f"first must have shape (windows, partitions, buckets), got {values.shape}.")
    if history < 1 or cycle < 1:
        raise ValueError(f"history and cycle must be at least 1, got {history} and {cycle}.")
    count = values.shape[0]
    back = history // cycle  # earlier windows of the same place in the cycle
    if back == 0 or count == 0:
        return values.copy()
    # running sums along each residue class: sums[k + pad] = sum of windows k, k - cycle, ... (zeros before 0)
    pad = cycle * (back + 1)
    padded = np.concatenate([np.zeros((pad, *values.shape[1:])), values])
    tail = padded.shape[0] % cycle
    front = np.zeros(((cycle - tail) % cycle, *values.shape[1:]))
    stacked = np.concatenate([front, padded]).reshape(-1, cycle, *values.shape[1:])
    sums = np.cumsum(stacked, axis=0).reshape(-1, *values.shape[1:])[front.shape[0]:]
    k = np.arange(count) + pad
    profile = np.clip(sums[k - cycle] - sums[k - cycle - back * cycle], 0.0, None)
    mass = profile.sum(axis=2, keepdims=True)
    totals = values.sum(axis=2, keepdims=True)
    spread = totals * profile / np.where(mass > 0, mass, 1.0)
    return np.where(mass > 0, spread, values)


def revise_released(buckets: object, partitions: object, values: object, *, bucket: int, width: int,
                    count: int = 1, history: int = 28, cycle: int = 1) -> np.ndarray:
    """The revised values of a first release given row by row (see the module docstring), in its order.

    Parameters
    ----------
    buckets : array of int64
        Each row's bucket start, nanoseconds since the epoch (``Released.buckets``).
    partitions : array of int
        Each row's partition index, ``0 .. count - 1``.
    values : array of float
        Each row's first release.
    bucket, width : int
        The bucket in seconds and the buckets per window (aligned in UTC from the epoch).
    count : int
        The number of partitions.
    history, cycle : int
        As :func:`revise_windows`.

    A window is closed when every one of its buckets and partitions has a row; the rows of the
    others are returned as they are.

    >>> day = np.arange(4) * 6 * 3600 * _NS  # 6-hour buckets, windows of a day
    >>> b = np.concatenate([day, day + 86400 * _NS, day[:2] + 2 * 86400 * _NS])
    >>> v = np.array([1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0, 7.0, 7.0])
    >>> revise_released(b, np.zeros(10, dtype=int), v, bucket=21600, width=4).tolist()
    [1.0, 2.0, 3.0, 4.0, 1.6, 3.2, 4.8, 6.4, 7.0, 7.0]
    """
    starts = np.asarray(buckets, dtype=np.int64)
    parts = np.asarray(partitions, dtype=np.int64)
    first = np.asarray(values, dtype=np.float64)
    out = first.copy()
    if first.size == 0:
        return out
    index = starts // (bucket * _NS)
    window, leaf = np.divmod(index, width)
    low = int(window.min())
    span = int(window.max()) - low + 1
    cell = ((window - low) * count + parts) * width + leaf
    grid = np.zeros(span * count * width)
    seen = np.zeros(span * count * width, dtype=bool)
    grid[cell], seen[cell] = first, True
    closed = seen.reshape(span, count * width).all(axis=1)
    if not closed.any():
        return out
    # consecutive runs of closed windows are revised on their own (a window's past is its own run's)
    revised = grid.reshape(span, count, width).copy()
    edges = np.flatnonzero(np.diff(np.concatenate(([0], closed.astype(np.int8), [0]))))
    for lo, hi in zip(edges[::2], edges[1::2]):  # one run when the release is contiguous, as it always is
        revised[lo:hi] = revise_windows(revised[lo:hi], history=history, cycle=cycle)
    inside = closed[window - low]
    out[inside] = revised.ravel()[cell[inside]]
    return out
