"""Records with time and key columns, batches, statistics and :class:`StreamReader` (text).

The chunked reader must equal the lazy one: same values, texts and line numbers, same error,
same statistics, wherever the chunk edges fall (a property test over messy inputs).
"""

from __future__ import annotations

import dataclasses
import gzip
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.io import (
    Batch,
    InputError,
    ReadStats,
    Record,
    StreamReader,
    iter_batches,
    iter_records,
    iter_values,
)

METER = (
    "time,meter,kWh\n"
    "2024-01-01T00:00:00Z,m-1,1.5\n"
    '"2024-01-01T01:00:00Z", "m 2" ,2\n'
    "2024-01-01T02:00:00Z,,NA\n"
    "  01/02/2024 03:00 ,m-1,0.25\n"
)


def test_records_keep_time_and_key_text_as_written():
    records = list(iter_records(io.StringIO(METER), time_column="time", key_column="meter", missing="zero"))
    assert records == [
        Record(1.5, "2024-01-01T00:00:00Z", "m-1", 2),
        Record(2.0, "2024-01-01T01:00:00Z", "m 2", 3),  # blanks and one pair of quotes removed
        Record(0.0, "2024-01-01T02:00:00Z", "", 4),  # an empty key is text, not missing
        Record(0.25, "01/02/2024 03:00", "m-1", 5),
    ]


def test_the_value_column_is_the_one_left_by_time_and_key():
    values = [r.value for r in iter_records(io.StringIO(METER), time_column="time", key_column="meter",
                                            missing="skip")]
    assert values == [1.5, 2.0, 0.25]
    with pytest.raises(InputError, match="choose one with a column name"):
        list(iter_records(io.StringIO(METER), time_column="time"))  # meter and kWh are left


def test_records_without_time_or_key_have_none():
    assert list(iter_records(["v", "1"])) == [Record(1.0, None, None, 2)]
    assert list(iter_records(["t,v", "a,1"], time_column="t")) == [Record(1.0, "a", None, 2)]
    assert list(iter_records(["k,v", "a,1"], key_column="k")) == [Record(1.0, None, "a", 2)]


@pytest.mark.parametrize("text", ["1\n2\n", "NA,v\n1,2\n"])
def test_time_and_key_columns_need_a_header(text):
    with pytest.raises(InputError, match="no header line, so column 't' cannot be found"):
        list(iter_records(io.StringIO(text), time_column="t"))


def test_unknown_time_and_key_columns_are_named():
    with pytest.raises(InputError, match=r"has no time column 'when'; its columns are 'time', 'meter', 'kWh'"):
        list(iter_records(io.StringIO(METER), time_column="when"))
    with pytest.raises(InputError, match=r"has no key column 'user'"):
        list(iter_batches(io.StringIO(METER), 10, key_column="user"))


def test_column_arguments_are_checked_before_reading():
    with pytest.raises(ValueError, match="time_column and column must name different columns, got 'v' for both"):
        iter_records(["v"], column="v", time_column="v")
    with pytest.raises(TypeError, match="key_column must be a column name"):
        iter_records(["v"], key_column=3)
    with pytest.raises(ValueError, match="size must be"):
        iter_batches(["v"], 0)


def test_batches_carry_values_lines_times_and_keys():
    batches = list(iter_batches(io.StringIO(METER), 2, time_column="time", key_column="meter", missing="skip"))
    assert [len(b) for b in batches] == [2, 1]  # the NA row is dropped from the second chunk
    first, second = batches
    assert first.values.dtype == np.float64 and first.lines.dtype == np.int64
    assert first.values.tolist() == [1.5, 2.0] and first.lines.tolist() == [2, 3]
    assert first.times == ["2024-01-01T00:00:00Z", "2024-01-01T01:00:00Z"] and first.keys == ["m-1", "m 2"]
    assert second.lines.tolist() == [5] and second.times == ["01/02/2024 03:00"]
    assert list(second.records()) == [Record(0.25, "01/02/2024 03:00", "m-1", 5)]


def test_batch_lines_map_positions_back_to_lines():
    """With skipped rows, position p (0-based) of the stream is line ``lines[p]``."""
    text = "v\n" + "\n".join(["1", "NA", "2", "", "3", "null", "4"]) + "\n"
    lines = np.concatenate([b.lines for b in iter_batches(io.StringIO(text), 3, missing="skip")])
    assert lines.tolist() == [2, 4, 6, 8]


def test_batches_never_exceed_their_size_and_are_never_empty():
    text = "v\n" + "NA\n" * 5 + "\n".join(map(str, range(10))) + "\n" + "\n" * 7 + "5\n"
    sizes = [len(b) for b in iter_batches(io.StringIO(text), 4, missing="zero")]
    assert sum(sizes) == 5 + 10 + 7 + 1 and max(sizes) <= 4 and min(sizes) >= 1
    sizes = [len(b) for b in iter_batches(io.StringIO(text), 4, missing="skip")]
    assert sum(sizes) == 11 and min(sizes) >= 1


def test_a_batch_records_equal_the_lazy_records():
    batch = Batch(np.array([1.0, 2.0]), np.array([2, 3]), None, ["a", "b"])
    assert list(batch.records()) == [Record(1.0, None, "a", 2), Record(2.0, None, "b", 3)]
    assert len(batch) == 2


def test_records_are_lazy_and_a_blank_line_waits_for_the_next_line():
    consumed = []

    def lines():
        for line in ["t,v\n", "a,1\n", "b,2\n", "c,oops\n"]:
            consumed.append(line)
            yield line

    records = iter_records(lines(), time_column="t")
    assert next(records) == Record(1.0, "a", None, 2) and len(consumed) == 2
    assert next(records).time == "b" and len(consumed) == 3
    with pytest.raises(InputError, match="line 4"):
        next(records)
    consumed.clear()

    def live():
        for line in ["1\n", "\n", "2\n"]:
            consumed.append(line)
            yield line

    values = iter_values(live(), missing="zero")
    assert next(values) == 1.0 and len(consumed) == 1
    assert next(values) == 0.0 and len(consumed) == 3  # the blank line is a row: a line followed it
    assert next(values) == 2.0


def test_lines_without_line_ends_are_read_alike():
    assert [b.values.tolist() for b in iter_batches(["a,b", "1,2", "3,4"], 5, column="b")] == [[2.0, 4.0]]
    assert list(iter_values(["a,b", "1,2", "3,4"], column="b")) == [2.0, 4.0]


def test_a_byte_order_mark_is_dropped_from_any_source():
    assert list(iter_values(["\ufeffvalue\n", "1\n"])) == [1.0]
    assert [b.values.tolist() for b in iter_batches(["\ufeff1\n", "2\n"], 10)] == [[1.0, 2.0]]


def test_carriage_returns_are_line_ends():
    text = "t,v\r\n1,2\r\n3,4\r\n"
    assert [r[:3] for r in iter_records(text.splitlines(keepends=True), time_column="t")] == [
        (2.0, "1", None), (4.0, "3", None)]
    assert [b.times for b in iter_batches(text.splitlines(keepends=True), 9, time_column="t")] == [["1", "3"]]


def test_wide_files_are_read_in_smaller_chunks():
    header = ",".join(f"c{i}" for i in range(300))
    row = ",".join(["1"] * 300)
    lines = [header] + [row] * 10_000
    batches = list(iter_batches(lines, 65536, column="c7"))
    assert sum(len(b) for b in batches) == 10_000 and len(batches) > 1


def test_zero_width_marker_in_text_falls_back_to_the_careful_path():
    batches = list(iter_batches(["t,v\n", "a\0b,1\n", "c,2\n"], 10, time_column="t"))
    assert batches[0].times == ["a\0b", "c"] and batches[0].values.tolist() == [1.0, 2.0]


# -- the chunked reader equals the lazy reader ------------------------------------------------

VALUES = ["1", "2.5", "-3", "1e2", " 4 ", '"5"', "", "NA", "nan", "Null", "x", "1_0", "inf", "1e999", ".5", "7.",
          " na ", '"NA"']
TEXTS = ["a", "", " b ", '"c"', "'d'", "2024-01-01", "e f"]


def outcome(make):
    stats = ReadStats()
    records = []
    try:
        for item in make(stats):
            records.append(item)
        error = None
    except InputError as exc:
        error = str(exc)
    return records, error, dataclasses.astuple(stats)


def same(batched, lazy):
    """Equal outcomes; on an error, a chunked reader has returned no part of the failing chunk."""
    (got, got_error, got_stats), (expected, error, stats) = batched, lazy
    assert (got_error, got_stats) == (error, stats)
    assert got == (expected if error is None else expected[: len(got)])
    return True


def lazy_records(lines, **options):
    return outcome(lambda stats: iter_records(iter(lines), source="s", stats=stats, **options))


def batched_records(lines, size, **options):
    def make(stats):
        for batch in iter_batches(iter(lines), size, source="s", stats=stats, **options):
            yield from batch.records()

    return outcome(make)


@settings(max_examples=300, deadline=None)
@given(
    cells=st.lists(st.sampled_from(VALUES), max_size=30),
    plain=st.lists(st.booleans(), min_size=30, max_size=30),
    size=st.integers(1, 6),
    missing=st.sampled_from(["error", "zero", "skip"]),
    header=st.booleans(),
)
def test_one_column_batches_equal_records(cells, plain, size, missing, header):
    # Mostly plain numbers, so that many chunks take the one-scan path.
    cells = [cell if not keep else "1.5" for cell, keep in zip(cells, plain)]
    lines = (["value\n"] if header else []) + [cell + "\n" for cell in cells]
    assert same(batched_records(lines, size, missing=missing), lazy_records(lines, missing=missing))


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(TEXTS), st.sampled_from(VALUES), st.sampled_from(TEXTS),
                            st.sampled_from([0, 0, 0, 0, 1, 2, 3])), max_size=25),
    size=st.integers(1, 6),
    missing=st.sampled_from(["error", "zero", "skip"]),
    separator=st.sampled_from([",", "\t"]),
)
def test_records_batches_equal_records(rows, size, missing, separator):
    lines = [separator.join(["time", "v", "key"]) + "\n"]
    for time, value, key, shape in rows:
        fields = [time, value, key]
        if shape == 1:
            fields.append("extra")  # too many fields
        elif shape == 2:
            fields = []  # a blank line
        elif shape == 3:
            value = "3"
            fields = [time, value, key]
        lines.append(separator.join(fields) + "\n")
    options = {"time_column": "time", "key_column": "key", "missing": missing}
    assert same(batched_records(lines, size, **options), lazy_records(lines, **options))


# -- StreamReader on text ---------------------------------------------------------------------


def test_stream_reader_reads_text_gzip_and_stdin(tmp_path, monkeypatch):
    plain = tmp_path / "m.csv"
    plain.write_text(METER)
    packed = tmp_path / "m.csv.gz"
    with gzip.open(packed, "wt") as handle:
        handle.write(METER)
    for path in (plain, packed):
        with StreamReader(path, time_column="time", key_column="meter", missing="zero") as reader:
            assert reader.format == "text" and reader.source == str(path)
            assert [r.value for r in reader.records()] == [1.5, 2.0, 0.0, 0.25]
        assert reader.stats.replaced == 1 and reader.stats.unit == "line"
    monkeypatch.setattr("sys.stdin", io.StringIO("1\n2\n"))
    with StreamReader("-") as reader:
        assert list(reader.values()) == [1.0, 2.0] and reader.source == "stdin"
    import sys

    assert not sys.stdin.closed


def test_stream_reader_is_read_once_and_closes_its_file(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("1\n2\n")
    with StreamReader(path) as reader:
        assert [b.values.tolist() for b in reader.batches(1)] == [[1.0], [2.0]]
        with pytest.raises(RuntimeError, match="has been read already"):
            reader.values()
    assert reader._handle.closed


def test_stream_reader_fills_in_given_statistics(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("1\nNA\n")
    stats = ReadStats()
    with StreamReader(path, missing="skip", stats=stats) as reader:
        assert list(reader.values()) == [1.0]
    assert reader.stats is stats and stats.skipped == 1 and stats.first_missing == 2


def test_stream_reader_checks_its_arguments_before_opening(tmp_path):
    with pytest.raises(ValueError, match="missing must be one of"):
        StreamReader(tmp_path / "nope.csv", missing="maybe")
    with pytest.raises(InputError, match="does not exist"):
        StreamReader(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="size must be"):
        path = tmp_path / "s.csv"
        path.write_text("1\n")
        StreamReader(path).batches(-1)


@pytest.mark.parametrize("how", ["batches", "records"])
def test_reading_takes_constant_memory(tmp_path, how):
    """The peak memory of a read does not grow with the length of the stream."""
    import tracemalloc

    def peak(lines: int) -> int:
        path = tmp_path / f"s{lines}.csv"
        path.write_text("t,v,k\n" + "2024-01-01,1.5,abc\n" * lines)
        with StreamReader(path, time_column="t", key_column="k") as reader:
            tracemalloc.start()
            for _ in reader.batches(1000) if how == "batches" else reader.records():
                pass
            used = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return used

    assert peak(80_000) < 1.5 * peak(10_000)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_read_from_its_first_byte(tmp_path):
    """Looking for Parquet's magic bytes must not eat the start of a pipe (``<(zcat ...)``)."""
    import os
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)

    def feed():
        with open(pipe, "w") as handle:
            handle.write("value\n12\n34\n")

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with StreamReader(pipe) as reader:
            assert list(reader.values()) == [12.0, 34.0]
    finally:
        writer.join(timeout=10)


def test_read_lines_reads_a_slice_as_the_whole_file_reads_it():
    """read_lines (for readers that split a file among workers) gives the values, keys, line numbers and
    errors of iter_batches on the whole file, for any slice, and leaves the blank lines ending a slice."""
    import io as _io

    from dpstream.io import InputError, iter_batches, read_lines

    text = "meter,kwh\na,1\n\"b\",2.5\n,3\nc,4\n"
    whole = next(iter_batches(_io.StringIO(text), 100, key_column="meter"))
    lines = text.splitlines()
    for cut in range(1, len(lines)):
        head, _ = read_lines(lines[1:cut], 2, lines[0], key_column="meter")
        tail, _ = read_lines(lines[cut:], cut + 1, lines[0], key_column="meter")
        assert head.values.tolist() + tail.values.tolist() == whole.values.tolist()
        assert head.keys + tail.keys == whole.keys == ["a", "b", "", "c"]
        assert head.lines.tolist() + tail.lines.tolist() == whole.lines.tolist()
    batch, read = read_lines(["a,1", "", " "], 2, "meter,kwh", key_column="meter")
    assert read == 1 and batch.values.tolist() == [1.0]
    try:
        read_lines(["a,1", "b,1_0"], 7, "meter,kwh", source="s.csv", key_column="meter")
    except InputError as error:
        assert str(error).startswith("s.csv line 8, column 'kwh', is not a number: '1_0'")
    else:
        raise AssertionError("1_0 was read")
