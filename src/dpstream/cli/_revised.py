"""``release --revised FILE`` and ``--plot FILE.png``: the revised values beside the first release.

The first release (``-o``) is what each value was when it was released, online: inside a leaf
(a period with ``--period``, a leaf of a fraction of the window with ``--query-length``, a block
of ``b^s`` values otherwise) every value is the smoother's prediction and the leaf's last value
carries its correction.  The revised values (:mod:`dpstream.release.revisions`) are the best
estimate of every value of each closed leaf now: its measured total spread by the public shape
of the period; the open leaf's values are its first release.

When the release has ended, the published output is read back and revised -- post-processing of
published values and public parameters, nothing spent -- and written to ``--revised FILE`` in
the output's own layout: one value per line without columns; with them, the output's CSV header
with its last column named ``revised`` instead of ``value``, rows in the output's order.  The
files are written whole or not at all (:mod:`dpstream.cli._outputs`).  Unlike the
first release it is not final: a ``--state`` release rewrites it whole at the end of every run
(a leaf that closed since changes).  ``--plot FILE.png`` draws the first release, faint, and the
revised values over the last :data:`PLOT_VALUES` positions (summed over keys with
``--key-column``).  Both read ``-o`` back, so they need ``-o FILE`` (not ``-`` or a FIFO).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

import click
import numpy as np

from dpstream.cli._app import quote, say
from dpstream.cli._outputs import is_stream, output_directory, output_file, prepare_output

__all__ = ["PLOT_VALUES", "check_revised", "write_revised", "write_revised_csv"]

#: ``--plot`` shows the last this many positions of the stream.
PLOT_VALUES = 2000


def check_revised(context: click.Context, options: dict[str, Any]) -> None:
    """Usage errors of --revised and --plot (taken out of ``options``: outputs, not parameters of the mechanism),
    and where they write, checked before any work."""
    revised, plot = options.pop("revised_path"), options.pop("plot_path")
    params = context.params
    given = [flag for flag, path in (("--revised", revised), ("--plot", plot)) if path is not None]
    if not given:
        return
    if params["method"] != "tops":
        raise click.UsageError(f"{given[0]} applies to --method tops, not {params['method']}.")
    if params.get("engine") == "spark":
        raise click.UsageError(f"{given[0]} applies with --engine local only.")
    output = params["output_path"]
    if output == "-" or is_stream(Path(output)):
        raise click.UsageError(f"{given[0]} reads the release back from -o: give a regular file, not {quote(output)}.")
    if plot is not None and Path(plot).suffix.lower() != ".png":
        raise click.BadParameter(f"must be a file name ending in .png, got {quote(plot)}.", param_hint="'--plot'")
    others = {"-o": output, "INPUT": params["input_path"], "--state": params.get("state_path"),
              "--summary": params.get("summary_path"), "--revised": revised}
    for flag, path in (("--revised", revised), ("--plot", plot)):
        for option, named in others.items():
            if path is not None and option != flag and named not in (None, "-") and _same(named, path):
                raise click.UsageError(f"{flag} and {option} must name different files, got {quote(path)} for both.")
        if path is not None and not Path(path).parent.is_dir():  # prepare_output would name it -o's directory
            raise click.ClickException(f"the directory {Path(path).parent} of {flag} does not exist (nothing was "
                                       "written).")
        if path is not None:  # a --state release rewrites them at the end of every run
            prepare_output(path, force=params["force"] or params.get("state_path") is not None,
                           inputs=[params["input_path"]])


def _same(one: str, other: str) -> bool:
    return os.path.abspath(one) == os.path.abspath(other)


def write_revised(mechanism: Any) -> None:
    """After a release: read ``-o`` back and write --revised and --plot, if asked (the command's parameters).

    ``mechanism`` is what released: a ToPS, or a :class:`~dpstream.release.by_key.ByKey` of them.
    """
    params = click.get_current_context().params
    revised_path, plot_path = params.get("revised_path"), params.get("plot_path")
    if revised_path is None and plot_path is None:
        return
    keyed, timed = params.get("key_column") is not None, params.get("time_column") is not None
    output = Path(params["output_path"])
    first, keys, positions = _read_release(output, keyed=keyed, columns=keyed or timed)
    revised = _revise(mechanism, first, keys)
    if revised_path is not None:
        with output_file(Path(revised_path)) as sink:
            _write(sink, output, revised, columns=keyed or timed)
        say(f"revised values: {revised.size:,} written to {revised_path} (post-processing of the release; "
            "a closed period's values are its measured total spread by the period's public shape).")
    if plot_path is not None:
        _plot(Path(plot_path), positions if keyed else mechanism.hold + np.arange(first.size), first, revised,
              keyed=keyed)
        say(f"plot: {plot_path}")


def write_revised_csv(path: Path, output: Path, revised: np.ndarray) -> None:
    """Write ``path`` whole (or not at all): the CSV ``output`` with its last column replaced by ``revised``, named
    ``revised`` in the header, rows in the output's order."""
    with output_file(path) as sink:
        _write(sink, output, revised, columns=True)


def _read_release(output: Path, *, keyed: bool, columns: bool) -> tuple[np.ndarray, Any, np.ndarray | None]:
    """The first release read back compactly (pyarrow: float64 values, keys dictionary-encoded, positions int64),
    so that revising a long release costs tens of bytes per value, not a Python object per field."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    if output.stat().st_size == 0:  # nothing released yet (a hold-out not complete)
        return np.zeros(0), None, None
    try:
        if not columns:  # one value per line
            table = pcsv.read_csv(output, read_options=pcsv.ReadOptions(column_names=["value"]),
                                  convert_options=pcsv.ConvertOptions(column_types={"value": pa.float64()}))
            return table.column("value").to_numpy(), None, None
        head = next(csv.reader(io.StringIO(output.open(encoding="utf-8").readline())))
        types = {name: pa.string() for name in head[:-1]}
        types[head[-1]] = pa.float64()
        if keyed:
            types[head[0]], types[head[1]] = pa.dictionary(pa.int32(), pa.string()), pa.int64()
        table = pcsv.read_csv(output, convert_options=pcsv.ConvertOptions(column_types=types))
    except (pa.ArrowInvalid, StopIteration) as error:
        raise click.ClickException(f"the output {output} does not read back as the release wrote it ({error}); no "
                                   "revised values were written.") from None
    first = table.column(head[-1]).to_numpy()
    if not keyed:
        return first, None, None
    keys = table.column(head[0]).combine_chunks()
    return first, keys, table.column(head[1]).to_numpy()


def _revise(mechanism: Any, first: np.ndarray, keys: Any) -> np.ndarray:
    """The revised values of ``first`` (rows of the output), each key's stream revised on its own (``keys`` a
    dictionary-encoded array: its dictionary the key names, its indices each row's)."""
    try:
        if keys is None:
            return mechanism.revised(first)
        revised = np.empty_like(first)
        inverse = np.asarray(keys.indices, dtype=np.int64)
        names = keys.dictionary.to_pylist()
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
        for index, key in enumerate(names):
            rows = order[bounds[index] : bounds[index + 1]]
            if rows.size:
                revised[rows] = mechanism.streams[key].revised(first[rows])
        return revised
    except (KeyError, ValueError) as error:
        raise click.ClickException(f"the output does not hold what the release released ({error}); "
                                   "no revised values were written.") from None


def _write(sink: Any, output: Path, revised: np.ndarray, *, columns: bool) -> None:
    """The output's layout with the revised values: plain lines, or its CSV with the last column ``revised``,
    the output's other fields copied as they are, row by row (memory constant in the rows)."""
    step = 1 << 16
    if not columns:
        for start in range(0, revised.size, step):
            sink.write("".join(f"{value!r}\n" for value in revised[start : start + step].tolist()))
        return
    out = csv.writer(sink, lineterminator="\n")
    with output.open(encoding="utf-8", newline="") as source:
        rows = csv.reader(source)
        out.writerow([*next(rows)[:-1], "revised"])
        values = iter(revised.tolist())
        out.writerows([*row[:-1], value] for row, value in zip(rows, values))


def _plot(path: Path, positions: np.ndarray, first: np.ndarray, revised: np.ndarray, *, keyed: bool) -> None:
    """The first release (faint) and the revised values over the last :data:`PLOT_VALUES` positions."""
    from dpstream.evaluation.plots import Panel, Series, save_figure

    if keyed:  # the sum over keys at each position
        where, inverse = np.unique(positions, return_inverse=True)
        first, revised = np.bincount(inverse, first, where.size), np.bincount(inverse, revised, where.size)
        positions = where
    keep = slice(max(0, positions.size - PLOT_VALUES), None)
    x, first, revised = positions[keep], first[keep], revised[keep]
    what = "sum over keys" if keyed else "value"
    zero = Series(label="zero", x=x[[0, -1]] if x.size else x, y=np.zeros(min(2, x.size)), reference=True)
    line = Series(label="revised: each closed period's total spread by its shape", x=x, y=revised, marker=None,
                  color="tab:blue", linewidth=1.4)
    online = Series(label="first release (online: predictions, the correction on each period's last value)", x=x,
                    y=first, marker=None, color="silver", linewidth=0.8)
    xlabel = f"position in the stream (the last {x.size:,})"
    panels = [Panel(series=[line, zero], xlabel=xlabel, ylabel=f"revised {what}",
                    title="Revised values (post-processing of the release)"),
              Panel(series=[online, line, zero], xlabel=xlabel, ylabel=f"released {what}",
                    title="First release (never changed) and revised values")]
    with output_directory({"plot": path}) as staged:  # the whole picture, or none
        save_figure(staged["plot"], panels, panel_size=(10.0, 3.8), stacked=True)
