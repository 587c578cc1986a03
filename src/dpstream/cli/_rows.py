"""What the commands that read rows of named columns share (``aggregate``, ``release-locations``).

The options' callbacks (a duration, the seconds between commits), a file of public names (the
partitions, the locations), the time kind decided by the first row and said on stderr, and the
rows as a durable run's input log absorbs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import numpy as np
import pyarrow.compute as pc

from dpstream.cli._app import say
from dpstream.io import Batch
from dpstream.io.rows import RowBatch
from dpstream.io.times import parse_duration, parse_times, time_kind

__all__ = ["BatchTimes", "duration_option", "read_names", "row_batches", "seconds_option"]


def duration_option(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A duration option (``30m``, ``1h``, ``1d``) as seconds."""
    try:
        return parse_duration(value)
    except ValueError as error:
        if re.fullmatch(r"\s*[0-9]+[smhd]\s*", value):  # well formed, too long
            raise click.BadParameter(str(error)) from None
        raise click.BadParameter(f"{value!r} is not an integer and s, m, h or d (m = minutes), e.g. 30m.") from None


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
        raise ValueError(f"{flag} {path} names a {noun} twice.")
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


def row_batches(rows: Iterator[RowBatch], held: list[RowBatch]) -> Iterator[Batch]:
    """The rows as a durable run's input log absorbs them: values, and the time, unit and partition texts; each
    batch is appended to ``held`` as it is handed out."""
    for batch in rows:
        held.append(batch)
        keys = batch.units if batch.partitions is None else pc.binary_join_element_wise(batch.units,
                                                                                       batch.partitions, "\x1f")
        yield Batch(values=batch.values, lines=np.arange(batch.first_row, batch.first_row + len(batch)),
                    times=batch.times.to_pylist(), keys=keys.to_pylist())
