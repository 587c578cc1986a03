"""ToPL speed: client perturbation of 10^6 values and the collector's EM over m = 65,536 reports.

Run with ``.venv/bin/python -m pytest benchmarks/test_topl.py --benchmark-only -o addopts=""``.
Targets (issue 4): perturbing 10^6 values <= 1 s; EM over 65,536 reports and 1,024 buckets <= 2 s.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpstream import load_dataset
from dpstream.evaluation import extend_stream
from dpstream.ldp import SquareWave, estimate_density
from dpstream.release import ToPLClient, ToPLCollector

N, HOLD, BUCKETS = 10**6, 65536, 1024


@pytest.fixture(scope="module")
def pos() -> tuple[np.ndarray, float]:
    data = load_dataset("pos")
    values, _ = extend_stream(data.values, N)
    return values, data.upper_bound


def test_client_hm_reports_of_a_million_values(benchmark, pos):
    values, bound = pos
    client = ToPLClient(epsilon=1.0, upper_bound=bound, threshold=60.0)
    rng = np.random.default_rng(0)
    codes, outputs = benchmark.pedantic(client.report_batch, args=(values, rng), rounds=5, iterations=1)
    assert outputs.size == N
    benchmark.extra_info["values_per_second"] = N / benchmark.stats.stats.median


def test_client_square_wave_reports_of_a_million_values(benchmark, pos):
    values, bound = pos
    client = ToPLClient(epsilon=1.0, upper_bound=bound)
    rng = np.random.default_rng(0)
    codes, outputs = benchmark.pedantic(client.report_batch, args=(values, rng), rounds=5, iterations=1)
    assert outputs.size == N


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 2.0])
@pytest.mark.parametrize("smoothing", [False, True], ids=["EM", "EMS"])
def test_em_over_65536_reports_and_1024_buckets(benchmark, pos, smoothing, epsilon):
    values, bound = pos
    reports = SquareWave(epsilon=epsilon).perturb(values[:HOLD] / bound, np.random.default_rng(1))
    estimate = benchmark.pedantic(estimate_density, args=(reports, epsilon),
                                  kwargs=dict(buckets=BUCKETS, smoothing=smoothing), rounds=3, iterations=1)
    benchmark.extra_info["iterations"] = estimate.iterations
    assert estimate.converged


def test_collector_end_to_end_on_a_million_reports(benchmark, pos):
    """Threshold from the first 65,536 reports (SW-W), then 10^6 - 65,536 HM reports estimated."""
    values, bound = pos
    rng = np.random.default_rng(2)
    threshold_reports = ToPLClient(epsilon=1.0, upper_bound=bound).report_batch(values[:HOLD], rng)

    def run() -> np.ndarray:
        collector = ToPLCollector(epsilon=1.0, upper_bound=bound, hold=HOLD)
        collector.receive_batch(*threshold_reports)
        stream_reports = collector.client().report_batch(values[HOLD:], rng)
        return collector.receive_batch(*stream_reports)

    out = benchmark.pedantic(run, rounds=3, iterations=1)
    assert out.size == N - HOLD
