"""What the readers return and the grammar they share: records, batches, statistics, errors,
the spelling of a number, a missing value and a header name, and the choice of the value, time
and key columns among a header's or a schema's names (the rules of :mod:`dpstream.io`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "InputError",
    "MISSING_POLICIES",
    "MISSING_TOKENS",
    "QUOTE_LIMIT",
    "ReadStats",
    "Record",
    "Batch",
    "resolve_columns",
]


class InputError(ValueError):
    """A stream file that cannot be read as numbers; the message names the line and the text."""


InputError.__module__ = "dpstream.io"  # where it is imported from, and named in tracebacks


#: What ``missing=`` may be: stop at a missing value, read it as 0, or drop its row.
MISSING_POLICIES = ("error", "zero", "skip")
#: Missing-value tokens (besides an empty field), matched in any letter case.
MISSING_TOKENS = ("NA", "NaN", "null")
_MISSING = frozenset(token.lower() for token in MISSING_TOKENS) | {""}
_MISSING_WORDS = "an empty field, NA, NaN or null"

#: A decimal number, the only spelling of a value (ASCII digits; see :mod:`dpstream.io`).
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


def _names(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(_quote(name) for name in names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names):,} columns)"


def _clean(field: str) -> str:
    """A field without surrounding blanks and one pair of enclosing quotes."""
    field = field.strip()
    if len(field) >= 2 and field[0] == field[-1] and field[0] in _QUOTES:
        field = field[1:-1].strip()
    return field


def _separator(line: str) -> str | None:
    """The field separator of a file, from its first line: a comma if the line holds one, else a
    tab if it holds one, else None (one column: a line is one field)."""
    return "," if "," in line else "\t" if "\t" in line else None


def _split(line: str, separator: str | None) -> list[str]:
    """The cleaned fields of ``line`` (all of it, cleaned, without a separator)."""
    return [_clean(field) for field in line.split(separator)] if separator else [_clean(line)]


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

    >>> from dpstream.io import iter_values
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


def resolve_columns(names: Sequence[str], source: str, *, column: str | None = None, time_column: str | None = None,
                    key_column: str | None = None, line: int | None = None) -> tuple[int, int | None, int | None]:
    """The 0-based indices of the value, time and key columns among a header's or a schema's names.

    Every reader chooses its columns by this rule, so a reader outside this package (Spark's,
    say) that calls it picks the columns and says the same errors as :class:`StreamReader`.

    Parameters
    ----------
    names : sequence of str
        The column names, in order: a text header's fields or a Parquet schema's names.
    source : str
        Name of the input in error messages.
    column : str, optional
        The value column; without it, the one column left by the time and key columns.
    time_column, key_column : str, optional
        The time and key columns (None: no such column, index None).
    line : int, optional
        The line the names were read from (a text header), named in the error about two equal names.

    Raises
    ------
    TypeError, ValueError
        For a column name that is not a string, or one name given to two roles.
    InputError
        For two columns of the same name, a column asked for that is not there, or no ``column``
        when the time and key columns do not leave exactly one other.

    >>> resolve_columns(["time", "meter", "kWh"], "meter.csv", time_column="time", key_column="meter")
    (2, 0, 1)
    >>> resolve_columns(["time", "meter", "kWh"], "meter.csv", column="kW")
    Traceback (most recent call last):
    ...
    dpstream.io.InputError: meter.csv has no column 'kW'; its columns are 'time', 'meter', 'kWh'.
    """
    _check_names(column, time_column, key_column)
    names = list(names)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            where = "" if line is None else f" line {line}"
            raise InputError(f"{source}{where} has two columns named {_quote(name)} (columns {seen[name] + 1} and "
                             f"{i + 1}); column names must be unique.")
        seen[name] = i

    def find(name: str, role: str) -> int:
        if name not in seen:
            raise InputError(f"{source} has no {role}column {_quote(name)}; its columns are {_names(names)}.")
        return seen[name]

    time = None if time_column is None else find(time_column, "time ")
    key = None if key_column is None else find(key_column, "key ")
    if column is not None:
        return find(column, ""), time, key
    rest = [i for i in range(len(names)) if i not in (time, key)]
    if len(rest) != 1:
        raise InputError(f"{source} has columns {_names(names)}; choose one with a column name (--column).")
    return rest[0], time, key
