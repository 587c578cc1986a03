"""The float Laplace primitive (studies) and report-noisy-max on exact noise (``dpstream.noise.laplace``).

Statistical checks use bounds written out from the distribution:

* Lap(beta): mean 0, variance 2 beta^2, fourth central moment 24 beta^4, and |X| ~ Exp(beta)
  (mean beta, variance beta^2).  For n draws the sample mean has sd sqrt(2 beta^2 / n), the
  sample variance has sd ~ sqrt((24 - 4) beta^4 / n), the mean of |X| has sd beta / sqrt(n).
  We allow 6 sd (two-sided normal tail ~2e-9).
* The whole CDF: by the Dvoretzky-Kiefer-Wolfowitz inequality
  P(sup |F_n - F| > t) <= 2 exp(-2 n t^2); t = sqrt(ln(2 / alpha) / (2 n)) with alpha = 1e-9.
* Frequencies: Hoeffding, |p_hat - p| <= sqrt(ln(2 / alpha) / (2 n)) with alpha = 1e-9.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpstream.noise import FloatNoise, laplace_noise, laplace_variance, report_noisy_max_counts
from dpstream.noise.laplace import noisy_max_epsilon, noisy_max_scale
from dpstream.noise.source import NoiseSource

ALPHA = 1e-9  # failure probability allowed for each statistical assertion


def hoeffding(n: int, alpha: float = ALPHA) -> float:
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))


def laplace_cdf(x: np.ndarray, beta: float) -> np.ndarray:
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0) / beta), 1.0 - 0.5 * np.exp(-np.maximum(x, 0) / beta))


def test_laplace_variance_formula():
    assert laplace_variance(1.0) == 2.0
    assert laplace_variance(3.0) == 18.0
    assert laplace_variance(0.5) == 0.5


@pytest.mark.parametrize("beta", [0.3, 2.0, 50.0])
def test_laplace_moments_and_distribution(beta):
    n = 200_000
    x = laplace_noise(np.random.default_rng(11), beta, n)
    assert x.shape == (n,) and x.dtype == np.float64
    sigma2 = laplace_variance(beta)
    # mean
    assert abs(x.mean()) <= 6 * math.sqrt(sigma2 / n)
    # variance: sd of the sample variance ~ sqrt((mu4 - sigma^4) / n) = beta^2 sqrt(20 / n)
    assert abs(x.var() - sigma2) <= 6 * beta**2 * math.sqrt(20.0 / n)
    # E|X| = beta, Var|X| = beta^2: pins the scale independently of the variance check
    assert abs(np.abs(x).mean() - beta) <= 6 * beta / math.sqrt(n)
    # the whole distribution (DKW)
    xs = np.sort(x)
    cdf = laplace_cdf(xs, beta)
    empirical_hi = np.arange(1, n + 1) / n
    empirical_lo = np.arange(0, n) / n
    sup = max(np.max(np.abs(empirical_hi - cdf)), np.max(np.abs(empirical_lo - cdf)))
    assert sup <= hoeffding(n)


def test_laplace_shapes_and_reproducibility():
    a = laplace_noise(np.random.default_rng(4), 1.5, (3, 5))
    b = laplace_noise(np.random.default_rng(4), 1.5, (3, 5))
    assert a.shape == (3, 5)
    np.testing.assert_array_equal(a, b)
    # It is exactly numpy's Laplace(0, scale) stream (so draw order is the generator's order).
    np.testing.assert_array_equal(a, np.random.default_rng(4).laplace(0.0, 1.5, (3, 5)))


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan])
def test_laplace_rejects_nonpositive_scale(scale):
    with pytest.raises(ValueError, match="Laplace scale must be > 0"):
        laplace_noise(np.random.default_rng(0), scale, 3)


# -- report noisy max --------------------------------------------------------------------------


def difference_tail(d: float, beta: float) -> float:
    """P(X0 - X1 > d) for iid Lap(beta), d >= 0.

    X0 - X1 has density (1 / 4 beta) (1 + |z| / beta) exp(-|z| / beta); integrating from d:
    (1/4) exp(-d / beta) (2 + d / beta).
    """
    return 0.25 * math.exp(-d / beta) * (2.0 + d / beta)


def discrete_difference_at_least(d: int, scale: float) -> float:
    """P(Z0 - Z1 >= d) for iid discrete Laplace of ``scale`` (pmf tanh(1/2s) exp(-|z|/s)), summed
    over |z| <= 60 scales (the rest has mass below 1e-24)."""
    z = np.arange(-int(60 * scale) - 60, int(60 * scale) + 61)
    pmf = math.tanh(0.5 / scale) * np.exp(-np.abs(z) / scale)
    difference = np.convolve(pmf, pmf[::-1])  # support -2L .. 2L
    support = np.arange(-2 * z[-1], 2 * z[-1] + 1)
    return float(difference[support >= d].sum())


def frequency_of_first(counts, epsilon, trials, seed, **kwargs) -> float:
    noise = NoiseSource(seed=seed).sampler()
    picks = [report_noisy_max_counts(noise, counts, epsilon, **kwargs) for _ in range(trials)]
    return float(np.mean(np.array(picks) == 0))


@pytest.mark.parametrize(
    "kwargs, scale",
    [
        ({"monotone": True}, 1.0),  # discrete Laplace of scale sensitivity / eps
        ({"monotone": False}, 2.0),  # of scale 2 sensitivity / eps
        ({"monotone": True, "sensitivity": 2}, 2.0),
    ],
)
def test_report_noisy_max_noise_scale(kwargs, scale):
    """Two counts 0 and 1: index 0 wins when Z0 - Z1 >= 1 (ties go to the lowest index), with a
    probability that depends on the scale: 0.300 at scale 1, 0.377 at scale 2.  The Hoeffding
    half-width at 20,000 trials is 0.023, so a wrong scale cannot pass."""
    trials = 20_000
    expected = discrete_difference_at_least(1, scale)
    other = discrete_difference_at_least(1, 3.0 - scale)  # the scale this case must NOT have
    assert abs(expected - other) > 2 * hoeffding(trials)
    freq = frequency_of_first(np.array([0, 1]), 1.0, trials, seed=5, **kwargs)
    assert abs(freq - expected) <= hoeffding(trials)


def test_report_noisy_max_scale_is_inverse_in_epsilon():
    """At eps = 2 (monotone) the scale is 1/2: P(pick 0) for counts (0, 1) is P(Z0 - Z1 >= 1) there."""
    trials = 20_000
    freq = frequency_of_first(np.array([0, 1]), 2.0, trials, seed=6, monotone=True)
    assert abs(freq - discrete_difference_at_least(1, 0.5)) <= hoeffding(trials)


def test_report_noisy_max_scale_and_budget_are_rounded_up():
    assert noisy_max_scale(1.0, monotone=True) == 1 and noisy_max_scale(1.0) == 2
    scale = noisy_max_scale(0.3, monotone=True)  # 1 / 0.3 rounded up to a multiple of 2^-30
    assert Fraction(1) / Fraction(0.3) <= scale <= Fraction(1) / Fraction(0.3) + Fraction(1, 2**30)
    assert scale.denominator == 2**30 or scale.denominator < 2**30
    spent = noisy_max_epsilon(0.3, monotone=True)
    assert Fraction(spent) >= 1 / scale and spent <= 0.3 and spent > 0.3 * (1 - 2**-28)
    assert noisy_max_epsilon(0.3) <= 0.3


def test_report_noisy_max_picks_clear_winner_and_returns_int():
    noise = NoiseSource(seed=0).sampler()
    for winner in range(5):
        counts = np.zeros(5, dtype=np.int64)
        counts[winner] = 10**6
        index = report_noisy_max_counts(noise, counts, 1.0)
        assert type(index) is int and index == winner


def test_report_noisy_max_ties_go_to_the_lowest_index_and_offsets_compare_exactly():
    """With noise of scale 1e-3 every draw is 0 (P[Z != 0] < 1e-400): equal scores pick index 0;
    offsets subtract exactly, even where float64 would round a score (2^53 + 0.5 is 2^53 in
    float64, so a float comparison would tie and pick index 0)."""
    noise = NoiseSource(seed=1).sampler()
    assert report_noisy_max_counts(noise, np.zeros(4, dtype=np.int64), 1e3, monotone=True) == 0
    big = np.array([2**53, 2**53])
    assert report_noisy_max_counts(noise, big, 1e3, offsets=np.array([0.0, -0.5]), monotone=True) == 1
    assert float(2**53) - 0.0 == float(2**53) - -0.5  # what a float subtraction would see
    assert report_noisy_max_counts(noise, np.array([3, 3]), 1e3, offsets=np.array([0.75, 0.25]), monotone=True) == 1
    assert report_noisy_max_counts(noise, np.array([4, 3]), 1e3, offsets=np.array([0.75, 0.25]), monotone=True) == 0


def test_report_noisy_max_float_path_is_the_argmax_of_scores_plus_generator_laplace():
    scores = np.array([0.3, -1.0, 0.9, 0.1])
    for seed in range(20):
        expected = int(np.argmax(scores + np.random.default_rng(seed).laplace(0.0, 1.0 / 0.8, scores.size)))
        noise = FloatNoise(rng=np.random.default_rng(seed))
        assert report_noisy_max_counts(noise, scores, 0.8, monotone=True) == expected


def test_report_noisy_max_float_path_uniform_over_equal_scores():
    """Float path, equal scores: each of k indices with probability 1/k (exchangeable noise)."""
    k, trials = 4, 20_000
    noise = FloatNoise(rng=np.random.default_rng(8))
    picks = np.array([report_noisy_max_counts(noise, np.zeros(k), 0.7, monotone=True) for _ in range(trials)])
    counts = np.bincount(picks, minlength=k) / trials
    assert np.all(np.abs(counts - 1.0 / k) <= hoeffding(trials, ALPHA / k))


@pytest.mark.parametrize(
    "counts, match",
    [
        (np.array([], dtype=np.int64), "counts must be a non-empty 1-D array"),
        (np.zeros((2, 2), dtype=np.int64), "counts must be a non-empty 1-D array"),
        (3, "counts must be a non-empty 1-D array"),
        (np.array([0.5, 1.0]), "counts must be integers on the exact path"),
    ],
)
def test_report_noisy_max_rejects_bad_counts(counts, match):
    with pytest.raises(ValueError, match=match):
        report_noisy_max_counts(0, counts, 1.0)


def test_report_noisy_max_rejects_bad_offsets_and_sensitivities():
    with pytest.raises(ValueError, match="offsets must be finite and of shape"):
        report_noisy_max_counts(0, np.array([1, 2]), 1.0, offsets=np.array([0.0]))
    with pytest.raises(ValueError, match="offsets must be finite"):
        report_noisy_max_counts(0, np.array([1, 2]), 1.0, offsets=np.array([0.0, math.nan]))
    with pytest.raises(ValueError, match="sensitivity of integer queries must be an integer >= 1, got 0.5"):
        report_noisy_max_counts(0, np.array([1, 2]), 1.0, sensitivity=0.5)
    with pytest.raises(ValueError, match="scores must be a non-empty 1-D array"):
        report_noisy_max_counts(FloatNoise(rng=np.random.default_rng(0)), np.zeros((2, 2)), 1.0)


@pytest.mark.parametrize("epsilon, error", [(0.0, ValueError), (-1.0, ValueError), ("1", TypeError), (True, TypeError)])
def test_report_noisy_max_rejects_bad_epsilon(epsilon, error):
    with pytest.raises(error, match="epsilon"):
        report_noisy_max_counts(0, np.zeros(3, dtype=np.int64), epsilon)
