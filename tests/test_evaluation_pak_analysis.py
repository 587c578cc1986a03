"""PAK's analysis (``dpstream.evaluation.pak_analysis``): the optimizer of Eq. 16, the time-lag
heuristics of Section VI-B, and the error of the sum at the last step (Section VII-A)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.evaluation.pak_analysis import (
    _quantile_gap,
    heuristic_time_lag,
    last_step_errors,
    last_step_summary,
    optimize_pak,
    plot_last_step_errors,
    time_lag_first_criterion,
    time_lag_second_criterion,
)


def _stream(size, seed=0):
    return np.minimum(np.random.default_rng(seed).geometric(0.15, size), 500).astype(float)


def test_time_lag_heuristics():
    # Section VI-B: with beta = 0.02, delta = 2^-20, eps = 1, p_max = 0.005 the second criterion is "m > 80,000".
    second = time_lag_second_criterion(epsilon=1.0, delta=2.0**-20)
    assert 80_000 < second < 85_000
    first = time_lag_first_criterion()
    assert _quantile_gap(0.5, 0.005, first) < 0.02
    assert all(_quantile_gap(0.5, 0.005, m) >= 0.02 for m in range(1, first))  # the smallest such m
    assert heuristic_time_lag(epsilon=1.0, delta=2.0**-20) == max(first, math.floor(second) + 1)


def test_optimizer_respects_the_constraints():
    values = _stream(20000, seed=2)
    params = optimize_pak(values, epsilon=1.0, upper_bound=500, n=200000, delta=2.0**-20)
    assert 0 < params.p <= 0.005 and 0 < params.lam <= 1 and params.multiplier >= 1
    assert 0 < params.threshold_fraction < 1
    assert sum(params.betas.values()) == pytest.approx(0.02)
    assert params.betas["qt"] == pytest.approx(_quantile_gap(params.lam, params.p, 20000))
    assert params.improvement_factor >= 1 and params.alpha > 0


def test_last_step_errors_and_the_improvement_factor(tmp_path):
    values = _stream(30000, seed=4)
    calls = []
    result = last_step_errors(values, 500.0, epsilon=1.0, hold=20000, rounds=3,
                              progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert set(result["errors"]) == {"BT-bound", "PAK-optimized", "PAK-default"}
    assert all(len(errors) == 3 for errors in result["errors"].values())
    for name, factor in result["improvement_factor"].items():
        assert factor == pytest.approx(result["mean_abs_error"]["BT-bound"] / result["mean_abs_error"][name])
    source = tmp_path / "s.txt"
    source.write_text("\n".join(map(str, values)) + "\n")
    args = ["pak-improvement", "--dataset", str(source), "--upper-bound", "500", "--hold", "20000", "--rounds", "2",
            "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "improvement factor over BT-bound" in result.output
    assert CliRunner().invoke(cli, args).exit_code != 0  # refuses to overwrite


def test_optimizer_and_last_step_refuse_a_stream_no_longer_than_the_hold_out():
    with pytest.raises(ValueError, match="n must be"):
        optimize_pak(_stream(100), epsilon=1.0, upper_bound=500, n=100, delta=1e-6)
    with pytest.raises(ValueError, match="hold"):
        last_step_errors(_stream(100), 500.0, hold=100, rounds=1)


def test_the_summary_the_printout_and_the_plot_agree_in_the_stream_units(tmp_path):
    """pak-improvement writes a summary CSV like the other commands, and its table, its CSV and
    its plot all speak of errors in the stream's units (not in units of B)."""
    import csv

    source = tmp_path / "s.txt"
    source.write_text("\n".join(map(str, _stream(30000, seed=4))) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["pak-improvement", "--dataset", str(source), "--upper-bound", "500", "--hold",
                                      "20000", "--rounds", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    with open(out / "pak-improvement-s.csv") as handle:
        summary = list(csv.DictReader(handle))
    with open(out / "pak-improvement-s-errors.csv") as handle:
        errors = list(csv.DictReader(handle))
    assert [row["method"] for row in summary] == ["BT-bound", "PAK-optimized", "PAK-default"]
    for row in summary:
        own = np.array([float(e[row["method"]]) for e in errors])
        assert float(row["mean_abs_error"]) == pytest.approx(np.mean(np.abs(own)))
        assert f"{float(row['mean_abs_error']):,.0f}" in result.output  # the same number, same units
    assert float(summary[0]["improvement_factor"]) == 1.0


def test_last_step_summary_and_the_plot_take_the_errors_as_they_are(tmp_path, monkeypatch):
    import dpstream.evaluation.pak_analysis as analysis

    errors = {"BT-bound": [-30.0, 10.0, 25.0], "PAK-default": [1.0, -2.0, 0.5]}
    rows = last_step_summary({"rounds": 3, "errors": errors, "mean_threshold": {"PAK-default": 7.0}})
    assert rows[1] == {"method": "PAK-default", "rounds": 3, "mean_threshold": 7.0,
                       "mean_error": pytest.approx(-0.5 / 3), "mean_abs_error": pytest.approx(3.5 / 3),
                       "median_abs_error": 1.0,
                       "improvement_factor": pytest.approx((65 / 3) / (3.5 / 3))}
    drawn = []
    monkeypatch.setattr(analysis, "save_figure", lambda path, panels, **options: drawn.append(panels) or path)
    plot_last_step_errors(errors, tmp_path / "e.png")
    densities, shares = drawn[0]
    assert "error" in densities.xlabel and "B" not in densities.xlabel
    assert np.asarray(densities.series[0].x).max() == 25.0  # bin edges in the errors' own units
    assert list(shares.series[0].x) == [10.0, 25.0, 30.0] and shares.xlog


def test_the_error_plot_is_written(tmp_path):
    errors = {"BT-bound": [-30.0, 10.0, 25.0], "PAK-default": [1.0, -2.0, 0.5]}
    path = plot_last_step_errors(errors, tmp_path / "errors.png", title="t")
    assert path == tmp_path / "errors.png" and path.read_bytes()[:4] == b"\x89PNG"
