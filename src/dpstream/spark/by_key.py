"""Many keyed streams on Spark: one independent release per key, in parallel.

The Spark counterpart of :class:`~dpstream.release.by_key.ByKey` (``release --key-column``):
Spark reads a table of ``(key, value)`` rows (text or Parquet) by the local reader's rules
(:func:`read_keyed`: the same values, keys and errors), numbers the rows in input order, groups
them by key (``groupBy(key).applyInPandas``), and every task releases its key's values, in
input order, with ``build(key_bits(secret, key))`` -- the mechanism and the keyed noise the
local engine gives that key.  A key's output therefore equals its sub-stream
released alone, and the local keyed release, whatever the partitioning; a retried task draws
the same noise again.

Privacy
-------
Each key's release has its mechanism's guarantee about that key's stream, exactly as for
:class:`~dpstream.release.by_key.ByKey` (whose docstring says what is and is not protected:
keys and their lengths are public, budgets add up across keys).  The secret travels to the
executors inside the tasks: turn on Spark's authentication and encryption on a shared cluster.
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream.io import InputError, StreamReader, open_input, read_lines, resolve_columns
from dpstream.release.by_key import key_bits, show_key
from dpstream.spark.session import require_spark

__all__ = ["keyed_frame", "read_keyed", "read_table", "release_by_key", "scan_keyed"]

#: Columns of :func:`read_keyed`: the key's text, the value and the 0-based index of its row among the input's rows.
ROWS_SCHEMA = "key string, value double, row long"
#: Rows of :data:`ROWS_SCHEMA` and, per batch of lines parsed, a note (key null): its first error's line and text,
#: the first of the blank lines it ends with and its last line that is not blank.
_PARSED_SCHEMA = f"{ROWS_SCHEMA}, line long, error string, blank long, last long"
#: ``monotonically_increasing_id``: the partition index sits above this many bits, the row's index in it below.
_PARTITION_SHIFT = 33

#: Columns of :func:`keyed_frame`: the key, the 0-based position of the value in its key's stream (-1 on the
#: key's summary row), the released value, the input row, the input row of the key's first value and the key's
#: guarantee (both on its summary row).
FRAME_SCHEMA = "key string, position long, value double, row long, first long, privacy string"


def release_by_key(
    spark: Any,
    path: str | os.PathLike[str],
    *,
    key_column: str,
    value_column: str,
    build: Callable[[Any], Any],
    secret: bytes,
    output: str | os.PathLike[str] | None = None,
) -> pa.Table | None:
    """Release every key's stream of the table at ``path`` (CSV with a header, or Parquet) on Spark.

    ``build(bits)`` returns a fresh mechanism drawing from the bit source ``bits`` (the
    ``build`` of ``release --key-column``: every parameter but the noise); key ``k`` gets
    ``build(key_bits(secret, k))``.  Returns ``key, position, value`` for every released value,
    sorted by key and position (positions are 0-based per key; held-out values release
    nothing).  With ``output`` (a directory that must not exist) Spark's executors write those
    rows there as a Parquet dataset instead, each file sorted by key and position, and nothing
    comes back to the driver: the way for many millions of rows.  The input is read by the local
    reader's rules (:func:`read_keyed`): a value it refuses (a missing one included) stops the
    release before anything is released, with its one-line error.
    """
    rows = read_keyed(spark, path, key_column=key_column, value_column=value_column)
    released = keyed_frame(rows, build=build, secret=secret).filter("position >= 0").select("key", "position", "value")
    if output is not None:
        released.sortWithinPartitions("key", "position").write.mode("errorifexists").parquet(str(output))
        return None
    return released.toArrow().sort_by([("key", "ascending"), ("position", "ascending")])


def read_keyed(spark: Any, path: str | os.PathLike[str], *, key_column: str, value_column: str | None = None) -> Any:
    """The rows of the table at ``path`` as a Spark frame ``key, value, row``, read by the local reader's rules.

    ``row`` is the 0-based index of the row among the input's data rows (input order).  A text
    file is read by :func:`dpstream.io.read_lines`, the local reader's own parser, on the
    executors: the same values, keys (an empty key is a key) and errors, naming the same
    line.  A Parquet file's columns and value type are checked by
    :class:`~dpstream.io.StreamReader`, its values by Spark (a null, NaN or infinity is refused
    with the local reader's message).  ``value_column`` None is the one column besides the key's.
    Errors are :class:`~dpstream.io.InputError`, one line, for the first bad row in input order.
    """
    rows, error = scan_keyed(spark, path, key_column=key_column, value_column=value_column)
    if error is not None:
        raise InputError(error[1])
    return rows


def scan_keyed(spark: Any, path: str | os.PathLike[str], *, key_column: str,
               value_column: str | None = None) -> tuple[Any, tuple[int, str] | None]:
    """:func:`read_keyed`'s frame and its first bad row, ``(row, message)`` or None, without raising for it:
    for a caller that weighs it against its own checks of the rows before it (``release --engine spark``
    refuses a value outside ``[0, B]`` of an earlier batch first, as the local engine does).  A bad header,
    column or file is raised at once."""
    require_spark()
    location, source = str(path), str(path)
    if "://" not in location and not Path(path).exists():
        raise InputError(f"input file {location!r} does not exist.")
    if _is_parquet(location):
        return _read_parquet(spark, location, source, key_column=key_column, column=value_column)
    return _read_text(spark, location, source, key_column=key_column, column=value_column)


def _is_parquet(location: str) -> bool:
    if Path(location).suffix.lower() in (".parquet", ".parq", ".pq") or Path(location).is_dir():
        return True
    if "://" in location or not Path(location).is_file():
        return False
    with open(location, "rb") as handle:
        return handle.read(4) == b"PAR1"


def _numbered(frame: Any) -> Any:
    """``frame`` with ``index``, the 0-based index of each row in input order (partitions in order): one
    counting job, then the partition's first index plus the row's index in it."""
    from pyspark.sql import functions as F

    part = F.spark_partition_id()
    counts = dict(frame.groupBy(part.alias("part")).count().collect())
    starts, total = [], 0
    for index in range(max(counts, default=-1) + 1):
        starts.append(total)
        total += counts.get(index, 0)
    if not starts:
        return frame.withColumn("index", F.lit(None).cast("long"))
    within = F.monotonically_increasing_id() - F.shiftleft(part.cast("long"), _PARTITION_SHIFT)
    start = F.element_at(F.array(*map(F.lit, starts)).cast("array<long>"), part + 1)
    return frame.withColumn("index", start + within)


def _read_text(spark: Any, location: str, source: str, *, key_column: str,
               column: str | None) -> tuple[Any, tuple[int, str] | None]:
    """A text file, split among the executors by Spark and parsed by :func:`dpstream.io.read_lines`."""
    from pyspark.sql import functions as F

    header = _first_line(spark, location)
    options = {"source": source, "column": column, "key_column": key_column}
    if header is None:
        return spark.createDataFrame([], ROWS_SCHEMA), None
    read_lines([], 2, header, **options)  # the header's errors, on the driver
    lines = _numbered(spark.read.text(location).select(F.col("value").cast("binary").alias("text")))

    def parse(frames: Iterator[Any]) -> Iterator[Any]:
        for frame in frames:
            yield _parse_lines(frame["text"].tolist(), int(frame["index"].iloc[0]) + 1, header, options)

    parsed = lines.mapInPandas(parse, _PARSED_SCHEMA)
    notes = parsed.filter(F.col("key").isNull()).select("line", "error", "blank", "last").collect()
    last = max((note["last"] for note in notes if note["last"] is not None), default=0)
    errors = [(note["line"], note["error"]) for note in notes if note["error"] is not None]
    blanks = [note["blank"] for note in notes if note["blank"] is not None and note["blank"] < last]
    if blanks:  # blank lines followed by a row: rows of the wrong width, the error of the local reader
        try:
            read_lines([""], min(blanks), header, **options)
        except InputError as error:
            errors.append((min(blanks), str(error)))
    rows = parsed.filter(F.col("key").isNotNull()).select("key", "value", "row")
    line, message = min(errors, default=(None, None))
    return rows, None if line is None else (line - 2, message)


def _first_line(spark: Any, location: str) -> str | None:
    """Line 1 of a text file, read as the local reader reads it (None if the file is empty)."""
    if "://" in location:
        first = spark.read.text(location).first()
        return None if first is None else first[0].removeprefix("\ufeff")
    with open_input(location) as handle:
        try:
            return next(iter(handle), None)
        except UnicodeDecodeError as error:
            raise InputError(f"{location} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise InputError(f"{location} is not a valid gzip file ({error}).") from None


def _parse_lines(texts: list[bytes], first: int, header: str, options: dict[str, Any]) -> Any:
    """Rows of :data:`ROWS_SCHEMA` from the raw lines ``first, first + 1, ...`` (up to the first bad one), and a
    last row (key null) with the first error among them (its ``line`` and ``error``), the first of the blank
    lines they end with (``blank``) and the last line that is not blank (``last``)."""
    import pandas as pd

    if first == 1:  # the header
        texts, first = texts[1:], 2
    error = line = None
    joined = b"\n".join(texts)
    try:
        lines = joined.decode("utf-8").split("\n") if texts else []
    except UnicodeDecodeError as failure:
        line = first + joined.count(b"\n", 0, failure.start)
        start = joined.rfind(b"\n", 0, failure.start) + 1
        where = f"at byte {failure.start - start} of line {line}"
        error = f"{options['source']} is not UTF-8 text ({failure.reason} {where})."
        lines = joined[: start - 1].decode("utf-8").split("\n") if start else []
    try:
        batch, read = read_lines(lines, first, header, **options)
    except InputError as failure:
        error = str(failure)
        found = re.match(rf"{re.escape(options['source'])} line (\d+)", error)
        line = int(found.group(1)) if found else first
        lines = lines[: line - first]
        batch, read = read_lines(lines, first, header, **options)  # the rows before it: read as locally
    last = line if line is not None else first + read - 1 if read else None
    keys, values, numbers = batch.keys, batch.values, batch.lines - 2
    count = len(keys)

    def note(value: int | None) -> Any:  # a column that is null on the rows and ``value`` on the note
        return pd.array([None] * count + [value], dtype="Int64")

    return pd.DataFrame({
        "key": [*keys, None],
        "value": np.append(values, np.nan),
        "row": pd.array(np.append(numbers, 0), dtype="Int64"),
        "line": note(line),
        "error": [None] * count + [error],
        "blank": note(first + read if read < len(lines) else None),
        "last": note(last),
    })


def _read_parquet(spark: Any, location: str, source: str, *, key_column: str,
                  column: str | None) -> tuple[Any, tuple[int, str] | None]:
    """A Parquet file (or a directory of them, Spark's extension) read by Spark, its schema and its first bad
    value judged by the local reader (a directory's by the same rules, in Spark's order of its files)."""
    from pyspark.sql import functions as F

    if not Path(location).is_dir() and "://" not in location:
        StreamReader(location, column=column, key_column=key_column).close()  # columns and value type
    frame = spark.read.parquet(location)
    value, _, key = resolve_columns(frame.columns, source, column=column, key_column=key_column)
    rows = _numbered(frame.select(
        F.coalesce(F.col(frame.columns[key]).cast("string"), F.lit("")).alias("key"),
        F.col(frame.columns[value]).cast("double").alias("value")))
    rows = rows.withColumnRenamed("index", "row")
    value_ok = F.col("value").isNotNull() & ~F.isnan("value") & (F.abs("value") < float("inf"))
    bad = rows.filter(~value_ok).agg(F.min("row")).first()[0]
    if bad is None:
        return rows, None
    message = (f"{source} row {bad + 1} (in Spark's order of its files), column {frame.columns[value]!r}, is "
               "missing (null or NaN) or infinite; stream values are finite and missing values are errors on Spark.")
    if not Path(location).is_dir() and "://" not in location:
        try:
            with StreamReader(location, column=column, key_column=key_column) as reader:
                for _ in reader.batches(65536):  # stops at the first bad value, with the local reader's message
                    pass
        except InputError as error:
            message = str(error)
    return rows, (bad, message)


def read_table(spark: Any, location: str) -> Any:
    """Deprecated: the table at ``location`` read by Spark's own readers (Parquet, or CSV with a header), which
    do not follow the local reader's grammar; use :func:`read_keyed`.  Goes in the next release."""
    warnings.warn("dpstream.spark.by_key.read_table is deprecated: use dpstream.spark.by_key.read_keyed, which reads "
                  "by the local reader's rules (the old name goes in the next release).", DeprecationWarning,
                  stacklevel=2)
    if _is_parquet(location):
        return spark.read.parquet(location)
    separator = "\t" if "\t" in (line := _first_line(spark, location) or "") and "," not in line else ","
    return spark.read.options(header=True, inferSchema=False, nullValue="", emptyValue="", sep=separator,
                              ignoreLeadingWhiteSpace=True, ignoreTrailingWhiteSpace=True).csv(location)


def keyed_frame(rows: Any, *, build: Callable[[Any], Any], secret: bytes, upper_bound: float | None = None) -> Any:
    """The lazy Spark frame of the keyed release of ``rows`` (a :func:`read_keyed` frame): :data:`FRAME_SCHEMA`
    rows, one per released value and one summary row per key.

    A released value's row has its ``key``, ``position`` (0-based in the key's stream), ``value``
    and its input ``row`` (increasing in input order).  Each key's summary row has ``position``
    -1, ``first`` the input row of the key's first value, ``row`` the input row after which its
    mechanism knew its threshold (its first row, or the last row of its hold-out), ``value``
    the number of its values outside ``[0, upper_bound]`` (0 without ``upper_bound``) and
    ``privacy`` the text of its mechanism's guarantee once the mechanism has its threshold
    (None if the key ended within its hold-out).
    """

    def one_key(part: Any) -> Any:
        import pandas as pd

        part = part.sort_values("row", kind="stable")
        key = str(part["key"].iloc[0])
        values = part["value"].to_numpy(dtype=np.float64)
        order = part["row"].to_numpy(dtype=np.int64)
        mechanism = build(key_bits(secret, key))
        try:
            out = np.asarray(mechanism.release(values), dtype=np.float64)
        except ValueError as error:
            raise type(error)(f"key {show_key(key)}: {error}") from None
        first = values.size - out.size  # held-out values come first and release nothing
        outside = 0 if upper_bound is None else int(np.count_nonzero((values < 0.0) | (values > upper_bound)))
        privacy = None if mechanism.threshold is None else str(mechanism.privacy())
        return pd.DataFrame({
            "key": key,
            "position": np.concatenate(([-1], np.arange(first, values.size, dtype=np.int64))),
            "value": np.concatenate(([float(outside)], out)),
            "row": np.concatenate((order[min(max(mechanism.hold - 1, 0), values.size - 1) :][:1], order[first:])),
            "first": np.concatenate((order[:1], np.full(out.size, -1, dtype=np.int64))),
            "privacy": [privacy] + [None] * out.size,
        })

    return rows.groupBy("key").applyInPandas(one_key, FRAME_SCHEMA)
