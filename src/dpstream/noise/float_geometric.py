"""numpy's float geometric sampler of the double-geometric law: for studies, never for a release.

:func:`double_geometric_noise` draws ``DGeom(scale)`` (the law of
:mod:`dpstream.noise.geometric`) as the difference of two of numpy's geometric variables.  It is
fast, but it is **not exact**: numpy inverts a floating-point uniform, so its support is
bounded (at ``epsilon / Delta = 1`` no draw exceeds 36 in absolute value, which breaks pure DP:
an output 37 away from one input and 36 from its neighbour is impossible under the first), its
probabilities are float approximations, and for some scales (``epsilon / Delta = 0.5`` among
them) its loop never ends when the uniform is ``1 - 2^-53``.  It is kept for the studies under
:mod:`dpstream.evaluation` that trade exactness for speed (through
:class:`~dpstream.noise.sampler.FloatNoise`); every release path draws from
:func:`~dpstream.noise.exact.discrete_laplace`.
"""

from __future__ import annotations

import math

import numpy as np

from dpstream.noise.geometric import _ratio

__all__ = ["MAX_SCALE", "double_geometric_noise"]

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

    >>> from dpstream.noise.geometric import double_geometric_variance
    >>> noise = double_geometric_noise(np.random.default_rng(0), 2.0, 100_000)
    >>> noise.dtype == np.int64, bool(abs(noise.var() - double_geometric_variance(2.0)) < 0.2)
    (True, True)
    """
    _ratio(scale)  # validates the scale
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
