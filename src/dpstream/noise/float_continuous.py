"""numpy's floating-point Laplace and Gaussian samplers: for studies only, never for publication.

These are the draws the paper-reproduction studies use (``dpstream evaluate``) so that their
numbers stay those of the float implementation.  A mechanism reaches them only through an
explicit :class:`~dpstream.noise.sampler.FloatNoise` handed in as ``noise=``: the helpers
taking a noise object refuse anything else.

Privacy
-------
Floating-point Laplace noise leaks through its low-order bits (Mironov, CCS 2012): a release
made with these samplers does not keep its stated guarantee.  Nothing here is for publication.
"""

from __future__ import annotations

import numpy as np

__all__ = ["float_gaussian", "float_laplace", "laplace_noise"]


def laplace_noise(rng: np.random.Generator, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Independent ``Lap(scale)`` samples, as float64 (numpy's ``Generator.laplace``).

    >>> noise = laplace_noise(np.random.default_rng(0), 2.0, 100_000)
    >>> bool(abs(noise.var() - 8.0) < 0.2)
    True
    """
    if not scale > 0:
        raise ValueError(f"Laplace scale must be > 0, got {scale!r}.")
    return rng.laplace(0.0, scale, size)


def _generator(noise: object) -> np.random.Generator:
    from dpstream.noise.sampler import FloatNoise

    if not isinstance(noise, FloatNoise):
        raise TypeError(f"float noise needs an explicit FloatNoise (studies only), got {noise!r}.")
    return noise.rng


def float_laplace(noise: object, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """``Lap(scale)`` draws from the generator of a :class:`~dpstream.noise.sampler.FloatNoise`.

    >>> from dpstream.noise.sampler import FloatNoise
    >>> a = float_laplace(FloatNoise(rng=np.random.default_rng(1)), 2.0, 3)
    >>> bool((a == np.random.default_rng(1).laplace(0.0, 2.0, 3)).all())
    True
    """
    return laplace_noise(_generator(noise), scale, size)


def float_gaussian(noise: object) -> float:
    """One standard normal draw from the generator of a :class:`~dpstream.noise.sampler.FloatNoise`.

    >>> from dpstream.noise.sampler import FloatNoise
    >>> float_gaussian(FloatNoise(rng=np.random.default_rng(2))) == np.random.default_rng(2).standard_normal()
    True
    """
    return float(_generator(noise).standard_normal())
