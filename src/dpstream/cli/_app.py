"""What every ``dpstream`` command shares to run: the group, one-line errors, exit codes, signals, messages.

Flags map to library classes in the command modules and nowhere else; the shared option
parsers are in :mod:`dpstream.cli._options`, where a command writes in :mod:`dpstream.cli._outputs`.

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
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import click

from dpstream._progress import Progress
from dpstream.accounting import ZcdpGuarantee
from dpstream.io import InputError
from dpstream.privacy import PrivacyGuarantee, RowsKept
from dpstream.release.tops_defaults import ReleaseWarning

#: Exit code of a usage error (the command line is wrong).
USAGE_ERROR = 2
#: Exit code of a runtime error (what the command found while running).
RUNTIME_ERROR = 1
#: Signals that stop a command cleanly (temporary files removed); exit code 128 + the signal's number.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: At most this many characters of a value are quoted in an error message.
QUOTE_LIMIT = 80

__all__ = [
    "QUOTE_LIMIT", "RUNTIME_ERROR", "STOP_SIGNALS", "USAGE_ERROR", "Stopped", "cli", "main", "one_line", "os_message",
    "UNPROTECTED", "announce", "progress_bar", "quote", "report_clipped", "report_reading", "report_unprotected_option",
    "say", "stated_privacy", "usage_errors", "warn_if_seeded",
]

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


#: A quoted run: opened by a quote that does not follow a letter or digit and closed by one that does not precede
#: one, so that two short quoted words are two runs (never the text between them) and an apostrophe opens nothing.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]*?'(?!\w)|(?<!\w)\"[^\"\n]*?\"(?!\w)")
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
    message = _QUOTED.sub(lambda found: found[0][0] + _cut(found[0][1:-1], QUOTE_LIMIT) + found[0][-1], message)
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
            raise click.ClickException(os_message(error)) from None
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


def os_message(error: OSError) -> str:
    """``[Errno 28] No space left on device: 'x'`` as ``x: no space left on device.``

    >>> os_message(OSError(28, "No space left on device", "x"))
    'x: no space left on device.'
    """
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
    warnings.filterwarnings("ignore", category=ReleaseWarning)  # release says it; studies and audits choose theirs
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


def announce(releaser: Any, describe: Callable[[Any], str]) -> None:
    """Say on stderr what the releaser chose (its threshold) and the privacy it guarantees (:func:`stated_privacy`)."""
    say(describe(releaser))
    say(f"privacy: {stated_privacy(releaser)}")


def _command_option(name: str) -> Any:
    """The value of the running command's option ``name`` (None outside a command, or for a command without it).

    Read from the command's context, so that every path of ``release`` -- one stream or keys, with or
    without --state -- states its guarantee by the options that decide it without handing them along.
    """
    context = click.get_current_context(silent=True)
    return None if context is None else context.params.get(name)


def stated_privacy(releaser: Any) -> Any:
    """The guarantee a release states: the releaser's, about the rows kept when ``--missing skip`` drops rows.

    Dropping a row moves every later value up one position, which the releaser's relation (values
    at positions) does not cover: the statement then says it holds on the stream of the rows kept
    and that whether a row is missing is not protected (:class:`~dpstream.privacy.RowsKept`).
    A guarantee given as text (the Spark engine's, which refuses missing values) is stated as it is.
    """
    guarantee = releaser.privacy()
    if _command_option("missing") != "skip" or not isinstance(guarantee, PrivacyGuarantee):
        return guarantee
    kept = RowsKept(guarantee.neighbours)
    if isinstance(guarantee, ZcdpGuarantee):  # the same rho, stated at the same delta
        return ZcdpGuarantee.of(guarantee.breakdown, neighbours=kept, local=guarantee.local, delta=guarantee.delta)
    return PrivacyGuarantee.of(guarantee.breakdown, neighbours=kept, local=guarantee.local)


#: How every number printed because of --report-unprotected begins.
UNPROTECTED = "not protected by the privacy guarantee (--report-unprotected)"


def _remember_unprotected(context: click.Context, param: click.Parameter, value: bool) -> None:
    context.meta["report_unprotected"] = value


def report_unprotected_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--report-unprotected`` flag of a release command: read by :func:`report_reading` from the
    command's context, not passed to the command (so no path has to hand it along)."""
    return click.option(
        "--report-unprotected", is_flag=True, expose_value=False, callback=_remember_unprotected,
        help="Also print how many values were missing or clipped and the line of the first missing one: exact "
             "counts of the input, NOT protected by the privacy guarantee (each such line says so).",
    )(command)


def _unprotected() -> bool:
    context = click.get_current_context(silent=True)
    return bool(context is not None and context.meta.get("report_unprotected"))


def report_reading(reader: Any, *, clipped: int | None, upper_bound: float) -> None:
    """The lines every release prints after its input: nothing that depends on the data, by default.

    How many values were missing or clipped, and the line of the first missing one, are exact
    counts of the input outside the guarantee (epsilon = infinity for whoever reads stderr).  So by
    default a release prints, with --clip (``clipped`` not None), only what clipping does, the same
    words whatever the data.  The command's ``--report-unprotected`` prints the exact numbers too,
    each line saying that they are not protected (:data:`UNPROTECTED`).
    """
    if _unprotected():
        say(f"{UNPROTECTED}: {reader.stats.summary()}")
    if clipped is not None:
        report_clipped(clipped, upper_bound)


def report_clipped(clipped: int, upper_bound: float) -> None:
    """What --clip did: the same words whatever the data; the exact count only with ``--report-unprotected``."""
    if _unprotected():
        say(f"{UNPROTECTED}: --clip clipped {clipped:,} values outside [0, {upper_bound:g}] into it.")
    else:
        say(f"--clip: values outside [0, {upper_bound:g}] are clipped into it (how many is not reported: the count "
            "depends on the data and is not protected; --report-unprotected prints it).")


def warn_if_seeded(seed: int | None) -> None:
    """Warn on stderr that a release whose noise was seeded (``--seed``) is for testing only."""
    if seed is not None:
        say("warning: --seed makes the noise recomputable by anyone who knows it; this release is for testing only.")



@contextmanager
def progress_bar(*, desc: str, unit: str, total: int | None = None, leave: bool = True) -> Iterator[Progress]:
    """Progress on stderr, fed by the library's progress callback (:mod:`dpstream._progress`).

    On a terminal, a tqdm bar; otherwise (stderr to a log file or a pipe), a plain line now and then
    (:class:`_ProgressLines`), since a bar's carriage-return redraws make one endless line of a log.
    Computations reported one after the other add up on the one bar (each starts again at
    ``done = 0``).  Without ``total``, the bar takes the total the first computation announces.
    ``leave=False`` clears the bar when it closes (plain lines: no closing line).
    """
    if not _on_terminal():
        lines = _ProgressLines(desc=desc, unit=unit, total=total)
        yield lines.update
        if leave:
            lines.close()
        return
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


def _on_terminal() -> bool:
    """Whether stderr is a terminal (where a redrawn bar belongs)."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _ProgressLines:
    """Progress as plain lines: one each time another tenth of the total is done, or when
    :attr:`EVERY` seconds passed since the last line, and one at the close.

    >>> times = iter([0.0, 1.0, 2.0, 3.0, 15.0, 16.0])
    >>> lines = _ProgressLines(desc="runs", unit="run", total=None, clock=lambda: next(times), write=print)
    >>> for done in (0, 5, 20, 21): lines.update(done, 100)
    runs: 20 of 100 runs (20%), 3 s
    runs: 21 of 100 runs (21%), 15 s
    >>> lines.close()
    runs: done, 21 of 100 runs in 16 s
    """

    #: At most this many seconds between two lines while work goes on.
    EVERY = 10.0

    def __init__(self, *, desc: str, unit: str, total: int | None, clock: Callable[[], float] | None = None,
                 write: Callable[[str], None] = say) -> None:
        import time

        self._desc, self._unit, self._total = desc, unit, total
        self._clock = clock or time.monotonic
        self._write = write
        self._start = self._last = self._clock()
        self._done = self._base = self._tenth = 0

    def update(self, done: int, of: int) -> None:
        """The :data:`~dpstream._progress.Progress` callback."""
        if done == 0:
            self._base = self._done
            if self._total is None:
                self._total = of
        self._done = self._base + done
        now = self._clock()
        tenth = 10 * self._done // self._total if self._total else 0
        if tenth > self._tenth or now - self._last >= self.EVERY:
            self._tenth, self._last = max(tenth, self._tenth), now
            self._write(f"{self._desc}: {self._count()}{self._percent()}, {now - self._start:.0f} s")

    def close(self) -> None:
        """The closing line: how much was done and how long it took."""
        self._write(f"{self._desc}: done, {self._count()} in {self._clock() - self._start:.0f} s")

    def _count(self) -> str:
        plural = "" if (self._total or self._done) == 1 else "s"
        return f"{self._done:,}" + (f" of {self._total:,}" if self._total else "") + f" {self._unit}{plural}"

    def _percent(self) -> str:
        return f" ({100 * self._done // self._total}%)" if self._total else ""
