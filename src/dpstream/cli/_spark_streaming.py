"""``dpstream release INPUT_DIR --engine spark-streaming``: the keyed release as a Structured Streaming query.

INPUT_DIR is the source: the query takes the files put there (CSV, text, ``.gz`` or Parquet, each
read by the local reader's rules) in order of modification time, releases every key's rows with
its mechanism kept in Spark's state store, and writes each micro-batch's released rows to
``-o SINK_DIR/batch-<id>.csv`` (:mod:`dpstream.spark.streaming`).  ``--spark-checkpoint DIR`` is
Spark's checkpoint: the same command run again continues from it, exactly once.  The noise comes
from a secret held outside the checkpoint, ``--secret-file FILE`` (32 bytes, created on the first
run if absent), or from ``--seed`` (tests only).  ``--available-now`` processes the files there and
stops; without it the query runs until interrupted (Ctrl-C stops it between micro-batches).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from dpstream.cli._app import say
from dpstream.cli._columns import per_key_privacy
from dpstream.cli._rows import check_gap
from dpstream.cli._spark import last_error, spark_session
from dpstream.durable.files import write_atomic
from dpstream.durable.keys import seed_key
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.aggregate_watermark import buckets_closed
from dpstream.release.by_key import key_secret

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["aggregate_streaming", "check_streaming", "release_streaming", "streaming_options"]

#: Bytes of a secret file.
SECRET_BYTES = 32
#: The options that apply to ``--engine spark-streaming`` only.
STREAMING_ONLY = ("spark_checkpoint", "secret_file", "available_now", "files_per_batch")
#: ``release``'s options that say where and how the query runs, not what it releases.
_RUNTIME = (*STREAMING_ONLY, "output_path", "input_path", "spark_master", "spark_conf", "force", "report_unprotected",
            "checkpoint_seconds")


def streaming_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``--engine spark-streaming``, added to ``release``."""
    options = [
        click.option("--spark-checkpoint", type=click.Path(file_okay=False), default=None,
                     help="With --engine spark-streaming: Spark's checkpoint directory; the same command run again "
                          "continues from it (exactly once: a replayed micro-batch writes the same values)."),
        click.option("--secret-file", type=click.Path(dir_okay=False), default=None,
                     help="With --engine spark-streaming: the SECRET key of every key's noise, 32 bytes, kept "
                          "outside the checkpoint (created on the first run if absent); every run of the query "
                          "needs the same file."),
        click.option("--available-now", is_flag=True,
                     help="With --engine spark-streaming: process the files in INPUT_DIR and stop (a bounded job); "
                          "without it the query runs until interrupted."),
        click.option("--files-per-batch", type=click.IntRange(min=1), default=None,
                     help="With --engine spark-streaming: at most this many files per micro-batch (default: all "
                          "the new ones)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def pop_streaming(options: dict[str, Any]) -> None:
    """Take the streaming options out of ``release``'s options of the mechanism (they are read from the context)."""
    for name in STREAMING_ONLY:
        options.pop(name, None)


def check_streaming(context: click.Context, *, engine: str, input_path: str, time_column: str | None) -> None:
    """Usage errors of the streaming options, before anything is read."""
    params = context.params
    output_path, seed = params["output_path"], params["seed"]
    if engine != "spark-streaming":
        for name in STREAMING_ONLY:
            if context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
                raise click.UsageError(f"--{name.replace('_', '-')} applies to --engine spark-streaming only.")
        if Path(input_path).is_dir():  # what INPUT's type said before it took directories for this engine
            raise click.BadParameter(f"File {input_path!r} is a directory.", param_hint="'INPUT'")
        if Path(output_path).is_dir():
            raise click.BadParameter(f"File {output_path!r} is a directory.", param_hint="'-o' / '--output'")
        return
    refused = [
        (time_column is None, "--engine spark-streaming orders each key's rows by time: give --time-column."),
        (params.get("spark_checkpoint") is None, "--engine spark-streaming needs --spark-checkpoint DIR (where "
                                                 "Spark keeps its progress and the keys' state)."),
        (seed is None and params.get("secret_file") is None, "--engine spark-streaming needs --secret-file FILE "
                                                             "(the noise's secret, outside the checkpoint) or --seed."),
        (seed is not None and params.get("secret_file") is not None, "--seed and --secret-file exclude each other."),
        (input_path == "-" or not Path(input_path).is_dir(), "--engine spark-streaming reads the files put in a "
                                                             "directory: INPUT must be one."),
        (output_path == "-", "--engine spark-streaming writes a directory of batch files: -o DIR, not stdout."),
        (Path(output_path).exists() and not Path(output_path).is_dir(), f"-o {output_path} is a file; "
                                                                        "--engine spark-streaming writes a directory."),
    ]
    refused += [(params.get(name) is not None, f"--{name.replace('_path', '')} applies to the local engine only.")
                for name in ("summary_path", "revised_path", "plot_path")]
    refused.append((params.get("budget_path") is not None, "--budget-store applies to --engine local or spark: a "
                                                           "streaming query has no end to charge a store for."))
    for bad, message in refused:
        if bad:
            raise click.UsageError(message)


def read_secret(path: str) -> bytes:
    """The secret in ``path`` (created, mode 0600, with 32 bytes of the OS CSPRNG if absent), said on stderr."""
    target = Path(path)
    if not target.exists():
        write_atomic(target, os.urandom(SECRET_BYTES))
        say(f"created the secret {path} (32 random bytes): keep it safe and outside the checkpoint; every run of this "
            "query needs it, and whoever holds it can recompute every key's noise.")
    secret = target.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise click.ClickException(f"{path} holds {len(secret):,} bytes; a secret file holds exactly {SECRET_BYTES} "
                                   "(make one with: head -c 32 /dev/urandom > FILE).")
    return secret


def streaming_secret(given: dict[str, Any]) -> bytes:
    """The query's secret (``--secret-file``, or derived from ``--seed``), once the checkpoint and the secret file
    are known to lie outside INPUT, -o and each other (usage errors)."""
    input_path, output_path, seed, checkpoint, secret_file = (given[name] for name in (
        "input_path", "output_path", "seed", "spark_checkpoint", "secret_file"))
    places = [("--spark-checkpoint", checkpoint)] + ([] if secret_file is None else [("--secret-file", secret_file)])
    for option, inner in places:  # the secret kept apart from the checkpoint; neither read as input nor output
        for name, path in (("INPUT", input_path), ("-o", output_path), ("--spark-checkpoint", checkpoint)):
            inside = Path(inner).resolve()
            if option != name and (inside == Path(path).resolve() or Path(path).resolve() in inside.parents):
                raise click.UsageError(f"{option} {inner} must be outside {name} {path}.")
    return seed_key(seed) if seed is not None else read_secret(str(secret_file))


def release_streaming(context: click.Context, *, build: Callable[[bytes], Any]) -> None:
    """Run ``release``'s streaming query (its options in ``context``) until it stops (``--available-now``) or is
    interrupted; say each micro-batch.  ``build(key)`` makes a key's mechanism with its noise from ``key``."""
    from dpstream.spark.streaming import start_release

    given = context.params
    input_path, output_path, seed, checkpoint = (given[name] for name in ("input_path", "output_path", "seed",
                                                                          "spark_checkpoint"))
    secret_file = given["secret_file"]
    # what decides the released values: recorded in the checkpoint, a restart with others refused
    params = {name: value for name, value in given.items() if name not in _RUNTIME}
    secret = streaming_secret(given)
    lines = per_key_privacy(build(key_secret(secret, "")), seed=seed)[:2]  # every key's mechanism says the same
    source = (f"a key derived from --seed {seed} (replayable, NOT secret)" if seed is not None else
              f"the secret in {secret_file} (held outside the checkpoint; keep it secret: it recomputes every key's "
              "noise)")
    for line in [*lines, f"noise: each key draws from its own keyed ChaCha20 stream (identity: the key's text) under "
                         f"{source}; a micro-batch run again draws the same noise."]:
        say(line)
    run_query(given, lambda spark, told: start_release(
        spark, input_path, sink=output_path, checkpoint=checkpoint, key_column=given["key_column"],
        time_column=given["time_column"], value_column=given["column"], build=build, secret=secret, params=params,
        available_now=given["available_now"], files_per_batch=given["files_per_batch"], on_batch=told))


def run_query(given: dict[str, Any], start: Callable[[Any, Callable[[int, int], None]], Any]) -> None:
    """Start a streaming query (``start(spark, on_batch)``) in the command's Spark session and wait until it stops
    (``--available-now``) or is interrupted; say each micro-batch, and the query's first error in one line."""
    from dpstream.spark.streaming import SINK_PATTERN, streaming_conf

    totals = {"batches": 0, "values": 0}

    def told(batch_id: int, rows: int) -> None:
        totals["batches"] += 1
        totals["values"] += rows
        say(f"micro-batch {batch_id}: {rows:,} values released ({SINK_PATTERN.format(batch_id)})")

    with spark_session(given["spark_master"], streaming_conf(given["spark_conf"]), source=given["input_path"]) as spark:
        from pyspark.errors import StreamingQueryException

        try:
            query = start(spark, told)
        except ValueError as error:
            raise click.ClickException(str(error)) from None
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
            say("stopped: the same command continues from the checkpoint.")
        except StreamingQueryException as error:  # the query's first error, one line (a Python error: its message)
            raise click.ClickException(last_error(str(error).split("\n\tat ", 1)[0])) from None
    say(f"released {totals['values']:,} values in {totals['batches']:,} micro-batches to {given['output_path']}")


def aggregate_streaming(context: click.Context, *, params: dict[str, Any], columns: dict[str, Any],
                        lateness: int, max_gap: int | None) -> None:
    """Run ``aggregate``'s streaming query (its options in ``context``; ``params`` the aggregate's, ``columns`` the
    reader's, ``lateness`` the allowed lateness in seconds, ``max_gap`` ``--max-gap``: a micro-batch with a longer gap
    stops the query, :func:`check_streaming_gap`) until it stops or is interrupted."""
    from dpstream.spark.streaming_aggregate import start_aggregate

    given = context.params
    secret = streaming_secret(given)
    seed, secret_file = given["seed"], given["secret_file"]
    say(f"privacy: {UnitAggregate(**params, key=secret).privacy()}")
    source = (f"a key derived from --seed {seed} (replayable, NOT secret)" if seed is not None else
              f"the secret in {secret_file} (held outside the checkpoint; keep it secret: it recomputes the noise)")
    say(f"noise: keyed ChaCha20 bits per window under {source}; a micro-batch run again draws the same noise.")
    say(f"late rows: a bucket is released once the newest time seen, minus --allowed-lateness {lateness:,} s, passes "
        "its end; a row for a bucket already released is dropped, in no released value.")
    run_query(given, lambda spark, told: start_aggregate(
        spark, given["input_path"], sink=given["output_path"], checkpoint=given["spark_checkpoint"], params=params,
        columns=columns, lateness=lateness, secret=secret, available_now=given["available_now"],
        files_per_batch=given["files_per_batch"], on_batch=told, check=partial(check_streaming_gap, max_gap)))


def check_streaming_gap(max_gap: int | None, aggregate: UnitAggregate, rows: pd.DataFrame) -> None:
    """``aggregate --engine spark-streaming``: the local engine's long-gap check (:func:`~dpstream.cli._rows.check_gap`,
    ``--max-gap`` or at most :data:`~dpstream.cli._rows.GAP_VALUES` values) on a micro-batch's rows in arrival order,
    before any work; a refusal names the source file and its row."""
    times = rows["time_ns"].to_numpy(np.int64)
    closed = buckets_closed(aggregate, times)
    if not closed.size:
        return
    at = int(np.argmax(closed))
    try:
        check_gap(closed[at:at + 1], times=times[at:at + 1], first=int(rows["row"].iloc[at]), seconds=aggregate.bucket,
                  per=len(aggregate.partition_names), noun="bucket", max_gap=max_gap)
    except ValueError as error:
        raise ValueError(f"{rows['file'].iloc[at]}: {error}") from None
