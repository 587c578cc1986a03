"""The geometric mechanism's noise: the double-geometric distribution (Kuo et al., Definition 3).

``DGeom(scale)`` puts mass ``(1 - a) / (1 + a) * a^|k|`` on every integer ``k``, where
``a = exp(-1 / scale)``.  Adding ``DGeom(Delta / epsilon)`` to an integer-valued query of global L1
sensitivity ``Delta`` is epsilon-DP (Ghosh, Roughgarden and Sundararajan 2009).  Definition 3
of the count-of-counts paper writes the normalising constant with ``epsilon`` in place of
``epsilon / Delta``; that is a typo for ``Delta != 1`` (the mass would not sum to one), so the
constant here uses ``a``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_SCALE", "double_geometric_noise", "double_geometric_pmf", "double_geometric_variance"]

#: Largest scale :func:`double_geometric_noise` accepts (``epsilon / Delta >= 1e-15``).  numpy's
#: geometric sampler saturates at the int64 maximum ``2^63 - 1`` (a draw exceeds ``t`` with
#: probability about ``exp(-t / scale)``): at scale ``1e18`` one draw in ten thousand would
#: saturate and silently distort the noise, at ``1e15`` a draw exceeds ``2^62`` with
#: probability ``exp(-4600)``.
MAX_SCALE = 1e15


def _ratio(scale: float) -> float:
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"double-geometric scale must be a finite number > 0, got {scale!r}.")
    return math.exp(-1.0 / scale)


def double_geometric_noise(rng: np.random.Generator, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Independent ``DGeom(scale)`` samples as int64.

    Sampled exactly as the difference of two independent geometric variables with success
    probability ``1 - exp(-1/scale)`` (their difference has the double-geometric law).  Scales
    above :data:`MAX_SCALE` (an absurdly small ``epsilon``) raise ValueError.

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


def double_geometric_pmf(k: np.ndarray | int, scale: float) -> np.ndarray:
    """``Pr[X = k]`` for ``X ~ DGeom(scale)``.

    >>> float(double_geometric_pmf(np.arange(-200, 201), 3.0).sum())  # doctest: +ELLIPSIS
    1.0...
    """
    ratio = _ratio(scale)
    k = np.abs(np.asarray(k, dtype=np.float64))
    return (1.0 - ratio) / (1.0 + ratio) * np.power(ratio, k)


def double_geometric_variance(scale: float) -> float:
    """Variance ``2 a / (1 - a)^2`` of ``DGeom(scale)``, ``a = exp(-1/scale)`` (below ``2 scale^2``)."""
    ratio = _ratio(scale)
    return 2.0 * ratio / (1.0 - ratio) ** 2
