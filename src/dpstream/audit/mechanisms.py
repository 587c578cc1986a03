"""The mechanisms the audit knows, each with an adversarial pair of neighbours, and :func:`run_audit`.

Every adapter builds its mechanism through keyword arguments only, in a small configuration,
and draws many independent runs per call where the mechanism allows it (independent chunks of
one stream, independent regions of one level, one report per client).

========================  =======================================================================
name                      neighbours and audited output
========================  =======================================================================
tops                      ToPS's perturber, fixed theta, two levels: the first value of every tree
                          (4 leaves, one parent) is 0 or theta; the tree's released leaves, their
                          exact likelihood ratio through consistency (every tree is a run)
tops-one-level            the perturber with one measured level on a keyed source (``key=``):
                          every value is 0 or theta; each released value (value + its noise)
tops-periodic             the periodic perturber (leaves of one period of 2 values, 2 levels): the
                          first value of every tree is 0 or theta; the sums released for its periods
tops-window-leaves        the perturber ToPS runs on leaves of a fraction of the window
                          (``query_length``), phase 8 (the first value not aligned to a leaf), the
                          leaves measured: the first value is 0 or theta; the first leaf's sum
tops-stream               ToPS end to end after its hold-out (theta, s, prior chosen privately,
                          keyed): the first value after it is 0 or B; the first tree's leaves
tops-model                ToPS end to end on its hold-out with the default model threshold
                          (median, drift, selection, prior; keyed): one held-out value is 0 or
                          B; the median, theta and the prior, their likelihood ratio (threshold
                          budget 4/3 eps: the steps that release something spend eps, the claim)
tops-selection,           the model threshold's permute-and-flip on two candidates, monotone scores
tops-median               (theta's, step 3) or not (the median's rank scores, step 1): one score
                          moves by the sensitivity and the true best changes; the candidate chosen
tops-selection-rnm,       the same pair for theta's other selections (``selection=``),
tops-selection-           report-noisy-max and the exponential mechanism (on two candidates their
exponential               laws show about 0.6 of the budget: the adapters' ``spends``)
nm-e, nm-e-tail           NM-E: one held-out value moves candidate 1's count by 1 so that the
                          noiseless winner changes (nm-e), or deeper in the noise's tail; theta
binary-tree               binary-tree counter, trees of 8 leaves: the first value is 0 or tau;
                          the noisy counts after 1, 2 and 4 values (one node on every level)
bt-by-key                 the same on trees of 4 leaves, per key as ``release --key-column`` runs
                          it (the registry's entry, one counter per key on its keyed bits): one
                          key is one run
tops-w-event              ToPS at the w-event relation (public theta, periods of 4 values, each
                          period's total bounded at C, w = 4): a window across two periods is 0 or
                          theta; the sums released over the two periods (both move by C)
bt-w-event                the binary tree at w = 2 (trees of 4 leaves): the first two values are 0
                          or tau; the noisy counts after 1 and 2 values
pak                       PAK (threshold_fraction 0.02): one held-out value is 0 or B; tau and the
                          released sum of the hold-out, the sum's likelihood ratio given tau
sr, pm, hm                the LDP mean randomizers on the extreme inputs -1 and 1; the report (an
                          index on the mechanism's declared grid)
square-wave               Square Wave on the extreme inputs 0 and 1; the report (a grid index)
count-of-counts[-hg,      one group's size is 2 or 3 in a region of 4 groups (method hc, hg or
-naive]                   naive); the estimated group sizes of the region
count-of-counts-top-down  the top-down release end to end (root and two leaves, keyed): one
                          group's size is 2 or 3; every released group size
count-of-counts-k         the private bound K: the largest group has 3 or 4 members; K
laplace-counts            one user moves between two locations; the two noisy (integer) counts
unit-aggregate            the unit aggregate, windows of one bucket: one unit's rows (3C, bounded
                          to C) added to a window; the window's released sum
unit-aggregate-selection  the same with private partition selection: a partition one unit below
                          the threshold, the unit added to it; whether it is released, and its sum
locations,                location counts from rows (time, user, location), windows of 2 steps
locations-unbounded       (``w_event = 2``): one user moves (bounded) or is added (unbounded) at
                          both steps of every window; the window's four noisy counts
binary-tree-gaussian[-    the binary tree under zCDP (discrete Gaussian at the rho of (eps, 1e-3),
1e-6]                     or of (eps, 1e-6)): binary-tree's pair and counts, their Gaussian
                          likelihood ratio; claim: the (eps, delta) its rho implies
unit-aggregate-gaussian   unit-aggregate's pair under zCDP (the rho of (eps, 1e-3)), the same way
sqrt-zcdp                 the square-root factorization (the rho of (eps, 1e-3)), chunks of 4: the
                          first value is 0 or tau; the chunk's released values re-encoded as C w,
                          their Gaussian likelihood ratio; claim: the (eps, delta) its rho implies
sqrt-zcdp-1e-6            sqrt-zcdp at the rho of (eps, 1e-6), the same way
banded-zcdp               the banded square-root factorization (the rho of (eps, 1e-3)), band 4:
                          one stream, every 4th value 0 or tau; each window's released values
                          re-encoded as C w, their Gaussian likelihood ratio; the same claim
========================  =======================================================================

Where the output law is known the statistic is the log-likelihood ratio of every noisy value a
run releases about the changed input (the Neyman-Pearson statistic), so the audit's best event
is the most powerful test; ``lb/claim`` in the report says how close it came.

Every mechanism of the registry (:mod:`dpstream.release.registry`) names the experiments here that
audit it (``Mechanism.audits``: the binary tree, ``bt``, is audited by ``binary-tree``); a
registered mechanism without one fails ``tests/test_registry.py``.

Support tests of additive noise read the grid step from the mechanism's ``granularity``
attribute (:func:`~dpstream.audit.core.granularity_of`): the released noisy value must be the
true answer plus an integer multiple of it.  A mechanism without one (floating-point Laplace)
fails the support test with that reason.  The local randomizers declare a finite grid instead
(their ``outputs`` attribute): a report must be an integer index below it, with a positive exact
probability under the neighbour.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from dpstream._progress import Progress, notify
from dpstream.audit.core import (
    DEFAULT_ALPHA,
    DEFAULT_EVENTS,
    AuditResult,
    MechanismAdapter,
    audit_mechanism,
    granularity_of,
    on_lattice,
)
from dpstream.audit.counts import CountOfCountsRegion, MaxSizeEstimate, TopDownRelease
from dpstream.audit.gaussian import (
    BandedFactorizationGaussian,
    BinaryTreeGaussian,
    SqrtFactorizationGaussian,
    ToPSGaussian,
    ToPSStreamGaussian,
    UnitAggregateGaussian,
)
from dpstream.audit.locations import LocationWindows
from dpstream.audit.selections import Selection
from dpstream.audit.streams import (
    BinaryTree,
    BinaryTreeByKey,
    NoisyMaxThreshold,
    PAKHoldOut,
    ToPSModelThreshold,
    ToPSOneLevel,
    laplace_log_ratio,
)
from dpstream.audit.tops import PeriodicLeaves, ToPSPerturber, ToPSStream, WindowLeaves
from dpstream.audit.units import UnitAggregateSelection, UnitAggregateWindows
from dpstream.audit.wevent import BinaryTreeWEvent, ToPSWEvent
from dpstream.ldp import HybridMechanism, PiecewiseMechanism, SquareWave, StochasticRounding
from dpstream.postprocess import LaplaceCounts
from dpstream.release.registry import REGISTRY

__all__ = ["MECHANISMS", "experiments", "run_audit"]


class LaplaceCountsMove(MechanismAdapter):
    """LaplaceCounts on one time step of two locations: one user moves, (3, 2) or (2, 3).

    Every row of a ``T x m`` release gets independent noise, so ``n`` rows are ``n`` runs.
    """

    name = "laplace-counts"
    statistic_name = "the log-likelihood ratio of the two noisy counts"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 1_000_000) -> None:
        self.epsilon = epsilon
        probe = LaplaceCounts(epsilon=epsilon, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale, self.samples = granularity_of(probe), probe.scale, samples
        self.neighbours = (np.array([3.0, 2.0]), np.array([2.0, 3.0]))

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return LaplaceCounts(epsilon=self.epsilon, seed=rng).release(np.tile(x, (n, 1)))

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, x[None, :], self.granularity, what="LaplaceCounts").all(axis=1)


def _on_grid(outputs: np.ndarray, size: int) -> np.ndarray:
    """Whether each output is a point of a local randomizer's declared grid: an integer index in [0, size)."""
    outputs = np.asarray(outputs, dtype=np.float64)
    return (outputs == np.floor(outputs)) & (outputs >= 0) & (outputs < size)


class LocalRandomizer(MechanismAdapter):
    """An LDP randomizer (SR, PM or SW) on its two extreme inputs.  Its reports are indices on a
    declared finite grid (``outputs`` points) with exact probabilities: a report is possible under
    the neighbour when it is on the grid and its probability there is positive."""

    statistic_name = "the report (its index on the grid)"

    def __init__(self, name: str, randomizer: Any, low: float, high: float, samples: int) -> None:
        self.name, self.randomizer, self.samples = name, randomizer, samples
        guarantee = randomizer.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.neighbours = (low, high)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.randomizer.perturb(np.full(n, x), rng)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        on_grid = _on_grid(outputs, self.randomizer.outputs)
        index = np.where(on_grid, outputs, 0).astype(np.int64)
        return on_grid & (self.randomizer.probability(index, x) > 0)


class HybridReports(MechanismAdapter):
    """HM on -1 and 1; a report is (branch, index), and the statistic maps SR's two reports outside PM's grid."""

    name = "hm"
    statistic_name = "the report (PM's grid index; SR's two reports at -1 and after PM's grid)"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 1_000_000) -> None:
        self.hm, self.samples = HybridMechanism(epsilon=epsilon), samples
        guarantee = self.hm.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.neighbours = (-1.0, 1.0)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        uses_pm, j = self.hm.perturb(np.full(n, x), rng)
        return np.column_stack((uses_pm, j))

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        sr_position = np.where(outputs[:, 1] > 0, self.hm.pm.outputs, -1)
        return np.where(outputs[:, 0] > 0, outputs[:, 1], sr_position)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        uses_pm, j = outputs[:, 0] > 0, outputs[:, 1]
        pm_grid, sr_grid = _on_grid(j, self.hm.pm.outputs), _on_grid(j, 2)
        by_pm = (self.hm.alpha > 0) & pm_grid & (self.hm.pm.probability(np.where(pm_grid, j, 0), x) > 0)
        by_sr = (self.hm.alpha < 1) & sr_grid & (self.hm.sr.probability(np.where(sr_grid, j, 0), x) > 0)
        return np.where(uses_pm, by_pm, by_sr)


#: Every audited mechanism by name, as a factory of its adapter in the default configuration at a
#: claimed ``epsilon`` (keyword).
MECHANISMS: dict[str, Callable[..., MechanismAdapter]] = {
    "tops": ToPSPerturber,
    "tops-one-level": ToPSOneLevel,
    "tops-periodic": PeriodicLeaves,
    "tops-model": ToPSModelThreshold,
    "tops-window-leaves": WindowLeaves,
    "tops-stream": ToPSStream,
    "tops-selection": lambda *, epsilon=1.0: Selection("tops-selection", monotone=True, epsilon=epsilon),
    "tops-median": lambda *, epsilon=1.0: Selection("tops-median", monotone=False, epsilon=epsilon),
    "tops-selection-rnm": lambda *, epsilon=1.0: Selection("tops-selection-rnm", mechanism="report-noisy-max",
                                                           epsilon=epsilon),
    "tops-selection-exponential": lambda *, epsilon=1.0: Selection("tops-selection-exponential",
                                                                   mechanism="exponential", epsilon=epsilon),
    "nm-e": NoisyMaxThreshold,
    "nm-e-tail": lambda *, epsilon=1.0: NoisyMaxThreshold(epsilon=epsilon, gap=3),
    "binary-tree": BinaryTree,
    "bt-by-key": BinaryTreeByKey,
    "pak": PAKHoldOut,
    "tops-w-event": ToPSWEvent,
    "bt-w-event": BinaryTreeWEvent,
    "sr": lambda *, epsilon=1.0: LocalRandomizer("sr", StochasticRounding(epsilon=epsilon), -1.0, 1.0, 1_000_000),
    "pm": lambda *, epsilon=1.0: LocalRandomizer("pm", PiecewiseMechanism(epsilon=epsilon), -1.0, 1.0, 1_000_000),
    "hm": HybridReports,
    "square-wave": lambda *, epsilon=1.0: LocalRandomizer("square-wave", SquareWave(epsilon=epsilon), 0.0, 1.0,
                                                          1_000_000),
    "count-of-counts": CountOfCountsRegion,
    "count-of-counts-hg": lambda *, epsilon=1.0: CountOfCountsRegion(method="hg", epsilon=epsilon),
    "count-of-counts-naive": lambda *, epsilon=1.0: CountOfCountsRegion(method="naive", epsilon=epsilon),
    "count-of-counts-top-down": TopDownRelease,
    "count-of-counts-k": MaxSizeEstimate,
    "laplace-counts": LaplaceCountsMove,
    "unit-aggregate": UnitAggregateWindows,
    "locations": LocationWindows,
    "locations-unbounded": lambda *, epsilon=1.0: LocationWindows(neighbours="unbounded", epsilon=epsilon),
    "unit-aggregate-selection": UnitAggregateSelection,
    "binary-tree-gaussian": BinaryTreeGaussian,
    "binary-tree-gaussian-1e-6": lambda *, epsilon=1.0: BinaryTreeGaussian(epsilon=epsilon, delta=1e-6,
                                                                           name="binary-tree-gaussian-1e-6"),
    "unit-aggregate-gaussian": UnitAggregateGaussian,
    "sqrt-zcdp": SqrtFactorizationGaussian,
    "banded-zcdp": BandedFactorizationGaussian,
    "tops-gaussian": ToPSGaussian,
    "tops-stream-gaussian": ToPSStreamGaussian,
    "tops-gaussian-1e-6": lambda *, epsilon=1.0: ToPSGaussian(epsilon=epsilon, delta=1e-6, name="tops-gaussian-1e-6"),
    "sqrt-zcdp-1e-6": lambda *, epsilon=1.0: SqrtFactorizationGaussian(epsilon=epsilon, delta=1e-6,
                                                                       name="sqrt-zcdp-1e-6"),
}


def experiments(names: list[str] | tuple[str, ...]) -> list[str]:
    """The experiments of :data:`MECHANISMS` that ``names`` ask for, in order, each once: an experiment's
    name stands for itself, a registered mechanism's name (:mod:`dpstream.release.registry`) for the
    experiments that audit it (its ``audits``; ``tops`` and ``pak`` name experiments first).

    >>> experiments(["bt", "sr", "binary-tree"])
    ['binary-tree', 'bt-by-key', 'bt-w-event', 'sr']
    >>> experiments(["no-such"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: unknown mechanism 'no-such'; choose among the experiments tops, ... or the mechanisms tops, ...
    """
    out: dict[str, None] = {}
    for name in names:
        if name in MECHANISMS:
            out[name] = None
        elif name in REGISTRY:
            out.update(dict.fromkeys(REGISTRY[name].audits))
        else:
            raise ValueError(f"unknown mechanism {name!r}; choose among the experiments {', '.join(MECHANISMS)} "
                             f"or the mechanisms {', '.join(REGISTRY)}.")
    return list(out)


#: How many times each mechanism's own runs a thorough audit makes.
THOROUGH = 4


def _audit_one(adapter: MechanismAdapter, *, samples: int | None, thorough: bool, **options: Any) -> AuditResult:
    if samples is None and thorough:
        samples = THOROUGH * adapter.samples
    return audit_mechanism(adapter, samples=samples, **options)


def run_audit(
    names: list[str] | tuple[str, ...] | None = None,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
    alpha: float = DEFAULT_ALPHA,
    samples: int | None = None,
    events: int = DEFAULT_EVENTS,
    epsilon: float = 1.0,
    thorough: bool = False,
) -> list[AuditResult]:
    """Audit the named mechanisms (default: all of :data:`MECHANISMS`).

    Parameters
    ----------
    names : list of str, optional
        Keys of :data:`MECHANISMS`, or names of registered mechanisms (each stands for its audits:
        :func:`experiments`).
    seed : int
        Each mechanism's runs are drawn from a generator seeded by ``(seed, name)``, so a
        mechanism gets the same runs whether it is audited alone or with others.
    progress : callable, optional
        ``progress(done, total)`` over the mechanisms (the :mod:`dpstream._progress` convention).
    log : callable, optional
        Called with a one-line message before each mechanism.
    alpha : float
        Family-wise error over all mechanisms (Bonferroni: ``alpha / len(names)`` each), so all
        correct mechanisms pass together with probability at least ``1 - alpha``.
    samples : int, optional
        Runs per input for every mechanism instead of each one's default.
    events : int
        Events bounded per mechanism.
    epsilon : float
        The budget every mechanism is configured with (its claim, up to the rounding of its noise scale).
    thorough : bool
        Without ``samples``: :data:`THOROUGH` times each mechanism's own runs (bounds nearer the
        claim, that many times longer).

    >>> [r.passed for r in run_audit(["sr", "count-of-counts"], samples=2000)]
    [True, True]
    """
    selected = list(MECHANISMS) if names is None else list(names)
    unknown = [name for name in selected if name not in MECHANISMS and name not in REGISTRY]
    if unknown or not selected:
        raise ValueError(f"names must be among {', '.join(MECHANISMS)} (or {', '.join(REGISTRY)}); "
                         f"got {unknown or selected!r}.")
    selected = experiments(selected)
    results = []
    notify(progress, 0, len(selected))
    for index, name in enumerate(selected, start=1):
        if log is not None:
            log(f"auditing {name} ({index}/{len(selected)})")
        rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode())]))
        results.append(
            _audit_one(MECHANISMS[name](epsilon=epsilon), samples=samples, thorough=thorough, seed=rng,
                       alpha=alpha / len(selected), events=events)
        )
        notify(progress, index, len(selected))
    return results
