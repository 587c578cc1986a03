"""A private within-period profile of the held-out values (the shape of a day), for periodic leaves.

:class:`~dpstream.release.periodic.PeriodicPerturber` measures one leaf per period and predicts
the values inside a leaf from the previous leaf's level; with a flat prediction a window that
cuts a period (an unaligned day) errs by the period's profile (on the smart-meter stream, 40 W
at night against 900 W in the evening).  :func:`noisy_profile` estimates that profile from the
hold-out: the period is cut into ``bins`` equal phase bins, the sums of ``min(v, theta)`` per bin
get discrete Laplace noise on a grid, and the bin means relative to the overall mean are shrunk
towards flat by the share of their spread that the noise explains (a James-Stein factor,
post-processing).  Not in the paper.

Privacy
-------
epsilon-DP at event level on the held-out values: one value lies in one bin and moves its
integer sum by at most ``ceil(theta / g)`` grid units (L1 sensitivity of the vector of bin
sums), each bin gets discrete Laplace noise of scale ``ceil(theta / g) / epsilon`` (rounded
up).  The bin counts are public (they depend on the number of held-out values and the phase
only); the shrinkage and the expansion to positions are post-processing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpstream._checks import check_bound, check_epsilon, check_positive_int
from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.noise.discrete_laplace_law import discrete_laplace

__all__ = ["noisy_profile", "profile_epsilon"]


def _scale(top: int, epsilon: float) -> Fraction:
    """``top / epsilon`` rounded up to a dyadic rational whose numerator stays below 2^40."""
    value = Fraction(top) / Fraction(epsilon)
    shift = max(0, 39 - value.numerator.bit_length() + value.denominator.bit_length())
    return Fraction(math.ceil(value * (1 << shift)), 1 << shift)


def _grid(bound: float) -> tuple[float, int]:
    g = 2.0 ** (math.floor(math.log2(bound)) - 20)
    return g, math.ceil(bound / g)


def profile_epsilon(bound: float, epsilon: float) -> float:
    """What :func:`noisy_profile` spends: ``top / scale`` for the rounded-up scale (at most ``epsilon``).

    >>> profile_epsilon(1000.0, 0.1) <= 0.1
    True
    """
    _, top = _grid(check_bound(bound, "bound"))
    return float(Fraction(top) / _scale(top, check_epsilon(epsilon)))


def noisy_profile(values: np.ndarray, bound: float, *, period: int, bins: int, epsilon: float, phase: int = 0,
                  seed: BitsSeed = None) -> np.ndarray:
    """The profile of ``min(v, bound)`` over the positions of a period, mean 1, epsilon-DP.

    Parameters
    ----------
    values : array of float
        The held-out values; ``values[i]`` sits at clock position ``i + phase``.
    bound : float
        theta: values are truncated at it (public).
    period, bins : int
        P, and the number of equal phase bins (at most P); position ``c`` of the period lies in
        bin ``c * bins // P``.
    epsilon : float
        Budget.
    seed : None, int, Generator or bit source
        Bits of the discrete Laplace sampler (None: the OS CSPRNG).

    Returns
    -------
    ndarray of ``period`` floats, non-negative, mean 1: the shrunk bin means over the overall
    mean, each repeated over its bin's positions (flat when the noise explains the spread).

    Privacy
    -------
    :func:`profile_epsilon` -DP (at most ``epsilon``) at event level on ``values``; see the module docstring.

    >>> day = np.tile(np.repeat([1.0, 3.0], 12), 400)  # a period of 24: low then high
    >>> p = noisy_profile(day, 4.0, period=24, bins=2, epsilon=5.0, seed=0)
    >>> p.shape, [round(float(x), 2) for x in p[[0, 12]]]
    ((24,), [0.5, 1.5])
    """
    bound = check_bound(bound, "bound")
    epsilon = check_epsilon(epsilon)
    period = check_positive_int(period, "period")
    bins = min(check_positive_int(bins, "bins"), period)
    values = np.asarray(values, dtype=np.float64)
    g, top = _grid(bound)
    units = np.minimum(np.rint(np.minimum(values, bound) / g), top)
    of_position = np.arange(period) * bins // period  # bin of each position of the period
    which = of_position[(np.arange(values.size) + phase) % period]
    counts = np.bincount(which, minlength=bins).astype(np.float64)
    scale = _scale(top, epsilon)
    noise = discrete_laplace(make_bits(seed), scale.numerator, scale.denominator, bins).astype(np.float64)
    sums = (np.bincount(which, weights=units, minlength=bins) + noise) * g
    seen = counts > 0
    mean = float(sums[seen].sum() / counts[seen].sum()) if seen.any() else 0.0
    if not mean > 0:  # nothing measured, or noise drowned the level: no shape to trust
        return np.ones(period)
    ratio = np.ones(bins)
    ratio[seen] = sums[seen] / counts[seen] / mean
    # noise variance of each ratio (discrete Laplace: at most 2 scale^2 units^2), against the spread of the ratios
    noise_variance = 2.0 * (float(scale) * g) ** 2 / np.maximum(counts, 1.0) ** 2 / mean**2
    spread = float(np.mean((ratio[seen] - 1.0) ** 2))
    keep = 0.0 if spread <= 0 else max(0.0, 1.0 - float(np.mean(noise_variance[seen])) / spread)
    shape = np.maximum(1.0 + keep * (ratio - 1.0), 0.0)[of_position]
    total = shape.sum()
    return np.ones(period) if not total > 0 else shape * (period / total)
