"""A release that stops and continues without re-spending its budget: :class:`DurableRelease`.

The first run creates the state file (:class:`~dpstream.durable.StreamState`: the release's
public parameters, a secret key of 32 bytes from ``os.urandom``, the mechanism's snapshot, the
progress and the budget ledger) and the output.  The mechanism is built with ``key=``: the
noise of every tree node is a function of the key and the node's identity, so a resumed run
recomputes exactly the noise it had, whatever the run that drew it.

Checkpoints (:meth:`DurableRelease.checkpoint`).  At most once per batch of released values and
at most once every ``checkpoint_seconds``, the output is flushed and fsync'ed FIRST, and only
then is the state saved with the output's new byte length, the input values consumed and a
ledger entry for the input positions released; and once more at the end
(:meth:`~DurableRelease.finish`).  So the output is never behind the state: a run killed at any
moment leaves an output that holds at least what the state records.

Resume (:meth:`DurableRelease.start` on an existing state).  It opens the state (a lock: two
processes never drive one stream), checks that the parameters are the state's, truncates the
output to the recorded byte length (dropping what a killed run wrote after its last
checkpoint), restores the mechanism with ``from_state`` and appends; :meth:`~DurableRelease.skip_consumed`
skips the input values already consumed.  The dropped bytes are released again from the same
input values with the same keyed noise, so they come out identical: a position once published
never changes, and :class:`Output` checks it as they are written again.

Publishing.  Every byte of the output goes through :meth:`Output.write`, the one place where the
release publishes; a release that commits its state before publishing changes that place only.

Per-key streams (``max_keys``): the releaser is a :class:`~dpstream.release.by_key.ByKey` whose
key ``k`` has the mechanism built with ``key=key_secret(secret, k)``, the secret being the
state's key; the snapshot leaves out each key's own key (:mod:`dpstream.durable.snapshots`) and
the ledger records one entry per run for the rows of all keys (stream :data:`PER_KEY`).

Errors are library errors: :class:`ParameterError` and
:class:`~dpstream.durable.StateMismatchError` when the parameters do not fit (the mechanism's or
the state's), :class:`ResumeError` when the output or input is not what the state recorded or
a replayed byte differs.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from dpstream.durable.files import StateError
from dpstream.durable.keys import seed_key
from dpstream.durable.snapshots import keyless, with_key
from dpstream.durable.state import Progress, StreamState
from dpstream.release.by_key import BY_KEY, ByKey, key_secret
from dpstream.release.registry import class_of_kind

__all__ = ["CHECKPOINT_SECONDS", "PER_KEY", "DurableRelease", "Output", "ParameterError", "ResumeError",
           "per_key", "restore"]

#: Default least time between two checkpoints; the caller checkpoints at most once per batch it writes.
CHECKPOINT_SECONDS = 1.0

#: The ``stream`` of the ledger entries of per-key streams (one entry for the rows of all keys).
PER_KEY = "per key"


class ParameterError(StateError):
    """The release's parameters do not fit: the mechanism refuses them, or the state needs others."""


class ResumeError(StateError):
    """The output or the input is not what the state recorded (nothing is written), or a replayed byte differs."""


def _building(build: Callable[[bytes], Any], key: bytes) -> Any:
    """``build(key)``, its refusal of the parameters a :class:`ParameterError`."""
    try:
        return build(key)
    except (ValueError, TypeError) as error:
        raise ParameterError(str(error)) from error


class DurableRelease:
    """One run of a durable release: the state, the restored mechanism and the output it appends to.

    Use :meth:`start`; then feed :meth:`skip_consumed` the input values, write through
    :meth:`output`, call :meth:`checkpoint` after each write and :meth:`finish` at the end;
    :meth:`abandon` on failure and :meth:`close` always.
    """

    def __init__(self, *, state: StreamState, releaser: Any, method: str, output: Path, resumed: bool,
                 from_stdin: bool, checkpoint_seconds: float = CHECKPOINT_SECONDS) -> None:
        self.state, self.releaser, self.method = state, releaser, method
        self.output_path, self.resumed, self.from_stdin = output, resumed, from_stdin
        self._saved = self._start = state.progress
        self._last_time = time.monotonic()
        self._descriptor: int | None = None
        #: Bytes an interrupted run wrote after its last checkpoint: the replay must write them again.
        self.dropped = b""
        self._created_output = False
        self.checkpoint_seconds = checkpoint_seconds
        self.keyed = isinstance(releaser, ByKey)

    @classmethod
    def start(cls, state_path: str | os.PathLike[str], *, method: str, params: dict[str, Any], seed: int | None,
              build: Callable[[bytes], Any], output: Callable[[bool], Path], from_stdin: bool = False,
              checkpoint_seconds: float = CHECKPOINT_SECONDS, max_keys: int | None = None) -> DurableRelease:
        """Create or open the state, check it against ``params``, and build or restore the mechanism.

        ``build(key)`` builds the mechanism with ``key=``.  With ``max_keys`` the release is one
        stream per key, a :class:`~dpstream.release.by_key.ByKey` whose key ``k`` has the mechanism
        ``build(key_secret(secret, k))``, the secret being the state's key.  ``output(resumed)``
        returns the output's path after the caller's checks of where it writes (called once the
        state exists and matches, before any byte is written).  With ``seed`` (tests only) a new
        state's key is derived from it.
        """
        check = build
        if max_keys is not None:
            build = per_key(build, max_keys)
        path = Path(state_path)
        resumed = path.exists() or path.is_symlink()
        if resumed:
            state = StreamState.open(path)
        else:
            target = output(False)
            key = None if seed is None else seed_key(seed)
            _building(check, key or bytes(32))  # refuse bad parameters before the state file exists
            state = StreamState.create(path, params=params, key=key)
        try:
            if resumed:
                state.check_params(params)
                target = output(True)
                _building(check, state.key)  # the parameters are checked as in a first run
            releaser = _building(build, state.key)
            if resumed and state.mechanism is not None:
                releaser = restore(state.mechanism, state.key, releaser)
            run = cls(state=state, releaser=releaser, method=method, output=target, resumed=resumed,
                      from_stdin=from_stdin, checkpoint_seconds=checkpoint_seconds)
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
            raise ResumeError(f"the output {self.output_path} is missing, but the state {self.state.path} records "
                              f"{recorded:,} bytes of it; restore the output (nothing was written).")
        if size is not None and size < recorded:
            raise ResumeError(f"the output {self.output_path} holds {size:,} bytes, fewer than the {recorded:,} the "
                              f"state {self.state.path} records; it was changed since (nothing was written).")
        if self.resumed and size is not None and size > recorded:
            with open(self.output_path, "rb") as published:
                published.seek(recorded)
                self.dropped = published.read()
        self._created_output = size is None
        descriptor = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        os.ftruncate(descriptor, recorded)
        os.lseek(descriptor, recorded, os.SEEK_SET)
        self._descriptor = descriptor

    # -- the run ------------------------------------------------------------------------------

    def output(self) -> Output:
        """The output, positioned at its recorded end (closed by :meth:`close`)."""
        assert self._descriptor is not None
        return Output(os.fdopen(self._descriptor, "w", encoding="utf-8", closefd=False), self)

    def skip_consumed(self, values: Iterable[float]) -> Iterator[float]:
        """The input values after those consumed by earlier runs (file input; stdin is taken as it comes)."""
        consumed = self._saved.consumed
        if self.from_stdin or not consumed:
            return iter(values)
        iterator = iter(values)
        skipped = sum(1 for _ in itertools.islice(iterator, consumed))
        if skipped < consumed:
            raise ResumeError(f"the input holds {skipped:,} values, but the state {self.state.path} has consumed "
                              f"{consumed:,} of it: is it the same input? (nothing was written)")
        return iterator

    def skip_consumed_batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The input rows after those consumed by earlier runs, as :class:`~dpstream.io.Batch` es (file input;
        stdin as it comes)."""
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
            raise ResumeError(f"the input holds {consumed - left:,} rows, but the state {self.state.path} has "
                              f"consumed {consumed:,} of it: is it the same input? (nothing was written)")

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

    def checkpoint(self, sink: Output | TextIO, *, force: bool = False) -> None:
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
        self.state.mechanism = keyless(self.releaser.state)
        self.state.progress = Progress(consumed=consumed, released=self._released(), output_bytes=output_bytes)
        self.state.save()
        self._saved, self._last_time = self.state.progress, time.monotonic()

    @property
    def saved(self) -> Progress:
        """The progress of the last checkpoint (what a stopped run leaves)."""
        return self._saved

    def finish(self, sink: Output | TextIO) -> str:
        """The last checkpoint; return what to say about the run."""
        self.checkpoint(sink, force=True)
        progress, start = self._saved, self._start
        where = f"state {self.state.path}: {progress.consumed:,} input values consumed, {progress.released:,} released"
        if progress.consumed == 0:
            raise ResumeError("the input holds no values (nothing was released or spent).")
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

    def abandon(self) -> None:
        """A new stream that failed before writing or consuming anything leaves no state and no output
        behind (a bad column name, an empty input): the same release, fixed, then starts afresh.
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


class Output:
    """The output of a :class:`DurableRelease`: the one place where the release publishes.

    After an interruption, the bytes written after the last checkpoint are written again: each
    write first checks them against those written before (:meth:`_replayed`).
    """

    def __init__(self, sink: TextIO, run: DurableRelease) -> None:
        self._sink, self._run = sink, run

    def write(self, text: str) -> int:
        """Publish ``text``."""
        if self._run.dropped:
            self._replayed(text)
        return self._sink.write(text)

    def _replayed(self, text: str) -> None:
        """Check ``text``, about to be written, against the bytes written after the last checkpoint.

        The same input and key give the same bytes.  A changed input would publish a second,
        different value for a position already written, and since the noise is recomputed from the
        key, the difference of the two would reveal the change exactly: refuse, and put the bytes
        written before back in place.
        """
        run = self._run
        data = text.encode("utf-8")
        size = min(len(data), len(run.dropped))
        if data[:size] == run.dropped[:size]:
            run.dropped = run.dropped[size:]
            return
        self._sink.flush()
        os.write(run._descriptor, run.dropped)  # the output as it was: nothing published is changed
        run.dropped = b""
        raise ResumeError(
            f"the input differs from the one that produced the lines {run.output_path} holds after its last "
            "checkpoint: releasing it would publish a second value for positions already written, and their "
            "difference would reveal the change; restore the input (the output was left as it was).")

    def flush(self) -> None:
        self._sink.flush()

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._sink.close()


def per_key(build: Callable[[bytes], Any], max_keys: int) -> Callable[[bytes], ByKey]:
    """``build`` made per key: the secret's :class:`ByKey`, key ``k`` drawing from ``key_secret(secret, k)``."""
    def streams(secret: bytes) -> ByKey:
        return ByKey(build=lambda key: build(key_secret(secret, key)), max_keys=max_keys)

    return streams


def restore(snapshot: dict[str, Any], key: bytes, fresh: Any) -> Any:
    """The releaser of a stored snapshot and its key; ``fresh`` is the releaser built anew (per key: its ByKey).

    The snapshot's kind finds its class in the registry (:func:`~dpstream.release.registry.class_of_kind`).
    """
    kind = snapshot.get("mechanism")
    if kind == BY_KEY and isinstance(fresh, ByKey):
        keys = len(snapshot["keys"])
        if keys > fresh.max_keys:
            raise ParameterError(f"the state holds {keys:,} keys, more than --max-keys {fresh.max_keys:,}; give "
                                 f"--max-keys {keys:,} or more to continue it.")
        return ByKey.from_state(snapshot, build=fresh.build, max_keys=fresh.max_keys,
                                restore=lambda name, stream: restore(stream, key_secret(key, name), None))
    cls = class_of_kind(kind)
    if cls is None:
        raise ResumeError(f"the state holds a mechanism of kind {kind!r}, which --state cannot continue.")
    return cls.from_state(with_key(snapshot, key))
