"""LDP mean mechanisms on [-1, 1] with exact probabilities on a finite grid: SR, PM and HM (Appendix E.2).

Each mechanism perturbs a value ``v`` in [-1, 1] on the client that holds it; the report is an
integer index on a public grid, and the collector turns it into an unbiased estimate of ``v``.
All three are :class:`~dpstream.ldp.grid.WindowRandomizer` instances (see there for the pmf, the
exact privacy ratio, the estimator and its variance, derived in full):

* **SR** (Duchi et al.): the grid is {-1, 1} (n = 1) and the window one output (w = 1): the value
  is rounded at random to -1 or +1 (``Pr[+1] = (1 + v) / 2``, the paper's stochastic rounding)
  and then kept with probability ``P / 2^62`` and flipped with ``Q / 2^62 = 1 - P / 2^62``, the
  binary randomized response, where ``Q = ceil(2^62 / (L + 1))`` for a certified rational
  ``L <= e^eps``; so ``P / Q <= e^eps`` exactly, within ``1 / Q ~ 2^-62 (1 + e^eps)`` of it.
  Report 0 stands for -1, report 1 for +1; the estimate is ``c (2 j - 1)`` with
  ``c = 2^62 / (P - Q) ~ (e^eps + 1) / (e^eps - 1)``, and its variance is ``c^2 - v^2``.
* **PM** (Wang et al., Eq. 19): the value is rounded at random to the grid of ``n + 1`` points of
  [-1, 1] (n from :func:`default_pm_grid`: at least 1024), and reported on ``N = n + w`` outputs
  with a window of ``w ~ n e^(-eps/2)`` outputs: the continuous mechanism's geometry (its window
  covers ``1 / (e^(eps/2) + 1)`` of the output range), on a grid; when that is below a few outputs,
  ``w`` is whichever of 1 and its two neighbours gives the smaller worst-case variance.  The estimate
  of output ``j`` is the grid point the continuous PM would report, up to the exact affine
  correction that makes it unbiased; its variance tends to Wang et al.'s ``v^2 / (e^(eps/2) - 1) +
  (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)`` as n grows (plus at most ``(2^62 / G) / n^2`` for the
  rounding), and at the default grid its worst case is at most the continuous one.
* **HM**: PM with probability ``alpha = 1 - e^(-eps/2)`` (a multiple of 2^-62) when eps > 0.61,
  else SR; the report says which one ran.  Its variance is ``alpha Var_PM(v) + (1 - alpha) Var_SR(v)``;
  :meth:`HybridMechanism.worst_case_variance` is its supremum over v, which equals Eq. 22 for the
  continuous mechanisms and is within 0.1% of it on the default grid.

Draws.  Every decision is a comparison of a uniform integer below 2^62 (one 64-bit word of the bit
source, from :func:`~dpstream.noise.exact_primitives.uniform_below`) with an integer: SR and PM take two per
value (rounding, report), HM three (branch first).  A batch reads the source exactly as a loop of
single values does, so the two give the same reports.

Privacy
-------
Each mechanism is epsilon-LDP (Definition 2.2) exactly: for any two inputs ``v, v'`` in [-1, 1]
and any report, the report's probability under ``v`` is at most ``(P + [r > 0]) / Q <= e^eps``
times that under ``v'``, in exact arithmetic, and the sampler realizes these probabilities exactly.
HM's choice of branch does not depend on ``v``, so publishing it keeps the ratio.  The estimates
are post-processing.  Unseeded perturbation reads the operating system's CSPRNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpstream._checks import check_local_epsilon, check_unit_values
from dpstream._checks import plain_number as plain
from dpstream._params import Params
from dpstream.ldp.grid import DENOMINATOR, WindowRandomizer, as_bits, check_indices, draw_words, sup_variance
from dpstream.noise.bits import BitsSeed
from dpstream.privacy import LOCAL_REPORT, EpsilonDelta, Part, PrivacyGuarantee

__all__ = [
    "HM_PM_THRESHOLD",
    "HybridMechanism",
    "PiecewiseMechanism",
    "StochasticRounding",
    "default_pm_grid",
]

#: Below or at this epsilon HM uses SR only (Wang et al.'s eps* ~ 0.61, as the paper states).
HM_PM_THRESHOLD = 0.61
#: Largest PM grid :func:`default_pm_grid` chooses (and that a user may ask for).
MAX_PM_GRID = 1 << 20


def _privacy(name: str, epsilon: float, core: WindowRandomizer) -> PrivacyGuarantee:
    report = Part(what=f"{name} report", budget=EpsilonDelta(epsilon),
                  text=f"{name}: one report per value on a finite grid, {core.describe_ratio()}; no composition")
    return PrivacyGuarantee.of(report, neighbours=LOCAL_REPORT, local=True)


def _pm_worst_case(epsilon: float, grid: np.ndarray, window: np.ndarray) -> np.ndarray:
    """An upper bound on PM's worst-case variance on a grid (float, for choosing the grid): with
    ``q = 1 / (w e^eps + n)``, ``p = e^eps q``, ``g = (p - q) w``, the grid variance at ``x`` is
    ``c0 + c1 x^2`` (``c1 = 1 / g - 1``, ``c0`` the variance at 0) and rounding adds at most
    ``(1 + c1) / n^2``, so ``c0 + c1 + (1 + c1) / n^2`` (see :mod:`dpstream.ldp.grid`)."""
    n, w = grid.astype(np.float64), window.astype(np.float64)
    e = math.exp(epsilon)
    q = 1.0 / (w * e + n)
    g = (e - 1.0) * q * w
    outputs = n + w
    c0 = (2.0 / (n * g)) ** 2 * (q * outputs * (outputs**2 - 1.0) / 12.0 + (e - 1.0) * q * w * (w**2 - 1.0) / 12.0)
    c1 = 1.0 / g - 1.0
    return c0 + c1 + (1.0 + c1) / n**2


def _pm_windows(epsilon: float, grid: int) -> tuple[int, float]:
    """The window (among 1 and the two integers around the continuous PM's ``n e^(-eps/2)``) with the
    smallest worst-case bound, and that bound."""
    x = grid * math.exp(-epsilon / 2.0)
    windows = np.array(sorted({1, min(grid, max(1, math.floor(x))), min(grid, max(1, math.ceil(x)))}))
    bounds = _pm_worst_case(epsilon, np.full(windows.size, grid), windows)
    best = int(np.argmin(bounds))
    return int(windows[best]), float(bounds[best])


def default_pm_grid(epsilon: float) -> int:
    """n for PM: among the powers of two from 2^10 to 2^20, the smallest whose worst-case variance
    bound (with its best window) is within 0.1% of the least.

    At moderate budgets the grid costs nothing (1024 points); at large ones a window of one output
    is the best there is, and n grows until rounding no longer dominates.  The discretized PM's
    worst-case variance is then at most that of Wang et al.'s continuous PM for every epsilon
    (measured in the tests and in docs/topl.md): below it by up to 0.5% for eps <= 4, and by a
    growing factor beyond, where the continuous window is narrower than any grid step.

    >>> default_pm_grid(1.0), default_pm_grid(16.0), default_pm_grid(30.0)
    (1024, 1024, 32768)
    """
    epsilon = check_local_epsilon(epsilon)
    grids = [1 << k for k in range(10, 21)]
    bounds = [_pm_windows(epsilon, n)[1] for n in grids]
    least = min(bounds)
    return next(n for n, bound in zip(grids, bounds, strict=True) if bound <= least * 1.001)


def _check_grid(grid: object, epsilon: float) -> int:
    if grid is None:
        return default_pm_grid(epsilon)
    if not (isinstance(grid, (int, np.integer)) and not isinstance(grid, bool)):
        raise TypeError(f"grid must be an integer, got {grid!r}.")
    if not 1 <= int(grid) <= MAX_PM_GRID:
        raise ValueError(f"grid must be an integer in [1, {MAX_PM_GRID}], got {int(grid)}.")
    return int(grid)


@dataclass(frozen=True, kw_only=True)
class StochasticRounding(Params):
    """Stochastic Rounding (SR): a one-bit report (0 for -1, 1 for +1) of a value in [-1, 1].

    >>> sr = StochasticRounding(epsilon=1.0)
    >>> reports = sr.perturb(np.zeros(4), 0)
    >>> sorted(set(reports.tolist())) <= [0, 1], round(sr.scale, 4), sr.outputs
    (True, 2.164, 2)
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))

    #: Uniform draws (below 2^62) per value.
    draws = 2

    @cached_property
    def core(self) -> WindowRandomizer:
        """The grid randomizer: n = 1, w = 1."""
        return WindowRandomizer.for_epsilon(self.epsilon, low=-1.0, high=1.0, grid=1, window=1)

    @property
    def outputs(self) -> int:
        """Reports are 0 (for -1) and 1 (for +1)."""
        return 2

    @property
    def scale(self) -> float:
        """c = 2^62 / (P - Q) ~ (e^eps + 1) / (e^eps - 1): report 1 estimates c, report 0 estimates -c."""
        return DENOMINATOR / (self.core.p - self.core.q)

    def probability(self, reports: object, values: object) -> np.ndarray:
        """``Pr[j | v]`` for reports j in {0, 1} (broadcasting)."""
        return self.core.probability(reports, values)

    def perturb_draws(self, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Reports from two draws below 2^62 per value (``draws[:, :2]``)."""
        return self.core.sample(values, draws)

    def perturb(self, values: object, bits: BitsSeed = None) -> np.ndarray:
        """Client side: a report in {0, 1} for each value in [-1, 1] (int64).

        ``bits``: a bit source, or a seed for one (None: the OS CSPRNG; an int: replayable).
        """
        values = check_unit_values(values)
        return self.perturb_draws(values, draw_words(as_bits(bits), values.size, self.draws))

    def check_reports(self, reports: object, name: str = "SR reports") -> np.ndarray:
        """Reports as int64, each 0 or 1 (else a ValueError naming the first bad one)."""
        return check_indices(reports, 2, name)

    def estimate(self, reports: object) -> np.ndarray:
        """Collector side: the unbiased estimate ``c (2 j - 1)`` of each report's value."""
        return self.core.estimate(reports)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance ``c^2 - v^2`` of the estimate for input v."""
        return self.core.variance(values)

    def second_moment(self, values: object) -> np.ndarray:
        """``E[est^2 | v] = c^2``."""
        return self.core.second_moment(values)

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report, with the exact ratio."""
        return _privacy("SR", self.epsilon, self.core)


@dataclass(frozen=True, kw_only=True)
class PiecewiseMechanism(Params):
    """Piecewise Mechanism (PM, Eq. 19) on a grid: an index in ``[0, n + w)``, estimated unbiasedly.

    Parameters
    ----------
    epsilon : float
        The budget of a report.
    grid : int, optional
        n, the number of steps of the input grid of [-1, 1] (default :func:`default_pm_grid`).

    >>> pm = PiecewiseMechanism(epsilon=2.0)
    >>> pm.grid, pm.window, pm.outputs
    (1024, 377, 1401)
    >>> y = pm.perturb(np.array([-1.0, 0.0, 1.0]), 0)
    >>> bool(np.all((y >= 0) & (y < pm.outputs))), round(float(pm.estimate(pm.outputs - 1)), 3)
    (True, 2.162)
    """

    epsilon: float
    grid: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))
        object.__setattr__(self, "grid", _check_grid(self.grid, self.epsilon))

    draws = 2

    @cached_property
    def core(self) -> WindowRandomizer:
        """The grid randomizer: n = grid, w near ``n e^(-eps/2)`` (the continuous PM's window share) or 1,
        whichever has the smaller worst-case variance."""
        n = int(self.grid)  # type: ignore[arg-type]
        return WindowRandomizer.for_epsilon(self.epsilon, low=-1.0, high=1.0, grid=n,
                                            window=_pm_windows(self.epsilon, n)[0])

    @property
    def window(self) -> int:
        """w, the outputs of the high-probability window."""
        return self.core.window

    @property
    def outputs(self) -> int:
        """N = n + w: reports are the integers 0..N-1."""
        return self.core.outputs

    @property
    def s(self) -> float:
        """The largest estimate, that of report N - 1 (the continuous PM's s = coth(eps/4), nearly)."""
        return float(self.estimate(self.outputs - 1))

    def probability(self, reports: object, values: object) -> np.ndarray:
        """``Pr[j | v]`` for reports j and inputs v (broadcasting); 0 off the grid."""
        return self.core.probability(reports, values)

    def perturb_draws(self, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Reports from two draws below 2^62 per value."""
        return self.core.sample(values, draws)

    def perturb(self, values: object, bits: BitsSeed = None) -> np.ndarray:
        """Client side: a report index for each value in [-1, 1] (int64); ``bits`` as for SR."""
        values = check_unit_values(values)
        return self.perturb_draws(values, draw_words(as_bits(bits), values.size, self.draws))

    def check_reports(self, reports: object, name: str = "PM reports") -> np.ndarray:
        """Reports as int64 indices in [0, N) (else a ValueError naming the first bad one)."""
        return check_indices(reports, self.outputs, name)

    def estimate(self, reports: object) -> np.ndarray:
        """Collector side: the unbiased estimate of each report's value."""
        return self.core.estimate(reports)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance of the estimate for input v (grid and rounding; see the module docstring)."""
        return self.core.variance(values)

    def second_moment(self, values: object) -> np.ndarray:
        """``E[est^2 | v]``, exactly."""
        return self.core.second_moment(values)

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report, with the exact ratio."""
        return _privacy(f"PM on a grid of {self.grid + 1} inputs and {self.outputs} outputs", self.epsilon, self.core)


@dataclass(frozen=True, kw_only=True)
class HybridMechanism(Params):
    """Hybrid Mechanism (HM): PM with probability alpha, SR otherwise; the ToPL perturber.

    A report is a pair ``(uses_pm, j)``: which branch ran and that branch's report index.

    >>> hm = HybridMechanism(epsilon=1.0)
    >>> round(hm.alpha, 4), round(hm.worst_case_variance(), 3)
    (0.3935, 4.289)
    >>> uses_pm, j = hm.perturb(np.linspace(-1, 1, 5), 0)
    >>> hm.estimate(uses_pm, j).shape
    (5,)
    """

    epsilon: float
    grid: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))
        object.__setattr__(self, "grid", _check_grid(self.grid, self.epsilon))

    draws = 3

    @cached_property
    def alpha_units(self) -> int:
        """alpha in units of 2^-62: ``round((1 - e^(-eps/2)) 2^62)`` when eps > 0.61, else 0."""
        if self.epsilon <= HM_PM_THRESHOLD:
            return 0
        return round(-math.expm1(-self.epsilon / 2.0) * DENOMINATOR)

    @property
    def alpha(self) -> float:
        """Probability of the PM branch (exactly ``alpha_units / 2^62``)."""
        return self.alpha_units / DENOMINATOR

    @cached_property
    def sr(self) -> StochasticRounding:
        return StochasticRounding(epsilon=self.epsilon)

    @cached_property
    def pm(self) -> PiecewiseMechanism:
        return PiecewiseMechanism(epsilon=self.epsilon, grid=self.grid)

    def perturb_draws(self, values: np.ndarray, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reports from three draws below 2^62 per value: the branch, then that branch's two."""
        uses_pm = draws[:, 0] < self.alpha_units
        rest = draws[:, 1:]
        j = np.where(uses_pm, self.pm.perturb_draws(values, rest), self.sr.perturb_draws(values, rest))
        return uses_pm, j

    def perturb(self, values: object, bits: BitsSeed = None) -> tuple[np.ndarray, np.ndarray]:
        """Client side: ``(uses_pm, j)`` for each value in [-1, 1]; ``bits`` as for SR."""
        values = check_unit_values(values)
        return self.perturb_draws(values, draw_words(as_bits(bits), values.size, self.draws))

    def check_reports(self, uses_pm: object, reports: object) -> np.ndarray:
        """Each report's index checked against its branch's grid; int64."""
        uses_pm = np.asarray(uses_pm, dtype=bool)
        reports = check_indices(reports, self.pm.outputs, "HM reports")
        if self.alpha_units == 0 and uses_pm.any():
            index = int(np.argmax(uses_pm))
            raise ValueError(f"HM reports: the report at position {index} (0-based) is a PM report, but at epsilon "
                             f"{plain(self.epsilon)} <= {HM_PM_THRESHOLD} HM only uses SR.")
        bad = ~uses_pm & (reports > 1)
        if bad.any():
            index = int(np.argmax(bad))
            raise ValueError(f"HM reports: the report at position {index} (0-based) is SR report {reports[index]}, "
                             f"not a point of its grid (0 or 1).")
        return reports

    def estimate(self, uses_pm: object, reports: object) -> np.ndarray:
        """Collector side: each report's unbiased estimate under its branch."""
        uses_pm = np.asarray(uses_pm, dtype=bool)
        reports = np.asarray(reports)
        return np.where(uses_pm, self.pm.estimate(reports), self.sr.estimate(np.minimum(reports, 1)))

    def second_moment(self, values: object) -> np.ndarray:
        """``E[est^2 | v]`` of the mixture."""
        return self.alpha * self.pm.second_moment(values) + (1.0 - self.alpha) * self.sr.second_moment(values)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance ``alpha Var_PM(v) + (1 - alpha) Var_SR(v)`` (a mixture of unbiased estimates)."""
        values = np.asarray(values, dtype=np.float64)
        return self.second_moment(values) - values**2

    def worst_case_variance(self) -> float:
        """``sup_v Var(v)`` over [-1, 1], exactly (the discrete counterpart of Eq. 22)."""
        return self._worst_case

    @cached_property
    def _worst_case(self) -> float:
        points = self.pm.core.points()
        return sup_variance(points, self.second_moment(points))

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report."""
        name = f"HM (PM on {self.pm.outputs} outputs w.p. {self.alpha:.4g}, else SR)"
        core = self.pm.core if self.pm.core.ratio > self.sr.core.ratio and self.alpha_units else self.sr.core
        return _privacy(name, self.epsilon, core)
