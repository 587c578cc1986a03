"""The streaming contract every release mechanism keeps, and the layout of its snapshots.

ToPS, the binary-tree counter, PAK (capped and uncapped), ToPL's collector and its simulation
(:class:`~dpstream.release.topl.ToPL`) all offer

* ``release(values) -> ndarray`` -- consume a batch, return what it releases (vectorized);
* ``release_one(value)`` -- consume one value (ToPL's collector: one report), return its
  release or None while it is held out; a loop of it equals the batch path bit for bit;
* ``position`` -- the number of input values (reports) consumed, held out or released;
* ``threshold`` -- the public threshold, None until the hold-out ends;
* ``privacy()`` -- the :class:`~dpstream.privacy.PrivacyGuarantee` of the whole release;
* ``state`` -- a snapshot as plain data: dicts with string keys, lists, tuples, numbers, str,
  bytes and numpy arrays, which :func:`dpstream.durable.encoding.encode` turns into JSON and
  :func:`~dpstream.durable.encoding.decode` brings back bit for bit;
* ``from_state(state)`` (a classmethod) -- the mechanism a snapshot describes:
  ``type(m).from_state(decode(encode(m.state)))`` releases from then on exactly what ``m``
  releases, bit for bit.

What a snapshot holds.  ``mechanism`` (the kind, e.g. ``"tops"``; ``"binary-tree"`` written by
earlier versions is read as ``"bt"``) and ``version`` (of this
layout, :data:`STATE_VERSION`), ``params`` (the constructor's arguments, as given), ``noise``
(the noise source: :attr:`dpstream.noise.source.NoiseSource.state`) and the mechanism's own
progress (held-out values, the chosen threshold, the current tree's running sums).

* With ``key=`` (what durable releases use) the noise of every tree node is a function of the
  key and the node's identity, so a snapshot leaves the current tree's noise out and
  ``from_state`` recomputes it: a snapshot stays small and continuing from it, or from any
  older one, gives the same noise for every position.
* With ``seed=`` (tests) the snapshot carries the generator's state, the draws pooled ahead
  and the current tree's noise, so the continuation draws exactly what the original would.
* The default OS CSPRNG has no state to capture: the snapshot carries the current tree's noise
  (never re-drawn for a released position) and a restored mechanism reads fresh bits for the
  trees still to come.

Privacy
-------
A snapshot is SECRET: it holds the key or the noise of the current tree, and the raw held-out
values.  Keep it as safe as the raw data.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpstream.noise.source import NoiseSource
from dpstream.privacy import PrivacyGuarantee

__all__ = [
    "BINARY_TREE",
    "PAK_STATE",
    "STATE_VERSION",
    "STORED_KINDS",
    "TOPL",
    "TOPL_COLLECTOR",
    "TOPS",
    "StreamRelease",
    "read_header",
    "snapshot_header",
    "stored_kind",
]

#: Version of the snapshot layout; a snapshot of another version is refused.
STATE_VERSION = 1
#: The ``mechanism`` field of each kind of snapshot: the mechanism's registered name
#: (:mod:`dpstream.release.registry`; PAK capped or not is ``"pak"``).
TOPS = "tops"
BINARY_TREE = "bt"
PAK_STATE = "pak"
TOPL_COLLECTOR = "topl-collector"
TOPL = "topl"
#: Kinds that snapshots of earlier versions name otherwise -> the kind of today (they keep being read).
STORED_KINDS = {"binary-tree": BINARY_TREE}


def stored_kind(kind: object) -> object:
    """The kind of today of a snapshot's ``mechanism`` field (earlier versions' names mapped).

    >>> stored_kind("binary-tree"), stored_kind("tops")
    ('bt', 'tops')
    """
    return STORED_KINDS.get(kind, kind) if isinstance(kind, str) else kind


@runtime_checkable
class StreamRelease(Protocol):
    """What every release mechanism offers (see the module docstring)."""

    hold: int

    def release(self, values: object) -> np.ndarray:  # pragma: no cover - protocol
        ...

    def release_one(self, value: Any) -> float | None:  # pragma: no cover - protocol
        ...

    @property
    def position(self) -> int:  # pragma: no cover - protocol
        ...

    @property
    def threshold(self) -> float | None:  # pragma: no cover - protocol
        ...

    def privacy(self) -> PrivacyGuarantee:  # pragma: no cover - protocol
        ...

    @property
    def state(self) -> dict[str, Any]:  # pragma: no cover - protocol
        ...


def snapshot_header(kind: str, params: dict[str, Any], source: NoiseSource | None) -> dict[str, Any]:
    """The fields every snapshot starts with: its kind, the layout version, the parameters and the noise."""
    header: dict[str, Any] = {"mechanism": kind, "version": STATE_VERSION, "params": dict(params)}
    if source is not None:
        header["noise"] = source.state
    return header


def read_header(state: object, kind: str) -> tuple[dict[str, Any], NoiseSource | None]:
    """Check a snapshot's kind and version; return its parameters and its restored noise source.

    >>> read_header({"mechanism": "tops", "version": 1, "params": {}}, "pak")
    Traceback (most recent call last):
    ValueError: a snapshot of 'tops' cannot restore 'pak'.
    """
    if not isinstance(state, dict) or "mechanism" not in state:
        raise TypeError(f"a mechanism's state must be the dict its state property gave, got {type(state).__name__}.")
    if stored_kind(state["mechanism"]) != kind:
        raise ValueError(f"a snapshot of {state['mechanism']!r} cannot restore {kind!r}.")
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"a {kind} snapshot of layout version {state.get('version')!r} cannot be read by this "
                         f"version of dpstream (layout {STATE_VERSION}).")
    source = NoiseSource.from_state(state["noise"]) if "noise" in state else None
    return dict(state["params"]), source
