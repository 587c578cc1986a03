"""The accuracy study (dpstream.evaluation.accuracy) on a small setting."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.evaluation.accuracy import (
    METHODS,
    AccuracyConfig,
    load_stream,
    plot_windows,
    ratio_table,
    release_errors,
    run_accuracy,
)
from dpstream.evaluation.metrics import random_queries

SMALL = AccuracyConfig(hold=1024, max_range=4096, rounds=3, queries=50, window=60)


def test_mse_all_is_the_expectation_over_random_queries():
    """2 Var(e) equals the mean squared error of all n^2 ordered pairs of endpoints."""
    rng = np.random.default_rng(0)
    truth = rng.random(300)
    released = truth + rng.normal(0, 1, 300)
    metrics = release_errors(released, truth, rng, AccuracyConfig(hold=0, queries=10))
    e = np.concatenate(([0.0], np.cumsum(released - truth)))[:-1]
    pairs = (e[:, None] - e[None, :]) ** 2
    assert metrics["mse_all"] == pytest.approx(pairs.mean())


def test_small_study_and_ratio_table(tmp_path):
    records = run_accuracy("bursty-counts", epsilons=[0.5], methods=["paper", "model", "model-window"],
                           config=SMALL, seed=1)
    assert len(records) == 3 * 3
    assert {"mse", "mse_all", "window_mse", "window_error", "threshold", "smoothed_levels"} <= set(records[0])
    rows = ratio_table(records, metrics=("mse", "mse_all", "window_mse"))
    model = next(row for row in rows if row["method"] == "model")
    assert model["mse_low"] <= model["mse_ratio"] <= model["mse_high"]
    paper = next(row for row in rows if row["method"] == "paper")
    assert "mse_ratio" not in paper
    path = plot_windows({"a": ([1, 10, 100], [1.0, 5.0, 30.0])}, tmp_path / "w.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_load_stream_lengths():
    for name in ("pos", "taxi-fares"):
        values, bound = load_stream(name, SMALL)
        assert values.size == SMALL.hold + SMALL.max_range and values.max() <= bound


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'best'"):
        run_accuracy("pos", epsilons=[1.0], methods=["best"], config=SMALL)


def test_every_method_runs():
    values, bound = load_stream("pos", SMALL)
    rng = np.random.default_rng(0)
    for name, method in METHODS.items():
        released, info = method(values, bound, 0.5, SMALL, rng)
        assert released.size == SMALL.max_range and info["threshold"] > 0, name
    assert random_queries(rng, 10, 2).starts.size == 2


def test_aligned_mse_and_period_methods():
    """The aligned windows' mean squared error is that of the sums of the windows from the first
    boundary; the periodic methods record no s and a ratio like the others."""
    records = run_accuracy("bursty-counts", epsilons=[0.5], methods=["paper", "model-period", "model-period-profile"],
                           config=SMALL, seed=2)
    period = next(r for r in records if r["method"] == "model-period")
    assert period["smoothed_levels"] is None and period["aligned_mse"] >= 0
    rows = ratio_table(records, metrics=("aligned_mse",))
    assert next(row for row in rows if row["method"] == "model-period")["smoothed_levels"] == {"period": SMALL.rounds}
    truth = np.arange(10.0)
    errors = np.array([1.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 9.0])
    config = AccuracyConfig(hold=2, queries=3, window=4)  # the first boundary is at offset (-2) % 4 = 2
    metrics = release_errors(truth + errors, truth, np.random.default_rng(0), config)
    assert metrics["aligned_mse"] == pytest.approx((2.0**2 + 10.0**2) / 2)


def test_window_settings_include_the_period():
    from dpstream.evaluation.accuracy import window_curves, window_settings

    settings = window_settings(60)
    assert settings["model, period = 60"] == {"threshold_method": "model", "period": 60}
    curves = window_curves("bursty-counts", epsilon=0.5, lengths=[60, 600],
                           settings={"period": settings["model, period = 60"]},
                           config=AccuracyConfig(hold=1024, max_range=4096, rounds=1), seed=0)
    assert len(curves["period"][1]) == 2 and all(e > 0 for e in curves["period"][1])
