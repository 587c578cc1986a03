"""Exact noise (``dpstream.noise.bits``, ``exact``, ``sampler``): laws, bit sources, noise objects.

The laws are checked against the exact pmfs with chi-square goodness-of-fit tests over 10^6
draws, every integer bin with an expected count of at least 5 plus one bin for each tail (whose
expected count is also at least 5); a test fails when the statistic's p-value is below 1e-4.
Bernoulli frequencies are checked against ``exp(-gamma)`` with five binomial standard
deviations, ``5 sqrt(p (1 - p) / n)``, and ``n`` chosen so that this is at most 1e-3.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from fractions import Fraction

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy import stats

from dpstream.noise import (
    ExactNoise,
    FloatNoise,
    GeneratorBits,
    KeyedBits,
    NoiseSampler,
    SeededBits,
    SystemBits,
    ZeroNoise,
    bernoulli,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_laplace,
    discrete_laplace_pmf,
    double_geometric_noise,
    laplace_noise,
    make_bits,
    make_noise,
    uniform_below,
)
from dpstream.noise.bits import encode_identity
from dpstream.noise.discrete_laplace_law import MAX_LAPLACE_NUMERATOR

ALPHA = 1e-4
N = 10**6


class ScriptedBits:
    """A bit source that returns the given words, in order, then fails."""

    def __init__(self, words):
        self._words = [int(w) for w in words]

    def words(self, n):
        if n > len(self._words):
            raise AssertionError("the scripted words ran out")
        out, self._words = self._words[:n], self._words[n:]
        return np.array(out, dtype=np.uint64)


def chi_square_pvalue(samples: np.ndarray, pmf) -> float:
    """Goodness of fit of integer ``samples`` to a pmf symmetric about 0, tails merged.

    Integer bins run over ``|x| <= w`` with ``w`` the largest value whose expected count is at
    least 5; each tail ``|x| > w`` on one side is one more bin, and ``w`` shrinks until that
    bin's expected count is at least 5 too.  The tails' mass comes from the pmf's total.
    """
    n = samples.size
    w = 0
    while n * pmf(np.array([w + 1]))[0] >= 5:
        w += 1
    while True:
        support = np.arange(-w, w + 1)
        probabilities = pmf(support)
        tail = (1.0 - probabilities.sum()) / 2.0
        if n * tail >= 5 or w == 0:
            break
        w -= 1
    observed = np.concatenate(
        (
            [np.count_nonzero(samples < -w)],
            np.bincount(samples[np.abs(samples) <= w] + w, minlength=2 * w + 1),
            [np.count_nonzero(samples > w)],
        )
    )
    expected = n * np.concatenate(([tail], probabilities, [tail]))
    keep = expected > 0
    statistic = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return float(stats.chi2.sf(statistic, keep.sum() - 1))


# -- the laws ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t, s",
    [(1, 1), (7, 3), (100, 1), (10_000, 1), (1, 4), ((1 << 33) + 1, 1 << 30)],
    ids=["scale-1", "scale-7/3", "scale-100", "scale-1e4", "scale-1/4", "t-above-2^32"],
)
def test_discrete_laplace_matches_its_pmf(t, s):
    x = discrete_laplace(SeededBits(seed=t % 1000 + s % 1000), t, s, N)
    assert x.dtype == np.int64 and x.shape == (N,)
    assert chi_square_pvalue(x, lambda k: discrete_laplace_pmf(k, t, s)) > ALPHA
    a = math.exp(-s / t)
    variance = 2 * a / (1 - a) ** 2
    support = np.arange(-60 * (t // s) - 60, 60 * (t // s) + 61, dtype=np.float64)
    fourth = float((discrete_laplace_pmf(support, t, s) * support**4).sum())
    # the sample variance of n draws has sd sqrt((mu4 - var^2) / n)
    assert abs(x.var() - variance) < 6 * math.sqrt((fourth - variance**2) / N)


@pytest.mark.parametrize("num, den", [(4, 1), (1, 10), (100, 3)], ids=["sigma2-4", "sigma2-0.1", "sigma2-100/3"])
def test_discrete_gaussian_matches_its_pmf(num, den):
    x = discrete_gaussian(SeededBits(seed=num + den), num, den, N)
    assert x.dtype == np.int64
    assert chi_square_pvalue(x, lambda k: discrete_gaussian_pmf(k, num, den)) > ALPHA


def test_discrete_gaussian_with_numbers_beyond_64_bits():
    """sigma^2 = 10^12 / 7: the exponent's denominator 2 a b t^2 exceeds 2^64 (object path)."""
    num, den = 10**12, 7
    x = discrete_gaussian(SeededBits(seed=1), num, den, 200_000)
    sigma2 = num / den
    # the discrete Gaussian's variance equals sigma^2 to within exp(-2 pi^2 sigma^2) here
    assert abs(x.var() / sigma2 - 1) < 6 * math.sqrt(2 / x.size)
    assert abs(x.mean()) < 6 * math.sqrt(sigma2 / x.size)


def test_pmfs_sum_to_one():
    assert discrete_laplace_pmf(np.arange(-2000, 2001), 50, 1).sum() == pytest.approx(1.0, abs=1e-12)
    assert discrete_laplace_pmf(0, 1, 4) == pytest.approx((1 - math.exp(-4)) / (1 + math.exp(-4)))
    for num, den in [(1, 3), (9, 2), (10**6, 1)]:
        sigma = math.sqrt(num / den)
        support = np.arange(-int(50 * sigma) - 2, int(50 * sigma) + 3)
        assert discrete_gaussian_pmf(support, num, den).sum() == pytest.approx(1.0, abs=1e-12)


GAMMAS = [(0, 1), (1, 7), (1, 2), (2, 3), (1, 1), (3, 2), (7, 3), (5, 1), (3 * (1 << 70) + 5, 1 << 70)]


@pytest.mark.parametrize("num, den", GAMMAS, ids=[f"{n}/{d}" for n, d in GAMMAS])
def test_bernoulli_exp_frequency(num, den):
    p = math.exp(-num / den)
    n = max(N, math.ceil(25e6 * p * (1 - p)))  # 5 sd <= 1e-3
    x = bernoulli_exp(SeededBits(seed=num % 997 + den % 991), num, den, n)
    assert x.dtype == bool
    assert abs(x.mean() - p) <= max(5 * math.sqrt(p * (1 - p) / n), 1e-12)


def test_bernoulli_exp_with_an_array_of_rationals():
    """Many rationals at once (the array path draws Bernoulli(g / K) as Bernoulli(g) Bernoulli(1 / K))."""
    num = np.array([0, 1, 2, 3, 5, 9, 10, 13, 20, 40], dtype=np.int64)
    den = np.array([1, 3, 5, 4, 7, 10, 3, 6, 9, 11], dtype=np.int64)
    reps = 700_000
    x = bernoulli_exp(SeededBits(seed=8), num, den, (reps, num.size))
    p = np.exp(-num / den)
    sd = np.sqrt(p * (1 - p) / reps)
    assert np.all(np.abs(x.mean(axis=0) - p) <= 5 * sd + 1e-12)


def test_bernoulli_frequencies_including_huge_integers():
    bits = SeededBits(seed=3)
    for num, den in [(1, 3), (2, 7), (0, 5), (5, 5), (1 << 70, 3 * (1 << 70) + 1), (3, (1 << 66) // 2 + 1)]:
        p = num / den
        x = bernoulli(bits, num, den, N)
        assert abs(x.mean() - p) <= 5 * math.sqrt(p * (1 - p) / N) + 1e-12


@pytest.mark.parametrize("n", [2, 7, 1000, 3 * (1 << 40) + 1], ids=["2", "7", "1000", "3*2^40+1"])
def test_uniform_below_is_uniform(n):
    x = uniform_below(SeededBits(seed=n % 1000), n, N)
    assert x.dtype == np.int64 and x.min() >= 0 and x.max() < n
    bins = min(n, 1000)
    counts = np.bincount(x * bins // n, minlength=bins)  # x * bins < 2^53: exact in int64
    edges = -(-np.arange(bins + 1) * n // bins)  # first value of each bin
    expected = N * np.diff(edges) / n
    assert stats.chisquare(counts, expected).pvalue > ALPHA


def test_uniform_below_with_an_array_of_bounds_and_shape():
    n = np.array([1, 2, 1 << 32, (1 << 32) + 1, 1 << 63], dtype=np.uint64)
    x = uniform_below(SeededBits(seed=4), n, (20_000, 5))
    assert x.shape == (20_000, 5) and x.dtype == np.int64
    assert np.all(x[:, 0] == 0)
    assert np.all((x >= 0) & (x.astype(np.uint64) < n))
    scaled = n.astype(np.float64)
    means = x.astype(np.float64).mean(axis=0) / scaled
    # E[x] / n = (n - 1) / 2n, and x / n has sd sqrt((n^2 - 1) / 12) / n < sqrt(1 / 12)
    assert np.all(np.abs(means - (scaled - 1) / (2 * scaled)) < 5 * math.sqrt(1 / 12 / 20_000) + 1e-9)


def test_rejections_draw_fresh_bits():
    """n = 3: the 32-bit draw x = 0 is rejected (x n mod 2^32 < 2^32 mod 3 = 1)."""
    assert uniform_below(ScriptedBits([0, 1 << 31]), 3, 1).tolist() == [1]  # floor(2^31 * 3 / 2^32) = 1
    # n = 2^32 + 1 needs whole words: w < 2^64 mod n = 1 is rejected, then w mod n
    n = (1 << 32) + 1
    assert uniform_below(ScriptedBits([0, 5 * n + 4]), n, 1).tolist() == [4]


def test_wide_bernoulli_compares_digit_by_digit():
    """p = 1/3 with a denominator beyond 2^64: every base-2^64 digit of p is floor(2^64 / 3)."""
    digit = (1 << 64) // 3
    den = 3 << 64
    assert bernoulli(ScriptedBits([digit, digit, digit - 1]), 1 << 64, den, 1).tolist() == [True]
    assert bernoulli(ScriptedBits([digit, digit + 1]), 1 << 64, den, 1).tolist() == [False]


def test_draws_are_replayable_and_shaped():
    for sampler, args in [(discrete_laplace, (5, 2)), (discrete_gaussian, (10, 3)), (bernoulli_exp, (4, 3))]:
        a = sampler(SeededBits(seed=11), *args, (30, 4))
        b = sampler(SeededBits(seed=11), *args, (30, 4))
        assert a.shape == (30, 4) and np.array_equal(a, b)
    assert discrete_laplace(SeededBits(seed=0), 3, 1, 0).shape == (0,)


def test_overflow_is_refused_never_wrapped(monkeypatch):
    monkeypatch.setattr(
        "dpstream.noise.discrete_laplace_law.geometric_exp1", lambda bits, m: np.full(m, 1 << 40, dtype=np.int64)
    )
    with pytest.raises(OverflowError, match="int64"):
        discrete_laplace(SeededBits(seed=0), 1 << 30, 1, 10)


def test_sampler_argument_errors():
    bits = SeededBits(seed=0)
    with pytest.raises(ValueError, match=r"t <= 2\^40 .*got t/s = 1099511627777/1"):
        discrete_laplace(bits, MAX_LAPLACE_NUMERATOR + 1, 1, 3)
    assert discrete_laplace(bits, 2 * MAX_LAPLACE_NUMERATOR, 2, 3).shape == (3,)  # reduced first
    with pytest.raises(TypeError, match="t must be an integer, got 1.5"):
        discrete_laplace(bits, 1.5, 1, 3)
    with pytest.raises(ValueError, match="s must be an integer >= 1, got 0"):
        discrete_laplace(bits, 1, 0, 3)
    with pytest.raises(ValueError, match="num must be <= den .*got num=3 and den=2"):
        bernoulli(bits, 3, 2, 1)
    with pytest.raises(ValueError, match="num must be <= den .*got num=3 and den=2"):
        bernoulli(bits, np.array([1, 3]), 2, 2)
    with pytest.raises(ValueError, match="den must be an integer >= 1, got 0"):
        bernoulli_exp(bits, 1, 0, 1)
    with pytest.raises(ValueError, match=r"n must be an integer <= 9223372036854775808, got 9223372036854775809"):
        uniform_below(bits, (1 << 63) + 1, 1)
    with pytest.raises(ValueError, match=r"n must be integers in \[1, 9223372036854775808\], got 0"):
        uniform_below(bits, np.array([3, 0]), 2)
    with pytest.raises(TypeError, match="n must be integers, got an array of dtype float64"):
        uniform_below(bits, np.array([3.0]), 1)
    with pytest.raises(TypeError, match="size must be an integer or a tuple of integers, got 2.0"):
        uniform_below(bits, 3, 2.0)
    with pytest.raises(ValueError, match="sigma must be below 2\\^40"):
        discrete_gaussian(bits, 1 << 81, 1, 1)
    with pytest.raises(ValueError, match="must return 4 uint64 words"):
        uniform_below(ScriptedBitsWrongDtype(), 3, 8)


class ScriptedBitsWrongDtype:
    def words(self, n):
        return np.zeros(n, dtype=np.int64)


# -- bit sources ---------------------------------------------------------------------------------


def test_seeded_bits_replay_and_stream_continuity():
    a, b = SeededBits(seed=42), SeededBits(seed=42)
    first = a.words(1000)
    assert first.dtype == np.uint64 and np.array_equal(first, b.words(1000))
    assert np.array_equal(np.concatenate([a.words(3), a.words(5)]), b.words(8))
    assert not np.array_equal(SeededBits(seed=43).words(8), SeededBits(seed=42).words(8))
    assert int(first.max()) >= 1 << 63  # full 64-bit words


def test_keyed_bits_follow_the_documented_construction():
    """Word i is bytes 8i..8i+7 (little-endian) of ChaCha20 under HMAC-SHA256(key, domain + identity)."""
    key, identity = bytes(range(32)), ("stream", 7, b"\x00")
    subkey = hmac.new(key, b"dpstream.noise.KeyedBits/v1\x00" + encode_identity(identity), hashlib.sha256).digest()
    stream = Cipher(algorithms.ChaCha20(subkey, bytes(16)), mode=None).encryptor().update(bytes(8 * 10_000))
    want = np.frombuffer(stream, dtype="<u8").astype(np.uint64)
    source = KeyedBits(key=key, identity=identity)
    got = np.concatenate([source.words(k) for k in (1, 0, 4095, 3, 5000, 901)])  # across buffer refills
    assert np.array_equal(got, want)


def test_keyed_bits_reproducible_per_identity_and_independent_across_identities_and_keys():
    key, other_key = b"k" * 32, b"K" * 32
    base = KeyedBits(key=key, identity=("counts", 1))
    words = base.words(4096)
    assert np.array_equal(base.for_identity(("counts", 1)).words(4096), words)
    assert np.array_equal(KeyedBits(key=key, identity=("counts", 1)).words(4096), words)
    others = [
        base.for_identity(("counts", 2)),
        base.for_identity(("counts", "1")),
        base.for_identity((("counts", 1),)),
        base.for_identity("counts1"),
        KeyedBits(key=other_key, identity=("counts", 1)),
    ]
    for other in others:
        assert np.count_nonzero(other.words(4096) == words) == 0  # equal words: probability 2^-52
    assert "kkkk" not in repr(base) and "<secret>" in repr(base)
    noise = ExactNoise(bits=KeyedBits(key=key, identity="tree-3"))
    assert np.array_equal(noise.laplace_units(Fraction(7, 2), 100),
                          ExactNoise(bits=KeyedBits(key=key, identity="tree-3")).laplace_units(Fraction(7, 2), 100))


def test_identity_encoding_is_unambiguous_and_typed():
    identities = [("ab", "c"), ("a", "bc"), "abc", b"abc", (("abc",),), ("abc",), 0, -1, 255, (), ((),), (0,), ("",)]
    encoded = [encode_identity(i) for i in identities]
    assert len(set(encoded)) == len(identities)
    assert encode_identity(np.int64(5)) == encode_identity(5)
    assert encode_identity(-1) == b"i" + (1).to_bytes(8, "big") + b"\xff"
    for bad in (True, 1.5, None, ["a"]):
        with pytest.raises(TypeError, match="identity must be bytes, a str, an int or a tuple"):
            encode_identity(bad)
    with pytest.raises(ValueError, match="key must be at least 16 bytes .*got 8 bytes"):
        KeyedBits(key=b"12345678", identity=1)
    with pytest.raises(TypeError, match="key must be bytes, got str"):
        KeyedBits(key="a" * 32, identity=1)
    assert len(KeyedBits.new_key()) == 32


def test_system_bits_blocks_and_large_requests():
    source = SystemBits(block_words=16)
    small = [source.words(5) for _ in range(10)]  # several refills
    large = source.words(100)  # read directly
    for w in small + [large]:
        assert w.dtype == np.uint64
    assert large.shape == (100,) and np.unique(large).size == 100
    assert np.unique(np.concatenate(small)).size == 50
    with pytest.raises(ValueError, match="block_words must be an integer >= 1, got 0"):
        SystemBits(block_words=0)
    with pytest.raises(ValueError, match="number of words must be an integer >= 0, got -1"):
        source.words(-1)


def test_system_bits_says_when_the_os_source_fails(monkeypatch):
    def broken(n):
        raise NotImplementedError("no source")

    monkeypatch.setattr(os, "urandom", broken)
    with pytest.raises(RuntimeError, match=r"random source \(os.urandom\) cannot be read: no source"):
        SystemBits()


def test_make_bits():
    assert isinstance(make_bits(None), SystemBits)
    assert isinstance(make_bits(5), SeededBits) and make_bits(np.int64(5)).seed == 5
    rng = np.random.default_rng(0)
    wrapped = make_bits(rng)
    assert isinstance(wrapped, GeneratorBits) and wrapped.generator is rng
    source = SeededBits(seed=1)
    assert make_bits(source) is source
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -3"):
        make_bits(-3)
    for bad in ("7", 1.0, True):
        with pytest.raises(TypeError, match="seed must be None, an integer >= 0, a numpy Generator or a bit source"):
            make_bits(bad)


# -- noise objects -------------------------------------------------------------------------------


def test_noise_objects_follow_the_protocol():
    for noise in (ExactNoise(bits=0), FloatNoise(rng=0), ZeroNoise()):
        assert isinstance(noise, NoiseSampler)
    assert make_noise(None, np.random.default_rng(0)).rng is not None
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        make_noise("laplace", np.random.default_rng(0))
    with pytest.raises(ValueError, match="a generator"):
        make_noise(None, None)


def test_exact_noise_draws_the_discrete_laplace_of_the_scale():
    got = ExactNoise(bits=SeededBits(seed=9)).laplace_units(Fraction(10, 4), (10, 3))
    want = discrete_laplace(SeededBits(seed=9), 5, 2, (10, 3))
    assert got.dtype == np.int64 and np.array_equal(got, want)
    assert ExactNoise(bits=1).laplace_units(3, 4).shape == (4,)
    with pytest.raises(NotImplementedError, match="laplace_units"):
        ExactNoise(bits=1).laplace(1.0, 3)
    with pytest.raises(TypeError, match=r"scale must be an exact rational .*got 0.5"):
        ExactNoise(bits=1).laplace_units(0.5, 3)
    with pytest.raises(ValueError, match="scale must be > 0, got -1/2"):
        ExactNoise(bits=1).laplace_units(Fraction(-1, 2), 3)


def test_float_noise_is_todays_float_noise():
    a = FloatNoise(rng=np.random.default_rng(5)).laplace(2.5, (4, 3))
    assert np.array_equal(a, laplace_noise(np.random.default_rng(5), 2.5, (4, 3)))
    b = FloatNoise(rng=np.random.default_rng(5)).laplace_units(Fraction(5, 2), 7)
    assert b.dtype == np.int64 and np.array_equal(b, double_geometric_noise(np.random.default_rng(5), 2.5, 7))


def test_zero_noise_checks_the_scale_and_returns_zeros():
    zero = ZeroNoise()
    units, floats = zero.laplace_units(Fraction(1, 3), (2, 3)), zero.laplace(0.5, 4)
    assert units.dtype == np.int64 and units.shape == (2, 3) and not units.any()
    assert floats.dtype == np.float64 and floats.shape == (4,) and not floats.any()
    with pytest.raises(ValueError, match="Laplace scale must be a finite number > 0, got 0.0"):
        zero.laplace(0.0, 3)
    with pytest.raises(ValueError, match="scale must be > 0, got 0"):
        zero.laplace_units(0, 3)
    with pytest.raises(TypeError, match="Laplace scale must be a real number, got '1'"):
        zero.laplace("1", 3)
