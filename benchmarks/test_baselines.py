"""Speed of the baselines: PAK's threshold on m = 65,536 values and the binary-tree counter.

Targets: the S-PAK threshold (smooth sensitivity and its exact draw included) in <= 1 s; the
binary tree releases >= 300,000 values per second in batch with exact noise from the OS CSPRNG
(the default) and >= 5 million on the studies' float path.  Run with
``pytest benchmarks/test_baselines.py --benchmark-only -o addopts=""``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpstream import load_dataset
from dpstream.noise import FloatNoise
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.thresholds.smooth_sensitivity import pak_threshold

HOLD, RANGE = 65536, 2**20


@pytest.fixture(scope="module")
def pos() -> tuple[np.ndarray, float]:
    data = load_dataset("pos")
    return data.values, data.upper_bound


# POS has few distinct values; continuous values are the worst case of the smooth sensitivity.
@pytest.mark.parametrize("kind", ["pos", "continuous"])
def test_pak_threshold(benchmark, pos, kind):
    values, bound = pos
    held = values[:HOLD] if kind == "pos" else np.random.default_rng(0).uniform(0, bound, HOLD)
    delta = 1.0 / (HOLD + RANGE) ** 2
    tau = benchmark(pak_threshold, held, epsilon=0.05, delta=delta, upper_bound=bound)
    assert np.isfinite(tau)
    assert benchmark.stats.stats.max <= 1.0


@pytest.mark.parametrize("noise", ["exact", "float"])
def test_binary_tree_batch_release(benchmark, pos, noise):
    values, bound = pos
    stream = np.resize(values, RANGE)

    def run() -> np.ndarray:
        extra = {} if noise == "exact" else {"noise": FloatNoise(rng=0)}
        return BinaryTreeCounter(epsilon=0.05, upper_bound=bound, max_range=RANGE, **extra).release(stream)

    out = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    rate = RANGE / benchmark.stats.stats.mean
    benchmark.extra_info["values_per_second"] = rate
    assert out.size == RANGE
    assert rate >= (3e5 if noise == "exact" else 5e6)
