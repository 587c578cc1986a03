"""The plain hierarchical method (Chan, Shi and Song; Dwork et al.): noisy nodes, no consistency.

Every level of a fan-out-b hierarchy over each chunk of ``r`` values gets ``Lap(theta h / eps)``
noise, and a range query is answered from the fewest nodes that tile it.  This is H2 (b = 2, the
binary tree PAK uses) and H16 of the ToPS paper's Section 5.3.  It is a baseline: it releases
nodes, not a per-value stream, and it is offline (the whole stream is given at once).

Privacy
-------
epsilon-DP at event level for values in [0, theta]: one value changes one node per level by at
most theta, each of the h levels is eps/h-DP, and chunks are disjoint.
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_bound, check_epsilon, check_positive_int
from dpstream.hierarchy.tree import aggregate_levels, decomposed_range_sums, draw_noise_levels, num_levels
from dpstream.noise.sampler import NoiseSampler, make_noise

__all__ = ["PlainHierarchy"]


class PlainHierarchy:
    """Noisy, unconsistent hierarchies over consecutive chunks of ``max_range`` values.

    The node noise is ``noise.laplace`` of a :class:`~dpstream.noise.sampler.NoiseSampler`,
    by default numpy's float Laplace on ``rng``.

    >>> tree = PlainHierarchy(np.ones(100), threshold=1.0, epsilon=1e9, max_range=64, fanout=2,
    ...                       rng=np.random.default_rng(0))
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
        rng: np.random.Generator,
        noise: NoiseSampler | None = None,
    ) -> None:
        threshold = check_bound(threshold, "threshold")
        epsilon = check_epsilon(epsilon)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        self.fanout = check_positive_int(fanout, "fanout", minimum=2)
        self.levels = num_levels(self.max_range, self.fanout)
        scale = threshold * self.levels / epsilon
        values = np.asarray(values, dtype=np.float64)
        noise = make_noise(noise, rng)
        self._chunks = []
        for start in range(0, values.size, self.max_range):
            chunk = values[start : start + self.max_range]
            truth = aggregate_levels(chunk, self.fanout, self.levels)
            node_noise = draw_noise_levels(rng, chunk.size, self.fanout, self.levels, scale, noise=noise)
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
        return total
