"""LDP mean mechanisms on [-1, 1]: Stochastic Rounding, Piecewise and Hybrid (Appendix E.2).

Each mechanism perturbs a value ``v`` in [-1, 1] on the client that holds it and turns the report
into an unbiased estimate of ``v`` on the collector.  All three are vectorized; a batch draws its
uniforms as ``rng.random((n, k))``, so a batch consumes the generator exactly as ``n`` single
calls do and gives the same reports.

* SR (Duchi et al.): the report is ``y`` in {-1, +1} with ``Pr[y = +1] = 1/2 + v (e^eps - 1) /
  (2 (e^eps + 1))`` -- the paper's stochastic rounding to ±1 followed by binary randomized
  response with ``p = e^eps / (e^eps + 1)``, folded into one draw (same distribution).  The
  estimate is ``c y`` with ``c = (e^eps + 1) / (e^eps - 1)``; its variance is ``c^2 - v^2``.
* PM (Wang et al.): the report is ``y`` in [-s, s], ``s = (e^(eps/2) + 1) / (e^(eps/2) - 1)``,
  with density ``p = e^(eps/2) z / 2`` on ``[l(v), r(v)]`` and ``q = z / (2 e^(eps/2))`` elsewhere
  (Eq. 19).  The report is its own unbiased estimate; variance ``v^2 / (e^(eps/2) - 1) +
  (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)``.
* HM: PM with probability ``alpha = 1 - e^(-eps/2)`` when eps > 0.61, else SR; the report says
  which one ran.  Its variance ``alpha Var_PM(v) + (1 - alpha) Var_SR(v)`` does not depend on
  ``v`` when eps > 0.61 and equals Eq. 22 there.

Privacy
-------
Each mechanism is epsilon-LDP (Definition 2.2): for any two inputs ``v, v'`` in [-1, 1] and any
output, the output's probability (SR) or density (PM) under ``v`` is at most ``e^eps`` times
that under ``v'``.  HM's choice of branch does not depend on ``v``, so publishing it keeps the
ratio (``alpha pm(y | v) / (alpha pm(y | v'))``).  The estimates are post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpstream._checks import check_local_epsilon, check_unit_values
from dpstream.privacy import LOCAL_REPORT, PrivacyGuarantee

__all__ = [
    "HM_PM_THRESHOLD",
    "HybridMechanism",
    "PiecewiseMechanism",
    "StochasticRounding",
]

#: Below or at this epsilon HM uses SR only (Wang et al.'s eps* ~ 0.61, as the paper states).
HM_PM_THRESHOLD = 0.61


def _privacy(name: str, epsilon: float) -> PrivacyGuarantee:
    return PrivacyGuarantee(epsilon=epsilon, delta=0.0, neighbours=LOCAL_REPORT,
                            composition=f"{name}: one randomized report per value, no composition", local=True)


@dataclass(frozen=True, kw_only=True)
class StochasticRounding:
    """Stochastic Rounding (SR): a one-bit report of a value in [-1, 1].

    >>> sr = StochasticRounding(epsilon=1.0)
    >>> reports = sr.perturb(np.zeros(4), np.random.default_rng(0))
    >>> sorted(set(reports.tolist())) <= [-1.0, 1.0], round(sr.scale, 4)
    (True, 2.164)
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))

    #: Uniforms consumed per value.
    draws = 1

    @property
    def scale(self) -> float:
        """c = (e^eps + 1) / (e^eps - 1): the estimate of a report y is c y."""
        return 1.0 / math.tanh(self.epsilon / 2.0)

    def prob_plus(self, values: np.ndarray) -> np.ndarray:
        """``Pr[y = +1 | v]`` for each v."""
        return 0.5 + 0.5 * np.asarray(values, dtype=np.float64) / self.scale

    def probability(self, reports: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``Pr[y | v]`` for reports y in {-1, +1} (broadcasting)."""
        plus = self.prob_plus(values)
        return np.where(np.asarray(reports) > 0, plus, 1.0 - plus)

    def perturb_uniforms(self, values: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Reports from one uniform per value (``uniforms[:, 0]``)."""
        return np.where(uniforms[:, 0] < self.prob_plus(values), 1.0, -1.0)

    def perturb(self, values: object, rng: np.random.Generator) -> np.ndarray:
        """Client side: a report in {-1, +1} for each value in [-1, 1]."""
        values = check_unit_values(values)
        return self.perturb_uniforms(values, rng.random((values.size, self.draws)))

    def estimate(self, reports: np.ndarray) -> np.ndarray:
        """Collector side: the unbiased estimate c y of each report's value."""
        return self.scale * np.asarray(reports, dtype=np.float64)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance ``c^2 - v^2`` of the estimate for input v."""
        return self.scale**2 - np.asarray(values, dtype=np.float64) ** 2

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report."""
        return _privacy("SR", self.epsilon)


@dataclass(frozen=True, kw_only=True)
class PiecewiseMechanism:
    """Piecewise Mechanism (PM, Eq. 19): a report in [-s, s] that is its own unbiased estimate.

    >>> pm = PiecewiseMechanism(epsilon=2.0)
    >>> y = pm.perturb(np.array([-1.0, 0.0, 1.0]), np.random.default_rng(0))
    >>> bool(np.all(np.abs(y) <= pm.s))
    True
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))

    draws = 2

    @property
    def _half(self) -> float:
        return math.exp(self.epsilon / 2.0)

    @property
    def s(self) -> float:
        """Half-width of the output domain [-s, s]."""
        return 1.0 / math.tanh(self.epsilon / 4.0)

    @property
    def z(self) -> float:
        """z = (e^(eps/2) - 1) / (e^(eps/2) + 1) = 1 / s."""
        return math.tanh(self.epsilon / 4.0)

    @property
    def p(self) -> float:
        """Density inside the piece [l(v), r(v)]."""
        return self._half * self.z / 2.0

    @property
    def q(self) -> float:
        """Density outside the piece."""
        return self.z / (2.0 * self._half)

    def piece(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(l(v), r(v)) = ((e^(eps/2) v - 1) / (e^(eps/2) - 1), (e^(eps/2) v + 1) / (e^(eps/2) - 1))."""
        values = np.asarray(values, dtype=np.float64)
        denominator = math.expm1(self.epsilon / 2.0)
        return (self._half * values - 1.0) / denominator, (self._half * values + 1.0) / denominator

    def density(self, reports: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Density of report y given v (broadcasting); 0 outside [-s, s]."""
        reports = np.asarray(reports, dtype=np.float64)
        left, right = self.piece(values)
        inside = (reports >= left) & (reports <= right)
        density = np.where(inside, self.p, self.q)
        return np.where(np.abs(reports) <= self.s, density, 0.0)

    def perturb_uniforms(self, values: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Reports from two uniforms per value: in or out of the piece, then where."""
        left, right = self.piece(values)
        width = right - left  # = 2 / (e^(eps/2) - 1), the same for every v
        in_piece = uniforms[:, 0] < self._half / (self._half + 1.0)  # p * width
        inside = left + uniforms[:, 1] * width
        # Outside: uniform over [-s, l) and (r, s], of total length 2s - width.
        t = uniforms[:, 1] * (2.0 * self.s - width)
        left_length = left + self.s
        outside = np.where(t < left_length, t - self.s, right + (t - left_length))
        return np.where(in_piece, inside, outside)

    def perturb(self, values: object, rng: np.random.Generator) -> np.ndarray:
        """Client side: a report in [-s, s] for each value in [-1, 1]."""
        values = check_unit_values(values)
        return self.perturb_uniforms(values, rng.random((values.size, self.draws)))

    def estimate(self, reports: np.ndarray) -> np.ndarray:
        """Collector side: the report itself (E[y] = v)."""
        return np.asarray(reports, dtype=np.float64)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance ``v^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)``."""
        values = np.asarray(values, dtype=np.float64)
        d = math.expm1(self.epsilon / 2.0)
        return values**2 / d + (self._half + 3.0) / (3.0 * d * d)

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report."""
        return _privacy("PM", self.epsilon)


@dataclass(frozen=True, kw_only=True)
class HybridMechanism:
    """Hybrid Mechanism (HM): PM with probability alpha, SR otherwise; the ToPL perturber.

    A report is a pair ``(uses_pm, y)``: which branch ran and that branch's output.

    >>> hm = HybridMechanism(epsilon=1.0)
    >>> round(hm.alpha, 4), round(hm.worst_case_variance(), 4)
    (0.3935, 4.289)
    >>> uses_pm, y = hm.perturb(np.linspace(-1, 1, 5), np.random.default_rng(0))
    >>> hm.estimate(uses_pm, y).shape
    (5,)
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))

    draws = 3

    @property
    def alpha(self) -> float:
        """Probability of the PM branch: ``1 - e^(-eps/2)`` when eps > 0.61, else 0."""
        return -math.expm1(-self.epsilon / 2.0) if self.epsilon > HM_PM_THRESHOLD else 0.0

    @property
    def sr(self) -> StochasticRounding:
        return StochasticRounding(epsilon=self.epsilon)

    @property
    def pm(self) -> PiecewiseMechanism:
        return PiecewiseMechanism(epsilon=self.epsilon)

    def perturb_uniforms(self, values: np.ndarray, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reports from three uniforms per value: the branch, then that branch's draws."""
        uses_pm = uniforms[:, 0] < self.alpha
        rest = uniforms[:, 1:]
        y = np.where(uses_pm, self.pm.perturb_uniforms(values, rest), self.sr.perturb_uniforms(values, rest))
        return uses_pm, y

    def perturb(self, values: object, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Client side: ``(uses_pm, y)`` for each value in [-1, 1]."""
        values = check_unit_values(values)
        return self.perturb_uniforms(values, rng.random((values.size, self.draws)))

    def estimate(self, uses_pm: np.ndarray, reports: np.ndarray) -> np.ndarray:
        """Collector side: the PM report as it is, the SR report times c (both unbiased)."""
        reports = np.asarray(reports, dtype=np.float64)
        return np.where(np.asarray(uses_pm, dtype=bool), reports, self.sr.scale * reports)

    def variance(self, values: object) -> np.ndarray:
        """Exact variance ``alpha Var_PM(v) + (1 - alpha) Var_SR(v)`` (a mixture of unbiased estimates)."""
        return self.alpha * self.pm.variance(values) + (1.0 - self.alpha) * self.sr.variance(values)

    def worst_case_variance(self) -> float:
        """Eq. 22: ``c^2`` when eps <= 0.61, else ``e^(-eps/2) [c^2 + (e^(eps/2) + 3) / (3 (e^(eps/2) - 1))]``."""
        c2 = self.sr.scale**2
        if self.epsilon <= HM_PM_THRESHOLD:
            return c2
        half = math.exp(self.epsilon / 2.0)
        return (c2 + (half + 3.0) / (3.0 * (half - 1.0))) / half

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report."""
        return _privacy(f"HM (PM w.p. {self.alpha:.4g}, else SR)", self.epsilon)
