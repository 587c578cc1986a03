"""ToPL speed: client perturbation of 10^6 values and the collector's EM over m = 65,536 reports.

Run with ``.venv/bin/python -m pytest benchmarks/test_topl.py --benchmark-only -o addopts=""``.
Targets (issue 4): perturbing 10^6 values <= 1 s; EM over 65,536 reports and 1,024 buckets <= 2 s.
Reports are exact draws on the grid (:mod:`dpstream.ldp.grid`), from a seeded PCG64 bit source or,
as in a real release, from the operating system's CSPRNG.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpstream import load_dataset
from dpstream.evaluation import extend_stream
from dpstream.ldp import SquareWave, estimate_density
from dpstream.noise import SeededBits, SystemBits
from dpstream.release import ToPLCollector, ToPLRandomizer

N, HOLD, BUCKETS = 10**6, 65536, 1024


@pytest.fixture(scope="module")
def pos() -> tuple[np.ndarray, float]:
    data = load_dataset("pos")
    values, _ = extend_stream(data.values, N)
    return values, data.upper_bound


@pytest.mark.parametrize("source", ["seeded", "secure"])
def test_client_hm_reports_of_a_million_values(benchmark, pos, source):
    values, bound = pos
    client = ToPLRandomizer(epsilon=1.0, upper_bound=bound, threshold=60.0)
    bits = SeededBits(seed=0) if source == "seeded" else SystemBits()
    codes, outputs = benchmark.pedantic(client.report_batch, args=(values, bits), rounds=5, iterations=1)
    assert outputs.size == N
    benchmark.extra_info["values_per_second"] = N / benchmark.stats.stats.median


def test_client_square_wave_reports_of_a_million_values(benchmark, pos):
    values, bound = pos
    client = ToPLRandomizer(epsilon=1.0, upper_bound=bound)
    codes, outputs = benchmark.pedantic(client.report_batch, args=(values, SeededBits(seed=0)), rounds=5,
                                        iterations=1)
    assert outputs.size == N


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 2.0])
@pytest.mark.parametrize("smoothing", [False, True], ids=["EM", "EMS"])
def test_em_over_65536_reports_and_1024_buckets(benchmark, pos, smoothing, epsilon):
    values, bound = pos
    reports = SquareWave(epsilon=epsilon).perturb(values[:HOLD] / bound, 1)
    estimate = benchmark.pedantic(estimate_density, args=(reports, epsilon),
                                  kwargs=dict(buckets=BUCKETS, smoothing=smoothing), rounds=3, iterations=1)
    benchmark.extra_info["iterations"] = estimate.iterations
    assert estimate.converged


def test_collector_end_to_end_on_a_million_reports(benchmark, pos):
    """Threshold from the first 65,536 reports (SW-W), then 10^6 - 65,536 HM reports estimated."""
    values, bound = pos
    bits = SeededBits(seed=2)
    threshold_reports = ToPLRandomizer(epsilon=1.0, upper_bound=bound).report_batch(values[:HOLD], bits)

    def run() -> np.ndarray:
        collector = ToPLCollector(epsilon=1.0, upper_bound=bound, hold=HOLD)
        collector.receive_batch(*threshold_reports)
        stream_reports = collector.client().report_batch(values[HOLD:], bits)
        return collector.receive_batch(*stream_reports)

    out = benchmark.pedantic(run, rounds=3, iterations=1)
    assert out.size == N - HOLD
