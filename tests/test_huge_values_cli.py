"""Values near the largest float (1.7e308) on the command line: one clean error line, never numpy's
RuntimeWarnings (``postprocess`` is in test_postprocess_cli.py)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli


@pytest.mark.parametrize("scale", [1.7e308, 1e298, 1e148])
def test_evaluate_refuses_a_dataset_whose_sums_would_overflow(tmp_path, scale):
    values = np.random.default_rng(0).uniform(0.5, 1.0, 200) * scale
    (tmp_path / "huge.csv").write_text("value\n" + "".join(f"{value:.6e}\n" for value in values))
    result = CliRunner().invoke(cli, ["evaluate", "--dataset", str(tmp_path / "huge.csv"), "--study", "hierarchy",
                                      "--rounds", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Warning" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "the squared errors of the studies would overflow float64" in errors[0]
    assert not (tmp_path / "out").exists()


def test_evaluate_runs_a_dataset_just_within_the_bound_without_warnings(tmp_path):
    values = np.random.default_rng(0).uniform(0.5, 1.0, 200) * 1e140
    (tmp_path / "large.csv").write_text("value\n" + "".join(f"{value:.6e}\n" for value in values))
    result = CliRunner().invoke(cli, ["evaluate", "--dataset", str(tmp_path / "large.csv"), "--study", "hierarchy",
                                      "--rounds", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0 and "Warning" not in result.stderr, result.stderr
