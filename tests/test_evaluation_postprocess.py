"""The post-processing studies and their metrics (``dpstream.evaluation.postprocess``)."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.evaluation.postprocess import (
    METHOD_NAMES,
    Setting,
    mse,
    plot_counts,
    plot_study,
    run_study,
    step_probabilities,
    study_settings,
    summarize,
    transition_probability,
)
from dpstream.postprocess import FIG3_MATRIX, simulate_counts, smoothed_transition


def test_transition_probability_exact():
    # One user: the probability is the matrix entry (Fig. 3(b)).
    for i in range(3):
        for j in range(3):
            a, b = np.eye(3, dtype=int)[i], np.eye(3, dtype=int)[j]
            assert transition_probability(a, b, FIG3_MATRIX) == pytest.approx(FIG3_MATRIX[i, j], abs=1e-15)
    # Two users by enumeration of both users' moves.
    matrix = smoothed_transition(FIG3_MATRIX, 0.3)
    a = np.array([1, 1, 0])
    for b in ([2, 0, 0], [1, 1, 0], [0, 1, 1], [0, 0, 2]):
        brute = sum(matrix[0, j] * matrix[1, k] for j in range(3) for k in range(3)
                    if np.array_equal(np.bincount([j, k], minlength=3), b))
        assert transition_probability(a, np.array(b), matrix) == pytest.approx(brute, rel=1e-12)
    assert transition_probability(np.array([1, 0, 0]), np.array([1, 1, 0]), matrix) == 0.0
    probabilities = step_probabilities(simulate_counts(FIG3_MATRIX, users=1, steps=50, seed=2), FIG3_MATRIX)
    assert np.all(probabilities > 0)  # a true trajectory never makes an impossible move
    assert mse([[1.0, 2.0]], [[1.0, 4.0]]) == 2.0


def test_study_settings_and_a_reproducible_round(tmp_path):
    settings = study_settings("correlation", epsilons=[0.5, 1.0], steps=[10], levels=[1.0, 0.01], users=4,
                              default_steps=12, default_epsilon=1.0, default_s={})
    assert [(s.epsilon, s.s, s.x) for s in settings] == [(0.5, 1.0, 1.0), (0.5, 0.01, 0.01), (1.0, 1.0, 1.0),
                                                        (1.0, 0.01, 0.01)]
    assert all(s == Setting(study="correlation", x=s.x, epsilon=s.epsilon, steps=12, users=4, s=s.s) for s in settings)
    first, second = run_study(settings[:2], 2, 7), run_study(settings[:2], 2, 7)
    assert len(first) == 2 * 2 * len(METHOD_NAMES)
    assert [r["mse"] for r in first] == [r["mse"] for r in second]
    rows = summarize(first)
    assert len(rows) == 2 * len(METHOD_NAMES) and all(row["rounds"] == 2 for row in rows)
    assert plot_study(rows, tmp_path / "correlation.png", title="t").stat().st_size > 1000
    with pytest.raises(ValueError, match="study must be one of"):
        study_settings("nope", epsilons=[1.0], steps=[1], levels=[0.0], users=1, default_steps=1,
                       default_epsilon=1.0, default_s={})


def test_the_probability_study_has_no_raw_release_and_a_share_of_impossible_steps():
    settings = study_settings("probability", epsilons=[1.0], steps=[10], levels=[0.0], users=5, default_steps=15,
                              default_epsilon=1.0, default_s={"probability": 0.0})
    records = run_study(settings, 1, 0)
    assert "Laplace (raw)" not in {r["method"] for r in records}
    assert all(0.0 <= r["impossible_share"] <= 1.0 for r in records)
    assert all(r["users"] == 1 for r in records)  # Section 6.1: one user


def test_the_users_move_by_the_matrix_given(monkeypatch):
    """run_study(transition=...) simulates the users with that matrix, smoothed at each point's s."""
    import dpstream.evaluation.postprocess as studies

    matrix = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    seen = []
    real = studies.simulate_counts
    monkeypatch.setattr(studies, "simulate_counts", lambda transition, **kw: seen.append(transition) or real(
        transition, **kw))
    settings = study_settings("correlation", epsilons=[1.0], steps=[], levels=[0.0, 0.5], users=6, default_steps=8,
                              default_epsilon=1.0, default_s={})
    records = run_study(settings, 1, 3, transition=matrix)
    np.testing.assert_array_equal(seen[0], matrix)
    np.testing.assert_allclose(seen[1], smoothed_transition(matrix, 0.5))
    assert all(np.isfinite(r["mse"]) for r in records)
    with pytest.raises(ValueError, match="row 1 sums to 0.9"):
        run_study(settings, 1, 3, transition=[[0.5, 0.4], [0.5, 0.5]])


def test_summary_bands_are_quantiles_over_rounds():
    settings = study_settings("epsilon", epsilons=[0.5], steps=[], levels=[], users=10, default_steps=6,
                              default_epsilon=1.0, default_s={"epsilon": 0.0})
    records = run_study(settings, 5, 1)
    for row in summarize(records):
        values = [r["mse"] for r in records if r["method"] == row["method"]]
        assert row["mse_q10"] == pytest.approx(np.quantile(values, 0.1))
        assert row["mse_q90"] == pytest.approx(np.quantile(values, 0.9))
        assert min(values) <= row["mse_q10"] <= row["mse_q90"] <= max(values)


def test_plot_counts_checks_its_inputs(tmp_path):
    noisy = np.zeros((5, 2))
    with pytest.raises(ValueError, match=r"of one shape, got \(5, 2\) and \(5, 3\)"):
        plot_counts(noisy, np.zeros((5, 3)), tmp_path / "c.png")
    with pytest.raises(ValueError, match=r"locations must be column numbers from 0 to 1, got \[2\]"):
        plot_counts(noisy, noisy, tmp_path / "c.png", locations=[2])
    assert plot_counts(noisy, noisy + 1, tmp_path / "c.png", names=["a", "b"]).stat().st_size > 1000


def test_one_user_steps_take_the_matrix_entries_at_once():
    """The vectorized path for one user gives exactly what the exact dynamic programme gives."""
    matrix = smoothed_transition(np.array([[0.1, 0.9, 0.0, 0.0], [0.0, 0.2, 0.8, 0.0], [0.3, 0.0, 0.0, 0.7],
                                           [0.25, 0.25, 0.25, 0.25]]), 0.05)
    series = simulate_counts(matrix, users=1, steps=60, seed=5)
    fast = step_probabilities(series, matrix)
    slow = np.array([transition_probability(series[t - 1], series[t], matrix) for t in range(1, 60)])
    np.testing.assert_array_equal(fast, slow)
    two = simulate_counts(matrix, users=2, steps=6, seed=5)  # more users: the exact programme
    expected = [transition_probability(two[t - 1], two[t], matrix) for t in range(1, 6)]
    np.testing.assert_array_equal(step_probabilities(two, matrix), expected)
