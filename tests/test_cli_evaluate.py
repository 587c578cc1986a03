"""``dpstream evaluate --threshold-method``: the paper's NM-E or the library's default ToPS, and saying which."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.evaluation.streams as streams
from dpstream.cli import cli
from dpstream.evaluation import ExperimentConfig, run_study

SMALL = ["--epsilons", "0.5", "--rounds", "1", "--queries", "5", "--hold", "512", "--max-range", "1024"]


@pytest.fixture
def methods_used(monkeypatch):
    """The threshold_method of every ToPS the studies build."""
    used = []

    class Recorded(streams.ToPS):
        def __init__(self, **kwargs):
            used.append(kwargs["threshold_method"])
            super().__init__(**kwargs)

    monkeypatch.setattr(streams, "ToPS", Recorded)
    return used


@pytest.mark.parametrize("method", ["nm-e", "model"])
def test_the_study_runs_the_threshold_method_asked(methods_used, method):
    values = np.random.default_rng(1).integers(0, 40, 3000).astype(float)
    config = ExperimentConfig(hold=512, max_range=1024, rounds=2, queries=5, threshold_method=method)
    records = run_study("end-to-end", values, 100.0, epsilons=[0.5], config=config, seed=0)
    assert methods_used == [method, method]  # one ToPS per round
    assert records[0]["threshold_source"] == streams.TOPS_THRESHOLD[method]


def test_the_default_is_the_papers_nm_e(methods_used):
    assert ExperimentConfig().threshold_method == "nm-e"
    with pytest.raises(ValueError, match="threshold_method"):
        ExperimentConfig(threshold_method="paper")


@pytest.mark.parametrize("method, says", [("nm-e", "NM-E, the paper's"), ("model", "the model, the library's default")])
def test_evaluate_says_which_threshold_method_it_ran(tmp_path, methods_used, method, says):
    result = CliRunner().invoke(cli, ["evaluate", "--study", "baselines", "--methods", "ToPS,Base", *SMALL,
                                      "--threshold-method", method, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert methods_used == [method]
    assert result.stdout.splitlines()[0] == f"MSE (mean over rounds; ToPS's θ: {says})"
    assert f"pos: threshold {streams.TOPS_THRESHOLD[method]}" in result.stderr
    summary = json.loads((tmp_path / "baselines-pos.json").read_text())
    assert summary["config"]["threshold_method"] == method
    assert {row["threshold_source"] for row in summary["summary"]} == {streams.TOPS_THRESHOLD[method]}


def test_threshold_method_needs_a_study_with_tops(tmp_path):
    result = CliRunner().invoke(cli, ["evaluate", "--study", "hierarchy", *SMALL, "--threshold-method", "model",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--threshold-method applies to the ToPS" in result.stderr
    assert not (tmp_path / "out").exists()
