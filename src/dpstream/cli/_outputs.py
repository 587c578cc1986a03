"""Where a ``dpstream`` command writes: checked before any work, and written whole or not at all.

Every command checks where it writes with :func:`prepare_output` before any work, then writes:

* ``-o -``: stdout, as a stream (refused up front when stdout is closed).
* ``-o NAME``, a new name or an existing regular file (the latter only with ``--force``): into a
  temporary file beside NAME, ``.NAME.dpstream-PID-RANDOM.tmp``, renamed onto NAME only when the
  command succeeds (:func:`output_file`).  A failed or interrupted command leaves no file and
  destroys none.  A command holds the lock of its temporary for its whole run: a second command
  writing to the same NAME meanwhile refuses (so does one writing a NAME that a ``--state``
  release appends to, which locks it); should two start in the same instant, both may refuse,
  never both write.  A symbolic link to a regular file is kept and the file it points to replaced.
  Temporary files of processes that were killed (SIGKILL cannot be caught) are removed by the
  next command writing to the same NAME, once their process is gone; no other file is touched.
* ``-o NAME`` where NAME is an existing FIFO, a character device (``/dev/null``, a terminal) or
  one of the process's own descriptors (``/dev/stdout``, ``/dev/fd/N``): written directly as a
  stream, like stdout, with no temporary file and no ``--force`` (nothing is replaced); a failure
  midway leaves what was already written, as on stdout.
* Anything else is refused, even with ``--force``: a directory, a name ending in ``/``, a block
  device, a socket, a dangling symbolic link, an input of the command (also when it is stdin).
* ``--out DIR`` (the evaluation commands): the files are written into a temporary directory
  beside (or inside) DIR and moved into DIR only when all of them are complete
  (:func:`output_directory`): no truncated file on a full disk, no mix of new and old files.

The temporary names, the removal of stale temporaries, the locks and the fsync are those of
every file dpstream replaces, the state file's included: :mod:`dpstream.durable.files`.
"""

from __future__ import annotations

import csv
import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO, TypeVar, overload

import click
import numpy as np

from dpstream.cli._app import os_message, quote
from dpstream.durable.files import (
    create_temporary_directory,
    create_temporary_file,
    discard,
    fsync_directory,
    other_writers,
    publish,
    remove_stale_temporaries,
    same_file,
    temporary_name,
    try_lock,
)

__all__ = ["check_finite", "is_stream", "output_directory", "output_file", "prepare_output", "write_csv"]

_Kind = TypeVar("_Kind")

# -- where a command writes ---------------------------------------------------------------------

#: Names of the process's own descriptors: a stream, whatever file they lead to.
_DESCRIPTOR_PATH = re.compile(r"^/(dev/(stdout|stderr|fd/\d+)|proc/(self|thread-self|\d+)/fd/\d+)$")


def _is_descriptor_path(path: Path) -> bool:
    return bool(_DESCRIPTOR_PATH.match(os.path.abspath(path)))


def _kind(path: Path) -> str:
    """What ``path`` is, for an output: "missing", "file", "stream", "directory", "dangling" or "other"."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return "dangling" if os.path.islink(path) else "missing"
    except NotADirectoryError:
        return "missing"  # a file where a directory of the path should be; found by the directory check
    if _is_descriptor_path(path) or stat.S_ISFIFO(status.st_mode) or stat.S_ISCHR(status.st_mode):
        return "stream"
    if stat.S_ISREG(status.st_mode):
        return "file"
    if stat.S_ISDIR(status.st_mode):
        return "directory"
    return "other"  # a block device, a socket


def is_stream(target: Path | None) -> bool:
    """Whether :func:`output_file` writes ``target`` as a stream (stdout, a FIFO, a device) rather than
    replacing it whole: after a failure, what was written so far stays written."""
    return target is None or _kind(target) == "stream"


def _describe_kind(path: Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a dangling symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stdin_status() -> os.stat_result | None:
    """``os.fstat`` of stdin, or None when it has no descriptor (closed, or replaced in tests)."""
    stream = sys.stdin
    if stream is None:
        return None
    try:
        return os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


@overload
def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (), files: None = None) -> Path | None:
    ...


@overload
def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (),
                   files: Mapping[_Kind, str]) -> dict[_Kind, Path]:
    ...


def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (),
                   files: Mapping[Any, str] | None = None) -> Path | dict[Any, Path] | None:
    """Check where a command writes, before any work, and return where that is.

    Parameters
    ----------
    output : str
        Without ``files``, the value of ``-o/--output``: a file, or ``-`` for stdout.  With
        ``files``, the value of ``--out``: a directory, which the command creates when it
        writes if it does not exist yet.
    force : bool
        ``--force``: an existing regular output file may be replaced.  A FIFO or character
        device is written into without it; anything else that is not a regular file is never
        replaced.
    inputs : iterable of str or None
        What the command reads; ``-`` is stdin (refused as the output when stdin is the output
        file), None and names that are no file (such as a built-in dataset's) are passed over.
    files : mapping, optional
        What the command writes into ``--out``: kind -> file name.

    Returns
    -------
    pathlib.Path, dict or None
        The output (None for stdout); with ``files``, kind -> path inside ``--out``.

    Raises
    ------
    click.UsageError
        If ``-o/--output`` ends with ``/`` (a directory, not a file).
    click.ClickException
        If an output is one of ``inputs`` (even with ``force``), exists without ``force``, is not
        a regular file and not a stream, names a directory, or its directory does not exist
        (for ``--out``: cannot be created); or if stdout is the output and is closed, or stdin
        an input and closed.

    Examples
    --------
    >>> prepare_output("-", force=False) is None
    True
    >>> prepare_output("no-such-dir/released.txt", force=False)
    Traceback (most recent call last):
    click.exceptions.ClickException: the directory no-such-dir of --output does not exist (nothing was written).
    >>> prepare_output("no-such-dir", force=False, files={"summary": "study.csv"})["summary"].as_posix()
    'no-such-dir/study.csv'
    """
    sources = [source for source in inputs if source is not None]
    if "-" in sources and (sys.stdin is None or getattr(sys.stdin, "closed", False)):
        raise click.ClickException("stdin is closed; give the input as a file (nothing was written).")
    if files is None and output == "-":
        _check_stdout(reads_stdin="-" in sources)
        return None
    option = "--output" if files is None else "--out"
    if files is None and output.endswith(("/", os.sep)):
        raise click.UsageError(
            f"--output {quote(output)} ends with '/': give the name of a file, not a directory (nothing was written)."
        )
    targets = [Path(output)] if files is None else [Path(output) / name for name in files.values()]
    _check_not_an_input(targets, sources, option=option)
    _check_replaceable(targets, force=force, option=option, streams=files is None)
    if files is None:
        if not targets[0].parent.is_dir():
            raise click.ClickException(
                f"the directory {targets[0].parent} of --output does not exist (nothing was written)."
            )
        return targets[0]
    directory = Path(output)
    nearest = next((path for path in (directory, *directory.parents) if path.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise click.ClickException(
            f"the directory {directory} of --out cannot be created: {nearest} is a file (nothing was written)."
        )
    return dict(zip(files, targets, strict=True))


def _check_not_an_input(targets: list[Path], sources: list[str], *, option: str) -> None:
    """Refuse an output that is an input of the command (stdin, ``-``, included), even with --force."""
    stdin = _stdin_status() if "-" in sources else None
    paths = [Path(source) for source in sources if source != "-"]
    for target in targets:
        if stdin is not None and target.exists() and same_file(os.stat(target), stdin):
            raise click.ClickException(
                f"the output {target} is the input (stdin); choose another {option} (nothing was written)."
            )
        for source in paths:
            if target.exists() and source.exists() and target.samefile(source):
                raise click.ClickException(
                    f"the output is the input file {source}; choose another {option} (nothing was written)."
                )


def _check_replaceable(targets: list[Path], *, force: bool, option: str, streams: bool) -> None:
    """Refuse what is never replaced (a directory, a dangling link, a device; a stream inside --out, unless
    ``streams``), and an existing file without ``force``."""
    kinds = {target: _kind(target) for target in targets}
    for target, kind in kinds.items():
        if kind in ("directory", "dangling", "other") or (not streams and kind == "stream"):
            raise click.ClickException(
                f"{target} is {_describe_kind(target)}, which is never replaced; choose another {option} "
                "(nothing was written)."
            )
    existing = [target for target, kind in kinds.items() if kind == "file"]
    if existing and not force:
        raise click.ClickException(f"{existing[0]} exists; pass --force to overwrite it (nothing was written).")


def _check_stdout(*, reads_stdin: bool) -> None:
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        raise click.ClickException("stdout is closed; give a file with -o (nothing was written).")
    stdin = _stdin_status() if reads_stdin else None
    if stdin is not None and stat.S_ISREG(stdin.st_mode):
        with suppress(AttributeError, OSError, ValueError):
            if same_file(os.fstat(sys.stdout.fileno()), stdin):
                raise click.ClickException("stdout is the input file (stdin); write elsewhere (nothing was written).")



def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write dict rows with a header taken from the first row."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def check_finite(values: np.ndarray | float, *, position: int, written: str) -> None:
    """Refuse to write a released value that is not a finite number (a last line of defence).

    ``position`` is the 0-based stream position of ``values[0]``; ``written`` says what became
    of the output (such as "nothing was written").

    >>> check_finite(np.array([1.0, np.inf]), position=10, written="nothing was written")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    click.exceptions.ClickException: the released value at 0-based stream position 11 is inf, not a finite ...
    """
    if isinstance(values, float):
        if math.isfinite(values):
            return
        index, value = 0, values
    else:
        bad = ~np.isfinite(values)
        if not bad.any():
            return
        index = int(np.argmax(bad))
        value = float(values[index])
    raise click.ClickException(
        f"the released value at 0-based stream position {position + index:,} is {value!r}, not a finite number: "
        f"the noise overflowed float64 (lower --upper-bound or raise --epsilon); {written}."
    )


# -- writing a file whole, or not at all --------------------------------------------------------


def _cannot_create(what: str, directory: Path, error: OSError) -> click.ClickException:
    return click.ClickException(
        f"cannot create {what} in {directory} ({os_message(error).rstrip('.')}); nothing was written."
    )


def _check_sole_writer(final: Path, temp: Path) -> None:
    """Refuse to write ``final`` while another process does: a command writing it through its own temporary
    (whose lock it holds for the run), or a ``--state`` release appending to it (which locks the file)."""
    writers: list[object] = list(other_writers(final, temp))
    if not writers:
        with suppress(OSError):
            descriptor = os.open(final, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if not try_lock(descriptor):
                    writers = ["unknown"]
            finally:
                os.close(descriptor)  # and with it the lock just taken
    if writers:
        raise click.ClickException(f"{final} is being written by another dpstream process (pid {writers[0]}); "
                                   "wait for it to end, or choose another output (nothing was written).")


@contextmanager
def output_file(target: Path | None) -> Iterator[TextIO]:
    """A text handle for a command's output: stdout when ``target`` is None, else ``target``.

    A regular file (new or existing) is written into a unique temporary file beside it and
    renamed onto it only when the block succeeds, so a failed or interrupted command neither
    leaves a partial file nor destroys an existing one.  A FIFO, a character device or one of
    the process's descriptors (``/dev/stdout``) is written directly, as a stream.  See the
    module docstring.
    """
    if target is None:
        yield sys.stdout
        return
    kind = _kind(target)
    if kind == "stream":
        with open(target, "a", encoding="utf-8") as stream:  # "a": never truncate what /dev/stdout leads to
            yield stream
        return
    if kind not in ("file", "missing"):
        raise click.ClickException(f"{target} is {_describe_kind(target)}, which is never replaced.")
    final = Path(os.path.realpath(target)) if kind == "file" else target  # keep a symbolic link, replace its file
    remove_stale_temporaries(final)
    temp = temporary_name(final)
    try:  # from before the file exists: a signal at any point leaves nothing behind
        try:
            descriptor = create_temporary_file(temp, final)  # a replaced file keeps its permissions
        except OSError as error:
            raise _cannot_create("a file", final.parent, error) from None
        try:
            _check_sole_writer(final, temp)
        except BaseException:
            os.close(descriptor)
            raise
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        publish(temp, final)
    finally:
        discard(temp)  # gone already after a successful rename


@contextmanager
def output_directory(paths: Mapping[_Kind, Path]) -> Iterator[dict[_Kind, Path]]:
    """Stage the files of an ``--out`` directory; move them into place only when all are written.

    ``paths`` (from :func:`prepare_output` with ``files``; every path in one directory, ``--out``)
    map to paths in a temporary directory, ``.OUT.dpstream-PID-RANDOM.tmp`` -- inside ``--out``
    when it exists, else beside it -- where the block writes.  When the block succeeds, a new
    ``--out`` is the temporary directory renamed, and an existing one receives each file by a
    rename; when it fails, the temporary directory is removed and ``--out`` is as it was.
    """
    if not paths:
        yield {}
        return
    directories = {path.parent for path in paths.values()}
    if len(directories) != 1:
        raise ValueError(f"the files of --out must share one directory, got {sorted(map(str, directories))}.")
    out = directories.pop()
    home = out if out.is_dir() else next((path for path in out.parents if path.is_dir()), Path("."))
    named = home / (Path(os.path.abspath(out)).name or "out")  # what the temporary directory is named after
    remove_stale_temporaries(named)
    staging = temporary_name(named)  # the name holds this process's number: no other process makes it
    descriptor = None
    try:  # from before the directory exists: a signal at any point leaves nothing behind
        try:
            descriptor = create_temporary_directory(staging)
        except OSError as error:
            raise _cannot_create("a directory", home, error) from None
        yield {kind: staging / path.name for kind, path in paths.items()}
        for path in paths.values():
            with suppress(OSError), open(staging / path.name, "rb") as written:
                os.fsync(written.fileno())
        if out.is_dir():
            for path in paths.values():
                os.replace(staging / path.name, path)
            fsync_directory(out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            publish(staging, out)
    finally:
        if descriptor is not None:
            os.close(descriptor)
        discard(staging)
