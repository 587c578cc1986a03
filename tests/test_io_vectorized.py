"""The array-speed text paths (``dpstream.io.vectorized``) against the exact ones they stand in for: ``repr`` and the
csv module when writing, ``float`` and the line-by-line rules of ``dpstream.io`` when reading."""

from __future__ import annotations

import csv
import io
import math
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.io import InputError, ReadStats, iter_batches
from dpstream.io.vectorized import _strings, csv_rows, parse_numbers, repr_strings, value_lines

EDGES = [0.0, -0.0, 1.0, -1.0, 100.0, 0.1, 1 / 3, 1e-4, -1e-4, np.nextafter(1e-4, 0), np.nextafter(1e-4, 1),
         1e10, np.nextafter(1e10, 0), 9999999999.5, 1e15, 1e16, np.nextafter(1e16, 0), 2.0**53, 1e22, 1e-5, 1.5e-7,
         5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308, 123456789.0,
         np.inf, -np.inf, np.nan]


def _random_floats(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**64, count, dtype=np.uint64).view(np.float64)  # every exponent and sign
    return np.concatenate([bits, rng.normal(500, 300, count), np.round(rng.normal(0, 1e6, count)),
                           10.0 ** rng.uniform(-12, 20, count) * rng.choice([-1, 1], count),
                           np.round(rng.uniform(0, 10, count), 3), np.array(EDGES)])


def test_floats_are_written_as_repr_writes_them():
    values = _random_floats(100_000, 0)
    assert repr_strings(values).to_pylist() == list(map(repr, values.tolist()))
    finite = values[np.isfinite(values)]
    assert value_lines(finite) == "".join(f"{value!r}\n" for value in finite.tolist())
    assert value_lines(np.empty(0)) == ""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=50))
def test_any_floats_are_written_as_repr_writes_them(values):
    assert value_lines(np.array(values)) == "".join(f"{value!r}\n" for value in values)


_TEXT = st.text(alphabet=st.sampled_from(list('ab 1,"\'\r\n\t;é\x00\u2028')), max_size=6)


def _csv_module(columns) -> str:
    sink = io.StringIO()
    lists = [column.tolist() if isinstance(column, np.ndarray) else column for column in columns]
    csv.writer(sink, lineterminator="\n").writerows(zip(*lists))
    return sink.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.integers(-2**62, 2**62), _TEXT, st.floats(allow_nan=False, allow_infinity=False)),
                min_size=1, max_size=20))
def test_rows_are_written_as_the_csv_module_writes_them(rows):
    keys, positions, times, values = map(list, zip(*rows))
    columns = [keys, np.array(positions, dtype=np.int64), times, np.array(values)]
    assert csv_rows(columns) == _csv_module(columns)
    assert csv_rows([times, np.array(values)]) == _csv_module([times, np.array(values)])


def test_plain_rows_are_written_as_the_csv_module_writes_them():
    rng = np.random.default_rng(1)
    keys = [f"meter-{k}" for k in rng.integers(0, 1000, 10_000).tolist()]
    times = [f"2026-01-{d:02d} 00:{m:02d}" for d, m in zip(rng.integers(1, 31, 10_000), rng.integers(0, 60, 10_000))]
    columns = [keys, rng.integers(0, 10**6, 10_000), times, _random_floats(2_000, 2)[:10_000]]
    columns[3] = columns[3][np.isfinite(columns[3])]
    columns = [column[: len(columns[3])] for column in columns]
    assert csv_rows(columns) == _csv_module(columns)
    assert csv_rows([[], np.empty(0)]) == ""
    assert csv_rows([["", "a", ""]]) == _csv_module([["", "a", ""]]) == '""\na\n""\n'


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _strings_to_parse() -> list[str]:
    rng = random.Random(3)
    alphabet = "0123456789.+-eE"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))) for _ in range(20_000)]
    values = _random_floats(2_000, 4)
    texts += [repr(v) for v in values.tolist()] + [f"{v:.25e}" for v in values[np.isfinite(values)].tolist()]
    return texts + ["1e-400", "1e400", "-1e309", "+5", ".5", "5.", "-.5e-3", "0" * 40 + "1.5", "1" * 400, "4.9e-324",
                    "2.4703282292062328e-324", "1_0", " 1", "1 ", "inf", "nan", "0x10", "１"]


def test_numbers_are_read_as_float_reads_them():
    """A field is taken iff it is a decimal number whose float is finite, and then as float reads it, bit for bit."""
    for text in _strings_to_parse():
        parsed = parse_numbers(_strings([text]), missing=False)
        expected = float(text) if _NUMBER.fullmatch(text) else None
        if expected is None or not math.isfinite(expected):
            assert parsed is None, text
        else:
            assert parsed is not None, text
            assert parsed[0][0] == expected and math.copysign(1, parsed[0][0]) == math.copysign(1, expected), text


def test_missing_tokens_are_read_only_when_the_policy_allows():
    values, mask = parse_numbers(_strings(["1", "NA", "nan", "NULL", "", "2"]), missing=True)
    assert values.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 2.0] and mask.tolist() == [False, True, True, True, True, False]
    assert parse_numbers(_strings(["1", "NA"]), missing=False) is None
    assert parse_numbers(_strings(["1", "N/A"]), missing=True) is None


# -- whole files: the block path (an open file) against the line path (a list of lines) -----------------------------


def _read(source, size, **options):
    """Everything a reader gives: the batches' sizes, their concatenation and the statistics, or the error's message."""
    stats = ReadStats()
    try:
        batches = list(iter_batches(source, size, source="s.csv", stats=stats, **options))
    except InputError as error:
        return str(error)
    values = np.concatenate([b.values for b in batches]) if batches else np.empty(0)
    return ([len(b) for b in batches], values.tobytes(), [line for b in batches for line in b.lines.tolist()],
            [t for b in batches for t in (b.times or [])], [k for b in batches for k in (b.keys or [])], stats)


def _check_same(text, size, **options):
    by_lines = _read(text.splitlines(keepends=True), size, **options)
    by_blocks = _read(io.StringIO(text, newline=None), size, **options)
    assert by_blocks == by_lines, text


_FIELD = st.sampled_from(["1", "2.5", "-0", "1e3", ".5", "NA", "nan", "", " 3 ", '"4"', "x", "1e999", "inf", "1_0",
                          "٣", "2.", "+7"])
_NAME = st.sampled_from(["a", "b", "c", "meter 1", " d", '"e"', "é", ""])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.tuples(_FIELD), st.tuples(_FIELD, _NAME, _NAME), st.just(("",)), st.just(("", "")),
                          st.tuples(_FIELD, _NAME)), min_size=0, max_size=30),
       st.sampled_from([1, 2, 3, 7, 65536]), st.sampled_from(["error", "zero", "skip"]),
       st.booleans(), st.booleans())
def test_files_are_read_by_blocks_as_by_lines(rows, size, missing, header, last_line_end):
    """Batches, values, line numbers, times, keys, statistics and errors are those of the line-by-line rules,
    whatever the lines hold and wherever the chunks end (a chunk of plain lines is read at once, any other line by
    line)."""
    width = max((len(row) for row in rows), default=1)
    lines = [",".join(row) for row in rows]
    if width == 3 and header:
        text = "\n".join(["v,t,k", *lines])
        options = {"column": "v", "time_column": "t", "key_column": "k"}
    else:
        text = "\n".join((["value"] if header and width == 1 else []) + lines)
        options = {}
    text += "\n" if last_line_end and text else ""
    _check_same(text, size, missing=missing, **options)


@pytest.mark.parametrize("size", [5, 1000, 65536])
def test_a_long_plain_file_is_read_by_blocks_as_by_lines(size):
    """Many chunks, a missing value and a bad line far in: the same batches, values and errors."""
    rng = np.random.default_rng(5)
    values = np.round(rng.uniform(0, 100, 30_000), 2).tolist()
    rows = [f"2026-01-01T{i % 24:02d}:00,m{i % 7},{v!r}" for i, v in enumerate(values)]
    rows[12_345] = rows[12_345].rsplit(",", 1)[0] + ",NA"
    text = "time,meter,kWh\n" + "\n".join(rows) + "\n"
    for missing in ("error", "zero", "skip"):
        _check_same(text, size, time_column="time", key_column="meter", missing=missing)
    bad = text.replace(",m3,", ",m3,x", 1)
    _check_same(bad, size, time_column="time", key_column="meter", missing="skip")
    one_column = "\n".join(map(repr, values)) + "\n"
    _check_same(one_column, size)
    _check_same(one_column.replace("\n", "\n\n", 1), size, missing="zero")
