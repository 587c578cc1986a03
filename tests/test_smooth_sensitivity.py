"""Smooth sensitivity of a quantile (fast vs the paper's formula), S-P and S-PAK."""

import copy
import math

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import FloatNoise, ZeroNoise
from dpstream.noise.source import NoiseSource
from dpstream.thresholds.smooth_sensitivity import (
    admissible_parameters,
    noise_inverse_cdf,
    pak_kappa,
    pak_threshold,
    quantile_rank,
    smooth_quantile_threshold,
    smooth_sensitivity_quantile,
)


def direct_smooth_sensitivity(values, percentile, upper_bound, b):
    """The formula of PAK Section IV-C / ToPS Appendix B, literally, in O(m^2)."""
    v = np.sort(values)
    m, rank = v.size, quantile_rank(v.size, percentile)

    def at(i):
        return 0.0 if i < 1 else (upper_bound if i > m else v[i - 1])

    return max(
        math.exp(-b * k) * max(at(rank + t) - at(rank + t - k - 1) for t in range(k + 2)) for k in range(m + 2)
    )


@pytest.mark.parametrize("seed", range(8))
def test_fast_smooth_sensitivity_equals_the_direct_formula(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        m = int(rng.integers(1, 60))
        values = rng.integers(0, 12, m).astype(float) if rng.random() < 0.5 else rng.uniform(0, 50, m)
        percentile = float(rng.choice([0.0, 50.0, 95.0, 99.5, 100.0, rng.uniform(0, 100)]))
        b = float(rng.choice([1e-5, 1e-3, 0.05, 0.5, 2.0]))
        fast = smooth_sensitivity_quantile(values, percentile, 50.0, b)
        assert fast == pytest.approx(direct_smooth_sensitivity(values, percentile, 50.0, b), rel=1e-12, abs=1e-12)


def test_smooth_sensitivity_is_a_smooth_upper_bound_on_local_sensitivity():
    # Definition 9: SS >= LS (the k = 0 term) and SS(V) <= e^b SS(V') for neighbours V, V'.
    rng = np.random.default_rng(4)
    b = 0.1
    for _ in range(200):
        values = rng.uniform(0, 10, 30)
        neighbour = values.copy()
        neighbour[rng.integers(30)] = rng.uniform(0, 10)
        ss, ss_neighbour = (smooth_sensitivity_quantile(v, 90, 10.0, b) for v in (values, neighbour))
        assert ss <= math.exp(b) * ss_neighbour + 1e-12
        rank = quantile_rank(30, 90)
        padded = np.concatenate(([0.0], np.sort(values), [10.0]))
        assert ss >= max(padded[rank + 1] - padded[rank], padded[rank] - padded[rank - 1]) - 1e-12


def test_admissible_parameters_and_inverse_cdfs_match_their_formulas():
    a, b = admissible_parameters("laplace", 0.4, 1e-8)
    assert a == 0.2 and b == pytest.approx(0.4 / (2 * math.log(2e8)))
    a, b = admissible_parameters("gaussian", 0.4, 1e-8)
    assert a == pytest.approx(0.4 / (5 * math.sqrt(2 * math.log(2e8))))
    assert b == pytest.approx(0.4 / (4 * (1 + math.log(2e8))))
    for beta in (0.006, 0.02, 0.3):
        assert noise_inverse_cdf("laplace", 1 - beta) == pytest.approx(-math.log(2 * beta))
        assert noise_inverse_cdf("gaussian", 1 - beta) == pytest.approx(stats.norm.ppf(1 - beta))


def test_kappa_is_eq_11_and_refuses_a_non_positive_denominator():
    a, b, offset = 0.3, 0.02, -math.log(2 * 0.006)
    assert pak_kappa(a, b, offset) == pytest.approx(1 / (1 - (math.exp(b) - 1) * offset / a))
    with pytest.raises(ValueError, match="kappa"):
        pak_kappa(0.01, 0.5, 4.0)


def test_pak_threshold_is_eq_12_times_r():
    """Float path (the studies'): Eq. 12 times r with numpy's float Laplace draw."""
    values = np.random.default_rng(2).geometric(0.1, 3000).astype(float)
    rng = np.random.default_rng(9)
    twin = copy.deepcopy(rng)
    tau = pak_threshold(values, epsilon=0.5, delta=1e-9, upper_bound=500, sampler=FloatNoise(rng=rng), beta=0.01,
                        multiplier=1.7)
    a, b = admissible_parameters("laplace", 0.5, 1e-9)
    offset = -math.log(0.02)
    ss = smooth_sensitivity_quantile(values, 99.575, 500, b)
    estimate = np.sort(values)[quantile_rank(3000, 99.575) - 1]
    expected = 1.7 * (estimate + pak_kappa(a, b, offset) * ss / a * (twin.laplace(0, 1) + offset))
    assert tau == pytest.approx(expected)


def test_exact_pak_threshold_is_eq_12_times_r_rounded_up_to_the_grid():
    """Exact path: with Z = 0 (ZeroNoise) tau is ceil(center / g) g, center = r (x^ + kappa SS / a
    G^-1(1 - beta)) and g = 2^-12 (the largest power of two <= 500 / 2^20)."""
    values = np.random.default_rng(2).geometric(0.1, 3000).astype(float)
    tau = pak_threshold(values, epsilon=0.5, delta=1e-9, upper_bound=500, sampler=ZeroNoise(), beta=0.01,
                        multiplier=1.7)
    a, b = admissible_parameters("laplace", 0.5, 1e-9)
    offset = -math.log(0.02)
    center = 1.7 * (np.sort(values)[quantile_rank(3000, 99.575) - 1]
                    + pak_kappa(a, b, offset) * smooth_sensitivity_quantile(values, 99.575, 500, b) / a * offset)
    g = 2.0**-12
    assert tau == math.ceil(center / g) * g and 0 <= tau - center < g
    coarse = pak_threshold(values, epsilon=0.5, delta=1e-9, upper_bound=500, sampler=ZeroNoise(), beta=0.01,
                           multiplier=1.7, granularity=0.5)
    assert coarse == math.ceil(center / 0.5) * 0.5


def test_pak_threshold_falls_below_the_estimate_with_probability_beta():
    """Exact path: tau = ceil((center + sigma Z) / g) g is below the (integer, on-grid) estimate
    x^ exactly when center + sigma Z <= x^ - g, i.e. Z <= -G^-1(1 - beta) - g / sigma, probability
    beta exp(-g / sigma) for Laplace(1); 3000 draws, 5-sigma band."""
    values = np.random.default_rng(3).geometric(0.2, 400).astype(float)
    estimate = np.sort(values)[quantile_rank(400, 99.575) - 1]
    noise = NoiseSource(seed=0).sampler()
    draws = np.array([pak_threshold(values, epsilon=1.0, delta=1e-6, upper_bound=100, sampler=noise, beta=0.05,
                                    multiplier=1.0) for _ in range(3000)])
    assert np.all(draws / 2.0**-20 == np.rint(draws / 2.0**-20))  # on the grid of 100: 2^-20
    a, b = admissible_parameters("laplace", 1.0, 1e-6)
    offset = noise_inverse_cdf("laplace", 0.95)
    sigma = pak_kappa(a, b, offset) * smooth_sensitivity_quantile(values, 99.575, 100, b) / a
    p = 0.5 * math.exp(-(offset + 2.0**-20 / sigma))
    assert abs(p - 0.05) < 1e-6
    rate = np.mean(draws < estimate)
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / 3000)


def test_s_p_adds_symmetric_noise_of_scale_ss_over_a():
    values = np.random.default_rng(5).uniform(0, 10, 500)
    rng = np.random.default_rng(1)
    twin = copy.deepcopy(rng)
    theta = smooth_quantile_threshold(values, epsilon=0.2, delta=1e-6, upper_bound=10, sampler=FloatNoise(rng=rng))
    a, b = admissible_parameters("laplace", 0.2, 1e-6)
    estimate = np.sort(values)[quantile_rank(500, 99.5) - 1]
    assert theta == pytest.approx(estimate + smooth_sensitivity_quantile(values, 99.5, 10, b) / a * twin.laplace(0, 1))
    # exact path: Z = 0 gives the estimate rounded up to the grid 2^-17 of the bound 10
    exact = smooth_quantile_threshold(values, epsilon=0.2, delta=1e-6, upper_bound=10, sampler=ZeroNoise())
    assert exact == math.ceil(estimate / 2.0**-17) * 2.0**-17


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="percentile"):
        quantile_rank(10, 101)
    with pytest.raises(ValueError, match="values"):
        smooth_sensitivity_quantile(np.array([1.0, 20.0]), 50, 10.0, 0.1)
    with pytest.raises(ValueError, match="noise"):
        admissible_parameters("cauchy", 1.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        admissible_parameters("laplace", 1.0, 1.0)
    with pytest.raises(ValueError, match="multiplier"):
        pak_threshold(np.ones(10), epsilon=1.0, delta=1e-6, upper_bound=2, seed=0, multiplier=0.5)
    gaussian = dict(epsilon=5.0, delta=1e-3, upper_bound=2, beta=0.3, noise="gaussian")  # admissible parameters
    with pytest.raises(ValueError, match="noise='gaussian' is float-only"):
        pak_threshold(np.ones(10), seed=0, **gaussian)
    with pytest.raises(ValueError, match="noise='gaussian' is float-only"):
        smooth_quantile_threshold(np.ones(10), epsilon=1.0, delta=1e-6, upper_bound=2, noise="gaussian")
    with pytest.raises(ValueError, match="give at most one of seed and sampler"):
        pak_threshold(np.ones(10), epsilon=1.0, delta=1e-6, upper_bound=2, seed=0, sampler=ZeroNoise())
    with pytest.raises(ValueError, match="granularity must be at most the bound 2"):
        pak_threshold(np.ones(10), epsilon=1.0, delta=1e-6, upper_bound=2, seed=0, granularity=3.0)
    assert math.isfinite(pak_threshold(np.ones(10), sampler=FloatNoise(rng=np.random.default_rng(0)), **gaussian))
