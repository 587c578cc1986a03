"""Square Wave on a grid (Eq. 16) and the collector's EM / EMS with the exact transition matrix (Appendix E.1)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.ldp import HybridMechanism, SquareWave, estimate_density, exp_lower_bound
from dpstream.ldp.grid import DENOMINATOR
from dpstream.ldp.square_wave import _channel
from dpstream.noise import SeededBits

Z = 5.0
EPSILONS = (0.2, 0.5, 1.0, 2.0, 4.0)


def earth_movers(f: np.ndarray, g: np.ndarray) -> float:
    """W1 distance on [0, 1] between two distributions over the same equally spaced points."""
    return float(np.abs(np.cumsum(f - g)).sum() / (f.size - 1))


def _dense(sw: SquareWave) -> np.ndarray:
    """The transition matrix from the exact integer masses: rows outputs, columns grid inputs."""
    j = np.arange(sw.outputs)[:, None]
    i = np.arange(sw.grid + 1)[None, :]
    return sw.core.mass(j, i) / DENOMINATOR


@pytest.mark.parametrize("epsilon", EPSILONS + (30.0,))
def test_window_follows_b_and_the_ratio_is_exact(epsilon):
    sw = SquareWave(epsilon=epsilon)
    assert 0 < sw.b < 0.5
    assert sw.window == max(1, round(2 * sw.b * sw.grid)) and sw.outputs == sw.grid + sw.window
    assert sw.core.ratio <= exp_lower_bound(epsilon)
    assert epsilon - max(2 / sw.core.q, 1e-13) < sw.core.ratio_epsilon <= epsilon
    assert sw.window * sw.core.p + sw.core.extra + sw.grid * sw.core.q == DENOMINATOR  # a distribution, exactly


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_exact_pmf_over_every_grid_input_and_output(epsilon):
    sw = SquareWave(epsilon=epsilon, grid=48)
    j = np.arange(sw.outputs)[:, None]
    masses = sw.core.mass(j, np.arange(sw.grid + 1)[None, :]).astype(object)
    assert all(total == DENOMINATOR for total in masses.sum(axis=0))
    assert max(Fraction(int(row.max()), int(row.min())) for row in masses) == sw.core.ratio
    v = np.linspace(0, 1, 97)  # between the grid points too
    prob = sw.probability(j, v[None, :])
    assert np.all(prob > 0)
    assert np.all(prob.max(axis=1) <= math.exp(epsilon) * (1 + 1e-12) * prob.min(axis=1))
    assert np.all(sw.probability(np.array([-1, sw.outputs]), 0.5) == 0)


@pytest.mark.parametrize("epsilon", (0.5, 2.0))
def test_sampled_reports_follow_the_pmf_and_the_ratio(epsilon):
    sw = SquareWave(epsilon=epsilon, grid=64)
    bits = SeededBits(seed=21)
    n = 200_000
    counts = {}
    for v in (0.0, 1.0, 0.3141):
        y = sw.perturb(np.full(n, v), bits)
        counts[v] = np.bincount(y, minlength=sw.outputs).astype(float)
        assert counts[v].size == sw.outputs
        expected = n * sw.probability(np.arange(sw.outputs), v)
        chi2 = float(((counts[v] - expected) ** 2 / expected).sum())
        assert chi2 < stats.chi2.isf(1e-6, sw.outputs - 1)
    for a, b in ((0.0, 1.0), (1.0, 0.0)):
        low = np.maximum(counts[a] - Z * np.sqrt(counts[a]), 0)
        high = counts[b] + Z * np.sqrt(counts[b]) + 1
        assert np.all(low / high <= math.exp(epsilon))


@pytest.mark.parametrize("epsilon", (0.3, 1.0, 3.0))
def test_the_em_channel_is_the_exact_transition_matrix(epsilon):
    sw = SquareWave(epsilon=epsilon, grid=32)
    channel = _channel(sw)
    matrix = _dense(sw)
    assert np.allclose(matrix.sum(axis=0), 1.0, atol=1e-15)
    f = np.random.default_rng(0).dirichlet(np.ones(sw.grid + 1))
    assert np.allclose(channel.forward(f), matrix @ f, rtol=1e-12, atol=1e-17)
    x = np.random.default_rng(1).random(sw.outputs)
    assert np.allclose(channel.backward(x), matrix.T @ x, rtol=1e-12)
    # a column against reports of grid input 7 (a value on the grid is never moved by rounding)
    n = 200_000
    observed = np.bincount(sw.perturb(np.full(n, 7 / 32), 8), minlength=sw.outputs)
    expected = n * matrix[:, 7]
    assert np.all(np.abs(observed - expected) <= Z * np.sqrt(expected) + 1)


def test_rounding_keeps_the_threshold_bias_exact_at_grid_points():
    """E[(x - theta)^+] = (v - theta)^+ for theta on the grid: the rounded values' bias is the true one."""
    sw = SquareWave(epsilon=1.0, grid=16)
    points = sw.core.points()
    for v in (0.03, 0.5, 0.77, 0.999):
        i = int(v * 16)
        frac = v * 16 - i
        for k in range(17):
            theta = points[k]
            rounded = (1 - frac) * max(points[i] - theta, 0) + frac * max(points[min(i + 1, 16)] - theta, 0)
            assert rounded == pytest.approx(max(v - theta, 0.0), abs=1e-15)


@pytest.mark.parametrize("smoothing", (True, False), ids=("EMS", "EM"))
@pytest.mark.parametrize("epsilon", (1.0, 3.0))
def test_em_recovers_a_known_distribution(smoothing, epsilon):
    """Beta(2, 5) from 200,000 reports: earth-mover distance under 0.02 of the domain.

    The truth is the distribution of the rounded values on the grid (what EM estimates): each
    value's mass split between its two grid points as the rounding does.  For scale: the uniform
    guess is at 0.21 from it.
    """
    d = 64
    rng = np.random.default_rng(3)
    values = rng.beta(2, 5, 200_000)
    u = values * d
    low = np.minimum(np.floor(u).astype(int), d - 1)
    truth = (np.bincount(low, 1 - (u - low), d + 1) + np.bincount(low + 1, u - low, d + 1)) / values.size
    sw = SquareWave(epsilon=epsilon, grid=d)
    est = estimate_density(sw.perturb(values, 4), epsilon, buckets=d, smoothing=smoothing)
    assert est.converged and est.frequencies.sum() == pytest.approx(1.0) and est.frequencies.size == d + 1
    assert np.all(est.frequencies >= 0)
    assert earth_movers(np.full(d + 1, 1 / (d + 1)), truth) > 0.15
    assert earth_movers(est.frequencies, truth) < 0.02
    assert abs(est.frequencies @ est.points - values.mean()) < 0.02


def test_em_locates_a_point_mass():
    d = 128
    values = np.full(100_000, 0.3)
    est = estimate_density(SquareWave(epsilon=2.0, grid=d).perturb(values, 4), 2.0, buckets=d, smoothing=False)
    point = np.zeros(d + 1)
    i, frac = int(0.3 * d), 0.3 * d - int(0.3 * d)
    point[i], point[i + 1] = 1 - frac, frac
    assert earth_movers(est.frequencies, point) < 0.02


def test_batch_equals_loop_and_bad_inputs():
    sw = SquareWave(epsilon=1.0)
    values = np.linspace(0, 1, 40) ** 2
    batch = sw.perturb(values, SeededBits(seed=1))
    bits = SeededBits(seed=1)
    assert np.array_equal(batch, np.concatenate([sw.perturb([v], bits) for v in values]))
    with pytest.raises(ValueError, match=r"values\[0\] must be in \[0, 1\], got -0.1"):
        sw.perturb([-0.1], bits)
    with pytest.raises(ValueError, match=r"reports: the report at position 0 \(0-based\) is 2000, not a point of the "
                                         r"grid \(an integer in \[0, 1547\]\)"):
        estimate_density([2000], 1.0)
    with pytest.raises(ValueError, match="position 1 .* is 0.5, not a point of the grid"):
        estimate_density([3, 0.5], 1.0)
    with pytest.raises(ValueError, match="at least one"):
        estimate_density([], 1.0)
    with pytest.raises(ValueError, match="buckets must be an integer >= 2, got 1"):
        estimate_density([0], 1.0, buckets=1)
    with pytest.raises(ValueError, match=r"grid must be an integer in \[2, 65536\], got 100000"):
        SquareWave(epsilon=1.0, grid=100_000)
    assert sw.privacy().epsilon == 1.0 and "exact probability ratio" in str(sw.privacy())


@pytest.mark.parametrize("epsilon", [1e-11, 1e-8, 1e-4, 0.0099, 0.0101, 0.3])
def test_window_is_accurate_for_small_budgets(epsilon):
    """b = (x e^x - e^x + 1) / (2 e^x (e^x - 1 - x)) = 1/2 - x/3 + x^2/9 + O(x^3) as x -> 0."""
    sw = SquareWave(epsilon=epsilon)
    assert sw.b == pytest.approx(0.5 - epsilon / 3 + epsilon**2 / 9, abs=epsilon**3 + 4e-16)  # + rounding
    assert sw.core.p > sw.core.q or sw.core.extra  # still informative at the smallest budgets


def test_local_budgets_are_capped():
    with pytest.raises(ValueError, match="at most 30.*got 31.0"):
        SquareWave(epsilon=31.0)
    with pytest.raises(ValueError, match="at most 30"):
        HybridMechanism(epsilon=100.0)


def test_positions_place_reports_on_the_continuous_range():
    sw = SquareWave(epsilon=1.0)
    y = sw.positions(np.array([0, sw.outputs - 1]))
    assert y[0] == pytest.approx(-sw.b, abs=1.5 / sw.grid) and y[1] == pytest.approx(1 + sw.b, abs=1.5 / sw.grid)
