"""Population aggregates on Spark Structured Streaming: ``aggregate --engine spark-streaming``, exactly once.

:func:`start_aggregate` runs ``aggregate`` (:class:`~dpstream.release.aggregate.UnitAggregate`) as a
streaming query over a directory of source files, as :func:`~dpstream.spark.streaming.start_release`
does for keyed streams:

1. Spark's ``binaryFile`` source takes the new files in order of modification time (hidden
   files are not read: write under a hidden name, then rename);
2. each file is read on an executor by the local row reader (:func:`~dpstream.io.rows.read_rows`:
   CSV, ``.gz`` or Parquet, its one-line errors naming the file) and its times parsed by the one
   time parser;
3. the aggregate is one stream of buckets, so all rows go to **one** state group
   (``applyInPandasWithState``): its :class:`~dpstream.release.aggregate_watermark.WatermarkAggregate`
   is restored from the state store, takes the micro-batch's rows in arrival order (file by file,
   each file's rows in its order) and is saved back.  A bucket is released once the watermark
   (the newest event time seen, minus ``--allowed-lateness``) passes its end; a row of a bucket
   already released is late: dropped, in no released value;
4. ``foreachBatch`` writes the released rows, ``bucket,partition,value`` as ``aggregate`` writes
   them, to ``SINK/batch-<id>.csv`` atomically before Spark commits the batch.

Exactly once.  The aggregate runs in ``key=`` mode with the secret as its key: the noise of every
window is a function of the secret and the window, and the state store keeps the snapshot without
the key.  A replayed micro-batch starts from the committed state, reads the same files in the same
order and writes the same bytes.  The secret is never in the checkpoint (``dpstream.json`` there
records the parameters and an HMAC check of the secret, as for keyed releases).

The local counterpart is :func:`aggregate_files`: the same files in the same order release the same
buckets, whatever the micro-batches; ``aggregate --allowed-lateness D`` on the files joined in that
order releases the same rows (and, at the end of its input, the buckets the watermark left open).
One stateful group runs on one executor core at a time: the query scales with the reading and
parsing of files, not with the aggregate's step.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dpstream.durable.encoding import decode, encode
from dpstream.durable.files import write_atomic
from dpstream.durable.snapshots import keyless, with_key
from dpstream.io import InputError
from dpstream.io.rows import read_rows
from dpstream.io.times import format_times, parse_times, time_kind
from dpstream.release.aggregate import Released, UnitAggregate
from dpstream.release.aggregate_watermark import WatermarkAggregate
from dpstream.spark.session import require_spark
from dpstream.spark.streaming import SINK_PATTERN, _local_name, _nanoseconds, source_files

__all__ = ["aggregate_files", "read_aggregate_sink", "read_rows_file", "start_aggregate"]

#: Columns of the rows read from the source files (:func:`read_rows_file`).
ROWS_SCHEMA = "file_time long, file string, row long, time_ns long, unit string, value double, partition string"
#: Columns of the released rows: their order in the release, then as ``aggregate`` writes them.
OUT_SCHEMA = "seq long, bucket string, partition string, value double"
#: Rows read from a source file at a time.
_BATCH = 1 << 16
#: A check of a step's rows (of :data:`ROWS_SCHEMA`, in arrival order) against the aggregate before it takes them.
RowsCheck = Callable[[UnitAggregate, pd.DataFrame], None]


def read_rows_file(path: str, data: bytes | None, *, file_time: int, columns: dict[str, Any]) -> pd.DataFrame:
    """The rows of one source file as a frame of :data:`ROWS_SCHEMA`, by the local reader's rules (``columns``:
    ``time_column``, ``unit_column``, ``column``, ``partition_column``, ``missing`` as ``read_rows`` takes them;
    ``missing="skip"`` rows dropped).  ``data`` is the file's content (None: read ``path``).  Errors are
    :class:`~dpstream.io.InputError`, one line naming ``path``."""
    if data is None:
        return _read(path, path, file_time, columns)
    with tempfile.TemporaryDirectory(prefix="dpstream-") as folder:
        local = Path(folder) / (Path(path).name or "input")
        local.write_bytes(data)
        try:
            return _read(str(local), path, file_time, columns)
        except InputError as error:
            raise InputError(str(error).replace(str(local), path)) from None


def _read(local: str, path: str, file_time: int, columns: dict[str, Any]) -> pd.DataFrame:
    parts, kind = [], None
    for batch in read_rows(local, batch_rows=_BATCH, **columns):
        if not len(batch):
            continue
        kind = kind or time_kind(str(batch.times[0]))
        try:
            times = parse_times(batch.times, kind=kind, first_row=batch.first_row)
        except InputError as error:
            raise InputError(f"{path}: {error}") from None
        keep = ~batch.missing if columns.get("missing") == "skip" else np.ones(len(batch), dtype=bool)
        rows = np.arange(batch.first_row, batch.first_row + len(batch))
        partitions = (batch.partitions.to_numpy(zero_copy_only=False) if batch.partitions is not None
                      else np.full(len(batch), None, dtype=object))
        parts.append(pd.DataFrame({"row": rows[keep], "time_ns": np.asarray(times, dtype=np.int64)[keep],
                                   "unit": batch.units.to_numpy(zero_copy_only=False)[keep],
                                   "value": batch.values[keep], "partition": partitions[keep]}))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {"row": np.empty(0, np.int64), "time_ns": np.empty(0, np.int64), "unit": pd.array([], dtype=object),
         "value": np.empty(0), "partition": pd.array([], dtype=object)})
    frame.insert(0, "file", path)
    frame.insert(0, "file_time", np.int64(file_time))
    return frame


def released_frame(marked: WatermarkAggregate, released: list[Released], first: int) -> pd.DataFrame:
    """Released rows as a frame of :data:`OUT_SCHEMA`, numbered from ``first`` in release order."""
    parts = [r for r in released if len(r)]
    buckets = np.concatenate([r.buckets for r in parts]) if parts else np.empty(0, np.int64)
    indices = np.concatenate([r.partitions for r in parts]) if parts else np.empty(0, np.int64)
    values = np.concatenate([r.values for r in parts]) if parts else np.empty(0)
    names = np.asarray(marked.aggregate.partition_names, dtype=object)
    return pd.DataFrame({"seq": np.arange(first, first + values.size, dtype=np.int64),
                         "bucket": pd.array(format_times(buckets), dtype=object),
                         "partition": pd.array(names[indices], dtype=object), "value": values})


def step(rows: pd.DataFrame, stored: dict[str, Any] | None, *, params: dict[str, Any], lateness: int,
         secret: bytes, check: RowsCheck | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One micro-batch's step (or one file's, locally): the watermarked aggregate restored from ``stored``
    (None: a new one), fed ``rows`` in arrival order (file, then row); the released rows and the new state.
    ``check(aggregate, rows)``, before any work, may refuse the rows (a :class:`ValueError`: ``aggregate``'s long-gap
    check)."""
    if stored is None:
        marked, sent = WatermarkAggregate(UnitAggregate(**params, key=secret), lateness=lateness), 0
    else:
        aggregate = UnitAggregate.from_state(with_key(decode(stored["aggregate"]), secret))
        marked, sent = WatermarkAggregate.from_state(decode(stored["watermark"]), aggregate), int(stored["sent"])
    rows = rows.sort_values(["file_time", "file", "row"], kind="stable")
    if check is not None:
        check(marked.aggregate, rows)
    partitions = None if params.get("partitions") is None and params.get("partition_selection") != "private" \
        else rows["partition"].to_numpy(dtype=object)
    released = list(marked.release(rows["time_ns"].to_numpy(np.int64), rows["unit"].to_numpy(dtype=object),
                                   rows["value"].to_numpy(np.float64), partitions))
    out = released_frame(marked, released, sent)
    state = marked.state
    return out, {"aggregate": encode(keyless(state.pop("aggregate"))), "watermark": encode(state),
                 "sent": sent + len(out)}


def start_aggregate(spark: Any, source: str | os.PathLike[str], *, sink: str | os.PathLike[str],
                    checkpoint: str | os.PathLike[str], params: dict[str, Any], columns: dict[str, Any],
                    lateness: int, secret: bytes, available_now: bool = True, files_per_batch: int | None = None,
                    on_batch: Callable[[int, int], None] | None = None, check: RowsCheck | None = None) -> Any:
    """Start the streaming aggregate of the files in the directory ``source`` (see the module docstring).

    ``params`` are :class:`UnitAggregate`'s (JSON-able, ``late="drop"``), ``columns`` the reader's
    (:func:`read_rows_file`), ``lateness`` the allowed lateness in seconds; the noise comes from
    ``secret``; ``check`` is :func:`step`'s.  Released rows go to ``sink``
    (:data:`~dpstream.spark.streaming.SINK_PATTERN`), the checkpoint to ``checkpoint`` (a restart with other
    parameters or another secret refused, :class:`ValueError`).  Returns the running ``StreamingQuery``.
    """
    require_spark()
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    UnitAggregate(**params, key=secret)  # refuse bad parameters before the checkpoint records them
    files = source_files(spark, source, sink=sink, checkpoint=checkpoint, secret=secret,
                         files_per_batch=files_per_batch,
                         params={"aggregate": params, "columns": columns, "lateness": lateness})

    def parse(frames: Iterator[Any]) -> Iterator[Any]:
        for frame in frames:
            for path, modified, content in zip(frame["path"], frame["modificationTime"], frame["content"]):
                yield read_rows_file(_local_name(path), content, file_time=_nanoseconds(modified), columns=columns)

    def group_step(group: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        rows = pd.concat(list(frames), ignore_index=True)
        out, stored = step(rows, json.loads(state.get[0]) if state.exists else None, params=params,
                           lateness=lateness, secret=secret, check=check)
        state.update((json.dumps(stored, separators=(",", ":")),))
        if len(out):
            yield out

    rows = files.select("path", "modificationTime", "content").mapInPandas(parse, ROWS_SCHEMA)
    released = rows.withColumn("group", F.lit(0)).groupBy("group").applyInPandasWithState(
        group_step, OUT_SCHEMA, "state string", "append", GroupStateTimeout.NoTimeout)
    writer = (released.writeStream.foreachBatch(_batch_writer(Path(sink), on_batch))
              .option("checkpointLocation", str(checkpoint)).queryName("dpstream-aggregate"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _batch_writer(sink: Path, on_batch: Callable[[int, int], None] | None) -> Callable[[Any, int], None]:
    """``foreachBatch``'s function: the micro-batch's rows in release order to ``sink/batch-<id>.csv``, written whole
    before Spark commits the batch (a replay writes the same bytes)."""

    def write(frame: Any, batch_id: int) -> None:
        table = frame.toArrow().sort_by([("seq", "ascending")])
        write_atomic(sink / SINK_PATTERN.format(batch_id), sink_bytes(table))
        if on_batch is not None:
            on_batch(batch_id, table.num_rows)

    return write


def sink_bytes(table: pa.Table) -> bytes:
    """Released rows as ``aggregate`` writes them: ``bucket,partition,value``, floats as ``repr``."""
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(["bucket", "partition", "value"])
    out.writerows(zip(table["bucket"].to_pylist(), table["partition"].to_pylist(),
                      map(repr, table["value"].to_pylist())))
    return text.getvalue().encode("utf-8")


def read_aggregate_sink(sink: str | os.PathLike[str]) -> list[tuple[str, str, str]]:
    """Every released row of a sink's batch files in release order: ``(bucket, partition, value)`` as written."""
    rows: list[tuple[str, str, str]] = []
    for path in sorted(Path(sink).glob("batch-*.csv")):
        with open(path, newline="") as handle:
            rows += [tuple(row) for row in list(csv.reader(handle))[1:]]  # type: ignore[misc]
    return rows


def aggregate_files(paths: Sequence[str | os.PathLike[str]], *, params: dict[str, Any], columns: dict[str, Any],
                    lateness: int, secret: bytes, check: RowsCheck | None = None) -> list[tuple[str, str, str]]:
    """The local counterpart of :func:`start_aggregate`: the files ``paths`` in this order (the query's: by
    modification time) through the same step, in this process; the released rows as the sink holds them."""
    stored, out = None, []
    for place, path in enumerate(paths):
        rows = read_rows_file(str(path), None, file_time=place, columns=columns)
        frame, stored = step(rows, stored, params=params, lateness=lateness, secret=secret, check=check)
        out.append(frame)
    table = pa.Table.from_pandas(pd.concat(out, ignore_index=True), preserve_index=False) if out else None
    if table is None:
        return []
    text = sink_bytes(table).decode("utf-8").splitlines()[1:]
    return [tuple(row) for row in csv.reader(text)]  # type: ignore[misc]
