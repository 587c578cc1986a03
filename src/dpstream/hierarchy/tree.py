"""A fan-out-b hierarchy over one chunk of a stream, as a list of levels.

Layout.  A chunk of ``n_leaves`` leaves is covered by ``n_levels`` levels; level 0 holds the
leaves and level ``k`` holds nodes that each sum ``b^k`` consecutive leaves.  The top level has
``ceil(n_leaves / b^(n_levels-1))`` nodes and nothing sits above it: with ``r = b^h`` values and
``h`` levels this is the paper's height-h hierarchy whose would-be root (the sum of the whole
chunk) is never measured, i.e. a forest of ``b`` trees.  When ``n_leaves`` is not a multiple of
``b^(n_levels-1)`` the last top-level tree is completed with leaves of value zero that are
never released; they receive noise like every other node, which keeps all trees full and the
consistency step exact.

Every level is a flat array (float64, or int64 grid units on the exact path); a level's node
``j`` has children ``b j .. b j + b - 1`` in the level below, so ``level[k-1].reshape(-1, b)``
lines the children up under their parents.

Exact consistency (:func:`consistent_leaves`).  The least-squares leaves of integer
measurements are rationals with a denominator ``q`` that depends only on ``b`` and the number
of levels; they are computed exactly, as an integer part and a remainder, so that a released
value is a deterministic function of the exact measurements (see that function).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpstream._checks import check_positive_int
from dpstream.noise.sampler import NoiseSampler, make_noise

__all__ = [
    "ExactLeaves",
    "aggregate_levels",
    "consistency_weights",
    "consistent_leaf_variance",
    "consistent_leaves",
    "decomposed_range_sums",
    "draw_noise_levels",
    "draw_noise_units",
    "level_sizes",
    "make_consistent",
    "num_levels",
]


def num_levels(max_range: int, fanout: int) -> int:
    """h = ceil(log_b r), computed exactly on integers (and at least 1).

    >>> num_levels(2**20, 16), num_levels(2**20, 2), num_levels(1000, 16)
    (5, 20, 3)
    """
    max_range = check_positive_int(max_range, "max_range", minimum=2)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    levels, capacity = 0, 1
    while capacity < max_range:
        capacity *= fanout
        levels += 1
    return max(levels, 1)


def level_sizes(n_leaves: int, fanout: int, n_levels: int) -> list[int]:
    """Number of nodes per level, bottom (leaves, padded) to top.

    >>> level_sizes(40, 4, 3)
    [48, 12, 3]
    """
    top = -(-n_leaves // fanout ** (n_levels - 1))
    return [top * fanout ** (n_levels - 1 - k) for k in range(n_levels)]


def aggregate_levels(leaves: np.ndarray, fanout: int, n_levels: int) -> list[np.ndarray]:
    """True partial sums at every level for the given leaves (padded with zeros).

    >>> [level.tolist() for level in aggregate_levels(np.arange(1.0, 5.0), 2, 3)]
    [[1.0, 2.0, 3.0, 4.0], [3.0, 7.0], [10.0]]
    """
    sizes = level_sizes(leaves.size, fanout, n_levels)
    leaves = np.asarray(leaves)
    padded = np.zeros(sizes[0], dtype=np.int64 if leaves.dtype.kind in "iu" else np.float64)  # grid units stay ints
    padded[: leaves.size] = leaves
    levels = [padded]
    for _ in range(1, n_levels):
        levels.append(levels[-1].reshape(-1, fanout).sum(axis=1))
    return levels


def draw_noise_levels(
    rng: np.random.Generator | None,
    n_leaves: int,
    fanout: int,
    n_levels: int,
    scale: float,
    *,
    noise: NoiseSampler | None = None,
) -> list[np.ndarray]:
    """Independent ``Lap(scale)`` noise for every node, bottom level first.

    The noise comes from ``noise.laplace`` (a :class:`~dpstream.noise.sampler.NoiseSampler`);
    by default from numpy's float Laplace on ``rng`` (``FloatNoise(rng=rng)``), and
    ``noise=ZeroNoise()`` gives exact zeros.  The draw order (leaves first, then each level up)
    is fixed, so a seed always gives the same tree however the stream is fed.

    >>> from dpstream.noise import ZeroNoise
    >>> [level.tolist() for level in draw_noise_levels(None, 4, 2, 2, 1.0, noise=ZeroNoise())]
    [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0]]
    """
    sampler = make_noise(noise, rng)
    return [sampler.laplace(scale, size) for size in level_sizes(n_leaves, fanout, n_levels)]


def draw_noise_units(
    noise: NoiseSampler, n_leaves: int, fanout: int, n_levels: int, scale: Fraction, *, gaussian: bool = False
) -> list[np.ndarray]:
    """Discrete Laplace noise of rational ``scale`` (grid units) for every node, bottom level first;
    with ``gaussian``, discrete Gaussian noise of variance parameter ``scale`` (``noise.gaussian_units``).

    All levels come from one ``noise.laplace_units`` call of ``sum(level_sizes(...))`` draws,
    split leaves first, then each level up; the order is fixed, so a bit source always gives the
    same tree however the stream is fed.

    >>> from dpstream.noise import ZeroNoise
    >>> [level.tolist() for level in draw_noise_units(ZeroNoise(), 4, 2, 2, Fraction(3, 2))]
    [[0, 0, 0, 0], [0, 0]]
    """
    sizes = level_sizes(n_leaves, fanout, n_levels)
    draws = (noise.gaussian_units if gaussian else noise.laplace_units)(scale, sum(sizes))
    return np.split(np.asarray(draws, dtype=np.int64), np.cumsum(sizes)[:-1])


@lru_cache(maxsize=256)
def consistency_weights(fanout: int, n_levels: int) -> tuple[int, tuple[int, ...]]:
    """``(q, alpha)``: the exact weights of :func:`consistent_leaves` for ``b`` and ``L`` levels.

    The least-squares leaf is ``S_j + sum_{m=1}^{L-1} w_m A_m(j)`` with
    ``w_m = -(b - 1)^2 / ((b^m - 1)(b^(m+1) - 1))``; ``q`` is the least common denominator of the
    ``w_m`` and ``alpha[m] = q w_m`` (an integer; ``alpha[0] = 0``).

    >>> consistency_weights(2, 2), consistency_weights(16, 3)
    ((3, (0, -1)), (4641, (0, -273, -1)))
    """
    weights = [Fraction(-((fanout - 1) ** 2), (fanout**m - 1) * (fanout ** (m + 1) - 1)) for m in range(1, n_levels)]
    q = math.lcm(1, *(w.denominator for w in weights))
    return q, (0, *(int(w * q) for w in weights))


@dataclass(frozen=True)
class ExactLeaves:
    """Exact rational leaves ``integer + remainder / denominator`` with ``0 <= remainder < denominator``.

    ``fraction()`` is ``remainder / denominator`` correctly rounded to float64.
    """

    integer: np.ndarray
    remainder: np.ndarray
    denominator: int

    def fraction(self) -> np.ndarray:
        """``remainder / denominator`` as float64, correctly rounded (Python int division if needed)."""
        if self.denominator < 1 << 53:
            return self.remainder.astype(np.float64) / float(self.denominator)  # both exact: IEEE rounds once
        return np.array([int(r) / self.denominator for r in self.remainder.tolist()], dtype=np.float64)

    def exact(self, index: int) -> Fraction:
        """Leaf ``index`` as a Fraction (tests)."""
        return int(self.integer[index]) + Fraction(int(self.remainder[index]), self.denominator)


def consistent_leaves(levels: list[np.ndarray], fanout: int) -> ExactLeaves:
    """The least-squares consistent leaves of integer node measurements, computed exactly.

    For a forest of full trees of ``L`` levels with equal-variance measurements ``M`` (level 0 the
    leaves), ``X^T X = sum_k J_k`` where ``J_k`` is block-diagonal with all-ones blocks of
    ``b^k`` leaves.  These commute; on the components ``E_m`` (constant on blocks of ``b^m``,
    summing to zero on blocks of ``b^(m+1)``) ``X^T X`` is ``(b^(m+1) - 1) / (b - 1)``, and
    inverting it gives the estimate

        x_j = S_j + sum_{m=1}^{L-1} w_m A_m(j),   w_m = -(b - 1)^2 / ((b^m - 1)(b^(m+1) - 1)),

    where ``S_j = (X^T M)_j`` is the sum of the measurements on the path from leaf ``j`` to its
    top node and ``A_m(j)`` the sum of ``S`` over the ``b^m`` leaves under ``j``'s level-``m``
    ancestor: integers.  It equals Hay et al.'s two passes (:func:`make_consistent`), e.g. for
    ``b = 2`` and leaves (1, 2, 3, 4) under parents (4, 6): ``S = (5, 6, 9, 10)``,
    ``A_1 = (11, 11, 19, 19)`` and ``x = S - A_1 / 3``.

    With ``q`` the common denominator of the ``w_m`` (:func:`consistency_weights`), ``q x_j`` is
    an integer; it is split into ``x_j = integer_j + remainder_j / q``, ``0 <= remainder < q``.
    Products of the weights with ``A_m`` can exceed 64 bits, so they are formed in Python ints,
    on the level-1 blocks only (``b`` times fewer than the leaves); the rest is int64.

    Returns
    -------
    ExactLeaves
        For the online algorithm (Theorem 3.1): consistent leaves of ``T + N`` are
        ``T + consistent(N)``, so with true (integer) block sums ``T_j`` a released block is
        ``T_j + integer_j + remainder_j / q`` exactly: its floor is ``T_j + integer_j`` and its
        remainder ``remainder_j``, whatever ``T``.  Any fixed function of those two numbers --
        ``ExactLeaves.to_float`` -- is a deterministic function of the exact measurements.

    >>> leaves = consistent_leaves([np.array([1, 2, 3, 4]), np.array([4, 6])], 2)
    >>> [str(leaves.exact(j)) for j in range(4)]
    ['4/3', '7/3', '8/3', '11/3']
    """
    n_levels = len(levels)
    q, alpha = consistency_weights(fanout, n_levels)
    largest = max((int(np.max(np.abs(level))) if level.size else 0) for level in levels)
    if largest * n_levels * fanout ** (n_levels - 1) >= 1 << 62:  # path and block sums might overflow int64
        levels = [np.asarray(level, dtype=object) for level in levels]
        dtype = object
    else:
        levels = [np.asarray(level, dtype=np.int64) for level in levels]
        dtype = np.int64
    path = levels[-1]
    for k in range(n_levels - 2, -1, -1):
        path = levels[k] + np.repeat(path, fanout)
    if n_levels == 1:
        return ExactLeaves(integer=path.astype(np.int64), remainder=np.zeros(path.size, dtype=np.int64), denominator=1)
    blocks = [path]
    for _ in range(1, n_levels):
        blocks.append(blocks[-1].reshape(-1, fanout).sum(axis=1))
    correction = blocks[-1].astype(object) * alpha[n_levels - 1]
    for m in range(n_levels - 2, 0, -1):
        correction = np.repeat(correction, fanout) + blocks[m].astype(object) * alpha[m]
    whole = correction // q  # floor division of Python ints: remainder in [0, q)
    remainder = correction - whole * q
    integer = path + np.repeat(whole.astype(dtype), fanout)
    if q < 1 << 62:
        remainder = remainder.astype(np.int64)
    return ExactLeaves(
        integer=np.asarray(integer, dtype=np.int64), remainder=np.repeat(remainder, fanout), denominator=q
    )


@lru_cache(maxsize=64)
def consistent_leaf_variance(fanout: int, n_levels: int) -> float:
    """The variance of a least-squares consistent leaf (:func:`make_consistent`) for unit-variance noise on
    every node of a full hierarchy: ``sum_k M[0, k]^2`` for the linear map ``M`` from the nodes' noise to the
    leaves', found by making each node's unit vector consistent (every leaf has the same: a full hierarchy
    is symmetric).  Times one node's variance it is a released leaf's, exactly; linear in the nodes of one
    top-level tree, ``sum_k b^k``.

    >>> round(consistent_leaf_variance(2, 2), 12), consistent_leaf_variance(48, 1)  # b / (b + 1) under one parent
    (0.666666666667, 1.0)
    """
    sizes = level_sizes(fanout ** (n_levels - 1), fanout, n_levels)
    total = 0.0
    for k in range(sum(sizes)):
        basis = np.zeros(sum(sizes))
        basis[k] = 1.0
        total += float(make_consistent(np.split(basis, np.cumsum(sizes)[:-1]), fanout)[0][0]) ** 2
    return total


def make_consistent(levels: list[np.ndarray], fanout: int) -> list[np.ndarray]:
    """Least-squares consistent estimates from equal-variance noisy levels (Hay et al.).

    Two passes, as in Appendix C of the ToPS paper.  Bottom-up (Eq. 10), for a node ``x`` at
    height ``l`` (leaves have height 1):

        z(x) = (b^l - b^(l-1)) / (b^l - 1) * H(x) + (b^(l-1) - 1) / (b^l - 1) * sum_chd z(y)

    Top-down (Eq. 11), the top level keeps ``z`` and every other node takes

        H'(x) = (b - 1) / b * z(x) + 1 / b * (H'(prt(x)) - sum_sbl z(y))
              = z(x) + (H'(prt(x)) - sum_chd(prt(x)) z(y)) / b,

    where the siblings' values are the bottom-up ``z`` values.  Afterwards every parent equals
    the sum of its children up to float rounding.  Applied to pure noise it gives the noise of
    the online algorithm (Theorem 3.1): since true sums are consistent already, making
    ``T + N`` consistent equals ``T`` plus consistent ``N``.

    >>> noisy = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 6.0])]
    >>> [np.round(level, 3).tolist() for level in make_consistent(noisy, 2)]
    [[1.333, 2.333, 2.667, 3.667], [3.667, 6.333]]
    """
    n_levels = len(levels)
    bottom_up = [np.asarray(levels[0], dtype=np.float64)]
    for k in range(1, n_levels):
        height = k + 1
        b_l, b_l1 = float(fanout) ** height, float(fanout) ** (height - 1)
        child_sums = bottom_up[-1].reshape(-1, fanout).sum(axis=1)
        bottom_up.append(((b_l - b_l1) * levels[k] + (b_l1 - 1.0) * child_sums) / (b_l - 1.0))
    result = [np.empty(0)] * n_levels
    result[-1] = bottom_up[-1]
    for k in range(n_levels - 2, -1, -1):
        children = bottom_up[k].reshape(-1, fanout)
        correction = (result[k + 1] - children.sum(axis=1)) / fanout
        result[k] = (children + correction[:, None]).ravel()
    return result


def decomposed_range_sums(
    levels: list[np.ndarray], fanout: int, starts: np.ndarray, stops: np.ndarray
) -> np.ndarray:
    """Answer range sums [start, stop) (in leaves) from the fewest nodes that tile each range.

    This is how a hierarchy *without* consistency answers a range query: at each level it uses
    the nodes inside the range that are not inside an already-used parent, at most
    ``2 (b - 1)`` per level.  Vectorized over queries with one prefix sum per level.

    >>> levels = aggregate_levels(np.arange(8.0), 2, 3)
    >>> decomposed_range_sums(levels, 2, np.array([0, 1, 3]), np.array([8, 6, 3])).tolist()
    [28.0, 15.0, 0.0]
    """
    starts = np.asarray(starts, dtype=np.int64)
    stops = np.asarray(stops, dtype=np.int64)
    total = np.zeros(starts.shape, dtype=np.float64)
    # Node range [lo_k, hi_k) fully inside the query at level k; the part also covered by level
    # k+1 is [fanout * lo_{k+1}, fanout * hi_{k+1}) when that range is non-empty.
    n_levels = len(levels)
    lows, highs = [], []
    for k in range(n_levels):
        width = fanout**k
        lo = -(-starts // width)
        hi = np.maximum(stops // width, lo)
        lows.append(lo)
        highs.append(hi)
    for k, level in enumerate(levels):
        prefix = np.concatenate(([0.0], np.cumsum(level)))
        lo, hi = lows[k], highs[k]
        if k + 1 < n_levels:
            inner_lo, inner_hi = fanout * lows[k + 1], fanout * highs[k + 1]
            has_inner = inner_hi > inner_lo
            left = np.where(has_inner, inner_lo, hi)
            right = np.where(has_inner, inner_hi, hi)
            total += prefix[left] - prefix[lo] + prefix[hi] - prefix[right]
        else:
            total += prefix[hi] - prefix[lo]
    return total
