"""Speed of MAP / MLE post-processing: T = 10,000 steps, m = 100 locations (target <= 5 s).

Run with ``.venv/bin/python -m pytest benchmarks/test_postprocess.py --benchmark-only -o addopts=""``
(one core: ``OMP_NUM_THREADS=1``; the solver is numpy/scipy element-wise work, not BLAS).
The data: n users (10,000: about 100 per cell; 200: about 2 per cell, many zeros) from a random
initial distribution, moving by the Eq. 11 smoothing (s = 0.1) of the 100 x 100 identity;
counts drawn step by step as multinomials of the exact marginals (the law of independent
users' counts), released with Lap(2 / epsilon).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from dpstream.postprocess import LaplaceCounts, map_estimate, mle_estimate, propagate, smoothed_transition

STEPS, LOCATIONS = 10_000, 100


@cache
def _instance(users: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    transition = smoothed_transition(np.eye(LOCATIONS), 0.1)
    initial = rng.dirichlet(np.ones(LOCATIONS))
    marginals = propagate(initial, transition, STEPS)
    truth = np.array([rng.multinomial(users, p) for p in marginals])
    return truth, transition


@pytest.mark.parametrize("users", [10_000, 200])
@pytest.mark.parametrize("form", ["exact", "stirling"])
@pytest.mark.parametrize("epsilon", [0.05, 1.0])
def test_map(benchmark, users, form, epsilon):
    truth, transition = _instance(users)
    noisy = LaplaceCounts(epsilon=epsilon, seed=1).release(truth)
    estimate = benchmark.pedantic(map_estimate, args=(noisy, transition),
                                  kwargs=dict(users=users, epsilon=epsilon, form=form), rounds=3, iterations=1)
    benchmark.extra_info.update(kkt_residual=estimate.kkt_residual, sum_residual=estimate.sum_residual,
                                iterations=estimate.iterations)
    assert estimate.kkt_residual < 1e-8


def test_mle(benchmark):
    truth, _ = _instance(10_000)
    noisy = LaplaceCounts(epsilon=1.0, seed=1).release(truth)
    estimate = benchmark.pedantic(mle_estimate, args=(noisy,), kwargs=dict(users=10_000), rounds=3, iterations=1)
    assert estimate.kkt_residual < 1e-6
