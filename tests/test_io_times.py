"""The one parser of a time column, durations and UTC-aligned buckets; rows of named columns."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.io import InputError
from dpstream.io.rows import read_rows
from dpstream.io.times import NS, buckets_per_window, format_times, parse_duration, parse_times, time_kind

NOON = 1709294400 * NS  # 2024-03-01T12:00:00Z


@pytest.mark.parametrize("text", ["2024-03-01T12:00:00Z", "2024-03-01 12:00:00Z", "2024-03-01T12:00:00",
                                  "2024-03-01 12:00", "2024-03-01T14:00:00+02:00", "2024-03-01T14:00:00+0200",
                                  "2024-03-01T07:00:00-05:00", " 2024-03-01T12:00:00.000Z "])
def test_iso_times_with_an_offset_or_none_for_utc(text):
    assert parse_times([text], kind=time_kind(text)).tolist() == [NOON]


def test_epoch_seconds_and_a_column_of_one_kind():
    assert time_kind("1709294400") == "epoch" and time_kind("2024-03-01") == "iso"
    assert parse_times(["1709294400", "1709294400.25"], kind="epoch").tolist() == [NOON, NOON + NS // 4]
    with pytest.raises(InputError, match="row 2: the time '2024-03-01' is not epoch seconds"):
        parse_times(["1709294400", "2024-03-01"], kind="epoch")
    with pytest.raises(InputError, match="row 5: the time '1709294400' is not ISO 8601"):
        parse_times(["2024-03-01T12:00:00Z", "1709294400"], kind="iso", first_row=4)
    many = np.datetime_as_string(np.datetime64("2024-03-01T12:00:00") + np.arange(10_000).astype("timedelta64[s]"))
    assert np.array_equal(parse_times(pa.array(many), kind="iso"), NOON + np.arange(10_000) * NS)


def test_durations_buckets_and_their_text():
    assert [parse_duration(t) for t in ("45s", "30m", "2h", "1d")] == [45, 1800, 7200, 86400]
    for bad in ("30", "0m", "1.5h", "30min", "m", "-1d", 30):
        with pytest.raises(ValueError, match="s, m, h or d"):
            parse_duration(bad)
    assert buckets_per_window(1800, 86400) == 48
    with pytest.raises(ValueError, match="whole number of buckets"):
        buckets_per_window(7 * 60, 86400)
    assert format_times(np.array([NOON, NOON + 1800 * NS])) == ["2024-03-01T12:00:00Z", "2024-03-01T12:30:00Z"]


def test_rows_from_csv_and_parquet_are_the_same(tmp_path):
    text = "time,meter,kWh,feeder\n2024-03-01T12:00:00Z, a ,1.5,f0\n2024-03-01T12:10:00Z,b,NA,f1\n"
    (tmp_path / "rows.csv").write_text(text)
    pq.write_table(pa.table({"time": ["2024-03-01T12:00:00Z", "2024-03-01T12:10:00Z"], "meter": ["a", "b"],
                             "kWh": [1.5, None], "feeder": ["f0", "f1"]}), tmp_path / "rows.parquet")
    for name in ("rows.csv", "rows.parquet"):
        [batch] = read_rows(str(tmp_path / name), time_column="time", unit_column="meter", column="kWh",
                            partition_column="feeder", missing="skip")
        assert batch.units.to_pylist() == ["a", "b"] and batch.partitions.to_pylist() == ["f0", "f1"]
        assert batch.values.tolist() == [1.5, 0.0] and batch.missing.tolist() == [False, True]
    with pytest.raises(InputError, match="row 2: the value is missing"):
        list(read_rows(str(tmp_path / "rows.csv"), time_column="time", unit_column="meter", column="kWh"))
    for name in ("rows.csv", "rows.parquet"):
        with pytest.raises(InputError, match="'watts'"):
            list(read_rows(str(tmp_path / name), time_column="time", unit_column="meter", column="watts"))
    (tmp_path / "bad.csv").write_text("time,meter,kWh\n2024-03-01T12:00:00Z,a,lots\n")
    with pytest.raises(InputError, match="lots"):
        list(read_rows(str(tmp_path / "bad.csv"), time_column="time", unit_column="meter", column="kWh"))


def test_a_leap_second_is_the_last_instant_before_the_next_minute():
    times = parse_times(["2016-12-31T23:59:59Z", "2016-12-31 23:59:60Z", "2016-12-31T23:59:60.5+00:00",
                         "2017-01-01T00:00:00Z"], kind="iso")
    assert times.tolist() == [1483228799 * NS, 1483228800 * NS - 1, 1483228800 * NS - 1, 1483228800 * NS]
    assert np.all(np.diff(times) >= 0)  # in order, and in the bucket of the second before it


@pytest.mark.parametrize("text", ["9999-12-31T23:00:00Z", "2262-04-12T00:00:00", "1677-01-01 00:00:00+01:00"])
def test_iso_times_outside_int64_nanoseconds_name_the_range_not_the_format(text):
    with pytest.raises(InputError, match=re.escape(f"row 3: the time '{text}' is outside the years 1678 to 2261")):
        parse_times(["2024-01-01T00:00:00Z", text], kind="iso", first_row=2)


@pytest.mark.parametrize("text", ["36501d", "99999999999999999999d", "876001h"])
def test_a_duration_over_a_century_is_refused(text):
    with pytest.raises(ValueError, match=r"at most 36500d \(100 years\), got"):
        parse_duration(text)
    assert parse_duration("36500d") == 36500 * 86400


@pytest.mark.parametrize(("column", "message"), [
    (pa.array([["a"], ["b"]]), "the column 'meter' is of type list<element: string>, not text."),
    (pa.array(["1.5", "x"]), "the column 'kWh' holds 'x', not numbers."),
])
def test_parquet_columns_that_do_not_convert_are_one_line_errors(tmp_path, column, message):
    """A list column raised pyarrow's NotImplementedError (a traceback); a text value column an unnamed ArrowInvalid."""
    name = "meter" if pa.types.is_list(column.type) else "kWh"
    table = {"time": pa.array(["2024-03-01T00:00:00Z"] * 2), "meter": pa.array(["a", "b"]),
             "kWh": pa.array([1.0, 2.0]), name: column}
    pq.write_table(pa.table(table), tmp_path / "rows.parquet")
    with pytest.raises(InputError, match=re.escape(message)):
        list(read_rows(str(tmp_path / "rows.parquet"), time_column="time", unit_column="meter", column="kWh"))
