"""Reading value streams: CSV or plain text, optionally gzipped, or stdin.

A stream file holds one value per line.  The first line may be a header; with several
comma- (or tab-) separated columns, ``column`` names the one to read.  Reading is lazy, so a
stream of any length is read in constant memory.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

__all__ = ["InputError", "open_input", "iter_values", "read_values", "iter_chunks", "read_matrix"]


class InputError(ValueError):
    """A stream file that cannot be read as numbers; the message names the line and the text."""


def open_input(path: str | os.PathLike[str]) -> TextIO:
    """Open ``path`` for reading text: ``-`` is stdin, ``*.gz`` is decompressed."""
    if str(path) == "-":
        return sys.stdin
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file {str(path)!r} does not exist.")
    if path.is_dir():
        raise InputError(f"input {str(path)!r} is a directory, not a file.")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")  # -sig: drop a byte-order mark


def _split(line: str) -> list[str]:
    if "," in line:
        fields = line.split(",")
    elif "\t" in line:
        fields = line.split("\t")
    else:
        fields = [line]
    return [field.strip().strip('"').strip("'").strip() for field in fields]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


#: A header field is a name: it starts with a letter or an underscore.
_NAME = re.compile(r"^[A-Za-z_]")


def iter_values(lines: TextIO, column: str | None = None, source: str = "input") -> Iterator[float]:
    """Yield the stream's values one at a time, as soon as each line arrives.

    Raises
    ------
    InputError
        For a missing or ambiguous column, a first line that is neither numbers nor a header,
        a field that is not a number (naming the line), or text that is not UTF-8.
    """
    try:
        yield from _parse(lines, column, source)
    except UnicodeDecodeError as error:
        raise InputError(f"{source} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise InputError(f"{source} is not a valid gzip file ({error}).") from None


def _parse(lines: TextIO, column: str | None, source: str) -> Iterator[float]:
    line_number = 0
    for line_number, line in enumerate(lines, start=1):  # noqa: B007
        if line.strip():
            break
    else:
        return
    fields = _split(line)
    if all(_is_number(field) for field in fields):  # no header
        if column is not None:
            raise InputError(f"{source} has no header line, so column {column!r} cannot be found.")
        if len(fields) > 1:
            raise InputError(
                f"{source} line {line_number} has {len(fields)} fields and no header; "
                "give one value per line, or a header and a column name."
            )
        index = 0
        yield float(fields[0])
    elif not all(_NAME.match(field) for field in fields):
        raise InputError(
            f"{source} line {line_number} is neither a number nor a header of column names: "
            f"{line.strip()[:60]!r}."
        )
    elif column is None:
        if len(fields) > 1:
            raise InputError(
                f"{source} has columns {', '.join(fields)}; choose one with a column name (--column)."
            )
        index = 0
    else:
        if column not in fields:
            raise InputError(f"{source} has no column {column!r}; its columns are {', '.join(fields)}.")
        index = fields.index(column)
    single = len(fields) == 1
    first_data_line = line_number + 1
    for line_number, line in enumerate(lines, start=first_data_line):  # noqa: B020 (continues the count)
        if not line.strip():
            continue
        if single:
            text = line.strip()
        else:
            parts = _split(line)
            if index >= len(parts):
                raise InputError(f"{source} line {line_number} has no field {index + 1}: {line.strip()!r}.")
            text = parts[index]
        try:
            yield float(text)
        except ValueError:
            raise InputError(f"{source} line {line_number} is not a number: {text!r}.") from None


def iter_chunks(values: Iterator[float], size: int) -> Iterator[np.ndarray]:
    """Group an iterator of values into float64 arrays of at most ``size`` values."""
    buffer: list[float] = []
    for value in values:
        buffer.append(value)
        if len(buffer) == size:
            yield np.array(buffer, dtype=np.float64)
            buffer = []
    if buffer:
        yield np.array(buffer, dtype=np.float64)


def read_values(path: str | os.PathLike[str], column: str | None = None) -> np.ndarray:
    """Read a whole stream file into a float64 array.

    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> _ = tmp.write_text("time,value\\n1,4\\n2,3.5\\n")
    >>> read_values(tmp, column="value").tolist()
    [4.0, 3.5]
    """
    stream = open_input(path)
    try:
        return np.fromiter(iter_values(stream, column, source=str(path)), dtype=np.float64)
    finally:
        if stream is not sys.stdin:
            stream.close()


def read_matrix(path: str, what: str) -> np.ndarray:
    """A CSV of numbers (optional header row, no index column) as a 2-D float array.

    The first non-blank line is a header only if every field is a name (starts with a letter
    or an underscore, as in :func:`iter_values`); a numeric header such as ``0,1,2`` cannot
    be told apart from data and is read as data.  Errors name the file, the line and the
    offending text.  ``-`` reads stdin and leaves it open.
    """
    rows: list[list[float]] = []
    handle = open_input(path)
    try:
        header_allowed = True
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            fields = _split(line.strip())
            if not all(_is_number(field) for field in fields):
                if header_allowed and all(_NAME.match(field) for field in fields):
                    header_allowed = False
                    continue
                wrong = [field for field in fields if not _is_number(field)]
                # On the first line, a field that is neither a number nor a name is the culprit.
                bad = next((field for field in wrong if not (header_allowed and _NAME.match(field))), wrong[0])
                hint = " (a header line must hold only names)" if header_allowed else ""
                raise InputError(f"{what} {path!r} line {number}: {bad!r} is not a number{hint}.")
            header_allowed = False
            values = [float(field) for field in fields]
            if rows and len(values) != len(rows[0]):
                raise InputError(
                    f"{what} {path!r} line {number} has {len(values)} columns, the first row has {len(rows[0])}."
                )
            if not all(np.isfinite(values)):
                raise InputError(f"{what} {path!r} line {number} holds a non-finite number: {line.strip()!r}.")
            rows.append(values)
    finally:
        if handle is not sys.stdin:
            handle.close()
    if not rows:
        raise InputError(f"{what} {path!r} holds no numbers.")
    return np.array(rows)
