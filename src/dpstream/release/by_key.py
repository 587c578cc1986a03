"""One independent stream per key: a release mechanism for every key of a keyed stream.

A keyed stream is a stream of ``(key, value)`` rows, such as the readings of many smart meters
interleaved in one file.  :class:`ByKey` gives every key its own mechanism, built on first sight
of the key by a ``build(key)`` function -- its own hold-out, threshold, hierarchy and budget --
and feeds each key's values, in input order, to that key's mechanism only.  A key's *position*
is the 0-based index of a value among that key's values, so the first released position of a
key is its mechanism's ``hold``.

Batches are dispatched vectorized: the keys of a batch are grouped with ``np.unique`` and a
stable ``argsort``, each key's mechanism receives its values of the batch in one ``release``
call, and the released values come back in the batch's row order.

Privacy
-------
Each key's release has its mechanism's guarantee (for example ``epsilon``-DP at event level)
*about that key's stream*: two keyed streams are neighbours when one key's streams differ in
the value at one position.  Keys are public (the set of keys and how many values each has are
not protected), and the guarantees do not combine into one over all keys: an individual whose
values fall under ``k`` keys (several meters, several accounts) is protected by ``k`` times
the budget (sequential composition).  A value that changes its key (moves from one meter to
another) changes two streams.  A mechanism built with ``w_event=w`` (ToPS with a public threshold,
the binary tree; :mod:`dpstream.release.wevent`) gives each key's stream its guarantee about
:class:`~dpstream.privacy.WEvent`: any ``w`` consecutive values of one key.

Noise
-----
Every key's mechanism draws from its own keyed ChaCha20 stream, :func:`key_bits`:
``KeyedBits(key=secret, identity=("release-by-key", key))``.  The ``secret`` is 32 random bytes
drawn for the run (:func:`new_secret`, the default: the noise is as secret as the operating
system's CSPRNG), or, for tests, :func:`seed_secret` of an integer seed (replayable, NOT secret).
The noise of a key depends on the secret and the key's text only -- not on which keys came
first, nor on how the rows were batched -- so a key's output equals that of its sub-stream run
alone through ``build(key)``.

Memory
------
Constant in the number of rows; one mechanism per key, so linear in the number of keys (at
most ``max_keys``).  A key's mechanism holds ``8 * hold`` bytes while its hold-out lasts, then
its own state (``docs/keys.md`` lists the sizes of each method).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from dpstream._checks import check_positive_int
from dpstream._params import Params
from dpstream.noise.bits import KeyedBits

__all__ = ["BY_KEY", "DEFAULT_MAX_KEYS", "KEY_IDENTITY", "ByKey", "KeyReport", "KeyedRelease", "KeyLimitError",
           "key_bits", "key_secret", "new_secret", "seed_secret", "show_key", "structure"]

#: Most keys a :class:`ByKey` accepts unless told otherwise (each key holds a whole mechanism).
DEFAULT_MAX_KEYS = 1000
#: First part of the identity of every key's noise stream.
KEY_IDENTITY = "release-by-key"
#: The ``mechanism`` field of a :attr:`ByKey.state` snapshot.
BY_KEY = "by-key"
#: Version of the :attr:`ByKey.state` layout.
_BY_KEY_VERSION = 1
_SEED_DOMAIN = b"dpstream.release.by-key/v1\x00seed\x00"
#: Keys longer than this are grouped as Python objects (a fixed-width unicode array would take
#: ``4 * longest * rows`` bytes).
_UNICODE_WIDTH = 64


def new_secret() -> bytes:
    """32 bytes from the operating system's CSPRNG: the secret of one unseeded keyed release."""
    return os.urandom(32)


def seed_secret(seed: int) -> bytes:
    """The secret of a seeded keyed release: SHA-256 of a fixed domain and the decimal seed.

    For tests only: anyone who knows the seed can recompute every key's noise.

    >>> seed_secret(7).hex()[:16] == hashlib.sha256(b"dpstream.release.by-key/v1\\x00seed\\x007").hexdigest()[:16]
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}.")
    return hashlib.sha256(_SEED_DOMAIN + str(seed).encode("ascii")).digest()


def key_bits(secret: bytes, key: str) -> KeyedBits:
    """The bit source of ``key``'s mechanism: ``KeyedBits(key=secret, identity=(KEY_IDENTITY, key))``.

    Pass it as the mechanism's ``seed`` (every mechanism takes a bit source there).

    >>> a, b = key_bits(seed_secret(1), "meter-1"), key_bits(seed_secret(1), "meter-2")
    >>> bool((a.words(3) == key_bits(seed_secret(1), "meter-1").words(3)).all()), bool((a.words(3) == b.words(3)).any())
    (True, False)
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {key!r}.")
    return KeyedBits(key=secret, identity=(KEY_IDENTITY, key))


def key_secret(secret: bytes, key: str) -> bytes:
    """The secret key of ``key``'s mechanism in a durable keyed release: the first 32 bytes of
    :func:`key_bits` ``(secret, key)``.

    Pass it as the mechanism's ``key`` (``key=`` mode: the noise of each tree node is a function of
    this key and the node's identity, so a snapshot leaves the noise out and a restored mechanism
    recomputes it).  Keys of different keys are independent as long as ChaCha20 and HMAC-SHA256 are.

    >>> secret = seed_secret(1)
    >>> key_secret(secret, "a") == key_bits(secret, "a").words(4).tobytes() != key_secret(secret, "b")
    True
    """
    return key_bits(secret, key).words(4).astype("<u8").tobytes()


class KeyLimitError(ValueError):
    """A new key would exceed ``max_keys``."""


class KeyedRelease(NamedTuple):
    """What one batch released, in the batch's row order.

    ``rows`` are the indices of the released rows in the batch (int64, increasing), ``keys`` their
    keys, ``positions`` their 0-based positions in their key's stream (int64), ``values`` the
    released values (float64).
    """

    rows: np.ndarray
    keys: list[str]
    positions: np.ndarray
    values: np.ndarray


def show_key(key: str) -> str:
    """A key in a message: its repr, at most 80 characters of it."""
    return repr(key) if len(key) <= 80 else f"{key[:80]!r}... ({len(key):,} characters)"


class KeyReport(NamedTuple):
    """What a keyed release says about one key (:meth:`ByKey.report`): public or published numbers only.

    The count of values is public under the per-key guarantee (keys and how many values each has
    are not protected); theta and the structure are published by the release (None and ``""``
    while the key's hold-out lasts); ``epsilon`` is the key's guarantee, a function of theta and
    the public parameters.  No other number of the data is reported.
    """

    key: str
    #: Values the key's stream consumed (held out or released).
    values: int
    #: Values released (those past the hold-out).
    released: int
    #: theta, once the hold-out chose it (or the public threshold); None before.
    threshold: float | None
    #: The hierarchy's structure: s, the smoothed levels (blocks of ``b^s`` values), or the leaves and their
    #: measured levels d; ``""`` for a mechanism without one or before the hold-out ends.
    smoothed_levels: str
    #: The key's hold-out.
    hold: int
    #: The key's epsilon (before the hold-out ends, the bound the mechanism states).
    epsilon: float


def structure(stream: Any) -> str:
    """A mechanism's hierarchy structure as :attr:`KeyReport.smoothed_levels` states it (``""`` if none is chosen)."""
    if stream.threshold is None:
        return ""
    period, leaf = getattr(stream, "period", None), getattr(stream, "leaf", None)
    if period is not None or leaf is not None:
        unit = f"period {period}" if period is not None else f"leaf {leaf}"
        return f"{unit}, d {stream.period_levels}"
    levels = getattr(stream, "smoothed_levels", None)
    return "" if levels is None else str(levels)


def _empty() -> KeyedRelease:
    return KeyedRelease(np.empty(0, dtype=np.int64), [], np.empty(0, dtype=np.int64), np.empty(0))


class ByKey(Params):
    """One independent release mechanism per key (see the module docstring).

    Parameters
    ----------
    build : callable
        ``build(key) -> mechanism``: a fresh mechanism for a new key, with ``release(values)``,
        ``release_one(value)``, ``position`` and ``threshold``; give each key its own noise, e.g.
        ``seed=key_bits(secret, key)``.
    max_keys : int
        At most this many keys; a row with one more new key raises :class:`KeyLimitError`
        (each key holds a mechanism in memory).

    Attributes
    ----------
    streams : dict
        The mechanism of every key seen, by key.

    Examples
    --------
    >>> from dpstream.release import BinaryTreeCounter
    >>> secret = seed_secret(3)
    >>> def build(key):
    ...     return BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, seed=key_bits(secret, key))
    >>> streams = ByKey(build=build)
    >>> out = streams.release([1.0, 0.0, 1.0, 1.0], ["b", "a", "b", "a"])
    >>> out.rows.tolist(), out.keys, out.positions.tolist()
    ([0, 1, 2, 3], ['b', 'a', 'b', 'a'], [0, 0, 1, 1])
    >>> alone = build("b").release([1.0, 1.0])  # key b's sub-stream, run alone
    >>> bool((out.values[[0, 2]] == alone).all())
    True
    """

    def __init__(self, *, build: Callable[[str], Any], max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if not callable(build):
            raise TypeError(f"build must be callable (key -> mechanism), got {build!r}.")
        self.build = build
        self.max_keys = check_positive_int(max_keys, "max_keys")
        self.streams: dict[str, Any] = {}
        self._rows = 0

    def __len__(self) -> int:
        return len(self.streams)

    @property
    def position(self) -> int:
        """Rows consumed over all keys (held out or released)."""
        return self._rows

    def released_count(self) -> int:
        """Values released over all keys (rows past each key's hold-out)."""
        return sum(stream.position - stream.hold for stream in self.streams.values() if stream.threshold is not None)

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data: the keys in the order they were first served (by batch, sorted), each
        key's position and mechanism snapshot.

        SECRET, as every mechanism snapshot is.  :meth:`from_state` continues from it.
        """
        keys = list(self.streams)
        return {"mechanism": BY_KEY, "version": _BY_KEY_VERSION, "keys": keys,
                "positions": np.array([self.streams[key].position for key in keys], dtype=np.int64),
                "streams": [self.streams[key].state for key in keys]}

    @classmethod
    def from_state(cls, state: dict[str, Any], *, build: Callable[[str], Any], restore: Callable[[str, dict], Any],
                   max_keys: int = DEFAULT_MAX_KEYS) -> ByKey:
        """The :class:`ByKey` a :attr:`state` snapshot describes.

        ``restore(key, snapshot)`` brings back one key's mechanism (e.g. ``ToPS.from_state``);
        ``build`` makes the mechanisms of keys still to come.  ``max_keys`` may be larger than
        when the snapshot was taken, not smaller than its number of keys.

        >>> from dpstream.release import BinaryTreeCounter
        >>> def build(key):
        ...     return BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, key=key_secret(seed_secret(3), key))
        >>> streams = ByKey(build=build)
        >>> _ = streams.release([1.0, 0.0, 1.0], ["b", "a", "b"])
        >>> again = ByKey.from_state(streams.state, build=build, restore=lambda key, s: BinaryTreeCounter.from_state(s))
        >>> list(again.streams), again.position
        (['a', 'b'], 3)
        >>> bool((again.release([1.0, 1.0], ["a", "b"]).values == streams.release([1.0, 1.0], ["a", "b"]).values).all())
        True
        """
        if not isinstance(state, dict) or state.get("mechanism") != BY_KEY:
            raise ValueError(f"a by-key snapshot must be the dict ByKey.state gave, got {str(state)[:80]!r}.")
        if state.get("version") != _BY_KEY_VERSION:
            raise ValueError(f"a by-key snapshot of layout version {state.get('version')!r} cannot be read by this "
                             f"version of dpstream (layout {_BY_KEY_VERSION}).")
        keys, positions, snapshots = state["keys"], np.asarray(state["positions"]), state["streams"]
        if not (isinstance(keys, list) and isinstance(snapshots, list) and len(keys) == len(snapshots) == positions.size
                and len(set(keys)) == len(keys) and all(isinstance(key, str) for key in keys)):
            raise ValueError("a by-key snapshot must list distinct str keys, one position and one snapshot for each.")
        if len(keys) > max_keys:
            raise KeyLimitError(f"the snapshot holds {len(keys):,} keys, more than the limit of {max_keys:,} keys.")
        streams = cls(build=build, max_keys=max_keys)
        for key, position, snapshot in zip(keys, positions.tolist(), snapshots):
            stream = restore(key, snapshot)
            if stream.position != position:
                raise ValueError(f"key {show_key(key)}: its mechanism is at position {stream.position}, the snapshot "
                                 f"records {position}.")
            streams.streams[key] = stream
        streams._rows = int(positions.sum())
        return streams

    def stream(self, key: str) -> Any:
        """The mechanism of ``key``, built if the key is new."""
        stream = self.streams.get(key)
        if stream is None:
            if not isinstance(key, str):
                raise TypeError(f"a key must be a str, got {key!r}.")
            if len(self.streams) >= self.max_keys:
                self._refuse(key)
            stream = self.streams[key] = self.build(key)
        return stream

    def release(self, values: object, keys: Sequence[str]) -> KeyedRelease:
        """Feed a batch of rows, ``values[i]`` under ``keys[i]``; return what was released, in row order.

        Each key's mechanism gets its rows of the batch in one ``release`` call, keys in sorted
        order.  New keys beyond ``max_keys`` are refused before any row is consumed (naming the
        first such key in input order); a value a mechanism refuses raises its error prefixed
        with the key, and the keys served before it in this batch have then consumed their rows
        (check the values first for an error about the first bad row in input order).
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1 or len(keys) != values.size:
            raise ValueError(f"values and keys must be two sequences of one length, got {values.shape} values and "
                             f"{len(keys)} keys.")
        if not values.size:
            return _empty()
        try:
            joined = "".join(keys)
        except TypeError:
            raise TypeError(f"keys must be strings, got {next(k for k in keys if not isinstance(k, str))!r}.") from None
        # numpy's fixed-width strings would drop a key's trailing NUL characters: such keys go as objects
        plain = "\x00" not in joined and max(map(len, keys)) <= _UNICODE_WIDTH
        unique, inverse = np.unique(np.array(keys, dtype=None if plain else object), return_inverse=True)
        order = np.argsort(inverse, kind="stable")  # the rows of each key, in input order
        bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=unique.size))))
        names = unique.tolist()
        if len(self.streams) + len(names) > self.max_keys:
            self.check_room(keys)
        rows, codes, positions, released = [], [], [], []
        for code, key in enumerate(names):
            mine = order[bounds[code] : bounds[code + 1]]
            stream = self.stream(key)
            before = stream.position
            try:
                out = stream.release(values[mine])
            except ValueError as error:
                raise type(error)(f"key {show_key(key)}: {error}") from None
            self._rows += mine.size
            if out.size:
                first = mine.size - out.size  # held-out rows come first and release nothing
                rows.append(mine[first:])
                codes.append(np.full(out.size, code))
                positions.append(np.arange(before + first, before + mine.size, dtype=np.int64))
                released.append(out)
        if not rows:
            return _empty()
        all_rows = np.concatenate(rows)
        back = np.argsort(all_rows, kind="stable")
        return KeyedRelease(all_rows[back], unique[np.concatenate(codes)[back]].tolist(),
                            np.concatenate(positions)[back], np.concatenate(released)[back])

    def check_room(self, keys: Sequence[str]) -> None:
        """Raise :class:`KeyLimitError` if the new keys among ``keys`` (rows in input order) would exceed
        ``max_keys``, naming the first key beyond the limit; nothing is built or consumed."""
        room = self.max_keys - len(self.streams)
        if room >= len(keys):
            return
        new = [key for key in dict.fromkeys(keys) if key not in self.streams]  # in order of first appearance
        if len(new) > room:
            self._refuse(new[room])

    def _refuse(self, key: str) -> None:
        raise KeyLimitError(f"key {show_key(key)} would be key number {self.max_keys + 1:,}, more than the limit of "
                            f"{self.max_keys:,} keys (each key holds its own mechanism in memory).")

    def release_one(self, value: float, key: str) -> tuple[int, float] | None:
        """Feed one row; return ``(position, released value)``, or None while the key's hold-out lasts."""
        stream = self.stream(key)
        try:
            out = stream.release_one(value)
        except ValueError as error:
            raise type(error)(f"key {show_key(key)}: {error}") from None
        self._rows += 1
        return None if out is None else (stream.position - 1, out)

    def report(self) -> list[KeyReport]:
        """One :class:`KeyReport` per key, keys sorted: what the release tells about each key."""
        return [KeyReport(key=key, values=stream.position,
                          released=0 if stream.threshold is None else stream.position - stream.hold,
                          threshold=stream.threshold, smoothed_levels=structure(stream), hold=stream.hold,
                          epsilon=stream.privacy().epsilon)
                for key, stream in sorted(self.streams.items())]

    def held(self) -> int:
        """How many keys have not completed their hold-out (released nothing yet)."""
        return sum(stream.threshold is None for stream in self.streams.values())
