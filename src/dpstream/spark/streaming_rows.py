"""The rows of a streaming keyed release and what one key does with them: shared by Spark and the local counterpart.

A source file is read by the local reader (:class:`~dpstream.io.StreamReader`: CSV, text, ``.gz`` or
Parquet, the same grammar and one-line errors naming the file's line or row) and its time column
parsed by the one time parser (:func:`~dpstream.io.times.parse_times`, ISO 8601 or epoch seconds,
decided per file by its first time).  Every row gets its *order*: its file's place (modification
time, then path), its time in nanoseconds, its value, its time as written.

:func:`advance` is one key's step over rows of one or more files, the same on Spark's executors
(per key and micro-batch) and in :func:`release_files` (per key and file): the key's rows of each
file, in file order, are sorted by (time, value, time text) -- Spark keeps no row order within a
micro-batch, so the order must come from the data, and rows equal in all three are interchangeable --
and a row whose (time, value, time text) is not after the last row the key consumed from an earlier
file is *late*: it is dropped, counted nowhere (a count would be data outside the guarantee).  The
rows kept feed the key's mechanism in one ``release`` call.  Which rows are late depends on the order
of the files only, never on how they are grouped into micro-batches.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from dpstream.durable.encoding import decode, encode
from dpstream.durable.snapshots import keyless, with_key
from dpstream.io import InputError, StreamReader
from dpstream.io.times import parse_times, time_kind
from dpstream.release.by_key import key_secret, show_key
from dpstream.release.registry import class_of_kind

__all__ = ["ROWS_SCHEMA", "RELEASED_SCHEMA", "STATE_SCHEMA", "Last", "Released", "advance", "read_file",
           "release_files", "restore_stream", "save_stream", "step_keys"]

#: Columns of the rows read from the source files (:func:`read_file`).
ROWS_SCHEMA = "key string, file_time long, file string, time_ns long, value double, time string"
#: Columns of the released rows: the key, the 0-based position in its stream, the time as written, the value.
RELEASED_SCHEMA = "key string, position long, time string, value double"
#: Columns of a group's state: JSON of its keys' mechanisms' snapshots (without their keys) and last rows.
STATE_SCHEMA = "keys string"
#: Rows read from a source file at a time.
_BATCH = 65536


class Last(NamedTuple):
    """The order of the last row a key consumed: a row must come after it, else it is late."""

    time_ns: int
    value: float
    time: str


def read_file(path: str, data: bytes | None, *, file_time: int, key_column: str, time_column: str,
              value_column: str | None) -> pd.DataFrame:
    """The rows of one source file as a frame of :data:`ROWS_SCHEMA`, read by the local reader's rules.

    ``data`` is the file's content (Spark's ``binaryFile`` source: a file on any file system Spark
    reads), written to a private temporary file of the same name for the reader; None reads
    ``path`` itself.  Errors are :class:`~dpstream.io.InputError`, one line naming ``path``.
    """
    if data is None:
        return _read(path, path, file_time, key_column, time_column, value_column)
    with tempfile.TemporaryDirectory(prefix="dpstream-") as folder:
        local = Path(folder) / (Path(path).name or "input")
        local.write_bytes(data)
        try:
            return _read(str(local), path, file_time, key_column, time_column, value_column)
        except InputError as error:
            raise InputError(str(error).replace(str(local), path)) from None


def _read(local: str, path: str, file_time: int, key_column: str, time_column: str,
          value_column: str | None) -> pd.DataFrame:
    keys: list[str] = []
    times: list[str] = []
    values, lines = [], []
    with StreamReader(local, column=value_column, time_column=time_column, key_column=key_column) as reader:
        for batch in reader.batches(_BATCH):
            keys += batch.keys
            times += batch.times
            values.append(batch.values)
            lines.append(batch.lines)
        unit = "row" if reader.format == "parquet" else "line"
    numbers = np.concatenate(lines) if lines else np.empty(0, dtype=np.int64)
    try:
        nanoseconds = parse_times(times, kind=time_kind(times[0]), first_row=0) if times else numbers
    except InputError as error:
        index, _, problem = str(error).removeprefix("row ").partition(": ")
        raise InputError(f"{path} {unit} {numbers[int(index)]}, column {time_column!r}: {problem}") from None
    return pd.DataFrame({"key": pd.array(keys, dtype=object), "file_time": np.int64(file_time), "file": path,
                         "time_ns": np.asarray(nanoseconds, dtype=np.int64),
                         "value": np.concatenate(values) if values else np.empty(0), "time": times})


def restore_stream(key: str, snapshot: Any, *, build: Callable[[bytes], Any], secret: bytes) -> Any:
    """Key ``key``'s mechanism: built with ``build(key_secret(secret, key))`` (None: a new key), else restored from
    its stored ``snapshot`` (:func:`save_stream`) with that key put back; its noise is recomputed from the key."""
    own = key_secret(secret, key)
    if snapshot is None:
        return build(own)
    state = decode(snapshot)
    return class_of_kind(state.get("mechanism")).from_state(with_key(state, own))


def save_stream(stream: Any) -> Any:
    """A mechanism's snapshot as stored in the state store: JSON data, without its key (SECRET all the same: it
    holds the raw values of a hold-out that lasts, and running sums)."""
    return encode(keyless(stream.state))


def step_keys(rows: pd.DataFrame, stored: dict[str, Any], *, build: Callable[[bytes], Any],
              secret: bytes) -> pd.DataFrame:
    """Every key's step (:func:`advance`) over its ``rows`` (:data:`ROWS_SCHEMA`), keys in sorted order: its
    mechanism and last row restored from ``stored`` (key -> ``{"snapshot", "last"}``, JSON data, updated in
    place), the released rows (:data:`RELEASED_SCHEMA`) returned.  What one group of keys does in one
    micro-batch on Spark, and in one file in :func:`release_files`."""
    keys = rows["key"].to_numpy(dtype=object)
    if not keys.size:
        return _empty()
    names, inverse = np.unique(keys, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")  # the rows of each key
    bounds = np.r_[0, np.cumsum(np.bincount(inverse.reshape(-1)))].tolist()
    columns = {name: rows[name].to_numpy() for name in ("file_time", "file", "time_ns", "value", "time")}
    parts = []
    for code, key in enumerate(names.tolist()):
        mine = order[bounds[code] : bounds[code + 1]]
        entry = stored.get(key) or {"snapshot": None, "last": None}
        stream = restore_stream(key, entry["snapshot"], build=build, secret=secret)
        released, last = advance(key, stream, None if entry["last"] is None else Last(*entry["last"]),
                                 {name: column[mine] for name, column in columns.items()})
        stored[key] = {"snapshot": save_stream(stream), "last": None if last is None else list(last)}
        parts.append((np.full(released.value.size, code), released))
    return pd.DataFrame({"key": pd.array(names[np.concatenate([code for code, _ in parts])], dtype=object),
                         **{name: np.concatenate([getattr(part, name) for _, part in parts])
                            for name in ("position", "time", "value")}})


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"key": pd.array([], dtype=object), "position": np.empty(0, dtype=np.int64),
                         "time": pd.array([], dtype=object), "value": np.empty(0)})


class Released(NamedTuple):
    """What one key's step released: positions (0-based in its stream), times as written, values."""

    position: np.ndarray
    time: np.ndarray
    value: np.ndarray


def advance(key: str, stream: Any, last: Last | None, rows: Any) -> tuple[Released, Last | None]:
    """Key ``key``'s step over its ``rows`` (the columns of :data:`ROWS_SCHEMA` but the key, a frame or arrays; one
    or more files): what it released and the order of its last row (see the module docstring).  ``stream``
    consumes the rows kept; a value it refuses raises its error, prefixed with the key, as the local keyed release
    does."""
    file_time, file = np.asarray(rows["file_time"], dtype=np.int64), np.asarray(rows["file"], dtype=object)
    several = file.size > 1 and bool((file[1:] != file[:-1]).any())
    files = np.unique(file, return_inverse=True)[1].reshape(-1) if several else np.zeros(file.size, dtype=np.int64)
    time, value, text = (np.asarray(rows["time_ns"], dtype=np.int64), np.asarray(rows["value"], dtype=np.float64),
                         np.asarray(rows["time"], dtype=object))
    order = _order(file_time, files, time, value, text)
    file_time, files, time, value, text = (column[order] for column in (file_time, files, time, value, text))
    keep = np.zeros(order.size, dtype=bool)
    starts = np.flatnonzero(np.r_[True, (file_time[1:] != file_time[:-1]) | (files[1:] != files[:-1])])
    for start, stop in zip(starts.tolist(), np.r_[starts[1:], order.size].tolist()):
        late = 0 if last is None else int(_not_after(time[start:stop], value[start:stop], text[start:stop],
                                                     last).sum())  # sorted: the late rows come first
        keep[start + late : stop] = True
        if late < stop - start:
            last = Last(int(time[stop - 1]), float(value[stop - 1]), str(text[stop - 1]))
    values, texts = value[keep], text[keep]
    before = stream.position
    try:
        out = np.asarray(stream.release(values), dtype=np.float64)
    except ValueError as error:
        raise type(error)(f"key {show_key(key)}: {error}") from None
    first = values.size - out.size  # held-out values come first and release nothing
    return Released(np.arange(before + first, before + values.size, dtype=np.int64), texts[first:], out), last


def _order(file_time: np.ndarray, files: np.ndarray, time: np.ndarray, value: np.ndarray,
           text: np.ndarray) -> np.ndarray:
    """The rows sorted by file (time, then path), time, value and time text: numpy's sort on the numbers, and the
    texts compared only where rows tie on all of them (rare: one key's rows with equal times and values)."""
    order = np.lexsort((value, time, files, file_time))
    ties = np.ones(max(order.size - 1, 0), dtype=bool)
    for column in (file_time, files, time, value):
        ties &= column[order][1:] == column[order][:-1]
    if not ties.any():
        return order
    return np.array(sorted(range(order.size), key=lambda i: (file_time[i], files[i], time[i], value[i], text[i])),
                    dtype=np.int64)


def _not_after(time: np.ndarray, value: np.ndarray, text: np.ndarray, last: Last) -> np.ndarray:
    """Whether each row's (time, value, time text) is at most ``last``'s (lexicographic)."""
    tied = (time == last.time_ns) & (value == last.value)
    tied[tied] = [item <= last.time for item in text[tied]]  # the texts compared where all else ties only
    return (time < last.time_ns) | (time == last.time_ns) & (value < last.value) | tied


def release_files(paths: Sequence[str | os.PathLike[str]], *, key_column: str, time_column: str,
                  value_column: str | None = None, build: Callable[[bytes], Any], secret: bytes) -> pa.Table:
    """The local counterpart of :func:`dpstream.spark.streaming.start_release`: the files ``paths``, in this order
    (the order the query takes them in: by modification time), released in this process by the same rules and
    :func:`advance`; ``key, position, time, value`` sorted by key and position.  For the same files and secret it
    equals what the query's sink holds, whatever the micro-batches (tests and a check of a sink)."""
    stored: dict[str, Any] = {}
    out = []
    for place, path in enumerate(paths):
        rows = read_file(str(path), None, file_time=place, key_column=key_column, time_column=time_column,
                         value_column=value_column)
        out.append(step_keys(rows, stored, build=build, secret=secret))
    table = pa.Table.from_pandas(pd.concat(out, ignore_index=True) if out else _empty(), preserve_index=False)
    return table.sort_by([("key", "ascending"), ("position", "ascending")])
