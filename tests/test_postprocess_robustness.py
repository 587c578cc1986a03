"""Review fixes of the MAP post-processing: the optimality certificate on degenerate rows,
the sensitivity of the likelihood, and reporting steps the solver did not close."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.postprocess import FORMS, kkt_residual, map_solve


def test_degenerate_row_gets_a_valid_multiplier():
    # No count moves, the second is held at 0 below its noisy value 1, and the noisy values
    # sum to n exactly: [20, 0] is optimal and some multiplier certifies it.
    noisy, marginals = np.array([[20.0, 1.0]]), np.array([[0.99, 0.01]])
    estimate = map_solve(noisy, marginals, users=20, epsilon=5)
    np.testing.assert_array_equal(estimate.counts, [[20.0, 0.0]])
    assert kkt_residual(estimate.counts, noisy, marginals, np.array([1.0]), epsilon=5) == 0.0
    assert estimate.kkt_residual <= 1e-12
    assert kkt_residual(estimate.counts, noisy, marginals, estimate.multipliers, epsilon=5) <= 1e-12


@pytest.mark.parametrize("form", FORMS)
def test_integer_noisy_counts_get_a_certificate(form):
    # Integer noisy counts put many rows exactly on kinks; half the rows sum to n exactly.
    rng = np.random.default_rng(7)
    for _ in range(12):
        m, users = int(rng.integers(2, 6)), int(rng.integers(1, 40))
        epsilon = float(rng.choice([0.3, 1.0, 2.0, 5.0, 20.0]))
        marginals = rng.dirichlet(np.ones(m), size=200)
        truth = np.array([rng.multinomial(users, row) for row in marginals], dtype=np.float64)
        noisy = truth + np.rint(rng.laplace(0.0, 2.0 / epsilon, truth.shape))
        exact = rng.random(200) < 0.5
        noisy[exact, -1] += users - noisy[exact].sum(axis=1)
        estimate = map_solve(noisy, marginals, users=users, epsilon=epsilon, form=form)
        assert np.all(estimate.counts >= 0)
        assert estimate.sum_residual <= 64e-12 * users
        assert estimate.kkt_residual <= 1e-9, (m, users, epsilon)
