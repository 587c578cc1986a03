"""Exact primitives on the integers, from a source of uniform random bits.

Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020),
give samplers that use only integer arithmetic and uniform random bits, so a draw follows its
law *exactly* -- unlike floating-point Laplace noise, whose low-order bits leak the data
(Mironov, CCS 2012) and whose support is a finite set of floats.  This module holds the pieces
they are built of:

* :func:`uniform_below` draws uniform integers below ``n``;
* :func:`bernoulli` draws Bernoulli(num / den) for integers of any size;
* :func:`bernoulli_exp` draws Bernoulli(exp(-gamma)) for a rational gamma >= 0 (their
  Algorithm 1): for gamma in [0, 1], ``K = 1, 2, ...`` with ``A_K ~ Bernoulli(gamma / K)``
  until the first ``A_K = 0``, and the output is ``K`` odd (the alternating series of
  ``exp(-gamma)``); for gamma > 1, the product of ``floor(gamma)`` Bernoulli(exp(-1)) and one
  Bernoulli(exp(-(gamma - floor(gamma)))).

The samplers of the laws are in their own modules: :mod:`dpstream.noise.discrete_laplace_law`
(their Algorithm 2) and :mod:`dpstream.noise.discrete_gaussian_law` (Algorithm 3).  They are built
of the vectorized building blocks here, which work on arrays already checked: :func:`below`
(uniform integers), :func:`coins`, :func:`bernoulli_exp_batch` and
:func:`bernoulli_exp_unit_batch` (Bernoulli(exp(-num / den)) per element), :func:`geometric_exp1`,
the argument checks :func:`check_size` and :func:`check_integer`, and the batch size
:data:`CHUNK`.

Every decision is made in integer arithmetic: numpy ``uint64`` where the numbers fit (with
explicit overflow checks), Python integers in object arrays where they do not.  Floating
point is used only to size batches and in the pmf helpers for tests.  The samplers are
vectorized: each works on whole arrays in rounds of the draws still pending.

Bits.  A uniform integer below ``n <= 2^32`` takes 32 random bits (half a word) by Lemire's
multiply-and-reject method; below ``n < 2^64`` a whole word, by rejecting the lowest
``2^64 mod n`` words and reducing modulo ``n``; a Bernoulli whose denominator is larger compares
the random words one by one with the base-2^64 digits of the probability.  Fair coins take one
bit each.

Privacy
-------
A draw is only as unpredictable as its bit source: use :class:`~dpstream.noise.bits.SystemBits`
or :class:`~dpstream.noise.bits.KeyedBits` for a real release.  The samplers' running time
depends on the random bits, not on any data.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from dpstream.noise.bits import BitSource

__all__ = [
    "CHUNK",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_batch",
    "bernoulli_exp_unit_batch",
    "below",
    "check_integer",
    "check_size",
    "coins",
    "geometric_exp1",
    "uniform_below",
]

_TWO32 = 1 << 32
_TWO64 = 1 << 64
_MASK32 = np.uint64(_TWO32 - 1)
_SHIFT32 = np.uint64(32)
#: Draws per round of the discrete samplers: keeps the work arrays in cache.
CHUNK = 1 << 16
_CLIP = 1 << 62  # an integer part of gamma this large can never be passed (see bernoulli_exp_batch)


# -- raw bits ------------------------------------------------------------------------------------


def _words(bits: BitSource, n: int) -> np.ndarray:
    words = np.ascontiguousarray(bits.words(n))
    if words.shape != (n,) or words.dtype != np.uint64:
        raise ValueError(f"a bit source must return {n} uint64 words, got dtype {words.dtype} and shape {words.shape}.")
    return words


def _uniform32(bits: BitSource, n: int) -> np.ndarray:
    """``n`` uniform 32-bit integers as uint64 (each word gives its low half, then its high half)."""
    words = _words(bits, (n + 1) // 2).astype("<u8", copy=False)
    return words.view("<u4")[:n].astype(np.uint64)


def coins(bits: BitSource, n: int) -> np.ndarray:
    """``n`` fair coins as a bool array (the bits of each word from least to most significant)."""
    words = _words(bits, (n + 63) // 64).astype("<u8", copy=False)
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:n].view(bool)


def _rejection_rounds(m: int, draw) -> np.ndarray:
    """Fill ``m`` results with ``draw(k, where)`` -> ``(values, accepted)`` until all are accepted.

    ``where`` is None for the first round (all ``m`` positions) and then the positions still
    pending; rejected values are drawn again from fresh bits.
    """
    out, accepted = draw(m, None)
    pending = np.flatnonzero(~accepted)
    while pending.size:
        values, accepted = draw(pending.size, pending)
        out[pending[accepted]] = values[accepted]
        pending = pending[~accepted]
    return out


def below(bits: BitSource, n, m: int) -> np.ndarray:
    """``m`` uniform integers in [0, n) as uint64; ``n`` an int in [1, 2^64) or a uint64 array of length m."""
    if np.ndim(n) == 0:
        n = int(n)
        if n == 1:
            return np.zeros(m, dtype=np.uint64)
        return _below_lemire(bits, n, m) if n <= _TWO32 else _below_modulo(bits, n, m)
    small = n <= np.uint64(_TWO32)
    if small.all():
        return _below_lemire(bits, n, m)
    if not small.any():
        return _below_modulo(bits, n, m)
    out = np.empty(m, dtype=np.uint64)
    out[small] = _below_lemire(bits, n[small], int(small.sum()))
    out[~small] = _below_modulo(bits, n[~small], m - int(small.sum()))
    return out


def _below_lemire(bits: BitSource, n, m: int) -> np.ndarray:
    """Lemire (2019): ``floor(x n / 2^32)`` for a 32-bit ``x``, rejected when ``x n mod 2^32`` is
    below ``2^32 mod n`` (which makes every output equally likely); ``n <= 2^32``, so ``x n``
    fits in 64 bits."""
    if np.ndim(n) == 0:
        factor, threshold = np.uint64(n), np.uint64(_TWO32 % n)
    else:
        factor, threshold = n, (np.uint64(_TWO32) - n) % n

    def draw(k, where):
        f = factor if where is None or np.ndim(factor) == 0 else factor[where]
        product = _uniform32(bits, k) * f
        low = product & _MASK32
        ok = low >= (threshold if where is None or np.ndim(threshold) == 0 else threshold[where])
        return product >> _SHIFT32, ok

    return _rejection_rounds(m, draw)


def _below_modulo(bits: BitSource, n, m: int) -> np.ndarray:
    """``w mod n`` for a 64-bit word ``w``, rejecting the lowest ``2^64 mod n`` words."""
    if np.ndim(n) == 0:
        modulus, threshold = np.uint64(n), np.uint64(_TWO64 % n)
    else:
        modulus, threshold = n, np.negative(n) % n  # (2^64 - n) mod n, computed modulo 2^64

    def draw(k, where):
        w = _words(bits, k)
        mod = modulus if where is None or np.ndim(modulus) == 0 else modulus[where]
        thr = threshold if where is None or np.ndim(threshold) == 0 else threshold[where]
        return w % mod, w >= thr

    return _rejection_rounds(m, draw)


# -- Bernoulli -----------------------------------------------------------------------------------


def _bernoulli(bits: BitSource, num: np.ndarray, den) -> np.ndarray:
    """Bernoulli(num / den) for ``0 <= num <= den``: ``num`` a uint64 or object array, ``den`` an
    int >= 1 (any size) or a uint64 array of the same length as ``num`` (values < 2^64)."""
    m = num.size
    if m == 0:
        return np.zeros(0, dtype=bool)
    if np.ndim(den) == 0 and int(den) >= _TWO64 or num.dtype == object:
        return _bernoulli_wide(bits, num.astype(object), int(den))
    return below(bits, den, m) < num


def _bernoulli_wide(bits: BitSource, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(num / den) for Python integers of any size: compare a uniform real in [0, 1),
    drawn 64 bits at a time, with the base-2^64 expansion of ``num / den``, digit by digit."""
    result = np.asarray(num >= den, dtype=bool)
    pending = np.flatnonzero(~result & np.asarray(num > 0, dtype=bool))
    remainder = num[pending]
    while pending.size:
        remainder = remainder * _TWO64
        digit = remainder // den
        remainder = remainder - digit * den
        digit = digit.astype(np.uint64)
        w = _words(bits, pending.size)
        below, above = w < digit, w > digit
        result[pending[below]] = True
        tie = ~(below | above)  # equal digits (probability 2^-64): look at the next ones
        pending, remainder = pending[tie], remainder[tie]
    return result


def _bernoulli_exp1(bits: BitSource, m: int) -> np.ndarray:
    """``m`` independent Bernoulli(exp(-1)): Algorithm 1 with gamma = 1 (``A_1 = 1`` always,
    ``A_2`` a fair coin, then ``A_K ~ Bernoulli(1 / K)``); 1 when the first ``A_K = 0`` has K odd."""
    result = np.zeros(m, dtype=bool)  # stopping at K = 2 gives 0
    alive = np.flatnonzero(coins(bits, m))
    k = 3
    while alive.size:
        go_on = below(bits, k, alive.size) == 0
        result[alive[~go_on]] = k % 2 == 1
        alive = alive[go_on]
        k += 1
    return result


def geometric_exp1(bits: BitSource, m: int) -> np.ndarray:
    """``m`` independent counts ``V`` of Bernoulli(exp(-1)) successes before the first failure,
    ``P[V >= v] = exp(-v)``, as int64: one long run of trials cut at its failures."""
    out = np.empty(m, dtype=np.int64)
    filled, carry = 0, 0
    while filled < m:
        length = int((m - filled) * 1.7) + 64  # a count takes 1 / (1 - 1/e) = 1.58 trials on average
        failures = np.flatnonzero(~_bernoulli_exp1(bits, length))
        if failures.size == 0:
            carry += length
            continue
        runs = np.diff(failures, prepend=-1) - 1
        runs[0] += carry
        take = min(runs.size, m - filled)
        out[filled : filled + take] = runs[:take]
        filled += take
        carry = length - 1 - int(failures[-1])
    return out


def bernoulli_exp_unit_batch(bits: BitSource, num: np.ndarray, den) -> np.ndarray:
    """Bernoulli(exp(-num / den)) for ``0 <= num <= den`` (Algorithm 1 of CKS for gamma in [0, 1]).

    ``den`` is an int (``A_K ~ Bernoulli(num / (den K))`` in one draw) or a uint64 array (then
    ``A_K`` is Bernoulli(num / den) times Bernoulli(1 / K), which never overflows).
    """
    m = num.size
    result = np.empty(m, dtype=bool)
    alive = np.arange(m)
    k = 1
    while alive.size:
        if np.ndim(den) == 0:
            go_on = _bernoulli(bits, num[alive], int(den) * k)
        else:
            go_on = _bernoulli(bits, num[alive], den[alive])
            if k > 1:
                go_on[go_on] = below(bits, k, int(go_on.sum())) == 0
        result[alive[~go_on]] = k % 2 == 1
        alive = alive[go_on]
        k += 1
    return result


def bernoulli_exp_batch(bits: BitSource, num: np.ndarray, den) -> np.ndarray:
    """Bernoulli(exp(-num / den)) for ``num >= 0``: a run of ``floor(gamma)`` Bernoulli(exp(-1))
    successes (drawn as one geometric count ``V``, passed when ``V >= floor(gamma)``), then
    Algorithm 1 on the fractional part.  ``num`` is uint64 or object; ``den`` as in
    :func:`bernoulli_exp_unit_batch`.

    An integer part above 2^62 is compared as 2^62: ``V`` counts generated trials, and no run
    could ever generate 2^62 of them, so the outcome is the same.
    """
    if np.ndim(den) == 0 and int(den) >= _TWO64:
        num = num.astype(object)
    scalar_den = int(den) if np.ndim(den) == 0 else den
    whole = num // scalar_den
    fraction = num - whole * scalar_den
    if num.dtype == object and np.ndim(den) == 0 and scalar_den < _TWO64:
        fraction = fraction.astype(np.uint64)  # below den, so it fits: the fast Bernoulli applies
    result = np.ones(num.size, dtype=bool)
    has_whole = np.flatnonzero(np.asarray(whole > 0, dtype=bool))
    if has_whole.size:
        needed = np.minimum(whole[has_whole], _CLIP).astype(np.int64)
        result[has_whole] = geometric_exp1(bits, has_whole.size) >= needed
    rest = np.flatnonzero(result & np.asarray(fraction > 0, dtype=bool))
    if rest.size:
        result[rest] = bernoulli_exp_unit_batch(bits, fraction[rest], scalar_den if np.ndim(den) == 0 else den[rest])
    return result


# -- argument handling ---------------------------------------------------------------------------


def check_size(size) -> tuple[tuple[int, ...], int]:
    """A sampler's ``size`` checked: the output shape and its number of draws."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        shape = (int(size),)
    elif isinstance(size, tuple) and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in size):
        shape = tuple(int(d) for d in size)
    else:
        raise TypeError(f"size must be an integer or a tuple of integers, got {size!r}.")
    if any(d < 0 for d in shape):
        raise ValueError(f"size must not be negative, got {size!r}.")
    return shape, math.prod(shape)


def check_integer(value, name: str, minimum: int, maximum: int | None = None) -> int:
    """A sampler's integer argument checked (``minimum <= value <= maximum``), as a Python int."""
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        raise TypeError(f"{name} must be an integer, got {value!r}.")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an integer <= {maximum}, got {value!r}.")
    return value


def _integers(value, name: str, minimum: int, shape: tuple[int, ...], maximum: int = _TWO64 - 1):
    """A scalar Python int (any size up to ``maximum``) or a uint64 array broadcast to ``shape``."""
    if np.ndim(value) == 0 and not isinstance(value, np.ndarray):
        return check_integer(value, name, minimum, maximum)
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got an array of dtype {array.dtype}.")
    if array.size and (array.min() < minimum or array.max() > maximum):
        bad = int(array[(array < minimum) | (array > maximum)].flat[0])
        raise ValueError(f"{name} must be integers in [{minimum}, {maximum}], got {bad}.")
    try:
        return np.broadcast_to(array.astype(np.uint64), shape).ravel()
    except ValueError:
        raise ValueError(f"{name} of shape {array.shape} does not broadcast to size {shape}.") from None


def _full(value, m: int) -> np.ndarray:
    if np.ndim(value):
        return value
    return np.full(m, value, dtype=np.uint64 if value < _TWO64 else object)


def _in_chunks(m: int, dtype, draw, *arguments) -> np.ndarray:
    """``draw(*arguments_chunk, k)`` over chunks of :data:`CHUNK` positions (array arguments are
    sliced, scalars passed as they are): small work arrays are several times faster."""
    out = np.empty(m, dtype=dtype)
    for start in range(0, m, CHUNK):
        stop = min(start + CHUNK, m)
        parts = [a[start:stop] if np.ndim(a) else a for a in arguments]
        out[start:stop] = draw(*parts, stop - start)
    return out


# -- public samplers -----------------------------------------------------------------------------


def uniform_below(bits: BitSource, n, size) -> np.ndarray:
    """Uniform integers in ``[0, n)``, as int64, by rejection from random bits.

    Parameters
    ----------
    bits : bit source
        See :mod:`dpstream.noise.bits`.
    n : int or array of int
        Upper bound(s), ``1 <= n <= 2^63``; an array broadcasts to ``size``.
    size : int or tuple of int
        Output shape.

    >>> from dpstream.noise.bits import SeededBits
    >>> x = uniform_below(SeededBits(seed=0), 6, 10_000)
    >>> x.dtype, int(x.min()), int(x.max())
    (dtype('int64'), 0, 5)
    """
    shape, m = check_size(size)
    n = _integers(n, "n", 1, shape, maximum=1 << 63)
    return _in_chunks(m, np.int64, lambda bound, k: below(bits, bound, k), n).reshape(shape)


def bernoulli(bits: BitSource, num, den, size) -> np.ndarray:
    """Exact Bernoulli(num / den) draws, as bool.

    ``num`` and ``den`` are integers with ``0 <= num <= den`` and ``den >= 1``: Python ints of
    any size, or integer arrays (below 2^64) that broadcast to ``size``.

    >>> from dpstream.noise.bits import SeededBits
    >>> x = bernoulli(SeededBits(seed=0), 1, 4, 100_000)
    >>> bool(abs(x.mean() - 0.25) < 5 * (0.25 * 0.75 / 100_000) ** 0.5)
    True
    """
    shape, m = check_size(size)
    big = _TWO64 - 1 if np.ndim(num) or np.ndim(den) else None
    den = _integers(den, "den", 1, shape, maximum=big)
    num = _integers(num, "num", 0, shape, maximum=big)
    over = np.flatnonzero(np.broadcast_to(num > den, (m,)))
    if over.size:
        i = over[0]
        bad_num, bad_den = (num if np.ndim(num) == 0 else num[i]), (den if np.ndim(den) == 0 else den[i])
        raise ValueError(f"num must be <= den (a probability), got num={bad_num} and den={bad_den}.")
    return _in_chunks(m, bool, lambda p, q, k: _bernoulli(bits, _full(p, k), q), num, den).reshape(shape)


def bernoulli_exp(bits: BitSource, num, den, size) -> np.ndarray:
    """Exact Bernoulli(exp(-num / den)) draws for a rational ``num / den >= 0`` (CKS Algorithm 1).

    ``num >= 0`` and ``den >= 1`` are Python ints of any size or integer arrays (below 2^64) that
    broadcast to ``size``.  Only integer arithmetic decides a draw.

    >>> from dpstream.noise.bits import SeededBits
    >>> x = bernoulli_exp(SeededBits(seed=0), 1, 2, 100_000)  # exp(-1/2) = 0.6065...
    >>> bool(abs(x.mean() - 0.6065) < 0.01)
    True
    """
    shape, m = check_size(size)
    big = _TWO64 - 1 if np.ndim(num) or np.ndim(den) else None
    den = _integers(den, "den", 1, shape, maximum=big)
    num = _integers(num, "num", 0, shape, maximum=big)
    return _in_chunks(m, bool, lambda p, q, k: bernoulli_exp_batch(bits, _full(p, k), q), num, den).reshape(shape)
