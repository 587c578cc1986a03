"""The banded square-root factorization: continual sums of an unbounded stream under zCDP, exact lattice noise.

The square-root factorization (:mod:`dpstream.release.factorization`) needs a horizon: chunks of at
most 2^16 values, O(n) memory and O(n^2) work per chunk.  Its streaming form here keeps the
square-root factor's first ``b`` coefficients and drops the rest (a banded Toeplitz encoder;
Kalinin and Lampert 2024, "banded square root"; McKenna 2024, banded matrix factorization): one
measurement of the whole stream, no chunks and no horizon, O(b) memory and O(b) work per value.

Why banded rather than a buffered linear Toeplitz (BLT) encoder.  Exact lattice noise needs an
*integer* encoder (below).  A BLT factor's coefficients are sums of geometric sequences; an integer
sequence that decays geometrically is eventually zero.  So the exact form of a streaming
factorization is a banded integer Toeplitz encoder, and the band is the parameter to choose.

Construction (the numbers the computer produces):

1. Values are rounded to the public grid ``g`` (int64 grid units ``x``, bound ``tau`` units), as for
   the binary tree.  The encoder is the integer Toeplitz matrix ``C`` of ``C_k = round(s c_k)`` for
   ``k < b``, 0 for ``k >= b``: ``c_k = binom(2k, k) / 4^k``, ``s = 2^bits + 1`` odd (``C_0 = s``).
2. Measurement: ``y = C x + z`` over the whole (unbounded) stream, ``z`` i.i.d. exact discrete
   Gaussian of variance parameter ``sigma^2 = tau^2 sum_{k<b} C_k^2 / (2 rho)`` (rounded up).  A value
   at any position ``p`` moves ``y_p .. y_{p+b-1}`` by ``(x_p - x'_p) C_0 .. C_{b-1}`` (fewer near the
   end of what is released so far), so every prefix of ``y`` has L2 sensitivity at most ``tau
   ||C_{0:b}||`` (computed exactly in integers): by Canonne, Kamath and Steinke (2020, Theorem 14) ``y``
   is ``tau^2 ||C_{0:b}||^2 / (2 sigma^2) <= rho``-zCDP at event level.  No parallel composition: one
   measurement, one rho, whatever the stream's length.  Values chosen adaptively (each after the
   releases before it) change nothing: for the same transcript, row ``t`` of neighbours differs by
   ``C_{t-p} (x_p - x'_p)`` whatever the later values, a fixed ``C_{t-p}^2 tau^2 / (2 sigma^2)``, and zCDP
   composes adaptively over the rows to the same sum.
3. Decoding, a function of ``y`` alone (post-processing): ``w_t = round((y_t - sum_{1<=k<b} C_k w_{t-k})
   / s)`` in integers (O(b) memory), and ``w_t`` (times ``g``) is the value released at ``t``.  ``s`` is
   odd, so an integer over ``s`` is never a half-integer and the rounding commutes with adding integers:
   by induction ``w_t = x_t + e_t``, ``e_t = round((z_t - sum_{1<=k<b} C_k e_{t-k}) / s)``, a function of
   ``z`` alone (:func:`~dpstream.release.factorization.shaped_noise` with the last ``b - 1`` e's as its
   history).  The mechanism draws ``z`` and computes ``e`` in blocks of :data:`BLOCK` positions, block
   ``i`` keyed as ``KeyedBits(key, ("banded-factorization", i))`` with ``key=``, and releases ``x_t +
   e_t``: integer for integer the decoding of ``y``.  ``e`` is odd in the symmetric ``z``: unbiased.

Stability (the rule on ``b`` and ``bits``).  The decoder is the IIR filter ``1 / C(x)``; its noise is
``e = C^-1 z + s C^-1 r`` (``|r_t| < 1/2``, the rounding), with ``D = C^-1`` the inverse power series.
The coefficients ``c_k`` strictly decrease, but rounded to integers consecutive ones can become equal
(their differences ``~ s / (2 sqrt(pi) k^1.5)`` fall below 1 near ``k = 4,486`` at 20 bits).  The rule:
the encoder's ``bits`` are chosen so that ``C_0 > C_1 > ... > C_{b-1} > 0`` strictly (the least such is
:func:`strict_bits`, 17 at b = 1,024, 20 at 4,096, 26 at 65,536; the most tried is 20 when fewer suffice,
lowered toward it while the noise would pass the exact sampler's limit), and then the grid is coarsened (on
the default grid) while the noise would still pass it.  Then by the
Eneström-Kakeya theorem every root of ``C(x)`` lies in ``|x| >= min_k C_k / C_{k+1} > 1``: ``D`` decays
geometrically, the decoded noise has a finite stationary variance and its prefix sums' weights
``beta_j = sum_{i<=j} D_i`` converge to ``1 / C(1)``.  (Measured, ``benchmarks/banded_study.py
--stability``: with ties the inverse decays as well -- a nonincreasing sequence with ``C_0 > C_1`` has
no root on the unit circle, Anderson, Saff and Varga 1979 -- but only the strict rule gives a decay
rate to truncate the error bars by.)

What it costs.  Ranges of at most ``b`` values get the square-root factorization's error at horizon
``b`` (the first ``b`` rows of ``C^-1`` are the unbanded factor's); a range of ``L >> b`` values has
variance ``~ L pi / (4 b) sigma_c^2`` (``sigma_c^2 = sigma^2 / s^2`` in grid units^2), since ``beta``
tends to ``1 / C(1) ~ 1 / (2 s sqrt(b / pi))``: linear in ``L``, where the binary tree's grows as
``log^2 L``.  Prefix sums over a long stream are the tree's; ranges and windows the band's.

Error bars.  The released sum of positions ``[a, a + L)`` has linear noise ``sum_k (beta_{a+L-1-k} -
beta_{a-1-k}) z_k`` (``beta_j = 0`` for ``j < 0``): its variance is ``v (Q(L) + S_L(a))`` with ``v``
the discrete Gaussian's exact variance, ``Q(L) = sum_{j<L} beta_j^2`` and ``S_L(a) = sum_{i<a}
(beta_{i+L} - beta_i)^2``.  ``beta`` is computed to ``N`` terms (a power of two, at least 16 b) by
Newton's iteration on the power series in float64 (FFT products), ``N`` doubled until ``|beta_j - 1 /
C(1)|`` is below ``1e-13 beta_0`` over its last half: beyond ``N``, ``beta_j`` is taken as ``1 / C(1)``
(truncated where the tail is below float precision: about 12 significant digits, exact for the linear
noise otherwise).  The decoder's rounding adds at most :meth:`BandedFactorization.rounding_bounds`
(deterministic); values clipped or rounded to the grid are not in them either.

Durability.  The noise at position ``t`` is a deterministic function of the key and ``t``: block ``i``'s
``z`` from its keyed bits, and the history carried from block to block.  A snapshot holds the decoded
noise of the ``b - 1`` positions before the current block and, with a keyed source, not the current
block's noise: a resumed run recomputes that block from its keyed ``z`` and the history, O(BLOCK b)
work, never the stream from its start.  The history is noise of released positions: beside the output
it gives their values back.  So with a keyed source it is stored XOR a keyed one-time pad
(``KeyedBits(key, ("banded-factorization", "history", i))`` for the history before block ``i``, one
fixed vector of the key and ``i``), and a snapshot stored without its key (a Spark checkpoint, the
service's state column) holds no noise in the clear, as the other keyed mechanisms' snapshots; an
unkeyed source's snapshot holds its history and block as they are (SECRET).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream.noise.grid_gaussian import GridGaussian
from dpstream.release.binary_tree import BinaryTreeState
from dpstream.release.factorization import _MAX_BITS, IntegerFactorization, integer_coefficients, shaped_noise

__all__ = ["BANDED_ZCDP", "BLOCK", "MAX_BAND", "BandedFactorization", "inverse_series", "strict_bits"]

#: The ``mechanism`` field of its snapshots (its registered name).
BANDED_ZCDP = "banded-zcdp"
#: The largest band ``b`` (``max_range``): the noise costs O(b) per value, the encoder 26 bits at 2^16.
MAX_BAND = 1 << 16
#: Positions per block of noise, each drawn from its own keyed bits (part of the keyed noise's layout: fixed).
BLOCK = 4096
#: The most coefficient bits the strict rule may ask for (int64 products stay exact below it).
_BITS_CAP = 30
#: ``beta`` is truncated where its distance to its limit is below this fraction of ``beta_0``.
_TAIL = 1e-13


def strict_bits(band: int) -> int:
    """The fewest coefficient bits (at least 8) at which the integer coefficients ``C_0 .. C_{band-1}`` strictly
    decrease (the stability rule of the module docstring).

    >>> strict_bits(64), strict_bits(1024), strict_bits(4096)
    (11, 17, 20)
    """
    for bits in range(8, _BITS_CAP + 1):
        if np.all(np.diff(integer_coefficients(band, bits)) < 0):
            return bits
    raise ValueError(f"no encoder of at most {_BITS_CAP} bits has {band} strictly decreasing coefficients.")


def inverse_series(coefficients: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` coefficients of ``1 / C(x)`` (float64), by Newton's iteration ``D <- D (2 - C D)`` with FFT
    products (each step doubles the terms known).

    >>> np.round(inverse_series(np.array([1.0, -1.0]), 4), 12).tolist()  # 1 / (1 - x)
    [1.0, 1.0, 1.0, 1.0]
    """
    d = np.array([1.0 / coefficients[0]])
    while d.size < n:
        m = min(2 * d.size, n)
        size = 1 << (2 * m - 1).bit_length()
        spectrum_d = np.fft.rfft(d, size)
        product = np.fft.irfft(np.fft.rfft(coefficients[:m], size) * spectrum_d, size)[:m]
        product = -product
        product[0] += 2.0
        d = np.fft.irfft(spectrum_d * np.fft.rfft(product, size), size)[:m]
    return d[:n]


class BandedFactorization(IntegerFactorization):
    """Continual sums of an unbounded stream with the banded square-root factorization under zCDP (exact discrete
    Gaussian noise), values in ``[0, upper_bound]``: ``release --method banded-zcdp --epsilon E --delta D
    --max-range B``.

    Parameters
    ----------
    epsilon, delta : float, optional
        An (epsilon, delta) target: the mechanism spends the largest rho that implies it.
    rho : float, optional
        Instead: the zCDP budget itself.
    upper_bound : float
        tau: values must lie in ``[0, tau]`` (public).
    max_range : int
        b, the band: ranges up to b values get the square-root factorization's error; the stream has no
        horizon (at most 2^16; default 4,096).
    clip, granularity, seed, noise, key
        As for :class:`~dpstream.release.binary_tree.BinaryTreeCounter`; with ``key=`` block ``i`` of
        :data:`BLOCK` positions draws from ``KeyedBits(key, ("banded-factorization", i))``.

    Privacy
    -------
    ``spent_rho``-zCDP (at most rho) at event level over the whole stream, stated with the (epsilon, delta) it
    implies; see the module docstring for the construction and its proof.

    Examples
    --------
    >>> m = BandedFactorization(epsilon=1.0, delta=1e-6, upper_bound=1.0, key=bytes(32))  # the band: 4,096
    >>> m.bits, bool(np.all(np.diff(m.coefficients) < 0)), m.granularity == 2.0**-14  # the stability rule
    (20, True, True)
    >>> released = m.release(np.ones(5000))  # two blocks of noise, the second after the first's last 4,095
    >>> m.state["counter"]["masked_history"].size, m.privacy().label
    (4095, '0.024356-zCDP, so (1, 1e-06)-DP')
    """

    _KIND = BANDED_ZCDP
    _WHAT, _IDENTITY, _ROLE, _LARGEST = ("banded square-root factorization", ("banded-factorization",), "band",
                                         MAX_BAND)
    _COST, _MODEL = "its noise costs O(band) per value", "banded"
    #: The decoded noise of the (at most b - 1) positions before the current block (SECRET).
    _history = np.zeros(0, dtype=np.int64)
    #: The prefix weights, computed once when first asked (:meth:`prefix_weights`).
    _beta: np.ndarray | None = None

    def _bits(self) -> range:
        """The bits tried, most first: from 20 (or :func:`strict_bits` if more) down to :func:`strict_bits`, never
        fewer (the stability rule: strictly decreasing integer coefficients)."""
        least = strict_bits(self.max_range)
        return range(max(_MAX_BITS, least), least - 1, -1)

    def _reach(self) -> int:
        """One value: every released number is one value plus its noise."""
        return 1

    # -- the streaming contract (the tree's ``state``, ``from_state``, ``release``, ``release_one``) -------------

    def _start_tree(self) -> np.ndarray:
        """The current block's noise: ``z`` drawn (keyed by the block's index) and decoded after the history."""
        sampler = self._source.sampler(self._state.released // BLOCK)
        z = self._arithmetic.noise.sample(sampler, BLOCK)
        self._state.increments = shaped_noise(np.asarray(z, dtype=np.int64), self.coefficients, self._history)
        return self._state.increments

    def _release(self, values: np.ndarray) -> np.ndarray:
        """Values already checked: grid units plus the decoded noise of their positions, block by block."""
        ar, st = self._arithmetic, self._state
        units = ar.units(values)
        out = np.empty(units.size, dtype=units.dtype)
        done = 0
        while done < units.size:
            at = st.released % BLOCK
            noise = st.increments if st.increments is not None else self._start_tree()
            take = min(units.size - done, BLOCK - at)
            out[done : done + take] = units[done : done + take] + noise[at : at + take]
            st.released, done = st.released + take, done + take
            if at + take == BLOCK:  # the block is over: its last b - 1 e's are the next one's history
                self._history = np.concatenate((self._history, noise))[1 - self.max_range :]
                st.increments = None
        st.count += ar.sum(out)
        return ar.released(out)

    def _pad(self, released: int, size: int) -> np.ndarray:
        """The keyed one-time pad of the history before block ``released // BLOCK``: ``size`` words of
        ``KeyedBits(key, ("banded-factorization", "history", i))`` as int64 (the history there is one fixed vector of
        the key and ``i``, so a pad never masks two different ones)."""
        words = self._source.sampler("history", released // BLOCK).bits.words(size)
        return np.asarray(words, dtype=np.uint64).view(np.int64)

    def stream_state(self) -> dict[str, Any]:
        """The progress as plain data: positions released, the noisy count and the history; with a keyed source the
        history XOR a keyed pad (``masked_history``: a snapshot stored without its key holds no noise in the clear)
        and not the current block's noise (recomputed from the key and the history); with an unkeyed one the history
        and the current block's noise as they are (SECRET)."""
        st = self._state
        if self._source.keyed:
            return {"released": st.released, "count": st.count, "increments": None,
                    "masked_history": self._history ^ self._pad(st.released, self._history.size)}
        increments = None if st.increments is None else st.increments.copy()
        return {"released": st.released, "count": st.count, "increments": increments, "history": self._history.copy()}

    def resume_stream(self, data: dict[str, Any]) -> None:
        """Continue from :meth:`stream_state` (on a mechanism built with the same parameters and source)."""
        released, increments = int(data["released"]), data["increments"]
        if self._source.keyed != ("masked_history" in data):
            raise ValueError("a keyed banded-factorization snapshot must carry its history masked (masked_history), "
                             "an unkeyed one as it is (history).")
        history = np.asarray(data["masked_history" if self._source.keyed else "history"], dtype=np.int64)
        if history.size != min(self.max_range - 1, released // BLOCK * BLOCK):
            raise ValueError(f"a banded-factorization snapshot at position {released} must carry the decoded noise "
                             f"of the {min(self.max_range - 1, released // BLOCK * BLOCK)} positions before its "
                             f"block, got {history.size}.")
        if self._source.keyed:
            history = history ^ self._pad(released, history.size)
        if increments is None and released % BLOCK and not self._source.keyed:
            raise ValueError("a banded-factorization snapshot taken inside a block must carry its noise (an unkeyed "
                             "source cannot recompute it).")
        self._state = BinaryTreeState(released=released, running=0, count=data["count"],
                                      increments=None if increments is None else np.asarray(increments))
        self._history = history

    def _measurement(self, grid: GridGaussian) -> str:
        """One measurement of the whole stream (no chunks): the guarantee holds at every position."""
        return (f"y = C x + z over the whole stream: C the banded integer Toeplitz encoder round(s binom(2k, k) / "
                f"4^k) for k < b = {self.max_range} (0 beyond), s = 2^{self.bits} + 1, z discrete Gaussian of "
                f"sigma^2 = tau^2 ||C_(0:b)||^2 / (2 rho) = {float(grid.sigma2):.6g} (g = {self.granularity:g}, "
                f"tau = {grid.units} units); L2 sensitivity tau ||C_(0:b)|| at every position (a value moves b "
                "measurements; exact in integers); released: the integer decoding of y")

    # -- error bars ----------------------------------------------------------------------------

    def prefix_weights(self) -> np.ndarray:
        """``beta_j`` for ``j < N``: the prefix noise after ``t`` values is ``sum_k beta_{t-1-k} z_k`` grid units (plus
        the rounding); beyond ``N``, ``beta_j`` is its limit ``1 / C(1)`` to float precision (module docstring)."""
        if self._beta is None:
            c, limit = self.coefficients.astype(np.float64), self._limit()
            n = 1 << (16 * self.max_range - 1).bit_length()
            while True:
                beta = np.cumsum(inverse_series(c, n))
                if np.max(np.abs(beta[n // 2 :] - limit)) <= _TAIL * beta[0] or n >= 1 << 26:
                    break
                n *= 2
            self._beta = beta
        return self._beta

    def _limit(self) -> float:
        """``1 / C(1)``: the limit of ``beta_j``, its value beyond the terms :meth:`prefix_weights` computes."""
        return 1.0 / float(np.sum(self.coefficients))

    def range_standard_errors(self, starts: object, stops: object) -> np.ndarray:
        """The exact standard error of the released sum of positions ``[start, stop)`` (its linear noise), for each
        pair: ``sqrt(v (Q(L) + S_L(start)))`` (module docstring), vectorised (one pass over ``beta`` per distinct
        length below ``N``)."""
        a = np.atleast_1d(np.asarray(starts, dtype=np.int64))
        c = np.atleast_1d(np.asarray(stops, dtype=np.int64))
        if np.any(a < 0) or np.any(c < a):
            raise ValueError("need 0 <= start <= stop for every range.")
        beta = self.prefix_weights()
        n, limit = beta.size, self._limit()
        squares = np.concatenate(([0.0], np.cumsum(beta**2)))  # Q(m) for m <= N
        gaps = np.concatenate(([0.0], np.cumsum((limit - beta) ** 2)))  # sum_{i<m} (beta_inf - beta_i)^2
        length = c - a
        total = np.where(length <= n, squares[np.minimum(length, n)], squares[n] + (length - n) * limit**2)
        before = np.minimum(a, n)  # positions i < a with beta_i below its limit
        total += gaps[before]  # every i with i + L >= N: (beta_inf - beta_i)^2
        for size in np.unique(length[(length < n) & (a > 0)]):
            chosen = (length == size) & (a > 0)
            inside = np.minimum(before[chosen], n - size)  # i < N - L: (beta_{i+L} - beta_i)^2 instead
            moved = np.concatenate(([0.0], np.cumsum((beta[size:] - beta[: n - size]) ** 2)))
            total[chosen] += moved[inside] - gaps[inside]
        return np.sqrt(total * self._unit_variance())

    def rounding_bounds(self, ends: object) -> np.ndarray:
        """The most the decoder's rounding adds to the prefix sum of the first ``e`` values (values' units): half
        the L1 norm of the prefix's weights times ``s`` (deterministic, not in the standard error; it grows
        linearly, about ``e sqrt(pi / b) / 4`` grid units)."""
        ends = np.asarray(ends, dtype=np.int64)
        beta = self.prefix_weights()
        reach = np.concatenate(([0.0], np.cumsum(np.abs(beta))))
        n, limit = beta.size, self._limit()
        total = np.where(ends <= n, reach[np.minimum(ends, n)], reach[n] + (ends - n) * limit)
        return total * float(self.coefficients[0]) * self.granularity / 2.0
