"""The double-geometric law (``dpstream.noise.discrete_laplace_law``, Definition 3 of Kuo et al.), numpy's
float sampler of it kept for studies (``dpstream.noise.float_noise``), and the exact
rational scale a mechanism draws with (``discrete_laplace_scale``).

Statistical checks use bounds derived from the distribution with failure probability
ALPHA = 1e-9 per assertion:

* Every cell frequency of the pmf: Hoeffding, |p_hat - p| <= sqrt(ln(2/alpha) / (2n)).
* The whole pmf at once: a chi-square goodness-of-fit test on the cells with expected count
  >= 5 (pooled tails), rejected only below p-value ALPHA.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import double_geometric_noise, double_geometric_pmf, double_geometric_variance
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale

ALPHA = 1e-9
N = 200_000


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, 20.0])
def test_pmf_sums_to_one_and_has_the_privacy_ratio(scale):
    k = np.arange(-4000, 4001)
    pmf = double_geometric_pmf(k, scale)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    # the ratio between neighbouring outputs is exactly e^(1/scale): epsilon-DP at scale Delta/epsilon
    near = double_geometric_pmf(np.arange(0, 60), scale)
    assert np.allclose(near[:-1] / near[1:], math.exp(1.0 / scale))
    variance = float((pmf * k.astype(float) ** 2).sum())
    assert variance == pytest.approx(double_geometric_variance(scale), rel=1e-9)
    assert double_geometric_variance(scale) < 2 * scale**2  # below the Laplace variance


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, 20.0])
def test_samples_follow_the_pmf(scale):
    rng = np.random.default_rng(11)
    draws = double_geometric_noise(rng, scale, N)
    assert draws.dtype == np.int64
    values, counts = np.unique(draws, return_counts=True)
    expected = N * double_geometric_pmf(values, scale)
    # every observed cell within Hoeffding's bound
    assert np.all(np.abs(counts / N - expected / N) <= math.sqrt(math.log(2 / ALPHA) / (2 * N)))
    # chi-square over a window with expected counts >= 5, the two tails pooled
    half = int(np.floor(scale * math.log(N * double_geometric_pmf(0, scale) / 5)))
    window = np.arange(-half, half + 1)
    observed = np.array([np.sum(draws < -half)] + [np.sum(draws == k) for k in window] + [np.sum(draws > half)])
    tail = double_geometric_pmf(half + 1, scale) / (1 - math.exp(-1 / scale))
    probs = np.concatenate(([tail], double_geometric_pmf(window, scale), [tail]))
    assert probs.sum() == pytest.approx(1.0)
    assert stats.chisquare(observed, N * probs).pvalue > ALPHA


def test_same_seed_same_noise_and_bad_scales():
    assert np.array_equal(
        double_geometric_noise(np.random.default_rng(3), 2.0, 50),
        double_geometric_noise(np.random.default_rng(3), 2.0, 50),
    )
    assert double_geometric_noise(np.random.default_rng(0), 1e-6, (2, 3)).tolist() == [[0, 0, 0], [0, 0, 0]]
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="scale"):
            double_geometric_noise(np.random.default_rng(0), bad, 3)


@pytest.mark.parametrize("sensitivity", [1, 2, 0.5, Fraction(3, 7)])
@pytest.mark.parametrize("epsilon", [1.0, 0.1, 0.3, 1e-4, 7.0, 1e-9, Fraction(1, 3), 2**-25])
def test_discrete_laplace_scale_rounds_up_to_a_multiple_of_2_to_the_minus_20(sensitivity, epsilon):
    asked = Fraction(sensitivity) / Fraction(epsilon)  # the exact quotient of the stored values
    scale = discrete_laplace_scale(sensitivity, epsilon)
    assert isinstance(scale, Fraction) and scale >= asked
    assert Fraction(sensitivity) / scale <= Fraction(epsilon)  # the guarantee: never worse than asked
    assert scale.numerator <= 2**40  # what the exact sampler takes
    step = Fraction(1, 2 ** max(0, min(20, 40 - math.ceil(math.log2(asked)))))
    assert (scale / step).denominator == 1 and scale - asked < step  # the smallest multiple of the step


def test_discrete_laplace_scale_refuses_what_cannot_be_exact():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
            discrete_laplace_scale(1, bad)
    with pytest.raises(TypeError, match="sensitivity must be a real number"):
        discrete_laplace_scale("1", 1.0)
    with pytest.raises(ValueError, match=r"at most 2\^40"):
        discrete_laplace_scale(2, 1e-12)
    assert discrete_laplace_scale(1, 2**-40) == 2**40  # the largest scale, exactly
