"""PAK's Section VII-A: the error of the running sum at the last step, PAK against the plain
binary tree with bound B, and their improvement factor (ratio of mean absolute errors)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.pak import PAK, PAK_BETA, PAK_MULTIPLIER, PAK_PERCENTILE, PAK_THRESHOLD_FRACTION, optimize_pak
from dpstream.rng import Seed, make_rng

__all__ = ["last_step_errors"]


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
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Signed errors ``c^(n) - c(n)`` of PAK (optimized and default parameters) and of the binary
    tree with bound B over ``rounds`` runs, with the improvement factors.

    ``optimized`` uses the local parameters of :func:`~dpstream.release.pak.optimize_pak` on the
    first ``hold`` values (NOT PRIVATE: PAK's own experimental protocol, Tables I-II); ``default``
    uses the ToPS paper's settings (Appendix B) with PAK's split and r.
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
    for _ in tqdm(range(rounds), desc="last-step errors", disable=not progress, unit="round"):
        counter = BinaryTreeCounter(epsilon=epsilon, upper_bound=upper_bound, max_range=n, seed=rng)
        counter.release(values)
        errors["BT-bound"].append(counter.count - truth)
        for name, options in settings.items():
            pak = PAK(epsilon=epsilon, upper_bound=upper_bound, hold=hold, max_range=n - hold, delta=delta, seed=rng,
                      **options)
            released = pak.release(values)
            assert pak.held_sum is not None and pak.threshold is not None
            errors[f"PAK-{name}"].append(pak.held_sum + float(released.sum()) - truth)
            thresholds[f"PAK-{name}"].append(pak.threshold)
    mean_abs = {name: float(np.mean(np.abs(e))) for name, e in errors.items()}
    return {
        "n": n,
        "hold": hold,
        "epsilon": epsilon,
        "delta": delta,
        "beta": beta,
        "rounds": rounds,
        "parameters": {"optimized": settings["optimized"], "default": settings["default"],
                       "predicted_improvement_factor": params.improvement_factor},
        "mean_abs_error": mean_abs,
        "mean_threshold": {name: float(np.mean(t)) for name, t in thresholds.items()},
        "improvement_factor": {name: mean_abs["BT-bound"] / mean_abs[name] for name in thresholds},
        "errors": {name: list(map(float, e)) for name, e in errors.items()},
    }
