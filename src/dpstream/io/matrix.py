"""Reading matrices: CSV files of numbers with an optional header row and no index column,
such as the T x m noisy count matrices and the m x m transition matrices of ``dpstream
postprocess``.  Numbers follow the stream's decimal grammar (:mod:`dpstream.io`)."""

from __future__ import annotations

import sys

import numpy as np

from dpstream.io.records import _NUMBER, InputError, _not_a_name, _quote, _separator, _split
from dpstream.io.text import open_input

__all__ = ["read_matrix", "read_matrix_with_header"]


def read_matrix(path: str, what: str) -> np.ndarray:
    """A CSV of numbers (optional header row, no index column) as a 2-D float array.

    The rules are those of :func:`read_matrix_with_header`, which also returns the header's names.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "transition.csv"
    >>> _ = path.write_text("home,work\\n0.9,0.1\\n0.5,0.5\\n")
    >>> read_matrix(str(path), "transition matrix").tolist()
    [[0.9, 0.1], [0.5, 0.5]]
    """
    return read_matrix_with_header(path, what)[0]


def read_matrix_with_header(path: str, what: str) -> tuple[np.ndarray, list[str] | None]:
    """A CSV of numbers (optional header row, no index column) as a 2-D float array, and the
    names of its header row (None without one).

    The first non-blank line is a header only if every field is a name (as in a stream's
    header: it starts with a letter or an underscore and is neither a missing-value token nor a
    number); a numeric header such as ``0,1,2`` cannot be told apart from data and is read as
    data.  Fields are separated as in a stream (a comma, else a tab, else one column per line).
    Numbers follow the stream's decimal grammar and must be finite.  Errors name ``what``, the
    file, the line and the offending text.  ``-`` reads stdin and leaves it open.

    The names are the header's fields, each trimmed of blanks, then of the double quotes and
    then of the single quotes at its ends, then of blanks again (``"home"``, ``'home'`` and
    ``home'`` all give ``home``); when every name so trimmed reads as a number (``inf'``), the
    names are None, as without a header.  Their number is not checked against the matrix's
    columns: the caller decides what a header of another width means.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "counts.csv"
    >>> _ = path.write_text("home,'work'\\n3,1\\n2,2\\n")
    >>> counts, names = read_matrix_with_header(str(path), "noisy counts")
    >>> counts.shape, names
    ((2, 2), ['home', 'work'])
    """
    rows: list[list[float]] = []
    names: list[str] | None = None
    handle = open_input(path)
    try:
        header_allowed = True
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            separator = _separator(line.strip())
            fields = _split(line.strip(), separator)
            if not all(_NUMBER.fullmatch(field) for field in fields):
                if header_allowed and not any(_not_a_name(field) for field in fields):
                    header_allowed = False
                    names = _header_names(line.strip(), separator)
                    continue
                _not_a_number(fields, header_allowed, f"{what} {path!r} line {number}")
            header_allowed = False
            values = [float(field) for field in fields]
            if rows and len(values) != len(rows[0]):
                raise InputError(
                    f"{what} {path!r} line {number} has {len(values)} columns, the first row has {len(rows[0])}."
                )
            if not all(np.isfinite(values)):
                raise InputError(f"{what} {path!r} line {number} holds a number beyond the largest float.")
            rows.append(values)
    finally:
        if handle is not sys.stdin:
            handle.close()
    if not rows:
        raise InputError(f"{what} {path!r} holds no numbers.")
    return np.array(rows), names


def _not_a_number(fields: list[str], first: bool, where: str) -> None:
    """Raise the error for a line of ``fields`` that are not all numbers (and, if it is the
    ``first`` line, not all names either)."""
    wrong = [field for field in fields if not _NUMBER.fullmatch(field)]
    # On the first line, a field that is neither a number nor a name is the culprit.
    bad = next((field for field in wrong if not first or _not_a_name(field)), wrong[0])
    hint = " (a header line must hold only names)" if first else ""
    raise InputError(f"{where}: {_quote(bad)} is not a number{hint}.")


def _header_names(line: str, separator: str | None) -> list[str] | None:
    """The names of a header row, or None if they all read as numbers (the rule is in
    :func:`read_matrix_with_header`)."""
    fields = [line] if separator is None else line.split(separator)
    names = [field.strip().strip('"').strip("'").strip() for field in fields]
    try:
        np.array(names, dtype=float)
    except ValueError:
        return names
    return None
