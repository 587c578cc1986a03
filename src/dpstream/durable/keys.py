"""The keys of durable releases: the key of a seeded one (one derivation for ``release --seed --state`` and
``dpstream serve``), and the fingerprint that names a state's key in a budget store without revealing it."""

from __future__ import annotations

import hashlib

__all__ = ["key_fingerprint", "seed_key"]

_SEED_DOMAIN = b"dpstream release --seed key/v1\x00"
_FINGERPRINT_DOMAIN = b"dpstream state key fingerprint/v1\x00"


def seed_key(seed: int) -> bytes:
    """The key of a seeded durable release: SHA-256 of a fixed label and the seed (replayable by anyone: tests only).

    >>> seed_key(1) == seed_key(1) != seed_key(2), len(seed_key(1))
    (True, 32)
    """
    return hashlib.sha256(_SEED_DOMAIN + str(int(seed)).encode("ascii")).digest()


def key_fingerprint(key: bytes) -> str:
    """A state key's fingerprint: SHA-256 of a fixed label and the key, in hex.  One-way (it recomputes no noise)
    and of its own domain (no other hash of the key is it), it tells whether two states hold the same key: a
    budget store records it with the charge of a ``--state`` release, and refuses a copy of that state charged
    under another name.

    >>> key_fingerprint(seed_key(1)) == key_fingerprint(seed_key(1)) != key_fingerprint(seed_key(2))
    True
    >>> len(key_fingerprint(bytes(32))), seed_key(1).hex() in key_fingerprint(seed_key(1))
    (64, False)
    """
    return hashlib.sha256(_FINGERPRINT_DOMAIN + bytes(key)).hexdigest()
