"""The hierarchy (``dpstream.hierarchy.tree``): shape, aggregation, noise, consistency, ranges.

Consistency is checked three ways: children sum to parents for random forests; the online
form of Theorem 3.1, make_consistent(T + N) == T + make_consistent(N); and agreement with the
ordinary least-squares estimate solved independently with ``np.linalg.lstsq`` on the design
matrix (for a forest of full trees with equal variances that is what Hay et al.'s two passes
compute).  The exact consistency of integer measurements (``consistent_leaves``) is compared,
as rationals, with Hay et al.'s two passes run in ``fractions.Fraction``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.hierarchy import (
    PlainHierarchy,
    aggregate_levels,
    decomposed_range_sums,
    draw_noise_levels,
    level_sizes,
    make_consistent,
    num_levels,
)
from dpstream.hierarchy.tree import consistency_weights, consistent_leaves, draw_noise_units
from dpstream.noise import ExactNoise, FloatNoise, ZeroNoise

# -- shape -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_range, fanout, expected",
    [
        (2**20, 16, 5),
        (2**20, 2, 20),
        (1000, 16, 3),
        (256, 16, 2),
        (257, 16, 3),
        (16, 16, 1),
        (17, 16, 2),
        (2, 2, 1),
        (3, 2, 2),
        (2, 16, 1),
        (256, 4, 4),
        (10**12, 10, 12),
        (10**12 + 1, 10, 13),
    ],
)
def test_num_levels(max_range, fanout, expected):
    assert num_levels(max_range, fanout) == expected


@settings(max_examples=50, deadline=None)
@given(max_range=st.integers(2, 10**15), fanout=st.integers(2, 40))
def test_num_levels_is_smallest_h_with_capacity(max_range, fanout):
    h = num_levels(max_range, fanout)
    assert h >= 1
    assert fanout**h >= max_range
    assert h == 1 or fanout ** (h - 1) < max_range


@pytest.mark.parametrize(
    "max_range, fanout, error",
    [(1, 16, ValueError), (16, 1, ValueError), (16.0, 16, TypeError), (16, 2.0, TypeError), (0, 2, ValueError)],
)
def test_num_levels_rejects(max_range, fanout, error):
    with pytest.raises(error):
        num_levels(max_range, fanout)


def test_level_sizes_examples():
    assert level_sizes(40, 4, 3) == [48, 12, 3]
    assert level_sizes(48, 4, 3) == [48, 12, 3]
    assert level_sizes(49, 4, 3) == [64, 16, 4]
    assert level_sizes(256, 16, 2) == [256, 16]
    assert level_sizes(7, 3, 1) == [7]
    assert level_sizes(1, 2, 4) == [8, 4, 2, 1]


@settings(max_examples=50, deadline=None)
@given(n_leaves=st.integers(1, 500), fanout=st.integers(2, 7), n_levels=st.integers(1, 4))
def test_level_sizes_properties(n_leaves, fanout, n_levels):
    sizes = level_sizes(n_leaves, fanout, n_levels)
    assert len(sizes) == n_levels
    for k in range(n_levels - 1):
        assert sizes[k] == fanout * sizes[k + 1]
    span = fanout ** (n_levels - 1)  # leaves under one top node
    assert sizes[-1] == -(-n_leaves // span)
    assert n_leaves <= sizes[0] < n_leaves + span


# -- aggregation and noise ---------------------------------------------------------------------


@pytest.mark.parametrize("n_leaves, fanout, n_levels", [(8, 2, 3), (40, 4, 3), (50, 3, 4), (5, 16, 2), (9, 3, 1)])
def test_aggregate_levels_brute_force(n_leaves, fanout, n_levels):
    leaves = np.random.default_rng(0).random(n_leaves)
    levels = aggregate_levels(leaves, fanout, n_levels)
    sizes = level_sizes(n_leaves, fanout, n_levels)
    assert [level.size for level in levels] == sizes
    padded = np.zeros(sizes[0])
    padded[:n_leaves] = leaves
    for k, level in enumerate(levels):
        width = fanout**k
        expected = [padded[j * width : (j + 1) * width].sum() for j in range(sizes[k])]
        np.testing.assert_allclose(level, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(levels[0][:n_leaves], leaves)
    assert np.all(levels[0][n_leaves:] == 0)


def test_draw_noise_levels_order_shapes_and_reproducibility():
    levels = draw_noise_levels(np.random.default_rng(3), 40, 4, 3, 2.5)
    assert [level.size for level in levels] == level_sizes(40, 4, 3)
    rng = np.random.default_rng(3)
    expected = [rng.laplace(0.0, 2.5, size) for size in level_sizes(40, 4, 3)]  # leaves first, then up
    for got, want in zip(levels, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_draw_noise_levels_takes_a_noise_sampler():
    zeros = draw_noise_levels(None, 40, 4, 3, 2.5, noise=ZeroNoise())
    assert [level.size for level in zeros] == level_sizes(40, 4, 3)
    assert all(level.dtype == np.float64 and not level.any() for level in zeros)
    explicit = draw_noise_levels(None, 40, 4, 3, 2.5, noise=FloatNoise(rng=np.random.default_rng(3)))
    default = draw_noise_levels(np.random.default_rng(3), 40, 4, 3, 2.5)
    for got, want in zip(explicit, default, strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="Laplace scale must be a finite number > 0, got 0.0"):
        draw_noise_levels(None, 4, 2, 2, 0.0, noise=ZeroNoise())
    with pytest.raises(NotImplementedError, match="integer grid"):
        draw_noise_levels(None, 4, 2, 2, 1.0, noise=ExactNoise(bits=0))
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        draw_noise_levels(np.random.default_rng(0), 4, 2, 2, 1.0, noise="laplace")


def test_plain_hierarchy_with_zero_noise_answers_exactly():
    rng = np.random.default_rng(8)
    values = rng.integers(0, 10, size=2500).astype(float)  # on the grid: integer sums in grid units, exact
    tree = PlainHierarchy(values, threshold=10, epsilon=1.0, max_range=1000, fanout=4, noise=ZeroNoise())
    assert tree.granularity == 2.0**-17 and tree.spent_epsilon <= 1.0
    starts = rng.integers(0, values.size, 300)
    stops = np.minimum(starts + rng.integers(0, 1500, 300), values.size)
    prefix = np.concatenate(([0.0], np.cumsum(values)))
    np.testing.assert_array_equal(tree.range_sums(starts, stops), prefix[stops] - prefix[starts])


# -- consistency -------------------------------------------------------------------------------


def assert_consistent(levels, fanout, scale=1.0):
    for k in range(1, len(levels)):
        child_sums = levels[k - 1].reshape(-1, fanout).sum(axis=1)
        np.testing.assert_allclose(child_sums, levels[k], rtol=0, atol=1e-10 * scale * fanout**k)


@pytest.mark.parametrize(
    "n_leaves, fanout, n_levels",
    [(8, 2, 3), (16, 2, 4), (27, 3, 3), (40, 4, 3), (20, 3, 3), (32, 16, 2), (5, 5, 2), (64, 4, 4), (6, 2, 1)],
)
def test_make_consistent_equals_least_squares(n_leaves, fanout, n_levels, least_squares):
    rng = np.random.default_rng(n_leaves * 100 + fanout)
    sizes = level_sizes(n_leaves, fanout, n_levels)
    noisy = [rng.laplace(0.0, 3.0, size) + rng.integers(0, 50, size) for size in sizes]
    got = make_consistent(noisy, fanout)
    want = least_squares.levels(noisy, fanout)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


def test_make_consistent_hand_example_b2():
    """Two levels, b = 2, one tree: leaves y1, y2 and root r.  Least squares:
    x1 = y1 + (r - y1 - y2) / 3, x2 = y2 + (r - y1 - y2) / 3, root = x1 + x2."""
    y1, y2, r = 1.0, 2.0, 6.0
    got = make_consistent([np.array([y1, y2]), np.array([r])], 2)
    d = (r - y1 - y2) / 3
    np.testing.assert_allclose(got[0], [y1 + d, y2 + d], rtol=1e-15)
    np.testing.assert_allclose(got[1], [y1 + y2 + 2 * d], rtol=1e-15)


def test_make_consistent_single_level_is_identity_and_inputs_untouched():
    level = np.array([1.0, -2.0, 3.5])
    got = make_consistent([level], 3)
    np.testing.assert_array_equal(got[0], level)
    noisy = [np.arange(8.0), np.arange(4.0), np.arange(2.0)]
    copies = [x.copy() for x in noisy]
    make_consistent(noisy, 2)
    for a, b in zip(noisy, copies, strict=True):
        np.testing.assert_array_equal(a, b)


# Random tree shapes (including padded top trees) and noise seeds for property tests.
RANDOM_TREES = dict(
    n_leaves=st.integers(1, 80),
    fanout=st.integers(2, 6),
    n_levels=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)


@settings(max_examples=50, deadline=None)
@given(**RANDOM_TREES)
def test_consistent_trees_children_sum_to_parent(n_leaves, fanout, n_levels, seed):
    rng = np.random.default_rng(seed)
    sizes = level_sizes(n_leaves, fanout, n_levels)
    scale = 5.0
    noisy = [rng.laplace(0.0, scale, size) for size in sizes]
    consistent = make_consistent(noisy, fanout)
    assert [level.size for level in consistent] == sizes
    assert_consistent(consistent, fanout, scale)
    # The top level keeps its bottom-up estimate; the result is a fixed point.
    again = make_consistent(consistent, fanout)
    for a, b in zip(again, consistent, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * scale * fanout**n_levels)


@settings(max_examples=50, deadline=None)
@given(**RANDOM_TREES)
def test_theorem_3_1_online_equals_offline(n_leaves, fanout, n_levels, seed):
    """make_consistent(T + N) == T + make_consistent(N) for true (consistent) sums T."""
    rng = np.random.default_rng(seed)
    truth = aggregate_levels(rng.integers(0, 100, n_leaves).astype(float), fanout, n_levels)
    noise = draw_noise_levels(rng, n_leaves, fanout, n_levels, 4.0)
    offline = make_consistent([t + n for t, n in zip(truth, noise, strict=True)], fanout)
    online = [t + n for t, n in zip(truth, make_consistent(noise, fanout), strict=True)]
    for a, b in zip(offline, online, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9 * 100 * fanout**n_levels)


def test_consistent_true_sums_are_unchanged():
    truth = aggregate_levels(np.random.default_rng(1).random(50), 3, 4)
    for a, b in zip(make_consistent(truth, 3), truth, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def consistency_leaf_map(sizes, fanout):
    """make_consistent is linear in the noisy nodes; return its leaf map A (leaves x nodes) by
    feeding a unit at each node in turn."""
    total = sum(sizes)
    columns = []
    for unit in range(total):
        vector = np.zeros(total)
        vector[unit] = 1.0
        columns.append(make_consistent(np.split(vector, np.cumsum(sizes)[:-1]), fanout)[0])
    return np.array(columns).T


@pytest.mark.parametrize("n_leaves, fanout, n_levels", [(2, 2, 2), (40, 4, 3), (27, 3, 3), (16, 16, 2)])
def test_consistent_leaf_covariance_is_the_ols_covariance(n_leaves, fanout, n_levels, least_squares):
    """With iid node noise of variance sigma^2, Cov(consistent leaves) = sigma^2 A A^T, which for
    the least-squares estimator is sigma^2 (X^T X)^{-1} -- compared entry by entry.  Each leaf's
    variance factor is <= 1 (Gauss-Markov: the raw leaf is an unbiased linear estimate too);
    for b = 2 with two levels it is exactly 2/3."""
    sizes = level_sizes(n_leaves, fanout, n_levels)
    a = consistency_leaf_map(sizes, fanout)
    covariance = a @ a.T
    np.testing.assert_allclose(covariance, least_squares.leaf_covariance(sizes, fanout), rtol=1e-9, atol=1e-12)
    assert np.all(np.diag(covariance) <= 1 + 1e-12)
    if (n_leaves, fanout, n_levels) == (2, 2, 2):
        np.testing.assert_allclose(np.diag(covariance), [2 / 3, 2 / 3], rtol=1e-12)


# -- range queries -------------------------------------------------------------------------------


def all_ranges(n):
    starts, stops = np.triu_indices(n + 1)
    return starts.astype(np.int64), stops.astype(np.int64)


@pytest.mark.parametrize(
    "n_leaves, fanout, n_levels", [(8, 2, 3), (20, 3, 3), (40, 4, 3), (27, 3, 4), (17, 16, 2), (10, 2, 1)]
)
def test_decomposed_range_sums_all_ranges_brute_force(n_leaves, fanout, n_levels):
    leaves = np.random.default_rng(2).integers(0, 1000, n_leaves).astype(float)
    levels = aggregate_levels(leaves, fanout, n_levels)
    n = levels[0].size
    starts, stops = all_ranges(n)
    got = decomposed_range_sums(levels, fanout, starts, stops)
    prefix = np.concatenate(([0.0], np.cumsum(levels[0])))
    np.testing.assert_array_equal(got, prefix[stops] - prefix[starts])  # integer sums: exact


def test_decomposed_range_sums_random_ranges_larger_tree():
    rng = np.random.default_rng(4)
    fanout, n_levels, n_leaves = 16, 3, 3000
    leaves = rng.integers(0, 50, n_leaves).astype(float)
    levels = aggregate_levels(leaves, fanout, n_levels)
    starts = rng.integers(0, n_leaves, 5000)
    stops = starts + rng.integers(0, n_leaves - starts + 1)
    got = decomposed_range_sums(levels, fanout, starts, stops)
    expected = np.array([leaves[a:b].sum() for a, b in zip(starts, stops, strict=True)])
    np.testing.assert_array_equal(got, expected)


def test_decomposed_range_sums_empty_ranges_are_zero():
    levels = aggregate_levels(np.ones(16), 2, 4)
    got = decomposed_range_sums(levels, 2, np.array([0, 5, 16, 7]), np.array([0, 5, 16, 3]))
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("n_leaves, fanout, n_levels", [(64, 2, 6), (81, 3, 4), (256, 4, 4), (200, 5, 3)])
def test_decomposed_range_sums_node_counts(n_leaves, fanout, n_levels):
    """Put 1 on every node of one level and 0 elsewhere: the answer counts the nodes of that
    level used.  Each non-top level uses at most 2 (b - 1) nodes; the top level at most all of
    its nodes.  And every level's nodes tile the range (correct sums on true data, above)."""
    sizes = level_sizes(n_leaves, fanout, n_levels)
    starts, stops = all_ranges(sizes[0])
    for k in range(n_levels):
        indicator = [np.zeros(size) for size in sizes]
        indicator[k][:] = 1.0
        used = decomposed_range_sums(indicator, fanout, starts, stops)
        assert np.all(used >= 0)
        limit = 2 * (fanout - 1) if k < n_levels - 1 else sizes[-1]
        assert used.max() <= limit
    # The bound 2 (b - 1) is attained at the lowest level by some range (it is tight).
    indicator = [np.zeros(size) for size in sizes]
    indicator[0][:] = 1.0
    assert decomposed_range_sums(indicator, fanout, starts, stops).max() == 2 * (fanout - 1)


def test_decomposed_range_sums_on_noisy_levels_adds_each_used_nodes_noise_once():
    """With levels = truth + noise, the answer is the true sum plus the noise of the used nodes,
    i.e. the same linear map applied to the noise alone."""
    rng = np.random.default_rng(5)
    truth = aggregate_levels(rng.random(60), 4, 3)
    noise = draw_noise_levels(rng, 60, 4, 3, 1.0)
    starts, stops = all_ranges(truth[0].size)
    noisy = [t + n for t, n in zip(truth, noise, strict=True)]
    np.testing.assert_allclose(
        decomposed_range_sums(noisy, 4, starts, stops),
        decomposed_range_sums(truth, 4, starts, stops) + decomposed_range_sums(noise, 4, starts, stops),
        rtol=1e-10,
        atol=1e-10,
    )


# -- exact consistency of integer measurements --------------------------------------------------


def fraction_two_passes(levels, fanout):
    """Hay et al.'s two passes (Eq. 10-11) in exact rational arithmetic, leaves only."""
    from fractions import Fraction

    bottom_up = [[Fraction(int(x)) for x in levels[0]]]
    for k in range(1, len(levels)):
        height = k + 1
        b_l, b_l1 = fanout**height, fanout ** (height - 1)
        below = bottom_up[-1]
        bottom_up.append([
            ((b_l - b_l1) * int(levels[k][j]) + (b_l1 - 1) * sum(below[j * fanout : (j + 1) * fanout])) / (b_l - 1)
            for j in range(len(levels[k]))
        ])
    result = bottom_up[-1]
    for k in range(len(levels) - 2, -1, -1):
        children = bottom_up[k]
        result = [
            children[i] + (result[i // fanout] - sum(children[(i // fanout) * fanout : (i // fanout + 1) * fanout]))
            / fanout
            for i in range(len(children))
        ]
    return result


@settings(max_examples=40, deadline=None)
@given(**RANDOM_TREES)
def test_consistent_leaves_are_exactly_the_least_squares_rationals(n_leaves, fanout, n_levels, seed):
    """integer + remainder / q equals, as a rational, the exact two-pass estimate; 0 <= remainder < q."""
    rng = np.random.default_rng(seed)
    levels = [rng.integers(-10**6, 10**6, size) for size in level_sizes(n_leaves, fanout, n_levels)]
    leaves = consistent_leaves(levels, fanout)
    want = fraction_two_passes(levels, fanout)
    assert [leaves.exact(j) for j in range(len(want))] == want
    assert np.all((np.asarray(leaves.remainder) >= 0) & (np.asarray(leaves.remainder) < leaves.denominator))
    assert leaves.integer.dtype == np.int64
    np.testing.assert_allclose(leaves.integer + leaves.fraction(), make_consistent(
        [level.astype(float) for level in levels], fanout)[0], rtol=1e-12, atol=1e-6)


def test_consistent_leaves_with_huge_measurements_and_denominators_stay_exact():
    """Measurements near 2^50 take the Python-int path; b = 2 with 12 levels has q ~ 2^49, with 20
    levels q ~ 2^132 (the fraction is then divided in Python ints, correctly rounded)."""
    rng = np.random.default_rng(4)
    levels = [rng.integers(-(2**50), 2**50, size) for size in level_sizes(64, 4, 3)]
    leaves = consistent_leaves(levels, 4)
    assert [leaves.exact(j) for j in range(64)] == fraction_two_passes(levels, 4)
    wide = [rng.integers(-1000, 1000, size) for size in level_sizes(2**19, 2, 20)]
    leaves = consistent_leaves(wide, 2)
    assert leaves.denominator.bit_length() > 64
    from fractions import Fraction

    for j in (0, 1, 12345, 2**19 - 1):
        assert float(leaves.fraction()[j]) == float(Fraction(int(leaves.remainder[j]), leaves.denominator))


def test_consistency_weights_are_the_closed_form():
    """w_m = -(b - 1)^2 / ((b^m - 1)(b^(m+1) - 1)) over their least common denominator."""
    from fractions import Fraction

    for fanout, n_levels in [(2, 2), (2, 6), (4, 3), (16, 5), (3, 4)]:
        q, alpha = consistency_weights(fanout, n_levels)
        for m in range(1, n_levels):
            assert Fraction(alpha[m], q) == Fraction(-((fanout - 1) ** 2), (fanout**m - 1) * (fanout ** (m + 1) - 1))
    assert consistency_weights(16, 1) == (1, (0,))
    assert consistency_weights(16, 5)[0] == 83378279985  # the default hierarchy at s = 0: q < 2^37


def test_draw_noise_units_is_one_request_split_leaves_first():
    from fractions import Fraction

    from dpstream.noise.source import NoiseSource

    levels = draw_noise_units(NoiseSource(seed=3).sampler(), 40, 4, 3, Fraction(5, 2))
    assert [level.size for level in levels] == level_sizes(40, 4, 3)
    assert all(level.dtype == np.int64 for level in levels)
    whole = NoiseSource(seed=3).sampler().laplace_units(Fraction(5, 2), sum(level_sizes(40, 4, 3)))
    np.testing.assert_array_equal(np.concatenate(levels), whole)
