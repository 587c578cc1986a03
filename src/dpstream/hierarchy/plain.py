"""The plain hierarchical method (Chan, Shi and Song; Dwork et al.): noisy nodes, no consistency.

Every level of a fan-out-b hierarchy over each chunk of ``r`` values gets ``Lap(theta h / eps)``
noise, and a range query is answered from the fewest nodes that tile it.  This is H2 (b = 2, the
binary tree PAK uses) and H16 of the ToPS paper's Section 5.3.  It is a baseline: it releases
nodes, not a per-value stream, and it is offline (the whole stream is given at once).

Exact noise on a public grid (the default): values (already in ``[0, theta]``) are rounded to
multiples of ``g`` (default the largest power of two at most ``theta / 2^20``), theta is rounded
up to ``theta_units`` steps, and every node is its integer sum plus discrete Laplace noise of
scale ``theta_units h / eps`` grid units (rounded up); a range sum is an integer times ``g``.
``noise=FloatNoise(rng)`` runs the float algorithm of the studies (NOT for publication), on the
float arithmetic of :mod:`dpstream.hierarchy.arithmetic`.

Privacy
-------
epsilon'-DP at event level for values in [0, theta], ``epsilon' = theta_units h / beta`` for the
rounded-up scale ``beta`` (at most epsilon): one value changes one node per level by at most
``theta_units`` grid units, each of the h levels is eps'/h-DP, and chunks are disjoint.
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_bound, check_epsilon, check_positive_int
from dpstream.hierarchy.arithmetic import arithmetic
from dpstream.hierarchy.tree import (
    aggregate_levels,
    decomposed_range_sums,
    num_levels,
)
from dpstream.noise.bits import BitsSeed
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import make_source

__all__ = ["PlainHierarchy"]


class PlainHierarchy:
    """Noisy, unconsistent hierarchies over consecutive chunks of ``max_range`` values.

    ``seed`` (bits of the exact samplers; None is the OS CSPRNG), ``noise`` (``ZeroNoise()``,
    or ``FloatNoise(rng)`` for the float algorithm of the studies) and ``granularity`` as in
    :class:`~dpstream.release.perturber.HierarchicalPerturber`.

    >>> tree = PlainHierarchy(np.ones(100), threshold=1.0, epsilon=1e9, max_range=64, fanout=2, seed=0)
    >>> np.round(tree.range_sums(np.array([0, 10]), np.array([100, 70])), 3).tolist()
    [100.0, 60.0]
    """

    def __init__(
        self,
        values: np.ndarray,
        *,
        threshold: float,
        epsilon: float,
        max_range: int,
        fanout: int,
        granularity: float | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
    ) -> None:
        threshold = check_bound(threshold, "threshold")
        epsilon = check_epsilon(epsilon)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        self.fanout = check_positive_int(fanout, "fanout", minimum=2)
        self.levels = num_levels(self.max_range, self.fanout)
        values = np.asarray(values, dtype=np.float64)
        source = make_source(seed=seed, noise=noise, identity=("plain-hierarchy",))
        sampler = source.sampler()
        self._arithmetic = arithmetic(source.exact, bound=threshold, epsilon=epsilon, levels=self.levels,
                                      granularity=granularity)
        self.granularity, self.spent_epsilon = self._arithmetic.granularity, self._arithmetic.spent_epsilon
        if source.exact:  # truncated at theta rounded to the grid: the same integers the units would reach
            values = np.minimum(values, self._arithmetic.noise.units * self.granularity)
        values = self._arithmetic.units(values)
        self._chunks = []
        for start in range(0, values.size, self.max_range):
            chunk = values[start : start + self.max_range]
            truth = aggregate_levels(chunk, self.fanout, self.levels)
            node_noise = self._arithmetic.draw(sampler, chunk.size, self.fanout, self.levels)
            self._chunks.append((start, chunk.size, [t + n for t, n in zip(truth, node_noise, strict=True)]))

    def range_sums(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """Noisy sums of positions [start, stop), split at chunk boundaries."""
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        total = np.zeros(starts.shape, dtype=np.float64)
        for offset, length, levels in self._chunks:
            lo = np.clip(starts - offset, 0, length)
            hi = np.clip(stops - offset, 0, length)
            total += decomposed_range_sums(levels, self.fanout, lo, np.maximum(hi, lo))
        return self._arithmetic.scaled(total)
