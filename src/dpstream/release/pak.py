"""PAK (Perrier, Asghar and Kaafar, NDSS 2019): Mechanism 1, its optimizer and its heuristics.

Mechanism 1.  The first ``m`` values choose tau by S-PAK (Eq. 6-12, times r of Eq. 15) with
budget ``eps1``; their sum ``c(sigma, m)`` is released at once with ``Lap(tau / eps2)``; every
later value is truncated at tau and released by the binary-tree counter with noise scaled to
tau and budget ``eps = eps1 + eps2``.  Mechanism 1 requires ``tau < B``: a tau of at least B
(or not positive) falls back to B, i.e. to the plain binary tree.  ``capped=False`` is the
variant the ToPS paper ran (its Section 3.1: "the value of theta is usually larger than the
maximal possible value"): tau above B is kept and scales the noise; a non-positive tau still
falls back to B, since no truncation threshold can be <= 0.

Step 2's ``Lap(tau / eps2)`` has sensitivity tau only if the first m values are truncated at
tau too; PAK does not say so, and we truncate them (post-processing of the private tau).

Privacy
-------
(eps, delta)-DP at event level (neighbours: streams differing in the value at one position;
values in [0, B]).  Steps 1-2 read the first m values: (eps1, delta) + (eps2, 0) compose
sequentially to (eps1 + eps2, delta).  Steps 3-6 read the rest: eps-DP given the public tau.
The two parts read disjoint positions (parallel composition), so the whole is
``(max(eps1 + eps2, eps), delta) = (eps, delta)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from dpstream._checks import (
    check_bool,
    check_bound,
    check_choice,
    check_epsilon,
    check_percentile,
    check_positive_int,
    check_probability,
)
from dpstream.noise import laplace_noise
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.holdout import HoldOutRelease
from dpstream.rng import Seed, make_rng
from dpstream.thresholds.smooth_sensitivity import (
    NOISES,
    admissible_parameters,
    noise_inverse_cdf,
    pak_kappa,
    pak_parameters,
    pak_threshold,
    quantile_rank,
    smooth_sensitivity_quantile,
)

__all__ = [
    "PAK",
    "PAK_BETA",
    "PAK_MULTIPLIER",
    "PAK_PERCENTILE",
    "PAK_THRESHOLD_FRACTION",
    "PAKParameters",
    "cap_threshold",
    "optimize_pak",
    "time_lag_first_criterion",
    "time_lag_second_criterion",
    "heuristic_time_lag",
]

#: ToPS Appendix B: the 99.5th percentile with lambda = 0.85 (p = 99.575) and beta = 0.3 * 0.02.
PAK_PERCENTILE = 99.575
PAK_BETA = 0.3 * 0.02
#: PAK Section VI-B: "a value in the range 0.8 to 0.9 is a reasonable choice for eps1"; "an r
#: between 1 and 2 suffices".
PAK_THRESHOLD_FRACTION = 0.85
PAK_MULTIPLIER = 1.5


def cap_threshold(theta: float, upper_bound: float, *, capped: bool = True) -> float:
    """tau as Mechanism 1 uses it: below B, else B (capped); uncapped keeps tau > B.

    A tau that is not positive falls back to B in both variants.  Post-processing only.

    >>> cap_threshold(2000.0, 1657), cap_threshold(2000.0, 1657, capped=False), cap_threshold(-3.0, 10)
    (1657.0, 2000.0, 10.0)
    """
    if not theta > 0 or (capped and theta >= upper_bound):
        return float(upper_bound)
    return float(theta)


class PAK(HoldOutRelease):
    """Continual release of a stream's running sum under (epsilon, delta)-DP (PAK, Mechanism 1).

    Parameters
    ----------
    epsilon : float
        eps = eps1 + eps2, also the budget of the binary tree.
    upper_bound : float
        B (public): values lie in [0, B].
    hold : int
        m, the time lag: values used for tau and released only as one noisy sum.
    max_range : int
        n - m: leaves of the binary tree, the largest query range (a fresh tree after that
        many values).
    threshold_fraction : float
        eps1 / eps (default 0.85, PAK Section VI-B).
    delta : float, optional
        Default ``1 / n^2`` with ``n = hold + max_range`` (ToPS Appendix B).
    percentile, beta, multiplier, noise
        Of S-PAK (:func:`~dpstream.thresholds.smooth_sensitivity.pak_threshold`).
    capped : bool
        True: tau >= B falls back to B (Mechanism 1).  False: the ToPS paper's uncapped variant.
    clip : bool
        Clip values outside [0, B] instead of raising.
    seed : int, Generator or None

    Privacy
    -------
    (epsilon, delta)-DP at event level; see the module docstring and :meth:`privacy`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> stream = rng.integers(0, 20, size=3000).astype(float)
    >>> pak = PAK(epsilon=5.0, upper_bound=1000, hold=1000, max_range=2048, seed=1)
    >>> out = pak.release(stream)
    >>> out.shape, pak.threshold <= 1000, pak.privacy().delta == 1 / 3048**2
    ((2000,), True, True)
    """

    def __init__(
        self,
        *,
        epsilon: float,
        upper_bound: float,
        hold: int = 65536,
        max_range: int = 2**20,
        threshold_fraction: float = PAK_THRESHOLD_FRACTION,
        delta: float | None = None,
        percentile: float = PAK_PERCENTILE,
        beta: float = PAK_BETA,
        multiplier: float = PAK_MULTIPLIER,
        noise: str = "laplace",
        capped: bool = True,
        clip: bool = False,
        seed: Seed = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.upper_bound = check_bound(upper_bound)
        self.hold = check_positive_int(hold, "hold")
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        fraction = check_probability(threshold_fraction, "threshold_fraction", open_low=True)
        if fraction >= 1:
            raise ValueError(f"threshold_fraction must be < 1 (eps2 > 0), got {threshold_fraction!r}.")
        self.threshold_epsilon = fraction * self.epsilon
        self.sum_epsilon = self.epsilon - self.threshold_epsilon
        n = self.hold + self.max_range
        self.delta = 1.0 / n**2 if delta is None else check_probability(delta, "delta", open_low=True)
        self.percentile = check_percentile(percentile)
        self.beta = beta
        self.multiplier = multiplier
        self.noise = check_choice(noise, "noise", NOISES)
        self.capped = check_bool(capped, "capped")
        self.clip = check_bool(clip, "clip")
        pak_parameters(epsilon=self.threshold_epsilon, delta=self.delta, beta=beta, multiplier=multiplier,
                       noise=self.noise)  # validates the threshold's parameters now, not after the hold-out
        self._rng = make_rng(seed)
        self._start_hold_out()
        self.raw_threshold: float | None = None
        self.held_sum: float | None = None

    def privacy(self) -> PrivacyGuarantee:
        """(epsilon, delta) for any split: eps1 + eps2 on the hold-out, eps on the rest, in parallel."""
        threshold = PrivacyGuarantee(epsilon=self.threshold_epsilon, delta=self.delta, neighbours=EVENT_LEVEL,
                                     composition="S-PAK threshold")
        held_sum = PrivacyGuarantee(epsilon=self.sum_epsilon, delta=0.0, neighbours=EVENT_LEVEL,
                                    composition="Lap(tau/eps2) sum of the held-out values")
        tree = PrivacyGuarantee(epsilon=self.epsilon, delta=0.0, neighbours=EVENT_LEVEL,
                                composition="binary tree on the rest")
        return threshold.compose_sequential(held_sum).compose_parallel(tree, composition=(
            f"S-PAK threshold ({self.threshold_epsilon:g}, {self.delta:g})-DP and Lap(tau/{self.sum_epsilon:g}) "
            f"sum, sequential, on the first {self.hold} values; binary tree {self.epsilon:g}-DP on the "
            "rest; parallel composition"
        ))

    def _choose_threshold(self) -> None:
        self.raw_threshold = pak_threshold(
            self._held, epsilon=self.threshold_epsilon, delta=self.delta, upper_bound=self.upper_bound,
            rng=self._rng, percentile=self.percentile, beta=self.beta, multiplier=self.multiplier,
            noise=self.noise,
        )
        tau = cap_threshold(self.raw_threshold, self.upper_bound, capped=self.capped)
        truncated_sum = float(np.minimum(self._held, tau).sum())
        self.held_sum = truncated_sum + float(laplace_noise(self._rng, tau / self.sum_epsilon, 1)[0])
        self._threshold = tau
        self._stream = BinaryTreeCounter(epsilon=self.epsilon, upper_bound=tau, max_range=self.max_range,
                                         seed=self._rng)

    def release(self, values: object) -> np.ndarray:
        """Consume a batch; return the increments of the noisy running sum after the hold-out.

        ``held_sum + cumsum(outputs)`` is PAK's released ``c^(sigma, i)`` for ``i > m``; the
        threshold tau (after the cap) is :attr:`threshold`.
        """
        return super().release(values)

    def release_one(self, value: float) -> float | None:
        """Consume one value; None while it is held out."""
        out = self.release([value])
        return None if out.size == 0 else float(out[0])


# -- PAK's optimizer of its local parameters (Section VI-A) and its heuristics for m (VI-B) ----


@dataclass(frozen=True)
class PAKParameters:
    """Local parameters chosen by :func:`optimize_pak` and the error bounds they give.

    NOT PRIVATE: they are tuned on the data (as in PAK's Tables I-II); use them for analysis.
    """

    p: float
    lam: float
    multiplier: float
    threshold_fraction: float
    betas: dict[str, float]
    alpha: float
    alpha_bt: float

    @property
    def improvement_factor(self) -> float:
        """IF = error bound of the plain binary tree / PAK's (at least 1: PAK then uses the BT)."""
        return max(1.0, self.alpha_bt / self.alpha)

    @property
    def percentile(self) -> float:
        """The percentile of the lambda p-quantile, as S-PAK takes it."""
        return 100.0 * (1.0 - self.lam * self.p)


def _quantile_gap(lam: float, p: float, m: int) -> float:
    """g(lambda, p, m) of Eq. 5: Pr[at most lambda p m of m values are >= x_p]."""
    return float(stats.binom.cdf(math.floor(lam * p * m), m, p))


def optimize_pak(
    values: np.ndarray,
    *,
    epsilon: float,
    upper_bound: float,
    n: int,
    delta: float,
    beta: float = 0.02,
    p_max: float = 0.005,
    noise: str = "laplace",
) -> PAKParameters:
    """Minimise Eq. 16 over PAK's local parameters with scipy's truncated Newton method (TNC).

    Variables: p <= p_max, lambda <= 1, r >= 1, eps1 / eps, and the split of beta over
    beta_lt, beta_Lap, beta_out, beta_rt; beta_qt is g(lambda, p, m) of Eq. 5 (the constraint
    ``g <= beta_qt``, taken tight), and the five sum to ``beta``.  kappa > 0 is required.

    Eq. 16 is ``alpha = (log2(n - m))^1.5 tau r sqrt(8 ln(1/beta_Lap)) / eps
    + (-x^/ln p) (sqrt(p^r n) + sqrt(ln(1/beta_out)))^2`` with tau the bound tau_max of Eq. 13
    (whose second offset is read as G^{-1}(1 - beta_rt): Eq. 13 prints beta_lt twice, but
    beta_rt is the probability it bounds).  Eq. 16 omits the error of Step 2 (c(sigma, m) with
    ``Lap(tau / eps2)``), without which eps2 -> 0 would look free; we add its tail bound
    ``tau r ln(1/beta_Lap) / eps2``.  The plain tree's bound is Eq. 3 with GS = B.

    ``values`` are the first m values; NOT PRIVATE (tuning on the data, as PAK's tables do).
    """
    epsilon = check_epsilon(epsilon)
    values = np.asarray(values, dtype=np.float64)
    m = values.size
    if not (isinstance(n, int) and n > m + 1):
        raise ValueError(f"n must be an integer > m + 1 = {m + 1} (the stream is longer than the hold-out), got {n!r}.")
    delta = check_probability(delta, "delta", open_low=True)
    beta = check_probability(beta, "beta", open_low=True)
    log_term = math.log2(n - m) ** 1.5  # PAK's tree covers the n - m values after the hold-out
    # the plain binary tree it is compared with covers all n values (Eq. 3)
    alpha_bt = math.log2(n) ** 1.5 * upper_bound * math.sqrt(8.0 * math.log(1.0 / beta)) / epsilon
    penalty = 10.0 * alpha_bt
    sorted_values = np.sort(values)
    names = ("lt", "Lap", "out", "rt")

    def unpack(x: np.ndarray) -> tuple[float, float, float, float, dict[str, float]] | None:
        p, lam, r, fraction = (float(v) for v in x[:4])
        weights = np.asarray(x[4:], dtype=np.float64)
        beta_qt = _quantile_gap(lam, p, m)
        if beta_qt >= beta:
            return None
        shares = (beta - beta_qt) * weights / weights.sum()
        return p, lam, r, fraction, {"qt": beta_qt, **dict(zip(names, map(float, shares), strict=True))}

    def alpha(x: np.ndarray) -> float:
        unpacked = unpack(x)
        if unpacked is None:
            return penalty
        p, lam, r, fraction, betas = unpacked
        eps1 = fraction * epsilon
        a, b = admissible_parameters(noise, eps1, delta)
        try:
            kappa = pak_kappa(a, b, noise_inverse_cdf(noise, 1.0 - betas["lt"]))
        except ValueError:
            return penalty
        percentile = 100.0 * (1.0 - lam * p)
        estimate = float(sorted_values[quantile_rank(m, percentile) - 1])
        ss = smooth_sensitivity_quantile(values, percentile, upper_bound, b)
        offsets = noise_inverse_cdf(noise, 1.0 - betas["lt"]) + noise_inverse_cdf(noise, 1.0 - betas["rt"])
        tau_max = estimate + kappa * ss / a * offsets
        noise_error = log_term * tau_max * r * math.sqrt(8.0 * math.log(1.0 / betas["Lap"])) / epsilon
        sum_error = tau_max * r * math.log(1.0 / betas["Lap"]) / (epsilon - eps1)
        outlier = -estimate / math.log(p) * (math.sqrt(p**r * n) + math.sqrt(math.log(1.0 / betas["out"]))) ** 2
        return noise_error + sum_error + outlier

    # start from the largest lambda on a grid whose g(lambda, p_max, m) leaves most of beta free
    feasible = [lam for lam in np.linspace(0.99, 0.05, 95) if _quantile_gap(lam, p_max, m) <= beta / 4]
    if not feasible:
        raise ValueError(f"no feasible parameters: g(lambda, p, m) >= beta = {beta!r} for m = {m}; raise m.")
    start = np.array([p_max, feasible[0], 1.5, 0.85, 0.3, 0.4, 0.15, 0.15])
    bounds = [(1e-5, p_max), (0.05, 1.0), (1.0, 10.0), (0.05, 0.99)] + [(0.01, 1.0)] * 4
    result = optimize.minimize(alpha, start, method="TNC", bounds=bounds)
    x = result.x if alpha(result.x) <= alpha(start) else start
    unpacked = unpack(x)
    if unpacked is None:
        raise ValueError(f"no feasible parameters: g(lambda, p, m) >= beta = {beta!r} for m = {m}; raise m.")
    p, lam, r, fraction, betas = unpacked
    return PAKParameters(p, lam, r, fraction, betas, float(alpha(x)), alpha_bt)


def time_lag_first_criterion(*, beta: float = 0.02, p_max: float = 0.005, lam: float = 0.5) -> int:
    """PAK VI-B a): the smallest m with ``g(lambda, p_max, m) < beta`` (lambda = 0.5).

    >>> m = time_lag_first_criterion()
    >>> _quantile_gap(0.5, 0.005, m) < 0.02 and all(_quantile_gap(0.5, 0.005, k) >= 0.02 for k in range(1, m))
    True
    """
    high = 1
    while _quantile_gap(lam, p_max, high) >= beta:
        high *= 2
    # g is not monotone in m (the floor of lambda p m jumps), so bisection could miss an
    # earlier m: scan every m up to the first power of two that satisfies the bound.
    m = np.arange(1, high + 1)
    below = stats.binom.cdf(np.floor(lam * p_max * m), m, p_max) < beta
    return int(m[np.argmax(below)])


def time_lag_second_criterion(
    *, epsilon: float, delta: float, beta: float = 0.02, p_max: float = 0.005, noise: str = "laplace"
) -> float:
    """PAK VI-B b): ``m > 20 kappa (-ln delta)^1.5 e^-1 G^-1(1 - beta) / (-eps^2 p_max ln p_max)``.

    With the section's own a = eps / sqrt(-ln delta) and b = min(1, eps / (-2 ln delta)).

    >>> round(time_lag_second_criterion(epsilon=1.0, delta=2.0**-20))
    82422
    """
    epsilon = check_epsilon(epsilon)
    log_delta = -math.log(delta)
    a, b = epsilon / math.sqrt(log_delta), min(1.0, epsilon / (2.0 * log_delta))
    offset = noise_inverse_cdf(noise, 1.0 - beta)
    kappa = pak_kappa(a, b, offset)
    return 20.0 * kappa * log_delta**1.5 * math.exp(-1.0) * offset / (-(epsilon**2) * p_max * math.log(p_max))


def heuristic_time_lag(*, epsilon: float, delta: float, beta: float = 0.02, p_max: float = 0.005) -> int:
    """PAK VI-B: m is the larger of the two criteria."""
    second = math.floor(time_lag_second_criterion(epsilon=epsilon, delta=delta, beta=beta, p_max=p_max)) + 1
    return max(time_lag_first_criterion(beta=beta, p_max=p_max), second)
