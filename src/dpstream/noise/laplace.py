"""The Laplace mechanism's noise and report-noisy-max (Section 2.3 of the ToPS paper).

``Lap(beta)`` has density ``exp(-|x| / beta) / (2 beta)`` and variance ``2 beta^2``.  Adding
``Lap(GS_f / epsilon)`` to a function of global L1 sensitivity ``GS_f`` is epsilon-DP.
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_epsilon

__all__ = ["laplace_noise", "laplace_variance", "report_noisy_max"]


def laplace_noise(rng: np.random.Generator, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Independent ``Lap(scale)`` samples, as float64.

    >>> noise = laplace_noise(np.random.default_rng(0), 2.0, 100_000)
    >>> bool(abs(noise.var() - laplace_variance(2.0)) < 0.2)
    True
    """
    if not scale > 0:
        raise ValueError(f"Laplace scale must be > 0, got {scale!r}.")
    return rng.laplace(0.0, scale, size)


def laplace_variance(scale: float) -> float:
    """Variance ``2 scale^2`` of ``Lap(scale)``."""
    return 2.0 * scale * scale


def report_noisy_max(
    rng: np.random.Generator,
    scores: np.ndarray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotone: bool = False,
) -> int:
    """Index of the largest ``score + Lap(noise)`` (Report Noisy Max, Dwork and Roth 3.3).

    Privacy
    -------
    epsilon-DP for queries of sensitivity ``sensitivity``: the noise is
    ``Lap(2 sensitivity / epsilon)`` in general and ``Lap(sensitivity / epsilon)`` when the
    queries are monotone (all move in the same direction between neighbours), as the ToPS
    paper's Section 2.3 states.  Only the index is released, never the noisy scores.

    >>> report_noisy_max(np.random.default_rng(1), np.array([0.0, 1e6, 0.0]), 1.0)
    1
    """
    epsilon = check_epsilon(epsilon)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}.")
    factor = 1.0 if monotone else 2.0
    noisy = scores + laplace_noise(rng, factor * sensitivity / epsilon, scores.size)
    return int(np.argmax(noisy))
