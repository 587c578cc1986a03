"""Adapters of the count-of-counts releases: one level's Section 4 method, the top-down release end to
end (every level, consistency, a keyed source) and the private estimate of the bound K."""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, UnverifiableSupport
from dpstream.count_of_counts import CountOfCountsData, LevelHistograms, estimate_level
from dpstream.count_of_counts.consistency import TopDownCountOfCounts
from dpstream.count_of_counts.estimators import estimate_max_size
from dpstream.noise import ExactNoise

__all__ = ["CountOfCountsRegion", "MaxSizeEstimate", "TopDownRelease"]


class CountOfCountsRegion(MechanismAdapter):
    """A Section 4 method on one region of 4 groups, sizes (1, 2, 2, 3) or (1, 2, 3, 3).

    ``n`` copies of the region form one level (disjoint regions get independent noise), so one
    ``estimate_level`` call is ``n`` runs, with the exact discrete Laplace sampler of a release
    drawing its bits from the audit's generator.  The output is the region's estimated sizes, sorted;
    the statistic counts the groups of size >= 3.
    """

    statistic_name = "the number of estimated groups of size 3 or more"

    def __init__(self, *, method: str = "hc", epsilon: float = 1.0, max_size: int = 4, samples: int = 100_000) -> None:
        self.name = "count-of-counts" if method == "hc" else f"count-of-counts-{method}"
        self.method, self.epsilon, self.max_size, self.samples = method, epsilon, max_size, samples
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        self.neighbours = (np.array([1, 2, 2, 3]), np.array([1, 2, 3, 3]))

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        groups = x.size
        truth = LevelHistograms.from_groups(np.repeat(np.arange(n), groups), np.tile(x, n), n)
        estimate = estimate_level(truth, method=self.method, epsilon=self.epsilon, noise=ExactNoise(bits=rng),
                                  max_size=self.max_size)
        hist = estimate.histograms
        return np.repeat(hist.size, hist.count).reshape(n, groups)  # rows sorted by (region, size)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return (outputs >= 3).sum(axis=1)

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        # every sorted vector of x.size integer sizes in range is one noise draw away (Section 4)
        outputs = np.asarray(outputs)
        if outputs.ndim != 2 or outputs.shape[1] != x.size:
            raise UnverifiableSupport(f"count-of-counts outputs must hold {x.size} group sizes")
        # every method caps the sizes at the public K (max_size)
        valid = (outputs >= 0) & (outputs <= self.max_size) & (outputs == np.rint(outputs))
        return valid.all(axis=1) & (np.diff(outputs, axis=1) >= 0).all(axis=1)


class TopDownRelease(MechanismAdapter):
    """:class:`TopDownCountOfCounts` end to end on a root with two leaf regions, as users run it (a
    fresh secret key per run): the leaves' groups are (1, 2) and (2, 3) on input A, (1, 2) and
    (3, 3) on input B (one entity more in one group).  Both levels are measured (``epsilon / 2``
    each), matched, merged and made consistent.  The output is every released group size (the
    root's four, then each leaf's two, sorted); the statistic counts the sizes of 3 or more, on
    the root and in the changed leaf.
    """

    name = "count-of-counts-top-down"
    statistic_name = "the number of released groups of size 3 or more"

    def __init__(self, *, epsilon: float = 1.0, max_size: int = 4, samples: int = 3_000) -> None:
        self.epsilon, self.max_size, self.samples = epsilon, max_size, samples
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        paths = [("R", "a"), ("R", "b")]
        self.neighbours = tuple(CountOfCountsData.from_leaf_sizes(paths, {"a": [1, 2], "b": b}) for b in ([2, 3],
                                                                                                          [3, 3]))

    def sample(self, x: CountOfCountsData, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, 8))
        for run in range(n):
            levels = TopDownCountOfCounts(epsilon=self.epsilon, max_size=self.max_size,
                                          key=rng.bytes(32)).release(x).levels
            out[run] = np.concatenate([np.repeat(hist.size, hist.count) for hist in levels])
        return out

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return (outputs[:, :4] >= 3).sum(axis=1) + (outputs[:, 6:] >= 3).sum(axis=1)

    def possible_under(self, x: CountOfCountsData, outputs: np.ndarray) -> np.ndarray:
        # every consistent integral table of 4 groups in two regions of 2, sizes in [0, K], has positive probability
        root, leaves = outputs[:, :4], outputs[:, 4:].reshape(-1, 2, 2)
        valid = (outputs >= 0) & (outputs <= self.max_size) & (outputs == np.rint(outputs))
        consistent = (np.sort(leaves.reshape(-1, 4), axis=1) == root).all(axis=1)
        return valid.all(axis=1) & consistent


class MaxSizeEstimate(MechanismAdapter):
    """The private bound K of a count-of-counts release without a public one (``max_size_epsilon``,
    :func:`~dpstream.count_of_counts.estimators.estimate_max_size`): the largest group has 3 or 4
    members; the output is K, drawn with exact noise on the audit's bits (a release draws the
    same noise from its key; ``count-of-counts-top-down`` runs the keyed path)."""

    name = "count-of-counts-k"
    statistic_name = "the estimated bound K"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 20_000) -> None:
        self.epsilon, self.samples = epsilon, samples
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        self.neighbours = (3, 4)

    def sample(self, x: int, n: int, rng: np.random.Generator) -> np.ndarray:
        noise = ExactNoise(bits=rng)
        return np.array([estimate_max_size(x, self.epsilon, noise) for _ in range(n)], dtype=np.float64)

    def possible_under(self, x: int, outputs: np.ndarray) -> np.ndarray:
        # K = max(1, X + N + margin) with full-support integer noise N: every integer >= 1
        return (outputs >= 1) & (outputs == np.rint(outputs))
