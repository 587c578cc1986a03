"""Review fixes of the MAP post-processing: the optimality certificate on degenerate rows,
the sensitivity of the likelihood, and reporting steps the solver did not close."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.io import InputError, read_matrix
from dpstream.postprocess import (
    FIG3_MATRIX,
    FORMS,
    estimators,
    kkt_residual,
    map_estimate,
    map_solve,
    mle_estimate,
    prior_marginals,
    simulate_counts,
)


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


def test_read_matrix_takes_only_names_as_a_header(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("loc1,loc_2,Loc 3\n1,2,3\n4,5,6\n")
    np.testing.assert_array_equal(read_matrix(str(path), "counts"), [[1, 2, 3], [4, 5, 6]])
    # A mistyped first data line is an error, not a header that shifts every step.
    path.write_text("12,1O,3\n4,5,6\n")
    with pytest.raises(InputError, match=r"line 1: '1O' is not a number"):
        read_matrix(str(path), "counts")
    path.write_text("\nloc1,2x,loc3\n4,5,6\n")
    with pytest.raises(InputError, match=r"line 2: '2x' is not a number"):
        read_matrix(str(path), "counts")
    # A numeric header cannot be told from data: it is read as data, as documented.
    path.write_text("0,1,2\n4,5,6\n")
    assert read_matrix(str(path), "counts").shape == (2, 3)
    # Only the first line may be a header.
    path.write_text("a,b\n1,2\nc,d\n")
    with pytest.raises(InputError, match=r"line 3: 'c' is not a number"):
        read_matrix(str(path), "counts")


def test_read_matrix_leaves_stdin_open(monkeypatch):
    stdin = io.StringIO("a,b\n1,2\n3,4\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    np.testing.assert_array_equal(read_matrix("-", "counts"), [[1, 2], [3, 4]])
    assert not stdin.closed


def _release(users: int = 50, epsilon: float = 0.5, sensitivity: float = 2.0, steps: int = 40):
    truth = simulate_counts(FIG3_MATRIX, users=users, steps=steps, seed=1)
    rng = np.random.default_rng(2)
    return truth + rng.laplace(0.0, sensitivity / epsilon, truth.shape)


@pytest.mark.parametrize("form", FORMS)
def test_sensitivity_sets_the_likelihood_weight(form):
    # The likelihood weight is epsilon / sensitivity: sensitivity 1 at epsilon e is the
    # default sensitivity 2 at 2e, and the default is unchanged.
    noisy = _release(sensitivity=1.0)
    one = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5, form=form, sensitivity=1.0)
    twice = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=1.0, form=form)
    np.testing.assert_allclose(one.counts, twice.counts, rtol=0, atol=1e-9)
    default = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5, form=form)
    explicit = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5, form=form, sensitivity=2.0)
    np.testing.assert_array_equal(default.counts, explicit.counts)
    marginals = prior_marginals(noisy, FIG3_MATRIX)
    assert one.kkt_residual <= 1e-9
    assert kkt_residual(one.counts, noisy, marginals, one.multipliers, epsilon=0.5, form=form, sensitivity=1.0) <= 1e-9
    # The answer for sensitivity 1 is not the answer for 2: the residual under 2 sees it.
    assert kkt_residual(one.counts, noisy, marginals, one.multipliers, epsilon=0.5, form=form) > 1e-3
    with pytest.raises(ValueError, match="sensitivity"):
        map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5, sensitivity=0.0)


def test_steps_left_open_are_reported(monkeypatch):
    noisy = _release(epsilon=0.3, steps=60)
    full = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.3)
    assert full.unconverged == 0 and full.kkt_residual <= 1e-9
    monkeypatch.setattr(estimators, "_MAX_ITERATIONS", 1)
    cut = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.3)
    assert 0 < cut.unconverged <= 60
    assert cut.kkt_residual > 1e-6
    assert mle_estimate(noisy, users=50).unconverged == 0


def _cli(tmp_path, noisy, *options):
    noisy_path, transition_path, out = tmp_path / "noisy.csv", tmp_path / "T.csv", tmp_path / "out.csv"
    np.savetxt(noisy_path, noisy, delimiter=",", fmt="%.17g")
    np.savetxt(transition_path, FIG3_MATRIX, delimiter=",")
    result = CliRunner().invoke(cli, ["postprocess", str(noisy_path), "--transition", str(transition_path),
                                      "-o", str(out), "--force", *map(str, options)])
    return result, out


def test_cli_sensitivity_reaches_the_estimator(tmp_path):
    noisy = _release(sensitivity=1.0)
    result, out = _cli(tmp_path, noisy, "--users", 50, "--epsilon", 0.5, "--sensitivity", 1)
    assert result.exit_code == 0, result.output
    expected = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5, sensitivity=1.0).counts
    np.testing.assert_allclose(np.loadtxt(out, delimiter=","), expected, rtol=1e-9, atol=1e-8)
    assert "warning" not in result.stderr
    bad, _ = _cli(tmp_path, noisy, "--users", 50, "--epsilon", 0.5, "--sensitivity", -1)
    assert bad.exit_code != 0 and "sensitivity" in bad.output and "-1" in bad.output


def test_cli_warns_when_the_solver_stops_early(tmp_path, monkeypatch):
    monkeypatch.setattr(estimators, "_MAX_ITERATIONS", 1)
    result, out = _cli(tmp_path, _release(epsilon=0.3), "--users", 50, "--epsilon", 0.3)
    assert result.exit_code == 0, result.output
    assert "did not converge" in result.stderr and "not the exact MAP estimate" in result.stderr


def test_cli_warns_when_users_does_not_fit_the_data(tmp_path):
    # Row sums of 50 users with noise sd sqrt(3) * sqrt(2) * 4 = 9.8: --users 500 is 46 sd off.
    noisy = _release()
    result, _ = _cli(tmp_path, noisy, "--users", 500, "--epsilon", 0.5)
    assert result.exit_code == 0, result.output
    assert "--users 500" in result.stderr and "check --users" in result.stderr
    fine, _ = _cli(tmp_path, noisy, "--users", 50, "--epsilon", 0.5)
    assert "warning" not in fine.stderr
