"""The text reader's rules (``dpstream.io`` module docstring): number grammar, header, field
counts, blank lines, missing values and the wording of errors.

Every rule is checked through the lazy reader and through the chunked reader (small chunks, so
that chunk edges fall everywhere, and one large chunk, so that the one-scan path is taken).
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.io import InputError, ReadStats, iter_batches, iter_values, read_values
from dpstream.io.records import _NUMBER, _plain


def lazy(text, **options):
    return list(iter_values(io.StringIO(text), source="s.csv", **options))


def in_pairs(text, **options):
    return [v for batch in iter_batches(io.StringIO(text), 2, source="s.csv", **options) for v in batch.values.tolist()]


def in_one_chunk(text, **options):
    batches = iter_batches(io.StringIO(text), 65536, source="s.csv", **options)
    return [v for batch in batches for v in batch.values.tolist()]


READERS = pytest.mark.parametrize("read", [lazy, in_pairs, in_one_chunk])


# -- numbers ----------------------------------------------------------------------------------


@READERS
@pytest.mark.parametrize(
    "text, expected",
    [("0", 0.0), ("-0", 0.0), ("+2", 2.0), ("2.", 2.0), (".5", 0.5), ("-.5", -0.5), ("1e3", 1000.0),
     ("1E-3", 0.001), ("2.5e+2", 250.0), (" 7 ", 7.0), ('"8"', 8.0), ("'9.5'", 9.5), ("1.e2", 100.0)],
)
def test_decimal_numbers_are_read(read, text, expected):
    assert read(f"value\n{text}\n1\n") == [expected, 1.0]


@READERS
@pytest.mark.parametrize(
    "bad",
    ["1_0", "1_000.5", "1e1_0", "0x1A", "0b11", "inf", "-inf", "+Infinity", "INF", "1.5e", "e5", "1e", ".", "-",
     "+-1", "1.2.3", "1 2", "\u0661\u0662", "\uff11", "12abc", "1d5", "0o7", "1j"],
)
def test_other_spellings_are_not_numbers(read, bad):
    """Python's float accepts 1_0, inf and non-ASCII digits; a stream value is a plain decimal."""
    with pytest.raises(InputError) as info:
        read(f"value\n1\n{bad}\n2\n")
    message = str(info.value)
    assert "s.csv line 3" in message and repr(bad) in message
    assert "is not a number" in message and "decimal number" in message


def _float_shortcut(text):
    try:
        value = float(text)
    except ValueError:
        return False
    return _plain(text) and value - value == 0.0


def _grammar(text):
    stripped = text.strip(" \t\r\n\x0b\x0c")
    return bool(_NUMBER.fullmatch(stripped)) and np.isfinite(float(stripped))


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789.eE+-_ \t\r\n\x0b\x0cinfatyxIN\u0663\u00a0\x1c,", max_size=10))
def test_the_float_shortcut_accepts_exactly_the_decimal_grammar(text):
    """The chunked reader trusts a finite float() of ASCII text without underscores."""
    assert _float_shortcut(text) == _grammar(text)


@pytest.mark.parametrize("text", ["1", " -2.5e3\n", ".5", "5.", "1_0", "\u0663", "inf", "nan", "1e999", "0x1", "\x1c1",
                                  "1\x1c", "\u00a01", "1 2", "e1"])
def test_the_float_shortcut_on_named_cases(text):
    assert _float_shortcut(text) == _grammar(text)


@READERS
def test_underscore_is_not_read_as_a_number(read):
    """Regression: 1_0 used to be read as 10."""
    with pytest.raises(InputError, match=r"line 2 is not a number: '1_0'"):
        read("value\n1_0\n")


@READERS
def test_infinity_is_named_as_such(read):
    with pytest.raises(InputError, match="infinities are not stream values"):
        read("value\n-inf\n")


@READERS
def test_numbers_beyond_a_float_are_errors(read):
    with pytest.raises(InputError, match=r"line 3 is out of range: '1e999' is beyond the largest float"):
        read("value\n1\n1e999\n")
    with pytest.raises(InputError, match=r"line 2, column 'v', is out of range: '-2e400'"):
        read("t,v\n1,-2e400\n", column="v")


# -- header -----------------------------------------------------------------------------------


@READERS
@pytest.mark.parametrize("token", ["NA", "na", "NaN", "nan", "NAN", "null", "NULL", "Null"])
def test_a_missing_token_on_line_1_is_data_not_a_header(read, token):
    """Regression: a first line NA was silently taken as a header."""
    with pytest.raises(InputError, match=rf"s.csv line 1 is a missing value '{token}'"):
        read(f"{token}\n1\n2\n")
    assert read(f"{token}\n1\n2\n", missing="zero") == [0.0, 1.0, 2.0]


@READERS
@pytest.mark.parametrize(
    "header, column", [("value", None), ("_t", None), ("v2", None), ("Wert", None), ("débit", None),
                       ("time,value", "value"), ('"a", \'b\'', "b"), ("x\ty", "y")]
)
def test_a_line_1_of_names_is_a_header(read, header, column):
    separator = "\t" if "\t" in header else ","
    row = separator.join(["3"] * (header.count(separator) + 1))
    assert read(f"{header}\n{row}\n", column=column) == [3.0]


@READERS
@pytest.mark.parametrize("line1", ["12a", "%value", "-x", "inf"])
def test_a_line_1_that_is_not_all_names_is_data(read, line1):
    with pytest.raises(InputError, match=rf"s.csv line 1 is not a number: '{line1}'"):
        read(f"{line1}\n3\n")
    assert read("1\n3\n") == [1.0, 3.0]


def test_a_column_without_a_header_says_why_line_1_is_data():
    with pytest.raises(InputError, match=r"no header line, so column 'b' cannot be found \(line 1 is not a header: "
                                         r"field 2, 'NA', is a missing value\)"):
        lazy("a,NA\n1,2\n", column="b")
    with pytest.raises(InputError, match=r"line 1 has 2 fields and no header.*field 1, '1', is a number"):
        lazy("1,b\n1,2\n")


@READERS
def test_duplicate_column_names_are_an_error(read):
    """Regression: a header value,value was accepted."""
    with pytest.raises(InputError, match=r"s.csv line 1 has two columns named 'value' \(columns 2 and 3\)"):
        read("t,value,value\n1,2,3\n", column="value")
    with pytest.raises(InputError, match="two columns named 'x'"):
        read("x,y,x\n1,2,3\n", column="y")  # even when the duplicate is not the column read


# -- fields per line --------------------------------------------------------------------------


@READERS
@pytest.mark.parametrize(
    "text, message",
    [("a,b\n1,2\n3,4,5\n", "line 3 has 3 fields, but the header (line 1) has 2"),  # over-long
     ("a,b,c\n1,2,3\n4,5\n", "line 3 has 2 fields, but the header (line 1) has 3"),  # short
     ("a,b\n1,2\n3,4\n5,6,\n", "line 4 has 3 fields, but the header (line 1) has 2"),  # trailing separator
     ("a\tb\n1\t2\n3\n", "line 3 has 1 field, but the header (line 1) has 2"),
     ("1\n2\n3,4\n", "line 3 has 2 fields, but line 1 has 1")],
)
def test_rows_with_another_number_of_fields_are_errors(read, text, message):
    """Regression: over-long and short rows were accepted as long as the column was there."""
    with pytest.raises(InputError, match=re.escape(message)):
        read(text, column="a" if text.startswith("a") else None)


# -- blank lines and missing values ------------------------------------------------------------


@READERS
def test_a_blank_line_is_a_missing_value_in_one_column(read):
    """Regression: blank lines were skipped, moving every later value one position up."""
    text = "value\n1\n\n2\n"
    with pytest.raises(InputError, match=r"s.csv line 3 is blank \(an empty field, NA, NaN or null\)"):
        read(text)
    assert read(text, missing="zero") == [1.0, 0.0, 2.0]
    assert read(text, missing="skip") == [1.0, 2.0]
    assert read("\n1\n", missing="zero") == [0.0, 1.0]  # a blank line 1 is data too
    assert read("  \n1\n\t\n2\n", missing="zero") == [0.0, 1.0, 0.0, 2.0]


@READERS
@pytest.mark.parametrize("missing", ["error", "zero", "skip"])
def test_a_blank_line_among_several_columns_is_an_error(read, missing):
    with pytest.raises(InputError, match=r"line 3 is blank, but the header \(line 1\) has 2"):
        read("a,b\n1,2\n\n3,4\n", column="b", missing=missing)


@READERS
@pytest.mark.parametrize("missing", ["error", "zero", "skip"])
def test_blank_lines_at_the_end_hold_no_row(read, missing):
    assert read("value\n1\n2\n\n\n  \n", missing=missing) == [1.0, 2.0]
    assert read("\n\n\n", missing=missing) == []
    assert read("a,b\n1,2\n\n", column="b", missing=missing) == [2.0]


@READERS
def test_missing_values_under_each_policy(read):
    text = "t,v\n1,4\n2,\n3,NA\n4,nan\n5,Null\n6,5\n"
    with pytest.raises(InputError, match=r"line 3, column 'v', is empty"):
        read(text, column="v")
    stats = ReadStats()
    assert read(text, column="v", missing="zero", stats=stats) == [4.0, 0.0, 0.0, 0.0, 0.0, 5.0]
    assert (stats.values, stats.missing, stats.replaced, stats.skipped, stats.first_missing) == (6, 4, 4, 0, 3)
    stats = ReadStats()
    assert read(text, column="v", missing="skip", stats=stats) == [4.0, 5.0]
    assert (stats.values, stats.missing, stats.replaced, stats.skipped, stats.rows) == (2, 4, 0, 4, 6)


@READERS
def test_a_missing_value_error_names_the_token(read):
    with pytest.raises(InputError, match=r"line 3, column 'v', is a missing value 'NaN'.*policy is zero or skip"):
        read("t,v\n1,4\n2,NaN\n", column="v")


@READERS
def test_missing_tokens_are_whole_fields(read):
    for text in ("NAN1", "NA NA", "nulll", "N/A", "None", "-nan"):
        with pytest.raises(InputError, match="is not a number"):
            read(f"value\n{text}\n", missing="zero")


def test_missing_policy_is_checked_before_reading():
    with pytest.raises(ValueError, match="missing must be one of error, zero, skip; got 'drop'"):
        iter_values(["1"], missing="drop")
    with pytest.raises(ValueError, match="missing must be one of"):
        read_values("does-not-matter.csv", missing="Zero")


# -- the wording of errors -------------------------------------------------------------------


@READERS
def test_a_huge_bad_field_is_quoted_short(read):
    """Regression: a 5 MB junk line was echoed in full in the one-line error."""
    junk = "x" * 5_000_000
    with pytest.raises(InputError) as info:
        read(f"value\n1\n{junk}\n")
    message = str(info.value)
    assert len(message) < 400 and "\n" not in message
    assert f"{'x' * 80!r}... (5,000,000 characters)" in message


@READERS
def test_a_huge_header_name_is_quoted_short(read):
    name = "n" * 100_000
    with pytest.raises(InputError) as info:
        read(f"time,{name}\n1,2\n", column="value")
    assert len(str(info.value)) < 400 and "(100,000 characters)" in str(info.value)


@READERS
def test_line_numbers_count_from_1_and_include_header_and_blank_lines(read):
    with pytest.raises(InputError, match=r"^s\.csv line 6 is not a number: 'x'"):
        read("value\n1\n\n2\n\n" + "x\n", missing="skip")
    with pytest.raises(InputError, match=r"^s\.csv line 1 is not a number: '1x'"):
        read("1x\n")
    with pytest.raises(InputError, match=r"^s\.csv line 2 is not a number"):
        read("1\n1x\n")


def test_errors_are_one_line_value_errors():
    for text, options in [("value\n1_0\n", {}), ("a,a\n1,2\n", {"column": "a"}), ("a,b\n1\n", {"column": "a"}),
                          ("v\n\n1\n", {}), ("v\nNA\n", {})]:
        with pytest.raises(ValueError) as info:
            lazy(text, **options)
        assert isinstance(info.value, InputError)
        assert "\n" not in str(info.value) and str(info.value).startswith("s.csv")


def test_old_reader_findings_end_to_end(tmp_path):
    """The findings of the bad-input trials, through ``read_values`` on files."""
    cases = {
        "underscore.csv": "value\n1_0\n",
        "na-first.csv": "NA\n1\n",
        "duplicate.csv": "value,value\n1,2\n",
        "long-row.csv": "a,b\n1,2\n3,4,5\n",
        "blank.csv": "value\n1\n\n2\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(InputError, match=str(path)):
            read_values(path, column="a" if text.startswith("a") else "value" if "," in text else None)


def test_read_values_reports_statistics(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("value\n1\nNA\n\n2\n")
    stats = ReadStats()
    np.testing.assert_array_equal(read_values(path, missing="zero", stats=stats), [1.0, 0.0, 0.0, 2.0])
    assert stats.summary() == "4 values read; 2 missing values read as 0, the first on line 3."
    stats = ReadStats()
    read_values(path, missing="skip", stats=stats)
    assert stats.summary() == ("2 values read; 2 rows with a missing value skipped, the first on line 3 (later "
                               "values moved up: positions no longer follow lines).")
    assert ReadStats(values=1).summary() == "1 value read; no missing values."


@pytest.mark.parametrize("text, culprit", [("1_0,2\n3,4\n", "1_0"), ("1,2\ninf,4\n", "inf"), ("NA,b\n1,2\n", "NA"),
                                           ("1,2\n3,0x1\n", "0x1")])
def test_matrices_follow_the_same_number_grammar_and_header_rule(tmp_path, text, culprit):
    from dpstream.io import read_matrix

    path = tmp_path / "m.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=f"{culprit!r} is not a number"):
        read_matrix(str(path), "counts")
    path.write_text("a,_b\n1,2.5e0\n")
    np.testing.assert_array_equal(read_matrix(str(path), "counts"), [[1.0, 2.5]])
