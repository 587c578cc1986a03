"""The periodic perturber (``dpstream.release.periodic``) and ToPS's ``period=``.

Exact checks use ``ZeroNoise`` (every period's released values sum to its true grid-rounded
sum) and a keyed source (a chunk's leaf noise is the exact consistency of that chunk's keyed
draws, indexed by the clock); the statistical check uses the exact discrete Laplace variance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.hierarchy.tree import consistent_leaves, draw_noise_units
from dpstream.noise import ExactNoise, FloatNoise, KeyedBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.privacy import EVENT_LEVEL
from dpstream.release import ToPS
from dpstream.release.periodic import PeriodicPerturber, periodic_levels
from dpstream.thresholds.error_model import QueryLengths, range_noise_factor


def period_sums(values: np.ndarray, period: int, phase: int) -> np.ndarray:
    """Sums of the periods of a stream whose first value sits at clock position ``phase``
    (the last period may be incomplete), by an explicit loop over clock positions."""
    sums: dict[int, float] = {}
    for i, v in enumerate(values):
        sums[(i + phase) // period] = sums.get((i + phase) // period, 0.0) + float(v)
    return np.array([sums[k] for k in sorted(sums)])


@settings(max_examples=40, deadline=None)
@given(period=st.integers(1, 40), phase_fraction=st.floats(0, 0.999), levels=st.integers(1, 3),
       max_range=st.integers(2, 300), n=st.integers(1, 700), smoother=st.sampled_from(["recent", "mean"]))
def test_zero_noise_every_complete_period_sums_to_its_true_sum(period, phase_fraction, levels, max_range, n,
                                                                 smoother):
    phase = int(phase_fraction * period)
    values = np.random.default_rng(n).integers(0, 9, n).astype(float)
    p = PeriodicPerturber(threshold=8.0, epsilon=1.0, period=period, phase=phase, max_range=max_range, fanout=3,
                          levels=levels, smoother=smoother, noise=ZeroNoise(), prior=2.0)
    out = p.release(values)
    complete = (n + phase) // period  # periods whose last value was released
    expected = period_sums(values, period, phase)[:complete]
    np.testing.assert_allclose(period_sums(out, period, phase)[:complete], expected, rtol=0, atol=1e-9)
    assert p.max_range == max(1, max_range // period) * period


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("period, phase, levels", [(7, 3, 1), (16, 0, 2), (5, 4, 3)])
def test_batch_equals_release_one_and_random_pieces_bit_for_bit(exact, period, phase, levels):
    values = np.random.default_rng(3).random(1500) * 12.0

    def make():
        noise = None if exact else FloatNoise(rng=np.random.default_rng(8))
        return PeriodicPerturber(threshold=12.0, epsilon=0.5, period=period, phase=phase, max_range=200, fanout=4,
                                 levels=levels, seed=8 if exact else None, noise=noise)

    whole = make().release(values)
    single = make()
    assert np.array_equal(whole, [single.release_one(float(v)) for v in values])
    pieces = make()
    cuts = [0, 1, 2, 199, 200, 777, 1499, 1500]
    assert np.array_equal(whole, np.concatenate([pieces.release(values[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]))


def test_period_sums_are_true_sums_plus_the_keyed_consistent_noise_of_their_clock_chunk():
    """Chunk c (clock positions [c C P, (c + 1) C P)) draws from KeyedBits(key, ("tops", c)); a
    period's released values sum to its true grid sum plus that chunk's consistent leaf noise."""
    key, period, phase, fanout, levels = bytes(range(32)), 6, 4, 4, 2
    p = PeriodicPerturber(threshold=10.0, epsilon=0.5, period=period, phase=phase, max_range=100, fanout=fanout,
                          levels=levels, key=key)
    per_chunk = 100 // period
    values = np.random.default_rng(2).random(3 * p.max_range - phase) * 10.0
    out = p.release(values)
    g = p.granularity
    noise = []
    for c in range(3):
        sampler = ExactNoise(bits=KeyedBits(key=key, identity=("tops", c)))
        leaves = consistent_leaves(draw_noise_units(sampler, per_chunk, fanout, levels, p.noise_scale_units), fanout)
        noise.append((leaves.integer + leaves.fraction())[:per_chunk])
    expected = period_sums(np.rint(values / g), period, phase) + np.concatenate(noise)
    np.testing.assert_allclose(period_sums(out, period, phase), expected * g, rtol=1e-12, atol=1e-9)


def test_one_level_period_noise_has_the_exact_discrete_laplace_law_moments():
    """d = 1: each period's sum errs by one independent discrete Laplace draw of scale theta / eps
    (in grid units), mean 0 and the exact variance; bounds at 6 standard errors."""
    period, n_periods = 3, 60_000
    p = PeriodicPerturber(threshold=4.0, epsilon=0.8, period=period, max_range=3000, levels=1, seed=11)
    values = np.random.default_rng(4).random(period * n_periods) * 4.0
    g = p.granularity
    errors = (period_sums(p.release(values), period, 0) - period_sums(np.rint(values / g), period, 0) * g) / g
    variance = laplace_units_variance(p.noise_scale_units)
    assert abs(errors.mean()) < 6 * math.sqrt(variance / n_periods)
    fourth = 24 * float(p.noise_scale_units) ** 4  # E X^4 of a Laplace of that scale (an upper bound here)
    assert abs(errors.var() - variance) < 6 * math.sqrt((fourth - variance**2) / n_periods)
    assert float(p.noise_scale_units) * g == pytest.approx(p.threshold / 0.8, rel=1e-6)


def test_privacy_statement():
    p = PeriodicPerturber(threshold=10, epsilon=0.7, period=24, phase=5, max_range=24 * 40, fanout=4, levels=3, seed=0)
    guarantee = p.privacy()
    assert 0.7 * (1 - 1e-9) <= guarantee.epsilon <= 0.7 and guarantee.delta == 0.0
    assert guarantee.neighbours is EVENT_LEVEL
    assert "on each of d = 3 levels over leaves of one period of 24 values (eps/3 each" in guarantee.composition
    assert f"{p.noise_scale:g}" in guarantee.composition
    assert p.noise_scale == pytest.approx(p.threshold * 3 / 0.7, rel=1e-6)


@pytest.mark.parametrize("kwargs, error, shown", [
    (dict(period=0), ValueError, "period"),
    (dict(period=4, phase=4), ValueError, "phase must be an integer in [0, period = 4), got 4"),
    (dict(period=4, phase=1.5), ValueError, "got 1.5"),
    (dict(period=4, phase=-1), ValueError, "phase"),
    (dict(period=4, levels=0), ValueError, "levels"),
])
def test_bad_parameters(kwargs, error, shown):
    with pytest.raises(error, match=None) as info:
        PeriodicPerturber(threshold=1.0, epsilon=1.0, noise=ZeroNoise(), **kwargs)
    assert shown in str(info.value)


def test_periodic_levels_minimize_the_noise_of_the_windows():
    """d minimizes d^2 times the mean noise factor; recomputed here over all starts of one top node."""
    for length in (24, 24 * 16, 24 * 200):
        queries = QueryLengths.fixed(length)
        chosen = periodic_levels(period=24, max_range=24 * 4096, fanout=16, queries=queries)
        errors = []
        for d in (1, 2, 3):
            starts = 24 + np.arange(24 * 16 ** (d - 1))
            errors.append(d * d * range_noise_factor(starts, starts + length, block_size=24, fanout=16,
                                                     measured_levels=d).mean())
        assert chosen == 1 + int(np.argmin(errors))
    assert periodic_levels(period=24, max_range=24 * 4096, fanout=16, queries=QueryLengths.fixed(24)) == 1
    assert periodic_levels(period=24, max_range=24 * 4096, fanout=16, queries=QueryLengths.fixed(24 * 3000)) > 1
    assert periodic_levels(period=100, max_range=99, fanout=16) == 1  # one leaf per chunk


def test_tops_period_aligns_leaves_with_the_streams_clock():
    """With ZeroNoise, every complete period counted from the stream's first value (hold-out
    included) is released as its true truncated sum; the privacy line names the levels."""
    rng = np.random.default_rng(5)
    stream = rng.integers(0, 50, 3000).astype(float)
    tops = ToPS(epsilon=1.0, upper_bound=100, hold=500, max_range=1024, period=48, noise=ZeroNoise())
    released = tops.release(stream)
    theta, phase = tops.threshold, 500 % 48
    truth = np.minimum(stream[500:], theta)
    complete = (truth.size + phase) // 48
    np.testing.assert_allclose(period_sums(released, 48, phase)[:complete], period_sums(truth, 48, phase)[:complete],
                               rtol=0, atol=1e-9)
    assert tops.smoothed_levels is None and "d = 1" in tops.privacy().composition
    nm_e = ToPS(epsilon=1.0, upper_bound=100, hold=500, max_range=1024, period=48, threshold_method="nm-e",
                noise=ZeroNoise())
    nm_e.release(stream)
    assert "each of h - s = 1 measured levels" in nm_e.privacy().composition


def test_tops_period_refuses_smoothed_levels():
    with pytest.raises(ValueError, match="smoothed_levels applies to blocks of b\\^s values, not to period=48"):
        ToPS(epsilon=1.0, upper_bound=100, hold=500, period=48, smoothed_levels=2, seed=0)


# -- the shape of a period and its private profile ------------------------------------------------


@pytest.mark.parametrize("exact", [True, False])
def test_a_shaped_period_sums_to_its_leaf_and_batch_equals_single_values(exact):
    period, phase = 6, 2
    shape = np.array([0.5, 1.0, 2.0, 4.0, 1.0, 0.0])
    values = np.random.default_rng(6).random(400) * 5.0

    def make(noise=None):
        if noise is None:
            noise = None if exact else FloatNoise(rng=np.random.default_rng(9))
        return PeriodicPerturber(threshold=5.0, epsilon=0.5, period=period, phase=phase, max_range=60, levels=2,
                                 fanout=3, shape=shape, seed=9 if exact and noise is None else None, noise=noise)

    whole = make().release(values)
    single = make()
    assert np.array_equal(whole, [single.release_one(float(v)) for v in values])
    zero = make(ZeroNoise())
    out = zero.release(values)
    complete = (values.size + phase) // period
    expected = period_sums(np.rint(values / zero.granularity) * zero.granularity, period, phase)[:complete]
    np.testing.assert_allclose(period_sums(out, period, phase)[:complete], expected, rtol=1e-12, atol=1e-9)
    # inside a period, the predictions follow the normalized shape: level * shape[c]
    scaled = shape * period / shape.sum()
    day = out[period - phase : 2 * period - phase]  # clock positions [P, 2P)
    level = day[0] / scaled[0]
    np.testing.assert_allclose(day[:-1], level * scaled[:-1], rtol=1e-12)


def test_bad_shapes():
    for shape, shown in [([1.0, 2.0], "one number per position of the period (3), got 2"),
                         ([1.0, -1.0, 1.0], "non-negative"), ([0.0, 0.0, 0.0], "positive sum")]:
        with pytest.raises(ValueError) as info:
            PeriodicPerturber(threshold=1.0, epsilon=1.0, period=3, shape=shape, noise=ZeroNoise())
        assert shown in str(info.value)


def test_noisy_profile_is_the_shrunk_noisy_bin_means_of_the_reference():
    """Re-implements the profile: bin sums on the grid plus the seed's discrete Laplace draws,
    ratios to the overall mean, shrunk by 1 - (noise variance / spread), expanded to positions."""
    from fractions import Fraction

    from dpstream.noise.bits import make_bits
    from dpstream.noise.discrete_laplace_law import discrete_laplace
    from dpstream.thresholds.profile import noisy_profile, profile_epsilon

    rng = np.random.default_rng(7)
    period, bins, phase, theta, eps = 10, 5, 3, 8.0, 0.05
    values = rng.random(997) * 10.0
    out = noisy_profile(values, theta, period=period, bins=bins, epsilon=eps, phase=phase, seed=4)
    g = 2.0**-17  # the largest power of two at most theta / 2^20
    top = round(theta / g)
    scale = Fraction(top) / Fraction(eps)
    assert profile_epsilon(theta, eps) == pytest.approx(eps, rel=1e-9) and profile_epsilon(theta, eps) <= eps
    noise = discrete_laplace(make_bits(4), *_dyadic(scale), bins).astype(float)
    clock_bins = [((i + phase) % period) * bins // period for i in range(values.size)]
    sums, counts = np.zeros(bins), np.zeros(bins)
    for b, v in zip(clock_bins, values, strict=True):
        sums[b] += round(min(v, theta) / g)
        counts[b] += 1
    sums = (sums + noise) * g
    mean = sums.sum() / counts.sum()
    ratio = sums / counts / mean
    keep = max(0.0, 1.0 - np.mean(2.0 * (float(_dyadic_value(scale)) * g) ** 2 / counts**2 / mean**2)
               / np.mean((ratio - 1.0) ** 2))
    shape = np.maximum(1.0 + keep * (ratio - 1.0), 0.0)[np.arange(period) * bins // period]
    np.testing.assert_allclose(out, shape * period / shape.sum(), rtol=1e-9)
    assert out.mean() == pytest.approx(1.0) and np.all(out >= 0)


def _dyadic_value(value):
    """``value`` rounded up to a dyadic rational with a numerator below 2^40 (as the library's scales)."""
    from fractions import Fraction

    shift = max(0, 39 - value.numerator.bit_length() + value.denominator.bit_length())
    return Fraction(math.ceil(value * (1 << shift)), 1 << shift)


def _dyadic(value):
    rounded = _dyadic_value(value)
    return rounded.numerator, rounded.denominator


def test_tops_period_profile_spends_its_share_of_the_threshold_budget():
    stream = np.tile(np.repeat([10.0, 40.0], 24), 200)
    tops = ToPS(epsilon=0.5, upper_bound=100, hold=4800, max_range=4096, period=48, profile_bins=24, seed=3)
    tops.release(stream)
    guarantee = tops.privacy()
    assert guarantee.epsilon <= 0.5
    assert "the prior, profile of the period (0.25 of the budget))" in guarantee.composition
    assert tops._stream.shape[30] > tops._stream.shape[5]  # the high half of the period is predicted higher
    flat = ToPS(epsilon=0.5, upper_bound=100, hold=4800, max_range=4096, period=48, seed=3)  # default: no profile
    flat.release(stream)
    assert np.all(flat._stream.shape == 1.0) and "profile" not in flat.privacy().composition


def test_noisy_profile_is_flat_without_warnings_when_noise_drowns_the_level():
    """All-zero values at a tiny budget: the noisy level is at most zero for some seed, and the profile is then flat
    (no shape to trust) rather than the ratios of a clamped mean, which overflowed."""
    import warnings

    from dpstream.thresholds.profile import noisy_profile

    flat_seen = 0
    for seed in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = noisy_profile(np.zeros(96), 5.0, period=96, bins=24, epsilon=0.01, seed=seed)
        assert out.shape == (96,) and np.all(np.isfinite(out)) and out.mean() == pytest.approx(1.0)
        flat_seen += bool(np.all(out == 1.0))
    assert flat_seen > 0
