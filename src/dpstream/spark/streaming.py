"""Keyed continual release on Spark Structured Streaming: exactly once, with keyed noise.

:func:`start_release` runs ``release --key-column`` as a streaming query over a directory of
source files (CSV, text, ``.gz`` or Parquet, one file at a time by the local reader's rules,
:mod:`dpstream.spark.streaming_rows`):

1. Spark's ``binaryFile`` source takes the new files of the directory in order of their
   modification time (hidden files, ``.name`` or ``_name``, are not read: write a file under such a
   name, then rename it into place);
2. each file is parsed on an executor, its time column read by the one time parser;
3. the rows are grouped by a hash of their key into :data:`GROUPS` groups
   (``applyInPandasWithState``, one state value per group): every key of a group that has rows
   has its mechanism restored from the group's state, consumes the key's rows of the micro-batch
   in order of (time, value, time text), file by file, rows not after the key's last row dropped
   as late (:func:`~dpstream.spark.streaming_rows.advance`), and is saved back;
4. ``foreachBatch`` writes the micro-batch's released rows, ``key,position,time,value`` sorted by
   key and position, to ``SINK/batch-<id>.csv`` atomically (a temporary file renamed), and
   Spark commits the batch after that.

Exactly once.  Key ``k``'s mechanism runs in ``key=`` mode with ``key_secret(secret, k)``: the
noise of every position is a function of the secret, the key and the position, and the state
store keeps the mechanism's snapshot without the noise.  A micro-batch that Spark runs again after
a failure (the driver killed after writing a batch's file but before committing it, say) starts
from the state the previous batch committed, reads the same files, sorts the same rows into the
same positions and draws the same noise: it writes the same file again, byte for byte.  Nothing
is released twice and no released value changes; the budget is spent once per position.

The secret.  It is not in the checkpoint: Spark's checkpoint (offsets, commits, the state store's
snapshots) can be copied, backed up or inspected like any job's, and with it alone no noise can
be recomputed.  The caller holds the secret and passes it to every run of the same query
(``release --engine spark-streaming --secret-file FILE``: 32 bytes in a file of its own, mode
0600, outside the checkpoint); the executors receive it inside the tasks (turn on Spark's
authentication and encryption on a shared cluster).  The checkpoint holds ``dpstream.json``: the
release's parameters and an HMAC of a fixed text under the secret, so a run with another secret or
other parameters is refused before anything is read.

The local counterpart is :func:`~dpstream.spark.streaming_rows.release_files`: the same files in
the same order give the sink's rows, whatever the micro-batches.

Privacy
-------
Each key's release has its mechanism's guarantee about that key's stream, as ``release
--key-column`` (see :mod:`dpstream.release.by_key`: keys and how many values each has are public,
budgets add up across keys).  Which rows are late is a function of the order of the files and of
each key's rows in them; late rows are dropped and counted nowhere.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from dpstream.durable.files import write_atomic
from dpstream.spark.session import require_spark
from dpstream.spark.streaming_rows import (
    RELEASED_SCHEMA,
    ROWS_SCHEMA,
    STATE_SCHEMA,
    read_file,
    step_keys,
)

__all__ = ["GROUPS", "PARAMETERS", "SINK_PATTERN", "read_sink", "source_files", "start_release", "streaming_conf"]

#: Groups of keys in the state store: one state value per group (PySpark's cost per group, milliseconds, is
#: paid per group rather than per key), each rewritten when one of its keys has rows.
GROUPS = 1024
#: The file of the checkpoint directory that records the release's parameters and the secret's check.
PARAMETERS = "dpstream.json"
#: The sink's file of micro-batch ``id``.
SINK_PATTERN = "batch-{:012d}.csv"
#: The text whose HMAC under the secret the checkpoint records (the secret itself is never stored).
_CHECK = b"dpstream.spark.streaming secret check v1"
#: The state store ``applyInPandasWithState`` keeps the keys' mechanisms in (RocksDB: off the JVM's heap).
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: The columns of Spark's ``binaryFile`` source (a streaming source is given its schema).
_FILES_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def streaming_conf(conf: dict[str, str], cores: int | None = None) -> dict[str, str]:
    """``conf`` with the defaults of a streaming release where not given: the RocksDB state store, ``cores``
    (default: this machine's) shuffle partitions (a checkpoint fixes the number of state partitions for its life:
    Spark's default of 200 means 200 state stores per micro-batch, slow on one machine; raise it for a cluster's
    first run) and PySpark's own FutureWarning about its frames kept off the user's screen.

    >>> streaming_conf({"spark.sql.shuffle.partitions": "16"})["spark.sql.shuffle.partitions"]
    '16'
    """
    return {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.executorEnv.PYTHONWARNINGS": "ignore::FutureWarning",  # pyspark's own concat of empty frames
            "spark.sql.shuffle.partitions": str(max(1, cores or os.cpu_count() or 2)), **conf}


def start_release(spark: Any, source: str | os.PathLike[str], *, sink: str | os.PathLike[str],
                  checkpoint: str | os.PathLike[str], key_column: str, time_column: str, build: Callable[[bytes], Any],
                  secret: bytes, value_column: str | None = None, params: dict[str, Any] | None = None,
                  available_now: bool = True, files_per_batch: int | None = None,
                  trigger_seconds: float | None = None, on_batch: Callable[[int, int], None] | None = None,
                  groups: int = GROUPS) -> Any:
    """Start the streaming keyed release of the files in the directory ``source`` (see the module docstring).

    ``build(key)`` returns a fresh mechanism whose noise comes from ``key`` (``key=`` mode, as
    ``release --state`` builds them); key ``k`` gets ``build(key_secret(secret, k))``.  Released
    rows go to the directory ``sink`` (:data:`SINK_PATTERN`, one file per micro-batch), Spark's
    checkpoint to ``checkpoint``; ``params`` (JSON-able) are recorded in the checkpoint with the
    secret's check, and a restart with others is refused (:class:`ValueError`).  ``available_now``
    processes the files there when the query starts and stops (``query.awaitTermination()``);
    otherwise the query looks for new files every ``trigger_seconds`` (default: as soon as the last
    micro-batch ends) until stopped.  ``files_per_batch`` caps the files of a micro-batch;
    ``on_batch(batch_id, rows)`` is called on the driver once a micro-batch's file is written.  The state
    store holds the keys in ``groups`` groups by a hash of the key (fixed for the checkpoint's life).
    Returns the running ``StreamingQuery``.
    """
    require_spark()
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    files = source_files(spark, source, sink=sink, checkpoint=checkpoint, secret=secret,
                         files_per_batch=files_per_batch,
                         params=dict(params or {}, key_column=key_column, time_column=time_column,
                                     value_column=value_column, groups=groups))
    columns = {"key_column": key_column, "time_column": time_column, "value_column": value_column}

    def parse(frames: Iterator[Any]) -> Iterator[Any]:
        for frame in frames:
            for path, modified, content in zip(frame["path"], frame["modificationTime"], frame["content"]):
                yield read_file(_local_name(path), content, file_time=_nanoseconds(modified), **columns)

    rows = files.select("path", "modificationTime", "content").mapInPandas(parse, ROWS_SCHEMA)
    group = F.pmod(F.xxhash64("key"), F.lit(groups))  # Spark's hash: the same on every run
    released = rows.withColumn("group", group).groupBy("group").applyInPandasWithState(
        _group_step(build, secret), RELEASED_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    writer = (released.writeStream.foreachBatch(_batch_writer(Path(sink), on_batch))
              .option("checkpointLocation", str(checkpoint)).queryName("dpstream-release"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def source_files(spark: Any, source: str | os.PathLike[str], *, sink: str | os.PathLike[str],
                 checkpoint: str | os.PathLike[str], secret: bytes, params: dict[str, Any],
                 files_per_batch: int | None) -> Any:
    """What every streaming query checks before it starts -- a secret of at least 16 bytes, a source directory,
    the checkpoint's record of ``params`` and the secret's check (:func:`check_parameters`) -- the sink directory
    made, and the stream of the source's files (Spark's ``binaryFile`` source, at most ``files_per_batch`` a
    micro-batch)."""
    if not isinstance(secret, bytes) or len(secret) < 16:
        raise ValueError("the secret must be at least 16 bytes (32 random bytes, e.g. os.urandom(32)).")
    if not Path(source).is_dir() and "://" not in str(source):
        raise ValueError(f"the source {str(source)!r} is not a directory: the query reads the files put in one.")
    check_parameters(Path(checkpoint), params, secret)
    Path(sink).mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format("binaryFile").schema(_FILES_SCHEMA)
    if files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", int(files_per_batch))
    return reader.load(str(source))


def _local_name(path: str) -> str:
    """A ``file:`` URI as a path (what the messages name), any other URI as it is."""
    return path.removeprefix("file://") if path.startswith("file:///") else path.removeprefix("file:")


def _nanoseconds(modified: Any) -> int:
    """A file's modification time (a pandas timestamp or datetime) in integer nanoseconds: its place in the order."""
    import pandas as pd

    return int(pd.Timestamp(modified).value)


def _group_step(build: Callable[[bytes], Any], secret: bytes) -> Callable[..., Iterator[Any]]:
    """The function ``applyInPandasWithState`` runs for one group of keys and micro-batch: restore, advance and
    save every key of the group that has rows (:func:`~dpstream.spark.streaming_rows.step_keys`)."""

    def step(group: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True)
        stored = json.loads(state.get[0]) if state.exists else {}
        released = step_keys(rows, stored, build=build, secret=secret)
        state.update((json.dumps(stored, separators=(",", ":")),))
        if len(released):
            yield released

    return step


def _batch_writer(sink: Path, on_batch: Callable[[int, int], None] | None) -> Callable[[Any, int], None]:
    """``foreachBatch``'s function: the micro-batch's released rows to ``sink/batch-<id>.csv``, written whole (a
    temporary renamed into place) before Spark commits the batch; a replayed batch writes the same bytes."""

    def write(frame: Any, batch_id: int) -> None:
        table = frame.toArrow().sort_by([("key", "ascending"), ("position", "ascending")])
        write_atomic(sink / SINK_PATTERN.format(batch_id), sink_bytes(table))
        if on_batch is not None:
            on_batch(batch_id, table.num_rows)

    return write


def sink_bytes(table: pa.Table) -> bytes:
    """Released rows as the sink's CSV: the header ``key,position,time,value`` and the rows as the local engine
    writes them (floats as ``repr``, fields quoted as the csv module does)."""
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(["key", "position", "time", "value"])
    out.writerows(zip(*(table[name].to_pylist() for name in ("key", "position", "time", "value"))))
    return text.getvalue().encode("utf-8")


def read_sink(sink: str | os.PathLike[str]) -> pa.Table:
    """Every row of a sink's batch files, ``key, position, time, value`` sorted by key and position.

    Raises :class:`ValueError` if a (key, position) appears twice: the sink's promise is each once.
    """
    import pyarrow.csv as pa_csv

    types = {"key": pa.string(), "position": pa.int64(), "time": pa.string(), "value": pa.float64()}
    options = pa_csv.ConvertOptions(column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False)
    tables = [pa_csv.read_csv(path, convert_options=options) for path in sorted(Path(sink).glob("batch-*.csv"))]
    if not tables:
        return pa.table({name: pa.array([], type=kind) for name, kind in types.items()})
    table = pa.concat_tables(tables).sort_by([("key", "ascending"), ("position", "ascending")])
    pairs = table.select(["key", "position"]).group_by(["key", "position"]).aggregate([([], "count_all")])
    if len(pairs) != len(table):
        raise ValueError(f"{sink}: a key's position appears in two batch files.")
    return table


def check_parameters(checkpoint: Path, params: dict[str, Any], secret: bytes) -> None:
    """Record ``params`` and the secret's check in ``checkpoint``/:data:`PARAMETERS` on the first run; refuse a
    later run whose parameters or secret differ (one line), before Spark reads anything."""
    check = hmac.new(secret, _CHECK, hashlib.sha256).hexdigest()
    record = checkpoint / PARAMETERS
    if not record.exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps({"params": params, "secret_check": check}, sort_keys=True).encode())
        return
    try:
        stored = json.loads(record.read_text())
        stored_params, stored_check = stored["params"], stored["secret_check"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{record} is not the record of a streaming release (damaged?).") from None
    if not hmac.compare_digest(stored_check, check):
        raise ValueError(f"the checkpoint {checkpoint} was made with another secret: its noise cannot be continued "
                         "(give the secret its first run had, or a new checkpoint and sink).")
    changed = sorted(name for name in stored_params.keys() | params.keys()
                     if stored_params.get(name) != json.loads(json.dumps(params.get(name))))
    if changed:
        raise ValueError(f"the checkpoint {checkpoint} was made with other parameters ({', '.join(changed)}): "
                         "continue it with the same ones, or start a new checkpoint and sink.")
