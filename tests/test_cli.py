"""The command line: release end to end, streaming from stdin, errors as one line, no overwrite."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream import ToPS
from dpstream.cli import cli as main


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def stream_file(tmp_path):
    values = np.random.default_rng(0).integers(0, 30, size=3000).astype(float)
    path = tmp_path / "stream.csv"
    path.write_text("value\n" + "\n".join(str(v) for v in values) + "\n")
    return path, values


ARGS = ["--epsilon", "0.5", "--upper-bound", "100", "--hold", "500", "--max-range", "1024", "--seed", "3"]


def test_release_file_matches_the_library(runner, stream_file, tmp_path):
    path, values = stream_file
    out = tmp_path / "out.txt"
    result = runner.invoke(main, ["release", str(path), "-o", str(out), *ARGS])
    assert result.exit_code == 0, result.output
    released = np.loadtxt(out)
    expected = ToPS(epsilon=0.5, upper_bound=100, hold=500, max_range=1024, seed=3).release(values)
    assert np.array_equal(released, expected)  # repr round-trips floats exactly
    assert "threshold theta" in result.stderr and "0.5-DP" in result.stderr


def test_release_stdin_equals_file(runner, stream_file, tmp_path):
    path, values = stream_file
    result = runner.invoke(main, ["release", "-", "-o", "-", *ARGS], input=path.read_text())
    assert result.exit_code == 0, result.stderr
    released = np.array([float(line) for line in result.stdout.splitlines()])
    expected = ToPS(epsilon=0.5, upper_bound=100, hold=500, max_range=1024, seed=3).release(values)
    assert np.array_equal(released, expected)


def test_release_refuses_to_overwrite(runner, stream_file, tmp_path):
    path, _ = stream_file
    out = tmp_path / "out.txt"
    out.write_text("precious\n")
    result = runner.invoke(main, ["release", str(path), "-o", str(out), *ARGS])
    assert result.exit_code != 0
    assert "--force" in result.stderr and out.read_text() == "precious\n"
    forced = runner.invoke(main, ["release", str(path), "-o", str(out), *ARGS, "--force"])
    assert forced.exit_code == 0 and out.read_text() != "precious\n"


@pytest.mark.parametrize(
    ("text", "args", "needle"),
    [
        ("1\n2\n", ["--epsilon", "-1"], "epsilon must be a finite number > 0, got -1.0"),
        ("1\nabc\n", [], "line 2 is not a number: 'abc'"),
        ("1\n200\n", [], "position 1 (0-based) must be in [0, 100]"),
        ("a,b\n1,2\n", [], "choose one with a column name"),
    ],
)
def test_release_errors_are_one_line(runner, text, args, needle):
    base = {"--epsilon": "1", "--upper-bound": "100", "--hold": "1"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [item for pair in base.items() for item in pair]
    result = runner.invoke(main, ["release", "-", "-o", "-", *flat], input=text)
    assert result.exit_code != 0
    assert needle in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: theta is chosen")]
    assert "Traceback" not in result.stderr and len(lines) <= 3  # besides the warning of a 1-value hold-out


def test_release_missing_input_file(runner, tmp_path):
    result = runner.invoke(main, ["release", str(tmp_path / "nope.csv"), "-o", "-", *ARGS])
    assert result.exit_code != 0 and "does not exist" in result.stderr


def test_release_short_stream_is_an_error_and_leaves_no_file(runner, tmp_path):
    result = runner.invoke(main, ["release", "-", "-o", "-", *ARGS], input="1\n2\n")
    assert result.exit_code != 0 and result.stdout == ""
    assert "before the hold-out" in result.stderr and "nothing was released" in result.stderr
    source, target = tmp_path / "short.txt", tmp_path / "out.txt"
    source.write_text("1\n2\n")
    result = runner.invoke(main, ["release", str(source), "-o", str(target), *ARGS])
    assert result.exit_code != 0 and not target.exists() and not list(tmp_path.glob(".*partial"))


def test_release_names_a_missing_output_directory(runner, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("1\n2\n")
    result = runner.invoke(main, ["release", str(source), "-o", str(tmp_path / "nodir" / "out.txt"), *ARGS])
    assert result.exit_code != 0 and "does not exist" in result.stderr and "partial" not in result.stderr


def test_release_reports_a_broken_gzip_file_by_name(runner, tmp_path):
    source = tmp_path / "data.csv.gz"
    source.write_bytes(b"not gzip at all")
    result = runner.invoke(main, ["release", str(source), "-o", "-", *ARGS])
    assert result.exit_code != 0 and f"{source} is not a valid gzip file" in result.stderr


def test_plain_dpstream_prints_the_help():
    result = subprocess.run([sys.executable, "-m", "dpstream.cli"], capture_output=True, text=True)
    assert "Usage: " in result.stderr and "Commands:" in result.stderr and "Error" not in result.stderr


def test_release_streams_each_value_as_it_arrives(tmp_path):
    """A live producer: the first released value must come out before the producer finishes."""
    producer = (
        "import sys, time\n"
        "for i in range(6):\n"
        "    print(i, flush=True)\n"
        "    time.sleep(0.5 if i < 5 else 30)\n"
    )
    source = subprocess.Popen([sys.executable, "-c", producer], stdout=subprocess.PIPE)
    release = subprocess.Popen(
        [sys.executable, "-m", "dpstream.cli", "release", "-", "-o", "-", "--epsilon", "1",
         "--upper-bound", "10", "--hold", "2", "--seed", "1"],
        stdin=source.stdout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        start = time.monotonic()
        lines = [release.stdout.readline() for _ in range(4)]
        elapsed = time.monotonic() - start
    finally:
        source.kill()
        release.kill()
    assert all(line.strip() for line in lines)
    assert elapsed < 20  # the producer's last value comes only after 30 s


def test_evaluate_writes_results_and_plot(runner, tmp_path):
    out = tmp_path / "res"
    args = ["evaluate", "--study", "hierarchy", "--methods", "H16c,Base", "--epsilons", "0.5,1",
            "--rounds", "2", "--queries", "20", "--hold", "1000", "--max-range", "4096", "--out", str(out)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.stderr
    for name in ("hierarchy-pos.csv", "hierarchy-pos-rounds.csv", "hierarchy-pos.json", "hierarchy-pos-mse.png"):
        assert (out / name).stat().st_size > 0
    assert "NON-PRIVATE" in result.stderr
    assert result.stdout.startswith("MSE (mean over rounds)") and "H16c" in result.stdout  # results on stdout
    again = runner.invoke(main, args)
    assert again.exit_code != 0 and "--force" in again.stderr


def test_evaluate_clips_on_request_and_fixes_the_query_length(runner, tmp_path):
    """--clip clips a file's values outside [0, B] instead of failing; --query-length L makes every
    query L values long, so MMSE = MSE / L^2 in every round."""
    import csv

    data = tmp_path / "big.csv"
    data.write_text("\n".join(["5", "900", "7"] * 700) + "\n")
    args = ["evaluate", "--dataset", str(data), "--upper-bound", "100", "--study", "hierarchy", "--methods",
            "H16c,Base", "--epsilons", "1", "--rounds", "2", "--queries", "10", "--hold", "256", "--max-range", "1024"]
    refused = runner.invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 1 and "--clip" in refused.stderr
    assert "position 1 (0-based) must be in [0, 100]" in refused.stderr
    result = runner.invoke(main, [*args, "--clip", "--query-length", "200", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.stderr
    with open(tmp_path / "b" / "hierarchy-big-rounds.csv") as handle:
        rounds = list(csv.DictReader(handle))
    assert len(rounds) == 4
    for row in rounds:
        assert float(row["mmse"]) == pytest.approx(float(row["mse"]) / 200**2, rel=1e-9)
    bad = runner.invoke(main, [*args, "--clip", "--query-length", "0", "--out", str(tmp_path / "c")])
    assert bad.exit_code == 2 and "--query-length" in bad.stderr and not (tmp_path / "c").exists()


def _bars(stderr):
    """The distinct progress bars drawn on stderr (tqdm redraws a bar with carriage returns)."""
    lines = [part for line in stderr.splitlines() for part in line.split("\r")]
    return {part.split(":")[0] for part in lines if "%|" in part}


@pytest.mark.parametrize(("args", "bar"), [
    (["evaluate", "--study", "end-to-end", "--epsilons", "0.5,1", "--rounds", "2", "--queries", "5", "--hold", "512",
      "--max-range", "1024"], "end-to-end on pos"),
    (["pak-improvement", "--hold", "50000", "--rounds", "2"], "pak-improvement"),
    (["evaluate-count-of-counts", "--dataset", "taxi", "--strategies", "hc,bu", "--runs", "2", "--max-size", "2000"],
     "evaluate-count-of-counts"),
    (["evaluate-postprocess", "--study", "all", "--rounds", "1", "--steps", "10", "--users", "5", "--epsilons", "1",
      "--steps-grid", "10", "--levels", "0.1", "--correlation-epsilons", "1"], "evaluate-postprocess"),
])
def test_each_evaluation_draws_one_overall_progress_bar(runner, tmp_path, monkeypatch, args, bar):
    """One bar per command, which reaches 100% and estimates the time left; no "run k/n" lines."""
    monkeypatch.setattr("dpstream.cli._app._on_terminal", lambda: True)  # bars are drawn on a terminal only
    result = runner.invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    assert _bars(result.stderr) == {bar}
    assert "100%|" in result.stderr and "<" in result.stderr  # tqdm's [elapsed<remaining]
    assert "run 1/" not in result.stderr


def test_evaluate_rejects_unknown_method(runner, tmp_path):
    result = runner.invoke(main, ["evaluate", "--methods", "nope", "--rounds", "1", "--out", str(tmp_path / "r")])
    assert result.exit_code != 0 and "no method 'nope'" in result.stderr


def test_demo_writes_plot(runner, tmp_path):
    result = runner.invoke(main, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert "released 450,061 values" in result.stdout
    assert (tmp_path / "pos-moving-average.png").stat().st_size > 0


def test_release_never_writes_over_its_input(runner, stream_file):
    path, _ = stream_file
    before = path.read_text()
    result = runner.invoke(main, ["release", str(path), "-o", str(path), *ARGS, "--force"])
    assert result.exit_code != 0 and "is the input file" in result.stderr
    assert path.read_text() == before


def test_failed_release_leaves_no_file(runner, tmp_path):
    source = tmp_path / "neg.csv"
    source.write_text("\n".join(["1"] * 600 + ["-3"] + ["1"] * 10) + "\n")
    out = tmp_path / "neg.out"
    result = runner.invoke(main, ["release", str(source), "-o", str(out), *ARGS])
    assert result.exit_code != 0 and "position 600" in result.stderr and "--clip" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neg.csv"]
    clipped = runner.invoke(main, ["release", str(source), "-o", str(out), *ARGS, "--clip"])
    assert clipped.exit_code == 0 and len(out.read_text().splitlines()) == 111


@pytest.mark.parametrize("text", ["", "value\n", "\n\n"])
def test_release_of_no_values_is_an_error(runner, tmp_path, text):
    source = tmp_path / "empty.csv"
    source.write_text(text)
    result = runner.invoke(main, ["release", str(source), "-o", "-", *ARGS])
    assert result.exit_code != 0 and "holds no values" in result.stderr
    to_file = runner.invoke(main, ["release", str(source), "-o", str(tmp_path / "out.txt"), *ARGS])
    assert to_file.exit_code != 0 and "holds no values" in to_file.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.csv"]


def test_threshold_step_allows_bounds_below_one(runner):
    text = "\n".join(str(v) for v in np.random.default_rng(1).uniform(0, 0.5, 600)) + "\n"
    args = ["release", "-", "-o", "-", "--epsilon", "1", "--upper-bound", "0.5", "--hold", "500"]
    refused = runner.invoke(main, args, input=text)
    assert refused.exit_code != 0 and "threshold_step" in refused.stderr
    result = runner.invoke(main, [*args, "--threshold-step", "0.01"], input=text)
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 100


def test_seeded_release_warns(runner, stream_file):
    path, _ = stream_file
    result = runner.invoke(main, ["release", str(path), "-o", "-", *ARGS])
    assert "testing only" in result.stderr


def test_demo_refuses_to_overwrite(runner, tmp_path):
    (tmp_path / "pos-moving-average.png").write_bytes(b"mine")
    result = runner.invoke(main, ["demo", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--force" in result.stderr
    assert (tmp_path / "pos-moving-average.png").read_bytes() == b"mine"


@pytest.mark.parametrize(
    "args", [["release", "x.csv"], ["release", "-", "-o", "-", "--epsilon", "zero", "--upper-bound", "1"], ["nope"]]
)
def test_usage_errors_are_one_line(args):
    result = subprocess.run([sys.executable, "-m", "dpstream.cli", *args], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error:")


def test_huge_hold_is_a_clear_error(runner):
    result = runner.invoke(main, ["release", "-", "-o", "-", "--epsilon", "1", "--upper-bound", "10",
                                  "--hold", str(10**13)], input="1\n")
    assert result.exit_code != 0 and "memory" in result.stderr


def test_release_with_an_absurd_budget_is_one_line(runner):
    values = "\n".join(str(v) for v in range(1, 200)) + "\n"
    args = ["--upper-bound", "300", "--hold", "50", "--max-range", "64"]
    for epsilon in ("1e300", "1e-300"):
        result = runner.invoke(main, ["release", "-", "-o", "-", "--epsilon", epsilon, *args], input=values)
        assert result.exit_code != 0 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "epsilon" in result.stderr


@pytest.mark.parametrize("args", [["--epsilon", "1e300"], ["--epsilon", "1e155", "--threshold-epsilon", "1"],
                                  ["--epsilon", "1", "--threshold-epsilon", "1e200"], ["--epsilon", "1", "--period",
                                                                                      str(10**15)]])
def test_release_refuses_parameters_that_could_never_run_before_reading_its_input(runner, tmp_path, args):
    """The input does not exist: a usage error about the parameter shows the check ran before any reading."""
    result = runner.invoke(main, ["release", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "out.txt"),
                                  "--upper-bound", "100", *args])
    assert result.exit_code == 2 and "missing.csv" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out.txt").exists()


def test_output_file_replaces_the_target_only_on_success(tmp_path):
    from dpstream.cli._outputs import output_file

    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with output_file(target) as out:
            out.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    with output_file(target) as out:
        out.write("new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_failed_forced_release_keeps_the_existing_output(runner, tmp_path):
    source, out = tmp_path / "neg.csv", tmp_path / "neg.out"
    source.write_text("\n".join(["1"] * 600 + ["-3"]) + "\n")
    out.write_text("previous release\n")
    result = runner.invoke(main, ["release", str(source), "-o", str(out), *ARGS, "--force"])
    assert result.exit_code != 0 and out.read_text() == "previous release\n"


def test_release_reads_parquet_streams_and_missing_values(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"t": list(range(40)), "load": [float(i % 5) for i in range(40)]}), tmp_path / "m.parquet")
    args = ["--epsilon", "1", "--upper-bound", "5", "--hold", "8", "--max-range", "16", "--seed", "1", "-o", "-"]
    parquet = CliRunner().invoke(main, ["release", str(tmp_path / "m.parquet"), "--column", "load", *args])
    assert parquet.exit_code == 0, parquet.output
    assert len([line for line in parquet.stdout.splitlines() if line]) == 32
    (tmp_path / "m.csv").write_text("v\n1\nNA\n3\n4\n")
    missing = ["release", str(tmp_path / "m.csv"), "--epsilon", "1", "--upper-bound", "5", "--hold", "1",
               "--max-range", "4", "--seed", "1", "-o", "-"]
    refused = CliRunner().invoke(main, missing)
    assert refused.exit_code == 1 and "line 3 is a missing value 'NA'" in refused.output
    zero = CliRunner().invoke(main, [*missing, "--missing", "zero"])
    assert zero.exit_code == 0 and len(zero.stdout.split()) == 3  # positions kept: 4 values, 1 held out
    skip = CliRunner().invoke(main, [*missing, "--missing", "skip"])
    assert skip.exit_code == 0 and len(skip.stdout.split()) == 2


def test_missing_values_are_counted_only_behind_report_unprotected_and_skip_states_what_it_protects(tmp_path):
    """How many values were missing and where the first was are exact counts outside the guarantee:
    printed only with --report-unprotected, saying so; --missing skip states the guarantee on the rows kept."""
    (tmp_path / "m.csv").write_text("v\n1\nNA\n3\n4\n")
    base = ["release", str(tmp_path / "m.csv"), "--epsilon", "1", "--upper-bound", "5", "--hold", "1",
            "--max-range", "4", "--seed", "1"]
    kept = "on the stream of the rows kept: rows with a missing value are dropped first"
    unprotected = "not protected by the privacy guarantee (--report-unprotected): "
    for missing, summary in (("zero", "4 values read; 1 missing value read as 0, the first on line 3."),
                             ("skip", "3 values read; 1 row with a missing value skipped, the first on line 3")):
        quiet = CliRunner().invoke(main, [*base, "--missing", missing, "-o", "-"])
        assert quiet.exit_code == 0, quiet.output
        assert "values read" not in quiet.stderr and "line 3" not in quiet.stderr
        asked = CliRunner().invoke(main, [*base, "--missing", missing, "-o", "-", "--report-unprotected"])
        assert asked.exit_code == 0 and asked.stdout == quiet.stdout
        assert unprotected + summary in asked.stderr
        assert (kept in quiet.stderr) == (missing == "skip")  # zero keeps positions: a value change, event level
        # --state states the same guarantee
        state = [*base, "--missing", missing, "-o", str(tmp_path / f"{missing}.out"), "--state",
                 str(tmp_path / f"{missing}.state")]
        durable = CliRunner().invoke(main, state)
        assert durable.exit_code == 0, durable.output
        assert (kept in durable.stderr) == (missing == "skip") and "values read" not in durable.stderr
    keyed = tmp_path / "k.csv"
    keyed.write_text("k,v\na,1\na,\na,3\nb,2\nb,4\n")
    per_key = CliRunner().invoke(main, [*base[:1], str(keyed), *base[2:], "--key-column", "k", "--missing", "skip",
                                        "-o", "-"])
    assert per_key.exit_code == 0 and kept in per_key.stderr, per_key.output


def test_evaluate_period_gives_tops_leaves_of_one_period(runner, tmp_path):
    """--period P: the end-to-end study's ToPS measures one leaf per period (recorded in the JSON);
    a bad value or another study is refused with a usage error and writes nothing."""
    import json

    args = ["evaluate", "--study", "end-to-end", "--methods", "ToPS", "--epsilons", "1", "--rounds", "1",
            "--queries", "5", "--hold", "512", "--max-range", "1024"]
    result = runner.invoke(main, [*args, "--period", "48", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "a" / "end-to-end-pos.json").read_text())["config"]["period"] == 48
    for extra, shown in ((["--period", "0"], "--period"), (["--period", "48", "--study", "hierarchy"], "--period")):
        bad = runner.invoke(main, [*args, *extra, "--out", str(tmp_path / "b")])
        assert bad.exit_code == 2 and shown in bad.stderr and not (tmp_path / "b").exists()


def test_one_line_cuts_long_quoted_runs_and_never_the_text_between_two_short_ones():
    from dpstream.cli._app import QUOTE_LIMIT, one_line

    between = "x" * (3 * QUOTE_LIMIT)
    assert one_line(f"got 'a' then {between} then 'b'") == f"got 'a' then {between} then 'b'"
    long_value = "y" * (3 * QUOTE_LIMIT)
    cut = one_line(f"the file's column '{long_value}' isn't there")
    assert cut.startswith("the file's column 'y") and cut.endswith("' isn't there") and "..." in cut
    assert len(cut) < len("the file's column '' isn't there") + QUOTE_LIMIT + 1
