"""How a central stream mechanism measures: on the public grid (exact) or in float (the studies).

Each hierarchy mechanism (:class:`~dpstream.release.perturber.HierarchicalPerturber`, its
periodic variant, :class:`~dpstream.release.binary_tree.BinaryTreeCounter` and
:class:`~dpstream.hierarchy.plain.PlainHierarchy`) is written once, against an *arithmetic*: the
object that turns values into what is summed, draws the nodes' noise, makes it consistent, and
turns noisy sums back into released values.

* :class:`GridArithmetic` (the default, for publication): values rounded to multiples of a
  public granularity ``g`` and summed as integer grid units (int64); discrete Laplace noise
  of a rational scale from exact samplers (:class:`~dpstream.noise.grid.GridLaplace`);
  consistency in exact rationals; a released value is a deterministic function of the integer
  measurements, times ``g``.
* :class:`GaussianArithmetic` (``rho=``, zCDP): the grid path with discrete Gaussian noise
  (:class:`~dpstream.noise.grid_gaussian.GridGaussian`): the same sums, consistency and releases.
* :class:`FloatArithmetic` (``noise=FloatNoise(rng)``, the studies; NOT for publication): the
  values as they are, numpy's float Laplace, float least squares.  Fast, and the same law up to
  the grid's rounding.

Why one implementation with two arithmetics rather than float replicas in
:mod:`dpstream.evaluation`: in these mechanisms the two paths differ *only* in their number
arithmetic -- the chunking, the blocks, the prefix tiling of the tree, the smoother, the
streaming state and its snapshots are one algorithm.  A replica would be a second copy of all of
that, kept in step by hand, and the tests that compare the float and exact laws would compare two
programs instead of two arithmetics.  (The local mechanisms are the other case: their float
versions sample differently, so :mod:`dpstream.evaluation.float_ldp` holds them apart.)  Where
the float path has no exact counterpart at all (S-PAK's Gaussian threshold) the library refuses it
on the exact path and only a study's ``FloatNoise`` reaches it.

All offer the same attributes (``exact``, ``zero``, ``granularity``, ``bound``, ``scale_value``,
``spent_epsilon``; ``budget``, ``law`` and ``node_variance`` for the statements and the error
bars) and methods, so a mechanism never branches on the path.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpstream.accounting import Zcdp
from dpstream.hierarchy.tree import (
    consistent_leaf_variance,
    consistent_leaves,
    draw_noise_levels,
    draw_noise_units,
    make_consistent,
)
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.noise.grid import GridLaplace, is_power_of_two, to_units
from dpstream.noise.grid_gaussian import GridGaussian
from dpstream.noise.sampler import NoiseSampler
from dpstream.privacy import Budget, EpsilonDelta

__all__ = ["MAX_EXACT_UNITS", "Arithmetic", "FloatArithmetic", "GaussianArithmetic", "GridArithmetic", "arithmetic"]

#: Integer grid units stay exact in float64 (and their multiples of a power-of-two ``g``) below this.
MAX_EXACT_UNITS = 1 << 53


class GridArithmetic:
    """The exact path: integer grid units, discrete Laplace noise of ``noise.scale`` grid units.

    >>> a = GridArithmetic(GridLaplace.on_grid(1.0, 1.0, 0.25, levels=2))
    >>> a.units(np.array([0.3, 0.375, 1.0])).tolist(), a.unit(0.3), a.bound, a.scale_value
    ([1, 2, 4], 1, 1.0, 2.0)
    >>> a.released(np.array([3.0, -1.0])).tolist(), a.released_one(-3)
    ([0.75, -0.25], -0.75)
    """

    exact = True
    zero = 0

    def __init__(self, noise: GridLaplace | GridGaussian) -> None:
        self.noise = noise
        self.granularity = noise.granularity
        self.bound = noise.bound
        self.scale_value = noise.scale_value
        self.spent_epsilon = getattr(noise, "spent_epsilon", None)  # None under zCDP (GaussianArithmetic)
        self._inverse = 1.0 / self.granularity if is_power_of_two(self.granularity) else None

    @property
    def budget(self) -> Budget:
        """What every measured level together spends: ``spent_epsilon``-DP."""
        return EpsilonDelta(self.spent_epsilon)

    @property
    def law(self) -> str:
        """The nodes' noise in words, in the values' units."""
        return f"discrete Laplace of scale {self.scale_value:g}"

    @property
    def node_variance(self) -> float:
        """The exact variance of one node's noise, in the values' units squared (inf beyond a float's range)."""
        return laplace_units_variance(self.noise.scale) * self.granularity * self.granularity

    #: The noise's law by name (the sampler's description).
    law_name = "discrete Laplace"

    def leaf_standard_error(self, fanout: int, n_levels: int) -> float:
        """The exact standard error of a consistent leaf's noise in a full hierarchy of ``n_levels`` levels of
        fan-out ``fanout``: ``sqrt(node variance x consistent_leaf_variance)`` (the noise is linear, its law known)."""
        return math.sqrt(self.node_variance * consistent_leaf_variance(fanout, n_levels))

    def per_level(self, replace: bool) -> str:
        """The sensitivity per measured level of a bound ``C`` (``bound``) added or removed, or ``replace``d."""
        return f"L1 sensitivity per level {f'2C = {2 * self.bound:g}' if replace else f'C = {self.bound:g}'}"

    def check_enforced(self, bound: float, what: str) -> None:
        """Refuse a bound the exact grid would enforce as another (a tiny one raised to a grid step), or whose
        released values would overflow float64 (int64 grid units times the grid step)."""
        if self.bound > bound * (1 + 2.0**-19):
            raise ValueError(f"{what} {bound:g} is below what the exact noise's grid can enforce: it would be "
                             f"{self.bound:g}; scale the values up.")
        if not math.isfinite(2.0**63 * self.granularity):
            raise ValueError(f"{what} {bound:g} is too large: the released values would overflow float64; scale the "
                             "values down.")

    def units(self, values: np.ndarray) -> np.ndarray:
        """Values in ``[0, bound]`` rounded to the grid, in int64 grid units (:func:`~dpstream.noise.grid.to_units`)."""
        return to_units(values, self.granularity, self.noise.units)

    def unit(self, value: float) -> int:
        """One value in grid units, exactly as :meth:`units` rounds a batch."""
        if self._inverse is not None:
            return round(value * self._inverse)  # round half to even, as numpy's rint
        return min(round(value / self.granularity), self.noise.units)

    def total(self, value: object) -> int:
        """A sum of grid units as the exact integer it is (what a state stores)."""
        return int(value)

    def sum(self, units: np.ndarray) -> int:
        """The exact integer sum of grid units."""
        return int(np.sum(units))

    def draw(self, sampler: NoiseSampler, n_leaves: int, fanout: int, n_levels: int) -> list[np.ndarray]:
        """Every node's noise in grid units (int64), bottom level first, in one draw."""
        return draw_noise_units(sampler, n_leaves, fanout, n_levels, self.noise.scale)

    def draw_one(self, sampler: NoiseSampler) -> int:
        """One draw in grid units (the noise of a single query)."""
        return int(sampler.laplace_units(self.noise.scale, 1)[0])

    def consistent(self, levels: list[np.ndarray], fanout: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The consistent noise of the first ``count`` leaves: its integer part and ``remainder / q``."""
        leaves = consistent_leaves(levels, fanout)
        return leaves.integer[:count].copy(), leaves.fraction()[:count].copy()

    def estimates(self, totals: np.ndarray, noise: np.ndarray, fraction: np.ndarray, leaves: np.ndarray) -> np.ndarray:
        """Estimates of ``leaves`` in real units from their true totals (grid units) and the consistent noise."""
        return ((totals + noise[leaves]) + fraction[leaves]) * self.granularity  # the first sum is an exact integer

    def estimate(self, total: int, noise: np.ndarray, fraction: np.ndarray, leaf: int) -> float:
        """:meth:`estimates` of one leaf, bit for bit."""
        return (float(total + int(noise[leaf])) + float(fraction[leaf])) * self.granularity

    def scaled(self, units: np.ndarray) -> np.ndarray:
        """Grid units as values, ``units g``."""
        return units * self.granularity

    def released(self, units: np.ndarray) -> np.ndarray:
        """Noisy grid units as values, ``units g``, refused from 2^53 units (exact below, for a power-of-two g)."""
        if np.any(np.abs(units) >= MAX_EXACT_UNITS):
            raise OverflowError("a noisy increment reached 2^53 grid units and cannot be released exactly.")
        return self.scaled(units)

    def released_one(self, units: int) -> float:
        """One integer of grid units as a value, correctly rounded."""
        return float(units * Fraction(self.granularity))


class GaussianArithmetic(GridArithmetic):
    """The exact path under zCDP: integer grid units, discrete Gaussian noise of ``noise.sigma2`` grid units^2.

    >>> a = GaussianArithmetic(GridGaussian.on_grid(1.0, 0.5, 0.25, levels=4))
    >>> a.budget, a.law, a.spent_epsilon, round(a.node_variance, 12)
    (Zcdp(rho=0.5), 'discrete Gaussian of sigma 2', None, 4.0)
    """

    noise: GridGaussian

    @property
    def budget(self) -> Budget:
        """What every measured level together spends: ``spent_rho``-zCDP."""
        return Zcdp(self.noise.spent_rho)

    @property
    def law(self) -> str:
        return f"discrete Gaussian of sigma {self.scale_value:g}"

    law_name = "discrete Gaussian"

    def per_level(self, replace: bool) -> str:
        """L2: ``C`` added or removed, ``sqrt(2) C`` replaced (two non-negative vectors of L1 norm C)."""
        moved = f"sqrt(2) C = {math.sqrt(2) * self.bound:g}" if replace else f"C = {self.bound:g}"
        return f"L2 sensitivity per level {moved}"

    @property
    def node_variance(self) -> float:
        return self.noise.variance_units * self.granularity * self.granularity

    def draw(self, sampler: NoiseSampler, n_leaves: int, fanout: int, n_levels: int) -> list[np.ndarray]:
        """Every node's noise in grid units (int64), bottom level first, in one draw."""
        return draw_noise_units(sampler, n_leaves, fanout, n_levels, self.noise.sigma2, gaussian=True)

    def draw_one(self, sampler: NoiseSampler) -> int:
        return int(self.noise.sample(sampler, 1)[0])


class FloatArithmetic:
    """The studies' float path: the values themselves, numpy's float Laplace of ``scale``.

    >>> a = FloatArithmetic(bound=2.0, scale=4.0, epsilon=0.5)
    >>> a.units(np.array([0.3])).tolist(), a.unit(0.3), a.granularity, a.spent_epsilon
    ([0.3], 0.3, None, 0.5)
    """

    exact = False
    zero = 0.0
    granularity = None

    def __init__(self, *, bound: float, scale: float, epsilon: float) -> None:
        self.bound = bound
        self.scale_value = scale
        self.spent_epsilon = epsilon

    budget = GridArithmetic.budget
    law = property(lambda self: f"Lap({self.scale_value:g})")
    node_variance = property(lambda self: 2.0 * self.scale_value**2)

    def units(self, values: np.ndarray) -> np.ndarray:
        return values

    def unit(self, value: float) -> float:
        return value

    def total(self, value: object) -> float:
        return float(value)

    def sum(self, values: np.ndarray) -> float:
        return float(np.sum(values))

    def draw(self, sampler: NoiseSampler, n_leaves: int, fanout: int, n_levels: int) -> list[np.ndarray]:
        return draw_noise_levels(None, n_leaves, fanout, n_levels, self.scale_value, noise=sampler)

    def draw_one(self, sampler: NoiseSampler) -> float:
        return float(sampler.laplace(self.scale_value, 1)[0])

    def consistent(self, levels: list[np.ndarray], fanout: int, count: int) -> tuple[np.ndarray, None]:
        return make_consistent(levels, fanout)[0][:count].copy(), None

    def estimates(self, totals: np.ndarray, noise: np.ndarray, fraction: None, leaves: np.ndarray) -> np.ndarray:
        return totals + noise[leaves]

    def estimate(self, total: float, noise: np.ndarray, fraction: None, leaf: int) -> float:
        return total + float(noise[leaf])

    def scaled(self, units: np.ndarray) -> np.ndarray:
        return units

    def released(self, units: np.ndarray) -> np.ndarray:
        return units

    def released_one(self, units: float) -> float:
        return units


Arithmetic = GridArithmetic | FloatArithmetic


def arithmetic(exact: bool, *, bound: float, epsilon: float | None, levels: int, granularity: float | None,
               rho: float | None = None) -> Arithmetic:
    """The arithmetic of a hierarchy of ``levels`` measured levels for values in ``[0, bound]``.

    Exact: :class:`GridArithmetic` on ``granularity`` or the default grid for the bound and the
    budget (:meth:`~dpstream.noise.grid.GridLaplace.choose`); with ``rho`` (zCDP, ``epsilon`` then
    unused), :class:`GaussianArithmetic` (:meth:`~dpstream.noise.grid_gaussian.GridGaussian.choose`,
    L2 sensitivity ``bound sqrt(levels)``).  Float: scale ``bound levels / epsilon``, no grid (a
    ``granularity`` is refused).
    """
    if rho is not None:
        if not exact:
            raise ValueError("zCDP (rho) runs on exact discrete Gaussian noise only, not FloatNoise.")
        return GaussianArithmetic(GridGaussian.choose(bound, rho, granularity, levels=levels))
    assert epsilon is not None
    if exact:
        return GridArithmetic(GridLaplace.choose(bound, epsilon, granularity, levels=levels))
    if granularity is not None:
        raise ValueError("granularity applies to exact noise only; the float path (FloatNoise) has no grid.")
    return FloatArithmetic(bound=bound, scale=bound * levels / epsilon, epsilon=epsilon)
