"""Cost of saving and loading a durable state (``dpstream.durable``) of a ToPS release's size.

Run with ``make bench`` (``pytest benchmarks --benchmark-only``).  The ``hold-out`` state holds
what a ToPS release keeps at worst: the 65,536 held-out float64 values, 4,096 leaf noise values,
the generator's state and a ledger of ten entries (~750 kB on disk).  The ``keyed`` state is what
a keyed release keeps after its hold-out (theta, the position, the smoother's state: its noise
is recomputed from the key, not stored).  A durable release saves once per chunk of released
values, so a save is set against the library's time to release a chunk of 65,536 values,
averaged over a whole hierarchy of 2^20 values (``extra_info["save_per_chunk"]``).  The command
line reads and writes text at a few hundred thousand values per second (~0.4 M/s measured on a
2-core machine), so there a chunk takes over 100 ms.  A save includes two fsyncs (the file and
its directory), whose cost is the disk's, so the encoding alone is measured too.

Measured on a loaded 2-core VM (ext4): a hold-out state saves in ~30 ms (~14 ms without the
fsyncs) and opens in ~12 ms; a keyed state saves in ~15 ms, nearly all of it fsync.  The library
releases a chunk of 65,536 values in ~2 ms, the command line in ~150 ms: a save per 65,536
values is cheap for the command line (~10-20%) but not for a library loop, which should save
by time (say at most once a second) or by larger chunks.  With keyed noise that is safe: a
resume recomputes the noise of positions released after the last save.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpstream import ToPS
from dpstream.durable import Progress, StreamState
from dpstream.durable import files as files_module
from dpstream.privacy import EVENT_LEVEL

HOLD, LEAVES, CHUNK = 65536, 4096, 65536


def _mechanism(kind: str) -> dict:
    rng = np.random.default_rng(0)
    if kind == "keyed":
        return {"threshold": 37.0, "position": HOLD + 5 * CHUNK, "block_sum": 1234.5, "block_count": 3,
                "smoother": {"last": 41.25}}
    return {"held": rng.uniform(0, 100, HOLD), "leaf_noise": rng.laplace(scale=20.0, size=LEAVES),
            "threshold": None, "position": HOLD, "rng_state": rng.bit_generator.state}


@pytest.fixture(params=["hold-out", "keyed"])
def state(tmp_path, request):
    state = StreamState.create(tmp_path / "state", params={"method": "tops", "epsilon": 1.0, "hold": HOLD},
                               mechanism=_mechanism(request.param))
    for start in range(0, 10 * CHUNK, CHUNK):
        state.spend(epsilon=1.0, neighbours=EVENT_LEVEL, method="tops", first=start, last=start + CHUNK,
                    stream=f"s{start}")
    state.progress = Progress(consumed=HOLD, released=0, output_bytes=0)
    yield state
    state.close()


def _chunk_release_seconds() -> float:
    """ToPS's time to release 2^20 values after its hold-out, chunk by chunk, per chunk of 65,536."""
    values = np.random.default_rng(1).integers(0, 100, size=HOLD + 2**20).astype(float)
    tops = ToPS(epsilon=1.0, upper_bound=100, hold=HOLD, max_range=2**20, seed=0)
    tops.release(values[:HOLD])
    begin = time.perf_counter()
    for start in range(HOLD, values.size, CHUNK):
        tops.release(values[start : start + CHUNK])
    return (time.perf_counter() - begin) / (2**20 // CHUNK)


def test_save_a_tops_sized_state(benchmark, state):
    benchmark.pedantic(state.save, rounds=20, iterations=1, warmup_rounds=1)
    median = benchmark.stats.stats.median
    benchmark.extra_info["bytes"] = state.path.stat().st_size
    benchmark.extra_info["save_ms"] = round(1e3 * median, 2)
    benchmark.extra_info["save_per_chunk"] = round(median / _chunk_release_seconds(), 3)
    assert median < 0.25  # generous: fsync on a slow disk; the encoding alone is far below (next test)


def test_save_without_fsync_the_encoding_alone(benchmark, state, monkeypatch):
    class Os:
        def __getattr__(self, name):
            return (lambda fd: None) if name == "fsync" else getattr(__import__("os"), name)

    monkeypatch.setattr(files_module, "os", Os())
    benchmark.pedantic(state.save, rounds=20, iterations=1, warmup_rounds=1)
    median = benchmark.stats.stats.median
    benchmark.extra_info["save_ms"] = round(1e3 * median, 2)
    benchmark.extra_info["save_per_chunk"] = round(median / _chunk_release_seconds(), 3)
    assert median < 0.05


def test_open_a_tops_sized_state(benchmark, state):
    state.save()
    path = state.path
    state.close()

    def load() -> None:
        StreamState.open(path).close()

    benchmark.pedantic(load, rounds=20, iterations=1, warmup_rounds=1)
    benchmark.extra_info["open_ms"] = round(1e3 * benchmark.stats.stats.median, 2)
