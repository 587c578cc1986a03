"""Speed of the exact samplers (``dpstream.noise.exact_primitives`` and the laws built on it) on one core.

Run with ``.venv/bin/python -m pytest benchmarks/test_noise.py --benchmark-only -o addopts=""``.
Target: the discrete Laplace draws at least 10^6 values per second from the operating system's
CSPRNG at scales up to 10^4.  Draws per second are in ``extra_info``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.noise import KeyedBits, SeededBits, SystemBits, discrete_gaussian, discrete_laplace

N = 10**6


def _record(benchmark, out) -> None:
    assert out.shape == (N,) and out.dtype == np.int64
    benchmark.extra_info["draws_per_second"] = round(N / benchmark.stats.stats.median)


@pytest.mark.parametrize("t, s", [(1, 1), (10, 1), (100, 1), (10_000, 1), (7, 3)], ids=lambda v: str(v))
def test_discrete_laplace_from_system_bits(benchmark, t, s):
    bits = SystemBits()
    out = benchmark.pedantic(discrete_laplace, args=(bits, t, s, N), rounds=5, iterations=1, warmup_rounds=1)
    _record(benchmark, out)
    assert N / benchmark.stats.stats.median >= 1e6


@pytest.mark.parametrize(
    "source",
    [lambda: SeededBits(seed=0), lambda: KeyedBits(key=bytes(32), identity=("bench", 0))],
    ids=["seeded", "keyed"],
)
def test_discrete_laplace_from_other_sources(benchmark, source):
    bits = source()
    out = benchmark.pedantic(discrete_laplace, args=(bits, 100, 1, N), rounds=5, iterations=1, warmup_rounds=1)
    _record(benchmark, out)


@pytest.mark.parametrize("sigma2", [(100, 1), (10**12, 7)], ids=["sigma2-100", "sigma2-1e12/7"])
def test_discrete_gaussian_from_system_bits(benchmark, sigma2):
    bits = SystemBits()
    out = benchmark.pedantic(discrete_gaussian, args=(bits, *sigma2, N), rounds=3, iterations=1, warmup_rounds=1)
    _record(benchmark, out)
