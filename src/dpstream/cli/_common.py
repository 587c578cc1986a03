"""What every ``dpstream`` command shares: the group, one-line errors, exit codes, safe outputs.

Flags map to library classes in the command modules and nowhere else.

Errors and exit codes
---------------------
Every error is one line on stderr, ``Error: ...``, quoting at most 80 characters of any value
(:func:`quote`), and the exit code says what kind of error it was:

* ``0``: success.
* ``2``: a usage error -- the command line itself is wrong (an unknown option, a value of the
  wrong form or outside its range, options that do not go together); found before any input is
  read or any output written.
* ``1``: a runtime error -- what the command found while running: an input that is missing or
  malformed, an output it may not write, a failed read or write, a computation that overflowed.
* ``128 + N``: the command was stopped by signal ``N`` (SIGINT 130, SIGHUP 129, SIGTERM 143) --
  the number a shell reports for a process killed by that signal -- after removing its temporary
  files; nothing it was writing to a file was published.
* A broken pipe on the output (``dpstream release ... -o - | head -1``) ends the command quietly
  with code 1, as other Unix tools do when their reader goes away: no message, no traceback.

Outputs
-------
Every command checks where it writes with :func:`prepare_output` before any work, then writes:

* ``-o -``: stdout, as a stream (refused up front when stdout is closed).
* ``-o NAME``, a new name or an existing regular file (the latter only with ``--force``): into a
  temporary file beside NAME, ``.NAME.dpstream-PID-RANDOM.tmp``, renamed onto NAME only when the
  command succeeds (:func:`output_file`).  A failed or interrupted command leaves no file and
  destroys none; of two commands writing to one NAME, the last rename wins and NAME holds one
  whole output.  A symbolic link to a regular file is kept and the file it points to replaced.
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
"""

from __future__ import annotations

import csv
import errno
import math
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO, TypeVar, overload

import click
import numpy as np

from dpstream._checks import check_epsilon
from dpstream._progress import Progress
from dpstream.io import InputError

#: Help of every --seed that seeds the noise of a release.
SEED_HELP = "For tests only: anyone who knows the seed can recompute the noise. Never publish a seeded release."

#: Exit code of a usage error (the command line is wrong).
USAGE_ERROR = 2
#: Exit code of a runtime error (what the command found while running).
RUNTIME_ERROR = 1
#: Signals that stop a command cleanly (temporary files removed); exit code 128 + the signal's number.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: At most this many characters of a value are quoted in an error message.
QUOTE_LIMIT = 80

__all__ = [
    "QUOTE_LIMIT", "RUNTIME_ERROR", "SEED_HELP", "STOP_SIGNALS", "USAGE_ERROR", "Stopped", "check_finite", "cli",
    "epsilon_option", "epsilons_option", "floats", "is_stream", "main", "one_line", "output_directory", "output_file",
    "prepare_output", "progress_bar", "quote", "remove_stale_temporaries", "say", "usage_errors", "warn_if_seeded",
    "write_csv",
]

_Kind = TypeVar("_Kind")


class Stopped(BaseException):
    """A stop signal (SIGTERM, SIGHUP) arrived; raised by the handlers :func:`main` installs.

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` swallows it
    on its way out: every ``with output_file(...)`` it passes removes its temporary file.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)``, cut in the middle to at most ``limit`` characters of the value.

    >>> quote("abc")
    "'abc'"
    >>> quote("0123456789" * 10, limit=10)
    "'012...6789' (100 characters)"
    """
    text = repr(value)
    if not isinstance(value, str):
        return _cut(text, limit)
    if len(value) <= limit:
        return text
    return f"{text[0]}{_cut(text[1:-1], limit)}{text[-1]} ({len(value):,} characters)"


_QUOTED = re.compile(rf"'[^'\n]{{{QUOTE_LIMIT + 1},}}'|\"[^\"\n]{{{QUOTE_LIMIT + 1},}}\"")
#: The longest error line, whatever its source (a last line of defence behind :func:`quote`).
_MESSAGE_LIMIT = 600


def one_line(message: str) -> str:
    """An error message as one line, every quoted run cut to :data:`QUOTE_LIMIT` characters.

    >>> one_line("bad value\\n'" + "y" * 200 + "'")  # doctest: +ELLIPSIS
    "bad value 'yyyy...yyyy'"
    """
    message = " ".join(message.split("\n"))
    if not message.isprintable():  # no control character may break the line (or the terminal)
        message = "".join(char if char.isprintable() else repr(char)[1:-1] for char in message)
    message = _QUOTED.sub(lambda found: found[0][0] + _cut(found[0][1:-1], QUOTE_LIMIT) + found[0][0], message)
    return _cut(message, _MESSAGE_LIMIT)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


class _Group(click.Group):
    """The ``dpstream`` group: library errors become one-line messages with the right exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as error:
            if error.errno == errno.EPIPE:  # the reader went away: end quietly
                _quiet_broken_pipe()
                raise click.exceptions.Exit(RUNTIME_ERROR) from None
            raise click.ClickException(_os_message(error)) from None
        except (ValueError, TypeError, InputError) as error:
            raise click.ClickException(str(error)) from None
        except ArithmeticError as error:
            raise click.ClickException(
                f"the computation overflowed ({error}); the parameters (such as --epsilon) are outside "
                "what floating-point arithmetic can handle."
            ) from None
        except MemoryError:
            raise click.ClickException(
                "not enough memory for these parameters (they set the size of what is kept in memory)."
            ) from None

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """Run the command; in standalone mode, every error is one line and the exit code follows the module's
        rules (2 usage, 1 runtime, 128 + N on signal N, 1 quietly on a broken pipe)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        code = 0
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
            code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        except click.exceptions.NoArgsIsHelpError as error:  # plain `dpstream`: the help, not an error
            click.echo(error.ctx.get_help() if error.ctx else error.format_message(), err=True)
            code = error.exit_code
        except click.exceptions.Abort as error:
            if isinstance(error.__cause__, KeyboardInterrupt):
                say("Error: interrupted (nothing was written to an output file).")
                code = 128 + signal.SIGINT
            else:
                say("Error: aborted.")
                code = RUNTIME_ERROR
        except KeyboardInterrupt:
            say("Error: interrupted (nothing was written to an output file).")
            code = 128 + signal.SIGINT
        except Stopped as stop:
            say(f"Error: stopped by {signal.Signals(stop.signum).name} (nothing was written to an output file).")
            code = 128 + stop.signum
        except click.UsageError as error:
            say(f"Error: {one_line(error.format_message())}")
            code = USAGE_ERROR
        except click.ClickException as error:
            say(f"Error: {one_line(error.format_message())}")
            code = error.exit_code
        try:  # what is still buffered for stdout goes now, where a broken pipe can still be handled
            if sys.stdout is not None:
                sys.stdout.flush()
        except BrokenPipeError:
            _quiet_broken_pipe()
            code = code or RUNTIME_ERROR
        sys.exit(code)


def _os_message(error: OSError) -> str:
    """``[Errno 28] No space left on device: 'x'`` as ``x: no space left on device.``"""
    reason = (error.strerror or str(error)).rstrip(".")
    reason = reason[:1].lower() + reason[1:]
    if error.filename is None:
        return f"{reason}."
    return f"{error.filename}: {reason}."


def _quiet_broken_pipe() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    stdout = sys.stdout
    with suppress(AttributeError, OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout.fileno())
        os.close(null)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpstream")
def cli() -> None:
    """Publish statistics of data streams under differential privacy."""


def main() -> None:
    """Entry point: every error is one line on stderr; see the module docstring for the exit codes."""
    _reserve_standard_descriptors()
    previous = _install_stop_handlers()
    try:
        cli.main()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _reserve_standard_descriptors() -> None:
    """Open /dev/null on a closed descriptor 0, 1 or 2.

    Otherwise the first file the command opens would take its number, and anything written to
    "stdout" would land in it.  Python has already set ``sys.stdout`` (or ``sys.stdin``) to
    None for a closed descriptor, which :func:`prepare_output` refuses for ``-``.
    """
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != descriptor:
                os.dup2(null, descriptor)
                os.close(null)


def _install_stop_handlers() -> dict[int, Any]:
    """Turn SIGTERM and SIGHUP into :class:`Stopped`; return the handlers they replace."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: object) -> None:
        for other in STOP_SIGNALS:  # a second signal must not cut the clean-up short
            signal.signal(other, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue  # nohup: a SIGHUP the user asked to ignore stays ignored
        previous[signum] = signal.signal(signum, stop)
    return previous


@contextmanager
def usage_errors() -> Iterator[None]:
    """Turn the ``ValueError``/``TypeError`` of building objects from flags into a usage error (exit 2).

    Wrap the construction of a mechanism from the command line's options in it, and nothing
    that reads data: an error there is a runtime error.
    """
    try:
        yield
    except (ValueError, TypeError) as error:
        raise click.UsageError(str(error)) from None


def say(message: str) -> None:
    """Progress and diagnostics go to stderr; stdout carries results only."""
    click.echo(message, err=True)


def report_reading(reader: Any, *, clipped: int | None, upper_bound: float) -> None:
    """The lines every release prints after its input: the missing values met, and (with --clip,
    ``clipped`` not None) how many values were clipped into [0, B]."""
    if reader.stats.missing:
        say(reader.stats.summary())
    if clipped is not None:
        say(f"--clip: {clipped:,} values outside [0, {upper_bound:g}] were clipped into it.")


def warn_if_seeded(seed: int | None) -> None:
    """Warn on stderr that a release whose noise was seeded (``--seed``) is for testing only."""
    if seed is not None:
        say("warning: --seed makes the noise recomputable by anyone who knows it; this release is for testing only.")


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


def _same_file(first: os.stat_result, second: os.stat_result) -> bool:
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


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
    stdin = _stdin_status() if "-" in sources else None
    paths = [Path(source) for source in sources if source != "-"]
    for target in targets:
        if stdin is not None and target.exists() and _same_file(os.stat(target), stdin):
            raise click.ClickException(
                f"the output {target} is the input (stdin); choose another {option} (nothing was written)."
            )
        for source in paths:
            if target.exists() and source.exists() and target.samefile(source):
                raise click.ClickException(
                    f"the output is the input file {source}; choose another {option} (nothing was written)."
                )
    kinds = {target: _kind(target) for target in targets}
    for target, kind in kinds.items():
        if kind in ("directory", "dangling", "other") or (files is not None and kind == "stream"):
            raise click.ClickException(
                f"{target} is {_describe_kind(target)}, which is never replaced; choose another {option} "
                "(nothing was written)."
            )
    existing = [target for target, kind in kinds.items() if kind == "file"]
    if existing and not force:
        raise click.ClickException(f"{existing[0]} exists; pass --force to overwrite it (nothing was written).")
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


def _check_stdout(*, reads_stdin: bool) -> None:
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        raise click.ClickException("stdout is closed; give a file with -o (nothing was written).")
    stdin = _stdin_status() if reads_stdin else None
    if stdin is not None and stat.S_ISREG(stdin.st_mode):
        with suppress(AttributeError, OSError, ValueError):
            if _same_file(os.fstat(sys.stdout.fileno()), stdin):
                raise click.ClickException("stdout is the input file (stdin); write elsewhere (nothing was written).")


def floats(text: str) -> list[float]:
    """Parse a comma-separated list of numbers given on the command line."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {quote(text)}.") from None
    if not values:
        raise click.BadParameter(f"expected at least one number, got {quote(text)}.")
    return values


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write dict rows with a header taken from the first row."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def epsilon_option(ctx: click.Context | None, param: click.Parameter | None, value: float) -> float:
    """Click callback of a budget option: :func:`~dpstream._checks.check_epsilon` as a usage error."""
    try:
        return check_epsilon(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def epsilons_option(ctx: click.Context, param: click.Parameter, text: str) -> list[float]:
    """Click callback of an ``--epsilons``-style option: comma-separated budgets."""
    return [epsilon_option(ctx, param, value) for value in floats(text)]


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

#: Every temporary output is named ``.NAME.dpstream-PID-RANDOM.tmp``; nothing else is ever removed.
_TEMP = re.compile(r"^\.(?P<stem>.*)\.dpstream-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
#: The part of a name kept in its temporary file's name (which must stay below NAME_MAX, 255 bytes).
_STEM_LIMIT = 180


def _stem(name: str) -> str:
    return name[:_STEM_LIMIT] or "output"


def _temp_name(name: str) -> str:
    return f".{_stem(name)}.dpstream-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number no process has): leave its file alone
    return True


def remove_stale_temporaries(directory: Path, name: str) -> list[Path]:
    """Remove the temporary outputs for ``name`` in ``directory`` left by killed processes.

    Only what matches ``.NAME.dpstream-PID-RANDOM.tmp`` exactly, is owned by this user, is a
    regular file or a directory (never a symbolic link), belongs to a process that no longer
    exists and is not locked (a live writer holds a lock on its temporary output, which the
    kernel releases when the writer dies, whatever its process namespace) is removed.
    Returns what was removed.
    """
    import fcntl

    removed: list[Path] = []
    stem = _stem(name)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        found = _TEMP.match(entry.name)
        if found is None or found["stem"] != stem or _pid_alive(int(found["pid"])):
            continue
        try:
            status = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(status.st_mode)
            if status.st_uid != os.geteuid() or not (is_dir or stat.S_ISREG(status.st_mode)):
                continue
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if is_dir else 0)
            descriptor = os.open(entry.path, flags)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _same_file(os.fstat(descriptor), status):
                continue
            if is_dir:
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
        finally:
            os.close(descriptor)
    return removed


def _lock(descriptor: int) -> None:
    import fcntl

    with suppress(OSError):
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _fsync_directory(directory: Path) -> None:
    with suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _create_temp_file(temp: Path, target: Path) -> int:
    """Create ``temp``, locked, for what will replace ``target``; return its descriptor."""
    try:
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as error:
        raise click.ClickException(
            f"cannot create a file in {target.parent} ({_os_message(error).rstrip('.')}); nothing was written."
        ) from None
    _lock(descriptor)
    with suppress(OSError):  # a replaced file keeps its permissions (a private output stays private)
        os.fchmod(descriptor, stat.S_IMODE(os.stat(target).st_mode))
    return descriptor


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
    remove_stale_temporaries(final.parent, final.name)
    temp = final.with_name(_temp_name(final.name))
    try:  # from before the file exists: a signal at any point leaves nothing behind
        with os.fdopen(_create_temp_file(temp, final), "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)
        _fsync_directory(final.parent)
    finally:
        with suppress(OSError):
            os.unlink(temp)  # gone already after a successful rename


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
    name = Path(os.path.abspath(out)).name or "out"
    home = out if out.is_dir() else next((path for path in out.parents if path.is_dir()), Path("."))
    remove_stale_temporaries(home, name)
    staging = home / _temp_name(name)  # the name holds this process's number: no other process makes it
    descriptor = None
    try:  # from before the directory exists: a signal at any point leaves nothing behind
        try:
            os.mkdir(staging, 0o777)
        except OSError as error:
            raise click.ClickException(
                f"cannot create a directory in {home} ({_os_message(error).rstrip('.')}); nothing was written."
            ) from None
        descriptor = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        _lock(descriptor)
        yield {kind: staging / path.name for kind, path in paths.items()}
        for path in paths.values():
            with suppress(OSError), open(staging / path.name, "rb") as written:
                os.fsync(written.fileno())
        if out.is_dir():
            for path in paths.values():
                os.replace(staging / path.name, path)
            _fsync_directory(out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, out)
            _fsync_directory(out.parent)
    finally:
        if descriptor is not None:
            os.close(descriptor)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def progress_bar(*, desc: str, unit: str, total: int | None = None, leave: bool = True) -> Iterator[Progress]:
    """A tqdm bar on stderr, fed by the library's progress callback (:mod:`dpstream._progress`).

    Computations reported one after the other add up on the one bar (each starts again at
    ``done = 0``).  Without ``total``, the bar takes the total the first computation announces.
    ``leave=False`` clears the bar when it closes.
    """
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave) as bar:
        base = 0

        def update(done: int, of: int) -> None:
            nonlocal base
            if done == 0:
                base = bar.n
                if bar.total is None:
                    bar.total = of
                    bar.refresh()
            bar.update(base + done - bar.n)

        yield update
