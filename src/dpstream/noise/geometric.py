"""The geometric mechanism's law: the double-geometric distribution (Kuo et al., Definition 3).

``DGeom(scale)`` puts mass ``(1 - a) / (1 + a) * a^|k|`` on every integer ``k``, where
``a = exp(-1 / scale)``: the discrete Laplace (two-sided geometric) law that
:func:`~dpstream.noise.exact.discrete_laplace` samples exactly for a rational scale.  Adding
``DGeom(Delta / epsilon)`` to an integer-valued query of global L1 sensitivity ``Delta`` is
epsilon-DP (Ghosh, Roughgarden and Sundararajan 2009).  Definition 3 of the count-of-counts
paper writes the normalising constant with ``epsilon`` in place of ``epsilon / Delta``; that is
a typo for ``Delta != 1`` (the mass would not sum to one), so the constant here uses ``a``.

This module holds the law (:func:`double_geometric_pmf`, :func:`double_geometric_variance`)
and the exact rational scale a mechanism draws with (:func:`discrete_laplace_scale`).  It
draws nothing: the exact sampler is :func:`~dpstream.noise.exact.discrete_laplace` (through
:class:`~dpstream.noise.sampler.ExactNoise`), and numpy's float geometric sampler, for studies
only, is :func:`~dpstream.noise.float_geometric.double_geometric_noise`.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

__all__ = ["SCALE_BITS", "discrete_laplace_scale", "double_geometric_pmf", "double_geometric_variance"]

#: Fractional bits of a rounded scale: ``discrete_laplace_scale`` returns a multiple of ``2^-20``
#: (fewer bits only above ``2^20``, where the sampler's numerator bound ``2^40`` needs them).
SCALE_BITS = 20
_MAX_NUMERATOR = 1 << 40  # dpstream.noise.exact.MAX_LAPLACE_NUMERATOR


def _ratio(scale: float) -> float:
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
    numerator stays at most ``2^40``, what :func:`~dpstream.noise.exact.discrete_laplace` takes);
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
    if exact > _MAX_NUMERATOR:
        raise ValueError(
            f"sensitivity / epsilon must be at most 2^40 (about {_MAX_NUMERATOR:.2g}) for exact discrete Laplace "
            f"noise, got {float(sensitivity):g} / {float(epsilon):g} = {float(exact):.3g}."
        )
    for bits in range(SCALE_BITS, -1, -1):
        numerator = -((-exact.numerator << bits) // exact.denominator)  # ceil(exact * 2^bits)
        if numerator <= _MAX_NUMERATOR:
            return Fraction(numerator, 1 << bits)
    raise AssertionError("unreachable: exact <= 2^40 fits with 0 fractional bits")  # pragma: no cover


def double_geometric_pmf(k: np.ndarray | int, scale: float) -> np.ndarray:
    """``Pr[X = k]`` for ``X ~ DGeom(scale)`` (float64, for tests and studies).

    >>> float(double_geometric_pmf(np.arange(-200, 201), 3.0).sum())  # doctest: +ELLIPSIS
    1.0...
    """
    ratio = _ratio(scale)
    k = np.abs(np.asarray(k, dtype=np.float64))
    return (1.0 - ratio) / (1.0 + ratio) * np.power(ratio, k)


def double_geometric_variance(scale: float) -> float:
    """Variance ``2 a / (1 - a)^2`` of ``DGeom(scale)``, ``a = exp(-1/scale)`` (below ``2 scale^2``).

    >>> a = math.exp(-1.0)
    >>> double_geometric_variance(1.0) == 2 * a / (1 - a) ** 2 < 2.0
    True
    """
    ratio = _ratio(scale)
    return 2.0 * ratio / (1.0 - ratio) ** 2
