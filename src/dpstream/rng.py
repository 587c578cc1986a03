"""The random-generator convention: one ``numpy.random.Generator`` per run.

Every randomized object in dpstream takes ``seed`` (an int, ``None`` or a ready
``Generator``) and turns it into a generator with :func:`make_rng`.  No code touches numpy's
global random state, so a run is replayed exactly by passing the same seed, and a
cryptographically secure bit generator can be swapped in by passing a ``Generator`` built on it.

Privacy
-------
A seed is for experiments and tests.  Anyone who knows the seed (and the public parameters)
can regenerate every noise value and subtract it, so a seeded release is not private against
them.  For a real release pass no seed (fresh operating-system entropy).  numpy's PCG64 is not
a cryptographically secure generator, and its Laplace samples are floating-point numbers, which
are known to leak through their low-order bits (Mironov, CCS 2012).  The central stream
mechanisms (ToPS, the binary tree, PAK) therefore turn their ``seed`` into the bits of exact
integer samplers instead (:mod:`dpstream.noise.source`); generators from here drive the studies'
float path and the synthetic data.
"""

from __future__ import annotations

import numbers

import numpy as np

Seed = int | np.random.Generator | None

__all__ = ["Seed", "make_rng"]


def make_rng(seed: Seed = None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` for ``seed``.

    ``None`` draws fresh entropy from the operating system, an integer seeds a PCG64
    generator, and a ``Generator`` is used as it is (shared, not copied).

    >>> int(make_rng(7).integers(100)) == int(make_rng(7).integers(100))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}.")
        return np.random.default_rng(int(seed))
    raise TypeError(f"seed must be None, an integer or a numpy Generator, got {seed!r}.")
