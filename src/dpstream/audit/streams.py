"""Adapters of the stream mechanisms: ToPS (its perturber, its threshold steps end to end), the binary
tree and PAK, each with a neighbour pair chosen so that the audit's lower bound can reach the claim.

Where the output law is known (additive discrete Laplace noise around the true answers), the
statistic is the Neyman-Pearson one: the log-likelihood ratio of all the noisy values a run
releases about the changed value (:func:`laplace_log_ratio`), so the best event on it is the most
powerful test of A against B.  Where the output is a choice among candidates (NM-E, the model
threshold), it is the choice itself and the audit's likelihood-ratio sets are optimal.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpstream.audit.core import MechanismAdapter, granularity_of, on_lattice
from dpstream.noise.laplace import noisy_max_scale
from dpstream.noise.source import NoiseSource
from dpstream.release import HierarchicalPerturber, ToPS
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.by_key import ByKey, key_bits
from dpstream.release.pak import PAK
from dpstream.release.registry import mechanism
from dpstream.thresholds import noisy_max_threshold
from dpstream.thresholds.model import SHARES, ModelChoice, model_candidates, model_selection_laws
from dpstream.thresholds.noisy_max import nm_e_slope, threshold_candidates

__all__ = [
    "BinaryTree",
    "BinaryTreeByKey",
    "NoisyMaxThreshold",
    "PAKHoldOut",
    "ToPSModelThreshold",
    "ToPSOneLevel",
    "laplace_log_ratio",
]


def laplace_log_ratio(outputs: np.ndarray, mean_b: Any, mean_a: Any, scale: float) -> np.ndarray:
    """``log(f_B(y) / f_A(y))`` summed over the columns, for Laplace noise of ``scale`` around the
    true answers ``mean_a`` and ``mean_b``: the Neyman-Pearson statistic of several independent
    noisy values (discrete Laplace on a grid has the same ratio at the grid points).

    >>> laplace_log_ratio(np.array([[0.0, 1.0], [5.0, 5.0]]), 1.0, 0.0, 2.0).tolist()
    [0.0, 1.0]
    """
    outputs = np.atleast_2d(np.asarray(outputs, dtype=np.float64).T).T
    return ((np.abs(outputs - mean_a) - np.abs(outputs - mean_b)) / scale).sum(axis=1)


class ToPSOneLevel(MechanismAdapter):
    """ToPS's perturber with one measured level (fan-out = chunk length), on a keyed noise source.

    Every value is its own leaf with its own noise, so each released value is an independent run:
    all values of the stream are 0 (input A) or theta (input B), and a released value is the
    value plus discrete Laplace noise of the perturber's scale, the whole budget on one
    measurement.  The noise comes from ``key=`` (a fresh secret key drawn from the auditor's
    generator), as a durable release draws it: chunk ``c`` from ``KeyedBits(key, ("tops", c))``.
    """

    name = "tops-one-level"
    statistic_name = "the released value"

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 4.0, width: int = 256,
                 samples: int = 1_000_000) -> None:
        self._params = dict(threshold=threshold, epsilon=epsilon, max_range=width, fanout=width, smoothed_levels=0)
        probe = HierarchicalPerturber(**self._params, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.samples = probe.leaf_granularity, samples
        self.neighbours = (0.0, probe.threshold)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        return HierarchicalPerturber(**self._params, key=rng.bytes(32)).release(np.full(n, x))

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, x, self.granularity, what="ToPS's one-level perturber")


class NoisyMaxThreshold(MechanismAdapter):
    """NM-E on a hold-out of four values and the candidates 1 and 2.

    Candidate 1 wins the noisy max when ``D >= gap``, D the difference of the two noises and
    ``gap`` the number of held-out values in [1, 2) (Eq. 6's slope is below 1 here).  The first
    value is 0.5 or 1.5: it moves the gap from ``gap`` to ``gap + 1``.  With ``gap = 0`` the
    noiseless winner changes between the neighbours (a selection without noise fails at once);
    a larger gap looks further into the tail of D, where the ratio of the two inputs'
    probabilities nears ``e^eps`` (``nm-e-tail``, gap 3: about 0.81 of the claim at eps = 1).
    The law of the choice is known exactly: ``spends`` is its largest log ratio (0.576 at eps = 1
    for ``nm-e``), what any event on this pair can show.
    """

    statistic_name = "the chosen threshold"

    def __init__(self, *, epsilon: float = 1.0, gap: int = 0, samples: int = 100_000) -> None:
        self.name = "nm-e" if gap == 0 else "nm-e-tail"
        self._params = dict(epsilon=epsilon, upper_bound=2.0, max_range=16, fanout=4)
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        if gap not in range(4):
            raise ValueError(f"gap must be 0, 1, 2 or 3, got {gap!r}.")
        held = np.array([0.5] + [1.5] * gap + [2.0] * (3 - gap))
        moved = held.copy()
        moved[0] = 1.5
        slope = nm_e_slope(held.size, stream_epsilon=epsilon, max_range=16, fanout=4)
        if not 0.0 < slope < 1.0:  # pragma: no cover - the configuration above keeps it small
            raise ValueError(f"NM-E's slope must lie in (0, 1) for this neighbour pair, got {slope}.")
        self.neighbours, self.samples = (held, moved), samples
        self.spends = self._spends(epsilon, gap)

    @staticmethod
    def _spends(epsilon: float, gap: int) -> float:
        """The largest log ratio of the choice's exact law: candidate 1 wins when ``D >= gap`` on A and
        ``D >= gap + 1`` on B, ``D = Z_1 - Z_2`` the difference of two discrete Laplace noises."""
        scale = float(noisy_max_scale(epsilon, monotone=True))
        z = np.arange(-math.ceil(60.0 * scale), math.ceil(60.0 * scale) + 1)
        pmf = np.exp(-np.abs(z) / scale)
        law = np.convolve(pmf, pmf)  # of D, on -2 span .. 2 span
        law /= law.sum()
        d = np.arange(2 * z[0], 2 * z[-1] + 1)
        wins = [law[d >= g].sum() for g in (gap, gap + 1)]
        return max(math.log(wins[0] / wins[1]), math.log((1.0 - wins[1]) / (1.0 - wins[0])))

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        noise = NoiseSource(seed=rng).sampler()  # exact noise on the audit's bits, drawn in blocks
        return np.array([noisy_max_threshold(x, **self._params, noise=noise) for _ in range(n)])

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        # report-noisy-max with full-support noise picks every candidate with positive probability
        return np.isin(outputs, threshold_candidates(self._params["upper_bound"]))


class ToPSModelThreshold(MechanismAdapter):
    """ToPS end to end as users run it, on its hold-out: the default model threshold (median, drift,
    selection, prior), built through the constructor with a keyed noise source.

    The hold-out ``(0 or 8, 0, 0, 2, 2, 3, 3, 5)`` (B = 8) moves the median's winner (the rank
    scores favour 1 and 2 on A, 2 on B), every count above a candidate theta (so theta's scores)
    and the prior's truncated sum by theta.  A run's output is what the model releases: the
    median, theta, s, the prior and the drift (the scale is the median's function).  With eight
    held values the drift's blocks are too short to be measured (nothing of the data enters it),
    so the model truly spends the median's, the selection's and the prior's shares (SHARES),
    ``3/4`` of its budget: ToPS runs with ``threshold_epsilon = 4/3 eps`` and the claim is
    ``eps``.  The statistic is the log-likelihood ratio of the whole output: the median's and
    theta's exact permute-and-flip laws (:func:`~dpstream.thresholds.model.model_selection_laws`)
    and the prior's discrete Laplace given theta.  Two permute-and-flip selections at small
    shares show their worst-case ratios on rare outputs only, so the bound stays far below the
    claim (about 0.1): this adapter sees a broken selection, not a slightly generous one.
    """

    name = "tops-model"
    statistic_name = "the log-likelihood ratio of the model's median, theta and prior"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 4_000) -> None:
        # the threshold's budget such that the three steps that release something spend epsilon
        self.epsilon = float(epsilon) / (1.0 - SHARES["drift"])
        self._params = dict(epsilon=epsilon, threshold_epsilon=self.epsilon, upper_bound=8.0, max_range=16, fanout=4)
        held = np.array([0.0, 0.0, 0.0, 2.0, 2.0, 3.0, 3.0, 5.0])
        moved = held.copy()
        moved[0] = 8.0
        if held.size // 4 >= 16:  # pragma: no cover - the claim leaves the drift out
            raise ValueError("the tops-model adapter's hold-out must be too short for the drift's blocks.")
        self.neighbours, self.samples = (held, moved), samples
        self.claimed_epsilon, self.claimed_delta = float(epsilon), 0.0
        self.candidates = model_candidates(self._params["upper_bound"])

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, 6))
        for run in range(n):
            tops = ToPS(**self._params, hold=x.size, key=rng.bytes(32))
            tops.release(x)
            choice = tops.model_choice
            out[run] = (choice.details["median"], tops.threshold, tops.smoothed_levels, choice.prior, choice.scale,
                        choice.drift)
        return out

    def _laws(self, x: np.ndarray, scale: float, drift: float) -> tuple[np.ndarray, np.ndarray]:
        choice = ModelChoice(threshold=1.0, smoothed_levels=0, prior=0.0, scale=scale, drift=drift, epsilon_spent=0.0)
        return model_selection_laws(x, choice, epsilon=self.epsilon, stream_epsilon=self._params["epsilon"],
                                    **{k: self._params[k] for k in ("upper_bound", "max_range", "fanout")})

    def _prior_log_ratio(self, theta: float, priors: np.ndarray) -> np.ndarray:
        """The prior's log-likelihood ratio given theta: discrete Laplace of scale ``top / eps_prior`` grid units
        around each input's sum of ``min(v, theta)`` (clipped priors: the same formula at the clip points)."""
        g = 2.0 ** (math.floor(math.log2(theta)) - 20)
        top = math.ceil(theta / g)
        sums = [np.minimum(np.rint(np.minimum(x, theta) / g), top).sum() for x in self.neighbours]
        total = priors * self.neighbours[0].size / g
        return (np.abs(total - sums[0]) - np.abs(total - sums[1])) * self.epsilon * SHARES["prior"] / top

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        index = {float(c): i for i, c in enumerate(self.candidates)}
        median = np.array([index[v] for v in outputs[:, 0]])
        theta = np.array([index[v] for v in outputs[:, 1]])
        out = np.zeros(outputs.shape[0])
        for scale, drift in {(float(a), float(b)) for a, b in outputs[:, 4:6]}:
            rows = (outputs[:, 4] == scale) & (outputs[:, 5] == drift)
            (median_a, theta_a), (median_b, theta_b) = (self._laws(x, scale, drift) for x in self.neighbours)
            out[rows] = (np.log(median_b[median[rows]] / median_a[median[rows]])
                         + np.log(theta_b[theta[rows]] / theta_a[theta[rows]]))
        for value in np.unique(outputs[:, 1]):
            rows = outputs[:, 1] == value
            out[rows] += self._prior_log_ratio(float(value), outputs[rows, 3])
        return out

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        # every candidate can win permute-and-flip; the prior is a noisy mean with full-support noise
        return (np.isin(outputs[:, 0], self.candidates) & np.isin(outputs[:, 1], self.candidates)
                & np.isfinite(outputs[:, 3]))


class BinaryTree(MechanismAdapter):
    """The binary-tree counter on trees of ``2^levels`` leaves: the first value is 0 or tau.

    After the first ``2^l`` values the noisy count is exactly the node ``(l, 0)``, the value plus
    that node's noise, for every measured level ``l``; the trees of successive blocks are
    independent, so one stream of ``n`` blocks is ``n`` runs.  The output of a run is these
    ``levels`` noisy counts (one node on every level) and the statistic their Laplace
    log-likelihood ratio, which spends the whole claim.  Fewer levels make the ratio's extreme
    values likelier, so the bound nears the claim with fewer runs; the per-level scale
    ``tau h / eps`` is what the audit checks.
    """

    name = "binary-tree"
    statistic_name = "the log-likelihood ratio of the noisy counts"

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 1.0, levels: int = 3,
                 samples: int = 200_000) -> None:
        self._params = dict(upper_bound=threshold, epsilon=epsilon, max_range=2**levels)
        probe = BinaryTreeCounter(**self._params, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity = granularity_of(probe)
        self.levels, self.scale, self.samples = probe.levels, probe.noise_scale, samples
        self.neighbours = (0.0, probe.threshold)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        width = 2**self.levels
        stream = np.zeros((n, width))
        stream[:, 0] = x
        released = BinaryTreeCounter(**self._params, seed=rng).release(stream.ravel()).reshape(n, width)
        return np.cumsum(released, axis=1)[:, 2 ** np.arange(self.levels) - 1]

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, x, self.granularity, what="the binary-tree counter").all(axis=1)


class BinaryTreeByKey(BinaryTree):
    """The binary tree per key, as ``release --method bt --key-column`` runs it: the registry's entry
    builds one counter per key (:class:`~dpstream.release.by_key.ByKey`), key ``k`` drawing from
    ``key_bits(secret, k)`` with a fresh secret per input.  Every key's stream holds eight trees,
    each one run (its first value 0 or tau, then zeros; each tree's noise from the key's bits).
    The output and statistic are the binary tree's (one noisy count on every level, their
    likelihood ratio jointly), on trees of 4 leaves: two levels, so that the ratio's top value
    (the whole claim, when both counts exceed tau) has probability about 1/4 and the runs the
    per-key counters afford come near the claim.  Noise shared between keys would make the runs
    on one input alike: the audit sees it at once.
    """

    name = "bt-by-key"

    #: Trees in each key's stream (a fresh tree every ``2^levels`` values): every tree is one run.
    trees_per_key = 8

    def __init__(self, *, epsilon: float = 1.0, threshold: float = 1.0, levels: int = 2, samples: int = 32_000) -> None:
        super().__init__(epsilon=epsilon, threshold=threshold, levels=levels, samples=samples)
        self._options = {"epsilon": epsilon, "upper_bound": threshold, "max_range": 2**levels, "clip": False,
                         "granularity": None}

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        entry, secret, width, trees = mechanism("bt"), rng.bytes(32), 2**self.levels, self.trees_per_key
        keys = -(-n // trees)
        streams = ByKey(build=lambda key: entry.build(self._options, seed=key_bits(secret, key)), max_keys=keys)
        stream = np.zeros((keys * trees, width))
        stream[:, 0] = x
        released = streams.release(stream.ravel(), [f"key {k}" for k in range(keys) for _ in range(trees * width)])
        order = np.lexsort((released.positions, np.array([int(key[4:]) for key in released.keys])))
        runs = released.values[order].reshape(keys * trees, width)[:n]
        return np.cumsum(runs, axis=1)[:, 2 ** np.arange(self.levels) - 1]


class PAKHoldOut(MechanismAdapter):
    """PAK's hold-out at PAK's whole claim: one held value is 0 or B; the output is the released noisy
    sum of the held values truncated at tau, with tau (columns: sum, tau, the grid the run declares).

    The neighbours differ in the hold-out only, so what the tree releases after it has one law
    on both given tau: the hold-out's two outputs, tau (S-PAK, ``eps1``) and the sum
    (``Lap(tau / eps2)``), carry the whole privacy loss.  With 32 held values S-PAK's smooth
    sensitivity puts tau's center far above B, so tau is capped at B on both inputs (all but a
    few runs in a thousand) and says nothing about the changed value; the statistic is the
    sum's log-likelihood ratio given tau.  So that this part holds the budget, the adapter runs
    PAK with ``threshold_fraction = 0.02`` (``eps2 = 0.98 eps``); the claim is PAK's own
    ``(eps, delta)``.  At the default 0.85 the sum spends 0.15 eps and an audit of it would need
    tens of times more runs to come near that.
    """

    name = "pak"
    statistic_name = "the log-likelihood ratio of the hold-out's released sum given tau"

    def __init__(
        self, *, epsilon: float = 1.0, upper_bound: float = 16.0, hold: int = 32, threshold_fraction: float = 0.02,
        samples: int = 16_000
    ) -> None:
        self._params = dict(epsilon=epsilon, upper_bound=upper_bound, hold=hold, threshold_fraction=threshold_fraction)
        probe = PAK(**self._params, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.sum_epsilon = probe.sum_epsilon
        held = (np.arange(hold) % 9).astype(np.float64)
        held[0] = 0.0
        moved = held.copy()
        moved[0] = upper_bound
        self.neighbours, self.samples = (held, moved), samples

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, 3))
        noise = NoiseSource(seed=rng).sampler()  # exact noise on the audit's bits, drawn in blocks
        for run in range(n):
            pak = PAK(**self._params, noise=noise)
            pak.release(x)
            grid = granularity_of(pak)
            out[run] = (pak.held_sum, pak.threshold, np.nan if grid is None else grid)
        return out

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        """The log-likelihood ratio of the sum given tau: Laplace of scale ``tau / eps2`` around each
        input's sum truncated at tau (the Neyman-Pearson statistic of the sum's part of the budget)."""
        tau = outputs[:, 1:2]
        truths = [np.minimum(x[None, :], tau).sum(axis=1) for x in self.neighbours]
        return (np.abs(outputs[:, 0] - truths[0]) - np.abs(outputs[:, 0] - truths[1])) * self.sum_epsilon / tau[:, 0]

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        # tau is released too and taken as given: the sum must sit on the grid around x's truncated sum
        truth = np.minimum(x[None, :], outputs[:, 1:2]).sum(axis=1)
        return on_lattice(outputs[:, 0], truth, outputs[:, 2], what="PAK's held-out sum")
