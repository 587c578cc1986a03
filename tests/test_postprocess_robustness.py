"""Review fixes of the MAP post-processing: the optimality certificate on degenerate rows,
the sensitivity of the likelihood, and reporting steps the solver did not close."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from dpstream.io import InputError, read_matrix
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
