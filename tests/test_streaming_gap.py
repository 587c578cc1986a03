"""``aggregate --engine spark-streaming`` refuses a long gap as the local engine does (``--max-gap``, or at most
4,194,304 bucket values without it), before any work, naming the source file and its row: checked here on the query's
step run locally (:func:`~dpstream.spark.streaming_aggregate.aggregate_files`), without Spark."""

from __future__ import annotations

from functools import partial

import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._spark_streaming import check_streaming_gap
from dpstream.durable.keys import seed_key
from dpstream.spark.streaming_aggregate import aggregate_files

MINUTE, DAY = 60, 86400
PARAMS = dict(epsilon=1.0, bucket=MINUTE, window=DAY, unit_bound=10.0, upper_bound=3.0, late="drop")
COLUMNS = dict(time_column="time", unit_column="meter", column="kwh", partition_column=None, missing="error")


def _files(tmp_path, gap):
    """Two files: rows a minute apart, then, in the second file's third row, a row ``gap`` seconds after the last."""
    first, second = tmp_path / "part-0.csv", tmp_path / "part-1.csv"
    first.write_text("time,meter,kwh\n0,m1,1\n60,m2,2\n")
    second.write_text(f"time,meter,kwh\n120,m1,1\n180,m3,1\n{180 + gap},m2,2\n")
    return [first, second]


def _run(paths, max_gap):
    return aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=0, secret=seed_key(1),
                           check=partial(check_streaming_gap, max_gap))


def test_a_gap_past_the_default_cap_is_refused_naming_the_file_and_row(tmp_path):
    paths = _files(tmp_path, 10 * 366 * DAY)  # 5.27 million one-minute buckets
    with pytest.raises(ValueError) as refused:
        _run(paths, None)
    message = str(refused.value)
    assert message.startswith(f"{paths[1]}: row 3: its time 1980-01-09T00:03:00Z comes ")
    assert "would all be released (5,270,400 values, more than the 4,194,304 a gap releases without --max-gap)" \
        in message and "\n" not in message


def test_max_gap_bounds_the_gap_as_in_the_local_engine(tmp_path):
    paths = _files(tmp_path, 2 * 3600)
    with pytest.raises(ValueError, match=r"part-1\.csv: row 3: .* more than --max-gap 1h: every bucket in between"):
        _run(paths, 3600)
    plain = aggregate_files(paths, params=PARAMS, columns=COLUMNS, lateness=0, secret=seed_key(1))
    assert _run(paths, 3 * 3600) == plain and _run(paths, None) == plain and len(plain) > 2 * 60


def test_the_local_engine_says_the_same_of_the_same_rows(tmp_path):
    joined = tmp_path / "joined.csv"
    joined.write_text("time,meter,kwh\n0,m1,1\n60,m2,2\n120,m1,1\n180,m3,1\n7380,m2,2\n")
    local = CliRunner().invoke(cli, ["aggregate", str(joined), "-o", str(tmp_path / "out.csv"), "--time-column",
                                     "time", "--unit-column", "meter", "--column", "kwh", "--bucket", "1m",
                                     "--unit-window", "1d", "--unit-bound", "10", "--upper-bound", "3", "--epsilon",
                                     "1", "--max-gap", "1h", "--seed", "1"])
    assert local.exit_code != 0
    with pytest.raises(ValueError) as streamed:
        _run(_files(tmp_path, 2 * 3600), 3600)
    said = str(streamed.value).split(": row 3: ", 1)[1]
    assert f"row 5: {said}" in local.output.replace("\n", " ")
