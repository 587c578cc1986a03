"""The exact per-step posterior mean (``dpstream.postprocess.exact_posterior``) against enumeration.

On ``{sum r = n}`` the posterior is ``prod_l w_l(r_l)`` with ``ln w_l(k) = log_weight(k, ...)``;
for a few users and three cells every count vector can be listed and the mean computed directly.
The windows drop weights below ``exp(-50)`` of a cell's largest, so the two agree to ~1e-12.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpstream.postprocess.exact_posterior import EXACT_MAX_COST, exact_cost, exact_means, log_weight, weight_windows


def _enumerated_means(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int,
                      quad: np.ndarray) -> np.ndarray:
    vectors = np.array([r for r in itertools.product(range(users + 1), repeat=log_rate.size) if sum(r) == users])
    log_w = log_weight(vectors.astype(np.float64), log_rate, noisy, scale, quad).sum(axis=1)
    weight = np.exp(log_w - log_w.max())
    return (weight[:, None] * vectors).sum(axis=0) / weight.sum()


@pytest.mark.parametrize("users, scale", [(7, 0.8), (12, 2.5), (20, 10.0)])
def test_exact_means_equal_the_enumerated_posterior_mean(users, scale):
    rng = np.random.default_rng(users)
    steps, m = 4, 3
    marginals = rng.dirichlet(np.ones(m), size=steps)
    noisy = rng.integers(-3, users + 4, size=(steps, m)).astype(np.float64)
    quad = np.where(np.arange(steps)[:, None] % 2 == 1, 0.3, 0.0) * np.ones((steps, m))  # Gaussian factor: odd steps
    log_rate = np.log(users * marginals)
    lo, hi = weight_windows(log_rate, noisy, scale, users, quad)
    assert np.all((0 <= lo) & (lo <= hi) & (hi <= users))
    cost = exact_cost(lo, hi, users)
    assert np.all(cost > 0) and np.all(cost <= EXACT_MAX_COST)
    means = exact_means(log_rate, noisy, scale, users, lo, hi, cost, quad)
    for t in range(steps):
        expected = _enumerated_means(log_rate[t], noisy[t], scale, users, quad[t])
        np.testing.assert_allclose(means[t], expected, rtol=1e-9, atol=1e-9)
        assert means[t].sum() == pytest.approx(users, rel=1e-12)


def test_a_cell_of_rate_zero_holds_no_one():
    log_rate = np.array([[np.log(5.0), -np.inf, np.log(5.0)]])  # the middle cell has rate 0
    noisy = np.array([[4.0, 3.0, 6.0]])
    lo, hi = weight_windows(log_rate, noisy, 1.0, 10)
    assert lo[0, 1] == hi[0, 1] == 0
    means = exact_means(log_rate, noisy, 1.0, 10, lo, hi, exact_cost(lo, hi, 10))
    assert means[0, 1] == 0.0 and means[0].sum() == pytest.approx(10.0, rel=1e-12)
