"""Per-key reporting of a keyed release: ``ByKey.report``, the stderr table, ``--summary FILE`` and ``dpstream budget``.

Every number reported must be public or published: the count of values per key (public under the
per-key guarantee), what was released, theta and s (published), the hold-out and epsilon; the
tests check each against the key's mechanism run alone.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._columns import SUMMARY_COLUMNS, TABLE_KEYS
from dpstream.release import BinaryTreeCounter, ToPS
from dpstream.release.by_key import ByKey, KeyReport, key_bits, seed_secret, structure

OPTIONS = ["--epsilon", "1", "--upper-bound", "5", "--max-range", "512", "--seed", "11", "--key-column", "meter",
           "--column", "kWh"]


def _run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def _meters(path, counts: dict[str, int], seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    names = np.repeat(np.array(list(counts), dtype=object), list(counts.values()))
    rng.shuffle(names)
    values = np.round(rng.uniform(0, 5, names.size), 3)
    path.write_text("meter,kWh\n" + "".join(f"{k},{v!r}\n" for k, v in zip(names, values.tolist())))
    return values, names.tolist()


def _tops(key: str, hold: int = 100) -> ToPS:
    return ToPS(epsilon=1.0, upper_bound=5, hold=hold, max_range=512, seed=key_bits(seed_secret(11), key))


def test_the_report_of_each_key_is_its_mechanism_run_alone(tmp_path):
    values, names = _meters(tmp_path / "m.csv", {"b": 400, "a": 250, "c": 60})
    streams = ByKey(build=_tops)
    streams.release(values, names)
    reports = streams.report()
    assert [r.key for r in reports] == ["a", "b", "c"]  # sorted
    for report in reports:
        alone = _tops(report.key)
        alone.release(values[[n == report.key for n in names]])
        assert report.values == alone.position == names.count(report.key) and report.hold == 100
        assert report.released == max(0, alone.position - 100)
        assert report.threshold == alone.threshold and report.epsilon == alone.privacy().epsilon
        assert report.smoothed_levels == ("" if alone.threshold is None else str(alone.smoothed_levels))
    assert reports[2].threshold is None and reports[2].released == 0  # c ended within its hold-out


def test_structure_names_periods_and_mechanisms_without_s():
    periodic = ToPS(epsilon=1.0, upper_bound=5, threshold=4, period=24, max_range=4096, seed=1)
    assert structure(periodic) == f"period 24, d {periodic.period_levels}"
    assert structure(BinaryTreeCounter(epsilon=1.0, upper_bound=5, max_range=64, seed=1)) == ""
    assert structure(ToPS(epsilon=1.0, upper_bound=5, hold=10, seed=1)) == ""  # hold-out not over


def test_release_prints_a_table_for_few_keys_and_writes_the_summary(tmp_path):
    values, names = _meters(tmp_path / "m.csv", {"m1": 300, "m2": 150})
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--hold", 100, *OPTIONS,
                  "--summary", tmp_path / "summary.csv")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("key "))
    assert lines[head].split() == ["key", "values", "released", "theta", "s", "hold", "epsilon"]
    streams = ByKey(build=_tops)
    streams.release(values, names)
    for line, report in zip(lines[head + 1 : head + 3], streams.report()):
        assert line.split()[:4] == [report.key, str(report.values), str(report.released), repr(report.threshold)]
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == SUMMARY_COLUMNS == KeyReport._fields
    assert rows[0] == ["key", "values", "released", "threshold", "smoothed_levels", "hold", "epsilon"]
    assert [row[:3] for row in rows[1:]] == [["m1", "300", "200"], ["m2", "150", "50"]]
    assert [float(row[3]) for row in rows[1:]] == [r.threshold for r in streams.report()]


def test_the_table_shows_an_epsilon_recomputed_from_the_noise_scale_as_asked_and_the_summary_the_exact_one(tmp_path):
    # the table said 0.09999999999989766: w-event recomputes epsilon from the noise scale, rounded up
    _meters(tmp_path / "m.csv", {"m1": 40, "m2": 30})
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", *OPTIONS, "--epsilon", "0.1",
                  "--w-event", 7, "--threshold", 3, "--summary", tmp_path / "summary.csv")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("key "))
    assert [line.split()[-1] for line in lines[head + 1 : head + 3]] == ["0.1", "0.1"]
    with open(tmp_path / "summary.csv", newline="") as f:
        exact = [float(row[-1]) for row in list(csv.reader(f))[1:]]
    assert all(0.1 * (1 - 1e-10) < epsilon < 0.1 for epsilon in exact)  # the exact one, below the one asked


def test_many_keys_are_no_table_but_a_summary_row_each(tmp_path):
    _meters(tmp_path / "m.csv", {f"k{i:02d}": 12 for i in range(TABLE_KEYS + 1)})
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--threshold", 4, *OPTIONS)
    assert result.exit_code == 0, result.output
    assert f"more than {TABLE_KEYS} for a table here: --summary FILE" in result.stderr
    assert not any(line.startswith("key ") for line in result.stderr.splitlines())
    again = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--force", "--threshold", 4, *OPTIONS,
                 "--summary", tmp_path / "s.csv")
    assert again.exit_code == 0, again.output
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert len(rows) == TABLE_KEYS + 2 and rows[1] == "k00,12,12,4.0,1,0,1.0"


@pytest.mark.parametrize(("extra", "message"), [([], "--summary applies only with --key-column."),
                                                (["--key-column", "meter", "--engine", "spark"],
                                                 "--summary applies with --engine local only.")])
def test_summary_is_refused_without_keys_or_on_spark(tmp_path, extra, message):
    _meters(tmp_path / "m.csv", {"m1": 10})
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--epsilon", 1, "--upper-bound", 5,
                  "--column", "kWh", "--summary", tmp_path / "s.csv", *extra)
    assert result.exit_code == 2 and message in result.output and not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("clash", ["out.csv", "m.csv", "state"])
def test_summary_is_refused_on_the_output_the_input_or_the_state(tmp_path, clash):
    _meters(tmp_path / "m.csv", {"m1": 10})
    before = (tmp_path / "m.csv").read_bytes()
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--state", tmp_path / "state",
                  "--threshold", 4, *OPTIONS, "--summary", tmp_path / clash)
    assert result.exit_code == 2 and "must name different files" in result.output
    assert (tmp_path / "m.csv").read_bytes() == before and not (tmp_path / "out.csv").exists()


def test_budget_shows_each_key_of_a_keyed_state(tmp_path):
    _meters(tmp_path / "m.csv", {"m1": 300, "m2": 150})
    made = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--hold", 100, *OPTIONS,
                "--state", tmp_path / "state", "--summary", tmp_path / "released.csv")
    assert made.exit_code == 0, made.output
    shown = _run("budget", tmp_path / "state", "--summary", tmp_path / "budget.csv")
    assert shown.exit_code == 0, shown.output
    assert "key  values  released  theta  s  hold  epsilon" in shown.stdout
    assert (tmp_path / "budget.csv").read_text() == (tmp_path / "released.csv").read_text()
    plain = _run("release", tmp_path / "m.csv", "-o", tmp_path / "p.txt", "--column", "kWh", "--epsilon", 1,
                 "--upper-bound", 5, "--method", "bt", "--state", tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    refused = _run("budget", tmp_path / "plain", "--summary", tmp_path / "x.csv")
    assert refused.exit_code == 2 and "--summary applies to the state of a release with --key-column" in refused.output



def test_a_summary_that_fails_half_written_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """--summary is written as every output is, into a temporary renamed onto the file at the end: a failure while
    writing its rows leaves the previous summary as it was (an in-place write would have truncated it)."""
    import dpstream.cli._columns as columns

    _meters(tmp_path / "m.csv", {"a": 12, "b": 12})
    (tmp_path / "s.csv").write_text("old,contents\n" * 100)
    fields, calls = columns._fields, []

    def failing(report):
        calls.append(report)
        if len(calls) > 3:  # the table's two rows, then the summary's first: its second fails
            raise RuntimeError("disk on fire")
        return fields(report)

    monkeypatch.setattr(columns, "_fields", failing)
    result = _run("release", tmp_path / "m.csv", "-o", tmp_path / "out.csv", "--threshold", 4, *OPTIONS,
                  "--summary", tmp_path / "s.csv")
    assert result.exit_code != 0 and isinstance(result.exception, RuntimeError)
    assert (tmp_path / "s.csv").read_text() == "old,contents\n" * 100
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
