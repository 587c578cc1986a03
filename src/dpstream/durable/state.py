"""The state of one long-running release: :class:`StreamState`, its :class:`Progress`, and the ledger reader."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from dpstream._checks import check_nonnegative_int
from dpstream.durable.encoding import decode, encode
from dpstream.durable.files import StateLock, remove_stale_temporaries, write_atomic
from dpstream.durable.format import FORMAT, VERSION, StateDamagedError, StateError, dump_state, parse_state
from dpstream.durable.ledger import LedgerEntry, add_entry, ledger_table, utc_now

__all__ = ["Progress", "StateMismatchError", "StreamState", "format_ledger"]

_SECTIONS = {"params", "key", "mechanism", "progress", "ledger", "created", "saved", "saves", "dpstream"}
#: Sections a state file may lack: those written before the release committed before publishing.
_OPTIONAL = {"commitment"}


class StateMismatchError(StateError):
    """A state made for a release with other parameters than the command's."""


@dataclass(frozen=True, kw_only=True)
class Progress:
    """How far a release has come; every count only grows.

    Attributes
    ----------
    consumed : int
        Input values consumed (held out or released): a resume skips this many input values.
    released : int
        Positions released: values written to the output.
    output_bytes : int
        Byte length of the output the state covers (committed before it was written): a resume
        checks the output against it and appends; it never cuts the output.
    """

    consumed: int = 0
    released: int = 0
    output_bytes: int = 0

    def __post_init__(self) -> None:
        for field in fields(self):
            check_nonnegative_int(getattr(self, field.name), field.name)


def _same(a: Any, b: Any) -> bool:
    """Parameter equality: numbers by value (1 == 1.0, NaN == NaN), booleans and strings by type too."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        return encode(a) == encode(b)
    return type(a) is type(b) and a == b


class StreamState:
    """The secret, durable state of one release: parameters, key, mechanism state, progress and ledger.

    Make one with :meth:`create`, continue one with :meth:`open` (both hold the state's lock
    until :meth:`close` or the process ends), inspect one with :meth:`read` (no lock, read-only).
    Nothing reaches the disk before :meth:`save`, which replaces the file atomically.

    The file is SECRET as a whole.  It holds the ``key`` from which a keyed mechanism recomputes
    its noise (whoever has the file can recompute and subtract the noise of every released
    value), the ``mechanism`` state (raw held-out input values, the noise of the current tree)
    and the public ``params``, ``progress`` and ledger.  It is written with mode 0600; keep its
    copies as safe as the raw data.  ``dpstream budget`` shows only the public parts.

    Attributes
    ----------
    path : pathlib.Path
        The state file.
    params : dict
        The release's public parameters, as given to :meth:`create` (see :meth:`check_params`).
    key : bytes
        The secret key of the release's noise (e.g. for :class:`dpstream.noise.KeyedBits`).
    mechanism : dict or None
        The mechanism's own state, opaque here; any data :mod:`dpstream.durable.encoding` stores
        (numpy arrays bit for bit).  Set it, then :meth:`save`.
    progress : Progress
        Set it (counts only grow), then :meth:`save`.
    ledger : tuple of LedgerEntry
        What was spent; add with :meth:`spend`.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with StreamState.create(f"{folder}/state", params={"method": "tops", "epsilon": 1.0}) as state:
    ...     state.mechanism = {"held": np.array([3.0, 0.5])}
    ...     state.progress = Progress(consumed=2)
    ...     state.save()
    >>> with StreamState.open(f"{folder}/state") as state:
    ...     state.check_params({"method": "tops", "epsilon": 0.5})
    Traceback (most recent call last):
    dpstream.durable.state.StateMismatchError: state .../state was made with epsilon = 1.0; this command has \
epsilon = 0.5. A state continues only the release it was made for.
    >>> with StreamState.open(f"{folder}/state") as state:
    ...     state.mechanism["held"].tolist(), state.progress.consumed, len(state.key)
    ([3.0, 0.5], 2, 32)
    """

    def __init__(self, *, path: Path, real: Path, body: dict[str, Any], lock: StateLock | None) -> None:
        """Use :meth:`create`, :meth:`open` or :meth:`read`."""
        self.path = path
        self._real = real  # where the file is, through symbolic links: one lock for every name of it
        self._lock = lock
        self._params: dict[str, Any] = body["params"]
        self._key: bytes = body["key"]
        self.mechanism = body["mechanism"]
        self._progress: Progress = body["progress"]
        self._ledger: list[LedgerEntry] = body["ledger"]
        self._session_start = len(self._ledger)
        self.created: str = body["created"]
        self.saved: str | None = body["saved"]
        self.saves: int = body["saves"]
        #: What the release committed to before publishing (:mod:`dpstream.durable.commitment`), opaque
        #: here; None in a state written before commitments were kept.
        self.commitment: dict[str, Any] | None = body.get("commitment")

    # -- making, opening, reading and closing --------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, params: Mapping[str, Any], key: bytes | None = None,
               mechanism: dict[str, Any] | None = None) -> StreamState:
        """Make a new state file at ``path``, lock it and write it (it must not exist).

        Parameters
        ----------
        path : str or path-like
            The state file; its lock file is ``path`` + ``.lock``.
        params : mapping of str to JSON-like values
            The release's public parameters.
        key : bytes, optional
            The secret key, at least 16 bytes; default 32 fresh bytes from ``os.urandom``.
        mechanism : dict, optional
            The mechanism's initial state.

        Raises
        ------
        StateError
            If ``path`` exists (a second state for a released stream would spend its budget
            again), or its directory does not exist.
        StateInUseError
            If another process holds the lock.
        """
        path = Path(path)
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of names to values, got {params!r:.80}.")
        key = os.urandom(32) if key is None else key
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes, got {type(key).__name__}.")
        if len(key) < 16:
            raise ValueError(f"key must be at least 16 bytes (32 random bytes recommended), got {len(key)} bytes.")
        params = decode(encode(dict(params), "params"), "params")  # what open() will read back
        real = path.parent.resolve() / path.name
        lock = StateLock(real)
        try:
            if path.exists() or path.is_symlink():
                raise StateError(f"state file {path} exists; continue with it, or choose another file (a new "
                                 "state for a stream already released would spend its budget again).")
            remove_stale_temporaries(real)
            body = {"params": params, "key": bytes(key), "mechanism": mechanism, "progress": Progress(),
                    "ledger": [], "created": utc_now(), "saved": None, "saves": 0}
            state = cls(path=path, real=real, body=body, lock=lock)
            state.save()
        except BaseException:
            lock.release()
            raise
        return state

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> StreamState:
        """Lock the state file at ``path``, load it and check it.

        Raises
        ------
        StateError
            If there is no state file at ``path``.
        StateInUseError
            If another process holds the lock (the message names its pid).
        StateDamagedError
            If the file is not a complete, unedited state file of a known version.
        """
        path = Path(path)
        if not path.is_file():
            raise StateError(f"there is no state file {path}.")
        real = path.resolve(strict=True)
        lock = StateLock(real)
        try:
            _refuse_links(real, path)
            remove_stale_temporaries(real)
            return cls(path=path, real=real, body=cls._load(real, path), lock=lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> StreamState:
        """Load the state file at ``path`` without locking it, read-only.

        Every save replaces the file atomically, so this reads a complete state even while a
        release runs (the one of its last save).
        """
        path = Path(path)
        if not path.is_file():
            raise StateError(f"there is no state file {path}.")
        real = path.resolve(strict=True)
        return cls(path=path, real=real, body=cls._load(real, path), lock=None)

    @staticmethod
    def _load(real: Path, path: Path) -> dict[str, Any]:
        with open(real, "rb") as handle:
            raw = parse_state(handle.read(), path)
        if not _SECTIONS <= set(raw) <= _SECTIONS | _OPTIONAL:
            raise StateDamagedError(f"state file {path} is malformed: expected the sections {sorted(_SECTIONS)}.")
        try:
            body = {name: decode(raw[name], name) for name in ("params", "key", "mechanism")}
            if not isinstance(body["params"], dict) or not isinstance(body["key"], bytes):
                raise ValueError("params must be an object and key bytes")
            if body["mechanism"] is not None and not isinstance(body["mechanism"], dict):
                raise ValueError("mechanism must be an object or null")
            if not isinstance(raw["progress"], dict) or not isinstance(raw["ledger"], list):
                raise ValueError("progress must be an object and ledger a list")
            if not all(isinstance(raw[name], str) for name in ("created", "dpstream")):
                raise ValueError("created and dpstream must be strings")
            body["progress"] = Progress(**raw["progress"])
            body["ledger"] = [LedgerEntry.from_json(entry, f"ledger entry {index + 1}")
                              for index, entry in enumerate(raw["ledger"])]
            body.update(created=raw["created"], saved=raw["saved"], saves=check_nonnegative_int(raw["saves"], "saves"))
            if "commitment" in raw:
                if not isinstance(raw["commitment"], dict):
                    raise ValueError("commitment must be an object")
                body["commitment"] = raw["commitment"]
        except StateDamagedError as error:
            raise StateDamagedError(f"state file {path} is malformed: {error}") from None
        except (TypeError, ValueError) as error:
            raise StateDamagedError(f"state file {path} is malformed: {error}") from None
        return body

    def remove(self) -> None:
        """Delete the state file, under its lock, and release the lock: for a release that consumed
        and wrote nothing (its lock file stays, as any lock file does)."""
        self._check_writable()
        self._real.unlink(missing_ok=True)
        self.close()

    def close(self) -> None:
        """Release the lock (unsaved changes are not written); calling it again does nothing."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> StreamState:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self._lock is None:
            raise StateError(f"state {self.path} was opened read-only (StreamState.read); open it to change it.")
        if not self._lock.held:
            raise StateError(f"state {self.path} is closed; open it again to change it.")

    # -- contents ---------------------------------------------------------------------------

    @property
    def params(self) -> dict[str, Any]:
        """The release's public parameters (a copy)."""
        return decode(encode(self._params))

    @property
    def key(self) -> bytes:
        """The secret key of the release's noise."""
        return self._key

    @property
    def progress(self) -> Progress:
        """How far the release has come (as of the last change, saved or not)."""
        return self._progress

    @progress.setter
    def progress(self, progress: Progress) -> None:
        if not isinstance(progress, Progress):
            raise TypeError(f"progress must be a Progress, got {progress!r:.80}.")
        for field in fields(Progress):
            old, new = getattr(self._progress, field.name), getattr(progress, field.name)
            if new < old:
                raise ValueError(f"progress.{field.name} must not decrease, got {new} after {old}.")
        self._progress = progress

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """What was spent, oldest entry first."""
        return tuple(self._ledger)

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Refuse a command whose parameters differ from those the state was made with.

        Raises
        ------
        StateMismatchError
            Naming the first parameter (in the state's order, then the command's) that differs,
            and both values.
        """
        given = dict(params)
        for name in [*self._params, *(name for name in given if name not in self._params)]:
            if name not in given:
                detail = f"was made with {name} = {self._params[name]!r}; this command has no {name}"
            elif name not in self._params:
                detail = f"was made without {name}; this command has {name} = {given[name]!r}"
            elif not _same(self._params[name], given[name]):
                detail = f"was made with {name} = {self._params[name]!r}; this command has {name} = {given[name]!r}"
            else:
                continue
            raise StateMismatchError(f"state {self.path} {detail}. A state continues only the release it was made "
                                     "for.")

    def spend(self, *, epsilon: float, delta: float = 0.0, neighbours: object, method: str, first: int, last: int,
              stream: str = "stream", keys: int | None = None) -> LedgerEntry:
        """Record in the ledger that input positions ``[first, last)`` of ``stream`` are released.

        A spend that continues this session's latest entry of the stream on the same terms
        extends that entry (:func:`~dpstream.durable.ledger.add_entry`).  Saved by :meth:`save`.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee of the release on these positions.
        neighbours : str or dpstream.privacy.Neighbours
            The relation the guarantee is about (stored as text).
        method : str
            What releases them, e.g. ``"tops"``.
        first, last : int
            The 0-based input positions, ``first`` included, ``last`` excluded.
        stream : str
            Which stream.
        keys : int, optional
            Per-key streams (one entry for the rows of all keys): how many keys the release has
            fed so far; the guarantee is each key's.

        Raises
        ------
        BudgetError
            If a position of ``[first, last)`` of ``stream`` was already released under this state.
        """
        self._check_writable()
        entry = LedgerEntry(stream=stream, first=first, last=last, epsilon=epsilon, delta=delta,
                            neighbours=str(neighbours), method=method, time=utc_now(), keys=keys)
        return add_entry(self._ledger, entry, mergeable_from=self._session_start)

    def save(self) -> None:
        """Write the state to its file, atomically (the old file stays whole until the new one is).

        Raises
        ------
        StateError
            If the state is read-only or closed.
        TypeError
            If ``mechanism`` holds a value that cannot be stored, naming its path.
        """
        self._check_writable()
        if self.mechanism is not None and not isinstance(self.mechanism, dict):
            raise TypeError(f"mechanism must be a dict or None, got {type(self.mechanism).__name__}.")
        saved = utc_now()
        body = {"params": encode(self._params, "params"), "key": encode(self._key, "key"),
                "mechanism": encode(self.mechanism, "mechanism"), "progress": asdict(self._progress),
                "ledger": [entry.to_json() for entry in self._ledger], "created": self.created, "saved": saved,
                "saves": self.saves + 1, "dpstream": _version()}
        if self.commitment is not None:
            body["commitment"] = self.commitment
        write_atomic(self._real, dump_state(body))
        self.saved, self.saves = saved, self.saves + 1


def _refuse_links(real: Path, path: Path) -> None:
    """Refuse a state file with another name (a hard link): the lock is per name, so two runs, one per name,
    would drive one stream at once and fork it (a symbolic link is fine: it resolves to the one name)."""
    links = os.stat(real).st_nlink
    if links > 1:
        raise StateError(f"state file {path} has {links} hard links; a state must have one name (its lock is taken "
                         "by name, so two runs through two names would fork the stream). Remove the other names "
                         "(find -samefile) and keep one.")


def _version() -> str:
    from dpstream import __version__

    return __version__


def format_ledger(path: str | os.PathLike[str], *, counts: bool = True) -> str:
    """What ``dpstream budget FILE`` prints: the state's public summary, its ledger and the totals.

    ``counts=False``: without the numbers of input values consumed and released and the ledger's positions
    (a release whose relation makes its rows data, such as a unit-level aggregate).

    Reads without the lock (a running release keeps it), and never shows the key or the
    mechanism state.

    Examples
    --------
    >>> import tempfile
    >>> path = f"{tempfile.mkdtemp()}/state"
    >>> with StreamState.create(path, params={"method": "tops", "epsilon": 0.5}) as state:
    ...     _ = state.spend(epsilon=0.5, neighbours="event level", method="tops", first=0, last=4096)
    ...     state.progress = Progress(consumed=4096, released=3072, output_bytes=61440)
    ...     state.save()
    >>> print(format_ledger(path))  # doctest: +ELLIPSIS
    state file .../state (dpstream-state version 1), created ...Z, last saved ...Z
    parameters: method='tops', epsilon=0.5
    progress: 4,096 input values consumed, 3,072 positions released, output 61,440 bytes
    <BLANKLINE>
    #  stream  positions [first, last)  values  method  epsilon  delta  time (UTC)  ...
    1  stream               [0, 4,096)   4,096  tops        0.5    0.0  ...
    ...
    """
    state = StreamState.read(path)
    progress = state.progress
    parameters = ", ".join(f"{name}={value!r}" for name, value in state.params.items()) or "(none)"
    inputs = (state.commitment or {}).get("inputs") or []
    read = "; ".join(f"[{part['first']:,}, {part['last']:,}) from {part['source'] or 'an unrecorded input'}"
                     for part in inputs)
    shown = (f"progress: {progress.consumed:,} input values consumed, {progress.released:,} positions released, "
             f"output {progress.output_bytes:,} bytes" + (f"; input {read}" if inputs else "")) if counts else (
        f"progress: output {progress.output_bytes:,} bytes (how many rows were consumed is data under this "
        "release's relation: not shown)")
    return "\n".join([
        f"state file {state.path} ({FORMAT} version {VERSION}), created {state.created}, last saved {state.saved}",
        f"parameters: {parameters}",
        shown,
        "",
        ledger_table(state.ledger, counts=counts),
    ])
