"""numpy's floating-point noise: for studies only, never for publication.

These are the draws the paper-reproduction studies use (``dpstream evaluate``) so that their
numbers stay those of the float implementation, fast:

* :func:`laplace_noise` -- numpy's float ``Lap(scale)`` from a generator;
* :func:`double_geometric_noise` -- numpy's float geometric sampler of the discrete Laplace law
  (:mod:`dpstream.noise.discrete_laplace_law`), **not exact**: numpy inverts a floating-point
  uniform, so its support is bounded (at ``epsilon / Delta = 1`` no draw exceeds 36 in absolute
  value, which breaks pure DP: an output 37 away from one input and 36 from its neighbour is
  impossible under the first), its probabilities are float approximations, and for some scales
  (``epsilon / Delta = 0.5`` among them) its loop never ends when the uniform is ``1 - 2^-53``;
* :class:`FloatNoise` -- the noise object (``noise=``) that carries a generator to a mechanism,
  and :func:`float_laplace` / :func:`float_gaussian`, the draws of a mechanism's float path,
  which refuse any other noise object.

A mechanism reaches these samplers only through an explicit :class:`FloatNoise` handed in as
``noise=``; every release path draws from the exact samplers.

Privacy
-------
Floating-point Laplace noise leaks through its low-order bits (Mironov, CCS 2012): a release
made with these samplers does not keep its stated guarantee.  Nothing here is for publication.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpstream.noise.discrete_laplace_law import check_rational_scale, double_geometric_ratio
from dpstream.rng import Seed, make_rng

__all__ = ["MAX_SCALE", "FloatNoise", "double_geometric_noise", "float_gaussian", "float_laplace", "laplace_noise"]

Size = int | tuple[int, ...]


def laplace_noise(rng: np.random.Generator, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Independent ``Lap(scale)`` samples, as float64 (numpy's ``Generator.laplace``).

    >>> noise = laplace_noise(np.random.default_rng(0), 2.0, 100_000)
    >>> bool(abs(noise.var() - 8.0) < 0.2)
    True
    """
    if not scale > 0:
        raise ValueError(f"Laplace scale must be > 0, got {scale!r}.")
    return rng.laplace(0.0, scale, size)


#: Largest scale :func:`double_geometric_noise` accepts (``epsilon / Delta >= 1e-15``).  numpy's
#: geometric sampler saturates at the int64 maximum ``2^63 - 1`` (a draw exceeds ``t`` with
#: probability about ``exp(-t / scale)``): at scale ``1e18`` one draw in ten thousand would
#: saturate and silently distort the noise, at ``1e15`` a draw exceeds ``2^62`` with
#: probability ``exp(-4600)``.
MAX_SCALE = 1e15


def double_geometric_noise(rng: np.random.Generator, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Independent draws of (about) ``DGeom(scale)`` as int64, from numpy's float geometric sampler.

    The difference of two geometric variables with success probability ``1 - exp(-1/scale)``
    has the double-geometric law; numpy samples each by inverting a float uniform, so the draws
    only approximate it (see the module docstring).  Not for publication.  Scales above
    :data:`MAX_SCALE` (an absurdly small ``epsilon``) raise ValueError.

    >>> from dpstream.noise.discrete_laplace_law import double_geometric_variance
    >>> noise = double_geometric_noise(np.random.default_rng(0), 2.0, 100_000)
    >>> noise.dtype == np.int64, bool(abs(noise.var() - double_geometric_variance(2.0)) < 0.2)
    (True, True)
    """
    double_geometric_ratio(scale)  # validates the scale
    if scale > MAX_SCALE:
        raise ValueError(
            f"double-geometric scale must be at most {MAX_SCALE:g} (epsilon / sensitivity >= {1 / MAX_SCALE:g}), "
            f"got {scale!r} (epsilon / sensitivity = {1 / scale:.3g}); numpy's int64 geometric sampler would overflow."
        )
    success = -math.expm1(-1.0 / scale)  # 1 - exp(-1/scale), accurate for large scales
    if success >= 1.0:  # scale so small that the noise is 0 with probability 1 in float64
        return np.zeros(size, dtype=np.int64)
    first = rng.geometric(success, size)
    second = rng.geometric(success, size)
    return (first - second).astype(np.int64, copy=False)


class FloatNoise:
    """Today's floating-point noise from a ``numpy.random.Generator`` (studies and replays).

    ``laplace`` is ``laplace_noise(rng, scale, size)``; ``laplace_units`` is the double-geometric
    law of the same scale as :class:`~dpstream.noise.sampler.ExactNoise`, drawn by numpy's float geometric sampler (a
    float scale above 1e15 is refused).  Neither is exact.

    Parameters
    ----------
    rng : int, Generator or None
        Passed to :func:`~dpstream.rng.make_rng`; a Generator is shared, not copied.

    >>> a = FloatNoise(rng=np.random.default_rng(1)).laplace(2.0, 3)
    >>> bool((a == np.random.default_rng(1).laplace(0.0, 2.0, 3)).all())
    True
    """

    def __init__(self, *, rng: Seed = None) -> None:
        self.rng = make_rng(rng)

    def laplace_units(self, scale: Fraction, size: Size) -> np.ndarray:
        """Double-geometric draws of ``scale`` (numpy's float geometric sampler), int64."""
        return double_geometric_noise(self.rng, float(check_rational_scale(scale)), size)

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        """``Lap(scale)`` draws, float64."""
        return laplace_noise(self.rng, scale, size)

    def __repr__(self) -> str:
        return f"FloatNoise(rng={self.rng!r})"


def _generator(noise: object) -> np.random.Generator:
    if not isinstance(noise, FloatNoise):
        raise TypeError(f"float noise needs an explicit FloatNoise (studies only), got {noise!r}.")
    return noise.rng


def float_laplace(noise: object, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """``Lap(scale)`` draws from the generator of a :class:`FloatNoise`.

    >>> a = float_laplace(FloatNoise(rng=np.random.default_rng(1)), 2.0, 3)
    >>> bool((a == np.random.default_rng(1).laplace(0.0, 2.0, 3)).all())
    True
    """
    return laplace_noise(_generator(noise), scale, size)


def float_gaussian(noise: object) -> float:
    """One standard normal draw from the generator of a :class:`FloatNoise`.

    >>> float_gaussian(FloatNoise(rng=np.random.default_rng(2))) == np.random.default_rng(2).standard_normal()
    True
    """
    return float(_generator(noise).standard_normal())
