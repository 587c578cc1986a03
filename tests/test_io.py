"""Reading value streams (``dpstream.io``): formats, columns, gzip, stdin, and error messages."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from dpstream.io import InputError, iter_chunks, iter_values, open_input, read_values


def write(tmp_path, name, text):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "text, column, expected",
    [
        ("value\n1\n2.5\n-3e2\n", None, [1.0, 2.5, -300.0]),  # header, one column
        ("value\n1\n2.5\n", "value", [1.0, 2.5]),  # header named explicitly
        ("1\n2\n3\n", None, [1.0, 2.0, 3.0]),  # no header
        ("time,value,user\n1,4,a\n2,3.5,b\n", "value", [4.0, 3.5]),  # --column among several
        ("time,value,user\n1,4,a\n2,3.5,b\n", "time", [1.0, 2.0]),
        ("time\tvalue\n1\t4\n2\t5\n", "value", [4.0, 5.0]),  # tab-separated
        (" time , value \n 1 , 4 \n", "value", [4.0]),  # spaces around fields
        ("value\n1\n2\n\n \n", None, [1.0, 2.0]),  # blank lines at the end hold no row
        ("a,b\n1,2\n3,4\n\n", "b", [2.0, 4.0]),  # also with several columns
        ("1\r\n2\r\n", None, [1.0, 2.0]),  # CRLF
        ("value\n", None, []),  # header only
        ("", None, []),  # empty file
        ("\n\n", None, []),
        ("-1e9\n1\n", None, [-1e9, 1.0]),  # parsing only; range checks belong to ToPS
    ],
)
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_read_values(tmp_path, text, column, expected, suffix):
    path = write(tmp_path, "stream" + suffix, text)
    got = read_values(path, column=column)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.float64))


def test_read_values_accepts_str_path(tmp_path):
    path = write(tmp_path, "s.txt", "4\n5\n")
    np.testing.assert_array_equal(read_values(str(path)), [4.0, 5.0])


def test_non_number_names_line_and_text(tmp_path):
    path = write(tmp_path, "s.csv", "value\n1\n\n2\nabc\n3\n")
    with pytest.raises(InputError) as info:
        read_values(path, missing="skip")  # the skipped blank line still counts as line 3
    message = str(info.value)
    assert "line 5" in message and "'abc'" in message and str(path) in message


def test_non_number_in_a_column_names_line_and_text(tmp_path):
    path = write(tmp_path, "s.csv.gz", "t,value\n1,2\n2,x7\n")
    with pytest.raises(InputError) as info:
        read_values(path, column="value")
    assert "line 3" in str(info.value) and "'x7'" in str(info.value)


def test_short_row_names_line(tmp_path):
    path = write(tmp_path, "s.csv", "a,b,c\n1,2,3\n4,5\n")
    with pytest.raises(InputError) as info:
        read_values(path, column="c")
    assert "line 3 has 2 fields" in str(info.value) and "header (line 1) has 3" in str(info.value)


def test_unknown_column_lists_columns(tmp_path):
    path = write(tmp_path, "s.csv", "time,value\n1,2\n")
    with pytest.raises(InputError) as info:
        read_values(path, column="size")
    message = str(info.value)
    assert "'size'" in message and "time" in message and "value" in message


def test_several_columns_need_a_column_name(tmp_path):
    path = write(tmp_path, "s.csv", "time,value\n1,2\n")
    with pytest.raises(InputError) as info:
        read_values(path)
    assert "time" in str(info.value) and "column" in str(info.value)


def test_several_columns_without_header_is_an_error(tmp_path):
    path = write(tmp_path, "s.csv", "1,2\n3,4\n")
    with pytest.raises(InputError) as info:
        read_values(path)
    assert "line 1" in str(info.value) and "2 fields" in str(info.value)
    with pytest.raises(InputError, match="no header line.*'value'"):
        read_values(path, column="value")


def test_input_error_is_a_value_error():
    assert issubclass(InputError, ValueError)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_values(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="directory"):
        read_values(tmp_path)


def test_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("value\n7\n8\n"))
    np.testing.assert_array_equal(read_values("-"), [7.0, 8.0])
    monkeypatch.setattr("sys.stdin", io.StringIO("1\n"))
    assert open_input("-") is __import__("sys").stdin


def test_iter_values_is_lazy():
    """Values come out as lines arrive: the generator never reads past what it yields."""
    consumed = []

    def lines():
        for line in ["value\n", "1\n", "2\n", "oops\n"]:
            consumed.append(line)
            yield line

    values = iter_values(lines())
    assert next(values) == 1.0
    assert next(values) == 2.0
    assert len(consumed) == 3  # the bad line has not been read yet
    with pytest.raises(InputError, match="line 4"):
        next(values)


def test_iter_chunks():
    chunks = list(iter_chunks(iter([1.0, 2.0, 3.0, 4.0, 5.0]), 2))
    assert [c.tolist() for c in chunks] == [[1.0, 2.0], [3.0, 4.0], [5.0]]
    assert all(c.dtype == np.float64 for c in chunks)
    assert list(iter_chunks(iter([]), 3)) == []
    assert [c.tolist() for c in iter_chunks(iter([1.0, 2.0]), 2)] == [[1.0, 2.0]]


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_byte_order_mark_is_ignored(tmp_path, suffix):
    path = write(tmp_path, "bom" + suffix, "\ufeff1\n2\n3\n")
    np.testing.assert_array_equal(read_values(path), [1.0, 2.0, 3.0])
    path = write(tmp_path, "bomh" + suffix, "\ufeffvalue,x\n1,2\n")
    np.testing.assert_array_equal(read_values(path, column="value"), [1.0])


def test_first_line_that_is_neither_numbers_nor_names_is_an_error():
    with pytest.raises(InputError, match=r"line 1 is not a number: '12a' .*line 1 is not a header: '12a' does not"):
        list(iter_values(io.StringIO("12a\n3\n")))


def test_quoted_header_names_are_found():
    assert list(iter_values(io.StringIO('"t","value"\n1,4\n2,5\n'), column="value")) == [4.0, 5.0]


def test_non_utf8_input_is_a_clear_error(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"value\n1\n\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_values(path)
