"""Adapters of the zCDP paths: the binary tree, ToPS's hierarchy and the unit aggregate with discrete Gaussian
noise.

A zCDP mechanism states rho and the (epsilon, delta) it implies (:mod:`dpstream.accounting`); the
audit checks that (epsilon, delta) claim, at several deltas, with the claimed delta subtracted
from the lower bound (:func:`~dpstream.audit.core.epsilon_lower_bound`).  Each adapter is the
Laplace one of the same mechanism (the same neighbours, the same runs) with Gaussian noise at
the rho an (epsilon, delta) target affords, and with the Gaussian log-likelihood ratio as the
statistic (:func:`gaussian_log_ratio`): for additive Gaussian noise the Neyman-Pearson test, so
its tails are the events where the privacy loss is largest.

The conversion from rho to (epsilon, delta) is valid for every rho-zCDP mechanism, so for the
Gaussian mechanism itself it is loose (at rho = 0.5 and delta = 1e-6: 5.22 against the 4.89 its
exact curve allows); a mechanism whose noise is smaller than its rho needs (an L1 sensitivity
taken for the L2 one, a level left out of it, a halved sigma) spends more, and the bound shows it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream.accounting import ZcdpGuarantee, rho_for
from dpstream.audit.core import on_lattice
from dpstream.audit.streams import BinaryTree
from dpstream.audit.tops import ToPSPerturber, ToPSStream
from dpstream.audit.units import UnitAggregateWindows
from dpstream.release.banded import BandedFactorization
from dpstream.release.binary_tree import ZcdpBinaryTree
from dpstream.release.factorization import SqrtFactorization
from dpstream.release.perturber import HierarchicalPerturber
from dpstream.release.tops_zcdp import ZcdpToPS

__all__ = [
    "BandedFactorizationGaussian",
    "BinaryTreeGaussian",
    "SqrtFactorizationGaussian",
    "ToPSGaussian",
    "ToPSStreamGaussian",
    "UnitAggregateGaussian",
    "gaussian_log_ratio",
]


def gaussian_log_ratio(outputs: np.ndarray, mean_b: Any, mean_a: Any, sigma: float) -> np.ndarray:
    """``log(f_B(y) / f_A(y))`` summed over the columns, for Gaussian noise of ``sigma`` around the true
    answers ``mean_a`` and ``mean_b`` (the discrete Gaussian on a grid has the same ratio at the grid points).

    >>> gaussian_log_ratio(np.array([[0.5, 0.5], [1.0, 0.0]]), 1.0, 0.0, 1.0).tolist()
    [0.0, 0.0]
    """
    outputs = np.atleast_2d(np.asarray(outputs, dtype=np.float64).T).T
    return (((outputs - mean_a) ** 2 - (outputs - mean_b) ** 2) / (2.0 * sigma * sigma)).sum(axis=1)


def _claim(guarantee: object, epsilon: float, delta: float) -> tuple[float, float]:
    """The target ``(epsilon, delta)``, once the guarantee's own statement at ``delta`` is checked to be within it
    (its rho is the largest whose epsilon at ``delta`` is at most the target's, a hair below it)."""
    if not isinstance(guarantee, ZcdpGuarantee):
        raise TypeError(f"a Gaussian path must state a zCDP guarantee, got {guarantee!r}.")
    stated = guarantee.at(delta)
    if stated.epsilon > epsilon:
        raise ValueError(f"the release states {stated.label}, above the target epsilon {epsilon:g}.")
    return epsilon, stated.delta


class BinaryTreeGaussian(BinaryTree):
    """The binary tree under zCDP (``release --method bt-zcdp``) at the rho of ``(epsilon, delta)``: the first
    value of every tree of 8 leaves is 0 or tau; the noisy counts after 1, 2 and 4 values (one node on every
    level), their Gaussian likelihood ratio; claim: the target (epsilon, delta), which the tree's rho implies."""

    name = "binary-tree-gaussian"
    statistic_name = "the Gaussian log-likelihood ratio of the noisy counts"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, threshold: float = 1.0, levels: int = 3,
                 samples: int = 200_000, name: str = "binary-tree-gaussian") -> None:
        probe = ZcdpBinaryTree(epsilon=epsilon, delta=delta, upper_bound=threshold, max_range=2**levels, seed=0)
        super().__init__(epsilon=epsilon, threshold=threshold, levels=levels, samples=samples)
        self._params = dict(upper_bound=threshold, rho=probe.rho, max_range=2**levels)
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(delta), epsilon, delta)
        self.scale = probe.noise_scale
        self.name = name

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return gaussian_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)


class UnitAggregateGaussian(UnitAggregateWindows):
    """The unit aggregate under zCDP (``aggregate --noise gaussian``) at the rho of ``(epsilon, delta)``: one
    unit's rows (3C, bounded to C) added to each window of one bucket; the released value's Gaussian
    likelihood ratio; claim: the target (epsilon, delta), which the release's rho implies."""

    name = "unit-aggregate-gaussian"
    statistic_name = "the Gaussian log-likelihood ratio of the window's released sum"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, bound: float = 4.0, rows: int = 3,
                 samples: int = 20_000) -> None:
        super().__init__(epsilon=epsilon, bound=bound, rows=rows, samples=samples)
        self._params = {**{k: v for k, v in self._params.items() if k != "epsilon"}, "rho": rho_for(epsilon, delta)}
        probe = self._make(seed=0)
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(), epsilon, delta)
        self.scale = probe.noise_scale

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return gaussian_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)


class SqrtFactorizationGaussian(BinaryTree):
    """The square-root factorization (``release --method sqrt-zcdp``) at the rho of ``(epsilon, delta)``, chunks
    of 4 values: the first value of every chunk is 0 or tau; the chunk's released values, re-encoded as the
    measurement they decode (``C w``, within ``s / 2`` units of ``y``), their Gaussian likelihood ratio (the
    Neyman-Pearson test of ``y``'s i.i.d. noise); claim: the target (epsilon, delta)."""

    name = "sqrt-zcdp"
    statistic_name = "the Gaussian log-likelihood ratio of the re-encoded chunk"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, threshold: float = 1.0, chunk: int = 4,
                 samples: int = 100_000, name: str = "sqrt-zcdp") -> None:
        self.name = name
        self._params = dict(epsilon=epsilon, delta=delta, upper_bound=threshold, max_range=chunk)
        probe = SqrtFactorization(**self._params, seed=0)
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(delta), epsilon, delta)
        self.granularity, self.samples, self.chunk = probe.granularity, samples, chunk
        self.neighbours = (0.0, probe.threshold)
        self.coefficients = probe.coefficients.astype(np.float64)
        sigma = probe.noise_scale * self.coefficients[0] / probe.granularity  # z's sigma in grid units
        # the measurement in units of sigma: y / sigma ~ C x / sigma + N(0, 1)
        self._encode = np.array([[self.coefficients[t - k] if t >= k else 0.0 for t in range(chunk)]
                                 for k in range(chunk)]) / (probe.granularity * sigma)
        self.scale = 1.0

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        stream = np.zeros((n, self.chunk))
        stream[:, 0] = x
        return SqrtFactorization(**self._params, seed=rng).release(stream.ravel()).reshape(n, self.chunk)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        x = np.zeros(self.chunk)
        mean_a, mean_b = x @ self._encode, (x + np.eye(self.chunk)[0] * self.neighbours[1]) @ self._encode
        return gaussian_log_ratio(outputs @ self._encode, mean_b, mean_a, self.scale)


class BandedFactorizationGaussian(SqrtFactorizationGaussian):
    """The banded square-root factorization (``release --method banded-zcdp``) at the rho of ``(epsilon, delta)``,
    band 4: one stream of ``4 n`` values whose value at every multiple of 4 is 0 or tau (the rest 0), so each run's
    value moves only its own window's 4 measurements; a run is the window's released values re-encoded as the
    measurement they decode (``C w`` over the whole stream, within ``s / 2`` units of ``y``), their Gaussian
    likelihood ratio; claim: the target (epsilon, delta)."""

    name = "banded-zcdp"
    statistic_name = "the Gaussian log-likelihood ratio of a window's re-encoded measurement"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, threshold: float = 1.0, band: int = 4,
                 samples: int = 100_000) -> None:
        self._params = dict(epsilon=epsilon, delta=delta, upper_bound=threshold, max_range=band)
        self.samples, self.chunk, self.scale = samples, band, 1.0
        probe = BandedFactorization(**self._params, seed=0)
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(delta), epsilon, delta)
        self.granularity, self.coefficients = probe.granularity, probe.coefficients.astype(np.float64)
        self.neighbours = (0.0, probe.threshold)
        self._sigma = probe.noise_scale * self.coefficients[0]  # z's sigma in the values' units
        self._encode = np.array([[self.coefficients[t - k] if 0 <= t - k < band else 0.0 for t in range(band)]
                                 for k in range(band)]) / self._sigma

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        stream = np.zeros((n, self.chunk))
        stream[:, 0] = x
        released = BandedFactorization(**self._params, seed=rng).release(stream.ravel())
        # the measurement each window decodes, C w over the whole stream (the band reaches back b - 1 positions)
        return np.convolve(released, self.coefficients)[: released.size].reshape(n, self.chunk)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        mean_a, mean_b = np.zeros(self.chunk), np.eye(self.chunk)[0] * self.neighbours[1] @ self._encode
        return gaussian_log_ratio(outputs / self._sigma, mean_b, mean_a, self.scale)


class ToPSGaussian(ToPSPerturber):
    """ToPS's hierarchy under zCDP (``release --method tops-zcdp``, given theta) at the rho of ``(epsilon, delta)``:
    three measured levels of fan-out 4 and no smoothing, so chunks of 64 values are forests of four trees of 16
    leaves (with 4 parents and a root each); the first value of every tree is 0 (input A) or theta (input B), the
    rest 0, and each tree's 16 released values (its consistent leaves) are one run (sampled as
    :class:`~dpstream.audit.tops.ToPSPerturber` samples its trees).

    The consistent leaves ``x`` of a tree are the least-squares fit of its noisy node sums, Gaussian around the true
    leaves with the inverse covariance ``M^T M / sigma^2`` (``M`` sums leaves into every node of the tree), so the
    log-likelihood ratio of B against A is ``(M Delta)^T (M x - M mu) / sigma^2`` with ``Delta = theta e_0`` and
    ``mu`` the midpoint of the two inputs: ``theta / sigma^2`` times the sum, over the three levels, of leaf 0's
    ancestor's consistent sum minus ``theta / 2`` (the discrete Gaussian on a grid this fine has the same ratio).
    Its law is Gaussian with variance ``3 theta^2 / sigma^2 = 2 spent_rho``: the whole claim, at every delta.
    """

    name = "tops-gaussian"
    statistic_name = "the Gaussian log-likelihood ratio of one tree's released leaves"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, threshold: float = 4.0, fanout: int = 4,
                 levels: int = 3, samples: int = 200_000, name: str = "tops-gaussian") -> None:
        self.name = name
        width = fanout**levels
        self._params = dict(threshold=threshold, rho=rho_for(epsilon, delta), max_range=width, fanout=fanout,
                            smoothed_levels=0)
        probe = HierarchicalPerturber(**self._params, seed=0)
        if probe.measured_levels != levels:  # pragma: no cover - the parameters above give these levels
            raise ValueError(f"the tops-gaussian adapter needs {levels} measured levels over one tree per run.")
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(delta), epsilon, delta)
        self.granularity, self.sigma = probe.leaf_granularity, probe.noise_scale
        self.tree, self.fanout, self.levels, self.samples = fanout ** (levels - 1), fanout, levels, samples
        self.neighbours = (0.0, probe.threshold)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        theta = self.neighbours[1]
        ancestors = sum(outputs[:, : self.fanout**level].sum(axis=1) for level in range(self.levels))
        return theta * (ancestors - self.levels * theta / 2.0) / self.sigma**2

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        truth = np.zeros((1, self.tree))
        truth[0, 0] = x
        return on_lattice(outputs, truth, self.granularity, what="ToPS's hierarchy under zCDP").all(axis=1)


class ToPSStreamGaussian(ToPSStream):
    """ToPS end to end under zCDP (``release --method tops-zcdp``): the release at the rho of ``(epsilon, delta)``
    chooses theta, s and the prior from the same eight held-out values as ``tops-stream``, then releases four
    chunks whose first value is 0 (input A) or B; a run is one chunk.  Given theta, the estimates of the chunk's
    first tree are Gaussian (:class:`ToPSGaussian`): the statistic is ``theta / sigma^2`` times, over the one or two
    measured levels, leaf 0's ancestor's sum minus ``theta / 2``.  Claim: the target (epsilon, delta), which the
    release's rho implies (its threshold's epsilon^2 / 2 included)."""

    name = "tops-stream-gaussian"
    statistic_name = "the Gaussian log-likelihood ratio of a chunk's first released leaves given theta"
    release = ZcdpToPS

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-3, samples: int = 16_000) -> None:
        super().__init__(epsilon=epsilon, samples=samples)
        self._params = dict(epsilon=epsilon, delta=delta, upper_bound=8.0, max_range=16, fanout=4)
        probe = ZcdpToPS(**self._params, hold=len(self._HELD), seed=0)
        probe.release(np.array(self._HELD))
        self.claimed_epsilon, self.claimed_delta = _claim(probe.privacy(delta), epsilon, delta)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        theta, levels, sigma, leaves = outputs[:, 0], outputs[:, 1], outputs[:, 2], outputs[:, 4:]
        if np.any((levels != 1) & (levels != 2)):
            raise ValueError("tops-stream-gaussian expects one or two measured levels.")
        ancestors = leaves[:, 0] + np.where(levels == 2, leaves.sum(axis=1), 0.0)  # leaf 0, then its tree's parent
        return theta * (ancestors - levels * theta / 2.0) / sigma**2
