"""MAP and MLE post-processing: constraints, optimality conditions, agreement with scipy,
and the properties Section 5.3 of Cao et al. states."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from dpstream.postprocess import (
    FIG3_MATRIX,
    FORMS,
    LaplaceCounts,
    kkt_residual,
    laplace_scale,
    map_estimate,
    map_objective,
    map_solve,
    mle_estimate,
    postprocess,
    prior_marginals,
    round_counts,
    simulate_counts,
    smoothed_transition,
)
from dpstream.postprocess.estimators import _g, _g_slope


def _instance(users: int, steps: int, epsilon: float, s: float, seed: int):
    matrix = smoothed_transition(FIG3_MATRIX, s)
    truth = simulate_counts(matrix, users=users, steps=steps, seed=seed)
    noisy = LaplaceCounts(epsilon=epsilon, seed=seed + 1).release(truth)
    return matrix, truth, noisy


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("prior", ["frequency", "uniform"])
@pytest.mark.parametrize("users,epsilon,s", [(200, 0.02, 0.0), (200, 1.0, 0.01), (1, 1.0, 0.0), (3, 0.3, 1.0),
                                              (50, 5.0, 0.1)])
def test_map_meets_constraints_and_kkt(form, prior, users, epsilon, s):
    matrix, _, noisy = _instance(users, 120, epsilon, s, seed=5)
    estimate = map_estimate(noisy, matrix, users=users, epsilon=epsilon, prior=prior, form=form)
    assert np.all(estimate.counts >= 0)
    # Row sums: n up to the rounding of adding three to a hundred floats.
    np.testing.assert_allclose(estimate.counts.sum(axis=1), users, rtol=0, atol=1e-12 * max(users, 1) * 64)
    assert estimate.sum_residual <= 64e-12 * users
    assert estimate.kkt_residual <= 1e-9
    # The residual is recomputed independently of the solver and detects a perturbed answer.
    marginals = prior_marginals(noisy, matrix, prior)
    moved = estimate.counts.copy()
    moved[:, 0] += 0.5
    moved[:, 1] = np.maximum(moved[:, 1] - 0.5, 0)
    assert kkt_residual(moved, noisy, marginals, estimate.multipliers, epsilon=epsilon, form=form) > 1e-3


def _scipy_map(noisy_row, p_row, users, epsilon, form):
    """Reference: SLSQP on the smooth split ``r = y + u - w``, ``u, w >= 0``."""
    m = noisy_row.size
    c = 1.0 / laplace_scale(epsilon)
    log_p = np.log(p_row)

    def parts(z):
        u, w = z[:m], z[m:]
        return noisy_row + u - w, u, w

    def objective(z):
        r, u, w = parts(z)
        return c * (u + w).sum() + _g(np.maximum(r, 0), form).sum() - (r * log_p).sum()

    def gradient(z):
        r, _, _ = parts(z)
        g = _g_slope(np.maximum(r, 0), form) - log_p
        return np.concatenate([c + g, c - g])

    start_r = np.full(m, users / m)
    z0 = np.concatenate([np.maximum(start_r - noisy_row, 0), np.maximum(noisy_row - start_r, 0)])
    constraints = [{"type": "eq", "fun": lambda z: parts(z)[0].sum() - users,
                    "jac": lambda z: np.concatenate([np.ones(m), -np.ones(m)])},
                   {"type": "ineq", "fun": lambda z: parts(z)[0],
                    "jac": lambda z: np.hstack([np.eye(m), -np.eye(m)])}]
    result = minimize(objective, z0, jac=gradient, method="SLSQP", bounds=[(0, None)] * (2 * m),
                      constraints=constraints, options={"ftol": 1e-13, "maxiter": 1000})
    return parts(result.x)[0], result.fun


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(6))
def test_map_matches_scipy_minimize(form, seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 6))
    users = int(rng.integers(5, 60))
    epsilon = float(rng.choice([0.1, 0.5, 2.0]))
    p = rng.dirichlet(np.ones(m), size=3)
    truth = np.array([rng.multinomial(users, row) for row in p])
    noisy = truth + rng.laplace(0, laplace_scale(epsilon), truth.shape)
    ours = map_solve(noisy, p, users=users, epsilon=epsilon, form=form)
    ours_value = map_objective(ours.counts, noisy, p, epsilon=epsilon, form=form)
    for t in range(3):
        reference, reference_value = _scipy_map(noisy[t], p[t], users, epsilon, form)
        # Ours is exactly optimal (KKT), so it is never worse than a general-purpose solver ...
        assert ours_value[t] <= reference_value + 1e-7 * max(1.0, abs(reference_value))
        # ... and the exact form is strictly convex, so the minimisers agree.
        if form == "exact":
            np.testing.assert_allclose(ours.counts[t], reference, atol=1e-3 * max(1.0, users / m))


def test_map_is_a_minimum_against_feasible_perturbations():
    matrix, _, noisy = _instance(40, 30, 0.4, 0.1, seed=8)
    marginals = prior_marginals(noisy, matrix, "frequency")
    estimate = map_solve(noisy, marginals, users=40, epsilon=0.4)
    base = map_objective(estimate.counts, noisy, marginals, epsilon=0.4)
    rng = np.random.default_rng(0)
    for _ in range(20):
        direction = rng.normal(size=noisy.shape)
        direction -= direction.mean(axis=1, keepdims=True)  # keep the sums at n
        moved = np.maximum(estimate.counts + 0.05 * direction, 0)
        moved *= 40 / moved.sum(axis=1, keepdims=True)
        assert np.all(map_objective(moved, noisy, marginals, epsilon=0.4) >= base - 1e-9)


def test_mle_is_an_l1_minimiser_and_deterministic():
    rng = np.random.default_rng(3)
    for _ in range(20):
        m = int(rng.integers(2, 7))
        users = int(rng.integers(1, 50))
        noisy = rng.normal(users / m, 10, size=(1, m))
        estimate = mle_estimate(noisy, users=users)
        # Reference: the L1 problem as a linear programme in (r, d), d >= |r - y|.
        cost = np.concatenate([np.zeros(m), np.ones(m)])
        a_ub = np.block([[np.eye(m), -np.eye(m)], [-np.eye(m), -np.eye(m)]])
        b_ub = np.concatenate([noisy[0], -noisy[0]])
        a_eq = np.concatenate([np.ones(m), np.zeros(m)])[None, :]
        lp = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[users], bounds=[(0, None)] * (2 * m))
        assert np.abs(estimate.counts - noisy).sum() == pytest.approx(lp.fun, abs=1e-8)
        assert estimate.kkt_residual <= 1e-9 and np.all(estimate.counts >= 0)
        assert estimate.counts.sum() == pytest.approx(users, abs=1e-12 * 64 * users)
        # The Euclidean projection: a Euclidean-closer feasible point does not exist.
        assert np.linalg.norm(estimate.counts - noisy) <= np.linalg.norm(lp.x[:m] - noisy) + 1e-9
        np.testing.assert_array_equal(estimate.counts, mle_estimate(noisy, users=users).counts)


def test_uniform_matrix_map_agrees_with_mle():
    """Section 5.3: with P^t uniform the prior carries no location preference and the L1 term
    rules.  Exactly: when every digamma(max(r~_l, 0) + 1) of a step lies in a window of width
    2c = epsilon, the MAP answer is an L1 minimiser, i.e. as close to r~ as the MLE."""
    m, users, epsilon = 3, 200, 2.0
    uniform = np.full((m, m), 1.0 / m)
    truth = simulate_counts(uniform, users=users, steps=400, seed=21)
    noisy = LaplaceCounts(epsilon=epsilon, seed=22).release(truth)
    map_counts = map_estimate(noisy, uniform, users=users, epsilon=epsilon, prior="uniform").counts
    mle_counts = mle_estimate(noisy, users=users).counts
    spread = np.ptp(_g_slope(np.maximum(noisy, 0), "exact"), axis=1)
    covered = spread <= epsilon
    assert covered.mean() > 0.9
    map_l1 = np.abs(map_counts - noisy).sum(axis=1)
    mle_l1 = np.abs(mle_counts - noisy).sum(axis=1)
    np.testing.assert_allclose(map_l1[covered], mle_l1[covered], rtol=0, atol=1e-9 * users)
    # Both then move each count by at most the step's total excess |sum r~ - n|.
    excess = np.abs(noisy.sum(axis=1) - users)
    assert np.all(np.abs(map_counts - mle_counts)[covered] <= excess[covered, None] + 1e-9)


def test_map_beats_mle_tenfold_at_strict_budget():
    """The headline of Section 6 at a strict per-step budget (noise sd 141 vs counts ~ 40-80)."""
    matrix, truth, noisy = _instance(200, 200, 0.02, 0.0, seed=31)
    map_mse = np.mean((map_estimate(noisy, matrix, users=200, epsilon=0.02).counts - truth) ** 2)
    mle_mse = np.mean((mle_estimate(noisy, users=200).counts - truth) ** 2)
    assert mle_mse >= 10 * map_mse


def test_round_counts_keeps_sums():
    matrix, _, noisy = _instance(37, 50, 0.5, 0.1, seed=2)
    counts = map_estimate(noisy, matrix, users=37, epsilon=0.5).counts
    rounded = round_counts(counts, 37)
    assert rounded.dtype == np.int64 and np.all(rounded.sum(axis=1) == 37) and np.all(rounded >= 0)
    assert np.all(np.abs(rounded - counts) < 1.0)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="row 2, column 1"):
        map_solve([[1.0, 2.0], [np.nan, 1.0]], [[0.5, 0.5], [0.5, 0.5]], users=3, epsilon=1.0)
    with pytest.raises(ValueError, match="3 columns"):
        prior_marginals([[1.0, 2.0, 3.0]], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="method"):
        postprocess([[1.0, 2.0]], np.eye(2), users=3, epsilon=1.0, method="lse")
    with pytest.raises(ValueError, match="users"):
        mle_estimate([[1.0, 2.0]], users=0)
    with pytest.raises(ValueError, match="epsilon"):
        map_estimate([[1.0, 2.0]], np.eye(2), users=3, epsilon=-1.0)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("jitter", [0.0, 1e-12, 1e-9])
def test_map_on_nearly_noise_free_counts(form, jitter):
    """Degenerate steps: every count at its kink and the sum within the tolerance of n.  The
    answer stays at the truth and still meets the optimality conditions."""
    truth = simulate_counts(FIG3_MATRIX, users=200, steps=100, seed=4).astype(float)
    noisy = truth + np.random.default_rng(1).normal(0, jitter, truth.shape)
    estimate = map_estimate(noisy, FIG3_MATRIX, users=200, epsilon=100.0, form=form)
    assert estimate.kkt_residual <= 1e-8
    assert estimate.sum_residual <= 64e-12 * 200
    np.testing.assert_allclose(estimate.counts, truth, atol=1e-6)
