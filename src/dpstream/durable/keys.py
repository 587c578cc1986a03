"""The key of a seeded durable release: one derivation for ``release --seed --state`` and ``dpstream serve``."""

from __future__ import annotations

import hashlib

__all__ = ["seed_key"]

_SEED_DOMAIN = b"dpstream release --seed key/v1\x00"


def seed_key(seed: int) -> bytes:
    """The key of a seeded durable release: SHA-256 of a fixed label and the seed (replayable by anyone: tests only).

    >>> seed_key(1) == seed_key(1) != seed_key(2), len(seed_key(1))
    (True, 32)
    """
    return hashlib.sha256(_SEED_DOMAIN + str(int(seed)).encode("ascii")).digest()
