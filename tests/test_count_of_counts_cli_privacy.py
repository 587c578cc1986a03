"""``dpstream evaluate-count-of-counts`` does not print private statistics of real tables."""

from __future__ import annotations

import re

from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import CountOfCountsData, write_tables

SIZES = {"a": [1, 2, 2, 37], "b": [3, 1]}  # the largest group, 37, is private


def _evaluate(extra, out):
    args = ["evaluate-count-of-counts", "--strategies", "hc", "--runs", "1", "--max-size", "50", "--out", str(out)]
    result = CliRunner().invoke(cli, args + extra)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_largest_group_of_real_tables_is_not_printed(tmp_path):
    data = CountOfCountsData.from_leaf_sizes([("r", "a"), ("r", "b")], SIZES)
    entities, groups, hierarchy = (str(path) for path in write_tables(data, tmp_path / "in"))
    output = _evaluate(["--entities", entities, "--groups", groups, "--hierarchy", hierarchy], tmp_path / "out")
    # the number of groups and the regions are public; no group size is printed
    assert "6 groups; regions per level [1, 2]\n" in output
    assert not re.search(r"largest [\d,]+", output)


def test_generated_data_still_reports_its_largest_group(tmp_path):
    output = _evaluate(["--dataset", "housing", "--n-groups", "300", "--states", "2", "--counties", "3"], tmp_path / "out")
    assert re.search(r"groups, largest [\d,]+; regions per level \[1, 2, 3\]", output)
