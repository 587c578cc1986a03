"""Many keyed streams on Spark: one independent release per key, in parallel.

The Spark counterpart of :class:`~dpstream.release.by_key.ByKey` (``release --key-column``):
Spark reads a table of ``(key, value)`` rows (CSV or Parquet), numbers the rows in input order
as it reads them, groups them by key (``groupBy(key).applyInPandas``), and every task releases
its key's values, in input order, with ``build(key_bits(secret, key))`` -- the mechanism and the
keyed noise the local engine gives that key.  A key's output therefore equals its sub-stream
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream.release.by_key import key_bits, show_key
from dpstream.spark.session import require_spark

__all__ = ["keyed_frame", "read_keyed", "read_table", "release_by_key"]

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
    comes back to the driver: the way for many millions of rows.  A missing value is refused
    before any release, naming its key.
    """
    rows = read_keyed(spark, path, key_column=key_column, value_column=value_column)
    released = keyed_frame(rows, build=build, secret=secret).filter("position >= 0").select("key", "position", "value")
    if output is not None:
        released.sortWithinPartitions("key", "position").write.mode("errorifexists").parquet(str(output))
        return None
    return released.toArrow().sort_by([("key", "ascending"), ("position", "ascending")])


def read_keyed(spark: Any, path: str | os.PathLike[str], *, key_column: str, value_column: str) -> Any:
    """The rows of the table at ``path`` as a Spark frame ``key, value, row`` (``row`` increasing in input
    order), checked: both columns present, no missing key or value (naming the first such key)."""
    require_spark()
    from pyspark.sql import functions as F

    location = str(path)
    if "://" not in location and not Path(path).exists():
        raise ValueError(f"input {location!r} does not exist.")
    frame = read_table(spark, location)
    missing = [name for name in (key_column, value_column) if name not in frame.columns]
    if missing:
        raise ValueError(f"the input {location!r} lacks column(s) {missing}; it has {list(frame.columns)}.")
    key = F.col(key_column).cast("string")
    if not _is_parquet(location):  # keys as the local reader takes them: one pair of enclosing quotes removed
        key = F.when(key.rlike("^'.*'$") & (F.length(key) >= 2), F.trim(F.regexp_extract(key, "^'(.*)'$", 1)))\
            .otherwise(key)
    rows = frame.select(
        key.alias("key"),
        F.col(value_column).cast("double").alias("value"),
        F.monotonically_increasing_id().alias("row"),  # increasing in input order: the order of each stream
    )
    bad = rows.filter(F.col("value").isNull() | F.isnan("value") | F.col("key").isNull()).first()
    if bad is not None:
        what = (
            "a missing key" if bad["key"] is None
            else f"a missing or non-numeric value under key {show_key(bad['key'])}"
        )
        raise ValueError(f"the input {location!r} has {what}.")
    return rows


def _is_parquet(location: str) -> bool:
    return Path(location).suffix in (".parquet", ".pq") or Path(location).is_dir()


def read_table(spark: Any, location: str) -> Any:
    """The table at ``location`` as a Spark frame: Parquet (a file or a directory), or CSV with a header read
    as the local reader reads it (comma-separated, or tab-separated when the header has a tab and no comma;
    fields trimmed of blanks; an empty field is missing)."""
    if _is_parquet(location):
        return spark.read.parquet(location)
    separator = ","
    if "://" not in location:
        opener = gzip.open if location.endswith(".gz") else open
        with opener(location, "rt", encoding="utf-8", errors="replace") as handle:
            line = handle.readline()
        separator = "\t" if "\t" in line and "," not in line else ","
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
