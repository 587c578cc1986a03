"""The expected squared error of a range query for ToPS's actual pipeline, as a function of theta and s.

ToPS truncates at theta, measures ``d = h - s`` levels of a fan-out-``b`` forest whose leaves
are blocks of ``bs = b^s`` values, each node with Laplace noise of scale
``beta = theta d / eps``, makes the forest consistent (Hay et al.), and releases every value
of a block but the last as the previous block's mean (the Recent smoother), the last so that
the block sums to its estimate ``u``.  The released prefix sum at position ``x`` (block ``k``,
offset ``o``) is therefore ``sum_{j < k} u_j + o u_{k-1} / bs``, and a query ``[a, a + L)``
errs by the difference of two such prefixes.  Its error has four parts, which this module
models separately and adds (their cross terms vanish in expectation or are dropped, as noted):

1. **Noise.**  The consistent estimates are the least-squares estimates of the leaves, so
   the noise of a linear functional ``q`` of the leaves has variance ``2 beta^2 q^T M^+ q`` with
   ``M = sum_v 1_v 1_v^T`` over the measured nodes.  ``M`` lies in the algebra of the
   level-averaging projections ``E_l`` (``E_l E_k = E_max(l,k)``), so with
   ``S_l = 1 + b + ... + b^(l-1)``,
   ``q^T M^+ q = sum_l (|E_l q|^2 - |E_(l+1) q|^2) / S_l``, and ``|E_l q|^2`` is a sum over the
   at most two partial nodes and the full nodes a query touches: exact, in O(d) per query
   (:func:`range_noise_factor`).  This includes the smoother's use of the previous leaf.
2. **Smoothing.**  The data part of a prefix error is ``o mu_(k-1) - S_k(o)`` (the previous
   block's mean of truncated values times ``o``, minus the sum of the first ``o`` values of the
   block).  For values with variance ``sigma^2`` around a level whose block means move by
   ``delta`` between consecutive blocks it has mean square ``o^2 (sigma^2 / bs + delta^2) +
   o sigma^2``; two endpoints in one block err by ``L^2 (sigma^2 / bs + delta^2) + L sigma^2``,
   in adjacent blocks they share one block (covariance ``-o_a o_b sigma^2 / bs``).
3. **Truncation.**  A query of length ``L`` misses ``sum (v - theta)^+`` over its values:
   ``L^2 mu_theta^2 + L tau_theta^2`` for independent values with excess mean ``mu_theta`` and
   variance ``tau_theta^2``.  Over the query lengths it weighs ``E[L^2]`` and ``E[L]`` (the
   ToPL derivation of Eq. 8 weighs ``r^2 / 6``, the same ``E[L^2]`` for the paper's queries).
4. **The first block.**  Block 0 is released as the prior ``p0``; an endpoint in it (chance
   ``bs / n`` for a stream of ``n`` released values) errs by ``o (p0 - mu_0)``.

Averages over the query's start (the forest is periodic with the width ``b^(h-1)`` of a top
node, whatever s is) and over its length use a fixed quadrature of a few thousand points
(a golden-ratio sequence of starts, equal-probability strata of lengths), so a model costs
milliseconds and is deterministic.  Everything is vectorized over candidate thresholds.

The model assumes the Recent smoother (ToPS's default); with another smoother it is an
approximation.  Noise of the exact path (discrete Laplace) has a variance slightly below the
continuous ``2 beta^2`` the model uses.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from dpstream._checks import check_epsilon, check_positive_int
from dpstream.hierarchy import num_levels

__all__ = [
    "DataSummary",
    "ErrorModel",
    "QueryLengths",
    "aligned_noise_factors",
    "range_noise_factor",
]

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def range_noise_factor(starts: np.ndarray, stops: np.ndarray, *, block_size: int, fanout: int,
                       measured_levels: int) -> np.ndarray:
    """Variance of the noise of the released sums over ``[start, stop)``, per unit node variance.

    Exact for the consistent forest of ToPS's perturber with the Recent smoother (see the
    module docstring), for queries whose start lies after the first block (``start >=
    block_size``; the first block's prediction is the noiseless prior).  Multiply by the node
    variance ``2 beta^2`` to get the variance.

    >>> # one leaf of a one-level forest: exactly the node's own noise
    >>> range_noise_factor(np.array([16]), np.array([32]), block_size=16, fanout=16, measured_levels=1).tolist()
    [1.0]
    >>> # half a block after the first: half the previous leaf's noise, so a quarter of its variance
    >>> range_noise_factor(np.array([16]), np.array([24]), block_size=16, fanout=16, measured_levels=1).tolist()
    [0.25]
    """
    starts = np.asarray(starts, dtype=np.int64)
    stops = np.asarray(stops, dtype=np.int64)
    if np.any(starts < block_size) or np.any(stops < starts):
        raise ValueError("range_noise_factor needs block_size <= start <= stop for every query.")
    ka, kb = starts // block_size, stops // block_size
    fa, fb = (starts % block_size) / block_size, (stops % block_size) / block_size
    projections = []
    for level in range(measured_levels):
        width = fanout**level
        node_a, node_b = (ka - 1) // width, (kb - 1) // width
        same = node_a == node_b
        inside = (kb - ka) + fb - fa
        left = (node_a + 1) * width - ka - fa
        right = kb - node_b * width + fb
        full = np.maximum(node_b - node_a - 1, 0) * float(width) ** 2
        squares = np.where(same, inside**2, left**2 + right**2 + full)
        projections.append(squares / width)
    projections.append(np.zeros(starts.shape))
    total = np.zeros(starts.shape)
    nodes_below = 0
    for level in range(measured_levels):
        nodes_below += fanout**level
        total += (projections[level] - projections[level + 1]) / nodes_below
    return total


def aligned_noise_factors(*, period: int, max_range: int, fanout: int, queries: QueryLengths,
                          points: int = 4096) -> dict[int, float]:
    """Mean noise factor of windows that start at a period boundary, for leaves of one period.

    The hierarchy of :class:`~dpstream.release.periodic.PeriodicPerturber`: leaves of
    ``period`` values, ``max(1, max_range // period)`` leaves per chunk, ``d`` measured levels
    of fan-out ``fanout``.  For every ``d`` from 1 to the most a chunk can hold, the mean of
    :func:`range_noise_factor` over windows ``[k P, k P + L)`` (``k`` over one top node, ``L``
    over equal-probability strata of ``queries``); multiply by the node variance
    ``2 (theta d / eps)^2``.  Public: parameters only.

    >>> aligned_noise_factors(period=10, max_range=1000, fanout=4, queries=QueryLengths.fixed(10))[1]
    1.0
    """
    period = check_positive_int(period, "period")
    leaves = max(1, check_positive_int(max_range, "max_range", minimum=2) // period)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    lengths = queries.strata(points).astype(np.int64)
    factors = {}
    for d in range(1, (num_levels(leaves, fanout) if leaves > 1 else 1) + 1):
        width = fanout ** (d - 1)
        j = np.arange(lengths.size)
        starts = period * (1 + np.floor(((j * _GOLDEN) % 1.0) * width).astype(np.int64))
        factors[d] = float(np.mean(range_noise_factor(starts, starts + lengths, block_size=period, fanout=fanout,
                                                      measured_levels=d)))
    return factors


@dataclass(frozen=True, eq=False)
class QueryLengths:
    """The windows a release should serve: a distribution of query lengths.

    Parameters
    ----------
    lengths : array of int
        Query lengths (values per query), each >= 1.
    weights : array of float
        Their probabilities (normalized here).
    stream_length : int or None
        Number of released values when it is finite and known (weighs the first block's
        prior); None for a long stream.

    Use :meth:`random` for the paper's random queries (its law is kept in closed form, not as
    ``n`` weights), :meth:`fixed` for one window length.

    >>> q = QueryLengths.random(1000)
    >>> round(q.mean, 2), round(q.mean_square / 1000**2, 4)
    (333.67, 0.1668)
    >>> QueryLengths.fixed(1440).mean
    1440.0
    """

    lengths: np.ndarray
    weights: np.ndarray
    stream_length: int | None = None
    random_over: int | None = None  # set by random(n): the law of the paper's queries over n values

    def __post_init__(self) -> None:
        lengths = np.asarray(self.lengths, dtype=np.int64).ravel()
        weights = np.asarray(self.weights, dtype=np.float64).ravel()
        if lengths.size == 0 or lengths.shape != weights.shape:
            raise ValueError(
                f"lengths and weights must be non-empty and of one shape, got {lengths.shape} and {weights.shape}."
            )
        if np.any(lengths < 1):
            raise ValueError(f"query lengths must be >= 1, got {int(lengths.min())}.")
        if np.any(weights < 0) or not weights.sum() > 0:
            raise ValueError("query length weights must be >= 0 and not all zero.")
        if self.stream_length is not None:
            check_positive_int(self.stream_length, "stream_length")
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "weights", weights / weights.sum())

    @classmethod
    def random(cls, n: int) -> QueryLengths:
        """The paper's random queries over ``n`` released values: two uniform positions, sorted.

        The length ``L = |i - j|`` has ``P(L = l)`` proportional to ``n - l`` for
        ``1 <= l < n`` (an empty query has no error and is left out), so ``E[L] = (n + 1) / 3``
        and ``E[L^2] = n (n + 1) / 6``.  ``lengths`` and ``weights`` hold the two ends only;
        the moments and strata use the closed forms.
        """
        n = check_positive_int(n, "n", minimum=2)
        return cls(np.array([1, n - 1]), np.array([1.0, 1.0]), stream_length=n, random_over=n)

    @classmethod
    def fixed(cls, length: int, *, stream_length: int | None = None) -> QueryLengths:
        """Every query has ``length`` values (a daily window of minutes: 1440)."""
        length = check_positive_int(length, "query_length")
        return cls(np.array([length]), np.array([1.0]), stream_length=stream_length)

    @functools.cached_property
    def mean(self) -> float:
        """E[L] over the non-empty queries."""
        if self.random_over is not None:
            return (self.random_over + 1) / 3.0
        return float(self.weights @ self.lengths.astype(np.float64))

    @functools.cached_property
    def mean_square(self) -> float:
        """E[L^2] over the non-empty queries."""
        if self.random_over is not None:
            return self.random_over * (self.random_over + 1) / 6.0
        return float(self.weights @ self.lengths.astype(np.float64) ** 2)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueryLengths) and self.key == other.key

    @functools.cached_property
    def key(self) -> tuple:
        """A hashable identity of the law (for caches)."""
        if self.random_over is not None:
            return "random", self.random_over
        digest = hashlib.sha256(self.lengths.tobytes() + self.weights.tobytes()).hexdigest()
        return digest, self.stream_length

    def strata(self, count: int) -> np.ndarray:
        """``count`` lengths at the middles of equal-probability strata (a quadrature of the law).

        >>> QueryLengths.random(100).strata(4).tolist()
        [7, 21, 39, 65]
        """
        targets = (np.arange(count) + 0.5) / count
        if self.random_over is not None:
            # smallest l with P(L <= l) = (l n - l (l + 1) / 2) / (n (n - 1) / 2) >= t
            n = self.random_over
            b = 2.0 * n - 1.0
            root = (b - np.sqrt(np.maximum(b * b - 4.0 * targets * n * (n - 1), 0.0))) / 2.0
            return np.clip(np.ceil(root - 1e-9), 1, n - 1).astype(np.int64)
        cumulative = np.cumsum(self.weights)
        return self.lengths[np.minimum(np.searchsorted(cumulative, targets), self.lengths.size - 1)]


@dataclass(frozen=True)
class DataSummary:
    """What the error model needs to know of the data, for every candidate theta.

    Attributes
    ----------
    candidates : array
        The candidate thresholds.
    excess_mean : array
        ``mu_theta = E[(v - theta)^+]``.
    excess_square : array
        ``E[((v - theta)^+)^2]`` (``tau^2`` is this minus ``mu^2``).
    spread : array
        ``sigma_theta^2``: the variance of the truncated values ``min(v, theta)``.
    drift : float
        Growth of the squared change of consecutive block means with the block size:
        ``delta^2(bs) = drift * bs`` (a level that wanders like a random walk; 0 for values
        drawn independently).
    prior_error : array
        Mean squared error of the first block's prior, ``E[(p0 - mu_0)^2]``.

    :meth:`from_values` computes it exactly from values (NOT private: for tests and oracles);
    :mod:`dpstream.thresholds.model` estimates it privately.
    """

    candidates: np.ndarray
    excess_mean: np.ndarray
    excess_square: np.ndarray
    spread: np.ndarray
    drift: float = 0.0
    prior_error: np.ndarray | float = 0.0

    @classmethod
    def from_values(cls, values: np.ndarray, candidates: np.ndarray, *, drift: float = 0.0,
                    prior: float | None = None) -> DataSummary:
        """The exact summary of ``values`` (NOT private), with a given drift and prior.

        ``prior=None`` means a perfect prior (error 0); a number is compared with the mean of
        the truncated values.

        >>> s = DataSummary.from_values(np.array([0.0, 2.0, 4.0]), np.array([1.0, 3.0]))
        >>> s.excess_mean.round(3).tolist(), s.spread.round(3).tolist()
        ([1.333, 0.333], [0.222, 1.556])
        """
        values = np.sort(np.asarray(values, dtype=np.float64))
        candidates = np.asarray(candidates, dtype=np.float64)
        m = values.size
        prefix = np.concatenate(([0.0], np.cumsum(values)))
        prefix2 = np.concatenate(([0.0], np.cumsum(values**2)))
        below = np.searchsorted(values, candidates, side="right")  # values <= theta
        above = m - below
        sum_above = prefix[-1] - prefix[below]
        sum2_above = prefix2[-1] - prefix2[below]
        excess = (sum_above - above * candidates) / m
        excess2 = (sum2_above - 2 * candidates * sum_above + above * candidates**2) / m
        truncated_mean = (prefix[below] + above * candidates) / m
        truncated_square = (prefix2[below] + above * candidates**2) / m
        spread = np.maximum(truncated_square - truncated_mean**2, 0.0)
        prior_error = 0.0 if prior is None else (float(prior) - truncated_mean) ** 2
        return cls(candidates, excess, np.maximum(excess2, 0.0), spread, float(drift), prior_error)


@dataclass(frozen=True)
class ErrorModel:
    """Expected squared error of a query for ToPS with budget ``epsilon``, for every theta and s.

    Parameters
    ----------
    epsilon : float or None
        The hierarchy's budget (Laplace noise of scale ``theta (h - s) / eps`` on every node).
    max_range, fanout : int
        r and b of the hierarchy.
    queries : QueryLengths
        Which queries matter.
    points : int
        Size of the quadrature (starts x lengths); 4096 keeps the relative error of the
        averages near 1%.
    rho : float, optional
        Instead of ``epsilon`` (None): the hierarchy's zCDP budget, Gaussian noise of variance
        ``theta^2 (h - s) / (2 rho)`` on every node (:meth:`node_variance`).

    Examples
    --------
    >>> model = ErrorModel(epsilon=0.1, max_range=2**16, fanout=16, queries=QueryLengths.random(2**16))
    >>> summary = DataSummary.from_values(np.arange(100.0) % 10, np.array([5.0, 9.0]))
    >>> errors = model.expected_error(summary, smoothed_levels=2)
    >>> errors.shape, bool(errors[1] < errors[0])  # truncating at 5 misses a lot
    ((2,), True)
    """

    epsilon: float | None
    max_range: int
    fanout: int
    queries: QueryLengths
    points: int = 4096
    rho: float | None = None

    def __post_init__(self) -> None:
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError("the error model needs the hierarchy's epsilon or its rho, one of them.")
        check_epsilon(self.epsilon) if self.rho is None else check_epsilon(self.rho, "rho")
        check_positive_int(self.max_range, "max_range", minimum=2)
        check_positive_int(self.fanout, "fanout", minimum=2)
        check_positive_int(self.points, "points", minimum=16)
        if not isinstance(self.queries, QueryLengths):
            raise TypeError(f"queries must be a QueryLengths, got {self.queries!r}.")

    def node_variance(self, theta: np.ndarray, measured_levels: int) -> np.ndarray:
        """The noise variance of one node of a hierarchy of ``measured_levels`` levels, for each theta:
        ``2 (theta d / eps)^2`` (Laplace) or ``theta^2 d / (2 rho)`` (Gaussian, zCDP).

        >>> ErrorModel(epsilon=None, rho=0.5, max_range=16, fanout=4, queries=QueryLengths.fixed(4)).node_variance(
        ...     np.array([2.0]), 2).tolist()
        [8.0]
        """
        theta = np.asarray(theta, dtype=np.float64)
        if self.rho is None:
            return 2.0 * (theta * measured_levels / self.epsilon) ** 2
        return theta**2 * measured_levels / (2.0 * self.rho)

    @functools.cached_property
    def levels(self) -> int:
        """h, the levels of the full hierarchy."""
        return num_levels(self.max_range, self.fanout)

    def factors(self, smoothed_levels: int) -> dict[str, float]:
        """The data-free coefficients of the model at ``s`` (independent of epsilon; cached).

        ``noise``: mean range-noise variance per unit node variance; ``white``: the mean
        square smoothing error per unit ``sigma^2``; ``drift``: per unit ``delta^2``;
        ``prior``: the weight of the first block's prior error.
        """
        s = int(smoothed_levels)
        if not 0 <= s < self.levels:
            raise ValueError(f"smoothed_levels must be in [0, {self.levels - 1}], got {s}.")
        return dict(_factors(self.max_range, self.fanout, self.levels, self.points, s, self.queries))

    def components(self, summary: DataSummary, smoothed_levels: int) -> dict[str, np.ndarray]:
        """The four parts of the expected squared error, each an array over the candidates."""
        s = int(smoothed_levels)
        f = self.factors(s)
        theta = np.asarray(summary.candidates, dtype=np.float64)
        bs = self.fanout**s
        tau2 = np.maximum(summary.excess_square - summary.excess_mean**2, 0.0)
        return {
            "noise": self.node_variance(theta, self.levels - s) * f["noise"],
            "smoothing": f["white"] * summary.spread + f["drift"] * summary.drift * bs,
            "truncation": self.queries.mean_square * summary.excess_mean**2 + self.queries.mean * tau2,
            "prior": f["prior"] * np.broadcast_to(summary.prior_error, theta.shape),
        }

    def leaf_levels(self, leaf: int) -> range:
        """The numbers ``d`` of measured levels a hierarchy with leaves of ``leaf`` values can have
        (``max(1, r // leaf)`` leaves per chunk, as :class:`~dpstream.release.periodic.PeriodicPerturber`)."""
        leaves = max(1, self.max_range // check_positive_int(leaf, "leaf"))
        return range(1, (num_levels(leaves, self.fanout) if leaves > 1 else 1) + 1)

    def leaf_factors(self, leaf: int, measured_levels: int) -> dict[str, float]:
        """As :meth:`factors`, for leaves of ``leaf`` values (any length, not only ``b^s``) under
        ``d = measured_levels`` levels, for windows that start anywhere (cached).

        The leaves are those of :class:`~dpstream.release.periodic.PeriodicPerturber` counted from
        the stream's first value; starts are averaged over one top node of ``leaf b^(d-1)`` values
        (a chunk of ``r // leaf`` leaves that is not a whole number of top nodes is modelled as if
        it were).  With ``leaf = b^s`` and ``d = h - s`` the factors are exactly those of
        :meth:`factors` (the same forest and quadrature).

        >>> # a window of one leaf from offset f of a leaf: u_k + f (u_k - u_(k-1)), mean 8/3 over f
        >>> model = ErrorModel(epsilon=1.0, max_range=2**12, fanout=16, queries=QueryLengths.fixed(64))
        >>> abs(model.leaf_factors(64, 1)["noise"] - 8 / 3) < 0.05
        True
        """
        leaf = check_positive_int(leaf, "leaf")
        d = int(measured_levels)
        if d not in self.leaf_levels(leaf):
            raise ValueError(f"measured_levels must be in {self.leaf_levels(leaf)} for leaves of {leaf}, got {d}.")
        return dict(_block_factors(leaf, d, self.fanout, leaf * self.fanout ** (d - 1), self.points, self.queries))

    def leaf_components(self, summary: DataSummary, leaf: int, measured_levels: int) -> dict[str, np.ndarray]:
        """As :meth:`components`, for leaves of ``leaf`` values under ``measured_levels`` levels
        (node noise ``Lap(theta d / eps)``, the Recent smoother within a leaf)."""
        f = self.leaf_factors(leaf, measured_levels)
        theta = np.asarray(summary.candidates, dtype=np.float64)
        tau2 = np.maximum(summary.excess_square - summary.excess_mean**2, 0.0)
        return {
            "noise": self.node_variance(theta, measured_levels) * f["noise"],
            "smoothing": f["white"] * summary.spread + f["drift"] * summary.drift * leaf,
            "truncation": self.queries.mean_square * summary.excess_mean**2 + self.queries.mean * tau2,
            "prior": f["prior"] * np.broadcast_to(summary.prior_error, theta.shape),
        }

    def expected_error(self, summary: DataSummary, smoothed_levels: int) -> np.ndarray:
        """The expected squared error of a query, for every candidate theta."""
        return sum(self.components(summary, smoothed_levels).values())

    def best(self, summary: DataSummary, levels: tuple[int, ...] | None = None) -> tuple[float, int, float]:
        """(theta, s, error) minimizing the model over the candidates and ``levels`` (default all s)."""
        levels = tuple(range(self.levels)) if levels is None else tuple(levels)
        best = (math.nan, -1, math.inf)
        for s in levels:
            errors = self.expected_error(summary, s)
            i = int(np.argmin(errors))
            if errors[i] < best[2]:
                best = (float(summary.candidates[i]), s, float(errors[i]))
        return best


@functools.lru_cache(maxsize=256)
def _factors(max_range: int, fanout: int, levels: int, points: int, s: int,
             queries: QueryLengths) -> tuple[tuple[str, float], ...]:
    """:meth:`ErrorModel.factors`, cached on the hierarchy, the quadrature and the query law."""
    return _block_factors(fanout**s, levels - s, fanout, fanout ** (levels - 1), points, queries)


@functools.lru_cache(maxsize=256)
def _block_factors(bs: int, measured: int, fanout: int, period: int, points: int,
                   queries: QueryLengths) -> tuple[tuple[str, float], ...]:
    """The factors of a forest with leaves of ``bs`` values and ``measured`` levels, for windows
    starting anywhere in one top node of ``period`` values (after the first block)."""
    n_lengths = min(64, queries.lengths.size)
    per_length = max(1, points // n_lengths)
    lengths = np.repeat(queries.strata(n_lengths), per_length)
    j = np.arange(lengths.size)
    starts = period + np.floor(((j * _GOLDEN) % 1.0) * period).astype(np.int64)
    stops = starts + lengths
    noise = range_noise_factor(starts, stops, block_size=bs, fanout=fanout, measured_levels=measured)
    oa, ob = (starts % bs).astype(np.float64), (stops % bs).astype(np.float64)
    length = (stops - starts).astype(np.float64)
    same = starts // bs == stops // bs
    adjacent = stops // bs == starts // bs + 1
    white = np.where(same, length**2 / bs + length, (oa**2 + ob**2) / bs + oa + ob + 2.0 * oa * ob / bs * adjacent)
    drift = np.where(same, length**2, oa**2 + ob**2)
    n = queries.stream_length
    prior = 0.0 if n is None else 2.0 * min(bs, n) / n * bs**2 / 3.0
    return (("noise", float(noise.mean())), ("white", float(white.mean())), ("drift", float(drift.mean())),
            ("prior", prior))
