"""The Spark engine of count-of-counts (``dpstream.spark``), in local mode on one shared session.

For the same seed (hence the same key) the Spark release equals the local engine's bit for bit,
for every method and both file formats; its output meets the four desiderata of Problem 1
exactly; a task that fails once and is retried changes nothing; bad input gets the local
engine's errors; the command line writes the local engine's file.
"""

from __future__ import annotations

import csv
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsRelease,
    TopDownCountOfCounts,
    housing_data,
    read_tables,
    write_tables,
)
from dpstream.spark import SparkUnavailable, release_count_of_counts, require_spark

K = 300


@pytest.fixture(scope="module")
def data():
    # 4 states, 12 counties, a few outliers larger than K
    return housing_data(3000, n_states=4, n_counties=12, n_outliers=6, max_outlier=600, seed=11)


@pytest.fixture(scope="module")
def tables(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("cc")
    return {
        "parquet": [str(path) for path in write_tables(data, root / "parquet", parquet=True)],
        "csv": [str(path) for path in write_tables(data, root / "csv")],
    }


MECHANISMS = {
    "hc": lambda: TopDownCountOfCounts(epsilon=1.0, max_size=K, seed=3),
    "hg-hc-naive": lambda: TopDownCountOfCounts(epsilon=0.5, method=("hg", "hc", "naive"), max_size=K, seed=4),
    "hg-average": lambda: TopDownCountOfCounts(epsilon=1.0, method="hg", merge="average", seed=5),
    "bu-estimated-k": lambda: BottomUpCountOfCounts(epsilon=1.0, method="naive", max_size_epsilon=0.1, seed=6),
}


def _desiderata(release: CountOfCountsRelease, data) -> None:
    """Problem 1: integral, non-negative, the public G of every region, children summing to their parent."""
    tree = release.tree
    for level, hist in enumerate(release.levels):
        assert hist.count.dtype == np.int64 and hist.size.dtype == np.int64  # integral
        assert (hist.count > 0).all() and (hist.size >= 0).all()  # non-negative (zeros are not stored)
        if release.max_size is not None:
            assert (hist.size <= release.max_size).all()
        assert np.array_equal(hist.groups(), data.groups(level))  # the public G of every region
        if level + 1 < tree.levels:  # children sum to their parent, size by size
            summed = release.levels[level + 1].aggregate(tree.parents[level + 1], tree.size(level))
            for field in ("node", "size", "count"):
                assert np.array_equal(getattr(summed, field), getattr(hist, field))


@pytest.mark.parametrize(
    ("name", "form"), [("hc", "parquet"), ("hg-hc-naive", "csv"), ("hg-average", "parquet"), ("bu-estimated-k", "csv")]
)
def test_spark_equals_local_for_the_same_seed_and_meets_the_desiderata(spark, tables, data, name, form):
    paths = tables[form]
    timings: dict[str, float] = {}
    on_spark = release_count_of_counts(spark, MECHANISMS[name](), *paths, timings=timings)
    local = MECHANISMS[name]().release(read_tables(*paths))
    assert on_spark.max_size == local.max_size
    assert on_spark.rows() == local.rows()
    for ours, theirs in zip(on_spark.levels, local.levels):
        for field in ("node", "size", "count"):
            assert np.array_equal(getattr(ours, field), getattr(theirs, field))
    _desiderata(on_spark, data)
    last = f"level 2: noise{'' if name.startswith('bu') else ' and consistency'}"
    assert {"read", "check repeated ids", "check and group-by", last, "collect the leaves"} <= set(timings)


def test_a_retried_task_changes_nothing(spark, tables, tmp_path):
    marker = tmp_path / "failed-once"
    retried = release_count_of_counts(spark, MECHANISMS["hc"](), *tables["parquet"], fault_marker=str(marker))
    assert marker.exists()  # a noise task did fail once, and was run again
    assert retried.rows() == MECHANISMS["hc"]().release(read_tables(*tables["parquet"])).rows()


def _write(path, columns):
    pq.write_table(pa.table(columns), path)
    return str(path)


def _csv(path, text):
    path.write_text(text)
    return str(path)


def test_bad_input_gets_the_local_engines_errors(spark, tmp_path):
    hierarchy = _write(
        tmp_path / "h.parquet",
        {"region_id": ["a1", "a2", "b1"], "level0": ["r", "r", "r"], "level1": ["a", "a", "b"],
         "level2": ["a1", "a2", "b1"]},
    )
    groups = _write(tmp_path / "g.parquet", {"group_id": [1, 2, 3], "region_id": ["a1", "a2", "b1"]})
    entities = _write(tmp_path / "e.parquet", {"entity_id": [1, 2, 3, 4], "group_id": [1, 1, 2, 3]})
    cases = {
        "missing column": (_write(tmp_path / "e1.parquet", {"entity": [1], "group_id": [1]}), groups, hierarchy),
        "unknown group": (_write(tmp_path / "e2.parquet", {"entity_id": [1, 2], "group_id": [1, 9]}), groups,
                          hierarchy),
        "repeated entity": (_write(tmp_path / "e3.parquet", {"entity_id": [1, 1], "group_id": [1, 2]}), groups,
                            hierarchy),
        "unknown region": (entities, _write(tmp_path / "g1.parquet", {"group_id": [1], "region_id": ["zz"]}),
                           hierarchy),
        "repeated group": (entities, _write(tmp_path / "g2.parquet", {"group_id": [1, 1], "region_id": ["a1"] * 2}),
                           hierarchy),
        "two parents": (entities, groups, _write(
            tmp_path / "h1.parquet",
            {"region_id": ["a1", "b1"], "level0": ["r", "r"], "level1": ["a", "b"], "level2": ["x", "x"]},
        )),
        "missing table": (str(tmp_path / "nope.parquet"), groups, hierarchy),
        "empty CSV field": (entities, _csv(tmp_path / "g.csv", "group_id,region_id\n1,a1\n2,\n3,b1\n"), hierarchy),
        "CSV ids as text": (_csv(tmp_path / "e.csv", "entity_id,group_id\n1,01\n"), groups, hierarchy),
    }
    for case, paths in cases.items():
        with pytest.raises(ValueError) as local:
            TopDownCountOfCounts(epsilon=1.0, max_size=5, seed=0).release(read_tables(*paths))
        with pytest.raises(ValueError) as on_spark:
            release_count_of_counts(spark, TopDownCountOfCounts(epsilon=1.0, max_size=5, seed=0), *paths)
        assert str(on_spark.value) == str(local.value), case


def test_the_spark_engine_refuses_unkeyed_noise(spark, tables):
    from dpstream.noise import ZeroNoise

    with pytest.raises(ValueError, match="needs keyed noise"):
        release_count_of_counts(spark, TopDownCountOfCounts(epsilon=1.0, max_size=K, noise=ZeroNoise()),
                                *tables["parquet"])


def test_the_command_line_writes_the_local_engines_file(spark, tables, tmp_path):
    entities, groups, hierarchy = tables["csv"]
    base = ["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy,
            "--epsilon", "1", "--method", "bu", "--max-size", str(K), "--seed", "2"]
    outputs = {}
    for engine in ("local", "spark"):
        outputs[engine] = tmp_path / f"{engine}.csv"
        result = CliRunner().invoke(cli, [*base, "--engine", engine, "-o", str(outputs[engine])])
        assert result.exit_code == 0, result.output
    assert outputs["spark"].read_bytes() == outputs["local"].read_bytes()
    with open(outputs["spark"], newline="") as handle:
        assert list(csv.DictReader(handle))[0].keys() == {"region", "level", "size", "count", "size_label"}
    local_only = CliRunner().invoke(cli, [*base, "--spark-conf", "spark.x=1", "-o", str(tmp_path / "x.csv")])
    assert local_only.exit_code == 2 and "applies to --engine spark only" in local_only.output
    bad = CliRunner().invoke(cli, [*base, "--engine", "spark", "--spark-conf", "novalue", "-o", str(tmp_path / "y")])
    assert bad.exit_code == 2 and "expected KEY=VALUE" in bad.output


def test_missing_pyspark_or_java_is_one_line(monkeypatch, tables, tmp_path):
    entities, groups, hierarchy = tables["csv"]
    args = ["count-of-counts", "--entities", entities, "--groups", groups, "--hierarchy", hierarchy,
            "--epsilon", "1", "--max-size", "5", "--engine", "spark", "-o", str(tmp_path / "o.csv")]
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SparkUnavailable, match="needs Java 17"):
        require_spark()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "needs Java 17" in result.output and "Traceback" not in result.output
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark now raises ImportError
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "pip install 'dpstream[spark]'" in result.output
    assert len(result.output.strip().splitlines()) == 1
