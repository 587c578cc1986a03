"""``dpstream count-of-counts`` and ``dpstream evaluate-count-of-counts``."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import CountOfCountsData, TopDownCountOfCounts, housing_data, write_tables


@pytest.fixture
def tables(tmp_path):
    data = housing_data(2000, n_states=3, n_counties=7, seed=5)
    paths = write_tables(data, tmp_path / "in")
    return data, [str(path) for path in paths]


def run(args):
    return CliRunner().invoke(cli, args)


def test_release_matches_the_library_and_is_consistent(tables, tmp_path):
    data, (entities, groups, hierarchy) = tables
    out = tmp_path / "out.csv"
    args = ["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy,
            "--epsilon", "1", "--max-size", "20000", "--seed", "3", "-o", str(out)]
    result = run(args)
    assert result.exit_code == 0, result.output
    assert "1-DP" in result.output and "entity level" in result.output
    with open(out, newline="") as handle:
        rows = [(r["region"], int(r["level"]), int(r["size"]), int(r["count"])) for r in csv.DictReader(handle)]
    expected = TopDownCountOfCounts(epsilon=1.0, max_size=20_000, seed=3).release(data).rows()
    assert rows == expected
    # every level holds all groups
    for level in range(3):
        assert sum(count for _, lv, _, count in rows if lv == level) == data.n_groups
    again = run(args)
    assert again.exit_code != 0 and "--force" in again.output
    assert run(args + ["--force", "--method", "hg,hc,hc"]).exit_code == 0


def test_release_errors(tables, tmp_path):
    _, (entities, groups, hierarchy) = tables
    base = ["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy, "--epsilon", "1"]
    result = run(base + ["-o", entities, "--force"])
    assert result.exit_code != 0 and "is the input file" in result.output
    result = run(base + ["--method", "hx", "-o", str(tmp_path / "o.csv")])
    assert result.exit_code != 0 and "hx" in result.output
    result = run(["count-of-counts", "--entities", str(tmp_path / "missing.csv"), "--groups", groups,
                  "--hierarchy", hierarchy, "--epsilon", "1", "-o", str(tmp_path / "o.csv")])
    assert result.exit_code != 0 and "does not exist" in result.output
    assert not (tmp_path / "o.csv").exists()


def test_release_without_max_size_spends_the_estimate(tables, tmp_path):
    _, (entities, groups, hierarchy) = tables
    result = run(["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy,
                  "--epsilon", "1", "--max-size-epsilon", "0.01", "--seed", "1", "-o", str(tmp_path / "o.csv")])
    assert result.exit_code == 0, result.output
    assert "1.01-DP" in result.output


def test_evaluate_writes_tables_and_plot(tables, tmp_path):
    _, (entities, groups, hierarchy) = tables
    out = tmp_path / "results"
    result = run(["evaluate-count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy,
                  "--strategies", "hc,hc-average,hg,bu", "--runs", "2", "--max-size", "20000", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "count-of-counts-tables.json").read_text())["summary"]
    strategies = {row["strategy"] for row in summary}
    assert strategies == {"hc", "hc-average", "hg", "bu", "omniscient"}
    assert all(np.isfinite(row["emd_mean"]) and row["emd_mean"] >= 0 for row in summary)
    assert (out / "count-of-counts-tables-levels.png").stat().st_size > 1000
    assert "mean EMD per region" in result.stdout  # the table is a result: stdout
    result = run(["evaluate-count-of-counts", "--strategies", "nope", "--out", str(out)])
    assert result.exit_code != 0 and "nope" in result.output


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
    output = _evaluate(
        ["--dataset", "housing", "--n-groups", "300", "--states", "2", "--counties", "3"], tmp_path / "out"
    )
    assert re.search(r"groups, largest [\d,]+; regions per level \[1, 2, 3\]", output)


def test_dash_output_writes_the_csv_to_stdout(tables, tmp_path, monkeypatch):
    data, (entities, groups, hierarchy) = tables
    monkeypatch.chdir(tmp_path)
    args = [
        "count-of-counts",
        "--entities",
        entities,
        "--groups",
        groups,
        "--hierarchy",
        hierarchy,
        "--epsilon",
        "1",
        "--max-size",
        "20000",
        "--seed",
        "3",
        "-o",
        "-",
    ]
    result = run(args)
    assert result.exit_code == 0, result.output
    rows = [
        (r["region"], int(r["level"]), int(r["size"]), int(r["count"]))
        for r in csv.DictReader(result.stdout.splitlines())
    ]
    assert rows == TopDownCountOfCounts(epsilon=1.0, max_size=20_000, seed=3).release(data).rows()
    assert "to stdout" in result.stderr and not (tmp_path / "-").exists()
    assert run(args).exit_code == 0  # nothing was created that a second run would refuse to overwrite


def test_missing_output_directory_fails_before_any_work(tables, tmp_path):
    _, (entities, groups, hierarchy) = tables
    target = tmp_path / "no-such-dir" / "o.csv"
    result = run(
        [
            "count-of-counts",
            "--entities",
            entities,
            "--groups",
            groups,
            "--hierarchy",
            hierarchy,
            "--epsilon",
            "1",
            "--max-size",
            "20000",
            "-o",
            str(target),
        ]
    )
    assert result.exit_code == 1
    assert "no-such-dir" in result.output and "does not exist" in result.output
    assert "read " not in result.output  # the tables were not even read
    assert len(result.output.strip().splitlines()) == 1


def test_seed_help_matches_release():
    text = " ".join(run(["count-of-counts", "--help"]).output.split())
    assert "anyone who knows the seed can recompute the noise. Never publish a seeded release." in text


@pytest.mark.parametrize(
    "option, value, named",
    [
        ("--runs", "0", "--runs"),
        ("--strategies", "hc,nope", "nope"),
        ("--epsilon", "0", "--epsilon"),
        ("--max-size", "0", "--max-size"),
        ("--counties", "1", "--counties"),
        ("--entities", "e.csv", "go together"),
    ],
)
def test_evaluate_checks_options_before_looking_at_the_outputs(tmp_path, option, value, named):
    for name in ("count-of-counts-housing.csv", "count-of-counts-housing-runs.csv"):
        (tmp_path / name).write_text("old")
    result = run(["evaluate-count-of-counts", "--states", "2", option, value, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert named in result.output and "exists" not in result.output
    assert (tmp_path / "count-of-counts-housing.csv").read_text() == "old"


def test_evaluate_seed_help_names_the_experiment():
    assert "Seed of the experiment" in run(["evaluate-count-of-counts", "--help"]).output
