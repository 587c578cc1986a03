"""Reading text streams (CSV, tab-separated or one value a line; gzipped, or stdin) under the
rules of :mod:`dpstream.io`: lazily, a value as soon as its line arrives (:func:`iter_values`,
:func:`iter_records`), or in chunks of arrays (:func:`iter_batches`, the fast path for files)."""

from __future__ import annotations

import gzip
import io
import itertools
import math
import os
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, NoReturn, TextIO

import numpy as np

from dpstream._checks import check_choice, check_positive_int
from dpstream.io.records import (
    _MISSING,
    _MISSING_WORDS,
    _NUMBER,
    _NUMBER_RULE,
    MISSING_POLICIES,
    Batch,
    InputError,
    ReadStats,
    Record,
    _check_names,
    _clean,
    _is_blank,
    _is_missing,
    _not_a_name,
    _plain,
    _quote,
    _separator,
    _split,
    resolve_columns,
)
from dpstream.io.vectorized import parse_numbers, split_block

__all__ = ["open_input", "iter_values", "iter_records", "iter_batches", "read_lines"]

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


class _Block(NamedTuple):
    """A block of ``count`` plain lines, parsed at once (:meth:`_TextRows.plain_block`): the value of every
    line (0 for a missing one, marked in ``missing``), the time and key texts of every line."""

    count: int
    values: np.ndarray
    missing: np.ndarray | None
    times: list[str] | None
    keys: list[str] | None


class _TextRows:
    """The rules of :mod:`dpstream.io` for text lines, shared by the lazy and chunked readers."""

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
        self.separator = _separator(line)
        fields = _split(line, self.separator)
        self.width = len(fields)
        why = next(((i, reason) for i, field in enumerate(fields) if (reason := _not_a_name(field))), None)
        if why is None:
            self.names = fields
            column, time_column, key_column = self.wanted
            self.value, self.time, self.key = resolve_columns(fields, self.source, column=column,
                                                              time_column=time_column, key_column=key_column, line=1)
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

    # -- a block of plain lines, at array speed ---------------------------------------------

    def plain_block(self, block: str) -> _Block | None:
        """Every line of ``block`` (each ended by ``\\n``, none blank) parsed at once, or None unless
        every line is plain and every value a decimal number (or, under the policies zero and skip,
        a missing-value token): the block is then read line by line, with the same results or errors."""
        fields = split_block(block, separator=self.separator, width=self.width,
                             wanted=(self.value, self.time, self.key))
        if fields is None:
            return None
        parsed = parse_numbers(fields[0], missing=self.missing != "error")
        if parsed is None:
            return None
        times, keys = (None if column is None else column.to_pylist() for column in fields[1:])
        return _Block(len(fields[0]), *parsed, times, keys)

    def numbered(self, block: _Block, first: int) -> Batch:
        """The rows of a :class:`_Block` whose first line is ``first``, under the missing policy, counted in the
        statistics as :meth:`block` counts them."""
        lines = np.arange(first, first + block.count, dtype=np.int64)
        values, times, keys, missing = block.values, block.times, block.keys, block.missing
        if missing is not None and missing.any():
            count = int(missing.sum())
            self.stats._met_missing(first + int(np.argmax(missing)), count)
            if self.missing == "zero":
                self.stats.replaced += count
            else:
                keep = ~missing
                values, lines = values[keep], lines[keep]
                times = None if times is None else list(itertools.compress(times, keep.tolist()))
                keys = None if keys is None else list(itertools.compress(keys, keep.tolist()))
                self.stats.skipped += count
        self.stats.values += values.size
        return Batch(values, lines, times, keys)

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
        What a missing value does (see :mod:`dpstream.io`).
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
    chunk_lines = min(size, max(1, _FIELDS_PER_CHUNK // (parser.width + 1)))  # wide files: fewer lines at a time
    head = line if first == 1 else ""  # line 1, if it is data
    if isinstance(lines, io.TextIOBase):
        chunks = _blocks(lines, parser, chunk_lines, head)
    else:
        chunks = _line_chunks(itertools.chain([head] if head else [], lines), chunk_lines)
    yield from _chunk_batches(chunks, parser, first, chunk_lines)


def _line_chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    """``lines`` in lists of ``size``."""
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def _blocks(handle: TextIO, parser: _TextRows, size: int, head: str) -> Iterator[list[str] | _Block]:
    """The rest of an open text file in chunks of ``size`` lines (the last one fewer), as the lines read one by one
    are chunked, so that batches end where they would: every chunk of plain lines read at array speed
    (:meth:`_TextRows.plain_block`), any other as its list of lines, for the rules line by line.  The last line
    may lack its line end, as in a file read line by line.  ``head``: the text read already (line 1, if data)."""
    buffer, characters, ends, done = head, 0, 0, False
    while True:
        while not done and buffer.count("\n") < size:  # reads of about the characters of `size` lines so far
            text = handle.read(size * (characters // ends if ends else 64) + 1)
            done = not text
            characters, ends, buffer = characters + len(text), ends + text.count("\n"), buffer + text
        if not buffer:
            return
        block, buffer = _first_lines(buffer, size)
        fast = parser.plain_block(block if block.endswith("\n") else block + "\n")
        if fast is not None:
            yield fast
        else:
            lines = block.split("\n")
            yield [*map("{}\n".format, lines[:-1]), *([lines[-1]] if lines[-1] else [])]


def _first_lines(text: str, count: int) -> tuple[str, str]:
    """The first ``count`` lines of ``text`` (each with its line end) and the rest; all of it if it holds fewer."""
    if text.isascii():
        ends = np.flatnonzero(np.frombuffer(text.encode("ascii"), dtype=np.uint8) == 10)
        if ends.size < count:
            return text, ""
        cut = int(ends[count - 1]) + 1
    else:
        parts = text.split("\n", count)
        if len(parts) <= count:
            return text, ""
        cut = len(text) - len(parts[-1])
    return text[:cut], text[cut:]


def _chunk_batches(chunks: Iterator[list[str] | _Block], parser: _TextRows, first: int,
                   size: int) -> Iterator[Batch]:
    """The batches of consecutive chunks of lines from line ``first`` on: a list of lines is read
    by :meth:`_TextRows.block`, a :class:`_Block` (no blank line in it) by :meth:`_TextRows.numbered`."""
    blank_from, blanks = 0, 0  # a run of blank lines that may be the end of the input
    for chunk in chunks:
        if isinstance(chunk, _Block):
            end = count = chunk.count
        else:
            count = end = len(chunk)
            while end and _is_blank(chunk[end - 1]):
                end -= 1
        if end:
            for start in range(blank_from, blank_from + blanks, size):  # blank lines inside the stream
                batch = parser.block([""] * min(size, blank_from + blanks - start), start)
                if len(batch):
                    yield batch
            batch = parser.numbered(chunk, first) if isinstance(chunk, _Block) else parser.block(chunk[:end], first)
            if len(batch):
                yield batch
            blank_from, blanks = first + end, 0
        elif not blanks:
            blank_from = first
        blanks += count - end
        first += count


def read_lines(lines: Sequence[str], first: int, header: str, *, source: str = "input", column: str | None = None,
               time_column: str | None = None, key_column: str | None = None, missing: str = "error",
               stats: ReadStats | None = None) -> tuple[Batch, int]:
    """The rows of lines ``first, first + 1, ...`` of a text stream whose line 1 is ``header``: the values,
    texts, line numbers and errors :func:`iter_batches` gives for those lines of the whole stream.

    For a reader that splits a file among workers (Spark's, in ``release --engine spark``): each
    reads its own lines, numbered as in the file, by the rules of :mod:`dpstream.io`.  ``lines``
    come without their line ends; ``first`` is at least 2 (line 1, ``header``, is read for
    the layout and the column names only, never as a row).  Blank lines at the end of ``lines``
    are not read, since blank lines at the end of a stream hold no row: returns the batch and
    the number of lines read; the caller reads the blank lines after them (``[""] * n``, from
    their first line) only if a later line of the stream is not blank.

    >>> batch, read = read_lines(["b,2", "c,3.5", " "], 4, "key,value", key_column="key")
    >>> batch.values.tolist(), batch.keys, batch.lines.tolist(), read
    ([2.0, 3.5], ['b', 'c'], [4, 5], 2)
    >>> read_lines(["b,0x1p3"], 4, "key,value", source="s.csv", key_column="key")
    Traceback (most recent call last):
    ...
    dpstream.io.InputError: s.csv line 4, column 'value', is not a number: '0x1p3' (a value is a decimal number: \
optional sign, digits, optional fraction and exponent).
    """
    if first < 2:
        raise ValueError(f"first must be 2 or more (line 1 is the header), got {first!r}.")
    _, parser = _setup((), source, column, time_column, key_column, missing, stats)
    parser.start(header.removeprefix("\ufeff"))
    end = len(lines)
    while end and _is_blank(lines[end - 1]):
        end -= 1
    return parser.block(list(map("{}\n".format, lines[:end])), first), end


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
