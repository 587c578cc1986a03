"""Adapters of ToPS's hierarchy: the perturber, periodic leaves, leaves of a fraction of the window with a
phase, and the stream after a private threshold, each audited on one tree's released leaves jointly.

A hierarchy of two measured levels is a forest of trees of ``b`` leaves under one parent; the
released leaves of a tree are its consistent estimates ``x_i = y_i + (P - sum y) / (b + 1)``, a
function of the ``b + 1`` noisy measurements ``y`` (leaves) and ``P`` (parent) that forgets one
direction: ``(y, P) + t (1, ..., 1, -1)`` gives the same leaves for every ``t``.  The law of the
released leaves is therefore the Laplace law of the measurements integrated along that line
(:func:`consistent_log_ratio`, in closed form), and the log-likelihood ratio of the two inputs
is the Neyman-Pearson statistic of what a tree releases.  The neighbours move a value of leaf 0
from 0 to the threshold, so both levels' nodes of its tree change and the ratio can reach the
whole claim (in the tails: about 0.9 of it at the default runs).  Trees are independent
(disjoint, fresh noise), so every tree of a stream is one run.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, on_lattice
from dpstream.release import HierarchicalPerturber, ToPS
from dpstream.release.periodic import PeriodicPerturber
from dpstream.thresholds.model import window_leaves

__all__ = ["ToPSPerturber", "PeriodicLeaves", "ToPSStream", "WindowLeaves", "consistent_log_ratio"]


def _log_line_integral(points: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``log of the integral over t of exp(-sum_k |t - c_k| / scale)``, per row of ``points`` (the ``c_k``).

    The exponent is piecewise linear in ``t`` with breaks at the sorted ``c_k``: on the segment with
    ``j`` points to its left its slope is ``(K - 2 j) / scale``, so every segment integrates in
    closed form; the sum is taken in logs.

    >>> round(float(_log_line_integral(np.array([[0.0]]), np.array([[1.0]]))[0]), 9)  # log 2: the Laplace total
    0.693147181
    """
    c = np.sort(points, axis=1)
    k = c.shape[1]
    scale = np.broadcast_to(scale, (c.shape[0], 1))
    at_breaks = -np.abs(c[:, :, None] - c[:, None, :]).sum(axis=2) / scale  # the exponent at each c_j
    slope = np.abs(2 * np.arange(1, k) - k)[None, :] / scale
    width = c[:, 1:] - c[:, :-1]
    with np.errstate(divide="ignore"):
        inner = np.where(slope > 0, np.log(-np.expm1(-slope * width)) - np.log(np.where(slope > 0, slope, 1.0)),
                         np.log(width))
    ends = np.log(k / scale)
    terms = np.concatenate((at_breaks[:, :1] - ends, np.maximum(at_breaks[:, :-1], at_breaks[:, 1:]) + inner,
                            at_breaks[:, -1:] - ends), axis=1)
    top = terms.max(axis=1, keepdims=True)
    return top[:, 0] + np.log(np.exp(terms - top).sum(axis=1))


def consistent_log_ratio(leaves: np.ndarray, mean_b: np.ndarray, mean_a: np.ndarray, scale: object) -> np.ndarray:
    """``log(f_B / f_A)`` of the consistent leaves of one tree of two measured levels (rows of ``leaves``).

    ``mean_a`` and ``mean_b`` hold each input's true leaves then the true parent (``b + 1`` values);
    ``scale`` is the Laplace scale of every node (a number or one per row).  The measurements that
    give these leaves are ``(x, sum x) + t (1, ..., 1, -1)``, so each input's density is the integral
    of the product of the nodes' Laplace densities along that line (discrete Laplace on a grid
    much finer than the scale has the same ratio up to the grid's share of the scale).

    >>> leaves = np.array([[30.0, 0.0], [0.0, 0.0]])
    >>> ratio = consistent_log_ratio(leaves, np.array([1.0, 0.0, 1.0]), np.zeros(3), 1.0)
    >>> bool(1.99 < ratio[0] <= 2.0), round(float(ratio[1]), 3)  # the tail reaches the two levels' 2 / scale
    (True, -1.183)
    """
    leaves = np.asarray(leaves, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64).reshape(-1, 1)
    out = []
    for mean in (mean_b, mean_a):
        mean = np.asarray(mean, dtype=np.float64)
        parent = leaves.sum(axis=1, keepdims=True) - mean[-1]
        out.append(_log_line_integral(np.concatenate((mean[None, :-1] - leaves, parent), axis=1), scale))
    return out[0] - out[1]


class _TreeLeaves(MechanismAdapter):
    """What the adapters of this module share: runs of one tree's ``b`` released leaf estimates, input A
    putting 0 and input B the threshold in leaf 0, the statistic their joint log-likelihood ratio."""

    statistic_name = "the log-likelihood ratio of one tree's released leaves"
    fanout: int
    scale: float
    granularity: float | None

    def _means(self, x: float) -> np.ndarray:
        """The true leaves of a run's tree on input ``x``, then its parent."""
        mean = np.zeros(self.fanout + 1)
        mean[0] = mean[-1] = x
        return mean

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return consistent_log_ratio(outputs, self._means(self.neighbours[1]), self._means(self.neighbours[0]),
                                    self.scale)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, self._means(x)[None, :-1], self.granularity, what=f"{self.name}'s leaves").all(
            axis=1)


class ToPSPerturber(_TreeLeaves):
    """ToPS's hierarchical perturber with a fixed threshold, two measured levels and no smoothing.

    Chunks of 16 values under fan-out 4 are forests of four trees (four leaves, one parent); the
    first value of every tree is 0 (input A) or theta (input B), the rest 0, and each tree's four
    released values (its consistent leaves) are one run.
    """

    name = "tops"

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 4.0, max_range: int = 16, fanout: int = 4,
                 samples: int = 200_000) -> None:
        self._params = dict(threshold=threshold, epsilon=epsilon, max_range=max_range, fanout=fanout, smoothed_levels=0)
        probe = HierarchicalPerturber(**self._params, seed=0)
        if probe.measured_levels != 2 or max_range % fanout:
            raise ValueError("the tops adapter needs two measured levels over whole trees.")
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        # at s = 0 a released value is the true sum plus exact consistent noise: a multiple of g / q
        self.granularity, self.scale = probe.leaf_granularity, probe.noise_scale
        self.fanout, self.samples = fanout, samples
        self.tree = fanout  # leaves per tree (a chunk holds ``fanout`` trees)
        self.neighbours = (0.0, probe.threshold)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        trees = -(-n // self.fanout) * self.fanout  # whole chunks
        stream = np.zeros((trees, self.tree))
        stream[:, 0] = x
        released = HierarchicalPerturber(**self._params, seed=rng).release(stream.ravel())
        return released.reshape(trees, self.tree)[:n]


class PeriodicLeaves(_TreeLeaves):
    """The periodic perturber with a fixed threshold: leaves of one period of 2 values under two levels.

    Chunks of 16 values hold 8 leaves, two trees of four; the first value of every tree is 0
    (input A) or theta (input B), the rest 0.  A run is one tree's four leaf estimates: the sums
    released over each of its periods (the smoother's predictions inside a period and the last
    value that completes it sum to the leaf's consistent measurement).
    """

    name = "tops-periodic"

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 4.0, period: int = 2, max_range: int = 16,
                 fanout: int = 4, samples: int = 200_000) -> None:
        self._params = dict(threshold=threshold, epsilon=epsilon, period=period, max_range=max_range, fanout=fanout,
                            levels=2, prior=0.0)
        probe = PeriodicPerturber(**self._params, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale = probe.leaf_granularity, probe.noise_scale
        self.period, self.fanout, self.samples = period, fanout, samples
        self.trees = probe.blocks_per_chunk // fanout
        self.neighbours = (0.0, probe.threshold)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        trees = -(-n // self.trees) * self.trees
        stream = np.zeros((trees, self.fanout * self.period))
        stream[:, 0] = x
        released = PeriodicPerturber(**self._params, seed=rng).release(stream.ravel())
        return released.reshape(trees, self.fanout, self.period).sum(axis=2)[:n]


class WindowLeaves(_TreeLeaves):
    """ToPS's hierarchy over leaves of a fraction of the window (``query_length``), with a phase.

    ToPS with ``query_length = 32``, ``max_range = 128`` and fan-out 4 scores leaves of 32 values
    (:func:`~dpstream.thresholds.model.window_leaves`); when it picks them, the stream after a
    hold-out of 40 values runs a :class:`PeriodicPerturber` with ``period = 32`` and ``phase = 40 %
    32 = 8``: the first released value is not aligned to a leaf, leaf 0 holds only 24 released
    values.  This adapter builds that perturber as ToPS does (one tree of four leaves per chunk),
    with a fixed threshold; the first released value is 0 (input A) or theta (input B).  Only a
    stream's first chunk has the phase, so every run is a fresh perturber, and its output the sums
    released over the four leaves of the first chunk.  With ``levels = 1`` (the default; ToPS
    measures the leaves only when :func:`~dpstream.release.periodic.periodic_levels` says so) leaf
    0's sum is its true sum plus its own noise at the whole budget, and the statistic its Laplace
    log-likelihood ratio; with ``levels = 2`` the four leaves' jointly through consistency, whose
    ratio nears the claim only in the tails, beyond the runs a fresh perturber per run affords (0.64
    of the claim at 10,000 runs; ``tops`` and ``tops-periodic`` audit that consistency on 200,000).
    """

    name = "tops-window-leaves"

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 4.0, query_length: int = 32, max_range: int = 128,
                 fanout: int = 4, hold: int = 40, levels: int = 1, samples: int = 10_000) -> None:
        leaf = window_leaves(query_length, max_range=max_range, fanout=fanout)[0]
        self._params = dict(threshold=threshold, epsilon=epsilon, period=leaf, phase=hold % leaf,
                            max_range=max_range, fanout=fanout, levels=levels)
        probe = PeriodicPerturber(**self._params, seed=0)
        if probe.phase == 0 or probe.blocks_per_chunk != fanout:
            raise ValueError("the window-leaves adapter needs a nonzero phase and one tree per chunk.")
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale = probe.leaf_granularity, probe.noise_scale
        self.fanout, self.samples = fanout, samples
        self.ends = np.arange(1, fanout + 1) * leaf - probe.phase  # where each leaf of the first chunk ends
        self.neighbours = (0.0, probe.threshold)
        self.levels = probe.measured_levels
        if self.levels == 1:
            self.statistic_name = "the log-likelihood ratio of the first leaf's released sum"

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        if self.levels == 1:  # every leaf its own noise: leaf 0 alone differs
            return (np.abs(outputs[:, 0]) - np.abs(outputs[:, 0] - self.neighbours[1])) / self.scale
        return super().statistic(outputs)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        stream = np.zeros(self.ends[-1])
        stream[0] = x
        out = np.empty((n, self.fanout))
        for run in range(n):
            released = PeriodicPerturber(**self._params, seed=rng).release(stream)
            out[run] = np.add.reduceat(released, np.concatenate(([0], self.ends[:-1])))
        return out


class ToPSStream(MechanismAdapter):
    """ToPS end to end after its hold-out: theta, s and the prior chosen privately (the default model
    threshold on a keyed source), then the stream released on them.

    Both inputs hold out the same eight values, so what the hold-out releases has one law on
    both; the first value of every chunk after it is 0 (input A) or B (input B, clipped to the
    chosen theta), so the chunk's first tree's (or, at ``s = 1``, first block's) node on every
    measured level moves by theta.  A run is one chunk: theta, the measured levels, the noise
    scale and the grid of the perturber the hold-out chose, then the estimates of the chunk's
    first four leaves (sums of the released values over each block of ``b^s``); the statistic is
    their log-likelihood ratio given theta: the single level's Laplace ratio, or the two levels'
    jointly (:func:`consistent_log_ratio`).  The claim is the perturber's budget.  Each ToPS
    releases four chunks: they share theta, but given theta they are independent, and the
    statistic's law does not depend on theta (the noise scale and the change are both
    proportional to it; here the hold-out chooses one measured level in every run), so the runs
    are independent.
    """

    name = "tops-stream"
    statistic_name = "the log-likelihood ratio of a chunk's first released leaves given theta"
    _HELD = (0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 5.0, 8.0)
    #: Chunks released after each hold-out, each one run.
    chunks = 4
    #: The release each run builds (a subclass audits another pipeline on the same runs).
    release = ToPS

    def __init__(self, *, epsilon: float = 1.0, samples: int = 16_000) -> None:
        self._params = dict(epsilon=epsilon, upper_bound=8.0, max_range=16, fanout=4)
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        self.fanout, self.samples = 4, samples
        self.neighbours = (0.0, 8.0)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        held, r = np.array(self._HELD), self._params["max_range"]
        out = np.empty((-(-n // self.chunks), self.chunks, 4 + self.fanout))
        for run in range(out.shape[0]):
            tops = self.release(**self._params, hold=held.size, key=rng.bytes(32))
            tops.release(held)
            perturber = tops._stream
            block = self.fanout**perturber.smoothed_levels
            stream = np.zeros((self.chunks, r))
            stream[:, 0] = x
            released = tops.release(stream.ravel()).reshape(self.chunks, r)[:, : self.fanout * block]
            out[run, :, :4] = (tops.threshold, perturber.measured_levels, perturber.noise_scale,
                               perturber.leaf_granularity)
            out[run, :, 4:] = released.reshape(self.chunks, self.fanout, block).sum(axis=2)
        return out.reshape(-1, 4 + self.fanout)[:n]

    def _means(self, x: float, theta: np.ndarray) -> np.ndarray:
        mean = np.zeros((theta.size, self.fanout + 1))
        mean[:, 0] = mean[:, -1] = np.minimum(x, theta)
        return mean

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        theta, levels, scale, leaves = outputs[:, 0], outputs[:, 1], outputs[:, 2], outputs[:, 4:]
        out = (np.abs(leaves[:, 0]) - np.abs(leaves[:, 0] - theta)) / scale  # one level: leaf 0 alone
        two = levels == 2
        for value in np.unique(theta[two]):  # the two-level rows, grouped by theta (few values)
            rows = two & (theta == value)
            out[rows] = consistent_log_ratio(leaves[rows], self._means(8.0, theta[rows])[0],
                                             self._means(0.0, theta[rows])[0], scale[rows])
        if np.any((levels != 1) & ~two):
            raise ValueError("tops-stream expects one or two measured levels.")
        return out

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        truth = self._means(x, outputs[:, 0])[:, :-1]
        return on_lattice(outputs[:, 4:], truth, outputs[:, 3:4], what="ToPS's stream").all(axis=1)
