"""Discrete Gaussian noise on the public grid for a query of bounded L2 sensitivity: :class:`GridGaussian`.

The zCDP counterpart of :class:`~dpstream.noise.grid.GridLaplace`.  Values are rounded to the
grid exactly as for Laplace noise (:mod:`dpstream.noise.grid`), and a bound (a value's largest
contribution to one node) rounded **up** to ``units = ceil(bound / g)`` grid units.  A value that
touches one node on each of ``levels`` measured levels moves the vector of measurements by at most
``units`` on each of ``levels`` coordinates: L2 sensitivity ``units sqrt(levels)``, where pure DP
needs the L1 sensitivity ``units levels``.  Discrete Gaussian noise of variance parameter
``sigma^2`` on every node is then ``units^2 levels / (2 sigma^2)``-zCDP (Canonne, Kamath and
Steinke 2020, Theorem 14: the multivariate discrete Gaussian on integer queries), so
``sigma^2 = units^2 levels / (2 rho)``, rounded **up** to a dyadic rational (at most 2^30 in the
denominator; an integer once it exceeds 2^30 units^2), and the rho actually spent, recomputed
from that sigma^2, is at most the rho asked for.  Draws are exact (CKS Algorithm 3,
:func:`~dpstream.noise.discrete_gaussian_law.discrete_gaussian`), in integer arithmetic, so the
guarantee holds for the numbers the computer produces.

The default grid is :func:`~dpstream.noise.grid.default_granularity` of the bound, doubled while
sigma would reach 2^39 grid units (the sampler takes ``floor(sigma) < 2^40``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpstream.noise.discrete_gaussian_law import discrete_gaussian_pmf
from dpstream.noise.grid import ceil_units, check_granularity, default_granularity, float_up

__all__ = ["MAX_SIGMA_UNITS", "GridGaussian", "discrete_gaussian_variance", "round_up_variance"]

#: sigma must stay below this many grid units (the exact sampler's limit is 2^40).
MAX_SIGMA_UNITS = 1 << 39

_BITS = 30


def round_up_variance(exact: Fraction, *, bits: int = _BITS) -> Fraction:
    """``exact`` rounded up to a multiple of ``2^-k``, ``k <= bits`` the largest keeping the numerator
    below ``2^(bits + 1)`` (an integer for ``exact >= 2^bits``), so the sampler's arithmetic stays small.

    >>> round_up_variance(Fraction(1, 3)), round_up_variance(Fraction(10**12, 7))
    (Fraction(178956971, 536870912), Fraction(142857142858, 1))
    """
    exact = Fraction(exact)
    if exact <= 0:
        raise ValueError(f"the variance must be > 0, got {exact}.")
    k = max(0, min(bits, bits - math.floor(math.log2(exact))))
    return Fraction(math.ceil(exact * (1 << k)), 1 << k)


def discrete_gaussian_variance(sigma2: Fraction) -> float:
    """The exact variance of the discrete Gaussian of parameter ``sigma^2`` (in units^2): summed from its
    pmf for ``sigma <= 100``; above, ``sigma^2`` itself (the difference is below ``1e-4000`` relative).

    It is below ``sigma^2``, by a relative ``~4 pi^2 sigma^2 exp(-2 pi^2 sigma^2)``.

    >>> discrete_gaussian_variance(Fraction(1, 4)) < 0.25, discrete_gaussian_variance(Fraction(4))
    (True, 4.0)
    """
    sigma2 = Fraction(sigma2)
    if sigma2 > 100**2:
        return float(sigma2)
    reach = math.ceil(40.0 * math.sqrt(float(sigma2))) + 1
    x = np.arange(-reach, reach + 1)
    return float(np.sum(x.astype(np.float64) ** 2 * discrete_gaussian_pmf(x, sigma2.numerator, sigma2.denominator)))


@dataclass(frozen=True)
class GridGaussian:
    """Discrete Gaussian noise on a public grid for ``levels`` measurements of a value's ``bound``, at ``rho``.

    ``granularity`` (g) and ``units`` (the bound rounded up to the grid) are as in
    :class:`~dpstream.noise.grid.GridLaplace`.

    Attributes
    ----------
    levels : int
        Measurements one value touches (one node per level): L2 sensitivity ``units sqrt(levels)``.
    rho : float
        The zCDP budget asked for.
    sigma2 : Fraction
        The variance parameter in grid units^2, ``units^2 levels / (2 rho)`` rounded up.
    spent_rho : float
        ``units^2 levels / (2 sigma2)`` rounded up to a float: at most the ``rho`` asked.

    >>> noise = GridGaussian.on_grid(1.0, 0.5, 0.25, levels=4)
    >>> noise.units, noise.sigma2, noise.spent_rho, noise.scale_value
    (4, Fraction(64, 1), 0.5, 2.0)
    """

    granularity: float
    units: int
    levels: int
    rho: float
    sigma2: Fraction
    spent_rho: float

    @classmethod
    def on_grid(cls, bound: float, rho: float, granularity: float, *, levels: int = 1) -> GridGaussian:
        """The noise for ``bound`` and ``rho`` on the grid of step ``granularity`` (already checked)."""
        units = ceil_units(bound, granularity)
        square = units * units * levels
        sigma2 = round_up_variance(Fraction(square) / (2 * Fraction(rho)))
        if math.isqrt(math.floor(sigma2)) >= MAX_SIGMA_UNITS:
            raise ValueError(f"the Gaussian noise is {math.sqrt(float(sigma2)):.4g} grid units, above the 2^39 the "
                             "exact sampler allows; use a coarser granularity or a larger rho.")
        return cls(granularity=granularity, units=units, levels=levels, rho=rho, sigma2=sigma2,
                   spent_rho=float_up(Fraction(square) / (2 * sigma2)))

    @classmethod
    def choose(cls, bound: float, rho: float, granularity: float | None = None, *, levels: int = 1) -> GridGaussian:
        """The noise on ``granularity`` checked, or on the default grid for ``bound``, doubled while sigma
        would reach 2^39 grid units (tiny budgets only)."""
        if granularity is not None:
            return cls.on_grid(bound, rho, check_granularity(granularity, bound), levels=levels)
        step = default_granularity(bound)
        while step * 2.0 <= bound and ceil_units(bound, step) ** 2 * levels > 2 * rho * (MAX_SIGMA_UNITS // 2) ** 2:
            step *= 2.0
        return cls.on_grid(bound, rho, step, levels=levels)

    @property
    def bound(self) -> float:
        """The bound rounded up to the grid, ``units g``."""
        return float_up(Fraction(self.units) * Fraction(self.granularity))

    @property
    def scale(self) -> Fraction:
        """sigma in grid units, rounded up to an integer (for bounds on the noise's reach)."""
        return Fraction(math.isqrt(math.ceil(self.sigma2)) + 1)

    @property
    def scale_value(self) -> float:
        """sigma in the values' units, ``sqrt(sigma2) g``."""
        return math.sqrt(float(self.sigma2)) * self.granularity

    @property
    def variance_units(self) -> float:
        """The exact variance of one node's noise, in grid units^2 (:func:`discrete_gaussian_variance`)."""
        return discrete_gaussian_variance(self.sigma2)

    def sample(self, sampler, size) -> np.ndarray:
        """``size`` draws in grid units (int64) from ``sampler.gaussian_units``."""
        return sampler.gaussian_units(self.sigma2, size)
