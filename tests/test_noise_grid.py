"""The public grid (``dpstream.noise.grid``) and exact grid-rounded Laplace (``dpstream.noise.rounded_laplace``).

Laws are checked with chi-square goodness-of-fit tests against probabilities computed from the
Laplace CDF, every bin with an expected count of at least 5 plus one bin for each tail; a test
fails when the statistic's p-value is below 1e-4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import SeededBits, discrete_laplace
from dpstream.noise.discrete_laplace_law import MAX_LAPLACE_NUMERATOR, laplace_units_variance
from dpstream.noise.grid import (
    ceil_units,
    check_granularity,
    choose_granularity,
    default_granularity,
    epsilon_of_scale,
    float_down,
    float_up,
    is_power_of_two,
    round_up_scale,
    rounding_variance,
    to_units,
)
from dpstream.noise.rounded_laplace import rounded_laplace

# -- floats and rationals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "x", [Fraction(1, 3), Fraction(2, 7), Fraction(10**20 + 1, 3), Fraction(1, 2), Fraction(-5, 3)]
)
def test_float_up_and_down_bracket_the_rational(x):
    up, down = float_up(x), float_down(x)
    assert Fraction(down) <= x <= Fraction(up)
    assert up == down or math.nextafter(down, math.inf) == up  # adjacent floats (or x is a float)


def test_power_of_two_and_default_grid():
    assert is_power_of_two(1.0) and is_power_of_two(2.0**-40) and is_power_of_two(2.0**60)
    assert not is_power_of_two(0.1) and not is_power_of_two(3.0) and not is_power_of_two(0.0)
    for bound in (1.0, 1657.0, 0.37, 1e9, 2.0**20, 2.0**20 - 1):
        g = default_granularity(bound)
        assert is_power_of_two(g) and g <= bound / 2**20 < 2 * g


def test_ceil_units_is_exact():
    assert ceil_units(10.0, 0.25) == 40 and ceil_units(10.1, 0.25) == 41
    assert ceil_units(0.3, 0.1) == 3  # 0.3 / 0.1 is 2.9999999999999996 as floats' exact ratio
    assert ceil_units(1e-300, 2.0**-1000) == math.ceil(Fraction(1e-300) / Fraction(2.0**-1000))


def test_to_units_rounds_to_the_nearest_multiple_ties_to_even():
    g = 0.25
    values = np.array([0.0, 0.1, 0.125, 0.375, 0.3, 1.0])
    assert to_units(values, g).tolist() == [0, 0, 0, 2, 1, 4]  # 0.125 -> 0.5 -> 0; 0.375 -> 1.5 -> 2
    assert to_units(values, g).dtype == np.int64
    assert np.max(np.abs(to_units(values, g) * g - values)) <= g / 2
    # a step that is not a power of two: the cap guards the sensitivity against v / g rounding up
    assert to_units(np.array([0.3, 0.29]), 0.1, cap=3).tolist() == [3, 3]
    assert rounding_variance(0.25) == 0.25**2 / 12


@pytest.mark.parametrize(
    "value, error, match",
    [
        (0.0, ValueError, "granularity must be a finite number > 0, got 0.0."),
        (-0.5, ValueError, "got -0.5."),
        (math.nan, ValueError, "got nan."),
        (math.inf, ValueError, "got inf."),
        (11.0, ValueError, "granularity must be at most the bound 10 .one grid step at least., got 11.0."),
        ("1", TypeError, "granularity must be a real number, got '1'."),
        (None, TypeError, "got None."),
    ],
)
def test_bad_granularity_is_one_line(value, error, match):
    with pytest.raises(error, match=match):
        check_granularity(value, 10.0)


def test_choose_granularity_coarsens_only_for_tiny_budgets():
    assert choose_granularity(None, 1657.0, units_factor=Fraction(3)) == 2.0**-10
    assert choose_granularity(0.5, 1657.0, units_factor=Fraction(3)) == 0.5  # given: checked only
    g = choose_granularity(None, 100.0, units_factor=Fraction(10**7))  # eps ~ 1e-7
    assert is_power_of_two(g) and ceil_units(100.0, g) * 10**7 <= MAX_LAPLACE_NUMERATOR // 2
    assert ceil_units(100.0, g / 2) * 10**7 > MAX_LAPLACE_NUMERATOR // 2  # the finest that fits


# -- scales and budgets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exact", [Fraction(1, 3), Fraction(3), Fraction(10**6, 7), Fraction(2**39 + 1, 3), Fraction(1, 10**9)]
)
def test_round_up_scale_is_an_upper_bound_on_a_dyadic_grid(exact):
    scale = round_up_scale(exact)
    assert scale >= exact
    assert scale.numerator <= MAX_LAPLACE_NUMERATOR
    assert scale.denominator & (scale.denominator - 1) == 0  # a power of two
    k = scale.denominator.bit_length() - 1
    assert scale - exact < Fraction(1, 2**k) and k <= 30
    # the loss of budget: at most 2^-k / exact relative
    assert epsilon_of_scale(1, scale) <= float_up(1 / exact)


def test_round_up_scale_refuses_scales_beyond_the_sampler():
    with pytest.raises(ValueError, match="noise scale is 2.199e\\+12 grid units, above the 2\\^40"):
        round_up_scale(Fraction(2**41))
    with pytest.raises(ValueError, match="must be > 0"):
        round_up_scale(Fraction(0))


def test_epsilon_of_scale_is_never_understated():
    for sensitivity, scale in [(3, Fraction(7, 2)), (1310720, Fraction(2**30 + 1, 2**8)), (1, Fraction(1, 3))]:
        eps = epsilon_of_scale(sensitivity, scale)
        assert Fraction(eps) >= Fraction(sensitivity) / scale
        assert Fraction(math.nextafter(eps, 0)) < Fraction(sensitivity) / scale


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(40, 3)])
def test_discrete_laplace_variance_closed_form(scale):
    """2a / (1 - a)^2, a = exp(-1/scale): the series sum_x x^2 pmf(x), and 2 draws' worth of data."""
    a = math.exp(-1 / float(scale))
    x = np.arange(-2000, 2001)
    pmf = (1 - a) / (1 + a) * a ** np.abs(x)
    assert laplace_units_variance(scale) == pytest.approx(float((x**2 * pmf).sum()), rel=1e-12)
    assert laplace_units_variance(scale) <= 2 * float(scale) ** 2
    draws = discrete_laplace(SeededBits(seed=1), scale.numerator, scale.denominator, 400_000).astype(float)
    fourth = float((x**4 * pmf).sum())
    sd = math.sqrt((fourth - laplace_units_variance(scale) ** 2) / draws.size)
    assert abs(draws.var() - laplace_units_variance(scale)) < 6 * sd


# -- exact grid-rounded Laplace -------------------------------------------------------------------


def laplace_cdf(z: np.ndarray) -> np.ndarray:
    return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0)), 1 - 0.5 * np.exp(-np.maximum(z, 0)))


def chi_square_p(counts: dict[int, int], probability, n: int) -> float:
    """p-value of the chi-square statistic over bins with expected count >= 5 and two tail bins."""
    keys = sorted(counts)
    ks = np.arange(keys[0] - 50, keys[-1] + 51)
    p = probability(ks)
    keep = p * n >= 5
    low, high = ks[keep][0], ks[keep][-1]
    observed = [sum(c for k, c in counts.items() if k < low)]
    expected = [float(probability(np.arange(low - 10**5, low)).sum())]
    for k in range(low, high + 1):
        observed.append(counts.get(k, 0))
        expected.append(float(probability(np.array([k]))[0]))
    observed.append(sum(c for k, c in counts.items() if k > high))
    expected.append(1.0 - sum(expected))
    observed, expected = np.array(observed, dtype=float), n * np.array(expected)
    mask = expected >= 5
    statistic = float(((observed[mask] - expected[mask]) ** 2 / expected[mask]).sum())
    return float(stats.chi2.sf(statistic, mask.sum() - 1))


@pytest.mark.parametrize(
    "center, scale, step",
    [
        (Fraction(3, 10), Fraction(1), Fraction(7, 10)),
        (Fraction(-13, 7), Fraction(5, 3), Fraction(1, 2)),
        (Fraction(0.1), Fraction(2.75), Fraction(1, 4)),  # float-valued center, as S-PAK passes
        (Fraction(5), Fraction(1, 10), Fraction(1)),  # a grid coarse against the noise
    ],
)
def test_rounded_laplace_law(center, scale, step):
    """P[k] = P[(k - 1) step < center + scale Z <= k step] for Z ~ Laplace(1), by the Laplace CDF."""
    n = 4000
    bits = SeededBits(seed=int(center * 1000) % 997)
    draws = [rounded_laplace(bits, center, scale, step) for _ in range(n)]
    counts: dict[int, int] = {}
    for k in draws:
        counts[k] = counts.get(k, 0) + 1
    c, s, g = float(center), float(scale), float(step)

    def probability(k):
        return laplace_cdf((k * g - c) / s) - laplace_cdf(((k - 1) * g - c) / s)

    assert chi_square_p(counts, probability, n) > 1e-4


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7, 10**6)])
def test_scalar_bernoulli_exp_matches_exp_minus_gamma(gamma):
    """The one-at-a-time Bernoulli(exp(-gamma)) behind rounded_laplace: within 5 binomial sds
    over 100,000 draws (seeded words read in blocks, so that the test is quick)."""
    from dpstream.noise.rounded_laplace import _bernoulli_exp

    class Blocks:
        def __init__(self, seed):
            self.inner, self.buffer = SeededBits(seed=seed), np.empty(0, dtype=np.uint64)

        def words(self, n):
            if self.buffer.size < n:
                self.buffer = np.concatenate((self.buffer, self.inner.words(1 << 16)))
            out, self.buffer = self.buffer[:n], self.buffer[n:]
            return out

    bits, n = Blocks(11), 100_000
    p = math.exp(-float(gamma))
    rate = np.mean([_bernoulli_exp(bits, gamma) for _ in range(n)])
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_rounded_laplace_edges():
    bits = SeededBits(seed=0)
    assert rounded_laplace(bits, Fraction(7, 3), Fraction(0), Fraction(1, 2)) == 5  # ceil(14 / 3)
    assert rounded_laplace(bits, 2, 0, 1) == 2  # already on the grid
    with pytest.raises(ValueError, match="step must be > 0 and scale >= 0"):
        rounded_laplace(bits, 0, 1, 0)
    with pytest.raises(ValueError, match="step must be > 0 and scale >= 0"):
        rounded_laplace(bits, 0, -1, 1)
    # a fine grid against the scale (w = 2^-20): big rationals, same law in the mean and spread
    draws = np.array([rounded_laplace(bits, Fraction(0), Fraction(1), Fraction(1, 2**20)) for _ in range(3000)])
    values = draws / 2**20
    assert abs(values.mean()) < 6 * math.sqrt(2 / 3000) and abs(values.var() - 2) < 6 * math.sqrt(20 / 3000)
