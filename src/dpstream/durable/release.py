"""A release that stops and continues without re-spending its budget: :class:`DurableRelease`.

The first run creates the state file (:class:`~dpstream.durable.StreamState`: the release's
public parameters, a secret key of 32 bytes from ``os.urandom``, the mechanism's snapshot, the
progress, the budget ledger and the commitment) and the output.  The mechanism is built with
``key=``: the noise of every tree node is a function of the key and the node's identity, so a
resumed run recomputes exactly the noise it had, whatever the run that drew it.

Commit before publishing.  Nothing derived from the input leaves the process before the state
records it: what the release writes through :meth:`DurableRelease.output` (its lines) and hands
to :meth:`DurableRelease.later` (the threshold and prior said on stderr) waits in memory until
the next commit (:meth:`DurableRelease.checkpoint`), which fsyncs what the output holds, then
saves the state atomically with the mechanism's snapshot, the progress (input values consumed,
positions released, the output's committed length), a ledger entry for the positions released,
an HMAC of the input values consumed (:class:`~dpstream.durable.commitment.InputLog`) and the
text of the lines about to be written; only then are the lines written and the messages said.
So every published value is covered by a durable state: a run killed at any moment (SIGKILL
included) never leaves a published value that the state does not know, and the next run
skips its positions rather than releasing them again.  A run killed between the save and the
write leaves an output that lacks the end of the committed lines: the next run writes them
first (the state holds them).  A ledger entry that cannot be made (:class:`BudgetError`) stops
the run before its values are published.

Commits come at most once per batch of input and at most once every ``checkpoint_seconds``
(file input), and on stdin in groups: a value read from stdin is published at the first commit
after it, at most ``checkpoint_seconds`` after the previous commit plus the time of a save; a
thread makes that commit when the input pauses (:meth:`DurableRelease.feed_live`).

Resume (:meth:`DurableRelease.start` on an existing state).  It opens the state (a lock: two
processes never drive one stream; a state with a second hard link is refused, since the lock
is per name), checks that the parameters are the state's, checks the output against the
commitment without changing it (:func:`~dpstream.durable.commitment.check_output`: an output
that lacks committed lines other than the last group's, or was edited there, or holds more
than the state committed -- an edited output, or an older copy of the state -- is refused, and
published lines are never removed), restores the mechanism with ``from_state`` and appends; the
input is fed through :meth:`~DurableRelease.feed_chunks`, :meth:`~DurableRelease.feed_batches`
or :meth:`~DurableRelease.feed_live`, which skip (from a file) the values already consumed after
checking them against their HMACs: a changed input is refused before anything is written.

An older copy of a state.  A state restored from a backup knows less than was published after
it.  If the output still holds those lines, the run refuses (the output holds more than the
state committed) and says so: use the newest copy.  Only if those lines were never published
is it safe to cut them off the output and continue (the message gives the command).  A restored
state with an output restored from the same moment cannot be told from a true one: publishing
after that re-releases, under the same noise, positions published after the backup, which
reveals exactly how their input changed if it did.  Restore a state only with the output it
committed, and never after publishing from a newer one.  Two copies of a state resumed apart
(each with its output) are each consistent with themselves, and publish the same noise on their
two inputs: nothing here sees that; a budget store does (:mod:`dpstream.durable.budget_store`,
which refuses a key charged under another state's path).  Resume one copy only.

States of an older dpstream (no commitment: they wrote before checkpointing) continue: the lines
a killed run of theirs wrote after its last checkpoint are kept and released again, checked
byte for byte; a changed input is refused before the first differing byte (the output is left
as it was).

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

import collections
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from dpstream.durable.commitment import InputLog, ResumeError, check_output, row_texts
from dpstream.durable.files import StateError, try_lock
from dpstream.durable.keys import seed_key
from dpstream.durable.snapshots import keyless, with_key
from dpstream.durable.state import Progress, StreamState
from dpstream.privacy import RowsKept
from dpstream.release.by_key import BY_KEY, ByKey, key_secret
from dpstream.release.registry import REGISTRY, class_of_kind

__all__ = ["CHECKPOINT_SECONDS", "PER_KEY", "DurableRelease", "Output", "ParameterError", "ResumeError",
           "per_key", "restore"]

#: Default least time between two checkpoints; the caller checkpoints at most once per batch it writes.
CHECKPOINT_SECONDS = 1.0

#: The ``stream`` of the ledger entries of per-key streams (one entry for the rows of all keys).
PER_KEY = "per key"

#: The longest a commit thread sleeps between two looks (stdin): the latency beyond ``checkpoint_seconds``.
_TICK = 0.05


class ParameterError(StateError):
    """The release's parameters do not fit: the mechanism refuses them, or the state needs others."""


def _building(build: Callable[[bytes], Any], key: bytes) -> Any:
    """``build(key)``, its refusal of the parameters a :class:`ParameterError`."""
    try:
        return build(key)
    except (ValueError, TypeError) as error:
        raise ParameterError(str(error)) from error


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


class DurableRelease:
    """One run of a durable release: the state, the restored mechanism and the output it appends to.

    Use :meth:`start`; then feed the input through :meth:`feed_chunks`, :meth:`feed_batches` or
    :meth:`feed_live`, write through :meth:`output`, call :meth:`checkpoint` after each write and
    :meth:`finish` at the end; :meth:`abandon` on failure and :meth:`close` always.
    """

    def __init__(self, *, state: StreamState, releaser: Any, method: str, output: Path, resumed: bool,
                 from_stdin: bool, checkpoint_seconds: float = CHECKPOINT_SECONDS, source: str | None = None) -> None:
        self.state, self.releaser, self.method = state, releaser, method
        self.output_path, self.resumed, self.from_stdin = output, resumed, from_stdin
        self._saved = self._start = state.progress
        self._last_time = time.monotonic()
        self._descriptor: int | None = None
        #: Bytes an older dpstream's killed run wrote after its last checkpoint: the replay must write them again.
        self.dropped = b""
        self._replay_end = 0
        #: Committed bytes a run killed after its commit did not write: written first (the write-ahead).
        self.completed = b""
        self._created_output = self._replace = False
        self.checkpoint_seconds = checkpoint_seconds
        self.keyed = isinstance(releaser, ByKey)
        #: Whether how many input rows were consumed is public under the release's relation (not at unit level):
        #: a refusal to resume then says which rows, else only what is wrong.
        self.public_counts = REGISTRY[method].public_counts if method in REGISTRY else True
        commitment = state.commitment or {}
        self._tail: str = commitment.get("tail", "")
        self._length = self._saved.output_bytes  # the output's length once the pending text is written
        self._pending: list[str] = []
        #: Bytes of an older dpstream's lines checked since the last commit: the start of the group committed next.
        self._verified = bytearray()
        self._deferred: list[Callable[[], None]] = []
        self.log = InputLog(state.key, commitment.get("inputs") if state.commitment is not None else None,
                            consumed=self._saved.consumed, source="stdin" if from_stdin else (source or "file"),
                            counts=self.public_counts)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._committer: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._feeding: Iterator[Any] | None = None
        #: Rows handed to the caller that the input log has not absorbed yet (:meth:`_absorb`).
        self._settled = self._saved.consumed
        self._handed: collections.deque[tuple[np.ndarray, list[str] | None]] = collections.deque()

    @classmethod
    def start(cls, state_path: str | os.PathLike[str], *, method: str, params: dict[str, Any], seed: int | None,
              build: Callable[[bytes], Any], output: Callable[[bool], Path], from_stdin: bool = False,
              checkpoint_seconds: float = CHECKPOINT_SECONDS, max_keys: int | None = None,
              source: str | None = None, key: bytes | None = None) -> DurableRelease:
        """Create or open the state, check it against ``params``, and build or restore the mechanism.

        ``build(key)`` builds the mechanism with ``key=``.  With ``max_keys`` the release is one
        stream per key, a :class:`~dpstream.release.by_key.ByKey` whose key ``k`` has the mechanism
        ``build(key_secret(secret, k))``, the secret being the state's key.  ``output(resumed)``
        returns the output's path after the caller's checks of where it writes (called once the
        state exists and matches, before any byte is written).  ``source`` names the input file
        (its absolute path, recorded with the HMAC of its values; stdin with ``from_stdin``).
        A new state's key is ``key`` if given (one a budget store's charge recorded the fingerprint of),
        else derived from ``seed`` (tests only), else fresh.
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
            key = key if key is not None or seed is None else seed_key(seed)
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
                      from_stdin=from_stdin, checkpoint_seconds=checkpoint_seconds, source=source)
            run.log.check_source(state.path)
            run._open_output()
            run.log.start()
        except BaseException:
            if "run" in locals():
                run.close()
            state.close()
            raise
        return run

    def _open_output(self) -> None:
        """Check the output against the commitment, lock it, and complete the last committed group if it lacks it."""
        try:
            size: int | None = os.stat(self.output_path).st_size
        except FileNotFoundError:
            size = None
        missing = b""
        if self.resumed:
            missing, self.dropped = check_output(self.output_path, size, recorded=self._saved.output_bytes,
                                                 commitment=self.state.commitment, state_path=self.state.path)
        #: A new stream over an existing output (--force) replaces it at its first commit, not before.
        self._replace = not self.resumed and bool(size)
        self._replay_end = self._saved.output_bytes + len(self.dropped)
        self._created_output = size is None
        descriptor = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
        self._descriptor = descriptor
        if not try_lock(descriptor):
            raise ResumeError(f"the output {self.output_path} is being written by another process; two releases "
                              "must never write one output (nothing was written).")
        if missing:  # committed before a kill, not yet written: the state holds it
            _write_all(descriptor, missing)
            os.fsync(descriptor)
            self.completed = missing

    # -- the input ----------------------------------------------------------------------------

    def _short(self, rows: int, what: str) -> ResumeError:
        consumed = self._saved.consumed
        if not self.public_counts:  # how many rows the state consumed, or the input holds, is data: not said
            return ResumeError(f"the input ends before the {what} the state {self.state.path} has consumed: is it "
                               "the same input? (nothing was written)")
        return ResumeError(f"the input holds {rows:,} {what}, but the state {self.state.path} has consumed "
                           f"{consumed:,} of it: is it the same input? (nothing was written)")

    def feed_chunks(self, chunks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """The input values after those consumed by earlier runs, in chunks (file input): the skipped values are
        checked against the state's HMACs, every value is absorbed into the run's own."""
        left = 0 if self.from_stdin else self._saved.consumed
        for chunk in chunks:
            skip = min(left, len(chunk))
            if skip:
                self.log.update(chunk[:skip], None)
                left -= skip
                chunk = chunk[skip:]
            if len(chunk):
                yield self._holding(chunk, None, chunk)
        if left:
            raise self._short(self._saved.consumed - left, "values")

    def skip_consumed(self, values: Iterable[float]) -> Iterator[float]:
        """The input values after those consumed by earlier runs, one by one (see :meth:`feed_chunks`; stdin:
        :meth:`feed_live`)."""
        if self.from_stdin:
            return self.feed_live(values)
        return itertools.chain.from_iterable(chunk.tolist() for chunk in self.feed_chunks(_chunks(values)))

    def feed_batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The input rows after those consumed by earlier runs, as :class:`~dpstream.io.Batch` es (file input),
        checked and absorbed as by :meth:`feed_chunks` (their key and time texts too)."""
        left = 0 if self.from_stdin else self._saved.consumed
        for batch in batches:
            texts = row_texts(batch.keys, batch.times)
            skip = min(left, len(batch))
            if skip:
                self.log.update(batch.values[:skip], None if texts is None else texts[:skip])
                left -= skip
            if skip == len(batch):
                continue
            if skip:
                batch = type(batch)(values=batch.values[skip:], lines=batch.lines[skip:],
                                    times=None if batch.times is None else batch.times[skip:],
                                    keys=None if batch.keys is None else batch.keys[skip:])
                texts = None if texts is None else texts[skip:]
            yield self._holding(batch.values, texts, batch)
        if left:
            raise self._short(self._saved.consumed - left, "rows")

    #: The old name of :meth:`feed_batches`.
    skip_consumed_batches = feed_batches

    def feed_live(self, items: Iterable[Any]) -> Iterator[Any]:
        """The input as it comes (stdin): values, or :class:`~dpstream.io.Record` s; the caller releases each
        item and calls :meth:`checkpoint` before asking for the next.

        While the caller holds an item the run's lock is held; while the next is awaited, a thread
        commits what was released once ``checkpoint_seconds`` have passed since the last commit,
        so a value waits at most that long (plus a save) to be published, even if the input pauses.
        """
        self._feeding = self._live(items)
        if self.checkpoint_seconds > 0 and self._committer is None:
            self._committer = threading.Thread(target=self._commit_loop, name="dpstream-commit", daemon=True)
            self._committer.start()
        return self._feeding

    def _live(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            with self._lock:
                if self._failure is not None:
                    raise self._failure
                if isinstance(item, tuple):  # a Record
                    yield self._holding(np.array([item.value]), row_texts(
                        None if item.key is None else [item.key], None if item.time is None else [item.time]), item)
                else:
                    yield self._holding(np.array([item], dtype=np.float64), None, item)

    def _holding(self, values: np.ndarray, texts: list[str] | None, item: Any) -> Any:
        """``item``, whose rows the input log absorbs as the releaser consumes them (:meth:`_absorb`)."""
        self._absorb()
        self._handed.append((values, texts))
        return item

    def _absorb(self) -> None:
        """Absorb the rows handed out that the releaser has consumed (not those it refused or has not seen)."""
        while self._handed and self.log.position < self.releaser.position:
            values, texts = self._handed.popleft()
            take = self.releaser.position - self.log.position
            if take < len(values):
                self._handed.appendleft((values[take:], None if texts is None else texts[take:]))
                values, texts = values[:take], None if texts is None else texts[:take]
            self.log.update(values, texts)

    def _commit_loop(self) -> None:
        tick = min(self.checkpoint_seconds, _TICK)
        while not self._stop.wait(tick):
            if not self._lock.acquire(timeout=tick):
                continue
            try:
                if not self._stop.is_set():
                    self.checkpoint()
            except BaseException as error:  # told to the reading thread at its next value
                self._failure = error
                return
            finally:
                self._lock.release()

    def _stop_committer(self) -> None:
        self._stop.set()
        if self._committer is not None:
            self._committer.join()
            self._committer = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    # -- the run ------------------------------------------------------------------------------

    def output(self) -> Output:
        """Where the release writes its lines: held until the next commit, then appended to the output."""
        assert self._descriptor is not None
        return Output(self)

    def later(self, say: Callable[[], None]) -> None:
        """Call ``say`` (what tells a value derived from the input, e.g. the threshold on stderr) after the next
        commit, when the state covers the input it derives from."""
        with self._lock:
            self._deferred.append(say)

    def _released(self) -> int:
        releaser = self.releaser
        if self.keyed:
            return releaser.released_count()
        return max(0, releaser.position - releaser.hold) if releaser.threshold is not None else 0

    def _relation(self, guarantee: Any) -> Any:
        """The relation the ledger records: the releaser's, about the rows kept when ``missing`` is ``skip``
        (dropping a row moves the later positions, which the releaser's relation does not cover)."""
        relation = guarantee.neighbours
        return RowsKept(relation) if self.state.params.get("missing") == "skip" else relation

    def _spend(self, first: int, last: int) -> None:
        if not self.keyed:
            guarantee = self.releaser.privacy()
            self.state.spend(epsilon=guarantee.epsilon, delta=guarantee.delta, neighbours=self._relation(guarantee),
                             method=self.method, first=first, last=last)
            return
        guarantee = next(iter(self.releaser.streams.values())).privacy()  # every key's is the same
        self.state.spend(epsilon=guarantee.epsilon, delta=guarantee.delta, method=self.method, first=first,
                         last=last, stream=PER_KEY, keys=len(self.releaser),
                         neighbours=f"per key ({self._relation(guarantee)}, within one key's stream; the keys and how "
                                    "many values each has are public)")

    def checkpoint(self, sink: Output | TextIO | None = None, *, force: bool = False) -> None:
        """Commit, then publish: save the state with the snapshot, progress, ledger and commitment, then write
        the lines and say the messages held since the last commit.

        Without ``force``, only when values were consumed since the last commit and at least
        ``checkpoint_seconds`` have passed.
        """
        with self._lock:
            consumed = self.releaser.position
            self._settled = consumed  # every value consumed so far has its lines written through the output
            fresh = consumed - self._saved.consumed
            if not force and (not fresh or time.monotonic() - self._last_time < self.checkpoint_seconds):
                return
            self._absorb()
            if self.log.position != consumed:
                raise RuntimeError(f"the release consumed {consumed:,} values but was fed {self.log.position:,} "
                                   "through the run (feed_chunks, feed_batches, feed_live).")
            os.fsync(self._descriptor)  # what the last commit published is on disk before its tail is replaced
            text = "".join(self._pending)
            if fresh:
                self._spend(self._saved.consumed, consumed)
            replaying = self._length < self._replay_end
            group = bytes(self._verified) + text.encode("utf-8")  # the bytes that end at the committed length
            self._tail = group.decode("utf-8") if group else self._tail
            self.state.mechanism = keyless(self.releaser.state)
            self.state.progress = Progress(consumed=consumed, released=self._released(), output_bytes=self._length)
            self.state.commitment = {"tail": self._tail, "replay_to": self._replay_end if replaying else 0,
                                     "inputs": self.log.segments()}
            self.state.save()
            self._pending.clear()
            self._verified.clear()
            self._saved, self._last_time = self.state.progress, time.monotonic()
            if self._replace:
                os.ftruncate(self._descriptor, 0)
                self._replace = False
            _write_all(self._descriptor, text.encode("utf-8"))
            deferred, self._deferred = self._deferred, []
        for say in deferred:
            say()

    def _hold(self, text: str) -> None:
        """Keep ``text`` for the next commit; while an older dpstream's lines are replayed, check it against them."""
        data = text.encode("utf-8")
        if self.dropped:
            size = min(len(data), len(self.dropped))
            if data[:size] != self.dropped[:size]:
                raise ResumeError(
                    f"the input differs from the one that produced the lines {self.output_path} holds after its "
                    "last checkpoint: releasing it would publish a second value for positions already written, and "
                    "their difference would reveal the change; restore the input (the output was left as it was).")
            self._verified += data[:size]
            self.dropped = self.dropped[size:]
            self._length += size
            data = data[size:]
            if not data:
                return
            text = data.decode("utf-8")
        self._pending.append(text)
        self._length += len(data)

    @property
    def saved(self) -> Progress:
        """The progress of the last checkpoint (what a stopped run leaves)."""
        return self._saved

    def finish(self, sink: Output | TextIO | None = None) -> str:
        """The last commit; return what to say about the run."""
        self._stop_committer()
        self.checkpoint(force=True)
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

    def commit_released(self) -> bool:
        """After an error of the input or a refused value: commit (and so publish) what was released before it,
        if every value consumed has its lines written (the caller calls :meth:`checkpoint` after each item or
        batch it wrote, and the error came before the releaser consumed anything since); return whether it did."""
        with self._lock:
            self._stop.set()
            self._absorb()
            position = self.releaser.position
            if position != self._settled or self.log.position != position or position == self._saved.consumed:
                return False  # a value consumed whose lines were not all written: commit nothing of this group
        self._stop_committer()
        self.checkpoint(force=True)
        return True

    def abandon(self) -> None:
        """A new stream that failed before committing anything leaves no state and no output behind (a bad
        column name, an empty input): the same release, fixed, then starts afresh.  A committed state stays:
        its key alone recomputes the noise of what was published."""
        with self._lock:
            self._stop.set()
            self._pending.clear()
            self._deferred.clear()
        if self.resumed or self._saved.consumed or self._saved.output_bytes or self._descriptor is None:
            return
        self.state.remove()
        if self._created_output:
            self.output_path.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop the commit thread, close the output and release the state's lock (what was not committed is
        dropped, never published)."""
        self._stop.set()
        if self._committer is not None:
            self._committer.join()
            self._committer = None
        if self._feeding is not None:
            self._feeding.close()  # the lock it may hold
            self._feeding = None
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        self.state.close()


def _chunks(values: Iterable[float], size: int = 4096) -> Iterator[np.ndarray]:
    iterator = iter(values)
    while (chunk := np.fromiter(itertools.islice(iterator, size), dtype=np.float64)).size:
        yield chunk


class Output:
    """Where a :class:`DurableRelease` writes: the text is held until the next commit, which publishes it.

    Every line of the output goes through :meth:`write`; nothing reaches the file before the
    state that covers it is saved.
    """

    def __init__(self, run: DurableRelease) -> None:
        self._run = run

    def write(self, text: str) -> int:
        """Hold ``text`` for the next commit."""
        self._run._hold(text)
        return len(text)

    def flush(self) -> None:
        """Nothing: the next commit publishes what was written."""

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


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
