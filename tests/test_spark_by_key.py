"""Keyed streams on Spark (``dpstream.spark.release_by_key``): every key's output equals the local
keyed release (:class:`~dpstream.release.by_key.ByKey`) and its sub-stream released alone, and a
retried task changes nothing."""

from __future__ import annotations

import functools
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle

from dpstream.release import BinaryTreeCounter, ToPS
from dpstream.release.by_key import ByKey, key_bits, seed_secret
from dpstream.spark.by_key import release_by_key

# the build functions below go to Spark's Python workers, which cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def local_only(stderr: str) -> str:
    """The local engine's stderr without what only it prints: the per-key table that ends it (the Spark engine
    has no per-key report; ``--summary`` is refused there)."""
    lines = stderr.splitlines(keepends=True)
    table = [index for index, line in enumerate(lines) if re.match(r"key +values +released +theta", line)]
    return "".join(lines[: table[0]] if table else lines)


def _tops(bits):
    return ToPS(epsilon=1.0, upper_bound=10.0, hold=64, max_range=256, seed=bits)


def _tree(bits):
    return BinaryTreeCounter(epsilon=1.0, upper_bound=10.0, max_range=512, seed=bits)


BUILDS = {"tops": _tops, "bt": _tree}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    rng = np.random.default_rng(4)
    keys = [f"meter-{k}" for k in rng.integers(0, 9, 2400)]  # interleaved, uneven lengths
    values = np.round(rng.uniform(0, 10, len(keys)), 2)
    root = tmp_path_factory.mktemp("keyed")
    table = pa.table({"meter": keys, "kwh": values})
    pa_csv.write_csv(table, root / "rows.csv")
    pq.write_table(table, root / "rows.parquet", row_group_size=500)
    return keys, values, root


@pytest.mark.parametrize(("method", "form"), [("tops", "csv"), ("bt", "parquet")])
def test_every_key_equals_the_local_keyed_release(spark, keyed, method, form):
    keys, values, root = keyed
    secret = seed_secret(9)
    build = BUILDS[method]
    out = release_by_key(spark, root / f"rows.{form}", key_column="meter", value_column="kwh", build=build,
                         secret=secret)
    local = ByKey(build=lambda key: build(key_bits(secret, key))).release(values, keys)
    order = sorted(range(len(local.keys)), key=lambda i: (local.keys[i], local.positions[i]))
    assert out["key"].to_pylist() == [local.keys[i] for i in order]
    assert out["position"].to_pylist() == local.positions[order].tolist()
    assert np.array_equal(out["value"].to_numpy(), local.values[order])
    alone = build(key_bits(secret, "meter-3")).release(values[np.array(keys) == "meter-3"])
    assert np.array_equal(out.filter(pa.compute.equal(out["key"], "meter-3"))["value"].to_numpy(), alone)


def test_missing_values_and_columns_are_refused(spark, tmp_path):
    pa_csv.write_csv(pa.table({"meter": ["a", "b"], "kwh": ["1", ""]}), tmp_path / "gap.csv")
    with pytest.raises(ValueError, match=r"gap.csv line 3, column 'kwh', is empty \(an empty field, NA, NaN or null\)"):
        release_by_key(spark, tmp_path / "gap.csv", key_column="meter", value_column="kwh", build=_tree,
                       secret=seed_secret(1))
    with pytest.raises(ValueError, match=r"gap.csv has no column 'watts'; its columns are 'meter', 'kwh'"):
        release_by_key(spark, tmp_path / "gap.csv", key_column="meter", value_column="watts", build=_tree,
                       secret=seed_secret(1))


def _fail_once(marker, bits):
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("injected task failure")
    return _tree(bits)


def test_a_retried_task_changes_nothing(spark, keyed, tmp_path):
    _, _, root = keyed
    secret = seed_secret(2)
    marker = str(tmp_path / "failed-once")
    retried = release_by_key(spark, root / "rows.parquet", key_column="meter", value_column="kwh",
                             build=functools.partial(_fail_once, marker), secret=secret)
    assert (tmp_path / "failed-once").exists()
    plain = release_by_key(spark, root / "rows.parquet", key_column="meter", value_column="kwh", build=_tree,
                           secret=secret)
    assert retried.equals(plain)


def test_output_is_a_parquet_dataset_written_by_the_executors(spark, keyed, tmp_path):
    import pyarrow.dataset as ds

    _, _, root = keyed
    secret = seed_secret(5)
    kwargs = {"key_column": "meter", "value_column": "kwh", "build": _tree, "secret": secret}
    assert release_by_key(spark, root / "rows.parquet", output=tmp_path / "out", **kwargs) is None
    written = ds.dataset(tmp_path / "out").to_table().sort_by([("key", "ascending"), ("position", "ascending")])
    assert written.equals(release_by_key(spark, root / "rows.parquet", **kwargs))


@pytest.mark.parametrize(("method", "form"), [("tops", "csv"), ("bt", "parquet")])
def test_the_command_line_writes_the_local_engines_file(spark, keyed, tmp_path, method, form):
    from click.testing import CliRunner

    from dpstream.cli import cli

    _, _, root = keyed
    base = ["release", str(root / f"rows.{form}"), "--key-column", "meter", "--method", method, "--epsilon", "1",
            "--upper-bound", "10", "--max-range", "256", "--seed", "3"]
    if method == "tops":
        base += ["--hold", "64"]
    results, outputs = {}, {}
    for engine in ("local", "spark"):
        outputs[engine] = tmp_path / f"{engine}.csv"
        results[engine] = CliRunner().invoke(cli, [*base, "--engine", engine, "-o", str(outputs[engine])])
        assert results[engine].exit_code == 0, results[engine].output
    assert outputs["spark"].read_bytes() == outputs["local"].read_bytes()
    assert outputs["local"].read_text().startswith("key,position,value\n")
    assert results["spark"].stderr == local_only(results["local"].stderr)
    assert "privacy, per key" in results["spark"].stderr


def test_the_command_line_refuses_what_spark_does_not_do(keyed, tmp_path):
    from click.testing import CliRunner

    from dpstream.cli import cli

    _, _, root = keyed
    base = ["release", str(root / "rows.csv"), "--epsilon", "1", "--upper-bound", "10", "-o", str(tmp_path / "o.csv")]
    cases = [
        ([], "give --key-column"),
        (["--key-column", "meter", "--state", str(tmp_path / "s")], "--state applies to --engine local only"),
        (["--key-column", "meter", "--column", "kwh", "--time-column", "meter2"], "--time-column applies to"),
        (["--key-column", "meter", "--missing", "zero"], "--missing zero applies to --engine local only"),
        (["--key-column", "meter", "--max-keys", "5"], "--max-keys applies to --engine local only"),
        (["--key-column", "meter", "--threshold", "5"], "--threshold applies to --engine local only"),
    ]
    for extra, message in cases:
        result = CliRunner().invoke(cli, [*base, *extra, "--engine", "spark"])
        assert result.exit_code == 2 and message in result.output, result.output
    stdin = CliRunner().invoke(cli, ["release", "-", "--key-column", "meter", "--epsilon", "1", "--upper-bound", "10",
                                     "--engine", "spark", "-o", str(tmp_path / "o.csv")])
    assert stdin.exit_code == 2 and "not stdin" in stdin.output
    local = CliRunner().invoke(cli, [*base, "--key-column", "meter", "--spark-master", "local[1]"])
    assert local.exit_code == 2 and "--spark-master applies to --engine spark only" in local.output


def test_the_command_line_without_java_is_one_line(keyed, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from dpstream.cli import cli

    _, _, root = keyed
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    result = CliRunner().invoke(cli, ["release", str(root / "rows.csv"), "--key-column", "meter", "--epsilon", "1",
                                      "--upper-bound", "10", "--engine", "spark", "-o", str(tmp_path / "o.csv")])
    assert result.exit_code == 1 and "needs Java 17" in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o.csv").exists()


def test_the_command_line_clips_holds_out_and_refuses_as_the_local_engine(spark, tmp_path):
    from click.testing import CliRunner

    from dpstream.cli import cli

    rng = np.random.default_rng(8)
    keys = ["a"] * 40 + ["b"] * 5 + ["c"] * 30  # key b ends within its hold-out
    values = rng.uniform(0, 10, len(keys))
    values[50] = 12.5  # key c's 6th value lies outside [0, B]
    order = rng.permutation(len(keys))
    pa_csv.write_csv(pa.table({"meter": [keys[i] for i in order], "kwh": values[order]}), tmp_path / "rows.csv")
    base = ["release", str(tmp_path / "rows.csv"), "--key-column", "meter", "--epsilon", "1", "--upper-bound", "10",
            "--hold", "8", "--max-range", "64", "--seed", "4"]
    runs = {}
    for clip in (["--clip", "--report-unprotected"], []):
        for engine in ("local", "spark"):
            output = tmp_path / f"{engine}{int(bool(clip))}.csv"
            runs[engine, bool(clip)] = CliRunner().invoke(cli, [*base, *clip, "--engine", engine, "-o", str(output)])
        assert runs["spark", bool(clip)].exit_code == runs["local", bool(clip)].exit_code == (0 if clip else 1)
        assert runs["spark", bool(clip)].stderr == local_only(runs["local", bool(clip)].stderr)
    assert (tmp_path / "spark1.csv").read_bytes() == (tmp_path / "local1.csv").read_bytes()
    assert "not protected by the privacy guarantee (--report-unprotected): --clip clipped 1 values outside" in (
        runs["spark", True].stderr)
    assert "1 key ended within its hold-out" in runs["spark", True].stderr
    assert "key 'c': stream value at position" in runs["spark", False].stderr
    assert not (tmp_path / "spark0.csv").exists()
    held = {engine: CliRunner().invoke(cli, [*base, "--hold", "50", "--clip", "--engine", engine, "-o",
                                             str(tmp_path / f"held-{engine}.csv")]) for engine in ("local", "spark")}
    assert held["spark"].exit_code == held["local"].exit_code == 1
    assert held["spark"].stderr == local_only(held["local"].stderr) and "nothing was released" in held["spark"].stderr


def test_the_command_line_states_the_guarantee_of_the_key_the_local_engine_states(spark, tmp_path, monkeypatch):
    """The keys' guarantees differ (their s); with batches of 300 rows the local engine states that of
    the first key, in its build order, to have a threshold in the earliest batch: meter-4, the only one
    past its hold-out in batch 1 (rows 300-599), though not the first key -- and so does Spark, whose
    partitions of 2 KiB put that row in a later partition than the first."""
    from click.testing import CliRunner

    from dpstream.cli import cli

    rng = np.random.default_rng(4)
    others = [f"meter-{k}" for k in (0, 1, 2, 3, 5, 6, 7, 8)]
    keys = others * 30 + ["meter-4"] * 100 + others * 250  # meter-4's 64th value is row 303
    scale = np.array([float(key[-1]) for key in keys]) ** 2 / 6.4  # from flat to heavy meters: s differs
    values = np.round(np.minimum(rng.exponential(scale + 0.01), 10), 2)
    pa_csv.write_csv(pa.table({"meter": keys, "kwh": values}), tmp_path / "rows.csv")
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 300)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "2k")
    try:
        runs = {}
        for engine in ("local", "spark"):
            runs[engine] = CliRunner().invoke(cli, [
                "release", str(tmp_path / "rows.csv"), "--key-column", "meter", "--epsilon", "1", "--upper-bound",
                "10", "--hold", "64", "--max-range", "256", "--fanout", "4", "--seed", "3", "--engine", engine,
                "-o", str(tmp_path / f"{engine}.csv")])
            assert runs[engine].exit_code == 0, runs[engine].output
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert runs["spark"].stderr == local_only(runs["local"].stderr)
    first = ToPS(epsilon=1.0, upper_bound=10.0, hold=64, max_range=256, fanout=4,
                 seed=key_bits(seed_secret(3), "meter-0"))
    first.release(values[np.array(keys) == "meter-0"])
    assert f"{first.privacy()}" not in runs["local"].stderr  # the first key's guarantee is not the one stated
    assert (tmp_path / "spark.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()
