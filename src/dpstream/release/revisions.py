"""Revised values: the best current estimate of every value of a closed leaf (a period, a block).

A hierarchical release (:class:`~dpstream.release.perturber.HierarchicalPerturber`, its periodic
form :class:`~dpstream.release.periodic.PeriodicPerturber`) releases each value online: inside a
leaf every value is the smoother's prediction (times the public shape of the period), and the
leaf's last value carries the correction that makes the leaf sum to its measured estimate ``u``.
That is right for a release that may not wait, and misleading to read: a day of 15-minute
readings shows 95 flat predictions and one large (possibly negative) last value.

Once a leaf has closed, its values can be estimated again from what was published:

* the leaf's total is the sum of its first release (the last value makes it so), which is the
  consistent estimate ``u``.  It is already the least-squares estimate from every measured node
  of its chunk: the chunk's noise is drawn and made consistent when the chunk starts
  (Appendix C of the ToPS paper), so ``u`` equals what offline least squares over all the
  chunk's nodes gives, and no later measurement changes it;
* the leaf measures nothing inside itself, so where the total lies within the leaf follows the
  public shape the predictions used (:attr:`Leaves.shape`: the private profile of the period
  that the hold-out paid for, or flat): the revised value at a position is
  ``u * shape[position] / sum(shape over the leaf's positions)``.

The revised values of a closed leaf sum to its total, equal the truth when the stream follows
the shape exactly and the noise is zero, and never change again (a closed leaf's total is
fixed).  The values of the open leaf (the last one, not complete yet) have no measurement: their
best estimate is the prediction, which is their first release, returned unchanged -- they may
change when the leaf closes.

Privacy
-------
Post-processing: the revision reads only the published first release and public parameters
(the leaf length, where the stream starts in its leaf, the chunk length, the public shape), so it
spends nothing and the guarantee of the release holds for the revised values as well.  It never
changes the first release: it returns a new array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Leaves", "closed_count", "revise"]


@dataclass(frozen=True)
class Leaves:
    """The public layout of a hierarchy's leaves over the released stream.

    Released value ``i`` sits at clock position ``q = i + phase``; hierarchy chunks start at
    clock multiples of ``chunk``, and inside a chunk a leaf starts every ``length`` positions
    (the chunk's last leaf may be shorter).  ``shape`` is the public within-leaf profile of the
    predictions (``length`` non-negative numbers), None for flat.

    >>> Leaves(length=4, phase=1).starts(7).tolist()  # clock 1..7: leaves [1, 4), [4, 8)
    [0, 3]
    >>> Leaves(length=4, chunk=6).starts(10).tolist()  # chunks of 6: leaves [0, 4), [4, 6), [6, 10)
    [0, 4, 6]
    """

    length: int
    phase: int = 0
    chunk: int | None = None
    shape: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.length < 1 or not 0 <= self.phase or (self.chunk is not None and self.chunk < 1):
            raise ValueError(f"leaves need length >= 1, phase >= 0 and chunk >= 1, got {self!r}.")
        if self.shape is not None and np.shape(self.shape) != (self.length,):
            raise ValueError(f"shape must hold one number per position of a leaf ({self.length}), "
                             f"got {np.shape(self.shape)}.")

    def _offsets(self, n: int, start: int = 0) -> np.ndarray:
        """Position inside its leaf of each released value ``start .. start + n - 1``."""
        clock = np.arange(self.phase + start, self.phase + start + n, dtype=np.int64)
        if self.chunk is not None:
            clock %= self.chunk
        return clock % self.length

    def starts(self, n: int) -> np.ndarray:
        """Indices, among ``n`` released values, where a leaf starts (0 always: the first leaf may be partial)."""
        if n == 0:
            return np.empty(0, dtype=np.int64)
        first = self._offsets(n) == 0
        first[0] = True
        return np.flatnonzero(first)

    def weights(self, n: int) -> np.ndarray:
        """The shape at each of ``n`` released values (ones when flat)."""
        return np.ones(n) if self.shape is None else np.asarray(self.shape, dtype=np.float64)[self._offsets(n)]


def closed_count(n: int, leaves: Leaves) -> int:
    """How many of ``n`` released values lie in closed leaves (the rest are the open leaf's).

    >>> closed_count(7, Leaves(length=4, phase=1)), closed_count(6, Leaves(length=4, phase=1))
    (7, 3)
    """
    if n == 0:
        return 0
    if leaves._offsets(1, start=n)[0] == 0:  # the next value would start a leaf: the last one closed
        return n
    return int(leaves.starts(n)[-1])


def revise(released: object, leaves: Leaves) -> np.ndarray:
    """The revised values of a first release (see the module docstring): each closed leaf's total
    spread over its positions by the shape; the open leaf's values as released.  Vectorized.

    Parameters
    ----------
    released : array of float
        The first release from its first value on (every released value so far, in order).
    leaves : Leaves
        The public layout of the release's leaves.

    Returns
    -------
    numpy.ndarray
        A new array of the same length; ``released`` is not changed.

    Examples
    --------
    >>> first = np.array([0.0, 0.0, 3.0, 1.0, 1.0, 1.0, 15.0, 2.0])  # leaves [0, 3), [3, 7) closed, [7, 8) open
    >>> revise(first, Leaves(length=4, phase=1)).tolist()
    [1.0, 1.0, 1.0, 4.5, 4.5, 4.5, 4.5, 2.0]
    >>> revise(first, Leaves(length=4, phase=1, shape=np.array([1.0, 1.0, 1.0, 3.0]))).tolist()
    [0.6, 0.6, 1.8, 3.0, 3.0, 3.0, 9.0, 2.0]
    """
    values = np.asarray(released, dtype=np.float64).ravel()
    out = values.copy()
    closed = closed_count(values.size, leaves)
    if closed == 0:
        return out
    starts = leaves.starts(closed)
    weights = leaves.weights(closed)
    totals = np.add.reduceat(values[:closed], starts)
    mass = np.add.reduceat(weights, starts)
    flat = mass <= 0  # a partial leaf whose positions the shape gives no weight: spread it evenly
    if flat.any():
        leaf = np.repeat(np.arange(starts.size), np.diff(np.append(starts, closed)))
        weights = np.where(flat[leaf], 1.0, weights)
        mass = np.add.reduceat(weights, starts)
    lengths = np.diff(np.append(starts, closed))
    out[:closed] = np.repeat(totals, lengths) * weights / np.repeat(mass, lengths)
    return out
