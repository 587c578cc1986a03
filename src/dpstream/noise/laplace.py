"""The Laplace mechanism's variance and report-noisy-max (Section 2.3 of the ToPS paper).

``Lap(beta)`` has density ``exp(-|x| / beta) / (2 beta)`` and variance ``2 beta^2``.  Adding
``Lap(GS_f / epsilon)`` to a function of global L1 sensitivity ``GS_f`` is epsilon-DP.  The
float sampler :func:`laplace_noise` lives in :mod:`dpstream.noise.float_noise` (studies
only) and is re-exported here for old imports.

:func:`report_noisy_max_counts` runs on exact integer noise by default: integer queries (counts),
discrete Laplace noise, public offsets, and an exact comparison of the noisy scores.  (The
selection on real-valued scores, floored to a grid first, is
:func:`dpstream.thresholds.select.report_noisy_max_scores`.)
"""

from __future__ import annotations

import numbers
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpstream._checks import check_epsilon
from dpstream._deprecation import moved_names
from dpstream.noise.bits import BitsSeed
from dpstream.noise.float_noise import FloatNoise, float_laplace, laplace_noise
from dpstream.noise.grid import epsilon_of_scale, round_up_scale
from dpstream.noise.sampler import ExactNoise, NoiseSampler

__all__ = ["laplace_noise", "laplace_variance", "noisy_max_epsilon", "noisy_max_scale", "report_noisy_max_counts"]

#: ``report_noisy_max`` was renamed :func:`report_noisy_max_counts` (integer counts, not scores).
__getattr__ = moved_names(__name__, {"report_noisy_max": "dpstream.noise.laplace:report_noisy_max_counts"})


def laplace_variance(scale: float) -> float:
    """Variance ``2 scale^2`` of ``Lap(scale)``."""
    return 2.0 * scale * scale


def _sensitivity(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"sensitivity of integer queries must be an integer >= 1, got {value!r}.")
    return int(value)


def noisy_max_scale(epsilon: float, *, sensitivity: int = 1, monotone: bool = False) -> Fraction:
    """The discrete Laplace scale of :func:`report_noisy_max_counts`, in units of the integer queries.

    ``sensitivity / epsilon`` for monotone queries and twice that otherwise, rounded **up** to
    a multiple of ``2^-k`` (:func:`~dpstream.noise.grid.round_up_scale`).

    >>> noisy_max_scale(0.5, monotone=True), noisy_max_scale(1.0)
    (Fraction(2, 1), Fraction(2, 1))
    """
    return _scale(check_epsilon(epsilon), _sensitivity(sensitivity), bool(monotone))


@lru_cache(maxsize=64)
def _scale(epsilon: float, sensitivity: int, monotone: bool) -> Fraction:
    factor = 1 if monotone else 2
    return round_up_scale(Fraction(factor * sensitivity) / Fraction(epsilon), what="report-noisy-max scale")


def noisy_max_epsilon(epsilon: float, *, sensitivity: int = 1, monotone: bool = False) -> float:
    """The budget :func:`report_noisy_max_counts` actually spends for ``epsilon``: at most ``epsilon``.

    It is ``factor sensitivity / scale`` for the rounded-up scale, rounded up to a float.

    >>> noisy_max_epsilon(0.5, monotone=True), noisy_max_epsilon(0.1, monotone=True) <= 0.1
    (0.5, True)
    """
    scale = noisy_max_scale(epsilon, sensitivity=sensitivity, monotone=monotone)
    return epsilon_of_scale((1 if monotone else 2) * _sensitivity(sensitivity), scale)


def _as_noise(noise: NoiseSampler | BitsSeed) -> NoiseSampler:
    if isinstance(noise, (ExactNoise, FloatNoise)) or (noise is not None and hasattr(noise, "laplace_units")):
        return noise  # a NoiseSampler (checked by its method: the protocol check is slow)
    return ExactNoise(bits=noise)


def _integer_counts(counts: object) -> np.ndarray:
    array = np.asarray(counts)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {array.shape}.")
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.rint(array)):
        return array.astype(np.int64)
    raise ValueError("counts must be integers on the exact path (pass FloatNoise for real-valued scores).")


def report_noisy_max_counts(
    noise: NoiseSampler | BitsSeed,
    counts: np.ndarray,
    epsilon: float,
    *,
    offsets: np.ndarray | None = None,
    sensitivity: int = 1,
    monotone: bool = False,
) -> int:
    """Index of the largest noisy score ``counts + Z - offsets`` (Report Noisy Max, Dwork and Roth 3.3).

    Parameters
    ----------
    noise : NoiseSampler, or a seed for :class:`~dpstream.noise.sampler.ExactNoise`
        ``ExactNoise`` (or an int, a numpy Generator, a bit source or None, which build one)
        draws exact discrete Laplace noise; ``ZeroNoise`` none; a
        :class:`~dpstream.noise.sampler.FloatNoise` takes the float path of the studies:
        ``counts - offsets + Lap(scale)`` in float64, compared in float64.
    counts : 1-D array
        The data-dependent queries: integers on the exact path (any reals on the float path).
    epsilon : float
    offsets : 1-D array of float, optional
        Public, data-independent terms subtracted from every score (NM-E's first term).
    sensitivity : int
        L1 sensitivity of each count.
    monotone : bool
        True when all counts move in the same direction between neighbours.

    Privacy
    -------
    epsilon-DP for counts of sensitivity ``sensitivity``.  The noise is discrete Laplace in
    count units, ``P[Z = z]`` proportional to ``exp(-|z| / scale)``, with ``scale`` the
    rounded-up ``sensitivity / epsilon`` (monotone) or ``2 sensitivity / epsilon``; the budget
    spent is :func:`noisy_max_epsilon`, at most ``epsilon``.

    The winner is the index maximizing the *exact* real number ``y_i - c_i`` with
    ``y_i = counts_i + Z_i`` an integer and ``c_i`` the offset (a float, hence a rational):
    writing ``c_i = C_i + f_i`` with ``C_i = floor(c_i)`` and ``f_i`` in ``[0, 1)`` (both exact
    in float64), ``y_i - c_i > y_j - c_j`` exactly when ``(y_i - C_i, -f_i)`` is
    lexicographically larger, and ties go to the lowest index.  This matters: the monotone
    proof (Dwork and Roth, Claim 3.9) needs the order of the noisy scores to be invariant when
    every ``y`` moves by the same integer, so that a candidate that wins with argument ``a``
    on one input wins with argument ``a + 1`` on its neighbour.  A float subtraction
    ``fl(y_i - c_i)`` is non-decreasing in ``y_i`` but not shift-invariant, and a proof for an
    arbitrary non-decreasing ``f_i(y_i)`` does not go through (one ``f_j`` may jump between
    ``y_j`` and ``y_j + 1`` while ``f_i`` does not).  With the exact order, the argument of
    the real-valued proof applies verbatim: for fixed noise of the other candidates, the set of
    arguments ``y_i`` with which ``i`` wins is an up-set ``{y_i >= t}`` of integers; on a
    neighbour whose counts are at least as large ``t' in [t, t + 1]``; and the discrete Laplace
    tail satisfies ``P[Z >= k - 1] <= exp(1 / scale) P[Z >= k]``.  Only the index is released.

    Examples
    --------
    >>> report_noisy_max_counts(1, np.array([0, 10**6, 0]), 1.0)
    1
    >>> report_noisy_max_counts(1, np.array([0, 0]), 1e3, offsets=np.array([0.5, 0.25]), monotone=True)
    1
    """
    epsilon = check_epsilon(epsilon)
    noise = _as_noise(noise)
    if isinstance(noise, FloatNoise):
        return _float_noisy_max(noise, counts, epsilon, offsets, sensitivity, 1 if monotone else 2)
    values = _integer_counts(counts)
    scale = noisy_max_scale(epsilon, sensitivity=sensitivity, monotone=monotone)
    noisy = values + noise.laplace_units(scale, values.size)
    if offsets is None:
        return int(np.argmax(noisy))
    return _exact_argmax(noisy, offsets)


def _float_noisy_max(noise: FloatNoise, counts: object, epsilon: float, offsets: np.ndarray | None,
                     sensitivity: float, factor: int) -> int:
    """The float path of the studies: ``argmax(counts - offsets + Lap(factor sensitivity / epsilon))``."""
    scores = np.asarray(counts, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}.")
    if offsets is not None:
        scores = scores - np.asarray(offsets, dtype=np.float64)
    if not (isinstance(sensitivity, numbers.Real) and not isinstance(sensitivity, bool) and sensitivity > 0):
        raise ValueError(f"sensitivity must be a number > 0, got {sensitivity!r}.")
    noisy = scores + float_laplace(noise, factor * float(sensitivity) / epsilon, scores.size)
    return int(np.argmax(noisy))


def _exact_argmax(noisy: np.ndarray, offsets: object) -> int:
    """The index maximizing ``noisy_i - offsets_i`` exactly (ties: the lowest index; see
    :func:`report_noisy_max_counts`): integer parts compared first, then fractional parts."""
    offsets = np.asarray(offsets, dtype=np.float64)
    if offsets.shape != noisy.shape or not np.all(np.isfinite(offsets)):
        raise ValueError(f"offsets must be finite and of shape {noisy.shape}, got shape {offsets.shape}.")
    whole = np.floor(offsets)
    fraction = offsets - whole  # exact: the fractional part of a float is a float
    if np.max(np.abs(whole)) >= 2.0**62:
        raise ValueError("offsets must be below 2^62 in absolute value.")
    key = noisy - whole.astype(np.int64)
    top = key == key.max()
    smallest = np.min(fraction[top])
    return int(np.flatnonzero(top & (fraction == smallest))[0])
