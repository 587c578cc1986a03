"""The discrete Gaussian law: its exact sampler and its pmf.

``P[X = x]`` proportional to ``exp(-x^2 / 2 sigma^2)`` on the integers, for a rational
``sigma^2``, sampled exactly by Canonne, Kamath and Steinke's Algorithm 3 (NeurIPS 2020): by
rejection from a discrete Laplace draw (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace`)
with coins of :mod:`dpstream.noise.exact_primitives`, in integer arithmetic only.
"""

from __future__ import annotations

import math

import numpy as np

from dpstream.noise.bits import BitSource
from dpstream.noise.discrete_laplace_law import MAX_LAPLACE_NUMERATOR, discrete_laplace
from dpstream.noise.exact_primitives import CHUNK, bernoulli_exp_batch, check_integer, check_size

__all__ = ["discrete_gaussian", "discrete_gaussian_pmf"]


def discrete_gaussian(bits: BitSource, sigma2_num, sigma2_den, size) -> np.ndarray:
    """Exact discrete Gaussian draws, ``P[X = x]`` proportional to ``exp(-x^2 / 2 sigma^2)``.

    CKS Algorithm 3 with ``sigma^2 = sigma2_num / sigma2_den``: with ``t = floor(sigma) + 1``,
    draw ``Y`` from the discrete Laplace of scale ``t`` and keep it with probability
    ``exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))``, whose exponent is the rational
    ``(|Y| t b - a)^2 / (2 a b t^2)`` for ``sigma^2 = a / b``.  ``floor(sigma)`` must be below 2^40.

    >>> from dpstream.noise.bits import SeededBits
    >>> x = discrete_gaussian(SeededBits(seed=0), 4, 1, 100_000)  # sigma^2 = 4
    >>> x.dtype, bool(abs(x.var() - 4.0) < 0.1)
    (dtype('int64'), True)
    """
    a = check_integer(sigma2_num, "sigma2_num", 1)
    b = check_integer(sigma2_den, "sigma2_den", 1)
    g = math.gcd(a, b)
    a, b = a // g, b // g
    t = math.isqrt(a // b) + 1  # floor(sqrt(a / b)) = isqrt(floor(a / b))
    if t > MAX_LAPLACE_NUMERATOR:
        raise ValueError(f"discrete Gaussian sigma must be below 2^40, got sigma^2 = {a}/{b}.")
    shape, n = check_size(size)
    out = np.empty(n, dtype=np.int64)
    den = 2 * a * b * t * t
    tb = t * b
    rate = 0.5  # acceptance rate so far (batch sizing only)
    filled = 0
    while filled < n:
        need = min(n - filled, CHUNK)
        m = int(need / rate * 1.05) + 16
        y = discrete_laplace(bits, t, 1, m)
        magnitude = np.abs(y)
        if (int(magnitude.max()) * tb + a) < (1 << 32) and den < (1 << 64):
            deviation = np.abs(magnitude * tb - a).astype(np.uint64)  # < 2^32, so its square fits
            num = deviation * deviation
        else:
            deviation = magnitude.astype(object) * tb - a
            num = deviation * deviation
        kept = y[bernoulli_exp_batch(bits, num, den)]
        rate = max(kept.size / m, 0.05)
        take = min(kept.size, n - filled)
        out[filled : filled + take] = kept[:take]
        filled += take
    return out.reshape(shape)


def discrete_gaussian_pmf(x, sigma2_num, sigma2_den) -> np.ndarray:
    """``P[X = x]`` for the discrete Gaussian with ``sigma^2 = sigma2_num / sigma2_den`` (float64).

    The normalizer is summed directly for ``sigma <= 100`` and by Poisson summation,
    ``sqrt(2 pi sigma^2) sum_k exp(-2 pi^2 sigma^2 k^2)``, above.

    >>> float(discrete_gaussian_pmf(np.arange(-50, 51), 9, 2).sum())  # doctest: +ELLIPSIS
    1.0...
    """
    sigma2 = check_integer(sigma2_num, "sigma2_num", 1) / check_integer(sigma2_den, "sigma2_den", 1)
    if sigma2 <= 100.0**2:
        support = np.arange(-math.ceil(40.0 * math.sqrt(sigma2)) - 1, math.ceil(40.0 * math.sqrt(sigma2)) + 2)
        normalizer = float(np.exp(-(support.astype(np.float64) ** 2) / (2.0 * sigma2)).sum())
    else:
        k = np.arange(-3, 4, dtype=np.float64)
        normalizer = math.sqrt(2.0 * math.pi * sigma2) * float(np.exp(-2.0 * math.pi**2 * sigma2 * k**2).sum())
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-(x**2) / (2.0 * sigma2)) / normalizer
