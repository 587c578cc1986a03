"""Count-of-counts inputs: ids read exactly as written, and group leaves and sizes validated."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import CountOfCountsData, RegionTree, read_tables


def _write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def numeric_looking(tmp_path):
    """Region codes that type inference would turn into numbers: 06 and 6 are two states."""
    hierarchy = _write(tmp_path / "h.csv", "region_id,level0,level1,level2\n"
                                           "06001,1,06,06001\n6001,1,6,6001\n1e3,1,6,1e3\nNA,1,NA,NA\n")
    groups = _write(tmp_path / "g.csv", "group_id,region_id\n01,06001\n1,06001\n2,6001\n3,1e3\n4,NA\n")
    entities = _write(tmp_path / "e.csv", "entity_id,group_id\n1,01\n01,01\n001,1\n2,2\n3,3\n4,3\n5,4\n")
    return entities, groups, hierarchy


def test_csv_ids_and_names_are_read_as_written(numeric_looking):
    data = read_tables(*numeric_looking)
    assert [names.tolist() for names in data.tree.names] == [["1"], ["06", "6", "NA"], ["06001", "1e3", "6001", "NA"]]
    # group ids 01 and 1 are two groups, entity ids 1, 01 and 001 three entities
    assert data.n_groups == 5
    assert data.groups(1).tolist() == [2, 2, 1]
    leaf_name = data.tree.names[2][data.leaf]
    assert {name: sorted(data.size[leaf_name == name].tolist()) for name in data.tree.names[2]} == {
        "06001": [1, 2], "1e3": [2], "6001": [1], "NA": [1]}


def test_released_region_names_are_the_input_names(numeric_looking, tmp_path):
    entities, groups, hierarchy = numeric_looking
    out = tmp_path / "out.csv"
    result = CliRunner().invoke(cli, ["count-of-counts", "--entities", str(entities), "--groups", str(groups),
                                      "--hierarchy", str(hierarchy), "--epsilon", "1", "--max-size", "10",
                                      "--seed", "0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    with open(out, newline="") as handle:
        regions = {(row["region"], row["level"]) for row in csv.DictReader(handle)}
    assert regions == {("1", "0"), ("06", "1"), ("6", "1"), ("NA", "1"),
                       ("06001", "2"), ("6001", "2"), ("1e3", "2"), ("NA", "2")}


def test_an_empty_csv_field_is_still_missing(tmp_path):
    hierarchy = _write(tmp_path / "h.csv", "region_id,level0,level1\na,r,a\nb,r,\n")
    groups = _write(tmp_path / "g.csv", "group_id,region_id\n1,a\n")
    entities = _write(tmp_path / "e.csv", "entity_id,group_id\n1,1\n")
    with pytest.raises(ValueError, match="empty values in column 'level1'"):
        read_tables(entities, groups, hierarchy)


def test_parquet_ids_compare_as_text_when_the_types_differ(tmp_path):
    # integer region ids in the hierarchy, text in the groups: compared as text, exactly
    pq.write_table(pa.table({"region_id": [6001, 6002], "level0": ["US", "US"], "level1": [6001, 6002]}), tmp_path / "h.parquet")
    pq.write_table(pa.table({"group_id": [1, 2], "region_id": ["6001", "6002"]}), tmp_path / "g.parquet")
    pq.write_table(pa.table({"entity_id": [1, 2, 3], "group_id": [1, 1, 2]}), tmp_path / "e.parquet")
    data = read_tables(tmp_path / "e.parquet", tmp_path / "g.parquet", tmp_path / "h.parquet")
    assert data.tree.names[1].tolist() == ["6001", "6002"] and sorted(data.size.tolist()) == [1, 2]
    pq.write_table(pa.table({"group_id": [1, 2], "region_id": ["06001", "6002"]}), tmp_path / "g.parquet")
    with pytest.raises(ValueError, match="'06001'"):
        read_tables(tmp_path / "e.parquet", tmp_path / "g.parquet", tmp_path / "h.parquet")


@pytest.fixture
def two_leaves():
    tree, _ = RegionTree.from_paths([("r", "a"), ("r", "b")])
    return tree


@pytest.mark.parametrize(
    ("leaf", "size", "message"),
    [
        ([0, -1], [1, 1], r"leaf\[1\] .* \[0, 2\), got -1"),
        ([0, 2], [1, 1], r"leaf\[1\] .* \[0, 2\), got 2"),
        ([0.5, 1], [1, 1], r"leaf\[0\] .*, got 0.5"),
        ([0, 1], [2.7, 1.0], r"size\[0\] must be an integer >= 0, got 2.7"),
        ([0, 1], [1, -3], r"size\[1\] must be an integer >= 0, got -3"),
        ([0, 1], [1.0, np.nan], r"size\[1\] .*, got nan"),
        ([0, 1, 1], [1, 1], "one entry per group"),
    ],
)
def test_group_leaves_and_sizes_are_validated(two_leaves, leaf, size, message):
    with pytest.raises(ValueError, match=message):
        CountOfCountsData(two_leaves, np.array(leaf), np.array(size))


def test_integer_valued_floats_are_accepted_as_integers(two_leaves):
    data = CountOfCountsData(two_leaves, np.array([0.0, 1.0, 1.0]), np.array([2.0, 0.0, 5.0]))
    assert data.leaf.dtype == np.int64 and data.size.dtype == np.int64
    assert data.truth(1).size.tolist() == [2, 0, 5] and data.groups(1).tolist() == [1, 2]
