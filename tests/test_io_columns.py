"""The column resolver (``dpstream.io.resolve_columns``): the rule every reader chooses its value,
time and key columns by, public for readers outside the package (the Spark release)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.io import InputError, StreamReader, resolve_columns

NAMES = ["time", "meter", "kWh"]


def test_columns_are_found_by_name():
    assert resolve_columns(NAMES, "s.csv", column="kWh") == (2, None, None)
    assert resolve_columns(NAMES, "s.csv", column="time", time_column="kWh", key_column="meter") == (0, 2, 1)


def test_the_value_column_may_be_left_out_when_one_column_is_left():
    assert resolve_columns(["value"], "s.csv") == (0, None, None)
    assert resolve_columns(NAMES, "s.csv", time_column="time", key_column="meter") == (2, 0, 1)
    assert resolve_columns(("a", "b"), "s.csv", key_column="b") == (0, None, 1)  # any sequence of names
    with pytest.raises(InputError, match=r"^s\.csv has columns 'time', 'meter', 'kWh'; choose one with a column "
                                         r"name \(--column\)\.$"):
        resolve_columns(NAMES, "s.csv", time_column="time")


@pytest.mark.parametrize("options, message", [
    ({"column": "kW"}, "s.csv has no column 'kW'; its columns are 'time', 'meter', 'kWh'."),
    ({"column": "kWh", "time_column": "date"}, "s.csv has no time column 'date'; its columns are 'time', 'meter', "
                                               "'kWh'."),
    ({"key_column": "user"}, "s.csv has no key column 'user'; its columns are 'time', 'meter', 'kWh'."),
])
def test_a_column_that_is_not_there_is_named_with_the_columns(options, message):
    with pytest.raises(InputError) as error:
        resolve_columns(NAMES, "s.csv", **options)
    assert str(error.value) == message


def test_two_columns_of_one_name_are_an_error_naming_the_line_if_any():
    with pytest.raises(InputError, match=r"^s\.csv line 1 has two columns named 'a' \(columns 1 and 3\); column "
                                         r"names must be unique\.$"):
        resolve_columns(["a", "b", "a"], "s.csv", column="b", line=1)
    with pytest.raises(InputError, match=r"^t\.parquet has two columns named 'a' \(columns 2 and 3\)"):
        resolve_columns(["b", "a", "a"], "t.parquet", column="b")


def test_a_name_given_to_two_roles_or_not_a_string_is_a_mistake_of_the_caller():
    with pytest.raises(ValueError, match="key_column and column must name different columns, got 'kWh' for both"):
        resolve_columns(NAMES, "s.csv", column="kWh", key_column="kWh")
    with pytest.raises(TypeError, match="time_column must be a column name"):
        resolve_columns(NAMES, "s.csv", time_column=0)


@pytest.mark.parametrize("options", [{"column": "kW"}, {}, {"key_column": "user"}, {"column": "kWh"},
                                     {"time_column": "time", "key_column": "meter"}])
def test_the_readers_choose_and_refuse_columns_as_the_resolver_does(tmp_path, options):
    """A reader outside the package that calls the resolver on a schema's names says what
    StreamReader says of the same file, for a CSV header and a Parquet schema alike."""
    csv = tmp_path / "meter.csv"
    csv.write_text("time,meter,kWh\n08:00,m-1,1.5\n")
    parquet = tmp_path / "meter.parquet"
    pq.write_table(pa.table({"time": ["08:00"], "meter": ["m-1"], "kWh": [1.5]}), parquet)
    for path in (csv, parquet):
        try:
            value, time, key = resolve_columns(NAMES, str(path), **options)
        except InputError as error:
            with pytest.raises(InputError) as raised, StreamReader(path, **options) as reader:
                list(reader.records())
            assert str(raised.value) == str(error)
            continue
        with StreamReader(path, **options) as reader:
            record, = reader.records()
        fields = ["08:00", "m-1", 1.5]
        assert record.value == fields[value]
        assert record.time == (None if time is None else fields[time])
        assert record.key == (None if key is None else fields[key])
