"""The stored form of a mechanism's snapshot: its keys left out, stored once beside it.

A keyed mechanism's snapshot (:mod:`dpstream.release.contract`) carries its noise source's key
(``noise``: ToPS, PAK, the binary tree; ``bits``: ToPL's simulated clients).  A state file and a
service database store that key once, in a place of its own (the state's ``key`` section, the
service's ``secret_key`` column); the snapshot they store is :func:`keyless`, and
:func:`with_key` puts the key back before ``from_state``.  Per-key streams
(:class:`~dpstream.release.by_key.ByKey`) leave out each key's own key too: it is derived again
from the release's key (:func:`~dpstream.release.by_key.key_secret`).

Snapshots stored by earlier versions with their key inside read the same: :func:`with_key`
sets the key the store holds, which is the one they carry.
"""

from __future__ import annotations

from typing import Any

from dpstream.release.by_key import BY_KEY

__all__ = ["keyless", "with_key"]

#: Where a snapshot keeps its keyed noise: ``noise`` (ToPS, PAK, the binary tree), ``bits`` (ToPL's clients).
_NOISE_FIELDS = ("noise", "bits")


def _keyed_fields(snapshot: dict[str, Any]) -> list[str]:
    return [field for field in _NOISE_FIELDS
            if isinstance(snapshot.get(field), dict) and snapshot[field].get("kind") == "keyed"]


def _one_keyless(snapshot: dict[str, Any]) -> dict[str, Any]:
    for field in _keyed_fields(snapshot):
        snapshot = dict(snapshot, **{field: {name: value for name, value in snapshot[field].items() if name != "key"}})
    return snapshot


def keyless(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot without its keys (per-key streams: without each key's), to store beside the key.

    >>> keyless({"mechanism": "bt", "noise": {"kind": "keyed", "key": b"k" * 32, "identity": ("bt",)}})
    {'mechanism': 'bt', 'noise': {'kind': 'keyed', 'identity': ('bt',)}}
    """
    if snapshot.get("mechanism") == BY_KEY:
        return dict(snapshot, streams=[_one_keyless(stream) for stream in snapshot["streams"]])
    return _one_keyless(snapshot)


def with_key(snapshot: dict[str, Any], key: bytes) -> dict[str, Any]:
    """A stored snapshot of one stream with its key put back (a key it carries is replaced by the same key).

    >>> with_key({"noise": {"kind": "keyed", "identity": ("bt",)}}, b"k" * 32)["noise"]["key"] == b"k" * 32
    True
    """
    for field in _keyed_fields(snapshot):
        snapshot = dict(snapshot, **{field: dict(snapshot[field], key=key)})
    return snapshot
