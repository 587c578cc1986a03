"""The square-root (Toeplitz) factorization for continual sums under zCDP, with exact lattice noise.

Continual counting at event level: values in ``[0, tau]``, value ``t`` released at ``t``, its prefix
sums the queries.  The prefix-sum matrix ``A`` (lower-triangular ones) is ``L L`` with ``L`` the
lower-triangular Toeplitz matrix of ``c_k = binom(2k, k) / 4^k`` (Fichtenberger, Henzinger and
Upadhyay 2023; Henzinger, Upadhyay and Upadhyay 2023): a mechanism measuring ``L x + z`` and
releasing ``L^{-1} (L x + z) = x + L^{-1} z`` value by value has prefix sums ``A x + L z``: every
prefix with noise ``L z``, about 5x less variance than the binary tree at the same rho
(``benchmarks/factorization_variance.py``).  Like the tree it runs on chunks of ``n = max_range``
values, a fresh factorization per chunk (parallel composition).

Exact noise.  The entries ``c_k`` are not on any grid, so ``L x + z`` with discrete Gaussian ``z``
has different supports on neighbours.  The construction here measures an *integer* query and decodes
it with integer post-processing, so the guarantee holds for the numbers the computer produces:

1. Values are rounded to the public grid ``g`` (int64 grid units ``x``, bound ``tau_units``), as
   for the tree.  The encoder is the integer Toeplitz matrix ``C`` of ``C_k = round(s c_k)``,
   ``s = 2^b + 1`` (``C_0 = s``; ``b`` coefficient bits, at most 20, fewer when the noise would pass
   the exact sampler's limit).  ``s`` is odd so that decoding never meets a tie (below).
2. Measurement: ``y = C x + z``, ``z`` i.i.d. discrete Gaussian of variance parameter
   ``sigma^2 = tau_units^2 sum_{k<n} C_k^2 / (2 rho)`` (rounded up).  ``C x`` is an integer vector;
   one value moves it by ``(x_p - x'_p)`` times column ``p`` of ``C``, whose entries are
   ``C_0 .. C_{n-1-p}`` >= 0, so its L2 change is at most ``tau_units sqrt(sum_{k<n} C_k^2)`` (the first
   column, computed exactly in integers).  By Canonne, Kamath and Steinke (2020, Theorem 14) ``y`` is
   ``tau_units^2 sum C_k^2 / (2 sigma^2) <= rho``-zCDP; chunks read disjoint positions.
3. Decoding, a deterministic function of ``y`` alone (post-processing): ``w_t = round((y_t -
   sum_{k<t} C_{t-k} w_k) / s)`` in integers, and ``w_t`` (times ``g``) is the value released at
   ``t``.  An integer over the odd ``s`` is never a half-integer, so the rounding has no ties: it
   commutes with adding integers and with negation.  By induction ``w_t = x_t + e_t`` with
   ``e_t = round((z_t - sum_{k<t} C_{t-k} e_k) / s)``, a function of ``z`` alone: so the mechanism
   draws ``z`` and computes ``e`` when a chunk starts (as the tree draws its nodes), releases
   ``x_t + e_t``, and what it releases is, integer for integer, the decoding of ``y``.  ``e`` is an
   odd function of the symmetric ``z``: the released values are unbiased.

What it costs against the ideal (continuous noise, exact ``L``): ``C e = z + s r`` with every
``|r_t| < 1/2``, so the prefix noise is ``A C^{-1} z + s A C^{-1} r`` (``s A C^{-1} ~ L``): a linear
part (its variance below, exact) and a rounding part bounded by half the row's L1 norm of ``s A
C^{-1}``, about ``sqrt(t / pi)`` grid units after ``t`` values
(:meth:`SqrtFactorization.rounding_bounds`).  The integer coefficients make ``s A C^{-1}`` differ
from ``L`` by ``2^-b`` relative; the variance is computed from the integer ones (computed by
correctly rounded float operations in a fixed order; ``tests/test_factorization.py`` checks in integers
that they are the exact roundings ``round(s binom(2k, k) / 4^k)`` for every ``k < 2^16`` and every width of
8 to 30 bits, so every machine and every resumed run has the same ``C``).  Measured
(``benchmarks/factorization_variance.py``): the linear variance 7.5e-8
relative above the ideal at n = 4,096.

Streaming, memory and durability.  It reuses the binary tree's streaming (a chunk's noise
precomputed and added to the values as they come; the increments are the released values): memory
O(n) per chunk, and with ``key=`` chunk ``i`` draws from ``KeyedBits(key, ("sqrt-factorization",
i))``, so a snapshot leaves the noise out and a resumed ``--state`` run recomputes it (never twice).
Computing ``e`` is O(n^2) integer operations per chunk (``n`` dot products), so ``n`` is at most
2^16 (4,096: 15 to 25 ms).  Its streaming form for unbounded streams, O(b) memory and no chunks, is
the banded factorization of :mod:`dpstream.release.banded` (``banded-zcdp``).

Error bars.  The prefix after ``t`` values of a chunk has linear noise of variance ``v sum_{k<t}
beta_k^2`` (``v`` the discrete Gaussian's exact variance, ``beta`` the prefix sums of the
coefficients of ``C^{-1}``); a range's is the squared norm of the difference of two such rows;
chunks add.  Exact for the linear noise; the decoder's rounding adds at most
:meth:`~SqrtFactorization.rounding_bounds` (deterministic, tens of grid units), and values clipped
or rounded to the grid are not in it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpstream._checks import check_bool, check_bound, check_epsilon, check_grid, check_positive_int
from dpstream.accounting import DEFAULT_DELTA, Zcdp, ZcdpGuarantee, check_budget, rho_for
from dpstream.hierarchy.arithmetic import MAX_EXACT_UNITS, GaussianArithmetic
from dpstream.noise.bits import BitsSeed
from dpstream.noise.grid import ceil_units, check_granularity, default_granularity
from dpstream.noise.grid_gaussian import MAX_SIGMA_UNITS, GridGaussian
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import EVENT_LEVEL, Composition, Part, PrivacyGuarantee
from dpstream.release.binary_tree import BinaryTreeCounter, BinaryTreeState

__all__ = ["MAX_CHUNK", "SQRT_ZCDP", "IntegerFactorization", "SqrtFactorization", "integer_coefficients",
           "shaped_noise", "sqrt_coefficients", "zcdp_target"]

#: The ``mechanism`` field of its snapshots (its registered name).
SQRT_ZCDP = "sqrt-zcdp"
#: The largest chunk (``max_range``): computing a chunk's noise is quadratic in it.
MAX_CHUNK = 1 << 16
#: Coefficient bits ``b`` tried, most first; fewer only when the noise would pass the sampler's limit.
_MAX_BITS, _MIN_BITS = 20, 8
#: The noise sigma (in units of ``g / 2^b``) is kept below this (the exact sampler allows 2^39).
_SIGMA_LIMIT = MAX_SIGMA_UNITS // 2


def sqrt_coefficients(n: int) -> np.ndarray:
    """``c_k = binom(2k, k) / 4^k`` for ``k < n`` (by the ratio ``c_k = c_{k-1} (2k - 1) / (2k)``): the
    coefficients of ``(1 - z)^(-1/2)``, whose square is ``1 / (1 - z)`` (the prefix sums).

    >>> sqrt_coefficients(4).tolist()
    [1.0, 0.5, 0.375, 0.3125]
    """
    ratios = (2.0 * np.arange(1, n) - 1.0) / (2.0 * np.arange(1, n))
    return np.concatenate(([1.0], np.cumprod(ratios)))


def integer_coefficients(n: int, bits: int) -> np.ndarray:
    """The encoder's integer coefficients ``round(s c_k)`` for ``k < n``, ``s = 2^bits + 1`` (int64; the first is
    the odd ``s``).

    >>> integer_coefficients(4, 3).tolist()
    [9, 4, 3, 3]
    """
    return np.rint(sqrt_coefficients(n) * float((1 << bits) + 1)).astype(np.int64)


def shaped_noise(z: np.ndarray, coefficients: np.ndarray, history: np.ndarray | None = None) -> np.ndarray:
    """The decoded noise ``e_t = round((z_t - sum_{1<=k<m} C_k e_{t-k}) / C_0)`` (``C_0`` odd: no ties), int64,
    for ``m`` coefficients; ``history`` (at most ``m - 1`` values, oldest first) is the decoded noise of the
    positions just before ``z``'s first (none: ``z`` starts the stream).

    ``x + e`` is exactly the integer decoding of ``y = C x + z`` for every integer ``x`` (module
    docstring).  Every step is exact: a noise that would make a dot product leave int64 raises.

    >>> shaped_noise(np.array([9, 0, -4, 14]), np.array([9, 4, 3, 3])).tolist()
    [1, 0, -1, 2]
    >>> shaped_noise(np.array([-4, 14]), np.array([9, 4, 3, 3]), history=np.array([1, 0])).tolist()
    [-1, 2]
    """
    n, m, divisor = z.size, coefficients.size, int(coefficients[0])
    if divisor % 2 == 0:
        raise ValueError(f"the first coefficient must be odd (no ties when rounding), got {divisor}.")
    past = np.zeros(0, dtype=np.int64) if history is None else np.asarray(history, dtype=np.int64)[-(m - 1):]
    h = past.size if m > 1 else 0
    reversed_ = np.ascontiguousarray(coefficients[m - 1 : 0 : -1]) if m > 1 else coefficients[:0]  # C_{m-1} .. C_1
    limit = (1 << 62) // max(int(np.sum(coefficients)), 1)  # |e_k| below it: every dot stays in int64
    if np.any((past >= limit) | (past <= -limit)):  # a history from a damaged snapshot: never wrapped around
        raise OverflowError("the factorization's decoded noise left the exact integer range (a history beyond any "
                            "plausible tail: a damaged snapshot).")
    e = np.zeros(h + n, dtype=np.int64)
    e[:h] = past[past.size - h :]
    for i in range(h, h + n):
        low = max(0, i - m + 1)
        v = int(z[i - h]) - int(np.dot(reversed_[m - 1 - i + low :], e[low:i])) if i else int(z[0])
        q, rem = divmod(v, divisor)
        if 2 * rem > divisor:
            q += 1
        if abs(q) >= limit:
            raise OverflowError("the factorization's decoded noise left the exact integer range (a draw beyond "
                                "any plausible tail); use a coarser granularity.")
        e[i] = q
    return e[h:]


def _choose(bound: float, rho: float, granularity: float | None, n: int,
            bits: range = range(_MAX_BITS, _MIN_BITS - 1, -1)) -> tuple[float, int, np.ndarray]:
    """The grid, the coefficient bits and the integer coefficients: the first of ``bits`` (most first; by default
    at most 20, at least 8) that keeps sigma below 2^38 units; on the default grid, the grid is doubled while none
    does."""
    step = default_granularity(bound) if granularity is None else check_granularity(granularity, bound)
    while True:
        units = ceil_units(bound, step)
        for b in bits:
            coefficients = integer_coefficients(n, b)
            square = units * units * int(np.dot(coefficients, coefficients))
            if square <= 2 * rho * _SIGMA_LIMIT**2:
                return step, b, coefficients
        if granularity is not None or step * 2.0 > bound:
            raise ValueError(f"the factorization's noise would pass the exact sampler's limit at rho = {rho:g} and "
                             "this granularity; use a coarser granularity or a larger rho.")
        step *= 2.0


def zcdp_target(epsilon: float | None, delta: float | None, rho: float | None, what: str
                ) -> tuple[float, tuple[float, float] | None]:
    """The rho a factorization spends and its (epsilon, delta) target (None when ``rho`` is given): the largest rho
    whose (epsilon, delta) at ``delta`` is the target's (:func:`~dpstream.accounting.rho_for`)."""
    if rho is None and epsilon is not None:
        if delta is None:
            raise ValueError(f"the {what} under zCDP needs delta (--delta) with epsilon: the delta of its (epsilon, "
                             "delta) target, e.g. 1e-6.")
        return rho_for(check_epsilon(epsilon), delta), (float(epsilon), float(delta))
    check_budget(epsilon, rho)  # exactly one of them
    if delta is not None:
        raise ValueError("give delta with epsilon (an (epsilon, delta) target), not with rho.")
    return float(rho), None


class IntegerFactorization(BinaryTreeCounter):
    """What the integer factorizations share (:class:`SqrtFactorization`, and
    :class:`~dpstream.release.banded.BandedFactorization`): the (epsilon, delta) target or rho, the grid and the
    integer coefficients, the discrete Gaussian calibrated to ``tau ||C_(0:n)||`` (``n = max_range``: the first
    column of a chunk, or the band), the binary tree's streaming state, and the standard errors built on
    ``range_standard_errors``.  Subclasses set what they are called, their keyed identity, what ``max_range`` is
    for them and its largest value."""

    #: What the mechanism is called in its messages.
    _WHAT = "factorization"
    #: The identity of its keyed noise (a block or chunk index follows).
    _IDENTITY: tuple[str, ...] = ("factorization",)
    #: What ``max_range`` is (the chunk, the band), its largest value and why.
    _ROLE, _LARGEST, _COST = "chunk", MAX_CHUNK, "its noise costs n^2 operations per chunk"
    #: The name of its :meth:`error_model` (the service's answers rebuild the factorization by it).
    _MODEL = "factorization"

    def _bits(self) -> range:
        """The coefficient bits tried, most first."""
        return range(_MAX_BITS, _MIN_BITS - 1, -1)

    def _reach(self) -> int:
        """How many values one released number adds up in grid units (a chunk's prefix: ``max_range``)."""
        return self.max_range

    def __init__(self, *, epsilon: float | None = None, delta: float | None = None, rho: float | None = None,
                 upper_bound: float, max_range: int = 4096, clip: bool = False, granularity: float | None = None,
                 seed: BitsSeed = None, noise: NoiseSampler | NoiseSource | None = None,
                 key: bytes | None = None) -> None:
        self.rho, self.target = zcdp_target(epsilon, delta, rho, self._WHAT)
        self.epsilon = None
        bound = check_bound(upper_bound)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        if self.max_range > self._LARGEST:
            raise ValueError(f"max_range (the factorization's {self._ROLE}) must be at most {self._LARGEST}, got "
                             f"{max_range}: {self._COST}; give --max-range.")
        self.clip = check_bool(clip, "clip")
        self._source = make_source(seed=seed, noise=noise, key=key, identity=self._IDENTITY)
        self.exact = self._source.exact
        if not self.exact:
            raise ValueError("zCDP (rho) runs on exact discrete Gaussian noise only, not FloatNoise.")
        check_grid(bound, granularity)
        step, self.bits, self.coefficients = _choose(bound, self.rho, granularity, self.max_range, self._bits())
        # the squared norm of C's first column (the band) counts as that many unit measurements: L2 sensitivity
        # tau_units sqrt(it)
        column = int(np.dot(self.coefficients, self.coefficients))
        gaussian = GridGaussian.on_grid(bound, self.rho, step, levels=column)
        self._arithmetic = GaussianArithmetic(gaussian)
        self.granularity, self.upper_bound, self.spent_rho = step, gaussian.bound, gaussian.spent_rho
        #: sigma of z in the values' units (z is in units of g / s, s = 2^b + 1 the first coefficient)
        self.noise_scale = math.sqrt(float(gaussian.sigma2)) * step / int(self.coefficients[0])
        self.spent_epsilon = None
        if self._reach() * (gaussian.units + 64 * self.noise_scale / step) >= MAX_EXACT_UNITS:
            raise ValueError("max_range * upper_bound / granularity plus the noise must stay below 2^53 grid units; "
                             "use a coarser granularity or a smaller max_range.")
        self.noise = None
        self._state = BinaryTreeState(released=0, running=0, increments=None, count=0)
        self._params: dict[str, Any] = dict(upper_bound=upper_bound, max_range=max_range, clip=clip,
                                            granularity=granularity)
        if self.target is None:
            self._params["rho"] = rho
        else:
            self._params.update(epsilon=epsilon, delta=delta)

    def privacy(self, delta: float | None = None) -> PrivacyGuarantee:
        """``spent_rho``-zCDP at event level for values in ``[0, upper_bound]``, with the (epsilon, delta) it implies
        at ``delta`` (default: the target's delta, else 1e-6)."""
        if delta is None:
            delta = DEFAULT_DELTA if self.target is None else self.target[1]
        part = Part(what=self._WHAT, budget=Zcdp(self.spent_rho), noise=self._source.describe("discrete Gaussian"),
                    text=self._measurement(self._arithmetic.noise))
        return ZcdpGuarantee.of(self._layout(part), neighbours=EVENT_LEVEL, delta=delta)

    def _measurement(self, grid: GridGaussian) -> str:
        """What is measured and how the noise is calibrated, in words."""
        raise NotImplementedError

    def _layout(self, part: Part) -> Part | Composition:
        """How the measurements compose (one measurement: the part itself)."""
        return part

    def _unit_variance(self) -> float:
        """The variance of ``z_k`` grid units in the values' units squared (the discrete Gaussian's exact variance)."""
        return self._arithmetic.noise.variance_units * self.granularity**2

    def range_standard_error(self, start: int, stop: int) -> float:
        """The exact standard error of the released sum of positions ``[start, stop)`` (see
        :meth:`range_standard_errors`)."""
        return float(self.range_standard_errors([start], [stop])[0])

    def count_standard_errors(self, ends: object) -> np.ndarray:
        """The exact standard error of the noisy count (prefix sum) of the first ``e`` values, for each ``e``."""
        ends = np.asarray(ends, dtype=np.int64)
        return self.range_standard_errors(np.zeros_like(ends), ends).reshape(ends.shape)

    def standard_errors(self, positions: object) -> np.ndarray:
        """The exact standard error of the released value at each of ``positions``."""
        positions = np.asarray(positions, dtype=np.int64).ravel()
        return self.range_standard_errors(positions, positions + 1)

    def error_model(self) -> dict[str, Any]:
        """The public parameters its standard errors are computed from, under its name (``{"square_root": ...}``,
        ``{"banded": ...}``): the factorization rebuilt from them has the same standard errors (the service's answers
        rebuild it so), where the binary tree's model would describe no factor."""
        return {self._MODEL: {"rho": self.rho, "upper_bound": self.upper_bound, "max_range": self.max_range,
                              "granularity": self.granularity}}


class SqrtFactorization(IntegerFactorization):
    """Continual sums with the square-root factorization under zCDP (exact discrete Gaussian noise), for values in
    ``[0, upper_bound]``: ``release --method sqrt-zcdp --epsilon E --delta D``.

    Parameters
    ----------
    epsilon, delta : float, optional
        An (epsilon, delta) target: the mechanism spends the largest rho that implies it
        (:func:`~dpstream.accounting.rho_for`).
    rho : float, optional
        Instead: the zCDP budget itself.
    upper_bound : float
        tau: values must lie in ``[0, tau]`` (public).
    max_range : int
        n: the chunk, a fresh factorization every n values (at most 2^16; the horizon, when known).
    clip, granularity, seed, noise, key
        As for :class:`~dpstream.release.binary_tree.BinaryTreeCounter`.

    Privacy
    -------
    ``spent_rho``-zCDP (at most rho) at event level, stated with the (epsilon, delta) it implies;
    see the module docstring for the construction and its proof.

    Examples
    --------
    >>> m = SqrtFactorization(epsilon=1.0, delta=1e-6, upper_bound=1.0, max_range=64, seed=0)
    >>> out = m.release(np.ones(100))
    >>> bool(np.all(out / m.granularity == np.rint(out / m.granularity))), m.bits, m.privacy().epsilon <= 1.0
    (True, 15, True)
    """

    _KIND = SQRT_ZCDP
    _WHAT, _IDENTITY, _ROLE, _LARGEST = "square-root factorization", ("sqrt-factorization",), "chunk", MAX_CHUNK
    _COST, _MODEL = "its noise costs n^2 operations per chunk", "square_root"

    #: The prefix weights, computed once when first asked (:meth:`prefix_weights`).
    _rows: np.ndarray | None = None

    # -- the streaming contract (the tree's ``state``, ``from_state``, ``release``, ``release_one``) -------------

    def _start_tree(self) -> np.ndarray:
        """A chunk's noise: ``z`` drawn (keyed by the chunk's index) and decoded (:func:`shaped_noise`)."""
        sampler = self._source.sampler(self._state.released // self.max_range)
        z = self._arithmetic.noise.sample(sampler, self.max_range)
        increments = shaped_noise(np.asarray(z, dtype=np.int64), self.coefficients)
        self._state.increments = increments
        return increments

    def _measurement(self, grid: GridGaussian) -> str:
        """What is measured and how the noise is calibrated, in words."""
        return (f"y = C x + z on chunks of n = {self.max_range}: C the integer Toeplitz factor round(s "
                f"binom(2k, k) / 4^k), s = 2^{self.bits} + 1, z discrete Gaussian of sigma^2 = tau^2 ||C e_0||^2 / "
                f"(2 rho) = {float(grid.sigma2):.6g} (g = {self.granularity:g}, tau = {grid.units} "
                "units); L2 sensitivity tau ||C e_0|| (its first column, exact); released: the integer decoding of y")

    def _layout(self, part: Part) -> Part | Composition:
        """A fresh factorization per chunk: the chunks in parallel."""
        return Composition(kind="parallel", parts=(part,),
                           layout=f"{{}}; a fresh factorization per {self.max_range} values (parallel)")

    # -- error bars ----------------------------------------------------------------------------

    def prefix_weights(self) -> np.ndarray:
        """``beta_k`` for ``k < n``: the prefix noise of a chunk is ``sum_k beta_{t-1-k} z_k`` grid units (plus the
        rounding), ``beta`` the prefix sums of the series inverse of ``C`` (about ``c_k / s``)."""
        if self._rows is None:
            c = self.coefficients.astype(np.float64)
            d = np.zeros(self.max_range)
            d[0] = 1.0 / c[0]
            for t in range(1, self.max_range):
                d[t] = -np.dot(c[t:0:-1], d[:t]) / c[0]
            self._rows = np.cumsum(d)
        return self._rows

    def _within(self, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
        """Squared weights of ``[start, stop)`` inside one chunk (``0 <= start <= stop <= n``)."""
        beta, n = self.prefix_weights(), self.max_range
        padded = np.concatenate((np.zeros(n), beta))  # padded[n + j] = beta_j, 0 for j < 0 (positions after a row)
        k = np.arange(n)
        out = np.empty(start.size)
        block = max(1, (1 << 21) // n)  # rows of n weights, a few MiB at a time
        for first in range(0, start.size, block):
            rows = slice(first, first + block)
            difference = padded[n + stop[rows, None] - 1 - k] - padded[n + start[rows, None] - 1 - k]
            out[rows] = np.sum(difference**2, axis=1)
        return out

    def range_standard_errors(self, starts: object, stops: object) -> np.ndarray:
        """The exact standard error of the released sum of positions ``[start, stop)`` (its linear noise), for each
        pair; chunks are independent, so a range across chunks adds the pieces."""
        starts, stops = np.atleast_1d(np.asarray(starts, dtype=np.int64)), np.atleast_1d(np.asarray(stops,
                                                                                                     dtype=np.int64))
        if np.any(starts < 0) or np.any(stops < starts):
            raise ValueError("need 0 <= start <= stop for every range.")
        n = self.max_range
        first, last = starts // n, stops // n
        total = np.where(first == last, self._within(starts % n, np.where(first == last, stops % n, n)), 0.0)
        apart = first != last
        if np.any(apart):
            full = self._within(np.zeros(1, dtype=np.int64), np.full(1, n))[0]
            total[apart] = (self._within(starts[apart] % n, np.full(apart.sum(), n))
                            + (last[apart] - first[apart] - 1) * full
                            + self._within(np.zeros(apart.sum(), dtype=np.int64), stops[apart] % n))
        return np.sqrt(total * self._unit_variance())

    def rounding_bounds(self, ends: object) -> np.ndarray:
        """The most the decoder's rounding adds to the prefix sum of the first ``e`` values (values' units): half
        the L1 norm of the prefix's weights over the chunks it covers (deterministic, not in the standard error)."""
        ends = np.asarray(ends, dtype=np.int64)
        reach = np.concatenate(([0.0], np.cumsum(np.abs(self.prefix_weights()))))
        full, rest = np.divmod(ends, self.max_range)
        return (full * reach[-1] + reach[rest]) * float(self.coefficients[0]) * self.granularity / 2.0
