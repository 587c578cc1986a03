"""Parquet streams (``dpstream.io``): columns, time and key text, missing values, batches, errors."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.io import InputError, ReadStats, Record, StreamReader, read_values


def write(tmp_path, columns, name="meter.parquet", row_group_size=None):
    path = tmp_path / name
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


@pytest.fixture
def meter(tmp_path):
    return write(tmp_path, {
        "time": [f"2024-01-01T0{h}:00" for h in range(5)],
        "meter": pa.array(["m-1", "m-2", None, "m-1", "m-3"]),
        "kWh": pa.array([1.5, None, 2.0, float("nan"), 0.25]),
    })


def test_read_values_reads_parquet(tmp_path):
    """Regression: ``release meter.parquet`` failed with "not UTF-8 text"."""
    path = write(tmp_path, {"value": pa.array([4, 3, 7], pa.int32())})
    got = read_values(path)
    assert got.dtype == np.float64 and got.tolist() == [4.0, 3.0, 7.0]


@pytest.mark.parametrize("kind", [pa.int8(), pa.uint64(), pa.float16(), pa.float32(), pa.float64(),
                                  pa.decimal128(6, 2)])
def test_numeric_types_are_values(tmp_path, kind):
    import decimal

    data = [decimal.Decimal("1.25"), decimal.Decimal("2")] if pa.types.is_decimal(kind) else [1, 2]
    path = write(tmp_path, {"v": pa.array(data, kind)})
    expected = [1.25, 2.0] if pa.types.is_decimal(kind) else [1.0, 2.0]
    assert read_values(path).tolist() == expected


def test_records_with_time_and_key(meter):
    with StreamReader(meter, time_column="time", key_column="meter", missing="zero") as reader:
        assert reader.format == "parquet"
        records = list(reader.records())
    assert records == [
        Record(1.5, "2024-01-01T00:00", "m-1", 1),
        Record(0.0, "2024-01-01T01:00", "m-2", 2),  # null is missing
        Record(2.0, "2024-01-01T02:00", "", 3),  # a null key is empty text
        Record(0.0, "2024-01-01T03:00", "m-1", 4),  # NaN is missing
        Record(0.25, "2024-01-01T04:00", "m-3", 5),
    ]
    assert (reader.stats.missing, reader.stats.replaced, reader.stats.first_missing) == (2, 2, 2)
    assert reader.stats.summary() == "5 values read; 2 missing values read as 0, the first on row 2."


def test_timestamps_and_numbers_become_arrow_text(tmp_path):
    start = datetime.datetime(2024, 1, 1)
    path = write(tmp_path, {"time": pa.array([start, start + datetime.timedelta(minutes=90)], pa.timestamp("s")),
                            "key": pa.array([7, None]), "v": [1.0, 2.0]})
    stored = pq.read_table(path)
    with StreamReader(path, time_column="time", key_column="key") as reader:
        batch = next(reader.batches())
    assert batch.times == stored["time"].cast(pa.string()).to_pylist()
    assert batch.times[1].startswith("2024-01-01 01:30:00") and batch.keys == ["7", ""]


def test_missing_values_error_names_the_row(meter):
    with StreamReader(meter, time_column="time", key_column="meter") as reader:
        with pytest.raises(InputError, match=r"meter\.parquet row 2, column 'kWh', is missing \(null or NaN\)"):
            list(reader.values())


def test_skip_drops_rows_and_keeps_row_numbers(meter):
    with StreamReader(meter, time_column="time", key_column="meter", missing="skip") as reader:
        batches = list(reader.batches(2))
    assert [b.values.tolist() for b in batches] == [[1.5], [2.0], [0.25]]
    assert [b.lines.tolist() for b in batches] == [[1], [3], [5]]
    assert [b.keys for b in batches] == [["m-1"], [""], ["m-3"]]
    assert reader.stats.skipped == 2 and reader.stats.rows == 5


def test_batches_read_in_constant_pieces(tmp_path):
    path = write(tmp_path, {"v": np.arange(10_000, dtype=np.float64)}, row_group_size=3_000)
    with StreamReader(path) as reader:
        sizes = [len(b) for b in reader.batches(1_000)]
    assert max(sizes) <= 1_000 and sum(sizes) == 10_000
    np.testing.assert_array_equal(read_values(path), np.arange(10_000))


def test_values_one_at_a_time(tmp_path):
    path = write(tmp_path, {"v": [1.0, 2.0, 3.0]})
    with StreamReader(path) as reader:
        values = reader.values()
        assert next(values) == 1.0 and list(values) == [2.0, 3.0]


def test_infinity_is_an_error_under_every_policy(tmp_path):
    path = write(tmp_path, {"v": [1.0, None, float("-inf")]})
    for missing in ("zero", "skip"):
        with pytest.raises(InputError, match=r"row 3, column 'v', holds -inf; infinities are not stream values"):
            read_values(path, missing=missing)
    with pytest.raises(InputError, match="row 2, column 'v', is missing"):
        read_values(path)  # the first problem first


def test_a_non_numeric_value_column_is_a_clear_error(tmp_path):
    path = write(tmp_path, {"t": [1, 2], "v": ["1", "2"], "b": [True, False]})
    with pytest.raises(InputError, match=r"column 'v' holds string values, not numbers; the value column must be "
                                         r"numeric \(integer, floating point or decimal\)"):
        StreamReader(path, column="v")
    with pytest.raises(InputError, match="column 'b' holds bool values, not numbers"):
        StreamReader(path, column="b")


def test_columns_are_chosen_as_in_text(tmp_path):
    path = write(tmp_path, {"time": [1, 2], "kWh": [3.0, 4.0], "user": ["a", "b"]})
    with pytest.raises(InputError, match="has columns 'time', 'kWh', 'user'; choose one with a column name"):
        StreamReader(path)
    with pytest.raises(InputError, match="has no column 'value'; its columns are 'time', 'kWh', 'user'"):
        StreamReader(path, column="value")
    with pytest.raises(InputError, match="has no time column 'when'"):
        StreamReader(path, column="kWh", time_column="when")
    with StreamReader(path, time_column="time", key_column="user") as reader:  # kWh is the one left
        assert list(reader.records()) == [Record(3.0, "1", "a", 1), Record(4.0, "2", "b", 2)]


def test_a_time_column_that_cannot_be_text_is_an_error(tmp_path):
    path = write(tmp_path, {"t": pa.array([[1], [2]]), "v": [1.0, 2.0]})
    with pytest.raises(InputError, match=r"column 't' holds list<.*int64> values, which cannot be read as text"):
        StreamReader(path, column="v", time_column="t")


def test_parquet_is_recognised_by_its_magic_bytes(tmp_path):
    path = write(tmp_path, {"v": [5.0]}, name="meter.data")
    assert read_values(path).tolist() == [5.0]


def test_a_broken_parquet_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(InputError, match="broken.parquet is not a readable Parquet file") as info:
        read_values(path)
    assert "\n" not in str(info.value)


def test_parquet_equals_the_same_stream_as_csv(tmp_path):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 100, 500).astype(np.float64)
    keys = [f"u{k}" for k in rng.integers(0, 9, 500)]
    hole = rng.random(500) < 0.1
    path = write(tmp_path, {"kWh": pa.array(np.where(hole, np.nan, values)), "user": keys})
    csv = tmp_path / "meter.csv"
    csv.write_text("kWh,user\n" + "".join(f"{'NA' if h else float(v)!r},{k}\n" for v, k, h in zip(values, keys, hole)))
    for missing in ("zero", "skip"):
        stats = {}
        got = {}
        for name, source in (("parquet", path), ("csv", csv)):
            stats[name] = ReadStats()
            with StreamReader(source, key_column="user", missing=missing, stats=stats[name]) as reader:
                got[name] = [(r.value, r.key) for r in reader.records()]
        assert got["parquet"] == got["csv"]
        assert (stats["parquet"].values, stats["parquet"].missing) == (stats["csv"].values, stats["csv"].missing)


def test_reading_parquet_takes_constant_memory(tmp_path):
    import tracemalloc

    def peak(rows: int) -> int:
        path = write(tmp_path, {"v": np.ones(rows), "k": ["abc"] * rows}, name=f"s{rows}.parquet",
                     row_group_size=1000)
        with StreamReader(path, key_column="k") as reader:
            tracemalloc.start()
            for _ in reader.batches(1000):
                pass
            used = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return used

    assert peak(80_000) < 1.5 * peak(10_000)


def test_duplicate_parquet_column_names_are_an_error(tmp_path):
    path = tmp_path / "dup.parquet"
    table = pa.Table.from_arrays([pa.array([1.0]), pa.array([2.0])], names=["v", "v"])
    pq.write_table(table, path)
    with pytest.raises(InputError, match=r"dup.parquet has two columns named 'v' \(columns 1 and 2\)"):
        StreamReader(path, column="v")
