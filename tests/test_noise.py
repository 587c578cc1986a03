"""The Laplace primitive and report-noisy-max (``dpstream.noise.laplace``).

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

import numpy as np
import pytest

from dpstream.noise import laplace_noise, laplace_variance, report_noisy_max

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


def frequency_of_first(scores, epsilon, trials, seed, **kwargs) -> float:
    rng = np.random.default_rng(seed)
    picks = [report_noisy_max(rng, scores, epsilon, **kwargs) for _ in range(trials)]
    return float(np.mean(np.array(picks) == 0))


@pytest.mark.parametrize(
    "kwargs, beta",
    [
        ({"monotone": True}, 1.0),  # Lap(sensitivity / eps)
        ({"monotone": False}, 2.0),  # Lap(2 sensitivity / eps)
        ({"monotone": True, "sensitivity": 2.0}, 2.0),
        ({"monotone": False, "sensitivity": 0.5}, 1.0),
    ],
)
def test_report_noisy_max_noise_scale(kwargs, beta):
    """Two scores 0 and d: index 0 wins with probability P(X0 - X1 > d), a function of the scale.

    With eps = 1, d = 1 the two candidate scales give 0.276 (beta=1) and 0.379 (beta=2); the
    Hoeffding half-width at 20,000 trials is 0.023, so a wrong scale cannot pass.
    """
    d, epsilon, trials = 1.0, 1.0, 20_000
    expected = difference_tail(d, beta)
    other = difference_tail(d, 3.0 - beta)  # the scale this case must NOT have
    assert abs(expected - other) > 2 * hoeffding(trials)
    freq = frequency_of_first(np.array([0.0, d]), epsilon, trials, seed=5, **kwargs)
    assert abs(freq - expected) <= hoeffding(trials)


def test_report_noisy_max_scale_is_inverse_in_epsilon():
    """Doubling epsilon halves the scale: scores (0, d) at eps behave like (0, 2d) at eps / 2...
    equivalently, P(pick 0) at (d=1, eps=2, monotone) = difference_tail(1, 1/2)."""
    trials = 20_000
    freq = frequency_of_first(np.array([0.0, 1.0]), 2.0, trials, seed=6, monotone=True)
    assert abs(freq - difference_tail(1.0, 0.5)) <= hoeffding(trials)


def test_report_noisy_max_picks_clear_winner_and_returns_int():
    rng = np.random.default_rng(0)
    for winner in range(5):
        scores = np.zeros(5)
        scores[winner] = 1e6
        index = report_noisy_max(rng, scores, 1.0)
        assert type(index) is int and index == winner


def test_report_noisy_max_uniform_over_equal_scores():
    """Equal scores: each of k indices with probability 1/k (exchangeable noise)."""
    k, trials = 4, 20_000
    rng = np.random.default_rng(8)
    picks = np.array([report_noisy_max(rng, np.zeros(k), 0.7, monotone=True) for _ in range(trials)])
    counts = np.bincount(picks, minlength=k) / trials
    assert np.all(np.abs(counts - 1.0 / k) <= hoeffding(trials, ALPHA / k))


def test_report_noisy_max_is_the_argmax_of_scores_plus_generator_laplace():
    scores = np.array([0.3, -1.0, 0.9, 0.1])
    for seed in range(20):
        expected = int(np.argmax(scores + np.random.default_rng(seed).laplace(0.0, 1.0 / 0.8, scores.size)))
        assert report_noisy_max(np.random.default_rng(seed), scores, 0.8, monotone=True) == expected


@pytest.mark.parametrize("scores", [np.array([]), np.zeros((2, 2)), 3.0])
def test_report_noisy_max_rejects_bad_scores(scores):
    with pytest.raises(ValueError, match="scores must be a non-empty 1-D array"):
        report_noisy_max(np.random.default_rng(0), scores, 1.0)


@pytest.mark.parametrize("epsilon, error", [(0.0, ValueError), (-1.0, ValueError), ("1", TypeError), (True, TypeError)])
def test_report_noisy_max_rejects_bad_epsilon(epsilon, error):
    with pytest.raises(error, match="epsilon"):
        report_noisy_max(np.random.default_rng(0), np.zeros(3), epsilon)
