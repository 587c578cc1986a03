"""Exact samples of a continuous Laplace variable *observed on a grid*.

Some mechanisms are defined with continuous noise and have no discrete counterpart with the
same proof: S-PAK's smooth-sensitivity threshold ``f + sigma Z`` (Nissim, Raskhodnikova and
Smith 2007) relies on the Laplace density's dilation property, which integer noise does not
have.  Rounding the continuous output to a public grid is post-processing, so it keeps the
guarantee; and the rounded value can be sampled *exactly* from random bits:

    k = ceil((center + scale Z) / step),   Z ~ Laplace(1)  (density exp(-|z|) / 2),

by :func:`rounded_laplace`.  With ``a = center / step`` and ``w = step / scale`` (rationals),
``k = ceil(a + Z / w)``.  ``Z = +E`` or ``-E`` with a fair coin, ``E ~ Exp(1)``:

* ``Z = E``: ``k = ceil(a)`` unless ``E > (ceil(a) - a) w``, an event of probability
  ``exp(-(ceil(a) - a) w)`` (an exact Bernoulli); given it, ``E`` minus that threshold is again
  ``Exp(1)`` (memorylessness), so ``k = ceil(a) + 1 + G`` with ``P[G >= j] = exp(-j w)``.
* ``Z = -E``: with ``b = -a`` and ``phi = b - floor(b)``, ``k = -floor(b + E / w)``, and
  ``floor(b + E / w) = floor(b)`` unless ``E >= (1 - phi) w`` (probability
  ``exp(-(1 - phi) w)``), then ``floor(b) + 1 + G``.

``G = floor(E' / w)`` for a fresh ``E' ~ Exp(1)`` is drawn as in Canonne, Kamath and Steinke's
Algorithm 2: with ``w = p / q``, ``U`` uniform in ``[0, q)`` kept with probability
``exp(-U / q)``, ``V`` the number of Bernoulli(exp(-1)) successes before a failure, and
``G = floor((U + q V) / p)``, since ``P[U + q V = x]`` is proportional to ``exp(-x / q)``.
Everything is integer arithmetic on Python ints (the rationals come from floats and can have
large denominators): uniform integers by rejection from whole 64-bit words, Bernoulli(p) as
``U < p den`` for a uniform ``U`` below ``den``, and Bernoulli(exp(-gamma)) by CKS's
Algorithm 1, one draw at a time (a release draws one threshold; the vectorized samplers of
:mod:`dpstream.noise.discrete_laplace_law` and its kin cost about a millisecond per call whatever the size).
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpstream.noise.bits import BitSource

__all__ = ["rounded_laplace"]


def _uniform_int(bits: BitSource, n: int) -> int:
    """Uniform in ``[0, n)`` for any Python int ``n >= 1``: the top ``bit_length(n - 1)`` bits of
    whole 64-bit words, rejected when ``>= n`` (accepted with probability above 1/2)."""
    if n == 1:
        return 0
    length = (n - 1).bit_length()
    count = (length + 63) // 64
    while True:
        value = 0
        for word in bits.words(count).tolist():
            value = (value << 64) | int(word)
        value >>= count * 64 - length
        if value < n:
            return value


def _bernoulli(bits: BitSource, num: int, den: int) -> bool:
    """Bernoulli(num / den) for integers ``0 <= num <= den``."""
    return _uniform_int(bits, den) < num


def _bernoulli_exp_unit(bits: BitSource, num: int, den: int) -> bool:
    """Bernoulli(exp(-num / den)) for ``0 <= num <= den`` (CKS Algorithm 1): draw
    ``A_K ~ Bernoulli(gamma / K)`` for ``K = 1, 2, ...`` until the first ``A_K = 0``; 1 if K is odd."""
    k = 1
    while _bernoulli(bits, num, den * k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(bits: BitSource, gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for a rational ``gamma >= 0``: ``floor(gamma)`` Bernoulli(exp(-1))
    successes (stopping at the first failure), then the fractional part."""
    num, den = gamma.numerator, gamma.denominator
    whole, rest = divmod(num, den)
    for _ in range(whole):  # stops at the first failure: 1.6 draws on average
        if not _bernoulli_exp_unit(bits, 1, 1):
            return False
    return _bernoulli_exp_unit(bits, rest, den)


def _geometric(bits: BitSource, w: Fraction) -> int:
    """``G`` with ``P[G >= j] = exp(-j w)`` for a rational ``w > 0`` (see the module docstring)."""
    p, q = w.numerator, w.denominator
    while True:
        u = _uniform_int(bits, q)
        if _bernoulli_exp(bits, Fraction(u, q)):
            break
    v = 0
    while _bernoulli_exp(bits, Fraction(1)):
        v += 1
    return (u + q * v) // p


def rounded_laplace(bits: BitSource, center: Fraction, scale: Fraction, step: Fraction) -> int:
    """``ceil((center + scale Z) / step)`` for ``Z ~ Laplace(1)``, sampled exactly.

    Parameters
    ----------
    bits : bit source
    center, scale, step : Fraction (or int, or float: converted exactly)
        ``scale >= 0`` (0 gives ``ceil(center / step)``), ``step > 0``.

    Returns
    -------
    int
        The grid index ``k``: the sample, rounded up to the grid, is ``k step``.

    >>> from dpstream.noise.bits import SeededBits
    >>> bits = SeededBits(seed=0)
    >>> draws = [rounded_laplace(bits, Fraction(0), Fraction(1), Fraction(1, 4)) for _ in range(4000)]
    >>> abs(sum(draws) / 4000 - 0.5) < 0.2  # E[ceil(4 Z)] = 1/2 for a symmetric Z
    True
    """
    center, scale, step = Fraction(center), Fraction(scale), Fraction(step)
    if step <= 0 or scale < 0:
        raise ValueError(f"step must be > 0 and scale >= 0, got step={step} and scale={scale}.")
    a = center / step
    if scale == 0:
        return math.ceil(a)
    w = step / scale
    if _uniform_int(bits, 2) == 1:  # Z = E >= 0
        up = math.ceil(a)
        if not _bernoulli_exp(bits, (up - a) * w):
            return up
        return up + 1 + _geometric(bits, w)
    b = -a  # Z = -E
    low = math.floor(b)
    if _bernoulli_exp(bits, (1 - (b - low)) * w):
        low += 1 + _geometric(bits, w)
    return -low
