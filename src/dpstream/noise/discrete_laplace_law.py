"""The discrete Laplace law, in one place: its exact sampler, its pmf, its variance and its scale.

``DLap(scale)``, also called the double-geometric or two-sided geometric law (Kuo et al.,
Definition 3), puts mass ``(1 - a) / (1 + a) * a^|k|`` on every integer ``k``, where
``a = exp(-1 / scale)``.  Adding ``DLap(Delta / epsilon)`` to an integer-valued query of global
L1 sensitivity ``Delta`` is epsilon-DP (Ghosh, Roughgarden and Sundararajan 2009).
Definition 3 of the count-of-counts paper writes the normalising constant with ``epsilon`` in
place of ``epsilon / Delta``; that is a typo for ``Delta != 1`` (the mass would not sum to one),
so the constant here uses ``a``.

* :func:`discrete_laplace` samples it exactly from random bits for a rational scale ``t / s``
  (Canonne, Kamath and Steinke 2020, Algorithm 2, on the primitives of
  :mod:`dpstream.noise.exact_primitives`); :data:`MAX_LAPLACE_NUMERATOR` bounds ``t``.
* :func:`discrete_laplace_scale` is the exact rational scale ``Delta / epsilon`` rounded **up**
  to a multiple of ``2^-20`` that the count-of-counts and post-processing mechanisms draw with
  (the stream mechanisms round theirs on the grid, :func:`~dpstream.noise.grid.round_up_scale`).
* :func:`discrete_laplace_pmf` (scale ``t / s``) and :func:`double_geometric_pmf` (a float
  scale) give the pmf, for tests and studies.
* :func:`double_geometric_variance` (a float scale) and :func:`laplace_units_variance` (a
  rational scale in grid units, ``expm1`` in the denominator) give the variance ``2 a / (1 - a)^2``.
* :func:`check_rational_scale` is the check every sampler of :mod:`dpstream.noise.sampler`
  applies to a scale in grid units.

numpy's float geometric sampler of the same law, for studies only, is
:func:`~dpstream.noise.float_noise.double_geometric_noise`.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from dpstream.noise.bits import BitSource
from dpstream.noise.exact_primitives import (
    CHUNK,
    below,
    bernoulli_exp_unit_batch,
    check_integer,
    check_size,
    coins,
    geometric_exp1,
)

__all__ = [
    "MAX_LAPLACE_NUMERATOR",
    "SCALE_BITS",
    "check_rational_scale",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_scale",
    "double_geometric_pmf",
    "double_geometric_ratio",
    "double_geometric_variance",
    "laplace_units_variance",
]

#: Largest numerator ``t`` (after reducing ``t / s``) :func:`discrete_laplace` accepts, so scales
#: up to 2^40 (about 1.1e12).  A draw ``U + t V`` overflows int64 only if the geometric part ``V``
#: reaches ``2^63 / t >= 2^23``, which has probability ``exp(-2^23)``; it would raise, never wrap.
MAX_LAPLACE_NUMERATOR = 1 << 40

#: Fractional bits of a rounded scale: ``discrete_laplace_scale`` returns a multiple of ``2^-20``
#: (fewer bits only above ``2^20``, where the sampler's numerator bound ``2^40`` needs them).
SCALE_BITS = 20


# -- the exact sampler ---------------------------------------------------------------------------


def _laplace_args(t, s) -> tuple[int, int]:
    t = check_integer(t, "t", 1)
    s = check_integer(s, "s", 1)
    g = math.gcd(t, s)
    t, s = t // g, s // g
    if t > MAX_LAPLACE_NUMERATOR:
        raise ValueError(
            f"discrete Laplace scale t/s must have a numerator t <= 2^40 once reduced (so draws fit int64), "
            f"got t/s = {t}/{s}; round the scale to a coarser fraction."
        )
    if s >= 1 << 62:
        raise ValueError(
            f"discrete Laplace scale t/s must have a denominator s < 2^62 once reduced, got t/s = {t}/{s}."
        )
    return t, s


def discrete_laplace(bits: BitSource, t, s, size) -> np.ndarray:
    """Exact discrete Laplace draws of scale ``t / s``: ``P[X = x] = tanh(s / 2t) exp(-|x| s / t)``.

    CKS Algorithm 2: ``U`` uniform in ``[0, t)`` kept with probability ``exp(-U / t)``,
    ``V`` the number of Bernoulli(exp(-1)) successes before a failure, ``Y = floor((U + t V) / s)``,
    a fair sign ``B``, rejecting ``(B = 1, Y = 0)``; the output is ``(1 - 2B) Y``.

    Privacy
    -------
    Adding a draw of scale ``t / s = Delta / epsilon`` to an integer-valued query of L1
    sensitivity ``Delta`` is epsilon-DP (the pmf ratio of neighbouring outputs is at most
    ``exp(Delta s / t)``), exactly, with no floating-point caveat.

    Parameters
    ----------
    bits : bit source
    t, s : int
        The scale is ``t / s`` (reduced first); ``t <= 2^40`` (:data:`MAX_LAPLACE_NUMERATOR`)
        and ``s < 2^62``.
    size : int or tuple of int

    Returns
    -------
    ndarray of int64

    >>> from dpstream.noise.bits import SeededBits
    >>> x = discrete_laplace(SeededBits(seed=0), 3, 1, 100_000)
    >>> x.dtype, bool(abs(x.mean()) < 0.1)
    (dtype('int64'), True)
    """
    t, s = _laplace_args(t, s)
    shape, n = check_size(size)
    out = np.empty(n, dtype=np.int64)
    # Float only sizes the batches: a candidate survives the U step with probability
    # E[exp(-U/t)] = (1 - 1/e) / (t (1 - exp(-1/t))) and the sign step with (1 + exp(-s/t)) / 2.
    keep = -math.expm1(-1.0) / (t * -math.expm1(-1.0 / t)) * (1.0 + math.exp(-s / t)) / 2.0
    v_limit = ((1 << 63) - t) // t  # U + t V stays below 2^63
    filled = 0
    while filled < n:
        need = min(n - filled, CHUNK)
        m = int(need / keep * 1.02) + 16
        u = below(bits, t, m)
        u = u[bernoulli_exp_unit_batch(bits, u, t)]
        v = geometric_exp1(bits, u.size)
        if u.size and int(v.max()) > v_limit:
            raise OverflowError(
                f"a discrete Laplace draw of scale {t}/{s} left the int64 range (probability < 1e-1000000)."
            )
        x = u.astype(np.int64) + np.int64(t) * v
        y = x // s if s > 1 else x
        negative = coins(bits, y.size)
        z = np.where(negative, -y, y)[~(negative & (y == 0))]
        take = min(z.size, n - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out.reshape(shape)


def check_rational_scale(scale: object) -> Fraction:
    """A scale in grid units checked: an exact rational (a ``Fraction`` or an int) ``> 0``.

    >>> check_rational_scale(3), check_rational_scale(Fraction(5, 2))
    (Fraction(3, 1), Fraction(5, 2))
    >>> check_rational_scale(0.5)
    Traceback (most recent call last):
    TypeError: scale must be an exact rational (a Fraction or an int), got 0.5; convert a float with \
Fraction(x).limit_denominator().
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Rational):
        raise TypeError(
            f"scale must be an exact rational (a Fraction or an int), got {scale!r}; "
            f"convert a float with Fraction(x).limit_denominator()."
        )
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}.")
    return scale


# -- the law -------------------------------------------------------------------------------------


def discrete_laplace_pmf(x, t, s) -> np.ndarray:
    """``P[X = x]`` for the discrete Laplace of scale ``t / s`` (float64, for tests).

    >>> float(discrete_laplace_pmf(np.arange(-100, 101), 2, 1).sum())  # doctest: +ELLIPSIS
    1.0...
    """
    rate = check_integer(s, "s", 1) / check_integer(t, "t", 1)
    return math.tanh(rate / 2.0) * np.exp(-np.abs(np.asarray(x, dtype=np.float64)) * rate)


def double_geometric_ratio(scale: float) -> float:
    """``a = exp(-1 / scale)`` of ``DGeom(scale)``, after checking that ``scale`` is a finite number > 0.

    >>> double_geometric_ratio(1.0) == math.exp(-1.0)
    True
    """
    if not (isinstance(scale, numbers.Real) and not isinstance(scale, bool) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"double-geometric scale must be a finite number > 0, got {scale!r}.")
    return math.exp(-1.0 / float(scale))


def _exact_positive(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    if isinstance(value, numbers.Rational):
        exact = Fraction(value)
    elif not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    else:
        exact = Fraction(float(value))  # the float's exact binary value: no rounding
    if exact <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return exact


def discrete_laplace_scale(sensitivity: object, epsilon: object) -> Fraction:
    """The smallest multiple of ``2^-20`` that is at least ``sensitivity / epsilon``, exactly.

    ``sensitivity`` and ``epsilon`` are taken at their exact values (a float is the binary
    number it stores; pass a ``Fraction`` such as ``Fraction(eps) / 3`` for a share of a budget),
    and the quotient is rounded **up**, never to the nearest: discrete Laplace noise of the
    returned scale ``b`` on a query of L1 sensitivity ``sensitivity`` is ``sensitivity / b``-DP,
    and ``sensitivity / b <= epsilon``.  Scales above ``2^20`` keep fewer fractional bits (the
    numerator stays at most ``2^40``, what :func:`discrete_laplace` takes);
    a quotient above ``2^40`` (an absurdly small ``epsilon``) raises ValueError.

    Privacy
    -------
    The guarantee is exact: ``epsilon' = sensitivity / b`` with ``b >= sensitivity / epsilon``,
    so it is never worse than asked and better by a relative ``2^-20 / b`` at most for
    ``b >= 2^-20`` (a scale below ``2^-20`` is raised to ``2^-20``).

    >>> discrete_laplace_scale(1, 0.5), discrete_laplace_scale(2, Fraction(1, 3))
    (Fraction(2, 1), Fraction(6, 1))
    >>> b = discrete_laplace_scale(1, 0.3)
    >>> b >= 1 / Fraction(0.3), b - 1 / Fraction(0.3) < Fraction(1, 2**20), (b * 2**20).denominator
    (True, True, 1)
    >>> discrete_laplace_scale(1, 1e-13)
    Traceback (most recent call last):
    ValueError: sensitivity / epsilon must be at most 2^40 (about 1.1e+12) for exact discrete Laplace noise, \
got 1 / 1e-13 = 1e+13.
    """
    exact = _exact_positive(sensitivity, "sensitivity") / _exact_positive(epsilon, "epsilon")
    if exact > MAX_LAPLACE_NUMERATOR:
        raise ValueError(
            f"sensitivity / epsilon must be at most 2^40 (about {MAX_LAPLACE_NUMERATOR:.2g}) for exact discrete "
            f"Laplace noise, got {float(sensitivity):g} / {float(epsilon):g} = {float(exact):.3g}."
        )
    for bits in range(SCALE_BITS, -1, -1):
        numerator = -((-exact.numerator << bits) // exact.denominator)  # ceil(exact * 2^bits)
        if numerator <= MAX_LAPLACE_NUMERATOR:
            return Fraction(numerator, 1 << bits)
    raise AssertionError("unreachable: exact <= 2^40 fits with 0 fractional bits")  # pragma: no cover


def double_geometric_pmf(k: np.ndarray | int, scale: float) -> np.ndarray:
    """``Pr[X = k]`` for ``X ~ DGeom(scale)`` (float64, for tests and studies).

    >>> float(double_geometric_pmf(np.arange(-200, 201), 3.0).sum())  # doctest: +ELLIPSIS
    1.0...
    """
    ratio = double_geometric_ratio(scale)
    k = np.abs(np.asarray(k, dtype=np.float64))
    return (1.0 - ratio) / (1.0 + ratio) * np.power(ratio, k)


def double_geometric_variance(scale: float) -> float:
    """Variance ``2 a / (1 - a)^2`` of ``DGeom(scale)``, ``a = exp(-1/scale)`` (below ``2 scale^2``).

    >>> a = math.exp(-1.0)
    >>> double_geometric_variance(1.0) == 2 * a / (1 - a) ** 2 < 2.0
    True
    """
    ratio = double_geometric_ratio(scale)
    return 2.0 * ratio / (1.0 - ratio) ** 2


def laplace_units_variance(scale: Fraction) -> float:
    """Variance ``2 a / (1 - a)^2``, ``a = exp(-1 / scale)``, of discrete Laplace noise (in units^2).

    It is below the continuous ``2 scale^2`` (by about 1/6 for large scales).

    >>> round(laplace_units_variance(Fraction(10)), 4), 2 * 10**2
    (199.8334, 200)
    """
    ratio = math.exp(-1.0 / float(scale))
    return 2.0 * ratio / (-math.expm1(-1.0 / float(scale))) ** 2
