"""Local randomizers on a finite public grid, with exact dyadic probabilities: the core of SR, PM and SW.

The continuous Piecewise and Square Wave mechanisms report a real number with density ``p`` near
the input and ``q`` elsewhere.  Sampled in floating point they leak: a float report is often
impossible under another input (issue 11).  Here every report is an integer index on a finite
grid, every probability is an integer multiple of ``2^-62``, and every draw is exact.

The randomizer (:class:`WindowRandomizer`)
-----------------------------------------
* **Inputs.**  A value ``v`` in ``[low, high]`` is first rounded at random to the grid
  ``x_i = low + h i`` (``h = (high - low) / n``, ``i = 0..n``): with ``u = (v - low) / h`` and
  ``i = floor(u)``, it goes to ``x_{i+1}`` with probability ``frac = u - i`` and to ``x_i``
  otherwise, so ``E[x] = v``.  ``u`` is computed in float64 (one rounding, at the value's own
  resolution) and ``frac`` taken as ``floor(frac 2^62) / 2^62`` (an error below ``2^-62 h``).
* **Outputs.**  Grid input ``i`` is reported as an index ``j`` in ``[0, N)``, ``N = n + w``, with

      Pr[j | i] = m_{j - i} / D   if 0 <= j - i < w   (the window of w outputs starting at i)
                = Q / D           otherwise,          D = 2^62,

  where the window masses are ``m_k = P + 1`` for ``k < r`` and ``P`` for ``k >= r``, and
  ``M = w P + r = D - n Q`` makes each row sum to exactly 1.  The window slides one output per
  input step, as the continuous window slides with ``v``.
* **Privacy.**  For every output ``j`` and grid inputs ``i, i'``,
  ``Pr[j | i] / Pr[j | i'] <= (P + [r > 0]) / Q``; randomized rounding mixes two rows, which keeps
  the bound for every real input.  ``Q`` is the smallest integer with
  ``P + [r > 0] <= L Q``, where ``L <= e^eps`` is the rational lower bound of
  :func:`exp_lower_bound`: the ratio is at most ``e^eps``, checked in exact integer arithmetic,
  and within about ``1 / Q`` of it.
* **Sampling.**  Two uniform integers below ``2^62`` per value (:func:`~dpstream.noise.exact_primitives.uniform_below`,
  one 64-bit word each and never rejected): ``U_1 < frac 2^62`` rounds up; ``U_2 < M`` puts the
  report in the window at the offset where ``U_2`` falls among the masses ``m_k``, else
  ``o = (U_2 - M) // Q`` is uniform over the ``n`` outputs outside it.  A batch therefore reads
  the bit source exactly as a loop of single values does.
* **Estimator.**  With ``j_c = j - (N - 1) / 2``, ``t = i - n / 2``, ``G = M - w Q`` and
  ``beta = sum_k (m_k - Q)(k - (w - 1) / 2) = r (r - w) / 2``:

      D E[j_c | i] = sum_k (m_k - Q) (t + k - (w - 1) / 2) = G t + beta,

  so ``est(j) = mid + h (D j_c - beta) / G`` (``mid = (low + high) / 2``) has
  ``E[est | i] = x_i`` and, with the rounding, ``E[est | v] = v``: unbiased for every input.
* **Variance.**  ``D E[j_c^2 | i] = Q N (N^2 - 1) / 12 + G t^2 + 2 beta t + S2`` with
  ``S2 = sum_k (m_k - Q)(k - (w - 1) / 2)^2``, from which ``E[est^2 | x_i]`` is a quadratic in
  ``t`` (:meth:`WindowRandomizer.second_moment`).  For a real ``v`` the rounding interpolates it
  linearly between the two grid points, so ``Var[est | v] = interp(E[est^2 | x])(v) - v^2``: the
  grid's variance plus ``(D / G) (v - x_i)(x_{i+1} - v)`` for rounding, at most ``(D / G) h^2 / 4``.

Privacy
-------
A report is epsilon-LDP (Definition 2.2) exactly: the probability of every report under any two
inputs differs by a factor of at most ``(P + [r > 0]) / Q <= e^eps`` in exact arithmetic, and the
sampler realizes these probabilities exactly from the bits it is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from dpstream._checks import plain_number as plain
from dpstream.noise.bits import BitSource, BitsSeed, make_bits
from dpstream.noise.exact_primitives import uniform_below

__all__ = [
    "DENOMINATOR",
    "DENOMINATOR_BITS",
    "WindowRandomizer",
    "as_bits",
    "check_indices",
    "draw_words",
    "exp_lower_bound",
    "sup_variance",
]

#: Every probability of a local report is a multiple of 2^-DENOMINATOR_BITS.
DENOMINATOR_BITS = 62
DENOMINATOR = 1 << DENOMINATOR_BITS
_EXP_BITS = 256  # fixed-point precision of exp_lower_bound


def exp_lower_bound(x: float) -> Fraction:
    """A rational ``L <= e^x`` for a real ``0 <= x <= 700``, within a relative ``2^-240`` of it.

    The Taylor series in fixed point: ``t_0 = 2^256``, ``t_k = floor(t_{k-1} x / k)`` (exactly,
    in integers, ``x`` being the binary fraction a float is).  By induction ``t_k <= 2^256 x^k / k!``,
    and all the terms of the series are positive, so ``sum_k t_k / 2^256 <= e^x``: a certified lower
    bound, with no floating-point ``exp`` involved.

    >>> bound = exp_lower_bound(1.0)
    >>> bound <= Fraction(27182818284590453, 10**16), float(bound) == math.e
    (True, True)
    """
    value = Fraction(float(x))
    if not (0 <= value <= 700):
        raise ValueError(f"exp_lower_bound needs 0 <= x <= 700, got {plain(x)}.")
    num, den = value.numerator, value.denominator
    term = total = 1 << _EXP_BITS
    k = 1
    while term:
        term = term * num // (den * k)
        total += term
        k += 1
    return Fraction(total, 1 << _EXP_BITS)


def as_bits(bits: BitsSeed) -> BitSource:
    """``bits`` itself when it is already a bit source (the quick test of a hot path), else
    :func:`~dpstream.noise.bits.make_bits` of it (None: the OS CSPRNG; an int: a seeded PCG64)."""
    if callable(getattr(bits, "words", None)):
        return bits  # type: ignore[return-value]
    return make_bits(bits)


def draw_words(bits: BitSource, size: int, columns: int) -> np.ndarray:
    """``size x columns`` uniform integers in ``[0, 2^62)`` as int64, row by row.

    Each is one 64-bit word of ``bits`` (a power-of-two bound is never rejected by
    :func:`~dpstream.noise.exact_primitives.uniform_below`), so row ``k`` of a batch holds the same numbers as
    the ``k``-th of single-row calls on the same source.
    """
    return uniform_below(bits, DENOMINATOR, (size, columns))


def check_indices(reports: object, size: int, name: str = "reports") -> np.ndarray:
    """Reports as int64 indices in ``[0, size)``: integers, or floats with integer values.

    >>> check_indices([0, 3.0, 2], 4).tolist()
    [0, 3, 2]
    >>> check_indices([0, 1.5], 4)
    Traceback (most recent call last):
    ValueError: reports: the report at position 1 (0-based) is 1.5, not a point of the grid (an integer in [0, 3]).
    """
    try:
        array = np.asarray(reports)
        if array.dtype.kind not in "iuf":
            raise TypeError
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be integer grid indices, got {reports!r:.80}.") from error
    array = np.atleast_1d(array)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got an array of shape {array.shape}.")
    if array.dtype.kind == "f":
        bad = ~(np.isfinite(array) & (array == np.floor(array)) & (array >= 0) & (array < size))
    else:
        bad = (array < 0) | (array >= size)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(f"{name}: the report at position {index} (0-based) is {plain(array[index])}, not a point of "
                         f"the grid (an integer in [0, {size - 1}]).")
    return array.astype(np.int64)


def _choose_q(epsilon: float, grid: int, window: int) -> tuple[int, int, int]:
    """The smallest ``Q`` with ``ceil((D - n Q) / w) <= L Q``; returns ``(Q, P, r)``."""
    bound = exp_lower_bound(epsilon)
    lower, upper = bound.numerator, bound.denominator  # L = lower / upper
    # ceil((D - nQ) / w) <= L Q  <=  (D - nQ) / w <= L Q - 1 + 1/w ... start from the real solution.
    q = max(1, -(-DENOMINATOR * upper // (grid * upper + window * lower)))
    while True:
        mass = DENOMINATOR - grid * q
        top = -(-mass // window)  # P + [r > 0]
        if top <= q:  # the window would be no likelier than the rest: no information
            raise ValueError(f"epsilon {plain(epsilon)} is too small for a grid of {grid} points: the window would "
                             f"carry no more probability than the rest (use a coarser grid).")
        if top * upper <= lower * q:
            p, r = divmod(mass, window)
            return q, p, r
        q += 1


@dataclass(frozen=True, kw_only=True)
class WindowRandomizer:
    """The finite randomizer of the module docstring: inputs on ``n + 1`` grid points of
    ``[low, high]``, reports in ``[0, n + w)``, window of ``w`` outputs, masses ``P``, ``Q`` and ``r``.

    Build it with :meth:`for_epsilon`.

    >>> sr = WindowRandomizer.for_epsilon(1.0, low=-1.0, high=1.0, grid=1, window=1)
    >>> (sr.outputs, sr.p + sr.q == DENOMINATOR, sr.ratio <= exp_lower_bound(1.0))
    (2, True, True)
    >>> reports = sr.sample(np.zeros(4), draw_words(make_bits(0), 4, 2))
    >>> sorted(set(reports.tolist())) <= [0, 1], float(sr.estimate(np.array([1]))[0]) > 2.16
    (True, True)
    """

    epsilon: float
    low: float
    high: float
    grid: int
    window: int
    p: int
    q: int
    extra: int

    #: Uniform draws per value (rounding, then the report).
    draws = 2

    @classmethod
    def for_epsilon(cls, epsilon: float, *, low: float, high: float, grid: int, window: int) -> WindowRandomizer:
        """The randomizer with the largest exact ratio ``<= e^eps`` for this grid and window."""
        if not (isinstance(grid, int) and 1 <= grid <= 1 << 24 and isinstance(window, int) and 1 <= window <= grid):
            raise ValueError(f"a local grid needs 1 <= window <= grid <= 2^24, got grid {grid} and window {window}.")
        q, p, r = _choose_q(epsilon, grid, window)
        return cls(epsilon=epsilon, low=low, high=high, grid=grid, window=window, p=p, q=q, extra=r)

    # -- the pmf ---------------------------------------------------------------------------

    @property
    def outputs(self) -> int:
        """N = n + w: reports are the integers 0..N-1."""
        return self.grid + self.window

    @property
    def window_mass(self) -> int:
        """M = w P + r (in units of 2^-62): the probability of landing in the window."""
        return self.window * self.p + self.extra

    @property
    def ratio(self) -> Fraction:
        """The exact largest probability ratio of a report between two inputs: ``(P + [r > 0]) / Q``."""
        return Fraction(self.p + (self.extra > 0), self.q)

    @property
    def ratio_epsilon(self) -> float:
        """``log`` of :attr:`ratio` (float, for display): at most epsilon, a hair below it."""
        return math.log1p(float(Fraction(self.p + (self.extra > 0) - self.q, self.q)))

    @property
    def ratio_gap(self) -> float:
        """``epsilon - log(ratio)`` (> 0), from the certified bound: ``log(L / ratio)``, L within 2^-240 of e^eps."""
        return math.log1p(float(exp_lower_bound(self.epsilon) / self.ratio - 1))

    def describe_ratio(self) -> str:
        """The exact ratio for a privacy statement: ``"P/Q = e^(eps - gap) <= e^eps"``."""
        top = self.p + (self.extra > 0)
        return f"exact probability ratio {top}/{self.q} = e^({plain(self.epsilon)} - {self.ratio_gap:.2g}) <= e^eps"

    @property
    def step(self) -> float:
        """h, the spacing of the input grid."""
        return (self.high - self.low) / self.grid

    def points(self) -> np.ndarray:
        """The input grid ``x_0..x_n``."""
        return self.low + self.step * np.arange(self.grid + 1, dtype=np.float64)

    def mass(self, reports: np.ndarray, inputs: np.ndarray) -> np.ndarray:
        """Exact ``D Pr[j | i]`` as int64 for reports ``j`` and grid inputs ``i`` (broadcasting)."""
        offset = np.asarray(reports, dtype=np.int64) - np.asarray(inputs, dtype=np.int64)
        inside = (offset >= 0) & (offset < self.window)
        return np.where(inside, self.p + (offset < self.extra), self.q).astype(np.int64)

    def _position(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(i, frac)`` with ``v = x_i + frac h``, ``0 <= i < n``, ``0 <= frac <= 1`` (float64)."""
        u = np.clip((np.asarray(values, dtype=np.float64) - self.low) * (self.grid / (self.high - self.low)),
                    0.0, float(self.grid))
        i = np.minimum(np.floor(u), self.grid - 1)
        return i.astype(np.int64), u - i

    def probability(self, reports: object, values: object) -> np.ndarray:
        """``Pr[j | v]`` for reports ``j`` and real inputs ``v`` (broadcasting; float64, for tests)."""
        i, frac = self._position(values)
        j = np.asarray(reports, dtype=np.int64)
        inside = (j >= 0) & (j < self.outputs)
        mass = (1.0 - frac) * self.mass(j, i) + frac * self.mass(j, i + 1)
        return np.where(inside, mass / DENOMINATOR, 0.0)

    # -- sampling --------------------------------------------------------------------------

    def round_inputs(self, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Randomized rounding of ``values`` to grid indices, from one draw below 2^62 per value."""
        i, frac = self._position(values)
        threshold = np.floor(frac * float(DENOMINATOR)).astype(np.int64)  # exact: a power-of-two scaling
        return i + (draws < threshold)

    def sample_grid(self, inputs: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Reports of grid inputs ``i`` from one draw ``U`` below 2^62 each (see the module docstring)."""
        p, q, r = self.p, self.q, self.extra
        heavy = r * (p + 1)  # the first r window offsets carry P + 1
        offset = np.where(draws < heavy, draws // (p + 1), r + (draws - heavy) // p)
        outside = (draws - self.window_mass) // q
        outside = np.where(outside < inputs, outside, outside + self.window)
        return np.where(draws < self.window_mass, inputs + offset, outside)

    def sample(self, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Reports of real ``values`` in ``[low, high]`` from ``draws[:, 0]`` (rounding) and ``draws[:, 1]``."""
        return self.sample_grid(self.round_inputs(values, draws[:, 0]), draws[:, 1])

    def perturb(self, values: np.ndarray, bits: BitsSeed = None) -> np.ndarray:
        """Reports of ``values`` (already checked to lie in ``[low, high]``), drawing from ``bits``."""
        return self.sample(values, draw_words(as_bits(bits), values.size, self.draws))

    # -- estimation ------------------------------------------------------------------------

    @cached_property
    def _coefficients(self) -> tuple[float, float, float, float, float]:
        """``(a, b, s2, s1, s0)``: ``est(j) = mid + a (j - b)`` and ``E[(est - mid)^2 | i] = s2 t^2 + s1 t + s0``."""
        n, w, q, r, big = self.grid, self.window, self.q, self.extra, DENOMINATOR
        gain = self.window_mass - w * q
        beta = Fraction(r * (r - w), 2)
        centre = Fraction(w - 1, 2)
        # S2 = (P - Q) sum_k (k - c)^2 + sum_{k < r} (k - c)^2, c = (w - 1) / 2, in closed form
        s2_window = Fraction((self.p - q) * w * (w * w - 1), 12) + (
            Fraction((r - 1) * r * (2 * r - 1), 6) - centre * r * (r - 1) + r * centre**2)
        outputs = self.outputs
        d_second = Fraction(q * outputs * (outputs * outputs - 1), 12) + s2_window  # D E[j_c^2] at t = 0
        scale = Fraction(self.high - self.low) / (n * gain)  # est - mid = scale (D j_c - beta)
        # E[(D j_c - beta)^2] = D (D E[j_c^2]) - 2 beta (D E[j_c]) + beta^2, with D E[j_c] = G t + beta
        s2 = scale**2 * big * gain
        s1 = scale**2 * 2 * beta * (big - gain)
        s0 = scale**2 * (big * d_second - beta**2)
        a = scale * big
        b = Fraction(outputs - 1, 2) + beta / big
        return float(a), float(b), float(s2), float(s1), float(s0)

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2.0

    def estimate(self, reports: object) -> np.ndarray:
        """The unbiased estimate ``mid + h (D j_c - beta) / G`` of each report's input."""
        a, b = self._coefficients[:2]
        return self.mid + a * (np.asarray(reports, dtype=np.float64) - b)

    def grid_second_moment(self, inputs: np.ndarray) -> np.ndarray:
        """``E[est^2 | x_i]`` at grid inputs ``i`` (exact formula, float64)."""
        _, _, s2, s1, s0 = self._coefficients
        t = np.asarray(inputs, dtype=np.float64) - self.grid / 2.0
        x = self.low + self.step * np.asarray(inputs, dtype=np.float64)
        return self.mid**2 + 2.0 * self.mid * (x - self.mid) + s2 * t * t + s1 * t + s0

    def second_moment(self, values: object) -> np.ndarray:
        """``E[est^2 | v]`` for real inputs: the grid's, interpolated by the rounding."""
        i, frac = self._position(values)
        return (1.0 - frac) * self.grid_second_moment(i) + frac * self.grid_second_moment(i + 1)

    def variance(self, values: object) -> np.ndarray:
        """Exact ``Var[est | v] = E[est^2 | v] - v^2``."""
        values = np.asarray(values, dtype=np.float64)
        return self.second_moment(values) - values**2


def sup_variance(points: np.ndarray, second_moments: np.ndarray) -> float:
    """``sup_v (L(v) - v^2)`` over ``[points[0], points[-1]]``, ``L`` the linear interpolation of
    ``second_moments`` at ``points``: on each interval a concave parabola, maximal at its vertex
    (clipped to the interval).

    >>> sup_variance(np.array([-1.0, 1.0]), np.array([4.0, 4.0]))  # SR-like: c^2 - v^2, largest at 0
    4.0
    """
    left, right = points[:-1], points[1:]
    slope = np.diff(second_moments) / (right - left)
    vertex = np.clip(slope / 2.0, left, right)
    return float(np.max(second_moments[:-1] + slope * (vertex - left) - vertex**2))
