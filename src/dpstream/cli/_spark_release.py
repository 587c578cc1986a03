"""``dpstream release --key-column K --engine spark``: the keyed release on Spark, written as locally.

Spark reads INPUT (Parquet, or text with a header, by the local reader's rules:
:func:`dpstream.spark.by_key.scan_keyed`), releases every key's stream
in parallel (:func:`dpstream.spark.by_key.keyed_frame`) with the noise the local engine gives
that key, and the driver writes ``key,position,value`` rows in input order: for the same
``--seed`` the file is byte for byte the one ``release --key-column`` writes, and stderr says
the same.  The released rows come to the driver, so ``-o FILE`` suits outputs that fit in its
memory.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import numpy as np

from dpstream._checks import check_stream_values
from dpstream.cli._app import report_reading, say
from dpstream.cli._columns import keys_line, per_key_privacy
from dpstream.cli._outputs import output_file
from dpstream.cli._spark import spark_session
from dpstream.cli._spark_streaming import check_streaming
from dpstream.io import InputError, ReadStats
from dpstream.release.by_key import new_secret, seed_secret, show_key
from dpstream.release.registry import REGISTRY

__all__ = ["check_engine", "release_on_spark"]


def check_engine(context: click.Context, *, engine: str, input_path: str, key_column: str | None,
                 time_column: str | None, state_path: str | None, missing: str) -> None:
    """Usage errors of ``--engine``, ``--spark-master``, ``--spark-conf``, the streaming options and
    ``--checkpoint-seconds`` (with ``--state`` only), before anything is read."""
    default = click.core.ParameterSource.DEFAULT
    if state_path is None and context.get_parameter_source("checkpoint_seconds") is not default:
        raise click.UsageError("--checkpoint-seconds applies with --state only.")
    check_streaming(context, engine=engine, input_path=input_path, time_column=time_column)
    if engine == "local":
        for name in ("spark_master", "spark_conf"):
            if context.get_parameter_source(name) is not default:
                raise click.UsageError(f"--{name.replace('_', '-')} applies to --engine spark only.")
        return
    streaming = engine == "spark-streaming"  # a query over a directory, with its own checkpoint (not --state)
    why = "keeps its own checkpoint: --spark-checkpoint" if streaming else "releases the whole input at once"
    continued = [name for name, entry in REGISTRY.items() if entry.durable and entry.per_key]
    refused = [
        (key_column is None, f"--engine {engine} releases keyed streams: give --key-column."),
        (input_path == "-" and not streaming, "--engine spark reads a file (Parquet or CSV), not stdin."),
        (state_path is not None, f"--state applies to --engine local only (Spark {why})."),
        (time_column is not None and not streaming, "--time-column applies to --engine local only."),
        (missing != "error", f"--missing {missing} applies to --engine local only (Spark refuses missing values)."),
        (context.get_parameter_source("max_keys") is not default, "--max-keys applies to --engine local only."),
        (context.params.get("threshold") is not None and not streaming, "--threshold applies to --engine local only."),
        (streaming and context.params["method"] not in continued,
         f"--engine spark-streaming applies to --method {', '.join(continued)}."),
    ]
    for bad, message in refused:
        if bad:
            raise click.UsageError(message)


def release_on_spark(input_path: str, target: Path | None, *, build: Callable[[Any], Any], key_column: str,
                     column: str | None, seed: int | None, upper_bound: float, clip: bool, hold: int, chunk: int,
                     master: str | None, conf: dict[str, str]) -> None:
    """Release ``input_path`` keyed by ``key_column`` on Spark and write the CSV to ``target`` (None: stdout).

    ``build(bits)`` is the local engine's: a mechanism drawing from ``bits``; ``chunk`` the local
    engine's batch size, which decides which key's guarantee the local engine states.
    """
    from dpstream.spark.by_key import keyed_frame, scan_keyed

    with spark_session(master, conf, source=input_path) as spark:
        rows, error = scan_keyed(spark, input_path, key_column=key_column, value_column=column)
        values_read = _scan(rows, upper_bound=None if clip else upper_bound, error=error, chunk=chunk)
        secret = new_secret() if seed is None else seed_secret(seed)
        table = keyed_frame(rows, build=build, secret=secret, upper_bound=upper_bound).toArrow()
    position = table["position"].to_numpy()
    summary, released = position < 0, np.flatnonzero(position >= 0)
    if not summary.any():
        raise click.ClickException(f"{input_path} holds no values.")
    stated = _stated_privacy(table, summary, chunk)
    if stated is not None:
        stream = _Stated(stated)
        for line in per_key_privacy(stream, seed=seed):
            say(line)
    if not released.size:
        raise click.ClickException(
            f"{input_path} ended after {values_read:,} values, all within each key's hold-out of {hold:,}: "
            "nothing was released (lower --hold or give a longer stream).")
    order = released[np.argsort(table["row"].to_numpy()[released], kind="stable")]
    keys = table["key"].to_numpy(zero_copy_only=False)
    with output_file(target) as sink:  # a failed release leaves no file and destroys none
        out = csv.writer(sink, lineterminator="\n")
        out.writerow(["key", "position", "value"])
        out.writerows(zip(keys[order].tolist(), position[order].tolist(),
                          table["value"].to_numpy()[order].tolist()))
    marks = np.flatnonzero(summary)
    clipped = int(table["value"].to_numpy()[marks].sum()) if clip else None
    report_reading(SimpleNamespace(stats=ReadStats(values=values_read)), clipped=clipped, upper_bound=upper_bound)
    count = marks.size
    held = sum(text is None for text in table["privacy"].take(marks).to_pylist())
    say(f"released {released.size:,} values of {keys_line(count, held, hold=hold)}")


class _Stated:
    """Stands for the mechanism whose guarantee the local engine states: its ``privacy()`` text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def privacy(self) -> str:
        return self.text


def _scan(rows: Any, *, upper_bound: float | None, error: tuple[int, str] | None, chunk: int) -> int:
    """The number of rows, in one pass that also finds the first value outside ``[0, upper_bound]`` in input
    order (unless ``upper_bound`` is None) and refuses it in the words of its key's mechanism, as the local
    engine does, before any release.  ``error`` (row, message), the input's first bad row, is raised instead
    unless that value lies in an earlier batch of ``chunk`` rows: the local engine reads a batch whole before
    it releases it."""
    from pyspark.sql import functions as F

    outside = F.lit(False) if upper_bound is None else (F.col("value") < 0.0) | (F.col("value") > upper_bound)
    if error is not None:
        rows = rows.filter(F.col("row") < error[0] // chunk * chunk)  # the batches the local engine releases
    count, bad = rows.agg(F.count(F.lit(1)), F.min(F.when(outside, F.col("row")))).first()
    if bad is not None:
        first = rows.filter(F.col("row") == bad).first()
        key = first["key"]
        position = rows.filter((F.col("key") == key) & (F.col("row") < bad)).count()
        try:
            check_stream_values(np.array([first["value"]]), upper_bound, clip=False, offset=position)
        except ValueError as failure:
            raise ValueError(f"key {show_key(key)}: {failure}") from None
    if error is not None:
        raise InputError(error[1])
    return int(count)


def _stated_privacy(table: Any, summary: np.ndarray, chunk: int) -> str | None:
    """The guarantee the local engine states: that of the first key, in the order it builds them (batch of
    first appearance, then key), among those that know their threshold in the earliest batch of ``chunk`` rows."""
    marks = np.flatnonzero(summary)
    privacy = table["privacy"].take(marks).to_pylist()
    ready = [i for i, text in enumerate(privacy) if text is not None]
    if not ready:
        return None
    keys = table["key"].take(marks).to_pylist()
    rows, firsts = table["row"].take(marks).to_pylist(), table["first"].take(marks).to_pylist()
    earliest = min(rows[i] // chunk for i in ready)
    chosen = min((i for i in ready if rows[i] // chunk == earliest), key=lambda i: (firsts[i] // chunk, keys[i]))
    return privacy[chosen]
