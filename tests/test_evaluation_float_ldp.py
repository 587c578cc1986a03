"""The continuous reference randomizers of the utility study (evaluation/float_ldp.py) and the study itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.evaluation.float_ldp import (
    FloatHybrid,
    FloatSquareWave,
    compare_mean_variance,
    compare_topl,
    float_threshold,
)

Z = 5.0


@pytest.mark.parametrize("epsilon", (0.5, 2.0))
def test_the_continuous_hm_is_unbiased_with_its_variance(epsilon):
    """The reference must be the paper's mechanism, or the comparison means nothing."""
    hm, n = FloatHybrid(epsilon), 200_000
    rng = np.random.default_rng(1)
    for v in (-1.0, 0.0, 0.7):
        est = hm.perturb_estimate(np.full(n, v), rng)
        variance = float(hm.variance(v))
        assert abs(est.mean() - v) <= Z * math.sqrt(variance / n)
        assert est.var() == pytest.approx(variance, rel=0.03)


def test_the_continuous_square_wave_has_its_density():
    sw, n = FloatSquareWave(1.0), 200_000
    y = sw.perturb(np.full(n, 0.3), np.random.default_rng(2))
    near = np.abs(y - 0.3) <= sw.b
    assert abs(near.mean() - 2 * sw.b * sw.p) <= Z * math.sqrt(0.25 / n)
    assert np.all((y >= -sw.b) & (y <= 1 + sw.b))
    assert 2 * sw.b * sw.p + sw.q == pytest.approx(1.0)


def test_the_grid_never_costs_more_than_half_a_percent_of_variance():
    for row in compare_mean_variance([0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]):
        assert row["max_ratio"] <= 1.005, row
        assert row["worst_case_ratio"] <= 1.001, row
        if row["mechanism"] == "SR":
            assert row["max_ratio"] == pytest.approx(1.0, abs=1e-9)  # SR is the same mechanism on {-1, 1}


def test_compare_topl_runs_both_pipelines_on_the_same_queries():
    values = np.tile(np.concatenate([np.arange(30.0), [90.0]]), 300)
    rows = compare_topl(values, 100.0, hold=5000, max_range=4000, queries=100, rounds=2, seed=1)
    assert [row["version"] for row in rows] == ["grid", "continuous"] * 2
    for row in rows:
        assert 0 < row["threshold"] <= 100.0 and row["expected_mse"] > 0 and row["mse"] > 0
    reports = FloatSquareWave(1.0).perturb(values[:5000] / 100.0, np.random.default_rng(3))
    theta = float_threshold(reports, epsilon=1.0, stream_epsilon=1.0, upper_bound=100.0, max_range=4000)
    assert 10 <= theta <= 100
