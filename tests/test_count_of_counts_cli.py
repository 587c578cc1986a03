"""``dpstream count-of-counts`` and ``dpstream evaluate-count-of-counts``."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsData,
    TopDownCountOfCounts,
    housing_data,
    write_tables,
)


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


# -- bottom-up, K, the label column, memory, exit codes, the plot ---------------------------------


def _base(tables) -> list[str]:
    _, (entities, groups, hierarchy) = tables
    return ["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy]


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_bottom_up_release_states_its_guarantee(tables, tmp_path):
    data = tables[0]
    out = tmp_path / "bu.csv"
    result = run(_base(tables) + ["--epsilon", "1", "--method", "bu", "--max-size", "20000", "--seed", "3",
                                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "privacy: 1-DP" in result.stderr and "all of epsilon on the leaves" in result.stderr
    rows = [(r["region"], int(r["level"]), int(r["size"]), int(r["count"])) for r in _rows(out)]
    assert rows == BottomUpCountOfCounts(epsilon=1.0, max_size=20_000, seed=3).release(data).rows()
    merged = run(_base(tables) + ["--epsilon", "1", "--method", "bu", "--merge", "average", "-o", str(out), "--force"])
    assert merged.exit_code == 2 and "top-down release only" in merged.output


def test_an_estimated_k_is_printed_and_labels_the_last_size(tables, tmp_path):
    data = tables[0]
    out = tmp_path / "o.csv"
    result = run(_base(tables) + ["--epsilon", "1", "--max-size-epsilon", "0.5", "--seed", "4", "-o", str(out)])
    assert result.exit_code == 0, result.output
    k = TopDownCountOfCounts(epsilon=1.0, max_size_epsilon=0.5, seed=4).release(data).max_size
    assert f"estimated K = {k:,} " in result.stderr and f"estimated K = {k:,}" not in result.stdout
    rows = _rows(out)
    assert all(int(r["size"]) <= k for r in rows)
    # the label marks exactly the rows of size K, which close their region
    assert {(r["region"], r["level"]) for r in rows if r["size_label"]} == {
        (r["region"], r["level"]) for r in rows if int(r["size"]) == k
    }
    assert all(r["size_label"] == f"{k} or more" for r in rows if int(r["size"]) == k)
    given = run(_base(tables) + ["--epsilon", "1", "--max-size", "20000", "-o", str(out), "--force"])
    assert given.exit_code == 0 and "estimated K" not in given.output


def test_the_four_columns_stay_and_size_label_trails(tables, tmp_path):
    out = tmp_path / "o.csv"
    result = run(_base(tables) + ["--epsilon", "1", "--max-size", "4", "--seed", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    header = out.read_text().splitlines()[0]
    assert header == '"region","level","size","count","size_label"'
    rows = _rows(out)
    assert all(int(r["size"]) <= 4 for r in rows)
    capped = [r for r in rows if int(r["size"]) == 4]
    assert capped and all(r["size_label"] == "4 or more" for r in capped)
    assert all(r["size_label"] == "" for r in rows if int(r["size"]) < 4)
    last = {}  # the last row of every region is the only one that may carry the label
    for index, r in enumerate(rows):
        last[(r["region"], r["level"])] = index
    assert {i for i, r in enumerate(rows) if r["size_label"]} <= set(last.values())


@pytest.mark.parametrize("method", ["hg", "hg,hc,hg"])
def test_max_size_applies_to_hg_too(tables, tmp_path, method):
    data = tables[0]
    assert int(data.size.max()) > 100  # the housing data has outliers
    out = tmp_path / "o.csv"
    options = ["--epsilon", "1", "--method", method, "--max-size", "100", "--seed", "3", "-o", str(out)]
    result = run(_base(tables) + options)  # seeded: an unseeded release may leave size 100 empty
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert max(int(r["size"]) for r in rows) == 100
    assert {r["size_label"] for r in rows if int(r["size"]) == 100} == {"100 or more"}


def test_a_max_size_beyond_the_memory_limit_is_refused_before_any_work(tables, tmp_path):
    out = tmp_path / "o.csv"
    result = run(_base(tables) + ["--epsilon", "1", "--max-size", "1000000000", "-o", str(out)])
    assert result.exit_code == 2
    assert "--max-size" in result.output and "89.4 GiB" in result.output and "--memory-limit 4 GiB" in result.output
    assert "groups in" not in result.output and not out.exists()  # the tables were not even read
    # the installed command prints that one line and nothing else
    command = subprocess.run([sys.executable, "-m", "dpstream.cli", *_base(tables), "--epsilon", "1",
                              "--max-size", "1000000000", "-o", str(out)], capture_output=True, text=True)
    assert command.returncode == 2 and command.stdout == ""
    assert command.stderr.startswith("Error: Invalid value for '--max-size': 1000000000 needs about 89.4 GiB")
    assert len(command.stderr.strip().splitlines()) == 1
    small = run(_base(tables) + ["--epsilon", "1", "--max-size", "2000000", "--memory-limit", "100MiB", "-o",
                                 str(out)])
    assert small.exit_code == 2 and "183 MiB" in small.output and "--memory-limit 100 MiB" in small.output
    # hg keeps no dense rows: its K is not limited by memory
    hg = run(_base(tables) + ["--epsilon", "1", "--method", "hg", "--max-size", "1000000000", "-o", str(out)])
    assert hg.exit_code == 0, hg.output


def test_an_estimated_k_beyond_the_memory_limit_fails_at_run_time(tables, tmp_path):
    out = tmp_path / "o.csv"
    result = run(_base(tables) + ["--epsilon", "1", "--memory-limit", "1MiB", "-o", str(out)])
    assert result.exit_code == 1
    assert "the estimated K = " in result.output and "more than the memory limit of 1 MiB" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "1", "--method", "hx"], "hx"),
        (["--epsilon", "1", "--method", "bu,hc"], "bu"),
        (["--epsilon", "1", "--max-size", "0"], "--max-size"),
        (["--epsilon", "1", "--max-size-epsilon", "-1"], "--max-size-epsilon"),
        (["--epsilon", "1", "--memory-limit", "lots"], "--memory-limit"),
        (["--epsilon", "1", "--plot", "figure.pdf"], "--plot"),
        (["--epsilon", "1", "--plot-regions", "US"], "--plot-regions"),
        (["--epsilon", "1", "--seed", "-1"], "seed"),
        (["--epsilon", "1", "--plot", "o.png", "--plot-regions", "nowhere"], "nowhere"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(tables, tmp_path, monkeypatch, extra, named):
    monkeypatch.chdir(tmp_path)
    result = run(_base(tables) + extra + ["-o", "o.csv"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and named in errors[0]
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "o.png").exists()


def test_runtime_errors_exit_1(tables, tmp_path):
    _, (entities, groups, hierarchy) = tables
    missing = run(["count-of-counts", "--entities", str(tmp_path / "none.csv"), "--groups", groups, "--hierarchy",
                   hierarchy, "--epsilon", "1", "-o", str(tmp_path / "o.csv")])
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_plot_draws_the_released_histograms(tables, tmp_path):
    out, figure = tmp_path / "o.csv", tmp_path / "regions.png"
    args = _base(tables) + ["--epsilon", "1", "--max-size", "20000", "--seed", "2", "-o", str(out),
                            "--plot", str(figure)]
    result = run(args)
    assert result.exit_code == 0, result.output
    assert figure.read_bytes()[:4] == b"\x89PNG" and figure.stat().st_size > 10_000
    assert "wrote the histograms of 4 region(s)" in result.stderr  # the root and three states
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
    again = run(args + ["--force", "--plot-regions", "S00C0000,US"])
    assert again.exit_code == 0 and "of 2 region(s)" in again.stderr
    refused = run(args)  # both exist: refused before any work, the plot untouched
    assert refused.exit_code == 1 and "--force" in refused.output
    same = run(_base(tables) + ["--epsilon", "1", "-o", str(figure), "--plot", str(figure), "--force"])
    assert same.exit_code == 2 and "must differ from --output" in same.output


def test_max_size_and_its_budget_exclude_each_other(tables, tmp_path):
    """docs/count-of-counts.md promises one or the other; the budget was silently ignored."""
    result = run(_base(tables) + ["--epsilon", "1", "--max-size", "20", "--max-size-epsilon", "0.1",
                                  "-o", str(tmp_path / "o.csv")])
    assert result.exit_code == 2 and not (tmp_path / "o.csv").exists()
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "--max-size and --max-size-epsilon" in errors[0]
    alone = run(_base(tables) + ["--epsilon", "1", "--max-size-epsilon", "0.1", "-o", str(tmp_path / "o.csv")])
    assert alone.exit_code == 0 and "estimated K" in alone.output


@pytest.mark.parametrize("method", ["hc,hc", "hc,hc,hc,hc"])
def test_one_method_per_level_is_checked_against_the_hierarchy_before_any_work(tables, tmp_path, method):
    """The fixture's hierarchy has 3 levels; other counts were refused (exit 1) after the progress bar."""
    result = run(_base(tables) + ["--epsilon", "1", "--method", method, "-o", str(tmp_path / "o.csv")])
    assert result.exit_code == 2 and not (tmp_path / "o.csv").exists()
    assert "regions" not in result.output and "read " not in result.output  # no progress bar, no table read
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and f"{method} names {method.count(',') + 1} levels" in errors[0]
    assert "has 3 (level0 to level2)" in errors[0]
