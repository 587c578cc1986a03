"""Analysis of PAK (Perrier, Asghar and Kaafar, NDSS 2019) beside its mechanism.

* PAK's optimizer of its local parameters (Section VI-A, Eq. 16): :func:`optimize_pak`.
* Its two heuristics for the time lag m (Section VI-B): :func:`time_lag_first_criterion`,
  :func:`time_lag_second_criterion` and :func:`heuristic_time_lag`.
* Its Section VII-A experiment: the error of the running sum at the last step, PAK against the
  plain binary tree with bound B, and their improvement factor (ratio of mean absolute errors):
  :func:`last_step_errors`, its table :func:`last_step_summary` and its figure
  :func:`plot_last_step_errors`, all in the stream's own units.

The optimizer tunes on the data, as PAK's Tables I-II do: it is NOT PRIVATE and serves analysis
only.  The mechanism itself, with its public defaults, is :class:`~dpstream.release.pak.PAK`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, stats

from dpstream._checks import check_epsilon, check_probability
from dpstream._progress import Progress, notify
from dpstream.evaluation.plots import Panel, Series, save_figure
from dpstream.noise import FloatNoise
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.pak import PAK, PAK_BETA, PAK_MULTIPLIER, PAK_PERCENTILE, PAK_THRESHOLD_FRACTION
from dpstream.rng import Seed, make_rng
from dpstream.thresholds.smooth_sensitivity import (
    admissible_parameters,
    noise_inverse_cdf,
    pak_kappa,
    quantile_rank,
    smooth_sensitivity_quantile,
)

__all__ = [
    "PAKParameters",
    "heuristic_time_lag",
    "last_step_errors",
    "last_step_summary",
    "optimize_pak",
    "plot_last_step_errors",
    "time_lag_first_criterion",
    "time_lag_second_criterion",
]


# -- PAK's optimizer of its local parameters (Section VI-A) and its heuristics for m (VI-B) ----


@dataclass(frozen=True, kw_only=True)
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
    return PAKParameters(p=p, lam=lam, multiplier=r, threshold_fraction=fraction, betas=betas, alpha=float(alpha(x)),
                         alpha_bt=alpha_bt)


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


# -- PAK's Section VII-A: the error of the sum at the last step --------------------------------


def last_step_errors(
    values: np.ndarray,
    upper_bound: float,
    *,
    epsilon: float = 1.0,
    hold: int = 50_000,
    delta: float = 2.0**-20,
    beta: float = 0.02,
    rounds: int = 1000,
    seed: Seed = 0,
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Signed errors ``c^(n) - c(n)`` of PAK (optimized and default parameters) and of the binary
    tree with bound B over ``rounds`` runs, with the improvement factors.

    ``optimized`` uses the local parameters of :func:`optimize_pak` on the
    first ``hold`` values (NOT PRIVATE: PAK's own experimental protocol, Tables I-II); ``default``
    uses the ToPS paper's settings (Appendix B) with PAK's split and r.  Errors are in the
    stream's units.  ``progress`` is called with the rounds done out of ``rounds`` (the protocol
    of :mod:`dpstream._progress`); ``log`` receives the optimized parameters.
    """
    values = np.asarray(values, dtype=np.float64)
    n, truth = values.size, float(values.sum())
    if not 0 < hold < n - 1:
        raise ValueError(f"hold must be between 1 and n - 2 = {n - 2} for a stream of {n} values, got {hold!r}.")
    params = optimize_pak(values[:hold], epsilon=epsilon, upper_bound=upper_bound, n=n, delta=delta, beta=beta)
    log(f"optimized local parameters (Eq. 16, TNC): p = {params.p:.4g}, lambda = {params.lam:.3g}, "
        f"r = {params.multiplier:.3g}, eps1/eps = {params.threshold_fraction:.3g}, "
        f"beta_lt = {params.betas['lt']:.3g}; predicted IF = {params.improvement_factor:.3g}")
    settings = {
        "optimized": dict(percentile=params.percentile, beta=params.betas["lt"], multiplier=params.multiplier,
                          threshold_fraction=params.threshold_fraction),
        "default": dict(percentile=PAK_PERCENTILE, beta=PAK_BETA, multiplier=PAK_MULTIPLIER,
                        threshold_fraction=PAK_THRESHOLD_FRACTION),
    }
    rng = make_rng(seed)
    errors: dict[str, list[float]] = {"BT-bound": [], **{f"PAK-{name}": [] for name in settings}}
    thresholds: dict[str, list[float]] = {f"PAK-{name}": [] for name in settings}
    notify(progress, 0, rounds)
    for done in range(1, rounds + 1):
        counter = BinaryTreeCounter(upper_bound=upper_bound, epsilon=epsilon, max_range=n,
                                    noise=FloatNoise(rng=rng))
        counter.release(values)
        errors["BT-bound"].append(counter.count - truth)
        for name, options in settings.items():
            pak = PAK(epsilon=epsilon, upper_bound=upper_bound, hold=hold, max_range=n - hold, delta=delta,
                      noise=FloatNoise(rng=rng), **options)
            released = pak.release(values)
            assert pak.held_sum is not None and pak.threshold is not None
            errors[f"PAK-{name}"].append(pak.held_sum + float(released.sum()) - truth)
            thresholds[f"PAK-{name}"].append(pak.threshold)
        notify(progress, done, rounds)
    mean_abs = {name: float(np.mean(np.abs(e))) for name, e in errors.items()}
    return {
        "n": n,
        "hold": hold,
        "epsilon": epsilon,
        "delta": delta,
        "beta": beta,
        "rounds": rounds,
        "parameters": {
            "optimized": settings["optimized"],
            "default": settings["default"],
            "predicted_improvement_factor": params.improvement_factor,
        },
        "mean_abs_error": mean_abs,
        "mean_threshold": {name: float(np.mean(t)) for name, t in thresholds.items()},
        "improvement_factor": {name: mean_abs["BT-bound"] / mean_abs[name] for name in thresholds},
        "errors": {name: list(map(float, e)) for name, e in errors.items()},
    }


def last_step_summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per method of a :func:`last_step_errors` result: its mean threshold, mean and
    median absolute error at the last step (in the stream's units) and improvement factor.

    >>> result = {"rounds": 2, "errors": {"BT-bound": [-4.0, 2.0], "PAK-default": [1.0, -1.0]},
    ...           "mean_threshold": {"PAK-default": 5.0}}
    >>> [(row["method"], row["mean_abs_error"], row["improvement_factor"]) for row in last_step_summary(result)]
    [('BT-bound', 3.0, 1.0), ('PAK-default', 1.0, 3.0)]
    """
    mean_abs = {name: float(np.mean(np.abs(errors))) for name, errors in result["errors"].items()}
    return [
        {
            "method": name,
            "rounds": result["rounds"],
            "mean_threshold": result["mean_threshold"].get(name),
            "mean_error": float(np.mean(errors)),
            "mean_abs_error": mean_abs[name],
            "median_abs_error": float(np.median(np.abs(errors))),
            "improvement_factor": mean_abs["BT-bound"] / mean_abs[name],
        }
        for name, errors in result["errors"].items()
    ]


def plot_last_step_errors(errors: dict[str, list[float]], path: Path, *, title: str = "") -> Path:
    """The errors at the last step, in the stream's units, one line per method: their empirical
    densities (PAK's Figures 8 and 10) and, on a log axis where all methods can be told apart,
    the share of rounds whose absolute error is at most x; the legend gives each mean."""
    densities, shares = [], []
    for name, values in errors.items():
        array = np.asarray(values, dtype=np.float64)
        density, edges = np.histogram(array, bins=60, density=True)
        densities.append(Series(label=name, x=edges, y=density, steps=True))
        absolute = np.sort(np.abs(array))
        shares.append(Series(label=f"{name} (mean |error| {absolute.mean():,.0f})", x=absolute,
                             y=np.arange(1, absolute.size + 1) / absolute.size, marker=None))
    return save_figure(path, [
        Panel(series=densities, xlabel="error of the released sum at the last step, c^(n) - c(n)",
              ylabel="density (share of rounds per unit of error)", title=title),
        Panel(series=shares, xlabel="absolute error at the last step, |c^(n) - c(n)| (log scale)",
              ylabel="share of rounds with an error at most x", xlog=True, title="the same errors, cumulated"),
    ])
