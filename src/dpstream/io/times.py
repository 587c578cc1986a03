"""Times and durations of rows: parsed in batches, aligned in UTC (the one parser of a time column).

A time is either ISO 8601 -- ``2024-03-01T00:30:00Z`` (a date alone is its midnight), an offset
(``+02:00``, ``+0200``), a space for the ``T`` as most tools write it, fractions of a second
allowed, a leap second (``23:59:60``) read as the last instant of the second before it, and **no offset
meaning UTC** -- or epoch seconds (a decimal number of seconds since
1970-01-01T00:00:00Z).  Which of the two a column holds is decided by its first value
(:func:`time_kind`) and said by the command; a later value of the other kind is an error naming
its row.  Times are held as int64 nanoseconds since
the epoch (numpy ``datetime64[ns]``'s range, 1678 to 2261), parsed by pyarrow's compute kernels:
no Python loop per row.

A duration is an integer and a unit: ``s``, ``m`` (minutes), ``h`` or ``d`` (:func:`parse_duration`), at most
:data:`MAX_DURATION` (100 years: in nanoseconds, a bucket index stays an int64).
Buckets and windows are aligned in UTC from the epoch: bucket ``k`` of a duration ``b`` holds the
times ``[k b, (k + 1) b)``, so ``1d`` windows are UTC days; a window must be a whole number of
buckets (:func:`buckets_per_window`).
"""

from __future__ import annotations

import re
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.io.records import InputError, _quote

__all__ = ["MAX_DURATION", "NS", "buckets_per_window", "duration_text", "format_times", "parse_duration", "parse_times",
           "time_kind"]

#: Nanoseconds per second.
NS = 1_000_000_000
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]+)([smhd])")
_OFFSET = r"(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_EPOCH = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"
#: A leap second, ``...:59:60`` with or without a fraction: read as the last nanosecond before the next minute.
_LEAP = r"^([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}):60(\.[0-9]*)?"
#: The longest duration, in seconds: 100 years of 365 days.
MAX_DURATION = 36500 * 86400
_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError)


def parse_duration(text: object, name: str = "duration") -> int:
    """A duration ``integer + s|m|h|d`` in seconds.

    >>> parse_duration("30m"), parse_duration("1d"), parse_duration("90s")
    (1800, 86400, 90)
    >>> parse_duration("1.5h")
    Traceback (most recent call last):
    ValueError: duration must be a positive integer and s, m, h or d (m = minutes), e.g. 30m or 1d; got '1.5h'.
    >>> parse_duration("40000d")
    Traceback (most recent call last):
    ValueError: duration must be at most 36500d (100 years), got '40000d'.
    """
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"{name} must be a positive integer and s, m, h or d (m = minutes), e.g. 30m or 1d; "
                         f"got {text!r}.")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION:
        raise ValueError(f"{name} must be at most {duration_text(MAX_DURATION)} (100 years), got {text!r}.")
    return seconds


def duration_text(seconds: int) -> str:
    """The shortest spelling of ``seconds`` as :func:`parse_duration` reads it.

    >>> duration_text(86400), duration_text(1800), duration_text(90)
    ('1d', '30m', '90s')
    """
    for unit in "dhm":
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def buckets_per_window(bucket: int, window: int) -> int:
    """How many buckets of ``bucket`` seconds a window of ``window`` seconds holds; refused unless whole.

    >>> buckets_per_window(1800, 86400)
    48
    >>> buckets_per_window(7 * 60, 3600)
    Traceback (most recent call last):
    ValueError: the window (1h) must be a whole number of buckets (7m): 3600 s is not a multiple of 420 s.
    """
    if window % bucket:
        raise ValueError(f"the window ({duration_text(window)}) must be a whole number of buckets "
                         f"({duration_text(bucket)}): {window} s is not a multiple of {bucket} s.")
    return window // bucket


def time_kind(first: str) -> str:
    """``"epoch"`` when the first time of a column is a number of seconds, else ``"iso"`` (ISO 8601)."""
    return "epoch" if re.fullmatch(_EPOCH, first.strip()) else "iso"


def parse_times(texts: pa.Array | list[str], *, kind: str, first_row: int = 1, what: str = "time") -> np.ndarray:
    """The times of ``texts`` as int64 nanoseconds since the epoch (UTC); vectorized.

    ``kind`` is ``"iso"`` or ``"epoch"`` (:func:`time_kind`); ``first_row`` numbers the rows in
    an error, which names the first bad value.

    >>> parse_times(["2024-01-01T00:30:00Z", "2024-01-01 02:30:00+02:00", "2024-01-01T00:30"], kind="iso").tolist()
    [1704069000000000000, 1704069000000000000, 1704069000000000000]
    >>> parse_times(["1704069000", "1704069000.5"], kind="epoch").tolist()
    [1704069000000000000, 1704069000500000000]
    >>> parse_times(["2024-01-01"], kind="iso").tolist()
    [1704067200000000000]
    >>> parse_times(["2016-12-31T23:59:60Z"], kind="iso").tolist()  # a leap second: the instant before 2017
    [1483228799999999999]
    >>> parse_times(["2024-01-01", "yesterday"], kind="iso", first_row=10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    dpstream.io.InputError: row 11: the time 'yesterday' is not ISO 8601 (2024-03-01T00:30:00Z, an offset or none ...
    """
    array = pa.array(texts, type=pa.string()) if not isinstance(texts, (pa.Array, pa.ChunkedArray)) else texts
    array = pc.utf8_trim_whitespace(array.cast(pa.string()))
    if array.null_count:
        _fail(array, np.asarray(array.is_null()), first_row, what, "is missing", empty=True)
    if kind == "epoch":
        numeric = np.asarray(pc.match_substring_regex(array, _EPOCH))
        if not numeric.all():
            _fail(array, ~numeric, first_row, what, "is not epoch seconds (a decimal number), as the first time was")
        seconds = np.asarray(array.cast(pa.float64()))
        if not np.all(np.abs(seconds) < 9.2e9):
            _fail(array, ~(np.abs(seconds) < 9.2e9), first_row, what, "is outside the years 1678 to 2261")
        whole = np.floor(seconds)  # exact: whole seconds, then the fraction (float64: ~0.2 us today)
        return whole.astype(np.int64) * NS + np.round((seconds - whole) * NS).astype(np.int64)
    original = array  # what an error quotes
    dates = pc.equal(pc.utf8_length(array), 10)  # a date alone: its midnight, UTC
    array = pc.if_else(dates, pc.binary_join_element_wise(array, pa.scalar("T00:00:00"), ""), array)
    zoned = np.asarray(pc.match_substring_regex(array, _OFFSET))
    out = np.empty(len(array), dtype=np.int64)
    for mask, target in ((zoned, pa.timestamp("ns", tz="UTC")), (~zoned, pa.timestamp("ns"))):
        if not mask.any():
            continue
        part = array.filter(pa.array(mask))
        try:
            out[mask] = np.asarray(part.cast(target).cast(pa.int64()))
        except _ERRORS:
            out[mask] = _cast_leap(original, part, mask, target, first_row, what)
    return out


def _cast_leap(original: pa.Array, part: pa.Array, mask: np.ndarray, target: pa.DataType, first_row: int,
               what: str) -> np.ndarray:
    """The error path of a cast: leap seconds read as the instant before the next minute, then the first time
    that still fails named, as outside the years of int64 nanoseconds or as not ISO 8601."""
    part = pc.replace_substring_regex(part, _LEAP, r"\1:59.999999999")
    try:
        return np.asarray(part.cast(target).cast(pa.int64()))
    except _ERRORS:
        good = np.array([_parses(item, target) for item in part.to_pylist()])  # the error path only
    bad = np.zeros(len(original), dtype=bool)
    bad[np.flatnonzero(mask)[~good]] = True
    wide = pa.timestamp("us", tz=getattr(target, "tz", None))
    if _parses(part.to_pylist()[int(np.flatnonzero(~good)[0])], wide):
        _fail(original, bad, first_row, what, "is outside the years 1678 to 2261")
    _fail(original, bad, first_row, what, "is not ISO 8601 (2024-03-01T00:30:00Z, an offset or none for UTC, "
                                          "a space for the T allowed)")


def _parses(text: str, target: pa.DataType) -> bool:
    try:
        pa.array([text]).cast(target)
    except _ERRORS:
        return False
    return True


def _fail(array: pa.Array, bad: np.ndarray, first_row: int, what: str, problem: str, *,
          empty: bool = False) -> NoReturn:
    index = int(np.flatnonzero(bad)[0])
    text = "" if empty else f" {_quote(array[index].as_py())}"
    raise InputError(f"row {first_row + index}: the {what}{text} {problem}")


def format_times(nanoseconds: np.ndarray) -> list[str]:
    """Times (int64 nanoseconds, whole seconds) as ISO 8601 UTC texts, ``2024-01-01T00:30:00Z``.

    >>> format_times(np.array([1704069000 * NS]))
    ['2024-01-01T00:30:00Z']
    """
    texts = np.datetime_as_string(np.asarray(nanoseconds, dtype=np.int64).astype("datetime64[ns]"), unit="s")
    return [text + "Z" for text in texts.tolist()]
