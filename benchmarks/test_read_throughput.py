"""Reading throughput of stream files: 2 M lines of text (one column; three columns, with and
without the time and key texts; value by value) and 2 M Parquet rows.

Run with ``make bench`` (``pytest benchmarks --benchmark-only``).  Throughput is reported in
``extra_info`` as values per second.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.io import StreamReader

LINES = 2_000_000
CHUNK = 65536


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, object]:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 1658, LINES)
    floats = rng.uniform(0, 1657, LINES)
    users = rng.integers(0, 10**9, LINES)
    root = tmp_path_factory.mktemp("read")
    paths = {"ints": root / "ints.csv", "floats": root / "floats.csv", "columns": root / "columns.csv",
             "parquet": root / "columns.parquet"}
    paths["ints"].write_text("value\n" + "\n".join(map(str, values.tolist())) + "\n")
    paths["floats"].write_text("value\n" + "\n".join(map(repr, floats.tolist())) + "\n")
    times = [f"2024-01-01T{i % 24:02d}:00:00" for i in range(LINES)]
    paths["columns"].write_text("time,value,user\n" + "".join(
        f"{t},{v},u{u}\n" for t, v, u in zip(times, values.tolist(), users.tolist())))
    pq.write_table(pa.table({"time": times, "value": values, "user": [f"u{u}" for u in users.tolist()]}),
                   paths["parquet"])
    return paths


CASES = {
    "one-column-integers": ("ints", {}),
    "one-column-floats": ("floats", {}),
    "three-columns": ("columns", {"column": "value"}),
    "three-columns-time-key": ("columns", {"column": "value", "time_column": "time", "key_column": "user"}),
    "parquet": ("parquet", {"column": "value"}),
    "parquet-time-key": ("parquet", {"column": "value", "time_column": "time", "key_column": "user"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_read_in_batches(benchmark, files, case):
    name, options = CASES[case]

    def run() -> int:
        with StreamReader(files[name], **options) as reader:
            return sum(len(batch) for batch in reader.batches(CHUNK))

    count = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    assert count == LINES
    benchmark.extra_info["values_per_second"] = LINES / benchmark.stats.stats.median


@pytest.mark.parametrize("case", ["one-column-integers", "three-columns"])
def test_read_value_by_value(benchmark, files, case):
    name, options = CASES[case]

    def run() -> int:
        with StreamReader(files[name], **options) as reader:
            return sum(1 for _ in reader.values())

    count = benchmark.pedantic(run, rounds=3, iterations=1)
    assert count == LINES
    benchmark.extra_info["values_per_second"] = LINES / benchmark.stats.stats.median
