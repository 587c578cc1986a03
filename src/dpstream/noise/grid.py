"""The public grid of a stream mechanism: its step, rounding to it, and rational noise scales.

A stream mechanism on the exact path measures integers.  Values are clipped or truncated first,
then rounded to the nearest multiple of a public *granularity* ``g`` (ties to even, numpy's
``rint``) and held as ``int64`` *grid units*; a threshold theta is rounded **up** to the grid,
``theta_units = ceil(theta / g)``, so truncating at ``theta_units g`` keeps every value that
was below theta and the sensitivity in units is the integer ``theta_units``.  The noise is
discrete Laplace in grid units with a rational scale ``t / 2^k`` rounded **up**
(:func:`round_up_scale`), and the budget a mechanism states is recomputed from that scale
(:func:`epsilon_of_scale`), so it is never above the budget asked for.

The default granularity (:func:`default_granularity`) is the largest power of two at most
``B / 2^20`` for a public bound ``B``.  A power of two keeps every multiple ``k g`` with
``|k| < 2^53`` exactly representable in float64, and ``v / g`` exact.  Any other finite
``g > 0`` is accepted: rounding is then a deterministic function of the value, which is all
privacy needs, but released multiples of ``g`` are the floats nearest to them.

Rounding a value moves it by at most ``g / 2``; modelled as uniform, it adds ``g^2 / 12`` of
variance per value (:func:`rounding_variance`), which at the default grid is ``~1e-13 B^2``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpstream._checks import check_bound
from dpstream.noise.discrete_laplace_law import MAX_LAPLACE_NUMERATOR

__all__ = [
    "DEFAULT_STEPS",
    "GridLaplace",
    "MAX_SCALE_BITS",
    "ceil_units",
    "check_granularity",
    "choose_granularity",
    "default_granularity",
    "epsilon_of_scale",
    "exact_ratio",
    "float_down",
    "float_up",
    "is_power_of_two",
    "round_up_scale",
    "rounding_variance",
    "to_units",
]

#: The default grid has at least this many steps below the public bound B (2^20).
DEFAULT_STEPS = 1 << 20

#: Scales are rounded up to a multiple of ``2^-k`` with ``k`` at most this (finer adds nothing:
#: the relative change is already below ``2^-30`` for any scale of at least one unit).
MAX_SCALE_BITS = 30


# -- floats and rationals ------------------------------------------------------------------------


def float_up(x: Fraction) -> float:
    """The smallest float64 ``>= x`` (for bounds that must not be understated).

    >>> float_up(Fraction(1, 3)) > 1 / 3, float_up(Fraction(1, 2))
    (True, 0.5)
    """
    value = float(x)
    if Fraction(value) < x:
        value = math.nextafter(value, math.inf)
    return value


def float_down(x: Fraction) -> float:
    """The largest float64 ``<= x``.

    >>> float_down(Fraction(1, 3)) < 1 / 3 or float_down(Fraction(1, 3)) == 1 / 3
    True
    """
    value = float(x)
    if Fraction(value) > x:
        value = math.nextafter(value, -math.inf)
    return value


def exact_ratio(numerator: float | int | Fraction, denominator: float | int | Fraction) -> Fraction:
    """``numerator / denominator`` as an exact rational (floats are dyadic rationals).

    >>> exact_ratio(3, 0.5)
    Fraction(6, 1)
    """
    return Fraction(numerator) / Fraction(denominator)


def is_power_of_two(value: float) -> bool:
    """True when ``value`` is ``2^k`` for an integer ``k`` (e.g. 0.25, 1, 1024).

    >>> is_power_of_two(2.0**-10), is_power_of_two(0.1), is_power_of_two(3.0)
    (True, False, False)
    """
    mantissa, _ = math.frexp(value)
    return value > 0 and mantissa == 0.5


# -- the grid ------------------------------------------------------------------------------------


def default_granularity(bound: float, *, steps: int = DEFAULT_STEPS) -> float:
    """The largest power of two at most ``bound / steps`` (default 2^20 steps below the bound).

    >>> default_granularity(1657.0) == 2.0**-10, default_granularity(1.0) == 2.0**-20
    (True, True)
    >>> default_granularity(2.0**20)
    1.0
    """
    bound = check_bound(bound, "upper_bound")
    _, exponent = math.frexp(bound / steps)  # bound / steps = m 2^e with m in [0.5, 1)
    step = math.ldexp(1.0, exponent - 1)
    if step == 0.0:  # pragma: no cover - bounds below 2^-1054
        raise ValueError(f"upper_bound is too small for a grid of {steps} steps, got {bound!r}.")
    return step


def check_granularity(value: object, bound: float, name: str = "granularity") -> float:
    """A grid step: a finite real number > 0 and at most ``bound`` (so that ``[0, B]`` has a step).

    >>> check_granularity(0.5, 10.0)
    0.5
    >>> check_granularity(20.0, 10.0)
    Traceback (most recent call last):
    ValueError: granularity must be at most the bound 10 (one grid step at least), got 20.0.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    if value > bound:
        raise ValueError(f"{name} must be at most the bound {bound:g} (one grid step at least), got {value!r}.")
    return value


def ceil_units(x: float, granularity: float) -> int:
    """``ceil(x / g)`` computed exactly (a threshold rounded **up** to the grid), as a Python int.

    >>> ceil_units(10.0, 0.25), ceil_units(10.1, 0.25), ceil_units(0.3, 0.1)
    (40, 41, 3)
    """
    return math.ceil(exact_ratio(x, granularity))


def to_units(values: np.ndarray, granularity: float, cap: int | None = None) -> np.ndarray:
    """Values ``>= 0`` rounded to the nearest multiple of ``g`` (ties to even), as int64 grid units.

    ``cap`` (in units) bounds the result from above: with a power-of-two ``g`` and values at
    most ``cap g`` it never binds; for other steps it guards the sensitivity against the
    rounding of ``v / g``.

    >>> to_units(np.array([0.0, 0.3, 0.375, 1.0]), 0.25).tolist()
    [0, 1, 2, 4]
    """
    if is_power_of_two(granularity):
        scaled = values * (1.0 / granularity)  # exact: a power of two
    else:
        scaled = values / granularity
    units = np.rint(scaled, out=scaled)
    if cap is not None and not is_power_of_two(granularity):
        np.minimum(units, float(cap), out=units)
    return units.astype(np.int64)


def rounding_variance(granularity: float) -> float:
    """``g^2 / 12``: the variance rounding to the grid adds to a value, modelled as uniform.

    >>> rounding_variance(0.5) == 0.25 / 12
    True
    """
    return granularity * granularity / 12.0


# -- scales --------------------------------------------------------------------------------------


def round_up_scale(exact: Fraction, *, bits: int = MAX_SCALE_BITS, what: str = "noise scale") -> Fraction:
    """``ceil(exact 2^k) / 2^k`` with the largest ``k <= bits`` whose numerator fits the sampler.

    The exact samplers take a scale ``t / s`` with ``t <= 2^40``
    (:data:`~dpstream.noise.discrete_laplace_law.MAX_LAPLACE_NUMERATOR`); rounding up keeps the privacy
    guarantee (a larger scale is more private).  A scale above ``2^40`` units is refused: the
    grid is then too fine for the budget.

    >>> round_up_scale(Fraction(1, 3))
    Fraction(178956971, 536870912)
    >>> round_up_scale(Fraction(3, 1))
    Fraction(3, 1)
    """
    exact = Fraction(exact)
    if exact <= 0:
        raise ValueError(f"{what} must be > 0, got {exact}.")
    # ceil(exact 2^k) <= 2^40 exactly when 2^k <= floor(2^40 / exact), an integer
    room = (MAX_LAPLACE_NUMERATOR * exact.denominator) // exact.numerator
    if room >= 1:
        k = min(bits, room.bit_length() - 1)
        return Fraction(math.ceil(exact * (1 << k)), 1 << k)
    raise ValueError(
        f"{what} is {float(exact):.4g} grid units, above the 2^40 the exact sampler allows; "
        "use a coarser granularity or a larger epsilon."
    )


def epsilon_of_scale(sensitivity: int | Fraction, scale: Fraction) -> float:
    """The budget ``sensitivity / scale`` of discrete Laplace noise, rounded **up** to a float.

    The pmf ratio of two outputs ``d`` grid units apart is ``exp(d / scale)``, so noise of
    ``scale`` on a query of integer sensitivity ``d`` is exactly ``(d / scale)``-DP; the float
    returned is never below it.

    >>> epsilon_of_scale(1, Fraction(2))
    0.5
    """
    return float_up(Fraction(sensitivity) / Fraction(scale))


def choose_granularity(granularity: object, bound: float, *, units_factor: Fraction | float) -> float:
    """A mechanism's grid step: ``granularity`` checked, or the default for the public ``bound``.

    The default is :func:`default_granularity` (the largest power of two at most
    ``bound / 2^20``), doubled while the noise scale ``ceil(bound / g) units_factor`` would
    exceed ``2^39`` grid units (only for tiny budgets: ``units_factor`` is the scale per unit
    of sensitivity, e.g. ``(h - s) / epsilon``).  A ``granularity`` given explicitly is only
    checked (:func:`check_granularity`); the mechanism refuses its scale later if too fine.

    >>> choose_granularity(None, 1657.0, units_factor=Fraction(3)) == 2.0**-10
    True
    >>> choose_granularity(None, 1.0, units_factor=Fraction(10**9)) == 2.0**-9
    True
    """
    bound = check_bound(bound, "upper_bound")
    if granularity is not None:
        return check_granularity(granularity, bound)
    step = default_granularity(bound)
    factor = Fraction(units_factor)
    while step * 2.0 <= bound and ceil_units(bound, step) * factor > MAX_LAPLACE_NUMERATOR // 2:
        step *= 2.0
    return step


# -- the grid-Laplace recipe of a central mechanism -----------------------------------------------


@dataclass(frozen=True)
class GridLaplace:
    """Discrete Laplace noise on a public grid for a query of bounded sensitivity, in one place.

    Every central mechanism measures integer sums of grid units and adds discrete Laplace noise
    to them; this is the recipe they share.  ``bound`` (a value's largest contribution, e.g. the
    threshold theta) is rounded **up** to ``units = ceil(bound / g)`` grid units; ``levels``
    measurements each of sensitivity ``units`` compose sequentially (the levels of a hierarchy;
    1 for a single query), so the noise scale is ``units levels / epsilon`` grid units, rounded
    up (:func:`round_up_scale`), and the budget actually spent, recomputed from that scale
    (:func:`epsilon_of_scale`), is at most ``epsilon``.

    Build it with :meth:`choose` (granularity None: the default grid for the bound and the
    budget, :func:`choose_granularity`) or :meth:`on_grid` (a grid already chosen).

    Attributes
    ----------
    granularity : float
        g, the grid step.
    units : int
        The bound in grid units, ``ceil(bound / g)``: one measurement's sensitivity.
    levels : int
        Measurements composed sequentially.
    epsilon : float
        The budget asked for.
    scale : Fraction
        The noise scale in grid units, ``units levels / epsilon`` rounded up.
    spent_epsilon : float
        ``units levels / scale`` rounded up to a float: at most the ``epsilon`` asked.

    >>> noise = GridLaplace.choose(10.0, 1.0, levels=3)
    >>> noise.granularity == 2.0**-17, noise.units == 10 * 2**17, noise.scale == 30 * 2**17
    (True, True, True)
    >>> noise.spent_epsilon, noise.bound, noise.scale_value
    (1.0, 10.0, 30.0)
    >>> odd = GridLaplace.on_grid(1.0, 0.3, 0.25)
    >>> odd.units, odd.scale > 4 / Fraction(0.3), odd.spent_epsilon <= 0.3, odd.scale_per_unit == 1 / Fraction(0.3)
    (4, True, True, True)
    """

    granularity: float
    units: int
    levels: int
    epsilon: float
    scale: Fraction
    spent_epsilon: float

    @classmethod
    def on_grid(cls, bound: float, epsilon: float, granularity: float, *, levels: int = 1,
                what: str = "noise scale") -> GridLaplace:
        """The noise for ``bound`` and ``epsilon`` on the grid of step ``granularity`` (already checked)."""
        units = ceil_units(bound, granularity)
        sensitivity = units * levels
        scale = round_up_scale(Fraction(sensitivity) / Fraction(epsilon), what=what)
        return cls(granularity=granularity, units=units, levels=levels, epsilon=epsilon, scale=scale,
                   spent_epsilon=epsilon_of_scale(sensitivity, scale))

    @classmethod
    def choose(cls, bound: float, epsilon: float, granularity: float | None = None, *, levels: int = 1) -> GridLaplace:
        """The noise on ``granularity`` checked, or on the default grid for ``bound`` and this noise's
        scale per unit of sensitivity ``levels / epsilon`` (:func:`choose_granularity`).  A grid too
        fine for the budget is refused here."""
        factor = Fraction(levels) / Fraction(epsilon)
        return cls.on_grid(bound, epsilon, choose_granularity(granularity, bound, units_factor=factor), levels=levels)

    @property
    def scale_per_unit(self) -> Fraction:
        """``levels / epsilon``: the exact noise scale per grid unit of sensitivity (before rounding)."""
        return Fraction(self.levels) / Fraction(self.epsilon)

    @property
    def bound(self) -> float:
        """The bound rounded up to the grid, ``units g`` (the smallest float not below it)."""
        return float_up(Fraction(self.units) * Fraction(self.granularity))

    @property
    def scale_value(self) -> float:
        """The noise scale in the values' units, ``scale g`` (a float)."""
        return float(self.scale) * self.granularity
