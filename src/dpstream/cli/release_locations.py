"""``dpstream release-locations``: noisy counts per time step and location from raw trajectories (Cao et al.).

Rows ``(time, user, location)`` are read in batches (:func:`~dpstream.io.rows.read_rows`), their
times parsed (:mod:`dpstream.io.times`) and released by
:class:`~dpstream.release.locations.LocationCounts` as the steps close: CSV ``step,<location>,...``,
the step's start in ISO 8601 UTC and one integer count per public location (``--locations``, in
its order).  The guarantee, and what a user's whole trajectory gets, go to stderr.

``--postprocess METHOD --transition T.csv --postprocessed FILE`` then reads OUT back (every step
released so far, earlier runs' too with ``--state``) and writes the estimates of
:func:`dpstream.postprocess.postprocess` to FILE, with the release's own noise model
(:meth:`~dpstream.release.locations.LocationCounts.noise_model`: the scale drawn, the discrete
Laplace law) and ``n``: ``--users`` under bounded neighbours, else the mean released row sum
(post-processing, said on stderr).  ``--state FILE`` makes the release durable as ``aggregate
--state`` does (:class:`~dpstream.durable.release.DurableRelease`): the noise of every step is
keyed by the step, each batch committed before its steps are written, and a killed run continued
by the same command writes what an uninterrupted one would, byte for byte.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from dpstream.cli._app import cli, say, usage_errors, warn_if_seeded
from dpstream.cli._options import SEED_HELP, epsilon_option
from dpstream.cli._outputs import output_file, prepare_output
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
from dpstream.io import InputError, read_matrix_with_header
from dpstream.io.rows import RowBatch, read_rows
from dpstream.io.times import format_times
from dpstream.postprocess import METHODS, PRIORS, check_transition, postprocess
from dpstream.release.locations import (
    NEIGHBOURS,
    LocationCounts,
    ReleasedCounts,
    released_users,
    trajectory_statement,
)

__all__ = ["release_locations"]

#: Rows read per batch (and, with --state, per commit at most).
_BATCH = 1 << 18


@cli.command("release-locations")
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Where to write the CSV step,<location>,... ('-' for stdout).")
@click.option("--time-column", required=True, help="The time of each row: ISO 8601 (no offset = UTC) or epoch seconds.")
@click.option("--user-column", required=True, help="The user of each row.")
@click.option("--location-column", required=True, help="The location of each row (one of --locations).")
@click.option("--locations", "locations_path", required=True, type=click.Path(dir_okay=False, exists=True),
              help="The public locations, one name per line: the output's columns, in this order.")
@click.option("--step", required=True, callback=duration_option,
              help="Length of a time step: an integer and s|m|h|d (1h); steps are aligned in UTC.")
@click.option("--epsilon", type=float, required=True, callback=epsilon_option,
              help="Budget of one step (with --w-event N: of any N consecutive steps of a user).")
@click.option("--w-event", "w_event", type=click.IntRange(min=1), default=1, show_default=True,
              help="Protect any N consecutive steps of a user at --epsilon (noise for epsilon/N per step).")
@click.option("--neighbours", type=click.Choice(tuple(NEIGHBOURS)), default="bounded", show_default=True,
              help="bounded: n users (--users, public), one user's location changes (sensitivity 2 per step); "
                   "unbounded: one user's rows added or removed (sensitivity 1; n not public).")
@click.option("--users", type=int, default=None, help="The public number n of users (bounded neighbours): every step "
                                                       "holds exactly n rows.")
@click.option("--postprocess", "method", type=click.Choice(METHODS), default=None,
              help="Also post-process the released counts under the public --transition matrix (needs "
                   "--postprocessed): map (Cao et al.), mle, mean, kalman or smooth.")
@click.option("--transition", "transition_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --postprocess: the public transition matrix, CSV m x m (row = from), rows summing to 1, "
                   "a header row of location names optional (then in the order of --locations).")
@click.option("--prior", type=click.Choice(PRIORS), default="frequency", show_default=True,
              help="With --postprocess: the initial distribution P^1.")
@click.option("--postprocessed", "postprocessed_path", type=click.Path(dir_okay=False), default=None,
              help="With --postprocess: where the estimates go (CSV, the layout of OUT; rewritten whole by every run).")
@click.option("--seed", type=int, default=None, help=SEED_HELP)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT (and --postprocessed) if it exists.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), default=None,
              help="A secret state file: the release continues where a stopped run left it, never re-drawing noise.")
@click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=1.0, show_default=True,
              callback=seconds_option, help="With --state: the least time between two commits.")
@click.option("--max-gap", callback=gap_option, default=None,
              help="With --neighbours unbounded: the longest time between two rows' steps (an integer and s|m|h|d): "
                   "every step in between is released. Default: a gap may release at most 4,194,304 counts (steps x "
                   "locations).")
def release_locations(input_path: str, output_path: str, time_column: str, user_column: str, location_column: str,
                      locations_path: str, method: str | None, transition_path: str | None, prior: str,
                      postprocessed_path: str | None, seed: int | None, force: bool, state_path: str | None,
                      checkpoint_seconds: float, **options: Any) -> None:
    """Release noisy counts of users per time step and location from INPUT's rows (time, user, location).

    INPUT is CSV with a header (.gz allowed, '-' is stdin) or Parquet, one row per user and step:
    a second row of a user in a step is refused, so are unknown locations and rows out of time
    order.  Every cell of a step gets exact discrete Laplace noise of scale N x sensitivity /
    epsilon (N = --w-event), so any N consecutive steps of a user cost epsilon and a trajectory of
    T steps T x epsilon / N.  OUT is CSV 'step,<location>,...', written as steps close.
    """
    max_gap = options.pop("max_gap")
    with usage_errors():
        locations = read_names(locations_path, "--locations", "location")
        params = dict(epsilon=options["epsilon"], locations=locations, step=options["step"],
                      neighbours=options["neighbours"], users=options["users"], w_event=options["w_event"])
        LocationCounts(**params, seed=0)  # refuse bad parameters before reading or writing
        _check_not_inputs(locations_path, {"-o": output_path, "--state": state_path,
                                           "--postprocessed": postprocessed_path})
        target = _check_postprocess(method, transition_path, postprocessed_path, output_path=output_path,
                                    inputs={"INPUT": input_path, "--locations": locations_path,
                                            "--transition": transition_path, "--state": state_path},
                                    force=force or state_path is not None)
    transition = None if method is None else _read_transition(transition_path, locations)
    rows = read_rows(input_path, time_column=time_column, unit_column=user_column, column=None,
                     partition_column=location_column, batch_rows=_BATCH)
    if state_path is not None:
        _durable_run(state_path, input_path=input_path, output_path=output_path, params=params, rows=rows, seed=seed,
                     force=force, checkpoint_seconds=checkpoint_seconds,
                     columns=(time_column, user_column, location_column), max_gap=max_gap)
    else:
        if click.get_current_context().get_parameter_source("checkpoint_seconds") is not \
                click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--checkpoint-seconds applies with --state only.")
        releaser = LocationCounts(**params, seed=seed)
        warn_if_seeded(seed)
        out = prepare_output(output_path, force=force, inputs=[input_path, locations_path, transition_path])
        writer = _Writer(releaser, max_gap)
        with output_file(out) as sink:
            sink.write(writer.header_text())
            for batch in rows:
                writer.feed(batch, sink)
            writer.end(sink)
        writer.report()
    if target is not None:
        _write_postprocessed(target, output_path, params, method=method, transition=transition, prior=prior)


def _check_not_inputs(locations_path: str, outputs: dict[str, str | None]) -> None:
    """Refuse an output or state that is the --locations file (it would be overwritten before it is read again)."""
    for flag, path in outputs.items():
        if path not in (None, "-") and os.path.abspath(path) == os.path.abspath(locations_path):
            raise ValueError(f"{flag} and --locations must name different files, got {locations_path!r} for both.")


def _check_postprocess(method: str | None, transition_path: str | None, path: str | None, *, output_path: str,
                       inputs: dict[str, str | None], force: bool) -> Path | None:
    """Usage errors of --postprocess and its options, and where it writes, checked before any work."""
    given = [flag for flag, value in (("--transition", transition_path), ("--postprocessed", path)) if value]
    if method is None:
        if click.get_current_context().get_parameter_source("prior") is not click.core.ParameterSource.DEFAULT:
            given.append("--prior")
        if given:
            raise ValueError(f"{given[0]} applies with --postprocess only.")
        return None
    if transition_path is None or path is None:
        raise ValueError("--postprocess needs --transition (the public matrix) and --postprocessed (where the "
                         "estimates go).")
    return derived_output(path, "--postprocessed", output_path=output_path, inputs=inputs, force=force,
                          sources=list(inputs.values()))


def _read_transition(path: str | None, locations: list[str]) -> np.ndarray:
    """The public transition matrix, checked against the locations: its shape, its rows (each sums to 1) and, when
    it has a header row, its names (those of --locations, in their order)."""
    assert path is not None
    matrix, names = read_matrix_with_header(path, "transition matrix")
    if matrix.shape != (len(locations), len(locations)):
        raise InputError(f"the transition matrix {path} is {matrix.shape[0]} x {matrix.shape[1]}, but --locations "
                         f"names {len(locations)} locations: it must be {len(locations)} x {len(locations)}.")
    if names is not None and names != locations:
        column = next((i for i, (a, b) in enumerate(zip(names, locations)) if a != b), min(len(names),
                                                                                            len(locations)))
        found = repr(names[column]) if column < len(names) else "nothing"
        wanted = repr(locations[column]) if column < len(locations) else "nothing"
        raise InputError(f"the header of the transition matrix {path} has {found} in column {column + 1} where "
                         f"--locations has {wanted}: its rows and columns follow the order of --locations.")
    try:
        return check_transition(matrix, f"the transition matrix {path}")
    except ValueError as error:
        raise InputError(str(error)) from None


class _Writer(RowFeeder):
    """Parses each batch's times, feeds the release and writes the steps it closes."""

    def __init__(self, releaser: LocationCounts, max_gap: int | None = None) -> None:
        self.releaser, self.max_gap = releaser, max_gap
        self.times = BatchTimes()
        self.steps = 0  # steps written by this run

    def header_text(self) -> str:
        """The header line: ``step`` and the locations (CSV quoting)."""
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerow(["step", *self.releaser.locations])
        return text.getvalue()

    def feed(self, batch: RowBatch, sink: TextIO) -> None:
        if not len(batch):
            return
        times = self.times(batch)
        releaser = self.releaser
        if not releaser.bounded:  # bounded neighbours refuse any step without rows, so any gap, at once
            check_gap(releaser.steps_closed(times), times=times, first=releaser.position + 1, seconds=releaser.step,
                      per=len(releaser.locations), noun="step", max_gap=self.max_gap)
        for released in self.releaser.release_parts(times, batch.units, batch.partitions):
            self.write(released, sink)

    def write(self, released: ReleasedCounts, sink: TextIO) -> None:
        if not len(released):
            return
        text = io.StringIO()
        rows = ([step, *counts] for step, counts in zip(format_times(released.steps), released.counts.tolist()))
        csv.writer(text, lineterminator="\n").writerows(rows)
        sink.write(text.getvalue())
        self.steps += len(released)

    def report(self) -> None:
        releaser = self.releaser
        say(f"privacy: {releaser.privacy()}")
        say(trajectory_statement(releaser, releaser.released))
        say(f"released {releaser.released:,} steps x {len(releaser.locations):,} locations (the span of the release, "
            "from the first row's step to the last row's, is public).")


def _durable_run(state_path: str, *, input_path: str, output_path: str, params: dict[str, Any],
                 rows: Iterator[RowBatch], seed: int | None, force: bool, checkpoint_seconds: float,
                 columns: tuple[str, ...], max_gap: int | None = None) -> None:
    """``release-locations --state FILE``: the release under a durable run, each batch committed before it is
    written."""
    header = _Writer(LocationCounts(**params, seed=0)).header_text()
    durable_rows(state_path, command="release-locations", params={"method": "locations", **params}, columns=columns,
                 build=lambda key: LocationCounts(**params, key=key), feeder=lambda counts: _Writer(counts, max_gap),
                 header=header, unit="steps", rows=rows, input_path=input_path, output_path=output_path, seed=seed,
                 force=force, checkpoint_seconds=checkpoint_seconds)


def _write_postprocessed(target: Path, output_path: str, params: dict[str, Any], *, method: str | None,
                         transition: np.ndarray | None, prior: str) -> None:
    """Read OUT back (every step released so far) and write the estimates of ``method`` whole to ``target``."""
    assert method is not None and transition is not None
    locations = params["locations"]
    names = [f"c{i}" for i in range(len(locations) + 1)]  # by position: a location may be named "step"
    table = pcsv.read_csv(output_path, read_options=pcsv.ReadOptions(column_names=names, skip_rows=1),
                          convert_options=pcsv.ConvertOptions(column_types={
                              "c0": pa.string(), **{name: pa.int64() for name in names[1:]}}))
    noisy = np.column_stack([table.column(name).to_numpy() for name in names[1:]]).astype(np.float64)
    release = LocationCounts(**params, seed=0)  # the public noise model only: no noise is drawn
    users = release.users if release.bounded else released_users(noisy)
    estimate = postprocess(noisy, transition, users=users, method=method, prior=prior, **release.noise_model())
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(["step", *locations])
    values = io.StringIO()
    np.savetxt(values, estimate.counts, delimiter=",", fmt="%.10g")
    for step, line in zip(table.column("c0").to_pylist(), values.getvalue().splitlines()):
        text.write(f"{step},{line}\n")
    with output_file(target) as sink:
        sink.write(text.getvalue())
    source = "--users" if release.bounded else "the mean released row sum (post-processing; n is not public)"
    say(f"{method} ({'no' if method == 'mle' else prior} prior) of {noisy.shape[0]:,} steps: n = {users:,} from "
        f"{source}; the likelihood is the release's noise (discrete Laplace of scale {release.scale:g} per cell); "
        f"wrote {target} (post-processing: no budget spent).")

