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

Times and keys.  With ``--time-column`` the output is CSV ``time,value`` whose header is written
once (a resumed output has it: ``ColumnsWriter.header`` is False), and file input skips the
consumed rows batch by batch (:meth:`DurableRelease.skip_consumed_batches`).  With
``--key-column`` the releaser is a :class:`~dpstream.release.by_key.ByKey` whose key ``k`` has
the command's mechanism built with ``key=key_secret(secret, k)``, the secret being the state's
key: the snapshot is ``ByKey.state`` with each key's own key left out (derived again on resume),
and the ledger records one entry per run for the rows of all keys (stream ``per key``, the number
of keys, each key's guarantee).

ToPL (``--method topl``) has no ``key=`` mode: its simulated clients read one keyed stream,
``KeyedBits(key, ("topl",))``; its snapshot records how many words were read (``bits``, the key
left out), and the restored stream reads the same words again.
"""

from __future__ import annotations

import dataclasses
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
from dpstream.io import Batch
from dpstream.release.by_key import BY_KEY, ByKey, key_secret
from dpstream.release.registry import class_of_kind

__all__ = ["CHECKPOINT_SECONDS", "DurableRelease", "seed_key"]

#: Default least time between two checkpoints (``--checkpoint-seconds``); file input also checkpoints
#: at most once per batch of values read, stdin at most once per value.
CHECKPOINT_SECONDS = 1.0


#: Where a snapshot keeps its keyed noise: ``noise`` (ToPS, PAK, the binary tree), ``bits`` (ToPL's clients).
_NOISE_FIELDS = ("noise", "bits")


def _strip_key(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The mechanism's snapshot without its key: the state file keeps the key once, in its ``key`` section."""
    for field in _NOISE_FIELDS:
        noise = snapshot.get(field)
        if isinstance(noise, dict) and noise.get("kind") == "keyed":
            snapshot = dict(snapshot, **{field: {name: value for name, value in noise.items() if name != "key"}})
    return snapshot


def _with_key(snapshot: dict[str, Any], key: bytes) -> dict[str, Any]:
    for field in _NOISE_FIELDS:
        noise = snapshot.get(field)
        if isinstance(noise, dict) and noise.get("kind") == "keyed":
            snapshot = dict(snapshot, **{field: dict(noise, key=key)})
    return snapshot


def _snapshot(releaser: Any) -> dict[str, Any]:
    """What the state file keeps of the releaser: its snapshot without keys (per-key streams: each key's)."""
    snapshot = releaser.state
    if snapshot.get("mechanism") == BY_KEY:
        return dict(snapshot, streams=[_strip_key(stream) for stream in snapshot["streams"]])
    return _strip_key(snapshot)


#: The ``stream`` of the ledger entries of per-key streams (one entry for the rows of all keys).
PER_KEY = "per key"


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
        self._dropped = b""  # bytes an interrupted run wrote after its last checkpoint: the replay must match them
        self._created_output = False
        self.checkpoint_seconds = checkpoint_seconds
        self.keyed = isinstance(releaser, ByKey)

    # -- starting ---------------------------------------------------------------------------

    @classmethod
    def start(cls, state_path: str, *, method: str, params: dict[str, Any], seed: int | None,
              build: Callable[[bytes], Any], input_path: str, output_path: str, force: bool,
              checkpoint_seconds: float = CHECKPOINT_SECONDS, max_keys: int | None = None) -> DurableRelease:
        """Create or open FILE, check it against the command, and build or restore the mechanism.

        ``build(key)`` builds the command's mechanism with ``key=`` (its errors are usage errors).
        With ``max_keys`` (``--key-column``) the release is one stream per key, a
        :class:`~dpstream.release.by_key.ByKey` whose key ``k`` has the mechanism
        ``build(key_secret(secret, k))``, the secret being the state's key.
        """
        check = build
        if max_keys is not None:
            build = _per_key(build, max_keys)
        if output_path == "-" or is_stream(Path(output_path)):
            raise click.UsageError(f"--state needs -o FILE, a regular file that a resumed run can truncate and "
                                   f"append to; got -o {output_path} (nothing was written).")
        path = Path(state_path)
        params = dict(params, output=os.path.abspath(output_path))
        resumed = path.exists() or path.is_symlink()
        if resumed:
            state = StreamState.open(path)
        else:
            target = prepare_output(output_path, force=force, inputs=[input_path])
            if target.exists():
                say(f"warning: {target} exists and a new state starts a new release over it: if it held an earlier "
                    "release of this stream, publishing both spends the privacy budget again.")
            key = None if seed is None else seed_key(seed)
            with usage_errors():
                check(key or bytes(32))  # refuse bad parameters before the state file exists
            state = StreamState.create(path, params=params, key=key)
        try:
            if resumed:
                try:
                    state.check_params(params)
                except StateMismatchError as error:
                    raise click.UsageError(str(error)) from None
                target = prepare_output(output_path, force=True, inputs=[input_path])
                with usage_errors():
                    check(state.key)  # the command's parameters are checked as in a first run
            with usage_errors():
                releaser = build(state.key)
            if resumed and state.mechanism is not None:
                releaser = _restore(state.mechanism, state.key, releaser)
            run = cls(state=state, releaser=releaser, method=method, output=target, resumed=resumed,
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
        if self.resumed and size is not None and size > recorded:
            with open(self.output_path, "rb") as published:
                published.seek(recorded)
                self._dropped = published.read()
        self._created_output = size is None
        descriptor = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        os.ftruncate(descriptor, recorded)
        os.lseek(descriptor, recorded, os.SEEK_SET)
        self._descriptor = descriptor
        if self._dropped:
            say(f"{self.output_path}: the {size - recorded:,} bytes written after the last checkpoint are released "
                "again, and checked to be identical.")

    # -- the run ------------------------------------------------------------------------------

    def output(self) -> TextIO:
        """The output as a text handle positioned at its recorded end (closed by :meth:`close`); after an
        interruption, a handle that checks the re-released bytes against those written before."""
        assert self._descriptor is not None
        sink = os.fdopen(self._descriptor, "w", encoding="utf-8", closefd=False)
        return _ReplayCheck(sink, self) if self._dropped else sink  # type: ignore[return-value]

    def _replayed(self, sink: TextIO, text: str) -> None:
        """Check ``text``, about to be written, against the bytes written after the last checkpoint.

        The same input and key give the same bytes.  A changed input would publish a second,
        different value for a position already written, and since the noise is recomputed from the
        key, the difference of the two would reveal the change exactly: refuse, and put the bytes
        written before back in place.
        """
        data = text.encode("utf-8")
        size = min(len(data), len(self._dropped))
        if data[:size] == self._dropped[:size]:
            self._dropped = self._dropped[size:]
            return
        sink.flush()
        os.write(self._descriptor, self._dropped)  # the output as it was: nothing published is changed
        self._dropped = b""
        raise click.ClickException(
            f"the input differs from the one that produced the lines {self.output_path} holds after its last "
            "checkpoint: releasing it would publish a second value for positions already written, and their "
            "difference would reveal the change; restore the input (the output was left as it was).")

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

    def skip_consumed_batches(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """The input rows after those consumed by earlier runs, as batches (file input; stdin as it comes)."""
        left = 0 if self.from_stdin else self._saved.consumed
        for batch in batches:
            if left >= len(batch):
                left -= len(batch)
                continue
            if left:
                batch = dataclasses.replace(batch, values=batch.values[left:], lines=batch.lines[left:],
                                            times=None if batch.times is None else batch.times[left:],
                                            keys=None if batch.keys is None else batch.keys[left:])
                left = 0
            yield batch
        if left:
            consumed = self._saved.consumed
            raise click.ClickException(
                f"the input holds {consumed - left:,} rows, but the state {self.state.path} has consumed {consumed:,} "
                "of it: is it the same input? (nothing was written)")

    def _released(self) -> int:
        releaser = self.releaser
        if self.keyed:
            return releaser.released_count()
        return max(0, releaser.position - releaser.hold) if releaser.threshold is not None else 0

    def _spend(self, first: int, last: int) -> None:
        if not self.keyed:
            guarantee = self.releaser.privacy()
            self.state.spend(epsilon=guarantee.epsilon, delta=guarantee.delta, neighbours=guarantee.neighbours,
                             method=self.method, first=first, last=last)
            return
        guarantee = next(iter(self.releaser.streams.values())).privacy()  # every key's is the same
        self.state.spend(epsilon=guarantee.epsilon, delta=guarantee.delta, method=self.method, first=first,
                         last=last, stream=PER_KEY, keys=len(self.releaser),
                         neighbours=f"per key ({guarantee.neighbours}, within one key's stream; the keys and how "
                                    "many values each has are public)")

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
            self._spend(self._saved.consumed, consumed)
        self.state.mechanism = _snapshot(self.releaser)
        self.state.progress = Progress(consumed=consumed, released=self._released(), output_bytes=output_bytes)
        self.state.save()
        self._saved, self._last_time = self.state.progress, time.monotonic()

    def finish(self, sink: TextIO) -> str:
        """The last checkpoint; return what to say about the run."""
        self.checkpoint(sink, force=True)
        progress, start = self._saved, self._start
        where = f"state {self.state.path}: {progress.consumed:,} input values consumed, {progress.released:,} released"
        if progress.consumed == 0:
            raise click.ClickException("the input holds no values (nothing was released or spent).")
        if progress.consumed == start.consumed:
            if self.from_stdin:
                return f"nothing new on stdin; nothing was released or spent ({where})."
            return (f"nothing new: every value of the input was consumed by earlier runs; nothing was released or "
                    f"spent ({where}).")
        if self.keyed:
            keys = len(self.releaser)
            return (f"released {progress.released - start.released:,} values of {keys:,} key{'s' * (keys != 1)} in "
                    f"this run ({'resumed' if self.resumed else 'new stream'}; {where}).")
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

    def abandon(self) -> None:
        """A new stream that failed before writing or consuming anything leaves no state and no output
        behind (a bad column name, an empty input): the same command, fixed, then starts afresh.
        Anything written keeps the state, whose key alone recomputes the noise of what was written."""
        if self.resumed or self._saved.consumed or self._descriptor is None or os.fstat(self._descriptor).st_size:
            return
        self.state.remove()
        if self._created_output:
            self.output_path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the output and release the state's lock (unsaved progress is dropped)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        self.state.close()


def _per_key(build: Callable[[bytes], Any], max_keys: int) -> Callable[[bytes], ByKey]:
    """``build`` made per key: the secret's :class:`ByKey`, key ``k`` drawing from ``key_secret(secret, k)``."""
    def streams(secret: bytes) -> ByKey:
        return ByKey(build=lambda key: build(key_secret(secret, key)), max_keys=max_keys)

    return streams


def _restore(snapshot: dict[str, Any], key: bytes, fresh: Any) -> Any:
    """The releaser of a state's snapshot; ``fresh`` is the command's releaser, built anew (per key: its ByKey)."""
    kind = snapshot.get("mechanism")
    if kind == BY_KEY and isinstance(fresh, ByKey):
        keys = len(snapshot["keys"])
        if keys > fresh.max_keys:
            raise click.UsageError(f"the state holds {keys:,} keys, more than --max-keys {fresh.max_keys:,}; give "
                                   f"--max-keys {keys:,} or more to continue it.")
        return ByKey.from_state(snapshot, build=fresh.build, max_keys=fresh.max_keys,
                                restore=lambda name, stream: _restore(stream, key_secret(key, name), None))
    cls = class_of_kind(kind)
    if cls is None:
        raise click.ClickException(f"the state holds a mechanism of kind {kind!r}, which --state cannot continue.")
    return cls.from_state(_with_key(snapshot, key))


class _ReplayCheck:
    """The output's text handle, each write first checked by :meth:`DurableRelease._replayed`."""

    def __init__(self, sink: TextIO, run: DurableRelease) -> None:
        self._sink, self._run = sink, run

    def write(self, text: str) -> int:
        if self._run._dropped:
            self._run._replayed(self._sink, text)
        return self._sink.write(text)

    def flush(self) -> None:
        self._sink.flush()

    def __enter__(self) -> _ReplayCheck:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._sink.close()
