"""What the commands that read rows of named columns share (``aggregate``, ``release-locations``).

The options' callbacks (a duration, the seconds between commits), a file of public names (the
partitions, the locations), the time kind decided by the first row and said on stderr, and the
rows as a durable run's input log absorbs them.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import numpy as np
import pyarrow.compute as pc

from dpstream.cli import _durable as durable
from dpstream.cli._app import say, warn_if_seeded
from dpstream.cli._outputs import is_stream, prepare_output
from dpstream.io import Batch, InputError
from dpstream.io.rows import RowBatch
from dpstream.io.times import MAX_DURATION, duration_text, format_times, parse_duration, parse_times, time_kind

__all__ = ["GAP_VALUES", "BatchTimes", "RowFeeder", "check_gap", "derived_output", "duration_option", "durable_rows",
           "gap_option", "read_names", "row_batches", "seconds_option"]

#: The most values a gap between two rows releases unless --max-gap is given (as many as a window may hold).
GAP_VALUES = 1 << 22


def duration_option(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A duration option (``30m``, ``1h``, ``1d``) as seconds."""
    try:
        return parse_duration(value)
    except ValueError as error:
        if re.fullmatch(r"\s*[0-9]+[smhd]\s*", value):  # well formed, too long
            raise click.BadParameter(str(error)) from None
        raise click.BadParameter(f"{value!r} is not an integer and s, m, h or d (m = minutes), e.g. 30m.") from None


def gap_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--max-gap``: a duration in seconds (None: not given, the default bound on the values released)."""
    return None if value is None else duration_option(ctx, param, value)


def check_gap(closed: np.ndarray, *, times: np.ndarray, first: int, seconds: int, per: int, noun: str,
              max_gap: int | None) -> None:
    """Refuse, before any work, a row whose gap after the row before it would release more than ``--max-gap`` (when
    given) or more than :data:`GAP_VALUES` values (``per`` for each ``noun`` it closes; ``closed`` counts them before
    each row, ``times`` the rows' nanoseconds, ``first`` the first row's number): every step in a gap is released,
    which is public (times are) but would take minutes, a hang to the user."""
    if not closed.size:
        return
    row = int(np.argmax(closed))
    count = int(closed[row])
    if (count * seconds <= max_gap) if max_gap is not None else count * per <= GAP_VALUES:
        return
    head = (f"row {first + row}: its time {format_times(times[row:row + 1])[0]} comes {duration_text(count * seconds)} "
            f"after the newest {noun} before it")
    if max_gap is not None:
        raise ValueError(f"{head}, more than --max-gap {duration_text(max_gap)}: every {noun} in between would be "
                         "released; a larger --max-gap releases them.")
    larger = (f"--max-gap {duration_text(count * seconds)} releases them" if count * seconds <= MAX_DURATION else
              "--max-gap allows at most 100 years")
    raise ValueError(f"{head}: the {count:,} {noun}s up to it would all be released ({count * per:,} values, more "
                     f"than the {GAP_VALUES:,} a gap releases without --max-gap); {larger}.")


def seconds_option(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--checkpoint-seconds``: a number of seconds >= 0 (NaN refused)."""
    if value != value:  # NaN passes FloatRange
        raise click.BadParameter(f"must be a number of seconds >= 0, got {value!r}.")
    return value


def read_names(path: str, flag: str, noun: str) -> list[str]:
    """The public names of ``path``, one a line (blank lines skipped), distinct, at least one; ``flag`` and ``noun``
    name the option and one name in the errors (``--partitions``, ``partition``)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            names = [line.strip() for line in handle if line.strip()]
    except UnicodeDecodeError as error:
        raise ValueError(f"{flag} {path} is not UTF-8 text (byte {error.start + 1}).") from None
    if not names:
        raise ValueError(f"{flag} {path} names no {noun}.")
    if len(set(names)) != len(names):
        repeated = next(name for name, count in Counter(names).items() if count > 1)
        raise ValueError(f"{flag} {path} names the {noun} {repeated!r} twice.")
    return names


class BatchTimes:
    """The times of the batches of one input: their kind (ISO 8601 or epoch seconds) decided by the first row and
    said on stderr, then every batch parsed as int64 nanoseconds."""

    def __init__(self) -> None:
        self.kind: str | None = None

    def __call__(self, batch: RowBatch) -> np.ndarray:
        if self.kind is None:
            self.kind = time_kind(str(batch.times[0]))
            say(f"times: {'epoch seconds' if self.kind == 'epoch' else 'ISO 8601, no offset read as UTC'} "
                f"(from the first row)")
        return parse_times(batch.times, kind=self.kind, first_row=batch.first_row)


class RowFeeder:
    """What feeds a release its rows and writes what it releases (``feed``, ``write``): the end of the input is
    refused when it held no rows, else the release's last open part flushed and written."""

    releaser: Any

    def write(self, released: Any, sink: TextIO) -> None:  # pragma: no cover - every feeder has its own
        raise NotImplementedError

    def end(self, sink: TextIO) -> None:
        if self.releaser.position == 0:
            raise InputError("the input holds no rows.")
        self.write(self.releaser.flush(), sink)


def row_batches(rows: Iterator[RowBatch], held: list[RowBatch]) -> Iterator[Batch]:
    """The rows as a durable run's input log absorbs them: values, and the time, unit and partition texts; each
    batch is appended to ``held`` as it is handed out."""
    for batch in rows:
        held.append(batch)
        keys = batch.units if batch.partitions is None else pc.binary_join_element_wise(batch.units,
                                                                                       batch.partitions, "\x1f")
        yield Batch(values=batch.values, lines=np.arange(batch.first_row, batch.first_row + len(batch)),
                    times=batch.times.to_pylist(), keys=keys.to_pylist())


def derived_output(path: str, flag: str, *, output_path: str, inputs: dict[str, str | None], force: bool,
                   sources: list[str | None]) -> Path | None:
    """Where an output computed from OUT read back at the end goes (``aggregate --revised``, ``release-locations
    --postprocessed``), checked before any work: OUT a regular file, ``path`` none of OUT and ``inputs``, its
    directory existing; ``sources`` are the inputs :func:`~dpstream.cli._outputs.prepare_output` protects."""
    if output_path == "-" or is_stream(Path(output_path)):
        raise ValueError(f"{flag} reads the release back from -o: give a regular file, not {output_path!r}.")
    for other, named in {"-o": output_path, **inputs}.items():
        if named not in (None, "-") and os.path.abspath(named) == os.path.abspath(path):
            raise ValueError(f"{flag} and {other} must name different files, got {path!r} for both.")
    if not Path(path).parent.is_dir():
        raise ValueError(f"the directory {Path(path).parent} of {flag} does not exist (nothing was written).")
    return prepare_output(path, force=force, inputs=sources)


def durable_rows(state_path: str, *, command: str, params: dict[str, Any], columns: tuple[Any, ...],
                 build: Callable[[bytes], Any], feeder: Callable[[Any], Any], header: str, unit: str,
                 rows: Iterator[RowBatch], input_path: str, output_path: str, seed: int | None, force: bool,
                 checkpoint_seconds: float,
                 batches: Callable[[Iterator[RowBatch], list[RowBatch]], Iterator[Batch]] = row_batches,
                 key: bytes | None = None) -> None:
    """``COMMAND --state FILE`` over rows (``aggregate``, ``release-locations``): the release built by
    ``build(key)`` under a durable run (:func:`dpstream.cli._durable.start`; the state records ``params``, the
    ``columns`` and the seed), the header once, every batch not consumed by earlier runs fed to
    ``feeder(releaser)`` (its ``feed(batch, sink)``) and committed before it is written, its ``end(sink)``, the
    last commit, its ``report()``, and how many ``unit`` (the releaser's ``released``) this run released.  The
    last commit's message is not said: it counts the rows consumed, data under a unit- or user-level relation.
    ``key``: a new state's key, the one its budget-store charge recorded the fingerprint of."""
    if input_path == "-":
        raise click.UsageError(f"{command} --state reads a file, not stdin (it skips the rows consumed by earlier "
                               "runs).")
    method = params["method"]
    recorded = {**params, "columns": list(columns), "seed": seed}
    run = durable.start(state_path, method=method, params=recorded, seed=seed, input_path=input_path,
                        output_path=output_path, force=force, checkpoint_seconds=checkpoint_seconds, build=build,
                        key=key)
    try:
        warn_if_seeded(seed)
        writer = feeder(run.releaser)
        before = (run.releaser.position, run.releaser.released)
        held: list[RowBatch] = []
        with durable.guarded(run, counts=False), run.output() as sink:
            if run.state.progress.output_bytes == 0:
                sink.write(header)
            for fed in run.feed_batches(batches(rows, held)):
                batch = held.pop()
                held.clear()  # the batches before it were consumed by earlier runs: let them go
                writer.feed(batch.slice(int(fed.lines[0]) - batch.first_row), sink)
                run.checkpoint(sink)
            writer.end(sink)
            run.finish(sink)
        writer.report()
        where = f"state {state_path}"
        if run.releaser.position == before[0]:
            say(f"nothing new: every row of the input was consumed by earlier runs; nothing was released or spent "
                f"({where}).")
        else:
            say(f"released {run.releaser.released - before[1]:,} {unit} in this run "
                f"({'resumed' if run.resumed else 'new release'}; {where}).")
    finally:
        run.close()
