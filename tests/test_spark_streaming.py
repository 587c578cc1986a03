"""The keyed release as a Structured Streaming query (``dpstream.spark.streaming``): the sink equals the local
engine for the same files and secret (``release --state`` itself on in-order input, ``release_files`` with late
rows), a restart continues from the state store, bad input stops the query with the local reader's one line, and
the usage errors and the checkpoint's record."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from pyspark import cloudpickle

from dpstream.cli import cli
from dpstream.cli._spark import last_error
from dpstream.durable.keys import seed_key
from dpstream.io import InputError
from dpstream.release import ToPS
from dpstream.release.by_key import key_secret
from dpstream.spark.streaming import check_parameters, read_sink, start_release
from dpstream.spark.streaming_rows import advance, read_file, release_files, restore_stream, step_keys
from streaming_helpers import write_source

# the build function below goes to Spark's Python workers, which cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SEED = 5
OPTIONS = ["--epsilon", "1", "--upper-bound", "5", "--hold", "40", "--max-range", "64", "--threshold-step", "0.5"]


def _tops(key):
    """The mechanism of ``release --method tops`` with OPTIONS, in ``key=`` mode (as ``--state`` builds it)."""
    return ToPS(epsilon=1.0, upper_bound=5.0, hold=40, max_range=64, threshold_step=0.5, key=key)


def _stream(spark, root, paths=None):
    query = start_release(spark, root / "source", sink=root / "sink", checkpoint=root / "checkpoint",
                          key_column="meter", time_column="time", value_column="kwh", build=_tops,
                          secret=seed_key(SEED), files_per_batch=2)
    query.awaitTermination()
    return read_sink(root / "sink")


def test_the_sink_equals_the_local_engine_and_a_restart_continues(spark, tmp_path):
    rng = np.random.default_rng(11)
    (tmp_path / "source").mkdir()
    paths = [write_source(tmp_path / "source", index, rng) for index in range(3)]
    first = _stream(spark, tmp_path)
    # release --state, the local engine, on the same rows in time order: the same key, position, time and value
    rows = pd.concat([read_file(str(path), None, file_time=0, key_column="meter", time_column="time",
                                value_column="kwh") for path in paths])
    rows = rows.sort_values(["time_ns", "value"], kind="stable")
    rows[["meter", "time", "kwh"]] = rows[["key", "time", "value"]]
    rows[["meter", "time", "kwh"]].to_csv(tmp_path / "all.csv", index=False)
    local = CliRunner().invoke(cli, ["release", str(tmp_path / "all.csv"), "-o", str(tmp_path / "local.csv"),
                                     "--state", str(tmp_path / "state"), "--seed", str(SEED), "--key-column", "meter",
                                     "--time-column", "time", "--column", "kwh", *OPTIONS])
    assert local.exit_code == 0, local.output
    with open(tmp_path / "local.csv") as handle:
        expected = sorted((row["key"], int(row["position"]), row["time"], float(row["value"]))
                          for row in csv.DictReader(handle))
    assert len(expected) > 100
    assert sorted(zip(*(first[name].to_pylist() for name in ("key", "position", "time", "value")))) == expected
    # more files, one with a late row; the same checkpoint continues the keys from the state store
    paths += [write_source(tmp_path / "source", 3, rng, late=True), write_source(tmp_path / "source", 4, rng)]
    again = _stream(spark, tmp_path)
    local = release_files(paths, key_column="meter", time_column="time", value_column="kwh", build=_tops,
                          secret=seed_key(SEED))
    assert again.equals(local)
    assert set(zip(*first.to_pydict().values())) <= set(zip(*again.to_pydict().values()))  # no value changed
    assert len(sorted((tmp_path / "sink").glob("batch-*.csv"))) == 3  # files 0-1, 2, then 3-4
    late = again.filter(pa.compute.equal(again["time"], "2000"))
    assert late.num_rows == 0  # m0's row timed before its earlier rows was dropped


def test_a_malformed_file_stops_the_query_with_the_local_readers_line(spark, tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "bad.csv").write_text("meter,time,kwh\nm1,10,1.5\nm1,11,1.x\n")
    query = start_release(spark, tmp_path / "source", sink=tmp_path / "sink", checkpoint=tmp_path / "checkpoint",
                          key_column="meter", time_column="time", value_column="kwh", build=_tops,
                          secret=seed_key(SEED))
    with pytest.raises(Exception) as caught:
        query.awaitTermination()
    message = last_error(str(caught.value).split("\n\tat ", 1)[0])
    assert message.startswith(f"{tmp_path / 'source' / 'bad.csv'} line 3, column 'kwh', is not a number: '1.x'")
    assert list((tmp_path / "sink").glob("batch-*")) == []  # nothing of the batch was published
    (tmp_path / "other").mkdir()  # a value outside [0, B]: the local engine's line, its key and position
    (tmp_path / "other" / "a.csv").write_text("meter,time,kwh\nm1,10,1.5\nm1,11,7\n")
    query = start_release(spark, tmp_path / "other", sink=tmp_path / "sink2", checkpoint=tmp_path / "checkpoint2",
                          key_column="meter", time_column="time", value_column="kwh", build=_bt, secret=seed_key(SEED))
    with pytest.raises(Exception) as caught:
        query.awaitTermination()
    message = last_error(str(caught.value).split("\n\tat ", 1)[0])
    assert message == "key 'm1': stream value at position 1 (0-based) must be in [0, 5], got 7."


# -- without Spark ------------------------------------------------------------------------------------------------


def _rows(path, place):
    return read_file(str(path), None, file_time=place, key_column="meter", time_column="time", value_column="kwh")


def test_which_rows_are_late_does_not_depend_on_the_micro_batches(tmp_path):
    rng = np.random.default_rng(3)
    paths = [write_source(tmp_path, index, rng, late=index == 2) for index in range(4)]
    secret = seed_key(1)
    stored = {}
    apart = pd.concat([step_keys(_rows(path, place), stored, build=_tops, secret=secret)  # a micro-batch per file
                       for place, path in enumerate(paths)])
    whole = pd.concat([_rows(path, place) for place, path in enumerate(paths)])
    together = step_keys(whole, {}, build=_tops, secret=secret)  # one micro-batch of all four files
    order = ["key", "position"]
    pd.testing.assert_frame_equal(apart.sort_values(order, ignore_index=True),
                                  together.sort_values(order, ignore_index=True))
    assert "1000" not in set(together["time"])  # the late row of file 2 is dropped
    assert len(together) == len(whole) - 1 - 6 * 40  # but the late row and the hold-outs, every row released


def test_a_key_consumes_its_rows_in_time_then_value_order(tmp_path):
    (tmp_path / "a.csv").write_text("meter,time,kwh\nm,2024-01-01T00:02:00Z,1\nm,2024-01-01T00:01:00Z,3\n"
                                    "m,2024-01-01 00:01:00,2\n")
    stream = restore_stream("m", None, build=lambda key: _bt(key), secret=seed_key(2))
    released, last = advance("m", stream, None, _rows(tmp_path / "a.csv", 0))
    assert released.time.tolist() == ["2024-01-01 00:01:00", "2024-01-01T00:01:00Z", "2024-01-01T00:02:00Z"]
    alone = _bt(key_secret(seed_key(2), "m")).release([2.0, 3.0, 1.0])
    assert np.array_equal(released.value, alone)
    assert last.value == 1.0


def _bt(key):
    from dpstream.release import BinaryTreeCounter

    return BinaryTreeCounter(epsilon=1.0, upper_bound=5.0, max_range=8, key=key)


def test_a_time_that_is_not_a_time_names_its_line(tmp_path):
    (tmp_path / "a.csv").write_text("meter,time,kwh\nm,2024-01-01,1\nm,noon,1\n")
    with pytest.raises(InputError, match=r"a.csv line 3, column 'time': the time 'noon' is not ISO 8601"):
        _rows(tmp_path / "a.csv", 0)


def test_the_checkpoint_refuses_another_secret_or_other_parameters(tmp_path):
    check_parameters(tmp_path, {"epsilon": 1.0}, b"s" * 32)
    check_parameters(tmp_path, {"epsilon": 1.0}, b"s" * 32)  # the same: continues
    with pytest.raises(ValueError, match="was made with another secret"):
        check_parameters(tmp_path, {"epsilon": 1.0}, b"t" * 32)
    with pytest.raises(ValueError, match=r"was made with other parameters \(epsilon\)"):
        check_parameters(tmp_path, {"epsilon": 2.0}, b"s" * 32)
    assert b"s" * 32 not in (tmp_path / "dpstream.json").read_bytes()


def test_usage_errors_of_the_streaming_engine(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "store.json").write_text("{}")  # refused before it is read
    base = ["release", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--epsilon", "1", "--upper-bound", "5",
            "--key-column", "meter", "--engine", "spark-streaming"]
    cases = [
        ([], "give --time-column"),
        (["--time-column", "t"], "needs --spark-checkpoint DIR"),
        (["--time-column", "t", "--spark-checkpoint", str(tmp_path / "c")], "needs --secret-file FILE"),
        (["--time-column", "t", "--spark-checkpoint", str(tmp_path / "c"), "--seed", "1", "--secret-file", "k"],
         "--seed and --secret-file exclude each other"),
        (["--time-column", "t", "--spark-checkpoint", str(tmp_path / "c"), "--seed", "1", "--state", "s"],
         "--state applies to --engine local only (Spark keeps its own checkpoint: --spark-checkpoint)"),
        (["--time-column", "t", "--spark-checkpoint", str(tmp_path / "c"), "--seed", "1", "--budget-store",
          str(tmp_path / "store.json")], "--budget-store applies to --engine local or spark"),
    ]
    for extra, message in cases:
        result = CliRunner().invoke(cli, [*base, *extra])
        assert result.exit_code == 2 and message in result.output, (extra, result.output)
    local = CliRunner().invoke(cli, ["release", str(tmp_path / "in"), "-o", "-", "--epsilon", "1", "--upper-bound",
                                     "5"])
    assert local.exit_code == 2
    assert f"Invalid value for 'INPUT': File '{tmp_path / 'in'}' is a directory" in local.output
    other = CliRunner().invoke(cli, [*base[:-2], "--available-now"])
    assert other.exit_code == 2 and "--available-now applies to --engine spark-streaming only" in other.output


def test_a_parquet_file_is_read_by_the_local_readers_rules(tmp_path):
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"meter": ["a", "b", "a"], "time": [20, 10, 5], "kwh": [1.0, 2.0, 3.0]}),
                   tmp_path / "rows.parquet")
    rows = read_file("s3://bucket/rows.parquet", (tmp_path / "rows.parquet").read_bytes(), file_time=7,
                     key_column="meter", time_column="time", value_column="kwh")  # the content, as Spark gives it
    assert rows["key"].tolist() == ["a", "b", "a"] and rows["time"].tolist() == ["20", "10", "5"]
    assert rows["time_ns"].tolist() == [20 * 10**9, 10 * 10**9, 5 * 10**9] and rows["file"].iloc[0].startswith("s3:")
    pq.write_table(pa.table({"meter": ["a"], "time": [1], "kwh": [None]}, schema=pa.schema(
        [("meter", pa.string()), ("time", pa.int64()), ("kwh", pa.float64())])), tmp_path / "gap.parquet")
    with pytest.raises(InputError, match=r"^s3://bucket/gap.parquet row 1, column 'kwh', is missing"):
        read_file("s3://bucket/gap.parquet", (tmp_path / "gap.parquet").read_bytes(), file_time=0,
                  key_column="meter", time_column="time", value_column="kwh")


@pytest.mark.parametrize("method", ["tops", "pak", "pak-uncapped", "bt", "topl"])
def test_every_method_continues_from_its_stored_state(tmp_path, method):
    from dpstream.release.registry import REGISTRY

    options = {"epsilon": 1.0, "upper_bound": 5.0, "max_range": 64, "clip": False, "hold": 40, "granularity": None,
               "fanout": 16, "smoother": None, "window": None, "alpha": None, "threshold_epsilon": None,
               "threshold_step": 0.5, "threshold_method": "model", "query_length": None, "smoothed_levels": None,
               "period": None, "delta": None, "threshold_fraction": 0.5, "multiplier": 1.0, "noise": "laplace"}

    def build(key):
        return REGISTRY[method].build(options, key=key)

    rng = np.random.default_rng(5)
    paths = [write_source(tmp_path, index, rng, keys=2) for index in range(3)]
    out = release_files(paths, key_column="meter", time_column="time", value_column="kwh", build=build,
                        secret=seed_key(4))  # restored from its stored snapshot at every file
    rows = pd.concat([_rows(path, place) for place, path in enumerate(paths)])
    rows = rows.sort_values(["file_time", "time_ns", "value"], kind="stable")
    alone = build(key_secret(seed_key(4), "m1")).release(rows[rows["key"] == "m1"]["value"].to_numpy())
    mine = out.filter(pa.compute.equal(out["key"], "m1"))
    assert mine.num_rows == alone.size > 0
    assert np.array_equal(mine["value"].to_numpy(), alone)
