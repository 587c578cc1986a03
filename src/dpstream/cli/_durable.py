"""``dpstream release ... --state FILE``: the command's side of a durable release.

The release itself -- the state, the keyed mechanism restored from it, the commit before each
publication, the checks of the output and the input against what the state committed -- is
:class:`dpstream.durable.release.DurableRelease` (see its module for how it works).  Here: where
the output may go (``-o FILE``, a regular file, neither the input nor the state), what is said
on stderr, and the library's errors as the command's usage errors (exit 2) or stops (exit 128 + N).

Options.  File input commits at most once per batch of 65,536 values, stdin in groups, both at
most once every ``--checkpoint-seconds`` (default 1 second): a value read from stdin is written
at most that long after the previous commit, plus the time of a save, even if stdin pauses.
From stdin, the producer is expected to continue from the consumed count, which ``dpstream
budget FILE`` shows; a stream read from a file continues from a file holding the whole stream.
With ``--seed`` the key is derived from the seed (reproducible, NOT secret: tests only), and an
interrupted and resumed run writes exactly the output of an uninterrupted one.

Times and keys.  With ``--time-column`` the output is CSV ``time,value`` whose header is written
once (a resumed output has it: ``ColumnsWriter.header`` is False), and file input skips the
consumed rows batch by batch.  With ``--key-column`` the releaser is a
:class:`~dpstream.release.by_key.ByKey` whose key ``k`` has the command's mechanism built with
``key=key_secret(secret, k)``, the secret being the state's key.

ToPL (``--method topl``) has no ``key=`` mode: its simulated clients read one keyed stream,
``KeyedBits(key, ("topl",))`` (:mod:`dpstream.release.registry`); its snapshot records how many
words were read (``bits``, the key left out), and the restored stream reads the same words again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import click

from dpstream.cli._app import Stopped, say
from dpstream.cli._outputs import is_stream, prepare_output
from dpstream.durable import StateMismatchError
from dpstream.durable.keys import seed_key
from dpstream.durable.release import CHECKPOINT_SECONDS, PER_KEY, DurableRelease, ParameterError

__all__ = ["CHECKPOINT_SECONDS", "PER_KEY", "DurableRelease", "guarded", "seed_key", "start", "stopped"]


def start(state_path: str, *, method: str, params: dict[str, Any], seed: int | None, build: Callable[[bytes], Any],
          input_path: str, output_path: str, force: bool, checkpoint_seconds: float = CHECKPOINT_SECONDS,
          max_keys: int | None = None, key: bytes | None = None) -> DurableRelease:
    """Create or open FILE for ``release --state FILE -o OUTPUT`` and start the run (see
    :meth:`DurableRelease.start`; ``key``: a new state's, the one its budget-store charge recorded); parameters
    that do not fit are usage errors."""
    if output_path == "-" or is_stream(Path(output_path)):
        raise click.UsageError(f"--state needs -o FILE, a regular file that a resumed run can check and "
                               f"append to; got -o {output_path} (nothing was written).")
    _check_distinct(state_path, output_path, input_path)

    def output(resumed: bool) -> Path:
        target = prepare_output(output_path, force=force or resumed, inputs=[input_path])
        if not resumed and target.exists():
            say(f"warning: {target} exists and a new state starts a new release over it: if it held an earlier "
                "release of this stream, publishing both spends the privacy budget again.")
        return target

    try:
        run = DurableRelease.start(state_path, method=method, params=dict(params, output=os.path.abspath(output_path)),
                                   seed=seed, build=build, output=output, from_stdin=input_path == "-",
                                   checkpoint_seconds=checkpoint_seconds, max_keys=max_keys, key=key,
                                   source=None if input_path == "-" else os.path.abspath(input_path))
    except (ParameterError, StateMismatchError) as error:
        raise click.UsageError(str(error)) from None
    if run.completed:
        say(f"{run.output_path}: the {len(run.completed):,} bytes committed by the last run but not written "
            "(it was stopped in between) were written from the state.")
    if run.dropped:
        say(f"{run.output_path}: the {len(run.dropped):,} bytes written after the last checkpoint are released "
            "again, and checked to be identical.")
    return run


def _check_distinct(state_path: str, output_path: str, input_path: str) -> None:
    """Refuse a state that is the output or the input (or its lock file): the release would overwrite one
    with the other, e.g. the released values with the secret state."""
    state = Path(state_path)
    names = {"the output": Path(output_path), "the input": None if input_path == "-" else Path(input_path)}
    for what, other in names.items():
        if other is None:
            continue
        for mine in (state, state.with_name(state.name + ".lock")):
            same = os.path.abspath(mine) == os.path.abspath(other) or os.path.realpath(mine) == os.path.realpath(other)
            if not same and mine.exists() and other.exists():
                same = mine.samefile(other)
            if same:
                raise click.UsageError(f"--state {state_path} is {what} {other}: the state, the input and the output "
                                       "must be three different files (nothing was written).")


def stopped(run: DurableRelease, error: BaseException, *, counts: bool = True) -> None:
    """Say what a stopped run left: the output up to its last checkpoint, and how to continue (``counts=False``:
    without the numbers of values, data under a unit-level relation)."""
    saved = run.saved
    kept = f"the {saved.released:,} values of the last checkpoint ({saved.consumed:,} input values consumed)" \
        if counts else "what was released up to the last checkpoint"
    say(f"stopped: the output {run.output_path} keeps {kept}; run the same command again to continue.")
    if isinstance(error, Stopped):
        raise click.exceptions.Exit(128 + error.signum) from None
    if isinstance(error, KeyboardInterrupt):
        raise click.exceptions.Exit(128 + signal.SIGINT) from None


@contextmanager
def guarded(run: DurableRelease, *, counts: bool = True) -> Iterator[None]:
    """The body of a durable run: stopped by a signal, it says what the output keeps and exits 128 + N; after
    an input error or a refused value it commits (publishes) what was released before it; a new stream that
    committed nothing leaves no state and no output (:meth:`DurableRelease.abandon`)."""
    try:
        yield
    except (Stopped, KeyboardInterrupt) as error:
        run.abandon()
        stopped(run, error, counts=counts)
        raise
    except (click.ClickException, ValueError):
        with suppress(Exception):  # the error told is the first one
            run.commit_released()
        run.abandon()
        raise
    except BaseException:
        run.abandon()
        raise
