"""The public Markov model, the synthetic users and the per-step Laplace release."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from dpstream.noise import double_geometric_variance
from dpstream.postprocess import (
    FIG3_MATRIX,
    LaplaceCounts,
    check_transition,
    empirical_transitions,
    propagate,
    simulate_counts,
    smoothed_transition,
)
from dpstream.privacy import USER_STEP


#: Two-sided per-cell z bound, Bonferroni-corrected so a correct generator fails with prob. < 1e-6.
def _z(cells: int) -> float:
    return float(norm.isf(1e-6 / (2 * cells)))


def test_check_transition_names_the_bad_row_and_value():
    with pytest.raises(ValueError, match="row 2 sums to 0.9"):
        check_transition([[1.0, 0.0], [0.4, 0.5]])
    with pytest.raises(ValueError, match=r"row 1, column 2 is -0.1"):
        check_transition([[1.1, -0.1], [0.5, 0.5]])
    with pytest.raises(ValueError, match="square"):
        check_transition([[1.0, 0.0]])
    with pytest.raises(TypeError):
        check_transition([["a", "b"], ["c", "d"]])


@pytest.mark.parametrize("s", [0.0, 0.01, 0.1, 1.0, 1e6])
def test_smoothing_family_of_eq_11(s):
    matrix = smoothed_transition(FIG3_MATRIX, s)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    expected = (FIG3_MATRIX + s) / (1.0 + 3 * s)  # every row of the base sums to 1
    np.testing.assert_allclose(matrix, expected, rtol=1e-14, atol=1e-15)
    if s >= 1e6:
        np.testing.assert_allclose(matrix, 1 / 3, atol=1e-5)
    with pytest.raises(ValueError, match="smoothing level"):
        smoothed_transition(FIG3_MATRIX, -1.0)


def test_propagate_is_eq_7():
    initial = np.array([0.7, 0.2, 0.1])
    matrix = smoothed_transition(FIG3_MATRIX, 0.1)
    marginals = propagate(initial, matrix, 6)
    for t in range(6):
        np.testing.assert_allclose(marginals[t], initial @ np.linalg.matrix_power(matrix, t), atol=1e-14)


@pytest.mark.parametrize("s", [0.0, 0.1])
def test_generator_moves_by_the_matrix(s):
    matrix = smoothed_transition(FIG3_MATRIX, s)
    counts, locations = simulate_counts(matrix, users=400, steps=300, seed=11, return_locations=True)
    assert counts.shape == (300, 3) and np.all(counts.sum(axis=1) == 400)
    np.testing.assert_array_equal(counts[5], np.bincount(locations[5], minlength=3))
    moves = empirical_transitions(locations, 3)
    from_counts = moves.sum(axis=1, keepdims=True)
    expected = from_counts * matrix
    # Given the number of moves out of i, the moves to j are binomial(N_i, T_ij).
    sd = np.sqrt(from_counts * matrix * (1 - matrix))
    impossible = matrix == 0
    assert np.all(moves[impossible] == 0)
    assert np.all(np.abs(moves - expected)[~impossible] <= _z(9) * sd[~impossible])
    # Users start uniformly.
    assert abs(counts[0, 0] - 400 / 3) <= _z(3) * np.sqrt(400 * (1 / 3) * (2 / 3))


def test_generator_is_reproducible_and_validates():
    a = simulate_counts(FIG3_MATRIX, users=20, steps=10, seed=3)
    b = simulate_counts(FIG3_MATRIX, users=20, steps=10, seed=3)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="users"):
        simulate_counts(FIG3_MATRIX, users=0, steps=10)
    with pytest.raises(ValueError, match="initial"):
        simulate_counts(FIG3_MATRIX, users=2, steps=3, initial=[0.5, 0.5])


def test_laplace_counts_scale_privacy_and_seed():
    mech = LaplaceCounts(epsilon=0.5, seed=4)
    assert mech.scale == 4.0  # Delta = 2: one user moving changes two cells by one
    guarantee = mech.privacy()
    assert guarantee.epsilon == 0.5 and guarantee.delta == 0.0 and guarantee.neighbours is USER_STEP
    truth = np.zeros((2000, 50))
    noise = mech.release(truth)
    # discrete Laplace of scale 4 (variance just below Lap(4)'s 32); the sample variance of 1e5
    # draws is within 6 of its sd (excess kurtosis below 6).
    variance = double_geometric_variance(4.0)
    sd_of_var = np.sqrt((6 + 2) * variance**2 / noise.size)
    assert abs(noise.var() - variance) <= 6 * sd_of_var
    np.testing.assert_array_equal(LaplaceCounts(epsilon=1, seed=9).release(truth[:3]),
                                  LaplaceCounts(epsilon=1, seed=9).release(truth[:3]))
    with pytest.raises(ValueError):
        LaplaceCounts(epsilon=0.0)

