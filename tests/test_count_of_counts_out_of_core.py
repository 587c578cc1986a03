"""The local engine reads a Parquet Entities table in batches: the same data as a whole read, the
same errors, and memory that does not grow with the entity rows beyond one byte per id."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.count_of_counts import housing_data, read_tables, write_tables


@pytest.mark.parametrize("batch_rows", [1, 7, 1 << 20])
def test_batches_read_the_same_data_as_the_whole_table(tmp_path, batch_rows):
    data = housing_data(500, n_states=2, n_counties=5, max_outlier=50, seed=2)
    parquet = write_tables(data, tmp_path / "p", parquet=True)
    whole = read_tables(*write_tables(data, tmp_path / "c"))  # CSV: read whole
    batched = read_tables(*parquet, batch_rows=batch_rows)
    assert np.array_equal(batched.leaf, whole.leaf) and np.array_equal(batched.size, whole.size)
    assert np.array_equal(batched.size, data.size)


def _tables(tmp_path, entity_ids, group_ids, groups=("g1", "g2"), name="e"):
    pq.write_table(pa.table({"entity_id": entity_ids, "group_id": group_ids}), tmp_path / f"{name}.parquet",
                   row_group_size=2)
    pq.write_table(pa.table({"group_id": list(groups), "region_id": ["a"] * len(groups)}), tmp_path / "g.parquet")
    pq.write_table(pa.table({"region_id": ["a"], "level0": ["r"], "level1": ["a"]}), tmp_path / "h.parquet")
    return [str(tmp_path / f"{name}.parquet"), str(tmp_path / "g.parquet"), str(tmp_path / "h.parquet")]


def test_text_ids_and_wide_id_spans(tmp_path):
    paths = _tables(tmp_path, ["x", "y", "z"], ["g2", "g2", "g1"])
    assert read_tables(*paths, batch_rows=1).size.tolist() == [1, 2]
    wide = _tables(tmp_path, [0, 2**40, 5], ["g1", "g1", "g2"], name="w")  # ids kept, not one byte per id
    assert read_tables(*wide, batch_rows=1).size.tolist() == [2, 1]


@pytest.mark.parametrize(
    ("entity_ids", "group_ids", "message"),
    [
        ([1, 2, 3, 1], ["g1", "g1", "g2", "g2"], "lists an entity_id more than once"),
        ([1, 2, 3, 2**40, 2**40], ["g1"] * 5, "lists an entity_id more than once"),
        (["a", "b", "a"], ["g1"] * 3, "lists an entity_id more than once"),
        ([1, 2, 3, 4], ["g1", "g1", "g2", "g9"], "refers to group_id 'g9'"),
        ([1, 2, None], ["g1", "g1", "g2"], "has empty values in column 'entity_id'"),
    ],
)
def test_errors_found_in_a_later_batch(tmp_path, entity_ids, group_ids, message):
    with pytest.raises(ValueError, match=message):
        read_tables(*_tables(tmp_path, entity_ids, group_ids), batch_rows=2)


def test_integer_group_ids_are_looked_up_by_value(tmp_path):
    pq.write_table(pa.table({"entity_id": [1, 2, 3], "group_id": [30, 10, 30]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"group_id": [30, 10, 20], "region_id": ["a", "a", "a"]}), tmp_path / "g.parquet")
    pq.write_table(pa.table({"region_id": ["a"], "level0": ["r"], "level1": ["a"]}), tmp_path / "h.parquet")
    paths = [str(tmp_path / name) for name in ("e.parquet", "g.parquet", "h.parquet")]
    assert read_tables(*paths, batch_rows=1).size.tolist() == [2, 1, 0]
    pq.write_table(pa.table({"entity_id": [1], "group_id": [99]}), tmp_path / "e.parquet")
    with pytest.raises(ValueError, match="refers to group_id 99"):
        read_tables(*paths)


# The peak resident memory of this process's own address space: VmHWM (Linux), not ru_maxrss,
# which keeps the parent's peak across fork and exec (the parent wrote the tables).
MEASURE = textwrap.dedent(
    """
    import resource, sys
    from dpstream.count_of_counts import read_tables
    d = sys.argv[1]
    read_tables(f"{d}/e.parquet", f"{d}/g.parquet", f"{d}/h.parquet", batch_rows=1 << 16)
    try:
        with open("/proc/self/status") as status:
            print(next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")))
    except OSError:
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024))
    """
)


def test_memory_does_not_grow_with_the_entity_rows(tmp_path):
    groups = 3000
    peaks = {}
    for rows in (200_000, 2_000_000):
        folder = tmp_path / str(rows)
        folder.mkdir()
        group_id = np.random.default_rng(0).integers(0, groups, rows)
        pq.write_table(pa.table({"entity_id": np.arange(rows), "group_id": group_id}), folder / "e.parquet",
                       row_group_size=1 << 16)
        pq.write_table(pa.table({"group_id": np.arange(groups), "region_id": np.arange(groups) % 3}),
                       folder / "g.parquet")
        pq.write_table(pa.table({"region_id": [0, 1, 2], "level0": ["r"] * 3, "level1": ["a", "b", "c"]}),
                       folder / "h.parquet")
        result = subprocess.run([sys.executable, "-c", MEASURE, str(folder)], capture_output=True, text=True,
                                check=True)
        peaks[rows] = int(result.stdout.split()[-1])
    grown = peaks[2_000_000] - peaks[200_000]
    # Holding the table would take 16 bytes a row (two int64 columns) before any copy; the batched
    # read keeps one byte per entity id, so 4 bytes a row leaves room for allocator noise only.
    assert grown < 4 * (2_000_000 - 200_000), peaks


def test_generate_housing_writes_tables_the_engines_read(tmp_path):
    from click.testing import CliRunner

    from dpstream.cli import cli

    out = tmp_path / "housing"
    args = ["generate-housing", "--n-groups", "2000", "--states", "3", "--counties", "9", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = read_tables(out / "entities.parquet", out / "groups.parquet", out / "hierarchy.parquet")
    expected = housing_data(2000, n_states=3, n_counties=9, seed=0)
    assert np.array_equal(data.size, expected.size) and np.array_equal(data.leaf, expected.leaf)
    assert CliRunner().invoke(cli, args).exit_code != 0  # no overwrite without --force
    bad = CliRunner().invoke(cli, [*args[:-2], "--counties", "2", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--states" in bad.output


@pytest.mark.parametrize("bad", [3, -1])
def test_consecutive_group_ids_find_unknown_groups(tmp_path, bad):
    pq.write_table(pa.table({"entity_id": [5, 6, 7], "group_id": [2, 0, bad]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"group_id": [2, 0, 1], "region_id": ["a", "a", "a"]}), tmp_path / "g.parquet")
    pq.write_table(pa.table({"region_id": ["a"], "level0": ["r"], "level1": ["a"]}), tmp_path / "h.parquet")
    paths = [str(tmp_path / name) for name in ("e.parquet", "g.parquet", "h.parquet")]
    with pytest.raises(ValueError, match=f"refers to group_id {bad}, "):
        read_tables(*paths, batch_rows=2)
    pq.write_table(pa.table({"entity_id": [5, 6, 7], "group_id": [2, 0, 2]}), tmp_path / "e.parquet")
    assert read_tables(*paths, batch_rows=2).size.tolist() == [2, 1, 0]
