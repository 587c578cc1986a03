"""``dpstream aggregate``: per-bucket population aggregates of privacy units' rows, under unit-level DP.

Rows ``(time, unit, value[, partition])`` are read in batches (:func:`~dpstream.io.rows.read_rows`),
their times parsed (:mod:`dpstream.io.times`), and released by
:class:`~dpstream.release.aggregate.UnitAggregate` as the buckets close: CSV ``bucket,partition,value``,
the bucket's start in ISO 8601 UTC, the partition (empty without ``--partition-column``), the
value; one row per bucket and partition, in time order.  The guarantee and what a unit gets over
the windows released go to stderr.  ``--state FILE`` makes the release durable, as ``release
--state`` (:class:`~dpstream.durable.release.DurableRelease`): the noise of every window is keyed,
each batch is committed before its buckets are written, and a killed run continued by the same
command writes what an uninterrupted one would, byte for byte.  ``--revised FILE`` reads OUT back at
the end and writes the revised values (:mod:`dpstream.release.aggregate_revisions`) whole beside it:
post-processing, rewritten by every ``--state`` run.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from dpstream.accounting import ZcdpGuarantee, rho_for, zcdp_unit_statement
from dpstream.cli._app import cli, say, usage_errors, warn_if_seeded
from dpstream.cli._options import SEED_HELP, charge_store, check_new_target, delta_option, epsilon_option
from dpstream.cli._outputs import check_finite, output_file, prepare_output
from dpstream.cli._revised import write_revised_csv
from dpstream.cli._rows import (
    BatchTimes,
    RowFeeder,
    check_gap,
    derived_output,
    durable_rows,
    duration_option,
    gap_option,
    read_names,
    seconds_option,
)
from dpstream.cli._rows import row_batches as _batches
from dpstream.cli._spark import spark_conf_option
from dpstream.cli._spark_streaming import STREAMING_ONLY, aggregate_streaming, check_streaming, streaming_options
from dpstream.io import InputError
from dpstream.io.records import MISSING_POLICIES
from dpstream.io.rows import RowBatch, read_rows
from dpstream.io.times import buckets_per_window, format_times, parse_times, time_kind
from dpstream.release.aggregate import LATE_POLICIES, STATISTICS, Released, UnitAggregate, unit_statement
from dpstream.release.aggregate_watermark import WatermarkAggregate, buckets_closed
from dpstream.release.partition_selection import SELECTIONS

__all__ = ["aggregate"]

#: Rows read per batch (and, with --state, per commit at most).
_BATCH = 1 << 18
#: Released rows formatted at a time (a long gap between two rows releases every bucket in between).
_WRITE = 1 << 16


def _lateness_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--allowed-lateness``: 0 or a duration, in seconds (None: not given)."""
    if value is None or value.strip() in ("0", "0s", "0m", "0h", "0d"):
        return None if value is None else 0
    return duration_option(ctx, param, value)


@cli.command()
@click.argument("input_path", metavar="INPUT", type=click.Path(allow_dash=True))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(allow_dash=True),
              help="Where to write the CSV bucket,partition,value ('-' for stdout; with --engine spark-streaming a "
                   "directory of batch files).")
@click.option("--time-column", required=True, help="The time of each row: ISO 8601 (no offset = UTC) or epoch seconds.")
@click.option("--unit-column", required=True, help="The privacy unit of each row (a meter, a household).")
@click.option("--column", required=True, help="The value column.")
@click.option("--bucket", required=True, callback=duration_option, help="Bucket length: an integer and s|m|h|d (30m).")
@click.option("--unit-window", required=True, callback=duration_option,
              help="The window a unit is protected in (1d: each UTC day), a whole number of buckets.")
@click.option("--unit-bound", type=float, required=True,
              help="L1 bound of one unit's contribution per window (the sum of its values; with --statistic count, "
                   "its rows).")
@click.option("--epsilon", type=float, required=True, callback=epsilon_option, help="Budget per unit per window.")
@click.option("--noise", "noise_law", type=click.Choice(["laplace", "gaussian"]), default="laplace", show_default=True,
              help="gaussian: discrete Gaussian noise under rho-zCDP, at the rho whose (--epsilon, --delta) per window "
                   "is the target; composes over windows by adding rho (see docs/zcdp.md).")
@click.option("--delta", type=float, default=None, callback=delta_option,
              help="With --noise gaussian: the delta of the per-window (epsilon, delta) target, at most 1e-3.")
@click.option("--budget-store", "budget_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A budget store (dpstream budget FILE --new-rho R) this release is charged before it publishes: "
                   "refused when the store's total would be passed (a --state release is charged once).")
@click.option("--standard-errors", "standard_error", is_flag=True,
              help="Also say on stderr the exact standard error of every released bucket's noise (all buckets share "
                   "it; bounding and clipping bias are not in it).")
@click.option("--standard-error", "standard_error_alias", is_flag=True, hidden=True,
              help="Former spelling of --standard-errors.")
@click.option("--upper-bound", type=float, default=None, help="Bound B of one value: values lie in [0, B] "
                                                                   "(default --unit-bound).")
@click.option("--clip", is_flag=True, help="Clip values outside [0, B] instead of failing.")
@click.option("--partition-column", default=None, help="The partition of each row (a feeder); needs --partitions "
                                                        "or --partition-selection private.")
@click.option("--partitions", "partitions_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The public partitions, one name per line.")
@click.option("--partition-selection", type=click.Choice(SELECTIONS), default="public", show_default=True,
              help="private: partitions not in --partitions are selected per window (distinct units + discrete "
                   "Laplace over a threshold for --selection-delta) and come out when their window closes; needs "
                   "--unit-max-partitions.")
@click.option("--selection-epsilon", type=float, default=None,
              help="With --partition-selection private: the share of --epsilon the selection spends (default half).")
@click.option("--selection-delta", type=float, default=1e-6, show_default=True,
              help="With --partition-selection private: the probability bound of letting out a partition of one "
                   "unit's rows, at most 1e-3.")
@click.option("--unit-max-partitions", type=int, default=None, help="Partitions one unit may touch per window.")
@click.option("--unit-max-rows", type=int, default=None, help="Rows one unit may have per window.")
@click.option("--statistic", type=click.Choice(STATISTICS), default="sum", show_default=True)
@click.option("--levels", type=int, default=None, help="Measured levels over a window's buckets (default 2: the "
                                                       "buckets and the whole window).")
@click.option("--replace", is_flag=True, help="Neighbours replace one unit's rows (noise for 2C) rather than add or "
                                              "remove them.")
@click.option("--missing", type=click.Choice(list(MISSING_POLICIES)), default="error", show_default=True,
              help="A missing value: stop, read as 0, or drop its row.")
@click.option("--late", type=click.Choice(LATE_POLICIES), default="error", show_default=True,
              help="A row for a bucket already released: stop, or drop it (counted, not printed).")
@click.option("--start", default=None,
              help="The first bucket released (a time, aligned down to its window), public: without it the window "
                   "of the first row, which the guarantee does not cover.")
@click.option("--max-gap", callback=gap_option, default=None,
              help="The longest time between two rows' buckets (an integer and s|m|h|d): every bucket in between is "
                   "released. Default: a gap may release at most 4,194,304 bucket values (buckets x partitions).")
@click.option("--sort", "sort_rows", is_flag=True,
              help="Read the whole input and sort its rows by time first (a file written meter by meter); memory "
                   "grows with the rows.")
@click.option("--revised", "revised_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the revised values (post-processing, not final): each closed window's released total "
                   "spread by the profile of earlier windows; CSV bucket,partition,revised.")
@click.option("--revised-history", type=click.IntRange(min=1), default=28, show_default=True,
              help="With --revised: the earlier windows whose released values make the profile.")
@click.option("--revised-cycle", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --revised: only earlier windows at the same place in a cycle of this many windows "
                   "(7 with days: the same weekday).")
@click.option("--seed", type=int, default=None, help=SEED_HELP)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), default=None,
              help="A secret state file: the release continues where a stopped run left it, never re-drawing noise.")
@click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=1.0, show_default=True,
              callback=seconds_option, help="With --state: the least time between two commits.")
@click.option("--allowed-lateness", default=None, callback=_lateness_option,
              help="Close a bucket once the newest time seen, minus this (0, or an integer and s|m|h|d), passes its "
                   "end: rows within it are taken in any order, a row for a bucket already closed is dropped (in no "
                   "released value). 0 is --late drop. The rule of --engine spark-streaming (default there 0).")
@click.option("--engine", type=click.Choice(["local", "spark-streaming"]), default="local", show_default=True,
              help="local (this process) or spark-streaming (INPUT a directory that files are put in, -o a directory "
                   "of batch files, with --spark-checkpoint and --secret-file; see docs/streaming.md).")
@click.option("--spark-master", default=None, help="With --engine spark-streaming: the Spark master URL.")
@click.option("--spark-conf", multiple=True, callback=spark_conf_option, metavar="KEY=VALUE",
              help="With --engine spark-streaming: a Spark configuration property (repeatable).")
@streaming_options
def aggregate(input_path: str, output_path: str, time_column: str, unit_column: str, column: str, bucket: int,
              unit_window: int, partition_column: str | None, partitions_path: str | None, missing: str,
              seed: int | None, force: bool, state_path: str | None, checkpoint_seconds: float, sort_rows: bool,
              revised_path: str | None, revised_history: int, revised_cycle: int, allowed_lateness: int | None,
              engine: str, **options: Any) -> None:
    """Release per-bucket sums, counts or means of INPUT's rows under unit-level DP.

    INPUT is CSV with a header (.gz allowed, '-' is stdin) or Parquet, one row per reading:
    a time, a unit and a value (and a partition).  Each unit's rows in each aligned window
    (--unit-window, UTC) are protected at --epsilon: the release bounds them (values clipped to
    [0, B], at most --unit-bound in total, --unit-max-rows rows, --unit-max-partitions
    partitions) and adds exact discrete Laplace noise from the bounds.  OUT is CSV
    'bucket,partition,value', the bucket's start in ISO 8601 UTC, released as buckets close.
    --revised FILE writes revised values beside it (post-processing, rewritten by every run).
    """
    standard_error = options.pop("standard_error") | options.pop("standard_error_alias")
    delta = options["delta"]  # the guarantee is stated at --delta
    max_gap = options.pop("max_gap")
    check_new_target(context := click.get_current_context(), delta, state_path)  # a new release's: at most 1e-3
    for name in ("spark_master", "spark_conf", *STREAMING_ONLY):
        options.pop(name)
    check_streaming(context, engine=engine, input_path=input_path, time_column=time_column)
    with usage_errors():
        allowed_lateness = _check_lateness(context, allowed_lateness, engine=engine, state_path=state_path)
        if allowed_lateness is not None:
            options["late"] = "drop"
        width = buckets_per_window(bucket, unit_window)
        private = _check_selection(partition_column, partitions_path, options)
        _check_not_partitions(partitions_path, {"-o": output_path, "--state": state_path})
        partitions = read_names(partitions_path, "--partitions", "partition") if partitions_path is not None else None
        params = dict(**_budget(options), bucket=bucket, window=unit_window, unit_bound=options["unit_bound"],
                      statistic=options["statistic"], upper_bound=options["upper_bound"], clip=options["clip"],
                      max_rows=options["unit_max_rows"], max_partitions=options["unit_max_partitions"],
                      partitions=partitions, levels=options["levels"], replace=options["replace"],
                      late=options["late"], unit=unit_column, start=_start(options["start"]),
                      partition_selection=options["partition_selection"],
                      selection_epsilon=options["selection_epsilon"], selection_delta=options["selection_delta"])
        probe = UnitAggregate(**params, seed=0 if seed is None else seed)  # refuse bad parameters before anything
        budget_path = options.pop("budget_path")
        if sort_rows and state_path is not None:
            raise ValueError("--sort and --state do not go together: a durable release consumes its input in order.")
        if revised_path is not None and private:
            raise ValueError("--revised applies with public partitions only (a privately selected partition is "
                             "released in the windows it is selected in, not in all of them).")
        revised = _check_revised(revised_path, output_path=output_path, statistic=options["statistic"],
                                 inputs={"INPUT": input_path, "--partitions": partitions_path, "--state": state_path},
                                 force=force or state_path is not None, history=(revised_history, revised_cycle))
    rows = read_rows(input_path, time_column=time_column, unit_column=unit_column, column=column,
                     partition_column=partition_column, missing=missing, batch_rows=_BATCH)
    if sort_rows:
        rows = _sorted(rows)
    names = partitions or ([] if private else [""])
    if engine == "spark-streaming":  # INPUT and -o are directories: a query over the files put in INPUT
        return aggregate_streaming(context, params=params, lateness=allowed_lateness or 0, columns=dict(
            time_column=time_column, unit_column=unit_column, column=column, partition_column=partition_column,
            missing=missing), max_gap=max_gap)
    if state_path is not None:
        rows, key = _charged(rows, budget_path, probe, state_path=state_path, output_path=output_path, seed=seed)
        _durable_run(state_path, input_path=input_path, output_path=output_path, params=params, rows=rows,
                     names=names, seed=seed, key=key, force=force, checkpoint_seconds=checkpoint_seconds,
                     columns=(time_column, unit_column, column, partition_column, missing),
                     standard_error=standard_error, delta=delta, max_gap=max_gap)
        _write_revised(revised, output_path, names, params, history=(revised_history, revised_cycle))
        return
    if click.get_current_context().get_parameter_source("checkpoint_seconds") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--checkpoint-seconds applies with --state only.")
    releaser = UnitAggregate(**params, seed=seed)
    warn_if_seeded(seed)
    target = prepare_output(output_path, force=force, inputs=[input_path, partitions_path])
    rows, _ = _charged(rows, budget_path, probe, state_path=None, output_path=output_path)
    feeder = _Feeder(releaser, names, width, sorted_rows=sort_rows, standard_error=standard_error, delta=delta,
                     lateness=allowed_lateness, max_gap=max_gap)
    with output_file(target) as sink:
        writer = csv.writer(sink, lineterminator="\n")
        writer.writerow(["bucket", "partition", "value"])
        for batch in rows:
            feeder.feed(batch, sink)
        feeder.end(sink)
    feeder.report()
    _write_revised(revised, output_path, names, params, history=(revised_history, revised_cycle))


def _charged(rows: Iterator[RowBatch], budget_path: str | None, probe: UnitAggregate, *, state_path: str | None,
             output_path: str, seed: int | None = None) -> tuple[Iterator[RowBatch], bytes | None]:
    """The rows, after charging the release to the budget store ``budget_path`` (if any): last, once every check has
    passed, the output was found writable and the input's first batch was read (a missing column, a bad first row
    is refused before the charge); and the key of a new state, whose fingerprint the charge recorded (else None)."""
    if budget_path is None:
        return rows, None
    first = next(rows, None)
    rows = rows if first is None else itertools.chain([first], rows)
    with usage_errors():
        key = charge_store(budget_path, "aggregate", probe.privacy(), state_path=state_path, output_path=output_path,
                           seed=seed)
    return rows, key


def _budget(options: dict[str, Any]) -> dict[str, float]:
    """The release's budget keyword: ``epsilon``, or under ``--noise gaussian`` the rho of (--epsilon, --delta)."""
    noise, delta = options.pop("noise_law"), options.pop("delta")
    if noise == "laplace":
        if delta is not None:
            raise ValueError("--delta applies with --noise gaussian only (Laplace noise is pure epsilon-DP).")
        return {"epsilon": options["epsilon"]}
    if delta is None:
        raise ValueError("--noise gaussian needs --delta: the delta of the per-window (epsilon, delta) target, e.g. "
                         "1e-6.")
    return {"rho": rho_for(options["epsilon"], delta)}


def _check_selection(partition_column: str | None, partitions_path: str | None, options: dict[str, Any]) -> bool:
    """Usage errors of the partition options; whether partitions are selected privately."""
    private = options["partition_selection"] == "private"
    if private and partition_column is None:
        raise ValueError("--partition-selection private needs --partition-column.")
    if not private and (partition_column is None) != (partitions_path is None):
        raise ValueError("--partition-column and --partitions go together (the partitions are public; "
                         "--partition-selection private selects others).")
    if partition_column is None and options["unit_max_partitions"] is not None:
        raise ValueError("--unit-max-partitions applies with --partition-column and --partitions only (or "
                         "--partition-selection private).")
    source = click.get_current_context().get_parameter_source
    given = [flag for flag, name in (("--selection-epsilon", "selection_epsilon"),
                                     ("--selection-delta", "selection_delta"))
             if source(name) is not click.core.ParameterSource.DEFAULT]
    if given and not private:
        raise ValueError(f"{given[0]} applies with --partition-selection private only.")
    return private


def _check_revised(path: str | None, *, output_path: str, statistic: str, inputs: dict[str, str | None],
                   force: bool, history: tuple[int, int]) -> Path | None:
    """Usage errors of --revised (and its options), and where it writes, checked before any work."""
    if path is None:
        source = click.get_current_context().get_parameter_source
        given = [flag for flag, name in (("--revised-history", "revised_history"), ("--revised-cycle",
                                                                                    "revised_cycle"))
                 if source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise ValueError(f"{given[0]} applies with --revised only.")
        return None
    if statistic == "mean":
        raise ValueError("--revised applies to --statistic sum and count, not mean (a ratio has no window total to "
                         "spread).")
    return derived_output(path, "--revised", output_path=output_path, inputs=inputs, force=force,
                          sources=[inputs["INPUT"], inputs["--partitions"]])


def _write_revised(target: Path | None, output_path: str, names: list[str], params: dict[str, Any], *,
                   history: tuple[int, int]) -> None:
    """Read OUT back (every bucket released so far, earlier runs' too with --state) and write --revised whole."""
    if target is None:
        return
    output = Path(output_path)
    types = {"bucket": pa.string(), "partition": pa.string(), "value": pa.float64()}
    table = pcsv.read_csv(output, convert_options=pcsv.ConvertOptions(column_types=types))
    released = Released(parse_times(table.column("bucket").combine_chunks(), kind="iso"),
                        _partition_indices(table.column("partition"), names),
                        table.column("value").to_numpy())
    releaser = UnitAggregate(**params, seed=0)  # the public layout only: no noise is drawn or read
    revised = releaser.revised(released, history=history[0], cycle=history[1])
    write_revised_csv(target, output, revised)
    say(f"revised values: {revised.size:,} written to {target} (post-processing of the release, not final: each "
        f"closed window's released total spread by the profile of the previous {history[0]} windows"
        f"{f', those at the same place in a cycle of {history[1]}' if history[1] > 1 else ''}).")


def _partition_indices(column: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """Each row's partition as its index in ``names`` (the public partitions, in the release's order)."""
    encoded = column.combine_chunks().dictionary_encode()
    index = {name: i for i, name in enumerate(names)}
    lookup = np.array([index[name] for name in encoded.dictionary.to_pylist()], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


class _Feeder(RowFeeder):
    """Parses each batch's times, feeds the release and writes the buckets it closes."""

    def __init__(self, releaser: UnitAggregate, names: list[str], width: int, *, sorted_rows: bool = False,
                 standard_error: bool = False, delta: float | None = None, lateness: int | None = None,
                 max_gap: int | None = None) -> None:
        self.releaser, self.names, self.width, self.sorted_rows = releaser, names, width, sorted_rows
        self.max_gap = max_gap
        self.marked = None if lateness is None else WatermarkAggregate(releaser, lateness=lateness)
        self.standard_error, self.delta = standard_error, delta
        self.times = BatchTimes()
        self.first: int | None = None
        self.windows = 0

    def feed(self, batch: RowBatch, sink: TextIO) -> None:
        if not len(batch):
            return
        times = self.times(batch)
        if self.marked is not None:  # --allowed-lateness: rows held until the watermark closes their bucket
            self._check_gap(batch, times)
            self._feed_marked(batch, times, sink)
            return
        try:
            self._check_gap(batch, times)
            for released in self.releaser.release_parts(times, batch.units, batch.values, batch.partitions,
                                                        skip=batch.missing if batch.missing.any() else None):
                self.write(released, sink)
        except ValueError as error:
            if not self.sorted_rows:
                raise
            raise ValueError(f"{error} (--sort: rows are numbered in time order, not as in the file)") from None

    def _check_gap(self, batch: RowBatch, times: np.ndarray) -> None:
        """Refuse a gap that would release too many buckets (--max-gap), before any work."""
        agg = self.releaser
        check_gap(buckets_closed(agg, times, batch.missing if batch.missing.any() else None), times=times,
                  first=(self.marked or agg).position + 1, seconds=agg.bucket, per=len(agg.partition_names),
                  noun="bucket", max_gap=self.max_gap)

    def _feed_marked(self, batch: RowBatch, times: np.ndarray, sink: TextIO) -> None:
        partitions = None if batch.partitions is None else batch.partitions.to_numpy(zero_copy_only=False)
        marked = self.marked
        assert marked is not None
        for released in marked.release(times, batch.units.to_numpy(zero_copy_only=False), batch.values, partitions,
                                       skip=batch.missing):
            self.write(released, sink)

    def end(self, sink: TextIO) -> None:
        if self.marked is None:
            return super().end(sink)
        if self.marked.position == 0:
            raise InputError("the input holds no rows.")
        self.write(self.marked.flush(), sink)

    def write(self, released: Released, sink: TextIO) -> None:
        if not len(released):
            return
        check_finite(released.values, position=self.releaser.released, written="the output stops before it")
        if self.first is None:
            self.first = int(released.buckets[0])
        names = np.asarray(self.releaser.partition_names, dtype=object)  # private ones named once selected
        for start in range(0, len(released), _WRITE):
            part = slice(start, start + _WRITE)
            text = io.StringIO()
            rows = zip(format_times(released.buckets[part]), names[released.partitions[part]].tolist(),
                       map(repr, released.values[part].tolist()))
            csv.writer(text, lineterminator="\n").writerows(rows)
            sink.write(text.getvalue())

    def report(self) -> None:
        agg = self.releaser
        guarantee = agg.privacy()
        if isinstance(guarantee, ZcdpGuarantee) and self.delta is not None:
            guarantee = guarantee.at(self.delta)  # the (epsilon, delta) target --delta asked for, not the default
        say(f"privacy: {guarantee}")
        if self.marked is not None:
            say(f"late rows: a row whose bucket the newest time before it, minus --allowed-lateness "
                f"{self.marked.lateness:,} s, had closed is dropped (in no released value; how many is not said: "
                "it is data).")
        windows = -(-agg.released // self.width)
        relation = agg.relation()
        statement = zcdp_unit_statement if isinstance(guarantee, ZcdpGuarantee) else unit_statement
        say(statement(guarantee, unit=relation.unit, window=relation.window, windows=windows))
        if self.standard_error and agg.statistic == "mean":  # a ratio of two noisy values: its error is not linear
            say(f"standard error of the noise of every released bucket's sum: {agg.standard_error('sum'):.6g}, and "
                f"of its count: {agg.standard_error('count'):.6g} (each exact: linear noise of a known law); the mean "
                "divides that noisy sum by that noisy count: a ratio of noisy values has no exact standard error, and "
                "none is stated; bounding bias is not in them")
        elif self.standard_error:
            say(f"standard error of every released bucket's noise: {agg.standard_error():.6g} (exact: the noise is "
                "linear and its law known; bounding and clipping bias are not in it)")
        if agg.partition_selection == "private":
            say(f"released {agg.released:,} buckets x {len(self.names):,} public partition"
                f"{'s' * (len(self.names) != 1)}, and the private partitions selected in each closed window "
                f"(threshold {agg.selection_threshold} units; those of a window still open are held).")
        else:
            say(f"released {agg.released:,} buckets x {len(self.names):,} partition{'s' * (len(self.names) != 1)}.")


def _sorted(rows: Iterator[RowBatch]) -> Iterator[RowBatch]:
    """The rows sorted by time (stable: rows of one time keep their order), renumbered in that order."""
    batches = [batch for batch in rows if len(batch)]
    if not batches:
        return
    kind = time_kind(str(batches[0].times[0]))
    times = np.concatenate([parse_times(b.times, kind=kind, first_row=b.first_row) for b in batches])
    order = pa.array(np.argsort(times, kind="stable"))
    joined = {name: pa.concat_arrays([getattr(b, name) for b in batches]).take(order)
              for name in ("times", "units") + (("partitions",) if batches[0].partitions is not None else ())}
    values = np.concatenate([b.values for b in batches])[order.to_numpy()]
    missing = np.concatenate([b.missing for b in batches])[order.to_numpy()]
    for start in range(0, values.size, _BATCH):
        part = slice(start, start + _BATCH)
        yield RowBatch(times=joined["times"][part], units=joined["units"][part], values=values[part],
                       partitions=joined["partitions"][part] if "partitions" in joined else None,
                       first_row=start + 1, missing=missing[part])


def _check_lateness(context: click.Context, lateness: int | None, *, engine: str, state_path: str | None) -> int | None:
    """Usage errors of --allowed-lateness (it drops late rows: --late error refused beside it) and of the streaming
    engine's options that do not apply there."""
    source = context.get_parameter_source
    if engine == "spark-streaming" and source("late") is not click.core.ParameterSource.DEFAULT:
        raise ValueError("--late applies to --engine local only: a streaming query drops the rows of buckets "
                         "already released (--allowed-lateness, default 0, says when a bucket closes).")
    if engine == "spark-streaming" and lateness is None:
        lateness = 0
    if lateness is not None and source("late") is not click.core.ParameterSource.DEFAULT:
        raise ValueError("--allowed-lateness drops the rows of closed buckets: --late does not go with it.")
    if lateness is not None and state_path is not None:
        raise ValueError("--allowed-lateness and --state do not go together (yet): a durable release consumes its "
                         "input in arrival order; --engine spark-streaming is the durable form.")
    if engine == "local":
        for flag, name in (("--spark-master", "spark_master"), ("--spark-conf", "spark_conf")):
            if source(name) is not click.core.ParameterSource.DEFAULT:
                raise ValueError(f"{flag} applies to --engine spark-streaming only.")
    else:
        given = {"--state": state_path, "--sort": context.params["sort_rows"] or None,
                 "--max-gap": context.params["max_gap"],
                 "--partition-selection private": context.params["partition_selection"] == "private" or None}
        for flag, value in given.items():
            if value is not None:
                raise ValueError(f"{flag} applies to --engine local only.")
    return lateness


def _start(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(parse_times([text], kind=time_kind(text))[0])
    except InputError:
        raise ValueError(f"--start must be a time (ISO 8601 or epoch seconds), got {text!r}.") from None


def _check_not_partitions(partitions_path: str | None, outputs: dict[str, str | None]) -> None:
    """Refuse an output or state that is the --partitions file (it would be overwritten before it is read again)."""
    if partitions_path is None:
        return
    for flag, path in outputs.items():
        if path not in (None, "-") and os.path.abspath(path) == os.path.abspath(partitions_path):
            raise ValueError(f"{flag} and --partitions must name different files, got {partitions_path!r} for both.")


def _durable_run(state_path: str, *, input_path: str, output_path: str, params: dict[str, Any],
                 rows: Iterator[RowBatch], names: list[str], seed: int | None, force: bool, key: bytes | None,
                 checkpoint_seconds: float, columns: tuple[Any, ...], standard_error: bool = False,
                 delta: float | None = None, max_gap: int | None = None) -> None:
    """``aggregate --state FILE``: the release under a durable run, each batch committed before it is written."""
    width = buckets_per_window(params["bucket"], params["window"])
    durable_rows(state_path, command="aggregate", params={"method": "aggregate", **params}, columns=columns,
                 build=lambda key: UnitAggregate(**params, key=key),
                 feeder=lambda agg: _Feeder(agg, names, width, standard_error=standard_error, delta=delta,
                                            max_gap=max_gap),
                 header="bucket,partition,value\n", unit="buckets", rows=rows, input_path=input_path,
                 output_path=output_path, seed=seed, force=force, checkpoint_seconds=checkpoint_seconds,
                 batches=_batches, key=key)
