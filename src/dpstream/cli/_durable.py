"""``dpstream release ... --state FILE``: a release that stops and continues without re-spending its budget.

The first run creates FILE (:class:`~dpstream.durable.StreamState`: the command's public
parameters, a secret key of 32 bytes from ``os.urandom``, the mechanism's snapshot, the
progress and the budget ledger) and the output.  The mechanism is built with ``key=``: the
noise of every tree node is a function of the key and the node's identity, so a resumed run
recomputes exactly the noise it had, whatever the run that drew it.

Checkpoints.  At most once per batch of released values (file input: a batch of 65,536
values; stdin: one value) and at most once every ``--checkpoint-seconds`` (default 1 second),
the output is flushed and fsync'ed FIRST, and only then is the state saved with the output's
new byte length, the input values consumed and a ledger entry for the input positions released;
and once more at the end.  So the output is never
behind the state: a run killed at any moment leaves an output that holds at least what the
state records.

Resume.  The same command run again opens FILE (a lock: two processes never drive one stream),
checks that its parameters are the state's (a mismatch is a usage error, exit 2), truncates the
output to the recorded byte length (dropping what the killed run wrote after its last
checkpoint), skips the input values already consumed (file inputs; from stdin, the producer is
expected to continue from the consumed count, which ``dpstream budget FILE`` shows), restores
the mechanism with ``from_state`` and appends.  The dropped lines are released again from the
same input values with the same keyed noise, so they come out identical: a position once
published never changes.  With ``--seed`` the key is derived from the seed (reproducible, NOT
secret: tests only), and an interrupted and resumed run writes exactly the output of an
uninterrupted one.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from dpstream.cli._common import Stopped, is_stream, prepare_output, say, usage_errors
from dpstream.durable import Progress, StateMismatchError, StreamState
from dpstream.durable.keys import seed_key

__all__ = ["CHECKPOINT_SECONDS", "DurableRelease", "seed_key"]

#: Default least time between two checkpoints (``--checkpoint-seconds``); file input also checkpoints
#: at most once per batch of values read, stdin at most once per value.
CHECKPOINT_SECONDS = 1.0


def _strip_key(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The mechanism's snapshot without its key: the state file keeps the key once, in its ``key`` section."""
    noise = snapshot.get("noise")
    if isinstance(noise, dict) and noise.get("kind") == "keyed":
        snapshot = dict(snapshot, noise={name: value for name, value in noise.items() if name != "key"})
    return snapshot


def _with_key(snapshot: dict[str, Any], key: bytes) -> dict[str, Any]:
    noise = snapshot.get("noise")
    if isinstance(noise, dict) and noise.get("kind") == "keyed":
        snapshot = dict(snapshot, noise=dict(noise, key=key))
    return snapshot


class DurableRelease:
    """One run of ``release --state FILE``: the state, the restored mechanism and the output it appends to.

    Use :meth:`start`; then feed :meth:`skip_consumed` the input values, write through
    :meth:`output`, call :meth:`checkpoint` after each write and :meth:`finish` at the end.
    """

    def __init__(self, *, state: StreamState, releaser: Any, method: str, output: Path, resumed: bool,
                 from_stdin: bool, checkpoint_seconds: float = CHECKPOINT_SECONDS) -> None:
        self.state, self.releaser, self.method = state, releaser, method
        self.output_path, self.resumed, self.from_stdin = output, resumed, from_stdin
        progress = state.progress
        self._saved = progress
        self._start = progress
        self._last_time = time.monotonic()
        self._descriptor: int | None = None
        self.checkpoint_seconds = checkpoint_seconds

    # -- starting ---------------------------------------------------------------------------

    @classmethod
    def start(cls, state_path: str, *, method: str, params: dict[str, Any], seed: int | None,
              build: Callable[[bytes], Any], input_path: str, output_path: str, force: bool,
              checkpoint_seconds: float = CHECKPOINT_SECONDS) -> DurableRelease:
        """Create or open FILE, check it against the command, and build or restore the mechanism.

        ``build(key)`` builds the command's mechanism with ``key=`` (its errors are usage errors).
        """
        if output_path == "-" or is_stream(Path(output_path)):
            raise click.UsageError(f"--state needs -o FILE, a regular file that a resumed run can truncate and "
                                   f"append to; got -o {output_path} (nothing was written).")
        path = Path(state_path)
        params = dict(params, output=os.path.abspath(output_path))
        if path.exists() or path.is_symlink():
            state = StreamState.open(path)
            try:
                try:
                    state.check_params(params)
                except StateMismatchError as error:
                    raise click.UsageError(str(error)) from None
                target = prepare_output(output_path, force=True, inputs=[input_path])
                with usage_errors():
                    releaser = build(state.key)  # the command's parameters are checked as in a first run
                if state.mechanism is not None:
                    releaser = _restore(state.mechanism, state.key)
                run = cls(state=state, releaser=releaser, method=method, output=target, resumed=True,
                          from_stdin=input_path == "-", checkpoint_seconds=checkpoint_seconds)
                run._open_output()
            except BaseException:
                state.close()
                raise
            return run
        target = prepare_output(output_path, force=force, inputs=[input_path])
        if target.exists():
            say(f"warning: {target} exists and a new state starts a new release over it: if it held an earlier "
                "release of this stream, publishing both spends the privacy budget again.")
        key = None if seed is None else seed_key(seed)
        with usage_errors():
            build(key or bytes(32))  # refuse bad parameters before the state file exists
        state = StreamState.create(path, params=params, key=key)
        try:
            with usage_errors():
                releaser = build(state.key)
            run = cls(state=state, releaser=releaser, method=method, output=target, resumed=False,
                      from_stdin=input_path == "-", checkpoint_seconds=checkpoint_seconds)
            run._open_output()
        except BaseException:
            state.close()
            raise
        return run

    def _open_output(self) -> None:
        """Open the output for appending at the recorded length (a first run: empty)."""
        recorded = self._saved.output_bytes
        try:
            size = os.stat(self.output_path).st_size
        except FileNotFoundError:
            size = None
        if size is None and recorded:
            raise click.ClickException(f"the output {self.output_path} is missing, but the state {self.state.path} "
                                       f"records {recorded:,} bytes of it; restore the output (nothing was written).")
        if size is not None and size < recorded:
            raise click.ClickException(f"the output {self.output_path} holds {size:,} bytes, fewer than the "
                                       f"{recorded:,} the state {self.state.path} records; it was changed since "
                                       "(nothing was written).")
        descriptor = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        os.ftruncate(descriptor, recorded)
        os.lseek(descriptor, recorded, os.SEEK_SET)
        self._descriptor = descriptor
        if size is not None and size > recorded:
            say(f"{self.output_path}: dropped the {size - recorded:,} bytes written after the last checkpoint; "
                "they are released again, identically.")

    # -- the run ------------------------------------------------------------------------------

    def output(self) -> TextIO:
        """The output as a text handle positioned at its recorded end (closed by :meth:`close`)."""
        assert self._descriptor is not None
        return os.fdopen(self._descriptor, "w", encoding="utf-8", closefd=False)

    def skip_consumed(self, values: Iterable[float]) -> Iterator[float]:
        """The input values after those consumed by earlier runs (file input; stdin is taken as it comes)."""
        consumed = self._saved.consumed
        if self.from_stdin or not consumed:
            return iter(values)
        iterator = iter(values)
        skipped = sum(1 for _ in itertools.islice(iterator, consumed))
        if skipped < consumed:
            raise click.ClickException(
                f"the input holds {skipped:,} values, but the state {self.state.path} has consumed {consumed:,} of "
                "it: is it the same input? (nothing was written)")
        return iterator

    def checkpoint(self, sink: TextIO, *, force: bool = False) -> None:
        """Flush and fsync the output, then save the state with the new output length, progress and ledger.

        Without ``force``, only when values were consumed since the last checkpoint and at least
        ``checkpoint_seconds`` have passed.
        """
        consumed = self.releaser.position
        fresh = consumed - self._saved.consumed
        if not force and (not fresh or time.monotonic() - self._last_time < self.checkpoint_seconds):
            return
        sink.flush()
        os.fsync(self._descriptor)  # the output first: it must never be behind the state
        output_bytes = os.fstat(self._descriptor).st_size
        if fresh:
            guarantee = self.releaser.privacy()
            self.state.spend(epsilon=guarantee.epsilon, delta=guarantee.delta, neighbours=guarantee.neighbours,
                             method=self.method, first=self._saved.consumed, last=consumed)
        released = max(0, consumed - self.releaser.hold) if self.releaser.threshold is not None else 0
        self.state.mechanism = _strip_key(self.releaser.state)
        self.state.progress = Progress(consumed=consumed, released=released, output_bytes=output_bytes)
        self.state.save()
        self._saved, self._last_time = self.state.progress, time.monotonic()

    def finish(self, sink: TextIO) -> str:
        """The last checkpoint; return what to say about the run."""
        self.checkpoint(sink, force=True)
        progress, start = self._saved, self._start
        where = f"state {self.state.path}: {progress.consumed:,} input values consumed, {progress.released:,} released"
        if progress.consumed == start.consumed:
            if self.from_stdin:
                return f"nothing new on stdin; nothing was released or spent ({where})."
            return (f"nothing new: every value of the input was consumed by earlier runs; nothing was released or "
                    f"spent ({where}).")
        if self.releaser.threshold is None:
            return (f"the hold-out has {progress.consumed:,} of its {self.releaser.hold:,} values; nothing released "
                    f"yet; run the same command with more input to continue ({where}).")
        return (f"released {progress.released - start.released:,} values in this run "
                f"({'resumed' if self.resumed else 'new stream'}; {where}).")

    def stopped(self, error: BaseException) -> None:
        """Say what a stopped run left: the output up to its last checkpoint, and how to continue."""
        saved = self._saved
        say(f"stopped: the output {self.output_path} keeps the {saved.released:,} values of the last checkpoint "
            f"({saved.consumed:,} input values consumed); run the same command again to continue.")
        if isinstance(error, Stopped):
            raise click.exceptions.Exit(128 + error.signum) from None
        if isinstance(error, KeyboardInterrupt):
            raise click.exceptions.Exit(128 + signal.SIGINT) from None

    def close(self) -> None:
        """Close the output and release the state's lock (unsaved progress is dropped)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        self.state.close()


def _restore(snapshot: dict[str, Any], key: bytes) -> Any:
    from dpstream.release import PAK, BinaryTreeCounter, ToPS

    kinds = {"tops": ToPS, "binary-tree": BinaryTreeCounter, "pak": PAK}
    kind = snapshot.get("mechanism")
    if kind not in kinds:
        raise click.ClickException(f"the state holds a mechanism of kind {kind!r}, which --state cannot continue.")
    return kinds[kind].from_state(_with_key(snapshot, key))
