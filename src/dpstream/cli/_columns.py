"""``dpstream release --time-column/--key-column``: CSV output with the time and key of each value.

Without these options ``release`` writes one value per line, no header (see ``release.py``).
With them, the output is CSV (RFC 4180 quoting: a field holding a comma, a quote or a line
end is quoted, quotes doubled), with a header line:

* ``--time-column T``: ``time,value`` -- the time text of each released value's input row, as
  written in the input (trimmed of blanks and enclosing quotes, never parsed).
* ``--key-column K``: ``key,position,value``, or ``key,position,time,value`` with a time
  column: one independent stream per key (:class:`~dpstream.release.by_key.ByKey`), ``position``
  the 0-based position of the value in its key's stream.

Rows come in input order; held-out rows produce no row.  ``--missing skip`` drops a row before
it reaches a stream, so it shifts the later positions of that stream (``zero`` keeps them).

After a keyed release, what it tells about every key (:meth:`~dpstream.release.by_key.ByKey.report`:
values, released, theta, s or the structure, hold-out, epsilon) is a table on stderr for at most
:data:`TABLE_KEYS` keys, and ``--summary FILE`` writes it as CSV (:data:`SUMMARY_COLUMNS`) for any number.
"""

from __future__ import annotations

import csv
import decimal
import itertools
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import numpy as np

from dpstream._checks import check_stream_values
from dpstream.accounting import ZcdpGuarantee
from dpstream.cli._app import quote, report_reading, say, stated_privacy
from dpstream.cli._outputs import check_finite, output_file
from dpstream.io import Batch, Record, StreamReader
from dpstream.io.vectorized import csv_rows
from dpstream.release.by_key import ByKey, KeyedRelease, KeyReport, key_bits, new_secret, seed_secret, show_key

__all__ = ["STANDARD_ERROR", "SUMMARY_COLUMNS", "TABLE_KEYS", "ColumnsWriter", "check_columns", "header", "key_table",
           "keys_line", "release_columns", "released_line", "report_keys", "standard_errors_of",
           "standard_errors_option", "write_summary"]

#: A keyed release prints its per-key table on stderr when it has at most this many keys.
TABLE_KEYS = 20

#: The columns of ``--summary FILE`` (one row per key, keys sorted): the fields of a key's report.
SUMMARY_COLUMNS = KeyReport._fields


#: The column ``release --standard-errors`` adds after ``value``.
STANDARD_ERROR = "standard_error"


def _remember_standard_errors(context: click.Context, param: click.Parameter, value: bool) -> None:
    context.meta["standard_errors"] = value


def standard_errors_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``release --standard-errors``: read from the command's context by the writers (:func:`standard_errors_of`),
    not passed along every path of the command."""
    return click.option(
        "--standard-errors", is_flag=True, expose_value=False, callback=_remember_standard_errors,
        help="bt, bt-zcdp, sqrt-zcdp, banded-zcdp, tops, tops-zcdp, pak, pak-uncapped: add the column "
             "'standard_error' after 'value' (a plain output becomes CSV 'value,standard_error' with that header): the "
             "exact standard error of each released value's noise, a function of its position and the public "
             "parameters (and of theta once chosen); the grid's rounding, clipping, truncation at theta and smoothing "
             "bias are not in it.")(command)


def standard_errors_of(stream: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """With ``--standard-errors``, the standard errors of ``stream``'s released values at positions (any key's
    stream: every key's has the same parameters); else None."""
    context = click.get_current_context(silent=True)
    if context is None or not context.meta.get("standard_errors"):
        return None
    return stream.standard_errors


def header(*, time: bool, key: bool, errors: bool = False) -> list[str]:
    """The output's header line for a release with a time column, a key column or both (``errors``: and the
    standard errors' column).

    >>> header(time=True, key=False), header(time=True, key=True, errors=True)
    (['time', 'value'], ['key', 'position', 'time', 'value', 'standard_error'])
    """
    if key:
        names = ["key", "position", "time", "value"] if time else ["key", "position", "value"]
    elif time:
        names = ["time", "value"]
    else:
        raise ValueError("a CSV release needs a time column or a key column.")
    return [*names, STANDARD_ERROR] if errors else names


#: Rows of a keyed release turned into text at a time (a group of batches is written in such slices).
_WRITE_ROWS = 65536


class _PerKey:
    """Each key's standard errors from its own stream (a key's ToPS or PAK chooses its own theta), one call per
    key of the rows asked (a row written has its key's stream made)."""

    def __init__(self, streams: ByKey) -> None:
        self.streams = streams

    def standard_errors(self, positions: np.ndarray, keys: list[str]) -> np.ndarray:
        positions, keys = np.asarray(positions), np.asarray(keys, dtype=object)
        out = np.empty(positions.shape)
        for key in dict.fromkeys(keys.tolist()):
            rows = keys == key
            out[rows] = self.streams.streams[key].standard_errors(positions[rows])
        return out


def _times(times: list[str], rows: np.ndarray) -> list[str]:
    return np.array(times, dtype=object)[rows].tolist()


class ColumnsWriter:
    """Feeds one stream (``streams`` a mechanism) or one stream per key (a :class:`ByKey`) and
    writes the CSV rows of what is released; each value is checked finite first.

    ``announce(mechanism)`` is called once, when the first threshold is known; ``clipped``
    counts the values outside ``[0, upper_bound]`` (that ``--clip`` clips).
    """

    def __init__(self, streams: Any, *, time: bool, announce: Callable[[Any], None], upper_bound: float,
                 clip: bool, written: str) -> None:
        self.streams, self.time = streams, time
        self.keyed = isinstance(streams, ByKey)
        self.announce, self.upper_bound, self.clip, self.written = announce, upper_bound, clip, written
        self.announced = False
        self.clipped = 0
        #: Values released (rows written, the header aside).
        self.released = 0
        #: Whether to write the header line (False when appending to an output that has it: --state).
        self.header = True
        #: Called with the sink after each record (stdin) or batch (files) is consumed: --state's checkpoint.
        self.after: Callable[[TextIO], None] | None = None
        #: With --standard-errors: the standard errors of a stream's values at positions (a column after 'value').
        self.errors: Callable[..., np.ndarray] | None = standard_errors_of(
            streams if not self.keyed else _PerKey(streams))

    def _start(self, sink: TextIO) -> Any:
        out = csv.writer(sink, lineterminator="\n")
        if self.header:
            out.writerow(header(time=self.time, key=self.keyed, errors=self.errors is not None))
        return out

    def _with_errors(self, columns: list, positions: Callable[[], np.ndarray], keys: list[str] | None = None) -> list:
        """``columns``, and with --standard-errors the standard errors at ``positions()`` (of ``keys``' streams when
        keyed) after them (computed only then)."""
        if self.errors is None:
            return columns
        return [*columns, self.errors(np.asarray(positions()), *(() if keys is None else (keys,)))]

    def _maybe_announce(self, stream: Any) -> None:
        if not self.announced and stream.threshold is not None:
            self.announced = True
            self.announce(stream)

    def _check(self, values: np.ndarray | float, *, position: int, key: str | None) -> None:
        try:
            check_finite(values, position=position, written=self.written)
        except click.ClickException as error:
            if key is None:
                raise
            raise click.ClickException(f"key {quote(key)}: {error.message}") from None

    # -- live: one record at a time (stdin) --------------------------------------------------

    def live(self, records: Iterator[Record], sink: TextIO) -> int:
        """Release record by record, each row written and flushed as soon as it is released."""
        out, keyed = None, self.keyed
        for record in records:
            if out is None:  # the header, once the input's header has been read
                out = self._start(sink)
                sink.flush()
            value = record.value
            if self.clip and (value < 0.0 or value > self.upper_bound) and math.isfinite(value):
                self.clipped += 1
            row = self._keyed_row(record, value) if keyed else self._timed_row(record, value)
            if row is not None:
                out.writerow(row)
                sink.flush()
                self.released += 1
            if self.after is not None:
                self.after(sink)
        return self.released

    def _keyed_row(self, record: Record, value: float) -> list | None:
        stream = self.streams.stream(record.key)
        got = self.streams.release_one(value, record.key)  # the stream just looked up
        self._maybe_announce(stream)
        if got is None:
            return None
        position, released = got
        self._check(released, position=position, key=record.key)
        row = [record.key, position, record.time, released] if self.time else [record.key, position, released]
        return row if self.errors is None else [*row, float(self.errors(np.array([position]), [record.key])[0])]

    def _timed_row(self, record: Record, value: float) -> list | None:
        released = self.streams.release_one(value)
        self._maybe_announce(self.streams)
        if released is None:
            return None
        position = self.streams.position - 1
        self._check(released, position=position, key=None)
        return [record.time, released] if self.errors is None else \
            [record.time, released, float(self.errors(np.array([position]))[0])]

    # -- batches (file input) ----------------------------------------------------------------

    #: With --key-column and no checkpoints, up to this many batches are released together, until the group holds
    #: :attr:`ROWS_PER_KEY` rows per key: each key's mechanism is then called once a group (what a release of
    #: many keys' speed depends on; with few keys a batch is a group, and memory that of one batch), and what
    #: the release writes and says is that of batch by batch: the same rows, first error and key announced.
    GROUP = 4
    ROWS_PER_KEY = 256

    def batches(self, batches: Iterator[Batch], sink: TextIO) -> int:
        """Release batch by batch; each key's mechanism gets its rows of a batch (a group of batches) in one call."""
        out, group = None, []
        grouped = self.keyed and self.after is None
        try:
            for batch in batches:
                if out is None:  # the header, once the input's header has been read
                    out = self._start(sink)
                if self.clip:
                    values = batch.values
                    self.clipped += int(np.count_nonzero((values < 0.0) | (values > self.upper_bound)))
                if grouped:
                    self._admit(batch, group, sink)
                    group.append(batch)
                    rows = sum(map(len, group))
                    if len(group) == self.GROUP or rows >= self.ROWS_PER_KEY * len(self.streams):
                        pending, group = group, []
                        self._release_group(pending, sink)
                    continue
                if self.keyed:
                    self._keyed_batch(batch, sink)
                else:
                    self._timed_batch(batch, sink)
                if self.after is not None:
                    self.after(sink)
        except Exception:
            if group:  # the batches read before the error are released, as batch by batch
                pending, group = group, []
                self._release_group(pending, sink)
            raise
        if group:
            self._release_group(group, sink)
        return self.released

    def _timed_batch(self, batch: Batch, sink: TextIO) -> None:
        stream = self.streams
        released = stream.release(batch.values)
        self._maybe_announce(stream)
        if released.size:
            self._check(released, position=stream.position - released.size, key=None)
            sink.write(csv_rows(self._with_errors([batch.times[len(batch) - released.size :], released],
                                                  lambda: np.arange(stream.position - released.size, stream.position))))
            self.released += released.size

    def _keyed_batch(self, batch: Batch, sink: TextIO) -> None:
        if not self.clip:  # name the first bad row in input order, as the live path does
            outside = (batch.values < 0.0) | (batch.values > self.upper_bound)
            if outside.any():
                self._refuse(batch, int(np.argmax(outside)))
        got = self.streams.release(batch.values, batch.keys)
        if not self.announced:
            ready = next((stream for stream in self.streams.streams.values() if stream.threshold is not None), None)
            if ready is not None:
                self._maybe_announce(ready)
        self._refuse_not_finite(got, got.values.size)
        self._write_keyed(got, batch.times, got.values.size, sink)

    def _refuse_not_finite(self, got: KeyedRelease, stop: int) -> None:
        """Raise for the first released value among the first ``stop`` that is not a finite number."""
        bad = ~np.isfinite(got.values[:stop])
        if bad.any():
            first = int(np.argmax(bad))
            self._check(float(got.values[first]), position=int(got.positions[first]), key=got.keys[first])

    def _write_keyed(self, got: KeyedRelease, times: list[str] | None, stop: int, sink: TextIO) -> None:
        """Write the first ``stop`` released rows (the text of at most :data:`_WRITE_ROWS` rows at a time)."""
        for start in range(0, stop, _WRITE_ROWS):
            end = min(stop, start + _WRITE_ROWS)
            columns = [got.keys[start:end], got.positions[start:end]]
            if self.time:
                columns.append(_times(times, got.rows[start:end]))
            columns.append(got.values[start:end])
            sink.write(csv_rows(self._with_errors(columns, lambda start=start, end=end: got.positions[start:end],
                                                  got.keys[start:end])))
        self.released += stop

    # -- groups of batches (keyed file input without checkpoints) ------------------------------

    def _admit(self, batch: Batch, group: list[Batch], sink: TextIO) -> None:
        """What releasing ``batch`` alone would check first (a value outside [0, B], a key beyond --max-keys),
        then its new keys' mechanisms built in the order batch by batch builds them (sorted within a batch)."""
        if not self.clip:
            outside = (batch.values < 0.0) | (batch.values > self.upper_bound)
            if outside.any():
                pending = list(group)
                group.clear()  # released now, so that the refused row's position counts them
                if pending:
                    self._release_group(pending, sink)
                self._refuse(batch, int(np.argmax(outside)))
        self.streams.check_room(batch.keys)
        for key in sorted(set(batch.keys).difference(self.streams.streams)):
            self.streams.stream(key)

    def _release_group(self, group: list[Batch], sink: TextIO) -> None:
        """Release a group of admitted batches in one call per key, and write and say what batch by batch would."""
        keys = list(itertools.chain.from_iterable(batch.keys for batch in group))
        times = list(itertools.chain.from_iterable(batch.times for batch in group)) if self.time else None
        starts = np.cumsum([0] + [len(batch) for batch in group])
        before = None if self.announced else {key: self.streams.streams[key].position for key in set(keys)}
        got = self.streams.release(np.concatenate([batch.values for batch in group]), keys)
        if before is not None:
            self._announce_group(keys, starts, before)
        bad = ~np.isfinite(got.values)
        if bad.any():  # batch by batch writes the batches before the one of the first value that is not finite
            start = starts[np.searchsorted(starts, got.rows[int(np.argmax(bad))], side="right") - 1]
            self._write_keyed(got, times, int(np.searchsorted(got.rows, start)), sink)
            self._refuse_not_finite(got, got.values.size)
        self._write_keyed(got, times, got.values.size, sink)

    def _announce_group(self, keys: list[str], starts: np.ndarray, before: dict[str, int]) -> None:
        """Announce the key batch by batch announces: after the first batch in which a key's threshold became known,
        the first such key in build order."""
        ready = {key: stream for key, stream in self.streams.streams.items() if stream.threshold is not None}
        if not ready:
            return
        need = {key: max(stream.hold - before.get(key, 0), 1) for key, stream in ready.items()}  # the row it took
        seen: dict[str, int] = dict.fromkeys(need, 0)
        known: dict[str, int] = {}
        for row, key in enumerate(keys):
            if key in need and key not in known:
                seen[key] += 1
                if seen[key] == need[key]:
                    known[key] = row
                    if len(known) == len(need):
                        break
        order = {key: index for index, key in enumerate(self.streams.streams)}
        first = min(known, key=lambda key: (int(np.searchsorted(starts, known[key], side="right")), order[key]))
        self._maybe_announce(ready[first])

    def _refuse(self, batch: Batch, index: int) -> None:
        """Raise the error of row ``index``'s value, outside [0, B], as its key's mechanism words it
        (or the error of a new key beyond --max-keys in an earlier row, as the live path would)."""
        key = batch.keys[index]
        self.streams.check_room(batch.keys[: index + 1])
        stream = self.streams.streams.get(key)
        position = (0 if stream is None else stream.position) + batch.keys[:index].count(key)
        try:
            check_stream_values(batch.values[index : index + 1], self.upper_bound, clip=False, offset=position)
        except ValueError as error:
            raise ValueError(f"key {show_key(key)}: {error}") from None


def summary(streams: ByKey, *, hold: int) -> str:
    """One line on stderr after a keyed release: keys, values released, keys still in their hold-out."""
    return keys_line(len(streams), streams.held(), hold=hold)


def keys_line(keys: int, held: int, *, hold: int) -> str:
    """What :func:`summary` says of ``keys`` streams of which ``held`` ended within their hold-out (either engine)."""
    start = "from its first value (no hold-out)" if hold == 0 else f"after a hold-out of {hold:,} values"
    text = f"{keys:,} key{'s' * (keys != 1)}, each its own stream {start}"
    if held:
        text += (f"; {held:,} key{'s' * (held != 1)} ended within {'their' if held != 1 else 'its'} hold-out and "
                 "released nothing")
    return text + "."


def per_key_privacy(stream: Any, *, seed: int | None, durable: bool = False) -> list[str]:
    """The lines that state a keyed release's guarantee: per key, and what that does not protect.

    ``durable``: the secret is the key of a ``--state`` file (each key's mechanism in ``key=`` mode).
    """
    if seed is not None:
        source = f"a key derived from --seed {seed} (replayable, NOT secret)"
    elif durable:
        source = "the secret key of the state file (keep the file secret: it recomputes every key's noise)"
    else:
        source = "a random 32-byte secret drawn for this run and never stored"
    stated = stated_privacy(stream)
    adding = ("the rhos add up: k keys are (k rho)-zCDP, whose epsilon at a fixed delta grows about as sqrt(k)"
              if isinstance(stated, ZcdpGuarantee) else "the epsilons add up")
    return [
        f"privacy, per key (each key's stream is released on its own, with its own hold-out, threshold and budget): "
        f"{stated}",
        "the guarantee is per key: keys and how many values each has are public, and someone whose values fall "
        f"under k keys is protected by k times this budget ({adding}).",
        f"noise: each key draws from its own keyed ChaCha20 stream (identity: the key's text) under {source}.",
    ]


def check_columns(context: click.Context, *, column: str | None, time_column: str | None, key_column: str | None,
                   max_keys: int) -> None:
    """Usage errors of --column, --time-column, --key-column and --max-keys, before anything is read."""
    given: dict[str, str] = {}
    for flag, name in (("--column", column), ("--time-column", time_column), ("--key-column", key_column)):
        if name is None:
            continue
        if not name.strip():
            raise click.UsageError(f"{flag} must name a column, got {quote(name)}.")
        if name in given:
            raise click.UsageError(f"{flag} and {given[name]} must name different columns, got {quote(name)} "
                                   "for both.")
        given[name] = flag
    if key_column is None:
        if context.get_parameter_source("max_keys") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--max-keys applies only with --key-column.")
    elif max_keys < 1:
        raise click.UsageError(f"--max-keys must be at least 1, got {max_keys}.")
    _check_summary(context, keyed=key_column is not None)


def _check_summary(context: click.Context, *, keyed: bool) -> None:
    """Usage errors of --summary: keys needed, the local engine, and a file of its own."""
    path = context.params.get("summary_path")
    if path is None:
        return
    if not keyed:
        raise click.UsageError("--summary applies only with --key-column.")
    if context.params.get("engine") == "spark":
        raise click.UsageError("--summary applies with --engine local only.")
    for option, other in (("-o", "output_path"), ("INPUT", "input_path"), ("--state", "state_path")):
        named = context.params.get(other)
        if named not in (None, "-") and os.path.abspath(named) == os.path.abspath(path):
            raise click.UsageError(f"--summary and {option} must name different files, got {quote(path)} for both.")


def release_columns(reader: StreamReader, target: Any, releaser: Any, *, build: Callable[[Any], Any],
                    announce: Callable[[Any], None], seed: int | None, max_keys: int, time: bool, keyed: bool,
                    written: str, upper_bound: float, clip: bool, chunk: int) -> Any:
    """``release`` with --time-column and/or --key-column: read ``reader``, write CSV rows to ``target``;
    return what released (``releaser``, or the :class:`~dpstream.release.by_key.ByKey` of the keys).

    ``releaser`` is the mechanism of the one stream (without keys; with keys only its ``hold`` is
    read); ``build(seed)`` builds a mechanism drawing from ``seed`` (a bit source), one per key;
    ``announce(mechanism)`` tells its threshold and guarantee (without keys).
    """
    name = reader.source
    if keyed:
        secret = new_secret() if seed is None else seed_secret(seed)
        streams: Any = ByKey(build=lambda key: build(key_bits(secret, key)), max_keys=max_keys)

        def tell(stream: Any) -> None:
            for line in per_key_privacy(stream, seed=seed):
                say(line)
    else:
        streams, tell = releaser, announce
    writer = ColumnsWriter(streams, time=time, announce=tell, upper_bound=upper_bound, clip=clip, written=written)
    writer.announced = not keyed and releaser.threshold is not None  # announced already
    try:
        with output_file(target) as sink:  # a failed release leaves no file and destroys none
            if name == "stdin":
                released = writer.live(reader.records(), sink)
            else:
                released = writer.batches(reader.batches(chunk), sink)
            if reader.stats.values == 0:
                raise click.ClickException(f"{name} holds no values.")
            if released == 0:
                within = "each key's hold-out" if keyed else "the hold-out"
                raise click.ClickException(
                    f"{name} ended after {reader.stats.values:,} values, all within {within} of {releaser.hold:,}: "
                    "nothing was released (lower --hold or give a longer stream)."
                )
    finally:
        reader.close()
    report_reading(reader, clipped=writer.clipped if clip else None, upper_bound=upper_bound)
    if keyed:
        report_keys(streams, line=f"released {released:,} values of {summary(streams, hold=releaser.hold)}")
    else:
        say(released_line(released, releaser.hold))
    return streams


def released_line(released: int, hold: int) -> str:
    """The last line of a release of one stream: what was released, after which hold-out."""
    if hold == 0:
        return f"released {released:,} values from the first value (no hold-out)."
    return f"released {released:,} values after holding out {hold:,}."


def report_keys(streams: ByKey, *, line: str) -> None:
    """After a keyed release: ``line`` on stderr, then each key's report as a table (at most :data:`TABLE_KEYS`
    keys) and, with ``--summary FILE`` (read from the command's parameters), as CSV.

    Only public or published numbers (:class:`~dpstream.release.by_key.KeyReport`), so telling them costs nothing.
    """
    say(line)
    reports = streams.report()
    path = click.get_current_context().params.get("summary_path")
    if len(reports) <= TABLE_KEYS:
        for text in key_table(reports):
            say(text)
    elif path is None:
        say(f"{len(reports):,} keys, more than {TABLE_KEYS} for a table here: --summary FILE writes theta, s, "
            "the hold-out and epsilon of each key as CSV.")
    if path is not None:
        write_summary(path, reports)
        say(f"per-key summary: {len(reports):,} row{'s' * (len(reports) != 1)} written to {path}.")


def _fields(report: KeyReport) -> list[str]:
    """A key's report as text: theta and epsilon as short as they read back exactly, '' for none."""
    theta = "" if report.threshold is None else f"{report.threshold!r}"
    return [report.key, str(report.values), str(report.released), theta, report.smoothed_levels,
            str(report.hold), f"{report.epsilon!r}"]


def shown_epsilon(epsilon: float) -> str:
    """``epsilon`` for people: at most 10 significant digits, rounded **up** (a guarantee at a smaller epsilon than
    the one spent would be false); an epsilon recomputed from a noise scale rounded up (below the one asked by about
    1e-12 of it) reads as the one asked.

    >>> shown_epsilon(0.09999999999989766), shown_epsilon(1.0), shown_epsilon(0.12345678901)
    ('0.1', '1.0', '0.1234567891')
    """
    return repr(float(decimal.Context(prec=10, rounding=decimal.ROUND_CEILING).create_decimal(epsilon)))


def key_table(reports: list[KeyReport]) -> list[str]:
    """The per-key table on stderr: one aligned line per key under a header ('-' where nothing is chosen yet);
    epsilon as :func:`shown_epsilon` (the summary CSV keeps the exact one)."""
    rows = [["key", "values", "released", "theta", "s", "hold", "epsilon"]]
    rows += [[show_key(row[0]) if not row[0].isprintable() else row[0], *(field or "-" for field in row[1:-1]),
              shown_epsilon(report.epsilon)] for row, report in zip(map(_fields, reports), reports)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(field.ljust(width) if column == 0 else field.rjust(width)
                      for column, (field, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def write_summary(path: str, reports: list[KeyReport]) -> None:
    """``--summary FILE``: the reports as CSV, one row per key, replaced whole and atomically (through
    :func:`~dpstream.cli._outputs.output_file`), so a resumed release rewrites it and a kill leaves the old file."""
    with output_file(Path(path)) as sink:
        out = csv.writer(sink, lineterminator="\n")
        out.writerow(SUMMARY_COLUMNS)
        out.writerows(map(_fields, reports))
