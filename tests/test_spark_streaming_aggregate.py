"""Population aggregates as a Structured Streaming query (``aggregate --engine spark-streaming``): the sink equals the
local counterpart for the same files and secret, a restart continues from the checkpoint (after a SIGKILL of the
driver too: nothing lost, nothing twice, no value changed), late rows are dropped by the same watermark as
``aggregate --allowed-lateness``, and the usage errors."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.durable.keys import seed_key
from dpstream.io.times import format_times
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.aggregate_watermark import WatermarkAggregate
from dpstream.spark.streaming_aggregate import aggregate_files, read_aggregate_sink
from streaming_helpers import kill_at_random

SEED = 7
HOUR = 3600
OPTIONS = ["--time-column", "time", "--unit-column", "meter", "--column", "kwh", "--bucket", "1h", "--unit-window",
           "1d", "--unit-bound", "10", "--upper-bound", "3", "--epsilon", "1", "--allowed-lateness", "2h"]
PARAMS = dict(epsilon=1.0, bucket=HOUR, window=24 * HOUR, unit_bound=10.0, upper_bound=3.0, late="drop")
COLUMNS = dict(time_column="time", unit_column="meter", column="kwh", partition_column=None, missing="error")


def _write(folder, index, rng, *, rows=150):
    """File ``index``: rows of the 12 hours from 12 ``index`` h, roughly in time order (jitter up to 3 h, so some
    rows come within the 2 h lateness and some after it), and one row 20 h before the file's start: late."""
    times = 12 * HOUR * index + np.sort(rng.integers(0, 12 * HOUR, rows)) + rng.integers(-3 * HOUR, 1, rows)
    times = np.maximum(times, 0)
    lines = ["time,meter,kwh", *(f"{t},m{m},{v}" for t, m, v in zip(times, rng.integers(0, 15, rows),
                                                                        np.round(rng.uniform(0, 3, rows), 2)))]
    if index:
        lines.insert(rows // 2, f"{12 * HOUR * index - 20 * HOUR},m1,2.5")
    target, hidden = folder / f"part-{index}.csv", folder / f".part-{index}.tmp"
    hidden.write_text("\n".join(lines) + "\n")
    os.utime(hidden, (1_700_000_000 + 10 * index,) * 2)  # the order the query takes the files in
    hidden.rename(target)
    return target


def _files(tmp_path, count):
    rng = np.random.default_rng(3)
    (tmp_path / "in").mkdir(exist_ok=True)
    return [_write(tmp_path / "in", index, rng) for index in range(count)]


def _stream(tmp_path, *extra):
    return CliRunner().invoke(cli, ["aggregate", str(tmp_path / "in"), "-o", str(tmp_path / "sink"), *OPTIONS,
                                    "--engine", "spark-streaming", "--spark-checkpoint", str(tmp_path / "checkpoint"),
                                    "--seed", str(SEED), "--available-now", "--files-per-batch", "1", *extra])


def test_the_streaming_aggregate_equals_the_local_one_and_a_restart_continues(spark, tmp_path):
    paths = _files(tmp_path, 2)
    first = _stream(tmp_path)
    assert first.exit_code == 0, first.output
    before = read_aggregate_sink(tmp_path / "sink")
    local = aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=2 * HOUR, secret=seed_key(SEED))
    assert before == local and len(local) > 10
    paths.append(_write(tmp_path / "in", 2, np.random.default_rng(4)))  # one more file, then the same command
    again = _stream(tmp_path)
    assert again.exit_code == 0, again.output
    after = read_aggregate_sink(tmp_path / "sink")
    assert after == aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=2 * HOUR, secret=seed_key(SEED))
    assert after[: len(before)] == before and len(after) > len(before)  # continued: nothing twice, nothing changed
    assert len(list((tmp_path / "sink").glob("batch-*.csv"))) == 3  # a micro-batch per file
    buckets = [row[0] for row in after]
    assert buckets == sorted(set(buckets))  # every bucket once, in time order, none skipped
    bad = _stream(tmp_path, "--unit-bound", "5")
    assert bad.exit_code == 1 and "other parameters" in bad.output.splitlines()[-1]


def test_the_grouping_of_rows_into_files_does_not_change_the_release(tmp_path):
    paths = _files(tmp_path, 3)
    joined = tmp_path / "all.csv"
    joined.write_text("time,meter,kwh\n" + "".join(p.read_text().split("\n", 1)[1] for p in paths))
    split = aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=2 * HOUR, secret=seed_key(SEED))
    whole = aggregate_files([joined], params=PARAMS, columns=COLUMNS, lateness=2 * HOUR, secret=seed_key(SEED))
    assert split == whole


def _rows(path):
    with open(path) as handle:
        return [(int(r["time"]), r["meter"], float(r["kwh"])) for r in csv.DictReader(handle)]


def test_the_local_aggregate_applies_the_same_watermark(tmp_path):
    paths = _files(tmp_path, 3)
    joined = tmp_path / "all.csv"
    joined.write_text("time,meter,kwh\n" + "".join(p.read_text().split("\n", 1)[1] for p in paths))
    base = ["aggregate", str(joined), *OPTIONS[:-2], "--seed", str(SEED)]
    out = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "w.csv"), "--allowed-lateness", "2h"])
    assert out.exit_code == 0, out.output
    # the same rows through the class: the same values, and the late rows those after the watermark
    rows = _rows(joined)
    times = np.array([t for t, _, _ in rows]) * 10**9
    marked = WatermarkAggregate(UnitAggregate(**PARAMS, seed=SEED), lateness=2 * HOUR)
    parts = [*marked.release(times, np.array([m for _, m, _ in rows]), np.array([v for _, _, v in rows])),
             marked.flush()]
    expected = [(b, "", repr(v)) for part in parts for b, v in zip(format_times(part.buckets), part.values.tolist())]
    with open(tmp_path / "w.csv") as handle:
        assert [tuple(r) for r in csv.reader(handle)][1:] == expected
    newest = np.maximum.accumulate(np.r_[-(2**62), times[:-1]])
    late = times // (HOUR * 10**9) < (newest - 2 * HOUR * 10**9) // (HOUR * 10**9)
    assert marked.dropped == int(late.sum()) >= 2 and "how many is not said" in out.output
    # lateness 0 is --late drop: the aggregate's own arrival-order rule
    zero = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "z.csv"), "--allowed-lateness", "0"])
    drop = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "d.csv"), "--late", "drop"])
    assert zero.exit_code == drop.exit_code == 0
    assert (tmp_path / "z.csv").read_bytes() == (tmp_path / "d.csv").read_bytes()


def test_a_value_out_of_bounds_names_its_row_in_arrival_order(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("time,meter,kwh\n7200,a,1\n0,b,1\n3600,c,9\n")
    out = CliRunner().invoke(cli, ["aggregate", str(source), "-o", "-", *OPTIONS])
    assert out.exit_code == 1 and "row 3: the value 9.0 is not in [0, 3]" in out.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--engine", "spark-streaming", "--seed", "1"], "needs --spark-checkpoint"),
    (["--engine", "spark-streaming", "--spark-checkpoint", "CK"], "needs --secret-file"),
    (["--engine", "spark-streaming", "--spark-checkpoint", "CK", "--seed", "1", "--sort"],
     "--sort applies to --engine local only"),
    (["--engine", "spark-streaming", "--spark-checkpoint", "CK", "--seed", "1", "--max-gap", "1d"],
     "--max-gap applies to --engine local only"),
    (["--engine", "spark-streaming", "--spark-checkpoint", "CK", "--seed", "1", "--state", "S"],
     "--allowed-lateness and --state do not go together"),
    (["--spark-checkpoint", "CK"], "--spark-checkpoint applies to --engine spark-streaming only"),
    (["--spark-master", "local[1]"], "--spark-master applies to --engine spark-streaming only"),
    (["--late", "error"], "--late does not go with it"),
    (["--engine", "spark-streaming", "--spark-checkpoint", "CK", "--seed", "1", "--late", "drop"],
     "--late applies to --engine local only"),
    (["--state", "S"], "--allowed-lateness and --state do not go together"),
])
def test_usage_errors(tmp_path, extra, message):
    (tmp_path / "in").mkdir()
    source = tmp_path / "in" if "--engine" in extra else tmp_path / "in.csv"
    if source.suffix:
        source.write_text("time,meter,kwh\n0,a,1\n")
    out = CliRunner().invoke(cli, ["aggregate", str(source), "-o", str(tmp_path / "sink"), *OPTIONS, *extra])
    assert out.exit_code == 2 and message in out.output, out.output
    assert len([line for line in out.output.splitlines() if line.startswith("Error")]) == 1


def test_a_malformed_file_stops_the_query_with_the_local_readers_line(spark, tmp_path):
    good = _files(tmp_path, 1)  # the first micro-batch: released at the default lateness, 0
    (tmp_path / "in" / "bad.csv").write_text("time,meter,kwh\n0,a,1\n60,b,x\n")
    os.utime(tmp_path / "in" / "bad.csv", (1_700_000_100,) * 2)
    out = CliRunner().invoke(cli, ["aggregate", str(tmp_path / "in"), "-o", str(tmp_path / "sink"), *OPTIONS[:-2],
                                   "--engine", "spark-streaming", "--spark-checkpoint", str(tmp_path / "checkpoint"),
                                   "--seed", str(SEED), "--available-now", "--files-per-batch", "1"])
    assert read_aggregate_sink(tmp_path / "sink") == aggregate_files(good, params=PARAMS, columns=COLUMNS, lateness=0,
                                                                     secret=seed_key(SEED))
    errors = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert out.exit_code == 1 and len(errors) == 1 and "\tat " not in out.output, out.output
    local = CliRunner().invoke(cli, ["aggregate", str(tmp_path / "in" / "bad.csv"), "-o", "-", *OPTIONS])
    assert local.exit_code == 1
    assert [line for line in local.output.splitlines() if line.startswith("Error")] == errors  # the local words


def test_a_killed_query_continues_exactly_once(tmp_path):
    paths = _files(tmp_path, 7)
    command = [sys.executable, "-m", "dpstream.cli", "aggregate", str(tmp_path / "in"), "-o", str(tmp_path / "sink"),
               *OPTIONS, "--engine", "spark-streaming", "--spark-checkpoint", str(tmp_path / "checkpoint"), "--seed",
               str(SEED), "--available-now", "--files-per-batch", "1", "--spark-master", "local[2]", "--spark-conf",
               "spark.ui.enabled=false"]
    where, env = kill_at_random(command, tmp_path / "sink", tmp_path / "first.log")
    before = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    paths.append(_write(tmp_path / "in", 7, np.random.default_rng(5)))  # files keep arriving
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "\tat org.apache" not in again.stderr  # no stack trace
    after = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    assert all(after[name] == data for name, data in before.items()), f"a published batch changed ({where})"
    # each batch written once under its id, at most one per file (a restart may plan the files left in fewer
    # micro-batches); the released rows, in order, are the local engine's: nothing lost, twice or changed
    assert 0 < len(after) <= len(paths)
    local = aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=2 * HOUR, secret=seed_key(SEED))
    assert read_aggregate_sink(tmp_path / "sink") == local, where


def test_skipped_rows_are_not_read_by_the_watermark(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("time,meter,kwh\n0,a,1\n90000,b,\n120,c,1\n7200,a,2\n3600,b,1\n10,c,2\n")
    base = ["aggregate", str(source), *OPTIONS[:-2], "--seed", "1", "--missing", "skip"]
    zero = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "z.csv"), "--allowed-lateness", "0"])
    drop = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "d.csv"), "--late", "drop"])
    assert zero.exit_code == drop.exit_code == 0, zero.output
    released = (tmp_path / "z.csv").read_text()
    assert released == (tmp_path / "d.csv").read_text() and "1970-01-02" not in released  # row 2's time unread
