"""Release throughput and memory of ToPS on the paper's setting (n = 2^20 + 65,536 POS values).

Run with ``make bench`` (``pytest benchmarks --benchmark-only``).  Throughput is reported in
``extra_info`` as values per second; memory as the peak traced by ``tracemalloc``.  Each run is
a whole release: the hold-out, the threshold selection (included: the default model choice of
theta, s and the prior, or NM-E) and the hierarchy.

Two noise paths: ``exact`` is the default a user gets (no seed: exact discrete Laplace on the
grid from the OS CSPRNG); ``float`` the studies' float path (``noise=FloatNoise``).  Target: the
exact path releases at least 20 million values per second by default (the model's s; s = 4 on
POS at this epsilon) on one core.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dpstream import ToPS, load_dataset
from dpstream.evaluation import extend_stream
from dpstream.noise import FloatNoise

HOLD, RANGE = 65536, 2**20
EPSILON = 0.05


@pytest.fixture(scope="module")
def pos() -> tuple[np.ndarray, float]:
    data = load_dataset("pos")
    values, _ = extend_stream(data.values, 4 * RANGE + HOLD)
    return values, data.upper_bound


def _tops(bound: float, smoothed_levels: int | None = None, noise: str = "exact", method: str = "model") -> ToPS:
    extra = {} if noise == "exact" else {"noise": FloatNoise(rng=0)}
    return ToPS(epsilon=EPSILON, upper_bound=bound, hold=HOLD, max_range=RANGE, smoothed_levels=smoothed_levels,
                threshold_method=method, **extra)


# s = None is the default (the model's choice: 4 on POS at eps = 0.05); s = 0 measures every
# value (the largest tree).
LEVELS = pytest.mark.parametrize("smoothed_levels", [None, 0], ids=["s=default", "s=0"])
NOISE = pytest.mark.parametrize("noise", ["exact", "float"])


@LEVELS
@NOISE
def test_batch_release(benchmark, pos, smoothed_levels, noise):
    values, bound = pos
    stream = values[: HOLD + RANGE]
    out = benchmark.pedantic(
        lambda: _tops(bound, smoothed_levels, noise).release(stream), rounds=10, iterations=1, warmup_rounds=1
    )
    assert out.size == RANGE
    rate = stream.size / benchmark.stats.stats.median
    benchmark.extra_info["values_per_second"] = rate
    if noise == "exact" and smoothed_levels is None:
        assert rate >= 20e6


@NOISE
def test_batch_release_nm_e(benchmark, pos, noise):
    """The paper's threshold (NM-E, s = 3 from Eq. 7 at eps = 0.05), for comparison."""
    values, bound = pos
    stream = values[: HOLD + RANGE]
    out = benchmark.pedantic(lambda: _tops(bound, None, noise, "nm-e").release(stream), rounds=10, iterations=1,
                             warmup_rounds=1)
    assert out.size == RANGE
    benchmark.extra_info["values_per_second"] = stream.size / benchmark.stats.stats.median


def test_batch_release_period(benchmark, pos):
    """One leaf per period of 1440 values (``period=1440``, exact path), for comparison."""
    values, bound = pos
    stream = values[: HOLD + RANGE]
    out = benchmark.pedantic(
        lambda: ToPS(epsilon=EPSILON, upper_bound=bound, hold=HOLD, max_range=RANGE, period=1440).release(stream),
        rounds=10, iterations=1, warmup_rounds=1)
    assert out.size == RANGE
    benchmark.extra_info["values_per_second"] = stream.size / benchmark.stats.stats.median


def test_streaming_release_one_value_at_a_time(benchmark, pos):
    values, bound = pos
    stream = values[: HOLD + RANGE].tolist()

    def run() -> int:
        tops = _tops(bound)
        release_one = tops.release_one
        count = 0
        for value in stream:
            if release_one(value) is not None:
                count += 1
        return count

    count = benchmark.pedantic(run, rounds=3, iterations=1)
    assert count == RANGE
    benchmark.extra_info["values_per_second"] = len(stream) / benchmark.stats.stats.median


@LEVELS
@pytest.mark.parametrize("chunks", [1, 4])
def test_peak_memory_does_not_grow_with_the_stream(benchmark, pos, chunks, smoothed_levels):
    """The exact path (default); at s = 0 its consistency holds ~1.1e6 int64 nodes and the
    level-1 blocks' Python ints (65,536 of them) for a moment."""
    """Peak memory of a streaming release over 1 and 4 chunks of r values, fed in batches."""
    values, bound = pos
    stream = values[: HOLD + chunks * RANGE]

    def run() -> int:
        tops = _tops(bound, smoothed_levels)
        tracemalloc.start()
        for start in range(0, stream.size, 65536):
            tops.release(stream[start : start + 65536])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak

    peak = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["peak_mib"] = peak / 2**20
    benchmark.extra_info["values"] = int(stream.size)
    # One hierarchy over r = 2^20 values is ~1.07e6 float64 nodes plus the consistency passes'
    # temporaries; a growing state would scale with `chunks`.
    assert peak < 96 * 2**20
