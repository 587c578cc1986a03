"""Count-of-counts noise hardening: the integer estimate of ``K`` and the sampler's scale limit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.count_of_counts import estimate_max_size
from dpstream.noise import double_geometric_pmf
from dpstream.noise.geometric import MAX_SCALE, double_geometric_noise

ALPHA = 1e-9  # failure probability of each statistical assertion


def _margin(epsilon: float) -> int:
    return math.ceil(5.0 * math.sqrt(2.0) / epsilon)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_estimated_max_size_is_x_plus_double_geometric_noise_plus_margin(epsilon):
    # K - X - margin must follow DGeom(1/epsilon) (the geometric mechanism, Section 3.2), not a
    # rounded-up Laplace variable: compare every cell's frequency with the pmf (Hoeffding bound).
    draws = 20_000
    rng = np.random.default_rng(11)
    largest = 10_000
    noise = np.array([estimate_max_size(largest, epsilon, rng) for _ in range(draws)]) - largest - _margin(epsilon)
    cells = np.arange(-4, 5)
    frequency = (noise[:, None] == cells).mean(axis=0)
    tolerance = math.sqrt(math.log(2 * cells.size / ALPHA) / (2 * draws))
    assert np.abs(frequency - double_geometric_pmf(cells, 1.0 / epsilon)).max() < tolerance


@pytest.mark.parametrize("epsilon", [1e-6, 1e-4, 0.01, 0.1, 1.0, 5.0, 50.0])
def test_the_margin_keeps_pr_k_at_least_x_above_0_9995(epsilon):
    # Pr[K < X] = Pr[N < -margin] = a^(margin + 1) / (1 + a), a = exp(-epsilon)
    a = math.exp(-epsilon)
    miss = a ** (_margin(epsilon) + 1) / (1 + a)
    assert miss < 5e-4
    # the same tail summed from the pmf where it is short enough to enumerate
    if epsilon >= 0.01:
        k = np.arange(-(_margin(epsilon) + 1) - int(200 / epsilon), -_margin(epsilon))
        assert float(double_geometric_pmf(k, 1.0 / epsilon).sum()) == pytest.approx(miss, rel=1e-9)


def test_estimated_max_size_is_an_exact_integer_for_huge_groups():
    # integer arithmetic throughout: float64 would round every K near 2^60 to a multiple of 256,
    # so K - X would be the same for every draw.  Pr[|N| > 60] < 1e-25 at epsilon = 1.
    largest = 2**60 + 1
    rng = np.random.default_rng(0)
    bounds = [estimate_max_size(largest, 1.0, rng) for _ in range(50)]
    assert all(isinstance(bound, int) for bound in bounds)
    residuals = {bound - largest - _margin(1.0) for bound in bounds}
    assert residuals <= set(range(-60, 61)) and len(residuals) > 1


def test_absurdly_small_epsilon_is_refused_not_overflowed():
    rng = np.random.default_rng(0)
    draws = double_geometric_noise(rng, MAX_SCALE, 1000)
    assert draws.dtype == np.int64 and np.abs(draws).max() < 2**62
    with pytest.raises(ValueError, match=r"scale must be at most 1e\+15.*got 1e\+19 \(epsilon / sensitivity = 1e-19\)"):
        double_geometric_noise(rng, 1e19, 3)
    with pytest.raises(ValueError, match="1e-17"):
        estimate_max_size(100, 1e-17, rng)
