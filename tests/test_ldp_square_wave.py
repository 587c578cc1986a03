"""Square Wave (Eq. 16) and the collector's EM / EMS density estimation (Appendix E.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.ldp import HybridMechanism, SquareWave, estimate_density
from dpstream.ldp.square_wave import _channel

Z = 5.0
EPSILONS = (0.2, 0.5, 1.0, 2.0, 4.0)


def earth_movers(f: np.ndarray, g: np.ndarray) -> float:
    """W1 distance on [0, 1] between two histograms over the same equal buckets."""
    return float(np.abs(np.cumsum(f - g)).sum() / f.size)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_b_p_q_make_a_distribution_with_ratio_e_eps(epsilon):
    sw = SquareWave(epsilon=epsilon)
    assert 0 < sw.b < 0.5
    assert sw.p / sw.q == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert 2 * sw.b * sw.p + sw.q * 1.0 == pytest.approx(1.0, abs=1e-12)  # window 2b, rest width 1


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_exact_density_ratio_over_inputs_and_outputs(epsilon):
    sw = SquareWave(epsilon=epsilon)
    v = np.linspace(0, 1, 51)
    y = np.unique(np.concatenate([np.linspace(-sw.b, 1 + sw.b, 3001), v - sw.b, v + sw.b]))
    density = sw.density(y[:, None], v[None, :])
    assert np.all(density > 0)
    assert np.all(density.max(axis=1) <= math.exp(epsilon) * (1 + 1e-12) * density.min(axis=1))
    assert np.all(sw.density(np.array([-sw.b - 1e-9, 1 + sw.b + 1e-9]), 0.5) == 0)


@pytest.mark.parametrize("epsilon", (0.5, 2.0))
def test_sampled_reports_follow_the_density_and_the_ratio(epsilon):
    sw = SquareWave(epsilon=epsilon)
    rng = np.random.default_rng(21)
    n = 200_000
    edges = np.linspace(-sw.b, 1 + sw.b, 41)
    fine = np.linspace(0, 1, 201)[:, None]
    points = edges[:-1] + fine * np.diff(edges)
    counts = {}
    for v in (0.0, 1.0):
        y = sw.perturb(np.full(n, v), rng)
        assert np.all((y >= -sw.b) & (y <= 1 + sw.b))
        counts[v] = np.histogram(y, edges)[0].astype(float)
        expected = n * sw.density(points, v).mean(axis=0) * np.diff(edges)
        assert np.all(np.abs(counts[v] - expected) <= Z * np.sqrt(expected) + 0.01 * expected)
    for a, b in ((0.0, 1.0), (1.0, 0.0)):
        low = np.maximum(counts[a] - Z * np.sqrt(counts[a]), 0)
        high = counts[b] + Z * np.sqrt(counts[b]) + 1
        assert np.all(low / high <= math.exp(epsilon))


@pytest.mark.parametrize("epsilon", (0.3, 1.0, 3.0))
def test_transition_probabilities_sum_to_one_and_match_sampling(epsilon):
    sw = SquareWave(epsilon=epsilon)
    d = 32
    channel = _channel(sw, d)
    matrix = np.stack([channel.forward(np.eye(d)[i]) for i in range(d)], axis=1)  # rows: outputs
    assert np.allclose(matrix.sum(axis=0), 1.0, atol=1e-12)
    assert np.all(matrix >= 0)
    # M^T x computed by correlation equals the dense transpose product.
    x = np.random.default_rng(0).random(matrix.shape[0])
    assert np.allclose(channel.backward(x), matrix.T @ x)
    # Column 7 against reports of inputs drawn uniformly in input bucket 7.
    rng = np.random.default_rng(8)
    n = 200_000
    y = sw.perturb((7 + rng.random(n)) / d, rng)
    observed = np.bincount(np.clip(((y + sw.b) * d).astype(int), 0, matrix.shape[0] - 1), minlength=matrix.shape[0])
    expected = n * matrix[:, 7]
    assert np.all(np.abs(observed - expected) <= Z * np.sqrt(expected) + 1)


@pytest.mark.parametrize("smoothing", (True, False), ids=("EMS", "EM"))
@pytest.mark.parametrize("epsilon", (1.0, 3.0))
def test_em_recovers_a_known_distribution(smoothing, epsilon):
    """Beta(2, 5) from 200,000 reports: earth-mover distance under 0.02 of the domain.

    For scale: the uniform guess is at 0.21 from it, and the distance between the buckets'
    true shares and the continuous law (the discretization alone) is below 1 / (2 d).
    """
    d = 64
    rng = np.random.default_rng(3)
    values = rng.beta(2, 5, 200_000)
    truth = np.histogram(values, np.linspace(0, 1, d + 1))[0] / values.size
    est = estimate_density(SquareWave(epsilon=epsilon).perturb(values, rng), epsilon, buckets=d, smoothing=smoothing)
    assert est.converged and est.frequencies.sum() == pytest.approx(1.0)
    assert np.all(est.frequencies >= 0)
    assert earth_movers(np.full(d, 1 / d), truth) > 0.15
    assert earth_movers(est.frequencies, truth) < 0.02
    centres = (np.arange(d) + 0.5) / d
    assert abs(est.frequencies @ centres - values.mean()) < 0.02


def test_em_locates_a_point_mass():
    rng = np.random.default_rng(4)
    d = 128
    values = np.full(100_000, 0.3)
    est = estimate_density(SquareWave(epsilon=2.0).perturb(values, rng), 2.0, buckets=d, smoothing=False)
    point = np.zeros(d)
    point[int(0.3 * d)] = 1.0
    assert earth_movers(est.frequencies, point) < 0.02


def test_batch_equals_loop_and_bad_inputs():
    sw = SquareWave(epsilon=1.0)
    values = np.random.default_rng(0).random(40)
    batch = sw.perturb(values, np.random.default_rng(1))
    rng = np.random.default_rng(1)
    assert np.array_equal(batch, np.concatenate([sw.perturb([v], rng) for v in values]))
    with pytest.raises(ValueError, match=r"values\[0\] must be in \[0, 1\], got -0.1"):
        sw.perturb([-0.1], rng)
    with pytest.raises(ValueError, match="reports.* must be in"):
        estimate_density([2.0], 1.0)
    with pytest.raises(ValueError, match="at least one"):
        estimate_density([], 1.0)
    with pytest.raises(ValueError, match="buckets must be an integer >= 2, got 1"):
        estimate_density([0.5], 1.0, buckets=1)
    assert sw.privacy().epsilon == 1.0


@pytest.mark.parametrize("epsilon", [1e-11, 1e-8, 1e-4, 0.0099, 0.0101, 0.3])
def test_window_is_accurate_for_small_budgets(epsilon):
    """b = (x e^x - e^x + 1) / (2 e^x (e^x - 1 - x)) = 1/2 - x/3 + x^2/9 + O(x^3) as x -> 0."""
    sw = SquareWave(epsilon=epsilon)
    assert sw.b == pytest.approx(0.5 - epsilon / 3 + epsilon**2 / 9, abs=epsilon**3 + 4e-16)  # + rounding
    assert 2 * sw.b * sw.p + sw.q == pytest.approx(1.0, rel=1e-12)  # window 2b at p, the rest (length 1) at q


def test_local_budgets_are_capped():
    with pytest.raises(ValueError, match="at most 30.*got 31.0"):
        SquareWave(epsilon=31.0)
    with pytest.raises(ValueError, match="at most 30"):
        HybridMechanism(epsilon=100.0)
