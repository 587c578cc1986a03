"""Posterior-mean and temporal post-processing: exactness against brute force, the
approximation's error, determinism, and the constraints every count vector meets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import gammaln, logsumexp

from dpstream.cli import cli
from dpstream.postprocess import (
    FIG3_MATRIX,
    METHODS,
    LaplaceCounts,
    kalman_smooth,
    laplace_scale,
    noise_variance,
    posterior_mean,
    posterior_mean_solve,
    postprocess,
    prior_marginals,
    simulate_counts,
    smoothed_transition,
    temporal_mean,
)
from dpstream.postprocess.posterior import LIKELIHOODS, _log_head, _log_tail, default_likelihood
from dpstream.postprocess.temporal import _prior_covariance, _smooth


def _brute_force(noisy: np.ndarray, p: np.ndarray, users: int, scale: float) -> np.ndarray:
    """``E[r | r~]`` by enumerating every count vector with sum ``users``: multinomial prior
    times the Laplace density of every cell, straight from the definitions."""
    m = p.size
    vectors = np.array([r for r in itertools.product(range(users + 1), repeat=m) if sum(r) == users])
    with np.errstate(divide="ignore", invalid="ignore"):
        powers = np.where(vectors > 0, vectors * np.log(p), 0.0)  # 0 log 0 = 0; r log 0 = -inf
    log_prior = gammaln(users + 1) - gammaln(vectors + 1).sum(axis=1) + powers.sum(axis=1)
    log_like = (-np.abs(noisy - vectors) / scale - np.log(2 * scale)).sum(axis=1)
    log_post = log_prior + log_like
    weights = np.exp(log_post - logsumexp(log_post))
    return weights @ vectors


def _cases(count: int, m: int, users: int, seed: int):
    rng = np.random.default_rng(seed)
    for case in range(count):
        p = rng.dirichlet(np.ones(m))
        if case % 4 == 0 and m > 1:
            p[rng.integers(m)] = 0.0  # a location the prior rules out
            p /= p.sum()
        epsilon = float(rng.choice([0.01, 0.3, 2.0, 20.0, 200.0]))
        truth = rng.multinomial(users, p)
        noisy = truth + rng.laplace(0.0, laplace_scale(epsilon), m) * (30.0 if case % 5 == 1 else 1.0)
        yield noisy, p, epsilon


@pytest.mark.parametrize("m,users", [(3, 5), (2, 7), (4, 4), (1, 3)])
def test_exact_mean_matches_enumeration(m, users):
    cases = list(_cases(60, m, users, seed=m * 10 + users))
    noisy = np.array([c[0] for c in cases])
    for epsilon in sorted({c[2] for c in cases}):
        rows = [i for i, c in enumerate(cases) if c[2] == epsilon]
        p = np.array([cases[i][1] for i in rows])
        ours = posterior_mean_solve(noisy[rows], p, users=users, epsilon=epsilon, exact=True,
                                    likelihood="laplace").counts
        for row, i in enumerate(rows):
            reference = _brute_force(noisy[i], cases[i][1], users, laplace_scale(epsilon))
            # Both are sums of a few hundred positive terms: agreement to rounding.
            np.testing.assert_allclose(ours[row], reference, rtol=0, atol=1e-11 * users)


def test_discrete_laplace_gives_the_same_posterior_on_integer_releases():
    """Both likelihoods are proportional to exp(-|r~ - r| / b) on integer counts.  The default is
    what LaplaceCounts declares (its release is integer)."""
    assert default_likelihood() == LaplaceCounts.likelihood in LIKELIHOODS
    matrix = smoothed_transition(FIG3_MATRIX, 0.1)
    truth = simulate_counts(matrix, users=30, steps=40, seed=3)
    noisy = LaplaceCounts(epsilon=0.7, seed=4).release(truth)
    for function in (posterior_mean, temporal_mean):
        a = function(noisy, matrix, users=30, epsilon=0.7, likelihood="laplace").counts
        b = function(noisy, matrix, users=30, epsilon=0.7, likelihood="discrete_laplace").counts
        if function is posterior_mean:
            np.testing.assert_array_equal(a, b)
        else:  # the smoother's messages use each law's variance
            assert np.all(np.abs(a - b) < 1.0) and not np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"integer noisy counts; row 1, column 1 is 0\.5 .*likelihood='laplace'"):
        posterior_mean([[0.5, 2.0, 3.0]], matrix, users=5, epsilon=1.0, likelihood="discrete_laplace")
    with pytest.raises(ValueError, match="likelihood"):
        posterior_mean([[1.0, 2.0, 3.0]], matrix, users=5, epsilon=1.0, likelihood="gauss")
    assert noise_variance(2.0, "discrete_laplace") < noise_variance(2.0, "laplace") == 8.0


def test_partial_exponential_sums_against_direct_sums():
    """ln sum_{k<=K} x^k/k! and ln sum_{k>K} x^k/k!, including where the incomplete gamma
    functions underflow (x far from K) and the tail formulas take over."""
    k = np.arange(60_000)
    tops, xs = np.meshgrid([0.0, 1.0, 5.0, 40.0, 300.0, 3000.0], [1e-3, 0.7, 8.0, 60.0, 900.0, 9000.0, 30000.0])
    heads, tails = _log_head(tops, xs), _log_tail(tops, xs)
    for top, x, head, tail in zip(tops.ravel(), xs.ravel(), heads.ravel(), tails.ravel()):
        terms = k * np.log(x) - gammaln(k + 1.0)
        np.testing.assert_allclose(head, logsumexp(terms[: int(top) + 1]), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(tail, logsumexp(terms[int(top) + 1:]), rtol=1e-11, atol=1e-11)
    assert _log_head(np.array([-1.0]), np.array([3.0]))[0] == -np.inf
    assert _log_tail(np.array([-1.0]), np.array([3.0]))[0] == 3.0


@pytest.mark.parametrize("epsilon", [0.02, 0.2, 1.0, 2.0])
def test_approximation_error_on_the_papers_setting(epsilon):
    """The documented error of the tilted-Poisson approximation: at most 0.4 counts (n = 200,
    Fig. 3 matrix); with 100 locations far less (the Edgeworth term's 1/V is small)."""
    truth = simulate_counts(FIG3_MATRIX, users=200, steps=150, seed=11)
    noisy = LaplaceCounts(epsilon=epsilon, seed=12).release(truth)
    marginals = prior_marginals(noisy, FIG3_MATRIX, "uniform")
    exact = posterior_mean_solve(noisy, marginals, users=200, epsilon=epsilon, exact=True).counts
    approx = posterior_mean_solve(noisy, marginals, users=200, epsilon=epsilon, exact=False)
    error = approx.counts - exact
    assert np.abs(error).max() <= 0.4 and np.sqrt(np.mean(error ** 2)) <= 0.1
    assert approx.kkt_residual <= 1e-12 * 200 * 8


def test_approximation_error_with_many_locations():
    rng = np.random.default_rng(5)
    marginals = rng.dirichlet(np.ones(100), size=20)
    truth = np.array([rng.multinomial(200, p) for p in marginals])
    noisy = truth + rng.laplace(0.0, laplace_scale(0.3), truth.shape)
    options = dict(users=200, epsilon=0.3, likelihood="laplace")
    exact = posterior_mean_solve(noisy, marginals, exact=True, **options).counts
    approx = posterior_mean_solve(noisy, marginals, exact=False, **options).counts
    assert np.abs(approx - exact).max() <= 5e-3


@pytest.mark.parametrize("method", ["mean", "kalman", "smooth"])
def test_count_vectors_deterministic_and_extreme_inputs(method):
    rng = np.random.default_rng(8)
    noisy = np.vstack([rng.laplace(40.0, 60.0, (30, 3)), [[-500.0, -400.0, -300.0]], [[1e5, 3.0, -1e5]],
                       [[0.0, 0.0, 0.0]], [[200.0, 0.0, 0.0]]])
    matrix = smoothed_transition(FIG3_MATRIX, 0.05)
    for prior in ("frequency", "uniform"):
        for epsilon in (0.02, 1.0, 50.0):
            options = dict(users=120, epsilon=epsilon, method=method, prior=prior, likelihood="laplace")
            first = postprocess(noisy, matrix, **options)
            again = postprocess(noisy.copy(), matrix, **options)
            np.testing.assert_array_equal(first.counts, again.counts)
            assert np.all(first.counts >= 0) and np.all(np.isfinite(first.counts))
            np.testing.assert_allclose(first.counts.sum(axis=1), 120, rtol=0, atol=1e-9)
            assert first.sum_residual <= 1e-9


def test_mean_is_monotone_in_its_own_release_and_has_the_right_limits():
    """The Laplace kernel has a monotone likelihood ratio, so E[r_l | r~] never decreases when
    r~_l grows.  Nearly noise-free integer releases give the truth; pure noise gives n P."""
    p = np.array([[0.2, 0.5, 0.3]])
    grid = np.linspace(-30, 60, 181)
    noisy = np.column_stack([grid, np.full(grid.size, 9.0), np.full(grid.size, 7.0)])
    means = posterior_mean_solve(noisy, np.repeat(p, grid.size, axis=0), users=25, epsilon=0.8,
                                 likelihood="laplace").counts[:, 0]
    assert np.all(np.diff(means) >= -1e-12)
    sharp = posterior_mean_solve([[4.0, 13.0, 8.0]], p, users=25, epsilon=80.0).counts
    np.testing.assert_allclose(sharp, [[4.0, 13.0, 8.0]], atol=1e-9)
    flat = posterior_mean_solve([[4.0, 13.0, 8.0]], p, users=25, epsilon=1e-6).counts
    np.testing.assert_allclose(flat, 25 * p, atol=1e-4)


def test_kalman_smoother_is_the_batch_linear_estimator():
    """With every count positive (no projection) the smoother equals E[x] + C (C + s^2 I)^-1 (r~ - E[r~])
    with C the covariance of the whole series under the moment model (module docstring)."""
    matrix = smoothed_transition(FIG3_MATRIX, 0.2)
    steps, m, users, epsilon = 6, 3, 90, 0.6
    noisy = LaplaceCounts(epsilon=epsilon, seed=1).release(simulate_counts(matrix, users=users, steps=steps, seed=2))
    marginals = prior_marginals(noisy, matrix, "uniform")
    variance = noise_variance(laplace_scale(epsilon), LaplaceCounts.likelihood)
    mean = users * marginals
    block = [_prior_covariance(marginals[:1], users)[0]]
    for t in range(1, steps):
        x = users * marginals[t - 1]
        block.append(matrix.T @ block[-1] @ matrix + np.diag(matrix.T @ x) - (matrix.T * x) @ matrix)
    joint = np.zeros((steps * m, steps * m))
    for t in range(steps):
        for s in range(t, steps):
            cross = np.linalg.matrix_power(matrix.T, s - t) @ block[t]  # Cov(x_s, x_t)
            joint[s * m:(s + 1) * m, t * m:(t + 1) * m] = cross
            joint[t * m:(t + 1) * m, s * m:(s + 1) * m] = cross.T
    batch = mean.ravel() + joint @ np.linalg.solve(joint + variance * np.eye(steps * m), (noisy - mean).ravel())
    smoothed, _, _, basis = _smooth(noisy, matrix, marginals, users, variance)
    np.testing.assert_allclose(users / m + smoothed @ basis.T, batch.reshape(steps, m), rtol=0, atol=1e-8)
    estimate = kalman_smooth(noisy, matrix, users=users, epsilon=epsilon, prior="uniform").counts
    if np.all(batch > 0):
        np.testing.assert_allclose(estimate, batch.reshape(steps, m), rtol=0, atol=1e-8)


def test_smooth_without_temporal_information_is_the_posterior_mean():
    """Rows of the transition matrix all equal: the steps are independent, the other steps carry
    no evidence, and ``smooth`` is the per-step posterior mean (the evidence cancels to rounding)."""
    matrix = np.tile([[0.3, 0.5, 0.2]], (3, 1))
    noisy = LaplaceCounts(epsilon=0.4, seed=3).release(simulate_counts(matrix, users=60, steps=30, seed=4))
    smooth = temporal_mean(noisy, matrix, users=60, epsilon=0.4, prior="uniform").counts
    mean = posterior_mean(noisy, matrix, users=60, epsilon=0.4, prior="uniform").counts
    np.testing.assert_allclose(smooth, mean, rtol=0, atol=1e-6)


def test_temporal_estimators_use_the_dynamics():
    """Fig. 3's matrix moves every user at location 3 to location 2, so consecutive releases
    observe the same counts twice: the smoothers roughly halve the per-step MSE at epsilon = 0.5
    (measured 7.1 and 6.6 against 12.7; the margin is wide)."""
    truth = simulate_counts(FIG3_MATRIX, users=200, steps=300, seed=21)
    noisy = LaplaceCounts(epsilon=0.5, seed=22).release(truth)
    mse = {method: np.mean((postprocess(noisy, FIG3_MATRIX, users=200, epsilon=0.5, method=method).counts - truth) ** 2)
           for method in ("mle", "map", "mean", "kalman", "smooth")}
    assert mse["mean"] < mse["map"] < mse["mle"]
    assert mse["smooth"] < mse["kalman"] < 0.75 * mse["mean"]


@pytest.mark.parametrize("method", ["mean", "kalman", "smooth"])
def test_cli_runs_the_new_methods(tmp_path, method):
    assert method in METHODS
    noisy = LaplaceCounts(epsilon=0.5, seed=2).release(simulate_counts(FIG3_MATRIX, users=50, steps=20, seed=1))
    noisy_path, transition_path, out = tmp_path / "noisy.csv", tmp_path / "T.csv", tmp_path / "out.csv"
    np.savetxt(noisy_path, noisy, delimiter=",", fmt="%.17g")
    np.savetxt(transition_path, FIG3_MATRIX, delimiter=",")
    result = CliRunner().invoke(cli, ["postprocess", str(noisy_path), "--transition", str(transition_path),
                                      "--users", "50", "--epsilon", "0.5", "--method", method, "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = postprocess(noisy, FIG3_MATRIX, users=50, epsilon=0.5, method=method).counts
    np.testing.assert_allclose(np.loadtxt(out, delimiter=","), expected, rtol=1e-9, atol=1e-8)
