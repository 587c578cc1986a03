"""The perturber (``dpstream.release.perturber``): Eq. 7, block semantics, grid, noise, streaming.

The central check re-implements the release independently (``reference_release``): values are
rounded to the default grid (the largest power of two at most theta / 2^20, computed here with
``log2``), theta rounded up to it, and the scale ``theta_units (h - s) / eps`` rounded up to a
multiple of ``2^-k`` (the largest ``k <= 30`` with a numerator at most 2^40); the integer node
noise of each chunk comes from the library's exact sampler, one request per chunk, leaves
first; the consistent leaf noise is the *least-squares* fit computed with ``np.linalg.lstsq``
(not the library's exact consistency); each block's estimate is its true sum plus that noise;
inside a block every value but the last is the smoother's prediction (Appendix D, the reference
in conftest) and the last makes the block sum to the estimate.  The float path (``FloatNoise``)
is checked against the same reference with numpy's float Laplace and no grid.

Statistical checks use the exact covariance of the least-squares leaf noise,
var (X^T X)^{-1} with var the discrete Laplace variance, so their bounds come from the math,
not from a run.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from dpstream import HierarchicalPerturber
from dpstream.hierarchy import level_sizes
from dpstream.hierarchy.tree import consistent_leaves, draw_noise_units
from dpstream.noise import ExactNoise, FloatNoise, KeyedBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.noise.source import NoiseSource
from dpstream.privacy import EVENT_LEVEL
from dpstream.release import optimal_smoothed_levels

# -- Eq. 7 ---------------------------------------------------------------------------------------


def levels_of(max_range: int, fanout: int) -> int:
    """h = ceil(log_b r) by repeated multiplication (independent of num_levels)."""
    h = 1
    while fanout**h < max_range:
        h += 1
    return h


def eq7(s: int, epsilon: float, max_range: int, fanout: int, theta: float) -> float:
    """(b - 1)(log_b r - s)^3 2 theta^2 / eps^2 + (b^(2s) / 4)(theta^2 / 9), as printed."""
    log_b_r = math.log(max_range) / math.log(fanout)
    return (fanout - 1) * (log_b_r - s) ** 3 * 2 * theta**2 / epsilon**2 + fanout ** (2 * s) / 4 * theta**2 / 9


EQ7_CASES = [(2**20, 16), (1000, 16), (256, 4), (2**10, 2), (5000, 10), (2**16, 16)]
EPSILONS = np.geomspace(1e-3, 20.0, 60)


def integer_argmin_eq7(epsilon, max_range, fanout, theta=1.0):
    return min(range(levels_of(max_range, fanout)), key=lambda s: eq7(s, float(epsilon), max_range, fanout, theta))


def continuous_argmin_eq7(epsilon, max_range, fanout):
    """Minimizer of Eq. 7 over real s in [0, h - 1] (convex there: (log_b r - s)^3 with
    s <= h - 1 < log_b r, plus an exponential), by bounded Brent to 1e-10."""
    h = levels_of(max_range, fanout)
    result = optimize.minimize_scalar(
        lambda s: eq7(s, float(epsilon), max_range, fanout, 1.0), bounds=(0.0, h - 1.0), method="bounded",
        options={"xatol": 1e-10},
    )
    return float(result.x)


@pytest.mark.parametrize("max_range, fanout", EQ7_CASES)
def test_optimal_smoothed_levels_is_rounded_continuous_argmin_of_eq7(max_range, fanout):
    """The documented behaviour: round(argmin over real s in [0, h-1]).  Epsilons whose real
    minimizer lies within 0.01 of a rounding boundary are skipped (the code searches a grid of
    step 1/1000).  Either way s is within one level of the integer argmin, theta-free, and
    moves across the epsilon grid."""
    h = levels_of(max_range, fanout)
    seen, checked = set(), 0
    for epsilon in EPSILONS:
        # theta is a common factor of Eq. 7: the argmin does not depend on it
        assert integer_argmin_eq7(epsilon, max_range, fanout) == integer_argmin_eq7(epsilon, max_range, fanout, 37.0)
        got = optimal_smoothed_levels(float(epsilon), max_range, fanout)
        assert 0 <= got < h
        assert abs(got - integer_argmin_eq7(epsilon, max_range, fanout)) <= 1
        s_star = continuous_argmin_eq7(epsilon, max_range, fanout)
        if abs(s_star - math.floor(s_star) - 0.5) > 0.01:
            assert got == round(s_star)
            checked += 1
        seen.add(got)
    assert checked >= 50
    if h > 2:
        assert len(seen) >= 2


def test_optimal_smoothed_levels_edge_cases_and_errors():
    assert optimal_smoothed_levels(1.0, 16, 16) == 0  # one level: nothing to smooth
    assert optimal_smoothed_levels(1e-9, 2**20, 16) == 4  # tiny eps: smooth all but the top level
    assert optimal_smoothed_levels(1e9, 2**20, 16) == 0  # huge eps: measure everything
    with pytest.raises(ValueError, match="epsilon"):
        optimal_smoothed_levels(0.0, 256, 16)
    with pytest.raises(ValueError, match="max_range"):
        optimal_smoothed_levels(1.0, 1, 16)


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_range, fanout, s, epsilon, threshold",
    [
        (256, 16, 1, 1.0, 10.0),
        (256, 4, 2, 0.5, 3.0),
        (1000, 16, 2, 2.0, 7.5),
        (1000, 16, 0, 1.0, 1.0),
        (2**20, 16, None, 1.0, 21.0),
    ],
)
def test_derived_attributes(max_range, fanout, s, epsilon, threshold):
    p = HierarchicalPerturber(
        threshold=threshold, epsilon=epsilon, max_range=max_range, fanout=fanout, smoothed_levels=s, seed=0
    )
    h = levels_of(max_range, fanout)
    s = optimal_smoothed_levels(epsilon, max_range, fanout) if s is None else s
    assert p.levels == h and p.smoothed_levels == s
    assert p.block_size == fanout**s
    assert p.measured_levels == h - s
    g = default_grid(threshold)
    assert p.granularity == g and p.threshold_units == math.ceil(threshold / g) and p.threshold == p.threshold_units * g
    assert p.noise_scale_units == rounded_scale(Fraction(p.threshold_units * (h - s)) / Fraction(epsilon))
    assert p.noise_scale == pytest.approx(threshold * (h - s) / epsilon, rel=1e-6)
    assert p.blocks_per_chunk == math.ceil(max_range / fanout**s)
    assert p.state.released == 0 and p.state.noise is None
    assert p.smoother.predict(p.state.smoother_state) == p.threshold / 2  # prior u_0 / b^s = theta / 2


def default_grid(bound: float) -> float:
    """The largest power of two at most bound / 2^20, from log2 (independent of the library)."""
    return 2.0 ** math.floor(math.log2(bound / 2**20))


def rounded_scale(exact: Fraction) -> Fraction:
    """ceil(exact 2^k) / 2^k for the largest k <= 30 whose numerator is at most 2^40."""
    k = 30
    while math.ceil(exact * 2**k) > 2**40:
        k -= 1
    return Fraction(math.ceil(exact * 2**k), 2**k)


def test_threshold_and_scale_are_rounded_up_and_the_budget_recomputed():
    """theta = 10.3 on the grid 2^-17 is 1350042 steps, rounded up (10.3 * 2^17 = 1350041.6); the
    scale of 3 levels at eps = 0.7 is rounded up to a multiple of 2^-k, and the stated budget is
    3 theta_units / scale, never above 0.7."""
    p = HierarchicalPerturber(threshold=10.3, epsilon=0.7, max_range=256, fanout=4, smoothed_levels=1, seed=0)
    assert p.granularity == 2.0**-17 and p.threshold_units == 1350042
    assert p.threshold == 1350042 * 2.0**-17 >= 10.3
    exact = Fraction(3 * 1350042) / Fraction(0.7)
    assert p.noise_scale_units >= exact and p.noise_scale_units - exact <= Fraction(1, 2**17)
    assert p.noise_scale_units.denominator & (p.noise_scale_units.denominator - 1) == 0  # a power of two
    assert p.noise_scale_units.numerator <= 2**40
    spent = p.privacy().epsilon
    assert Fraction(spent) >= Fraction(3 * 1350042) / p.noise_scale_units  # rounded up, never understated
    assert 0.7 * (1 - 1e-9) <= spent <= 0.7 == p.epsilon
    assert p.spent_epsilon == spent


@pytest.mark.parametrize(
    "granularity, error, shown",
    [
        (0.0, ValueError, "granularity must be a finite number > 0, got 0.0"),
        (-1.0, ValueError, "got -1.0"),
        (math.nan, ValueError, "got nan"),
        (math.inf, ValueError, "got inf"),
        (20.0, ValueError, "at most the bound 10"),
        ("0.5", TypeError, "granularity must be a real number"),
        (True, TypeError, "granularity must be a real number"),
        (1e-12, ValueError, "above the 2^40 the exact sampler allows"),
    ],
)
def test_bad_granularity_is_one_clear_error(granularity, error, shown):
    with pytest.raises(error, match=shown.replace("^", r"\^")):
        HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, fanout=4, granularity=granularity, seed=0)


def test_granularity_belongs_to_the_exact_path_only():
    with pytest.raises(ValueError, match="granularity applies to exact noise only"):
        HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, granularity=0.5,
                              noise=FloatNoise(rng=np.random.default_rng(0)))


def test_privacy_statement():
    p = HierarchicalPerturber(threshold=10, epsilon=0.7, max_range=256, fanout=4, smoothed_levels=1, seed=0)
    guarantee = p.privacy()
    assert 0.7 * (1 - 1e-9) <= guarantee.epsilon <= 0.7 and guarantee.delta == 0.0
    assert guarantee.neighbours is EVENT_LEVEL
    assert "h-s = 3" in guarantee.composition
    assert f"{p.noise_scale:g}" in guarantee.composition
    assert str(guarantee).startswith("0.7-DP")
    assert guarantee.noise == "exact discrete Laplace in grid units, seeded PCG64 bits (seed 0: replayable, NOT secret)"
    float_path = HierarchicalPerturber(threshold=10, epsilon=0.7, max_range=256, fanout=4, smoothed_levels=1,
                                       noise=FloatNoise(rng=np.random.default_rng(0))).privacy()
    assert float_path.epsilon == 0.7 and "NOT for publication" in float_path.noise


@pytest.mark.parametrize(
    "kwargs, error, shown",
    [
        (dict(threshold=0), ValueError, "threshold"),
        (dict(threshold="1"), TypeError, "threshold"),
        (dict(epsilon=-1.0), ValueError, "epsilon"),
        (dict(epsilon=math.nan), ValueError, "nan"),
        (dict(max_range=1), ValueError, "max_range"),
        (dict(fanout=1), ValueError, "fanout"),
        (dict(smoothed_levels=2), ValueError, "smoothed_levels"),
        (dict(smoothed_levels=5), ValueError, "got 5"),
        (dict(smoothed_levels=-1), ValueError, "smoothed_levels"),
        (dict(smoothed_levels=1.0), TypeError, "smoothed_levels"),
        (dict(smoother="foo"), ValueError, "'foo'"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed="x"), TypeError, "seed"),
        (dict(noise=ZeroNoise()), ValueError, "give at most one of seed, noise and key, got seed and noise"),
        (dict(key=bytes(32)), ValueError, "got seed and key"),
        (dict(seed=None, key=b"short"), ValueError, "key must be at least 16 bytes"),
        (dict(seed=None, key="a string key of many chars"), TypeError, "key must be bytes"),
    ],
)
def test_bad_parameters(kwargs, error, shown):
    base = dict(threshold=10.0, epsilon=1.0, max_range=256, fanout=16, smoothed_levels=1, seed=0)  # h = 2
    base.update(kwargs)
    with pytest.raises(error) as info:
        HierarchicalPerturber(**base)
    assert shown in str(info.value)


# -- the reference release -------------------------------------------------------------------------


def reference_release(
    values, *, threshold, epsilon, max_range, fanout, s, smoother, params, seed, least_squares, reference_smoother,
    zero=False, float_noise=False,
):
    """Independent re-implementation of the perturber + smoother (see the module docstring).

    ``float_noise`` re-implements the float path instead: no grid, numpy's float Laplace of
    scale theta (h - s) / eps from ``default_rng(seed)``, level by level.
    """
    values = np.asarray(values, dtype=np.float64)
    h = levels_of(max_range, fanout)
    bs, measured = fanout**s, h - s
    blocks = math.ceil(max_range / bs)
    top = math.ceil(blocks / fanout ** (measured - 1))
    sizes = [top * fanout ** (measured - 1 - k) for k in range(measured)]
    if float_noise:
        g, theta, units = 1.0, threshold, values
        rng = np.random.default_rng(seed)
        scale = threshold * measured / epsilon
    else:
        g = default_grid(threshold)
        theta_units = math.ceil(Fraction(threshold) / Fraction(g))
        theta, units = theta_units * g, np.rint(values / g)
        scale = rounded_scale(Fraction(theta_units * measured) / Fraction(epsilon))
        sampler = NoiseSource(seed=seed).sampler()
    spans, estimates = [], []  # (start, stop, complete?) per block, in stream order
    for c in range(math.ceil(values.size / max_range)):
        if float_noise:
            noise = [rng.laplace(0.0, scale, size) for size in sizes]
        else:
            draws = sampler.laplace_units(scale, sum(sizes)).astype(np.float64)
            noise = np.split(draws, np.cumsum(sizes)[:-1])
        leaf_noise = np.zeros(blocks) if zero else least_squares.levels(noise, fanout)[0][:blocks]
        for k in range(blocks):
            start = c * max_range + k * bs
            stop = c * max_range + min((k + 1) * bs, max_range)
            if start >= values.size:
                break
            complete = stop <= values.size
            spans.append((start, min(stop, values.size), complete))
            if complete:
                estimates.append((units[start:stop].sum() + leaf_noise[k]) * g)
    means = [u / (stop - start) for u, (start, stop, _) in zip(estimates, spans, strict=False)]
    after = reference_smoother(smoother, theta / 2, means, **params)
    out = np.empty(values.size)
    for k, (start, stop, complete) in enumerate(spans):
        prediction = theta / 2 if k == 0 else after[k - 1]
        out[start:stop] = prediction
        if complete:
            out[stop - 1] = estimates[k] - (stop - start - 1) * prediction if bs > 1 else estimates[k]
    return out


CONFIGS = [  # (max_range, fanout, s); 1000 is not a power of 16 (partial last block)
    (256, 4, 0),
    (256, 4, 1),
    (256, 4, 2),
    (1000, 16, 1),
    (1000, 16, 2),
    (256, 16, 1),
]


@pytest.mark.parametrize("max_range, fanout, s", CONFIGS)
def test_release_matches_independent_reference(max_range, fanout, s, smoother_case, least_squares, reference_smoother):
    name, params = smoother_case
    theta, epsilon, seed = 20.0, 0.8, 1234
    n = int(2.6 * max_range) + 3  # several chunks, ending inside a block
    values = np.random.default_rng(9).integers(0, 21, n).astype(float)
    p = HierarchicalPerturber(
        threshold=theta, epsilon=epsilon, max_range=max_range, fanout=fanout, smoothed_levels=s,
        smoother=make(name, params), seed=seed,
    )
    got = p.release(values)
    want = reference_release(
        values, threshold=theta, epsilon=epsilon, max_range=max_range, fanout=fanout, s=s, smoother=name,
        params=params, seed=seed, least_squares=least_squares, reference_smoother=reference_smoother,
    )
    scale = theta * (levels_of(max_range, fanout) - s) / epsilon
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale * fanout**s)


@pytest.mark.parametrize("max_range, fanout, s", [(256, 4, 0), (1000, 16, 1), (256, 16, 1)])
def test_float_path_matches_the_float_reference(max_range, fanout, s, least_squares, reference_smoother):
    """noise=FloatNoise(rng) is the float algorithm the studies use: numpy's float Laplace on
    every node (the generator's order, level by level), no grid."""
    theta, epsilon, seed = 20.0, 0.8, 1234
    values = np.random.default_rng(9).random(int(2.6 * max_range) + 3) * theta
    p = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=max_range, fanout=fanout,
                              smoothed_levels=s, noise=FloatNoise(rng=np.random.default_rng(seed)))
    assert p.granularity is None and p.threshold == theta and not p.exact
    want = reference_release(
        values, threshold=theta, epsilon=epsilon, max_range=max_range, fanout=fanout, s=s, smoother="recent",
        params={}, seed=seed, least_squares=least_squares, reference_smoother=reference_smoother, float_noise=True,
    )
    scale = theta * (levels_of(max_range, fanout) - s) / epsilon
    np.testing.assert_allclose(p.release(values), want, rtol=1e-9, atol=1e-9 * scale * fanout**s)


def make(name, params):
    from dpstream.smoothers import make_smoother

    return make_smoother(name, **params)


@pytest.mark.parametrize("max_range, fanout, s", CONFIGS)
def test_zero_noise_blocks_sum_to_true_block_sums(
    max_range, fanout, s, smoother_case, least_squares, reference_smoother
):
    name, params = smoother_case
    theta = 50.0
    values = np.random.default_rng(3).random(3 * max_range) * theta
    p = HierarchicalPerturber(
        threshold=theta, epsilon=1.0, max_range=max_range, fanout=fanout, smoothed_levels=s,
        smoother=make(name, params), noise=ZeroNoise(),
    )
    out = p.release(values)
    bs = fanout**s
    rounded = np.rint(values / default_grid(theta)) * default_grid(theta)  # to the nearest multiple of g
    assert np.max(np.abs(rounded - values)) <= default_grid(theta) / 2
    for c in range(3):
        chunk_out, chunk_in = out[c * max_range : (c + 1) * max_range], rounded[c * max_range : (c + 1) * max_range]
        for start in range(0, max_range, bs):
            want_sum = chunk_in[start : start + bs].sum()
            assert chunk_out[start : start + bs].sum() == pytest.approx(want_sum, rel=1e-12, abs=1e-9)
    want = reference_release(
        values, threshold=theta, epsilon=1.0, max_range=max_range, fanout=fanout, s=s, smoother=name, params=params,
        seed=1, least_squares=least_squares, reference_smoother=reference_smoother, zero=True,
    )
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-9)


def test_zero_noise_without_smoothing_releases_the_values_exactly():
    values = np.random.default_rng(4).integers(0, 10, 700).astype(float)  # on the grid: exact
    args = dict(threshold=10, epsilon=1.0, max_range=256, fanout=4, smoothed_levels=0)
    p = HierarchicalPerturber(**args, noise=ZeroNoise())
    np.testing.assert_array_equal(p.release(values), values)
    q = HierarchicalPerturber(**args, noise=ZeroNoise())
    np.testing.assert_array_equal([q.release_one(v) for v in values], values)


def test_noise_sampler_parameter():
    """The default is exact noise on the seed's bits, drawn in blocks (NoiseSource): passing that
    source's sampler changes nothing.  FloatNoise takes the float path; anything else is refused."""
    args = dict(threshold=10, epsilon=0.5, max_range=256, fanout=4, smoothed_levels=1)
    values = np.random.default_rng(6).random(600) * 10
    default = HierarchicalPerturber(**args, seed=12).release(values)
    explicit = HierarchicalPerturber(**args, noise=NoiseSource(seed=12).sampler()).release(values)
    np.testing.assert_array_equal(default, explicit)
    unpooled = HierarchicalPerturber(**args, noise=ExactNoise(bits=12)).release(values)  # pooled all the same
    np.testing.assert_array_equal(default, unpooled)
    float_path = HierarchicalPerturber(**args, noise=FloatNoise(rng=np.random.default_rng(12))).release(values)
    assert not np.array_equal(default, float_path)
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        HierarchicalPerturber(**args, noise="laplace")


def test_released_values_are_a_function_of_the_measurements():
    """The point of exact consistency: two streams whose noisy node measurements coincide release
    the same floats, bit for bit.  Stream B has theta at position 0 where A has 0; B's noise is A's
    minus theta_units on every ancestor of leaf 0, so every measurement T + N is the same."""

    class Given:
        def __init__(self, draws):
            self.draws = draws

        def laplace_units(self, scale, size):
            return self.draws.copy()

        def laplace(self, scale, size):  # pragma: no cover - never called on the exact path
            raise NotImplementedError

    r, b = 64, 4
    sizes = level_sizes(r, b, 3)
    args = dict(threshold=5.0, epsilon=0.3, max_range=r, fanout=b, smoothed_levels=0)
    theta_units = HierarchicalPerturber(**args, noise=ZeroNoise()).threshold_units
    noise_a = NoiseSource(seed=3).sampler().laplace_units(Fraction(7919, 3), sum(sizes))
    shift = np.zeros(sum(sizes), dtype=np.int64)
    shift[np.cumsum([0, *sizes[:-1]])] = theta_units  # node 0 of every level is an ancestor of leaf 0
    values = np.random.default_rng(1).random(r) * 5.0
    a, b_values = values.copy(), values.copy()
    a[0], b_values[0] = 0.0, 5.0
    out_a = HierarchicalPerturber(**args, noise=Given(noise_a)).release(a)
    out_b = HierarchicalPerturber(**args, noise=Given(noise_a - shift)).release(b_values)
    assert np.array_equal(out_a, out_b)


def test_block_sums_equal_true_sums_plus_the_chunks_consistent_noise(least_squares):
    """Capture the noise mid-chunk: every block of the chunk sums to its true (rounded) sum plus
    that block's consistent noise, which is the least-squares fit of the chunk's node noise (the
    exact sampler's one request of 64 + 16 + 4 draws, leaves first)."""
    theta, epsilon, r, b, s, seed = 10.0, 0.5, 256, 4, 1, 21
    p = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=r, fanout=b, smoothed_levels=s, seed=seed)
    values = np.random.default_rng(5).random(r) * theta
    first = p.release(values[:100])
    assert p.state.noise is not None and p.state.noise.shape == (64,) and p.state.noise.dtype == np.int64
    noise = p.state.noise + p.state.noise_fraction  # integer part + remainder / q, in grid units
    assert np.all((p.state.noise_fraction >= 0) & (p.state.noise_fraction < 1))
    second = p.release(values[100:])
    assert p.state.noise is None  # the chunk is over
    out = np.concatenate([first, second])
    g = p.granularity
    block_sums = out.reshape(64, 4).sum(axis=1)
    true_sums = np.rint(values / g).reshape(64, 4).sum(axis=1)
    np.testing.assert_allclose(block_sums, (true_sums + noise) * g, rtol=1e-12, atol=1e-9)
    draws = NoiseSource(seed=seed).sampler().laplace_units(p.noise_scale_units, 64 + 16 + 4).astype(float)
    node_noise = np.split(draws, [64, 80])
    np.testing.assert_allclose(noise, least_squares.levels(node_noise, b)[0], rtol=1e-10, atol=1e-6)


def test_keyed_noise_depends_on_the_key_and_the_chunk_only():
    """With key=, chunk c's noise is drawn from KeyedBits(key, ("tops", c)): the same whatever the
    data or the history, so a restart recomputes it; the same key replays the release."""
    key = bytes(range(32))
    args = dict(threshold=10.0, epsilon=0.5, max_range=256, fanout=4, smoothed_levels=0)
    first = np.random.default_rng(1).random(3 * 256) * 10
    other = first.copy()
    other[:256] = np.random.default_rng(2).random(256) * 10  # a different chunk 0
    a = HierarchicalPerturber(**args, key=key)
    out_a = a.release(first)
    out_b = HierarchicalPerturber(**args, key=key).release(other)
    assert np.array_equal(out_a, HierarchicalPerturber(**args, key=key).release(first))
    g = a.granularity
    noise_a, noise_b = out_a - np.rint(first / g) * g, out_b - np.rint(other / g) * g
    np.testing.assert_allclose(noise_a, noise_b, rtol=0, atol=1e-9)  # the same noise whatever the data
    for c in range(3):
        sampler = ExactNoise(bits=KeyedBits(key=key, identity=("tops", c)))
        leaves = consistent_leaves(draw_noise_units(sampler, 256, 4, 4, a.noise_scale_units), 4)
        expected = (leaves.integer + leaves.fraction()) * g
        np.testing.assert_allclose(noise_a[c * 256 : (c + 1) * 256], expected, rtol=0, atol=1e-9)
    assert not np.array_equal(out_a, HierarchicalPerturber(**args, key=bytes(32)).release(first))
    assert "keyed ChaCha20" in a.privacy().noise


# -- unbiasedness and variance -----------------------------------------------------------------


def bonferroni_z(tests: int, alpha: float = 1e-9) -> float:
    return float(stats.norm.isf(alpha / (2 * tests)))


def test_single_values_unbiased_with_exact_variance_no_smoothing(least_squares):
    """s = 0, r = 256, b = 4 (h = 4 levels), many chunks of a fixed pattern.

    Each position's error is its consistent leaf noise: mean 0, variance
    2 beta^2 [(X^T X)^{-1}]_jj.  Per position, |mean error| <= z sqrt(var / n) with z a
    Bonferroni-corrected normal quantile (alpha = 1e-9 over 256 positions).  The chunk's total
    squared error Q has mean 2 beta^2 tr((X^T X)^{-1}); checked with a 6-sigma CLT bound from
    Q's sample sd.  A bias of 1 (e.g. a dropped value) or a wrong scale cannot pass.
    """
    r, b, theta, epsilon, n_chunks = 256, 4, 10.0, 20.0, 2000
    pattern = np.random.default_rng(6).random(r) * theta
    p = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=r, fanout=b, smoothed_levels=0, seed=7)
    beta = p.noise_scale
    assert beta == pytest.approx(theta * 4 / epsilon)
    truth = np.tile(np.rint(pattern / p.granularity) * p.granularity, n_chunks)  # rounded to the grid
    errors = (p.release(np.tile(pattern, n_chunks)) - truth).reshape(n_chunks, r)
    node_variance = laplace_units_variance(p.noise_scale_units) * p.granularity**2  # discrete Laplace
    assert node_variance == pytest.approx(2 * beta**2, rel=1e-6)
    variance = node_variance * np.diag(least_squares.leaf_covariance([256, 64, 16, 4], b))
    assert np.all(variance < 2 * beta**2)  # consistency helps every leaf
    z = bonferroni_z(r)
    assert np.all(np.abs(errors.mean(axis=0)) <= z * np.sqrt(variance / n_chunks))
    q = (errors**2).sum(axis=1)
    assert abs(q.mean() - variance.sum()) <= 6 * q.std(ddof=1) / math.sqrt(n_chunks)
    # the check resolves biases well below 1: the largest allowed |mean error| is < 0.5
    assert z * math.sqrt(variance.max() / n_chunks) < 0.5


@pytest.mark.parametrize("r, b, s", [(256, 4, 1), (256, 16, 1), (1000, 16, 2)])
def test_block_and_range_sums_unbiased_with_smoothing(r, b, s, least_squares):
    """With smoothing, whole blocks and unions of whole blocks are unbiased (their error is the
    blocks' consistent noise), whatever the smoother predicts inside them.  Bounds as above,
    from the exact covariance 2 beta^2 (X^T X)^{-1} over the measured levels."""
    theta, epsilon, n_chunks = 10.0, 10.0, 1500
    pattern = np.random.default_rng(8).random(r) * theta
    p = HierarchicalPerturber(
        threshold=theta, epsilon=epsilon, max_range=r, fanout=b, smoothed_levels=s, smoother="exponential", seed=9
    )
    bs, blocks = b**s, p.blocks_per_chunk
    out = p.release(np.tile(pattern, n_chunks)).reshape(n_chunks, r)
    padded = np.zeros((n_chunks, blocks * bs))
    padded[:, :r] = out - np.rint(pattern / p.granularity) * p.granularity
    block_errors = padded.reshape(n_chunks, blocks, bs).sum(axis=2)
    measured = p.measured_levels
    top = math.ceil(blocks / b ** (measured - 1))
    sizes = [top * b ** (measured - 1 - k) for k in range(measured)]
    node_variance = laplace_units_variance(p.noise_scale_units) * p.granularity**2
    covariance = node_variance * least_squares.leaf_covariance(sizes, b)[:blocks, :blocks]
    # random unions of consecutive whole blocks
    rng = np.random.default_rng(10)
    starts = rng.integers(0, blocks, 40)
    stops = starts + 1 + rng.integers(0, blocks - starts)
    selectors = np.zeros((40, blocks))
    for i, (a, z_) in enumerate(zip(starts, stops, strict=True)):
        selectors[i, a:z_] = 1.0
    range_errors = block_errors @ selectors.T
    range_variance = np.einsum("ij,jk,ik->i", selectors, covariance, selectors)
    z = bonferroni_z(blocks + 40)
    assert np.all(np.abs(block_errors.mean(axis=0)) <= z * np.sqrt(np.diag(covariance) / n_chunks))
    assert np.all(np.abs(range_errors.mean(axis=0)) <= z * np.sqrt(range_variance / n_chunks))
    # the block noise has the predicted total variance (6-sigma CLT on per-chunk sums of squares)
    q = (block_errors**2).sum(axis=1)
    assert abs(q.mean() - np.trace(covariance)) <= 6 * q.std(ddof=1) / math.sqrt(n_chunks)


# -- streaming -----------------------------------------------------------------------------------


def perturber(**kwargs):
    base = dict(threshold=12.0, epsilon=0.9, max_range=1000, fanout=16, smoothed_levels=1, seed=42)
    base.update(kwargs)
    return HierarchicalPerturber(**base)


@pytest.mark.parametrize("s", [0, 1, 2])
def test_batch_equals_release_one_bit_for_bit(s, smoother_case):
    name, params = smoother_case
    values = np.random.default_rng(11).random(3333) * 12.0
    batch = perturber(smoothed_levels=s, smoother=make(name, params)).release(values)
    single = perturber(smoothed_levels=s, smoother=make(name, params))
    streamed = np.array([single.release_one(float(v)) for v in values])
    assert np.array_equal(batch, streamed)


@settings(max_examples=30, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 2600), max_size=10),
    s=st.integers(0, 2),
    smoother=st.sampled_from(["recent", "mean", "median", "moving_average", "exponential"]),
)
def test_batch_equals_random_pieces(cuts, s, smoother):
    values = np.random.default_rng(12).random(2600) * 12.0
    whole = perturber(smoothed_levels=s, smoother=smoother).release(values)
    p = perturber(smoothed_levels=s, smoother=smoother)
    bounds = [0, *sorted(cuts), values.size]
    pieces = [p.release(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert np.array_equal(whole, np.concatenate(pieces))


def test_state_across_chunks():
    p = perturber(max_range=256, fanout=4, smoothed_levels=1)
    p.release(np.ones(100))
    noise = p.state.noise
    assert p.state.released == 100 and noise is not None
    p.release(np.ones(50))
    assert p.state.noise is noise  # drawn once per chunk, kept until it ends
    p.release(np.ones(106))
    assert p.state.released == 256 and p.state.noise is None
    assert p.state.chunk_total == 0.0 and p.state.block_start_total == 0.0
    p.release_one(1.0)
    assert p.state.noise is not None and p.state.noise is not noise
    assert p.release(np.empty(0)).shape == (0,)
    assert p.state.released == 257


def test_same_seed_same_output_different_seed_differs_and_generator_is_shared():
    values = np.random.default_rng(13).random(2000) * 12.0
    a = perturber(seed=5).release(values)
    assert np.array_equal(a, perturber(seed=5).release(values))
    assert not np.array_equal(a, perturber(seed=6).release(values))
    generator = np.random.default_rng(5)
    assert np.array_equal(a, perturber(seed=generator).release(values))
    # the perturber advanced the caller's generator (shared, not copied)
    assert not np.array_equal(generator.random(3), np.random.default_rng(5).random(3))


def test_perturber_rejects_values_above_its_threshold():
    """A value above theta would break the guarantee: an error naming position and value."""
    perturber = HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, seed=0)
    perturber.release(np.full(5, 10.0))
    with pytest.raises(ValueError, match=r"position 7 \(0-based\) must be in \[0, 10\], got 11"):
        perturber.release(np.array([1.0, 2.0, 11.0]))
    with pytest.raises(ValueError, match=r"position 5 \(0-based\) must be in \[0, 10\], got -1"):
        perturber.release_one(-1.0)
    with pytest.raises(TypeError, match="position 5 \\(0-based\\) must be a number|must be numbers"):
        perturber.release_one("3")
    assert perturber.state.released == 5


def test_a_granularity_that_is_not_a_power_of_two():
    """g = 0.1: values are rounded to the nearest tenth (computed as rint(v / g), capped at theta's
    units), one value at a time exactly as in a batch; with zero noise and s = 0 the release is the
    rounded values (floats nearest to k / 10)."""
    args = dict(threshold=9.95, epsilon=1.0, max_range=64, fanout=4, smoothed_levels=0, granularity=0.1)
    values = np.random.default_rng(3).random(300) * 9.95
    zero = HierarchicalPerturber(**args, noise=ZeroNoise())
    assert zero.threshold_units == 100 and zero.threshold >= 9.95
    np.testing.assert_allclose(zero.release(values), np.rint(values / 0.1) * 0.1, rtol=0, atol=1e-12)
    batch = HierarchicalPerturber(**args, seed=4).release(values)
    single = HierarchicalPerturber(**args, seed=4)
    assert np.array_equal(batch, [single.release_one(float(v)) for v in values])
