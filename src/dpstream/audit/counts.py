"""Adapters of the count-of-counts releases: one level's Section 4 method, the top-down release (every
level's noisy estimate, keyed as a release draws it) and the private estimate of the bound K."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpstream.audit.core import MechanismAdapter, UnverifiableSupport
from dpstream.audit.streams import laplace_log_ratio
from dpstream.count_of_counts import CountOfCountsData, LevelHistograms, estimate_level
from dpstream.count_of_counts.consistency import TopDownCountOfCounts
from dpstream.count_of_counts.estimators import estimate_max_size, noise_scale
from dpstream.noise import ExactNoise

__all__ = ["CountOfCountsRegion", "MaxSizeEstimate", "TopDownRelease"]


#: Regions per level of :class:`CountOfCountsRegion` (more runs take several levels: bounded memory).
_LEVEL = 100_000

#: What the naive method's released sizes spend on :class:`CountOfCountsRegion`'s pair at eps = 1: the largest
#: log ratio of their law over its 70 outputs, 0.866 (sizes (3, 3, 3, 4), 1.7% of the runs on the second input),
#: estimated from 2 x 10^7 runs per input of the projection and rounding on exact-law noise (standard error
#: 0.003), rounded up.  Known at eps = 1 only.
_NAIVE_SPENDS = 0.87


class CountOfCountsRegion(MechanismAdapter):
    """A Section 4 method on one region of 4 groups, sizes (1, 2, 2, 3) or (1, 2, 3, 3).

    ``n`` copies of the region form one level (disjoint regions get independent noise), so one
    ``estimate_level`` call is ``n`` runs, with the exact discrete Laplace sampler of a release
    drawing its bits from the audit's generator.  The output is the region's estimated sizes, sorted;
    the statistic counts the groups of size >= 3 (hc: the one noisy cumulative cell the move
    changes; hg: the sorted sizes).  The naive method measures the histogram itself: the move takes
    one group from cell 2 to cell 3, each cell's noise of scale ``2 / epsilon`` carrying half the
    claim, and the projection onto the simplex keeps mostly their difference, so its statistic is
    the number of groups of size 3 minus those of size 2 (its events reach about 0.81 of the claim
    with a useful probability).  The released sizes never show the whole claim on this pair: the
    largest ratio of their law is about ``e^0.87`` at eps = 1 (``spends``).
    """

    def __init__(self, *, method: str = "hc", epsilon: float = 1.0, max_size: int = 4, samples: int | None = None
                 ) -> None:
        self.name = "count-of-counts" if method == "hc" else f"count-of-counts-{method}"
        self.method, self.epsilon, self.max_size = method, epsilon, max_size
        self.samples = (1_000_000 if method == "naive" else 100_000) if samples is None else samples
        self.statistic_name = ("the number of estimated groups of size 3 minus those of size 2" if method == "naive"
                               else "the number of estimated groups of size 3 or more")
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        self.neighbours = (np.array([1, 2, 2, 3]), np.array([1, 2, 3, 3]))
        if method == "naive" and self.claimed_epsilon == 1.0:
            self.spends = _NAIVE_SPENDS

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.concatenate([self._level(x, min(_LEVEL, n - start), rng) for start in range(0, n, _LEVEL)])

    def _level(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """One level of ``n`` copies of the region: ``n`` runs."""
        groups = x.size
        truth = LevelHistograms.from_groups(np.repeat(np.arange(n), groups), np.tile(x, n), n)
        estimate = estimate_level(truth, method=self.method, epsilon=self.epsilon, noise=ExactNoise(bits=rng),
                                  max_size=self.max_size)
        hist = estimate.histograms
        return np.repeat(hist.size, hist.count).reshape(n, groups)  # rows sorted by (region, size)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        if self.method == "naive":
            return (outputs == 3).sum(axis=1) - (outputs == 2).sum(axis=1)
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
    """:class:`TopDownCountOfCounts` as users run it (a fresh secret key per run, keyed noise per level
    and region), audited on its noisy level estimates (Algorithm 1, lines 1-5: the part that spends
    the budget; matching, merging and consistency are post-processing of them).

    The hierarchy is a root and two leaf regions of two groups each, method hc with the public bound
    ``K = 1``: a region's only noisy cell is ``Hc[0]``, its number of empty groups, and its estimate
    is that count plus discrete Laplace noise of the level's scale, clipped into ``[0, G]`` (the
    isotonic fit of one cell).  Input B has one entity more than A, in an empty group of leaf b: the
    count falls by one in the root and in leaf b, a node on every level.  Each level's log-likelihood
    ratio is ``+-1 / scale`` at every output (clipping keeps it: the tails of the discrete Laplace
    law have the same ratio), so the statistic is their sum, the Neyman-Pearson test of the release,
    and the claim (``epsilon / 2`` per level, sequential over the two) is within reach.  A release
    hands the consistency step (:func:`~dpstream.count_of_counts.matching.top_down`) nothing but the
    public tree and these estimates, so what it publishes spends no more than they do; the split of
    the budget, the keyed noise of every level and region and its scale are the same code for any K.
    """

    name = "count-of-counts-top-down"
    statistic_name = "the log-likelihood ratio of the two levels' noisy counts of empty groups"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 16_000) -> None:
        self.epsilon, self.samples = epsilon, samples
        self.claimed_epsilon = TopDownCountOfCounts(epsilon=epsilon, max_size=1, seed=0).privacy(levels=2).epsilon
        self.claimed_delta = 0.0
        self.scale = float(noise_scale("hc", Fraction(epsilon) / 2))  # each level's budget and scale
        paths = [("R", "a"), ("R", "b")]
        self.neighbours = tuple(CountOfCountsData.from_leaf_sizes(paths, {"a": [0, 1], "b": b}) for b in ([0, 1],
                                                                                                          [1, 1]))
        #: The true numbers of empty groups (root, leaf b) on A and on B, and the groups of those regions.
        self.empty, self.groups = (np.array([2.0, 1.0]), np.array([1.0, 0.0])), np.array([4.0, 2.0])

    def sample(self, x: CountOfCountsData, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, 2))
        for run in range(n):
            root, leaves = TopDownCountOfCounts(epsilon=self.epsilon, max_size=1, key=rng.bytes(32)).estimates(x)
            out[run] = _empty_groups(root.histograms, 0), _empty_groups(leaves.histograms, 1)
        return out

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.empty[1], self.empty[0], self.scale)

    def possible_under(self, x: CountOfCountsData, outputs: np.ndarray) -> np.ndarray:
        # full-support noise clipped into [0, G]: every integer count in range is possible under either input
        valid = (outputs >= 0) & (outputs <= self.groups) & (outputs == np.rint(outputs))
        return valid.all(axis=1)


def _empty_groups(hist: LevelHistograms, node: int) -> int:
    """The number of groups of size 0 in region ``node`` of a level's estimated histograms."""
    return int(hist.count[(hist.node == node) & (hist.size == 0)].sum())


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
