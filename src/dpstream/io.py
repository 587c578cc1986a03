"""Reading value streams: CSV or plain text (optionally gzipped, or stdin) and Parquet.

A stream is read lazily, so a stream of any length is read in constant memory: value by value
(:func:`iter_values`, :func:`iter_records`), or in chunks of arrays (:func:`iter_batches`, the
fast path for files).  :class:`StreamReader` opens a path of either format and offers all three.

Text streams
------------
One row per line.  The fields of a line are separated by a comma if line 1 holds one, else by a
tab if line 1 holds one; otherwise the stream has one column and a line is one field.  Every
line must have as many fields as line 1.  A field is trimmed of surrounding blanks and of one
pair of enclosing quotes (``"`` or ``'``); a quoted field cannot hold the separator.

*Header.*  Line 1 is a header if and only if every field is a *name*: it starts with a letter or
an underscore, is not a missing-value token and is not a number (nor a word that Python's
``float`` reads, such as ``inf``).  Anything else on line 1 is data: ``NA`` or ``12a`` on line 1
is a value (missing, or an error), never a header.  Column names must be unique.  A stream with
several columns needs a header, and ``column`` names the value column (it may be left out when
the time and key columns leave exactly one other column).

*Numbers.*  A value is a decimal number: an optional sign, ASCII digits with an optional
fraction, and an optional exponent (``[+-]?(digits[.digits] | .digits)([eE][+-]?digits)?``,
where the digits after the point may be absent).  Other spellings Python would accept are
rejected: ``1_0``, ``0x1A``, ``inf``, ``infinity``, non-ASCII digits; so is a number beyond the
range of a float (``1e999``), because stream values are finite.  ``nan`` is a missing value.

*Missing values.*  An empty field and the tokens ``NA``, ``NaN`` and ``null``, in any letter
case, are missing.  The ``missing`` policy decides: ``"error"`` (the default) stops at the
first one, naming its line; ``"zero"`` reads it as 0, so positions are kept; ``"skip"`` drops
its row, so every later value moves one position up and positions no longer follow lines.  A
:class:`ReadStats` counts what was replaced or skipped.  Only the value column is checked: time
and key fields are text and may be empty.

*Blank lines.*  A blank line is a row whose one field is empty: in a one-column stream it is a
missing value (an error, a 0 or skipped, by the policy); with several columns it has the wrong
number of fields, an error.  Blank lines at the very end of the input hold no row and are
ignored (with a live stream, a blank line is therefore judged when the next line arrives).

*Numbering.*  Line numbers are 1-based and count every line, header and blank lines included
("line 3"); Parquet rows are 1-based ("row 3").  A stream *position* is the 0-based index of a
value among the values read ("position 2 (0-based)"): the header and skipped rows make the two
differ, and :attr:`Batch.lines` maps each value back to its line.

Time and key columns
--------------------
:func:`iter_records` and :func:`iter_batches` also return the text of a time column and of a key
column, as written (trimmed of blanks and quotes, never parsed), for output beside the values.

Parquet streams
---------------
A file named ``*.parquet`` (or starting with Parquet's magic bytes) is read with pyarrow, one
record batch at a time.  The same column, time, key and missing rules apply: the value column
must be numeric (integer, floating point or decimal); a null or NaN is missing; an infinity is
an error; time and key values are cast to text, a null giving ``""``.  Rows count from 1.

Errors are :class:`InputError` (a ``ValueError``): one line naming the file, the 1-based line or
row, the rule and the offending text (at most 80 characters of it).
"""

from __future__ import annotations

import gzip
import io
import itertools
import math
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, NoReturn, TextIO

import numpy as np

from dpstream._checks import check_choice, check_positive_int

__all__ = [
    "InputError",
    "MISSING_POLICIES",
    "MISSING_TOKENS",
    "ReadStats",
    "Record",
    "Batch",
    "StreamReader",
    "open_input",
    "iter_values",
    "iter_records",
    "iter_batches",
    "iter_chunks",
    "read_values",
    "read_matrix",
]


class InputError(ValueError):
    """A stream file that cannot be read as numbers; the message names the line and the text."""


#: What ``missing=`` may be: stop at a missing value, read it as 0, or drop its row.
MISSING_POLICIES = ("error", "zero", "skip")
#: Missing-value tokens (besides an empty field), matched in any letter case.
MISSING_TOKENS = ("NA", "NaN", "null")
_MISSING = frozenset(token.lower() for token in MISSING_TOKENS) | {""}
_MISSING_WORDS = "an empty field, NA, NaN or null"

#: A decimal number, the only spelling of a value (ASCII digits; see the module docstring).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NUMBER_RULE = "a value is a decimal number: optional sign, digits, optional fraction and exponent"


def _plain(text: str) -> bool:
    """Whether a finite ``float(text)`` proves ``text`` a decimal number (between ASCII blanks).

    Besides ``_NUMBER`` between ASCII blanks, ``float`` accepts only underscores between
    digits, non-ASCII digits and blanks, and inf, infinity and nan: so a finite result from an
    ASCII text without underscores is a decimal number.  One test covers a whole chunk's text;
    where ``float`` fails or gives a non-finite number, the careful path says what is wrong.
    """
    return text.isascii() and "_" not in text


_QUOTES = "\"'"
#: At most this many characters of a bad field are quoted in an error.
QUOTE_LIMIT = 80


def _quote(text: str) -> str:
    """``repr`` of ``text``, cut to :data:`QUOTE_LIMIT` characters (then followed by its length)."""
    if len(text) <= QUOTE_LIMIT:
        return repr(text)
    return f"{text[:QUOTE_LIMIT]!r}... ({len(text):,} characters)"


def _names(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(_quote(name) for name in names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names):,} columns)"


def _clean(field: str) -> str:
    """A field without surrounding blanks and one pair of enclosing quotes."""
    field = field.strip()
    if len(field) >= 2 and field[0] == field[-1] and field[0] in _QUOTES:
        field = field[1:-1].strip()
    return field


def _is_blank(line: str) -> bool:
    return not line or line.isspace()


def _is_missing(text: str) -> bool:
    return len(text) <= 4 and text.lower() in _MISSING


def _not_a_name(field: str) -> str | None:
    """Why ``field`` is not a header name, or None if it is one."""
    if _is_missing(field):
        return "is a missing value"
    if _NUMBER.fullmatch(field):
        return "is a number"
    if not (field[0].isalpha() or field[0] == "_"):
        return "does not start with a letter or an underscore"
    try:
        float(field)
    except ValueError:
        return None
    return "is an infinity (a number to Python's float)"


@dataclass
class ReadStats:
    """What a reader has read so far; the readers fill it in as they go.

    ``values`` counts the values returned, ``missing`` the missing values met, of which
    ``replaced`` were read as 0 and ``skipped`` dropped with their row; ``first_missing`` is the
    1-based line (or row) of the first one.  :attr:`rows` is the number of data rows read.

    >>> stats = ReadStats()
    >>> list(iter_values(["value", "1", "NA", "3"], missing="zero", stats=stats))
    [1.0, 0.0, 3.0]
    >>> stats.summary()
    '3 values read; 1 missing value read as 0, the first on line 3.'
    """

    values: int = 0
    missing: int = 0
    replaced: int = 0
    skipped: int = 0
    first_missing: int | None = None
    #: "line" for text streams, "row" for Parquet.
    unit: str = "line"

    @property
    def rows(self) -> int:
        """Data rows read: lines (or Parquet rows) after the header, not counting blank lines at the end."""
        return self.values + self.skipped

    def summary(self) -> str:
        """One sentence for a log: values read, and what happened to missing values."""
        read = f"{self.values:,} value{'s' * (self.values != 1)} read"
        first = f"the first on {self.unit} {self.first_missing}"
        if self.skipped:
            return (f"{read}; {self.skipped:,} row{'s' * (self.skipped != 1)} with a missing value skipped, {first} "
                    "(later values moved up: positions no longer follow lines).")
        if self.replaced:
            return f"{read}; {self.replaced:,} missing value{'s' * (self.replaced != 1)} read as 0, {first}."
        if self.missing:
            return f"{read}; {self.missing:,} missing value{'s' * (self.missing != 1)}, {first}."
        return f"{read}; no missing values."

    def _met_missing(self, number: int, count: int = 1) -> None:
        if self.first_missing is None:
            self.first_missing = number
        self.missing += count


class Record(NamedTuple):
    """One value with the text of its time and key fields (None without such a column)."""

    value: float
    time: str | None
    key: str | None
    #: 1-based line (text) or row (Parquet) the value was read from.
    line: int


@dataclass(frozen=True)
class Batch:
    """Consecutive values of a stream, read together.

    ``values`` are float64; ``lines`` the 1-based line (or Parquet row) of each value, int64;
    ``times`` and ``keys`` the text of the time and key fields, or None without such a column.
    """

    values: np.ndarray
    lines: np.ndarray
    times: list[str] | None = None
    keys: list[str] | None = None

    def __len__(self) -> int:
        return int(self.values.size)

    def records(self) -> Iterator[Record]:
        """The batch as records, in order."""
        times = self.times if self.times is not None else itertools.repeat(None)
        keys = self.keys if self.keys is not None else itertools.repeat(None)
        return map(Record._make, zip(self.values.tolist(), times, keys, self.lines.tolist()))


def _check_names(column: str | None, time_column: str | None, key_column: str | None) -> None:
    given = {}
    for name, value in (("column", column), ("time_column", time_column), ("key_column", key_column)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a column name (a string) or None, got {value!r}.")
        if value in given:
            raise ValueError(f"{name} and {given[value]} must name different columns, got {value!r} for both.")
        given[value] = name


def _resolve(names: list[str], source: str, column: str | None, time_column: str | None,
             key_column: str | None, header: str = "") -> tuple[int, int | None, int | None]:
    """Indices of the value, time and key columns among ``names`` (a header, at ``header``, or a schema)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise InputError(f"{source}{header} has two columns named {_quote(name)} (columns {seen[name] + 1} and "
                             f"{i + 1}); column names must be unique.")
        seen[name] = i

    def find(name: str, role: str) -> int:
        if name not in names:
            raise InputError(f"{source} has no {role}column {_quote(name)}; its columns are {_names(names)}.")
        return names.index(name)

    time = None if time_column is None else find(time_column, "time ")
    key = None if key_column is None else find(key_column, "key ")
    if column is not None:
        return find(column, ""), time, key
    rest = [i for i in range(len(names)) if i not in (time, key)]
    if len(rest) != 1:
        raise InputError(f"{source} has columns {_names(names)}; choose one with a column name (--column).")
    return rest[0], time, key


#: The missing-value tokens, lower case, as an array for ``np.isin``.
_MISSING_ARRAY = np.array(sorted(_MISSING))
#: Longest value field the vectorized missing-value scan takes (longer ones go line by line).
_TOKEN_SCAN_WIDTH = 64


def _plain_numbers(fields: list[str]) -> np.ndarray | None:
    """``fields`` as float64 if every one is a finite decimal number (blanks around allowed), else None."""
    if not _plain("".join(fields)):
        return None
    try:
        values = np.fromiter(map(float, fields), dtype=np.float64, count=len(fields))
    except ValueError:  # an empty field, or a misplaced sign, point or exponent
        return None
    return values if np.isfinite(values).all() else None


def _texts(fields: list[str] | None) -> list[str] | None:
    """Time or key fields, cleaned as :func:`_clean` does, quickly when no field is quoted."""
    if fields is None:
        return None
    texts = list(map(str.strip, fields))
    joined = "".join(texts)
    return list(map(_clean, texts)) if '"' in joined or "'" in joined else texts


class _TextRows:
    """The rules of the module docstring for text lines, shared by the lazy and chunked readers."""

    def __init__(self, source: str, column: str | None, time_column: str | None, key_column: str | None,
                 missing: str, stats: ReadStats) -> None:
        self.source, self.missing, self.stats = source, missing, stats
        self.wanted = (column, time_column, key_column)
        self.separator: str | None = None
        self.width = 1
        self.value, self.time, self.key = 0, None, None
        self.names: list[str] = []  # the header, if line 1 is one
        self.line1_hint = ""  # why line 1 is not a header, if it is data

    # -- line 1 ---------------------------------------------------------------------------

    def start(self, line: str) -> bool:
        """Read line 1's layout; True if line 1 is data (not a header)."""
        self.separator = "," if "," in line else "\t" if "\t" in line else None
        fields = [_clean(f) for f in line.split(self.separator)] if self.separator else [_clean(line)]
        self.width = len(fields)
        why = next(((i, reason) for i, field in enumerate(fields) if (reason := _not_a_name(field))), None)
        if why is None:
            self.names = fields
            self.value, self.time, self.key = _resolve(fields, self.source, *self.wanted, header=" line 1")
            return False
        index, reason = why
        what = "" if self.width == 1 else f"field {index + 1}, "
        because = f"line 1 is not a header: {what}{_quote(fields[index])}{',' * bool(what)} {reason}"
        asked = next((name for name in self.wanted if name is not None), None)
        if asked is not None:
            raise InputError(f"{self.source} has no header line, so column {_quote(asked)} cannot be found "
                             f"({because}).")
        if self.width > 1:
            raise InputError(f"{self.source} line 1 has {self.width} fields and no header; give one value per "
                             f"line, or a header and a column name ({because}).")
        self.line1_hint = because
        return True

    # -- one line at a time ---------------------------------------------------------------

    def row(self, line: str, number: int) -> tuple[float, str | None, str | None] | None:
        """The value, time and key of one line; None if the missing policy skips it."""
        time = key = None
        if self.separator is None:
            text = line
        else:
            parts = line.split(self.separator)
            if len(parts) != self.width:
                self._wrong_width(len(parts), number, line)
            text = parts[self.value]
            if self.time is not None:
                time = _clean(parts[self.time])
            if self.key is not None:
                key = _clean(parts[self.key])
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value - value == 0.0 and _plain(text)):  # not plainly a finite decimal number
            value = self._careful(_clean(text), number)
            if value is None:
                return None
        self.stats.values += 1
        return value, time, key

    def _careful(self, text: str, number: int) -> float | None:
        """The value of a cleaned field that is not plainly a number: the rules, one by one."""
        if _NUMBER.fullmatch(text):
            value = float(text)
            if not math.isfinite(value):
                raise InputError(f"{self._where(number)} is out of range: {_quote(text)} is beyond the largest "
                                 "float, and stream values are finite.")
            return value
        if _is_missing(text):
            return self._on_missing(text, number)
        self._not_a_number(text, number)

    def _where(self, number: int) -> str:
        column = "" if self.width == 1 else f", column {_quote(self.names[self.value])},"
        return f"{self.source} line {number}{column}"

    def _wrong_width(self, count: int, number: int, line: str) -> NoReturn:
        reference = "the header (line 1)" if self.names else "line 1"
        got = "is blank" if _is_blank(line) else f"has {count} field{'s' * (count != 1)}"
        raise InputError(f"{self.source} line {number} {got}, but {reference} has {self.width}; every line needs "
                         "the same number of fields.")

    def _on_missing(self, text: str, number: int) -> float | None:
        self.stats._met_missing(number)
        if self.missing == "error":
            shown = f"a missing value {_quote(text)}" if text else "blank" if self.width == 1 else "empty"
            raise InputError(f"{self._where(number)} is {shown} ({_MISSING_WORDS}); missing values are errors "
                             "unless the missing policy is zero or skip.")
        if self.missing == "zero":
            self.stats.replaced += 1
            return 0.0
        self.stats.skipped += 1
        return None

    def _not_a_number(self, text: str, number: int) -> NoReturn:
        if self.separator is None:
            for separator in ",\t":
                if separator in text:
                    self._wrong_width(len(text.split(separator)), number, text)
        try:
            special = not math.isfinite(float(text))
        except ValueError:
            special = False
        hint = "; infinities are not stream values" if special else ""
        if number == 1 and self.separator is None and not special:
            hint += f"; {self.line1_hint}"
        raise InputError(f"{self._where(number)} is not a number: {_quote(text)} ({_NUMBER_RULE}{hint}).")

    # -- a chunk of lines -----------------------------------------------------------------

    def block(self, lines: list[str], first: int) -> Batch:
        """The rows of consecutive lines ``first, first + 1, ...``: a few scans of the whole chunk
        when every line is well formed and every value a plain number, else line by line (with
        the same results and the same errors)."""
        fields = self._fields(lines)
        values = None if fields is None else _plain_numbers(fields[0])
        if values is None:
            if fields is not None and self.missing != "error":
                batch = self._with_missing(fields, first)
                if batch is not None:
                    return batch
            return self._slow(lines, first)
        count = len(lines)
        self.stats.values += count
        return Batch(values, np.arange(first, first + count, dtype=np.int64), *map(_texts, fields[1:]))

    def _with_missing(self, fields: tuple[list[str], list[str] | None, list[str] | None], first: int) -> Batch | None:
        """The fast path of a chunk whose values are plain numbers and missing-value tokens (unquoted), under
        the policy zero or skip; None if any value is something else (the slow path then says what)."""
        texts = fields[0]
        if max(map(len, texts)) > _TOKEN_SCAN_WIDTH:  # no wide fixed-width array for a long field
            return None
        missing = np.isin(np.char.lower(np.char.strip(np.array(texts))), _MISSING_ARRAY)
        rest = np.array(texts, dtype=object)[~missing].tolist()
        numbers = _plain_numbers(rest) if rest else np.empty(0)
        if numbers is None:
            return None
        count = int(missing.sum())
        lines = np.arange(first, first + len(texts), dtype=np.int64)
        times, keys = map(_texts, fields[1:])
        self.stats._met_missing(first + int(np.argmax(missing)), count)
        if self.missing == "zero":
            values = np.zeros(len(texts))
            values[~missing] = numbers
            self.stats.replaced += count
        else:
            keep = ~missing
            values, lines = numbers, lines[keep]
            times = None if times is None else list(itertools.compress(times, keep.tolist()))
            keys = None if keys is None else list(itertools.compress(keys, keep.tolist()))
            self.stats.skipped += count
        self.stats.values += values.size
        return Batch(values, lines, times, keys)

    def _fields(self, lines: list[str]) -> tuple[list[str], list[str] | None, list[str] | None] | None:
        """The raw value, time and key fields of every line, or None if a line lacks its line end
        or has the wrong number of fields.  The chunk is split once into a flat list of fields with
        a marker field after every line: if the markers fall every ``width + 1`` fields, every line
        has ``width`` fields, and a column is a slice.  (No list per line: many small lists would
        wake the garbage collector.)"""
        if self.separator is None:
            return lines, None, None
        separator, width, count = self.separator, self.width, len(lines)
        text = "".join(lines)
        if not text.endswith("\n"):
            text += "\n"
        if "\0" in text or text.count("\n") != count:  # the marker taken, or lines without line ends
            return None
        flat = text.replace("\n", f"{separator}\0{separator}").split(separator)
        stride = width + 1
        if len(flat) != count * stride + 1 or flat[width::stride].count("\0") != count:
            return None
        end = count * stride
        return tuple(None if index is None else flat[index:end:stride] for index in (self.value, self.time, self.key))

    def _slow(self, lines: list[str], first: int) -> Batch:
        rows, numbers = [], []
        for number, line in enumerate(lines, start=first):
            row = self.row(line, number)
            if row is not None:
                rows.append(row)
                numbers.append(number)
        values = np.array([row[0] for row in rows], dtype=np.float64)
        times = None if self.time is None else [row[1] for row in rows]
        keys = None if self.key is None else [row[2] for row in rows]
        return Batch(values, np.array(numbers, dtype=np.int64), times, keys)


def _setup(lines: Iterable[str], source: str, column: str | None, time_column: str | None,
           key_column: str | None, missing: str, stats: ReadStats | None) -> tuple[Iterator[str], _TextRows]:
    _check_names(column, time_column, key_column)
    check_choice(missing, "missing", MISSING_POLICIES)
    stats = ReadStats() if stats is None else stats
    stats.unit = "line"
    return iter(lines), _TextRows(source, column, time_column, key_column, missing, stats)


def _guarded(rows: Iterator, source: str) -> Iterator:
    """``rows``, with decoding and decompression failures turned into one-line input errors."""
    try:
        yield from rows
    except UnicodeDecodeError as error:
        raise InputError(f"{source} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise InputError(f"{source} is not a valid gzip file ({error}).") from None


def _rows(lines: Iterator[str], parser: _TextRows, records: bool) -> Iterator:
    """For every kept row, reading one line per row: its value, or with ``records`` the tuple
    (value, time, key, line number)."""
    line = next(lines, None)
    if line is None:
        return
    line = line.removeprefix("\ufeff")
    numbered = itertools.chain([(1, line)] if parser.start(line) else [], enumerate(lines, start=2))
    stats, one_column = parser.stats, parser.separator is None
    blank_from, blanks = 0, 0  # blank lines are rows only if a non-blank line follows them
    for number, line in numbered:
        if one_column and not blanks and _plain(line):  # the common case, in short
            try:
                value = float(line)
            except ValueError:  # blank, or a misplaced sign, point or exponent: see below
                pass
            else:
                if value - value == 0.0:  # finite
                    stats.values += 1
                    yield (value, None, None, number) if records else value
                    continue
        if _is_blank(line):
            blank_from, blanks = (blank_from, blanks + 1) if blanks else (number, 1)
            continue
        for blank in range(blank_from, blank_from + blanks):
            if (row := parser.row("", blank)) is not None:
                yield (*row, blank) if records else row[0]
        blanks = 0
        if (row := parser.row(line, number)) is not None:
            yield (*row, number) if records else row[0]


def iter_values(lines: Iterable[str], column: str | None = None, source: str = "input", *,
                missing: str = "error", stats: ReadStats | None = None) -> Iterator[float]:
    """Yield the stream's values one at a time, as soon as each line arrives.

    Parameters
    ----------
    lines : iterable of str
        The text, line by line (an open file, ``sys.stdin``, a list).
    column : str, optional
        Name of the value column (needs a header); required when there are several columns.
    source : str
        Name of the input in error messages.
    missing : {"error", "zero", "skip"}
        What a missing value does (see the module docstring).
    stats : ReadStats, optional
        Filled in while reading.

    Raises
    ------
    InputError
        For a missing or ambiguous column, a bad header, a row with the wrong number of fields,
        a field that is not a decimal number or is missing (under ``missing="error"``), or text
        that is not UTF-8; the message names the line.

    >>> list(iter_values(["t,value", "1,4", "2,3.5"], column="value"))
    [4.0, 3.5]
    """
    iterator, parser = _setup(lines, source, column, None, None, missing, stats)
    return _guarded(_rows(iterator, parser, records=False), source)


def iter_records(lines: Iterable[str], column: str | None = None, source: str = "input", *,
                 time_column: str | None = None, key_column: str | None = None, missing: str = "error",
                 stats: ReadStats | None = None) -> Iterator[Record]:
    """Yield :class:`Record` s (value, time text, key text, line) one at a time, lazily.

    Parameters as in :func:`iter_values`, and the names of the time and key columns.

    >>> for record in iter_records(["time,user,kWh", "08:00,a,1.5", "09:00,b,"],
    ...                            time_column="time", key_column="user", missing="zero"):
    ...     print(record)
    Record(value=1.5, time='08:00', key='a', line=2)
    Record(value=0.0, time='09:00', key='b', line=3)
    """
    iterator, parser = _setup(lines, source, column, time_column, key_column, missing, stats)
    return _guarded(map(Record._make, _rows(iterator, parser, records=True)), source)


def iter_batches(lines: Iterable[str], size: int, column: str | None = None, source: str = "input", *,
                 time_column: str | None = None, key_column: str | None = None, missing: str = "error",
                 stats: ReadStats | None = None) -> Iterator[Batch]:
    """Yield :class:`Batch` es of at most ``size`` values, reading ``size`` lines at a time.

    The same values, texts, errors and statistics as :func:`iter_records`, much faster: a chunk
    of plain numbers is checked by one scan and converted at once.  Not for live input: a chunk
    is returned only when ``size`` lines have arrived.

    >>> [batch.values.tolist() for batch in iter_batches(["v", "1", "2", "3"], 2)]
    [[1.0, 2.0], [3.0]]
    """
    size = check_positive_int(size, "size")
    iterator, parser = _setup(lines, source, column, time_column, key_column, missing, stats)
    return _guarded(_batches(iterator, parser, size), source)


#: Fields a chunk of a file with several columns may hold (memory stays in the tens of MB).
_FIELDS_PER_CHUNK = 1 << 20


def _batches(lines: Iterator[str], parser: _TextRows, size: int) -> Iterator[Batch]:
    line = next(lines, None)
    if line is None:
        return
    line = line.removeprefix("\ufeff")
    first = 1 if parser.start(line) else 2
    size = min(size, max(1, _FIELDS_PER_CHUNK // (parser.width + 1)))  # wide files: fewer lines at a time
    chunk = [line] if first == 1 else []
    blank_from, blanks = 0, 0  # a run of blank lines that may be the end of the input
    while True:
        chunk.extend(itertools.islice(lines, size - len(chunk)))
        if not chunk:
            return
        end = len(chunk)
        while end and _is_blank(chunk[end - 1]):
            end -= 1
        if end:
            for start in range(blank_from, blank_from + blanks, size):  # blank lines inside the stream
                batch = parser.block([""] * min(size, blank_from + blanks - start), start)
                if len(batch):
                    yield batch
            batch = parser.block(chunk[:end], first)
            if len(batch):
                yield batch
            blank_from, blanks = first + end, 0
        elif not blanks:
            blank_from = first
        blanks += len(chunk) - end
        first += len(chunk)
        chunk = []


def iter_chunks(values: Iterable[float], size: int) -> Iterator[np.ndarray]:
    """Group an iterator of values into float64 arrays of at most ``size`` values."""
    iterator = iter(values)
    while (chunk := np.fromiter(itertools.islice(iterator, size), dtype=np.float64)).size:
        yield chunk


# -- files -----------------------------------------------------------------------------------


def open_input(path: str | os.PathLike[str]) -> TextIO:
    """Open ``path`` for reading text: ``-`` is stdin, ``*.gz`` is decompressed."""
    if str(path) == "-":
        return sys.stdin
    path = _existing(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")  # -sig: drop a byte-order mark


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file {str(path)!r} does not exist.")
    if path.is_dir():
        raise InputError(f"input {str(path)!r} is a directory, not a file.")
    return path


_PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")


def _is_parquet(path: str | os.PathLike[str]) -> bool:
    if str(path) == "-":
        return False
    path = _existing(path)
    if path.suffix.lower() in _PARQUET_SUFFIXES:
        return True
    if not path.is_file():  # a pipe (such as <(zcat ...)) cannot be peeked at without losing bytes
        return False
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


class StreamReader:
    """A stream file, text or Parquet, read by values, records or batches.

    Parameters
    ----------
    path : str or path-like
        ``-`` is stdin (text); ``*.gz`` is gzipped text; ``*.parquet`` (or a file that starts
        with Parquet's magic bytes) is Parquet; anything else is text.
    column, time_column, key_column : str, optional
        Names of the value, time and key columns (see the module docstring).
    missing : {"error", "zero", "skip"}
        What a missing value does.
    stats : ReadStats, optional
        Where to count what is read (a fresh one by default).

    Attributes
    ----------
    source : str
        The name used in messages (``stdin`` for ``-``).
    stats : ReadStats
        Filled in while reading, for a report after the loop.

    A reader is read once, by one of :meth:`values`, :meth:`records` or :meth:`batches`.  Use
    it as a context manager (or call :meth:`close`); stdin is never closed.  A missing file, a
    Parquet file without the columns asked for or with a non-numeric value column is an error
    here already, before anything is read.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "meter.csv"
    >>> _ = path.write_text("time,kWh\\n08:00,1.5\\n09:00,NA\\n10:00,2\\n")
    >>> with StreamReader(path, time_column="time", missing="skip") as reader:
    ...     [(batch.values.tolist(), batch.times) for batch in reader.batches(1000)]
    [([1.5, 2.0], ['08:00', '10:00'])]
    >>> reader.stats.skipped, reader.stats.first_missing
    (1, 3)
    """

    def __init__(self, path: str | os.PathLike[str], *, column: str | None = None, time_column: str | None = None,
                 key_column: str | None = None, missing: str = "error", stats: ReadStats | None = None) -> None:
        _check_names(column, time_column, key_column)
        self.missing = check_choice(missing, "missing", MISSING_POLICIES)
        self.source = "stdin" if str(path) == "-" else str(path)
        self.columns = (column, time_column, key_column)
        self.stats = ReadStats() if stats is None else stats
        self._used = False
        self._handle: TextIO | None = None
        self._parquet: _ParquetStream | None = None
        if _is_parquet(path):
            self._parquet = _ParquetStream(Path(path), self.source, *self.columns, self.missing, self.stats)
        else:
            self._handle = open_input(path)

    @property
    def format(self) -> str:
        """``"parquet"`` or ``"text"``."""
        return "text" if self._parquet is None else "parquet"

    def _start(self) -> None:
        if self._used:
            raise RuntimeError(f"{self.source} has been read already; open a new StreamReader to read it again.")
        self._used = True

    def values(self) -> Iterator[float]:
        """The values one at a time; from text, each as soon as its line arrives."""
        self._start()
        if self._parquet is not None:
            return itertools.chain.from_iterable(batch.values.tolist() for batch in self._parquet.batches(_CHUNK))
        return iter_values(self._handle, self.columns[0], self.source, missing=self.missing, stats=self.stats)

    def records(self) -> Iterator[Record]:
        """:class:`Record` s one at a time; from text, each as soon as its line arrives."""
        self._start()
        if self._parquet is not None:
            return itertools.chain.from_iterable(batch.records() for batch in self._parquet.batches(_CHUNK))
        column, time_column, key_column = self.columns
        return iter_records(self._handle, column, self.source, time_column=time_column, key_column=key_column,
                            missing=self.missing, stats=self.stats)

    def batches(self, size: int = 65536) -> Iterator[Batch]:
        """:class:`Batch` es of at most ``size`` values (the fast path for files)."""
        size = check_positive_int(size, "size")
        self._start()
        if self._parquet is not None:
            return self._parquet.batches(size)
        column, time_column, key_column = self.columns
        return iter_batches(self._handle, size, column, self.source, time_column=time_column,
                            key_column=key_column, missing=self.missing, stats=self.stats)

    def close(self) -> None:
        """Close the file (never stdin)."""
        if self._handle is not None and self._handle is not sys.stdin:
            self._handle.close()
        if self._parquet is not None:
            self._parquet.close()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: Rows per record batch when Parquet is read value by value.
_CHUNK = 65536
_NUMERIC = "integer, floating point or decimal"


class _ParquetStream:
    """A Parquet file read one record batch at a time, under the rules of the text reader."""

    def __init__(self, path: Path, source: str, column: str | None, time_column: str | None,
                 key_column: str | None, missing: str, stats: ReadStats) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.source, self.missing, self.stats = source, missing, stats
        stats.unit = "row"
        try:
            self.file = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"{source} is not a readable Parquet file ({error}).") from None
        schema = self.file.schema_arrow
        self.names = list(schema.names)
        try:
            value, time, key = _resolve(self.names, source, column, time_column, key_column)
            kind = schema.field(value).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
                raise InputError(f"{source} column {_quote(self.names[value])} holds {kind} values, not numbers; "
                                 f"the value column must be numeric ({_NUMERIC}).")
            for index in (time, key):
                if index is not None:
                    try:
                        pa.array([], type=schema.field(index).type).cast(pa.string())
                    except pa.ArrowException:
                        raise InputError(f"{source} column {_quote(self.names[index])} holds "
                                         f"{schema.field(index).type} values, which cannot be read as text.") from None
        except InputError:
            self.file.close()
            raise
        self.value, self.time, self.key = value, time, key

    def batches(self, size: int) -> Iterator[Batch]:
        import pyarrow as pa

        columns = [self.names[i] for i in (self.value, self.time, self.key) if i is not None]
        row = 1
        try:
            for record_batch in self.file.iter_batches(batch_size=size, columns=columns):
                batch = self._batch(record_batch, row)
                row += record_batch.num_rows
                if len(batch):
                    yield batch
        except pa.ArrowException as error:
            raise InputError(f"{self.source} cannot be read as Parquet near row {row} ({error}).") from None

    def _batch(self, record_batch: object, row: int) -> Batch:
        import pyarrow as pa

        count = record_batch.num_rows
        column = record_batch.column(self.names[self.value])
        values = np.array(column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)
        lines = np.arange(row, row + count, dtype=np.int64)
        times = self._texts(record_batch, self.time)
        keys = self._texts(record_batch, self.key)
        bad = ~np.isfinite(values)
        if bad.any():
            missing = np.isnan(values)
            stop = bad if self.missing == "error" else bad & ~missing
            if stop.any():
                self._fail(int(np.argmax(stop)), values, row)
            self.stats._met_missing(row + int(np.argmax(missing)), int(missing.sum()))
            if self.missing == "zero":
                values[missing] = 0.0
                self.stats.replaced += int(missing.sum())
            else:
                keep = ~missing
                self.stats.skipped += int(missing.sum())
                values, lines = values[keep], lines[keep]
                times = None if times is None else list(itertools.compress(times, keep))
                keys = None if keys is None else list(itertools.compress(keys, keep))
        self.stats.values += values.size
        return Batch(values, lines, times, keys)

    def _texts(self, record_batch: object, index: int | None) -> list[str] | None:
        import pyarrow as pa

        if index is None:
            return None
        return record_batch.column(self.names[index]).cast(pa.string()).fill_null("").to_pylist()

    def _fail(self, index: int, values: np.ndarray, row: int) -> None:
        where = f"{self.source} row {row + index}, column {_quote(self.names[self.value])},"
        if np.isnan(values[index]):
            self.stats._met_missing(row + index)
            raise InputError(f"{where} is missing (null or NaN); missing values are errors unless the missing "
                             "policy is zero or skip.")
        raise InputError(f"{where} holds {float(values[index])!r}; infinities are not stream values.")

    def close(self) -> None:
        self.file.close()


def read_values(path: str | os.PathLike[str], column: str | None = None, *, missing: str = "error",
                stats: ReadStats | None = None) -> np.ndarray:
    """Read a whole stream file (text or Parquet) into a float64 array.

    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> _ = tmp.write_text("time,value\\n1,4\\n2,3.5\\n")
    >>> read_values(tmp, column="value").tolist()
    [4.0, 3.5]
    """
    with StreamReader(path, column=column, missing=missing, stats=stats) as reader:
        chunks = [batch.values for batch in reader.batches(_CHUNK)]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.float64)


# -- matrices ----------------------------------------------------------------------------------


def _split(line: str) -> list[str]:
    separator = "," if "," in line else "\t" if "\t" in line else None
    return [_clean(field) for field in (line.split(separator) if separator else [line])]


def _is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text) is not None


def read_matrix(path: str, what: str) -> np.ndarray:
    """A CSV of numbers (optional header row, no index column) as a 2-D float array.

    The first non-blank line is a header only if every field is a name (as in a stream's
    header: it starts with a letter or an underscore and is neither a missing-value token nor a
    number); a numeric header such as ``0,1,2`` cannot be told apart from data and is read as
    data.  Numbers follow the stream's decimal grammar and must be finite.  Errors name the
    file, the line and the offending text.  ``-`` reads stdin and leaves it open.
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
                if header_allowed and not any(_not_a_name(field) for field in fields):
                    header_allowed = False
                    continue
                wrong = [field for field in fields if not _is_number(field)]
                # On the first line, a field that is neither a number nor a name is the culprit.
                bad = next((field for field in wrong if not header_allowed or _not_a_name(field)), wrong[0])
                hint = " (a header line must hold only names)" if header_allowed else ""
                raise InputError(f"{what} {path!r} line {number}: {_quote(bad)} is not a number{hint}.")
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
    return np.array(rows)
