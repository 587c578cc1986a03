"""The matrix reader (``dpstream.io.read_matrix_with_header``): numbers and the names of the
header row, by the one rule ``dpstream postprocess`` also copies a header by."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from dpstream.io import InputError, read_matrix, read_matrix_with_header


def read(tmp_path, text, name="m.csv"):
    path = tmp_path / name
    path.write_text(text)
    return read_matrix_with_header(str(path), "counts")


@pytest.mark.parametrize("text, names, shape", [
    ("home,work,shop\n1,2,3\n", ["home", "work", "shop"], (1, 3)),
    ("\n  \nhome\twork\n1\t2\n", ["home", "work"], (1, 2)),  # blank lines first; tab-separated
    ("loc\n1\n2\n", ["loc"], (2, 1)),  # one column
    (" \"home\" , 'work' \n1,2\n", ["home", "work"], (1, 2)),  # blanks and enclosing quotes trimmed
    ("_a,b2\n1,2\n", ["_a", "b2"], (1, 2)),
])
def test_a_first_line_of_names_is_the_header(tmp_path, text, names, shape):
    values, header = read(tmp_path, text)
    assert header == names and values.shape == shape


def test_the_values_are_those_read_matrix_gives(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b\n1,2.5\n-3,4e1\n")
    values, names = read_matrix_with_header(str(path), "counts")
    np.testing.assert_array_equal(values, read_matrix(str(path), "counts"))
    np.testing.assert_array_equal(values, [[1.0, 2.5], [-3.0, 40.0]])
    assert names == ["a", "b"]


@pytest.mark.parametrize("text", ["1,2\n3,4\n", "0,1\n3,4\n", "\n1\n"])
def test_without_a_header_the_names_are_none(tmp_path, text):
    """A numeric first line cannot be told from data: it is data, and there are no names."""
    values, names = read(tmp_path, text)
    assert names is None and values.shape[0] == text.strip().count("\n") + 1


def test_the_header_width_is_left_to_the_caller(tmp_path):
    values, names = read(tmp_path, "a,b,c\n1,2\n3,4\n")
    assert values.shape == (2, 2) and names == ["a", "b", "c"]


def test_stray_quotes_at_the_ends_of_a_name_are_trimmed(tmp_path):
    """A header field is a name by the stream's rule (one pair of enclosing quotes removed);
    the names then drop every quote character at their ends, as ``postprocess`` always did."""
    assert read(tmp_path, "home',work\"\n1,2\n")[1] == ["home", "work"]
    # Names that so trimmed read as numbers are no names, though the line is still a header.
    values, names = read(tmp_path, "inf',nan\"\n1,2\n")
    assert names is None and values.tolist() == [[1.0, 2.0]]


def test_gzip_and_stdin_give_the_header_too(tmp_path, monkeypatch):
    path = tmp_path / "m.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("x,y\n1,2\n")
    assert read_matrix_with_header(str(path), "counts")[1] == ["x", "y"]
    monkeypatch.setattr("sys.stdin", io.StringIO("x,y\n1,2\n"))
    values, names = read_matrix_with_header("-", "counts")
    assert names == ["x", "y"] and values.tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("text, message", [
    ("a,1x\n1,2\n", r"line 1: '1x' is not a number \(a header line must hold only names\)"),
    ("a,b\nc,d\n", r"line 2: 'c' is not a number\.$"),
    ("a,b\n", r"holds no numbers"),
])
def test_errors_are_those_of_read_matrix(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        read(tmp_path, text)
