"""Noise samplers: the object a mechanism draws its noise from, handed in as ``noise=``.

A :class:`NoiseSampler` has two methods:

* ``laplace_units(scale, size)`` -- discrete Laplace noise in integer grid units, ``P[X = x]``
  proportional to ``exp(-|x| / scale)`` for a rational ``scale`` (a ``Fraction`` or an int),
  as int64.  A mechanism that releases ``g * (q / g + X)`` on a grid of step ``g`` adds noise of
  scale ``scale * g``.  This is the exact path.
* ``laplace(scale, size)`` -- continuous ``Lap(scale)`` noise as float64, for a float
  ``scale``: the path today's release code uses.

The exact samplers (:class:`ExactNoise`, :class:`ZeroNoise`) also have ``gaussian_units(sigma2,
size)``: discrete Gaussian noise in grid units for a rational variance parameter, the noise of
the zCDP paths (:mod:`dpstream.noise.grid_gaussian`).

Three implementations:

* :class:`ExactNoise` draws ``laplace_units`` exactly from a bit source
  (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace`); it has no float path and raises
  ``NotImplementedError`` from ``laplace``, so a release that has not moved to the grid cannot
  silently fall back to float noise.
* :class:`FloatNoise` wraps a ``numpy.random.Generator``: ``laplace`` is numpy's float Laplace
  (bit for bit what :func:`~dpstream.noise.float_noise.laplace_noise` draws), and ``laplace_units``
  the double-geometric law of the same scale drawn by numpy's float geometric sampler
  (:func:`~dpstream.noise.float_noise.double_geometric_noise`) -- the same law as
  :class:`ExactNoise`, not exactly sampled: for studies.  It lives with the float samplers in
  :mod:`dpstream.noise.float_noise` and is importable from here.
* :class:`ZeroNoise` returns zeros of the right shape and dtype (after checking the scale), so
  tests can check a mechanism's arithmetic exactly.

Privacy
-------
Only :class:`ExactNoise` with a secure bit source (the default) avoids the floating-point
attacks on Laplace noise (Mironov, CCS 2012).  :class:`ZeroNoise` gives no privacy at all.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np

from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.noise.discrete_gaussian_law import discrete_gaussian
from dpstream.noise.discrete_laplace_law import check_rational_scale, discrete_laplace
from dpstream.noise.float_noise import FloatNoise

__all__ = ["ExactNoise", "FloatNoise", "NoiseSampler", "ZeroNoise", "exact_noise", "make_noise"]

Size = int | tuple[int, ...]


@runtime_checkable
class NoiseSampler(Protocol):
    """Where a mechanism's noise comes from (see the module docstring)."""

    def laplace_units(self, scale: Fraction, size: Size) -> np.ndarray:  # pragma: no cover - protocol
        """Discrete Laplace noise of rational ``scale`` in grid units, int64."""
        ...

    def laplace(self, scale: float, size: Size) -> np.ndarray:  # pragma: no cover - protocol
        """Continuous ``Lap(scale)`` noise, float64."""
        ...


def _float_scale(scale: object) -> float:
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"Laplace scale must be a real number, got {scale!r}.")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"Laplace scale must be a finite number > 0, got {scale!r}.")
    return float(scale)


def _rational_variance(sigma2: object) -> Fraction:
    if isinstance(sigma2, bool) or not isinstance(sigma2, (int, Fraction)) or sigma2 <= 0:
        raise ValueError(f"a discrete Gaussian's variance must be a positive int or Fraction, got {sigma2!r}.")
    return Fraction(sigma2)


class ExactNoise:
    """Exact discrete Laplace noise from a bit source (CKS 2020, Algorithm 2).

    Parameters
    ----------
    bits : None, int, numpy Generator or bit source
        Passed to :func:`~dpstream.noise.bits.make_bits`: None (default) reads the operating
        system's CSPRNG, an int replays a seeded PCG64 (tests), a
        :class:`~dpstream.noise.bits.KeyedBits` makes the noise recomputable from a key.

    Examples
    --------
    >>> noise = ExactNoise(bits=0)
    >>> x = noise.laplace_units(Fraction(5, 2), 100_000)
    >>> x.dtype, bool(abs(x.mean()) < 0.1)
    (dtype('int64'), True)
    """

    def __init__(self, *, bits: BitsSeed = None) -> None:
        self.bits = make_bits(bits)

    def laplace_units(self, scale: Fraction, size: Size) -> np.ndarray:
        """Discrete Laplace draws of ``scale = t / s`` (``t <= 2^40`` once reduced), int64."""
        scale = check_rational_scale(scale)
        return discrete_laplace(self.bits, scale.numerator, scale.denominator, size)

    def gaussian_units(self, sigma2: Fraction, size: Size) -> np.ndarray:
        """Discrete Gaussian draws of variance parameter ``sigma2`` (a positive rational), int64."""
        sigma2 = _rational_variance(sigma2)
        return discrete_gaussian(self.bits, sigma2.numerator, sigma2.denominator, size)

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        """Not available: exact noise lives on a grid (use :meth:`laplace_units`)."""
        raise NotImplementedError(
            "ExactNoise draws on an integer grid only: use laplace_units(Fraction scale, size); "
            "this release path still needs float Laplace noise (pass FloatNoise or no noise)."
        )

    def __repr__(self) -> str:
        return f"ExactNoise(bits={self.bits!r})"


class ZeroNoise:
    """No noise: zeros of the right shape and dtype, after the same checks of the scale.

    For tests of a mechanism's arithmetic; it gives no privacy.

    >>> ZeroNoise().laplace_units(Fraction(1, 3), (2, 2)).tolist(), ZeroNoise().laplace(1.5, 2).tolist()
    ([[0, 0], [0, 0]], [0.0, 0.0])
    """

    def laplace_units(self, scale: Fraction, size: Size) -> np.ndarray:
        """Zeros as int64."""
        check_rational_scale(scale)
        return np.zeros(size, dtype=np.int64)

    def gaussian_units(self, sigma2: Fraction, size: Size) -> np.ndarray:
        """Zeros as int64."""
        _rational_variance(sigma2)
        return np.zeros(size, dtype=np.int64)

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        """Zeros as float64."""
        _float_scale(scale)
        return np.zeros(size, dtype=np.float64)

    def __repr__(self) -> str:
        return "ZeroNoise()"


def make_noise(noise: NoiseSampler | None, rng: np.random.Generator | None) -> NoiseSampler:
    """``noise`` itself, or for None today's float noise from ``rng`` (:class:`FloatNoise`).

    >>> type(make_noise(None, np.random.default_rng(0))).__name__, make_noise(ZeroNoise(), None)
    ('FloatNoise', ZeroNoise())
    """
    if noise is None:
        if rng is None:
            raise ValueError("a generator (rng) is needed when no noise sampler is given.")
        return FloatNoise(rng=rng)
    if not isinstance(noise, NoiseSampler):
        raise TypeError(f"noise must be a NoiseSampler (ExactNoise, FloatNoise, ZeroNoise) or None, got {noise!r}.")
    return noise


def exact_noise(seed: BitsSeed, noise: NoiseSampler | None) -> NoiseSampler:
    """A mechanism's sampler: ``noise`` itself, or exact noise from the bits of ``seed``; not both.

    >>> exact_noise(None, ZeroNoise()), type(exact_noise(3, None)).__name__
    (ZeroNoise(), 'ExactNoise')
    """
    if noise is None:
        return ExactNoise(bits=seed)
    if seed is not None:
        raise ValueError(f"give seed or noise, not both, got seed={seed!r} and noise={noise!r}.")
    return make_noise(noise, None)
