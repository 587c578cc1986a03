"""Thresholds from the smooth sensitivity of an empirical quantile: S-P and PAK's S-PAK.

Smooth sensitivity (Nissim, Raskhodnikova and Smith 2007; ToPS Appendix A; PAK Section IV-C).
For the sorted first ``m`` values ``V(1) <= ... <= V(m)``, padded with ``V(i) = 0`` for
``i < 1`` and ``V(i) = B`` for ``i > m``, and ``P`` the rank of the empirical quantile,

    SS = max_{k = 0..m+1} e^{-b k} max_{t = 0..k+1} [V(P + t) - V(P + t - k - 1)].

The paper computes it in O(m^2).  Writing ``lo = P + t - k - 1`` and ``hi = P + t``, it is the
maximum over pairs ``lo <= P <= hi`` of ``g(lo, hi) = (V(hi) - V(lo)) e^{-b (hi - lo - 1)}``
(indices beyond ``0`` and ``m + 1`` never help: V is constant there and the distance grows).
For ``lo1 < lo2`` the ratio ``g(lo, hi2) / g(lo, hi1)`` (``hi1 < hi2``) grows with ``V(lo)``,
so the best ``hi`` is monotone in ``lo`` and a divide and conquer over ``lo`` finds the maximum
in O(m log m) (NRS Section 3.1), vectorized here level by level.  Ties are removed first: among
equal values the largest ``lo`` and the smallest ``hi`` dominate, so integer data with few
distinct values costs almost nothing.

Thresholds.
* S-P (ToPS Appendix A): ``theta = x^_p + SS / a * Z``.
* S-PAK (PAK Eq. 6-12, ToPS Appendix B):
  ``tau = x^ + kappa SS / a * (Z + G^{-1}(1 - beta_lt))`` with ``kappa`` of Eq. 11, then
  multiplied by ``r`` (Eq. 15).

Admissible noise (the a and b of Section IV-C).  PAK asks for ``b <= eps / (-2 ln delta)``; we
take ``b = eps / (2 ln(2 / delta))``, which satisfies that and is the value NRS's Lemma 2.9
proves (epsilon, delta)-DP for Laplace noise with ``a = eps / 2``.  For standard Gaussian noise
PAK states ``a = eps / sqrt(-ln delta)``, which NRS's lemma does not cover; we use the values
it proves, ``a = eps / (5 sqrt(2 ln(2 / delta)))`` and ``b = eps / (4 (1 + ln(2 / delta)))``
(Lemma 2.10), so that the reported (epsilon, delta) holds.

Exact sampling on a grid (the default).  The proofs above need *continuous* noise: the
dilation property of the Laplace density has no integer counterpart.  So the threshold is
released rounded **up** to a public grid of step ``g`` (post-processing, which keeps the
guarantee), and that rounded value, ``ceil((center + scale Z) / g) g`` with ``Z ~ Laplace(1)``,
is sampled exactly from random bits (:func:`~dpstream.noise.rounded_laplace.rounded_laplace`).  What
this covers: the law of the released threshold is exactly that of the continuous mechanism
rounded to the grid, for the ``center`` and ``scale`` the code computes.  What it does not
cover: ``center`` and ``scale`` are float64 evaluations of the formulas (the smooth
sensitivity takes ``exp``); the smoothness of the computed ``SS`` can be off by their rounding
(relative ``~1e-15``), which the proof does not account for.  Gaussian noise has no exact
sampler here: ``noise="gaussian"`` is float-only and needs an explicit
``sampler=FloatNoise(rng)`` (studies, NOT for publication).
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np

from dpstream._checks import check_bound, check_choice, check_epsilon, check_percentile, check_probability
from dpstream.noise.bits import BitsSeed
from dpstream.noise.float_noise import float_gaussian, float_laplace
from dpstream.noise.grid import choose_granularity
from dpstream.noise.rounded_laplace import rounded_laplace
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler, ZeroNoise

__all__ = [
    "NOISES",
    "admissible_parameters",
    "noise_inverse_cdf",
    "pak_kappa",
    "pak_parameters",
    "pak_threshold",
    "quantile_rank",
    "smooth_quantile_threshold",
    "smooth_sensitivity_quantile",
]

#: The noise distributions of Section IV-C.
NOISES = ("laplace", "gaussian")


def quantile_rank(m: int, percentile: float) -> int:
    """P, the 1-based rank of the empirical ``percentile`` of m values: ``max(1, ceil(q m / 100))``.

    The smallest sorted value with at least ``q`` percent of the values at or below it.

    >>> quantile_rank(1000, 99.5), quantile_rank(3, 50), quantile_rank(10, 0)
    (995, 2, 1)
    """
    percentile = check_percentile(percentile)
    return int(min(m, max(1, math.ceil(percentile * m / 100.0 - 1e-9))))


def _sorted_padded(values: np.ndarray, upper_bound: float) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}.")
    if not (np.all(np.isfinite(values)) and values.min() >= 0 and values.max() <= upper_bound):
        raise ValueError(f"values must be finite and in [0, {upper_bound:g}].")
    return np.concatenate(([0.0], np.sort(values), [upper_bound]))


def smooth_sensitivity_quantile(values: np.ndarray, percentile: float, upper_bound: float, b: float) -> float:
    """The b-smooth sensitivity of the empirical ``percentile`` of ``values`` in [0, B], O(m log m).

    >>> round(smooth_sensitivity_quantile(np.array([1.0, 2.0, 3.0]), 50, 10.0, 1e-9), 6)
    10.0
    >>> round(smooth_sensitivity_quantile(np.arange(1.0, 100.0), 50, 100.0, 1.0), 6)
    1.0
    """
    upper_bound = check_bound(upper_bound)
    b = check_bound(b, "b")
    padded = _sorted_padded(values, upper_bound)
    rank = quantile_rank(padded.size - 2, percentile)
    # candidates: lo in [0, P] (last index of each value), hi in [P, m + 1] (first index)
    left = padded[: rank + 1]
    lo = np.flatnonzero(np.append(left[1:] != left[:-1], True))
    right = padded[rank:]
    hi = rank + np.flatnonzero(np.insert(right[1:] != right[:-1], 0, True))
    return _max_pairs(padded, lo, hi, b)


def _max_pairs(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, b: float) -> float:
    """max over lo, hi of g(lo, hi), by divide and conquer on the monotone best hi."""
    best = 0.0
    # segments of lo candidates [la, lb] searching hi candidates [ha, hb] (inclusive)
    la = np.array([0])
    lb = np.array([lo.size - 1])
    ha = np.array([0])
    hb = np.array([hi.size - 1])
    while la.size:
        mid = (la + lb) // 2
        lengths = hb - ha + 1
        segment = np.repeat(np.arange(la.size), lengths)
        offsets = np.arange(segment.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        hi_index = ha[segment] + offsets
        lo_pos, hi_pos = lo[mid[segment]], hi[hi_index]
        g = (values[hi_pos] - values[lo_pos]) * np.exp(-b * np.maximum(hi_pos - lo_pos - 1, 0))
        starts = np.cumsum(lengths) - lengths
        seg_max = np.maximum.reduceat(g, starts)
        best = max(best, float(seg_max.max()))
        hit = g == seg_max[segment]
        first = np.minimum.reduceat(np.where(hit, offsets, np.iinfo(np.int64).max), starts)
        arg = ha + first
        keep_left = la <= mid - 1
        keep_right = mid + 1 <= lb
        la, lb, ha, hb = (
            np.concatenate((la[keep_left], (mid + 1)[keep_right])),
            np.concatenate(((mid - 1)[keep_left], lb[keep_right])),
            np.concatenate((ha[keep_left], arg[keep_right])),
            np.concatenate((arg[keep_left], hb[keep_right])),
        )
    return best


def admissible_parameters(noise: str, epsilon: float, delta: float) -> tuple[float, float]:
    """(a, b) such that ``f + SS_b / a * Z`` is (epsilon, delta)-DP (see the module docstring).

    >>> a, b = admissible_parameters("laplace", 1.0, 1e-6)
    >>> a, round(b, 6)
    (0.5, 0.034462)
    """
    noise = check_choice(noise, "noise", NOISES)
    epsilon = check_epsilon(epsilon)
    delta = check_probability(delta, "delta", open_low=True)
    if delta >= 1:
        raise ValueError(f"delta must be < 1, got {delta!r}.")
    log_term = math.log(2.0 / delta)
    if noise == "laplace":
        return epsilon / 2.0, epsilon / (2.0 * log_term)
    return epsilon / (5.0 * math.sqrt(2.0 * log_term)), epsilon / (4.0 * (1.0 + log_term))


def noise_inverse_cdf(noise: str, u: float) -> float:
    """G^{-1}(u) of the standard noise (Laplace of scale 1, or standard Gaussian).

    >>> round(noise_inverse_cdf("laplace", 0.994), 6), round(noise_inverse_cdf("gaussian", 0.5), 6)
    (4.422849, 0.0)
    """
    noise = check_choice(noise, "noise", NOISES)
    if not 0 < u < 1:
        raise ValueError(f"a probability in (0, 1) is needed for the inverse CDF, got {u!r}.")
    if noise == "laplace":
        return math.log(2.0 * u) if u < 0.5 else -math.log(2.0 * (1.0 - u))
    return NormalDist().inv_cdf(u)


def pak_kappa(a: float, b: float, offset: float) -> float:
    """kappa of PAK's Eq. 11: ``(1 - (e^b - 1) offset / a)^-1``; needs ``(e^b - 1) offset < a``.

    >>> round(pak_kappa(0.5, 0.01, 4.0), 6)
    1.087431
    """
    denominator = 1.0 - math.expm1(min(b, 700.0)) * offset / a
    if not denominator > 0:
        raise ValueError(
            f"kappa of Eq. 11 needs (e^b - 1) G^-1(1 - beta_lt) < a, got b={b!r}, offset={offset!r}, a={a!r}; "
            "raise beta_lt or epsilon."
        )
    return 1.0 / denominator


def _sampler(seed: BitsSeed, sampler: NoiseSampler | None, noise: str) -> NoiseSampler:
    if sampler is not None and seed is not None:
        raise ValueError("give at most one of seed and sampler, got both.")
    chosen = ExactNoise(bits=seed) if sampler is None else sampler
    if noise == "gaussian" and not isinstance(chosen, FloatNoise):
        raise ValueError(
            "noise='gaussian' is float-only (no exact sampler for the smooth-sensitivity Gaussian threshold); "
            "use noise='laplace', or sampler=FloatNoise(rng) for a study (NOT for publication)."
        )
    return chosen


def _released(sampler: NoiseSampler, center: float, scale: float, granularity: float | None,
              upper_bound: float) -> float:
    """``ceil((center + scale Z) / g) g`` for ``Z ~ Laplace(1)``, exactly (ZeroNoise: ``Z = 0``), on the
    grid ``granularity`` or the default one for ``upper_bound`` (no discrete noise scale to fit: factor 0)."""
    granularity = choose_granularity(granularity, upper_bound, units_factor=0)
    if isinstance(sampler, ZeroNoise):
        k = math.ceil(Fraction(center) / Fraction(granularity))
    else:
        bits = getattr(sampler, "bits", None)
        if bits is None:
            raise TypeError(f"an exact threshold needs a sampler with a bit source (ExactNoise), got {sampler!r}.")
        k = rounded_laplace(bits, Fraction(center), Fraction(scale), Fraction(granularity))
    return float(k * Fraction(granularity))


def _float_draw(sampler: FloatNoise, noise: str) -> float:
    """``Z`` of the studies' float path: ``Laplace(1)`` or a standard normal from the sampler's generator."""
    return float_laplace(sampler, 1.0, 1)[0] if noise == "laplace" else float_gaussian(sampler)


def smooth_quantile_threshold(
    values: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    upper_bound: float,
    seed: BitsSeed = None,
    sampler: NoiseSampler | None = None,
    granularity: float | None = None,
    percentile: float = 99.5,
    noise: str = "laplace",
) -> float:
    """S-P (ToPS Appendix A): the empirical percentile plus ``SS / a * Z``, uncapped.

    ``seed`` (bits of the exact sampler; None is the OS CSPRNG) or ``sampler`` (a
    :class:`~dpstream.noise.sampler.NoiseSampler`: ``FloatNoise(rng)`` for the studies' float
    draw, ``ZeroNoise()`` for ``Z = 0``) give the noise.  On the exact path the result is
    rounded up to the grid of step ``granularity`` (default: the largest power of two at most
    ``upper_bound / 2^20``); see the module docstring for what that covers.

    Privacy
    -------
    (epsilon, delta)-DP at event level with respect to ``values`` (neighbours differ in one
    value in [0, B]), for the real-valued mechanism; see the module docstring for the float64
    evaluation of its center and scale.  The result may lie outside (0, B]; callers cap it
    (post-processing).

    >>> theta = smooth_quantile_threshold(np.arange(1000.0) % 50, epsilon=1e6, delta=1e-6,
    ...                                   upper_bound=1000, seed=0)
    >>> bool(abs(theta - 49) < 1)
    True
    """
    a, b = admissible_parameters(noise, epsilon, delta)
    upper_bound = check_bound(upper_bound)
    chosen = _sampler(seed, sampler, noise)
    ss = smooth_sensitivity_quantile(values, percentile, upper_bound, b)
    estimate = float(np.sort(np.asarray(values, dtype=np.float64))[quantile_rank(len(values), percentile) - 1])
    if isinstance(chosen, FloatNoise):
        draw = _float_draw(chosen, noise)
        return estimate + ss / a * float(draw)
    return _released(chosen, estimate, ss / a, granularity, upper_bound)


def pak_parameters(
    *, epsilon: float, delta: float, beta: float, multiplier: float, noise: str = "laplace"
) -> tuple[float, float, float, float]:
    """Check S-PAK's public parameters and return ``(a, b, G^{-1}(1 - beta), kappa)``.

    >>> [round(x, 4) for x in pak_parameters(epsilon=1.0, delta=1e-6, beta=0.006, multiplier=1.5)]
    [0.5, 0.0345, 4.4228, 1.4496]
    """
    a, b = admissible_parameters(noise, epsilon, delta)
    beta = check_probability(beta, "beta", open_low=True)
    if beta >= 0.5:
        raise ValueError(f"beta must be < 0.5 so that the offset is positive, got {beta!r}.")
    multiplier = check_bound(multiplier, "multiplier")
    if multiplier < 1:
        raise ValueError(f"multiplier r must be >= 1 (Eq. 15), got {multiplier!r}.")
    offset = noise_inverse_cdf(noise, 1.0 - beta)
    return a, b, offset, pak_kappa(a, b, offset)


def pak_threshold(
    values: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    upper_bound: float,
    seed: BitsSeed = None,
    sampler: NoiseSampler | None = None,
    granularity: float | None = None,
    percentile: float = 99.575,
    beta: float = 0.3 * 0.02,
    multiplier: float = 1.5,
    noise: str = "laplace",
) -> float:
    """S-PAK: ``r (x^ + kappa SS / a * (Z + G^{-1}(1 - beta)))`` (PAK Eq. 12 and 15), uncapped.

    ``percentile`` is that of the lambda p-quantile (ToPS Appendix B: 99.575, i.e. PAK's
    p = 0.5 % with lambda = 0.85), ``beta`` is beta_lt, ``multiplier`` is r (PAK Section VI-B:
    "an r between 1 and 2 suffices"; 1.5 by default).  ``seed``, ``sampler`` and
    ``granularity`` as in :func:`smooth_quantile_threshold`: on the exact path the threshold
    ``center + scale Z`` (``center = r (x^ + kappa SS / a G^{-1}(1 - beta))``,
    ``scale = r kappa SS / a``) is rounded up to the grid, sampled exactly.

    Privacy
    -------
    (epsilon, delta)-DP at event level on ``values``: ``kappa SS`` is a b-smooth upper bound on
    the local sensitivity of ``tau'`` of Eq. 6 (Eq. 8-10), kappa depends on public parameters
    only, and multiplying by r, rounding to the grid and capping are post-processing.  The
    float64 evaluation of ``SS`` is not covered exactly (module docstring).

    >>> tau = pak_threshold(np.arange(1000.0) % 50, epsilon=5.0, delta=1e-6, upper_bound=50,
    ...                     seed=0, multiplier=1.0)
    >>> bool(49 < tau < 60)
    True
    """
    a, b, offset, kappa = pak_parameters(epsilon=epsilon, delta=delta, beta=beta, multiplier=multiplier, noise=noise)
    upper_bound = check_bound(upper_bound)
    chosen = _sampler(seed, sampler, noise)
    ss = smooth_sensitivity_quantile(values, percentile, upper_bound, b)
    estimate = float(np.sort(np.asarray(values, dtype=np.float64))[quantile_rank(len(values), percentile) - 1])
    if isinstance(chosen, FloatNoise):
        draw = _float_draw(chosen, noise)
        return multiplier * (estimate + kappa * ss / a * (float(draw) + offset))
    center = multiplier * (estimate + kappa * ss / a * offset)
    return _released(chosen, center, multiplier * kappa * ss / a, granularity, upper_bound)
