"""What one stream keeps in memory, which a keyed release multiplies by its keys (docs/keys.md, "Memory")."""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest

from dpstream import ToPS
from dpstream.release.tops_defaults import MODEL_MAX_LEAVES, model_structures

#: A month of 15-minute readings of one meter (kWh), as the README's meter example has per key.
MONTH = np.random.default_rng(0).gamma(2.0, 0.4, 30 * 96).clip(0, 5)


def _arrays_bytes(tops: ToPS) -> int:
    """The bytes of the arrays the stream's perturber holds (its chunk's noise, above all)."""
    state = tops._stream.state
    held = (getattr(state, field.name) for field in dataclasses.fields(state))
    return sum(value.nbytes for value in held if isinstance(value, np.ndarray))


@pytest.mark.parametrize("seed", range(8))
def test_a_window_length_keeps_a_stream_small(seed):
    """--query-length 96 with the default r = 2^20: whatever the model chooses (s, or leaves of a fraction of the
    window), a chunk has at most MODEL_MAX_LEAVES leaves, 16 bytes each (it had 2^20: 16 MB a key)."""
    tops = ToPS(epsilon=0.05, upper_bound=5.0, hold=96, query_length=96, seed=seed)
    tops.release(MONTH)
    assert tops._stream.blocks_per_chunk <= MODEL_MAX_LEAVES
    assert _arrays_bytes(tops) <= 16 * MODEL_MAX_LEAVES


def test_memory_per_key_as_documented():
    """tracemalloc per stream: at most 1.1 MB with --query-length 96 (16 MB when s = 0 was chosen), at most 0.3 MB at
    the defaults."""
    for query_length, limit in ((96, 1.1), (None, 0.3)):
        tracemalloc.start()
        kept = [ToPS(epsilon=0.05, upper_bound=5.0, hold=96, query_length=query_length, seed=seed) for seed in range(8)]
        for tops in kept:
            tops.release(MONTH)
        used = tracemalloc.get_traced_memory()[0] / len(kept)
        tracemalloc.stop()
        assert used <= limit * 2**20, (query_length, used)


def test_forced_levels_and_short_chunks_are_not_restricted():
    """The user's --smoothed-levels stays theirs, and a chunk of at most 2^16 values keeps every structure."""
    assert model_structures(2**20, 16, (12,), forced=(0,), windows=False) == ((0,), (12,))
    assert model_structures(2**16, 2, (3, 5)) == (tuple(range(16)), (3, 5))
    assert model_structures(2**40, 2**20)[0] == (1,)
