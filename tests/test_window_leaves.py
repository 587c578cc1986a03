"""Leaves of a fraction of the window: with ``query_length`` and no period, the model also scores
hierarchies whose leaves are ``L / k`` values, and ToPS releases with the one it chose."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream import ToPS
from dpstream.hierarchy import num_levels
from dpstream.noise import ZeroNoise
from dpstream.release.periodic import PeriodicPerturber
from dpstream.thresholds.error_model import ErrorModel, QueryLengths
from dpstream.thresholds.model import LEAF_DIVISORS, MIN_LEAF, model_threshold, window_leaves

B, HOLD, R, L = 100.0, 2000, 4096, 96


def cyclic(n, seed=0, period=L):
    """Values with a strong cycle of ``period`` and a level that changes from one cycle to the next."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    level = np.exp(0.3 * rng.standard_normal(n // period + 1))[t // period]
    return np.minimum(np.round(level * (5 + 30 * (np.sin(2 * np.pi * t / period) > 0)) + rng.exponential(3.0, n)), B)


def tops(**kwargs):
    options = dict(epsilon=0.5, upper_bound=B, hold=HOLD, max_range=R, query_length=L, seed=7)
    options.update(kwargs)
    return ToPS(**options)


# -- which leaves are scored -------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 15, 96, 100, 256, 1440, 4096, 86_400])
def test_window_leaves_follow_their_definition(length):
    blocks = {16**s for s in range(num_levels(2**20, 16))}
    want = [length // k for k in LEAF_DIVISORS if length % k == 0]
    want = [leaf for leaf in want if MIN_LEAF <= leaf <= 2**20 and leaf not in blocks]
    assert list(window_leaves(length, max_range=2**20, fanout=16)) == want


# -- the error model of a leaf ------------------------------------------------------------------------


@pytest.mark.parametrize("s", [0, 1, 2])
def test_leaves_of_b_to_the_s_have_the_factors_of_s(s):
    """The same forest described two ways (leaves b^s under h - s levels) has the same factors."""
    model = ErrorModel(epsilon=1.0, max_range=R, fanout=16, queries=QueryLengths.fixed(300))
    assert model.leaf_factors(16**s, model.levels - s) == model.factors(s)


def test_one_level_noise_of_a_window_of_one_leaf_starting_anywhere():
    """A window of one leaf's length starting at offset o = f P of leaf k is released as
    u_k + f (u_k - u_(k-1)) with the Recent smoother: noise factor (1 + f)^2 + f^2, mean 8/3 over f."""
    model = ErrorModel(epsilon=1.0, max_range=2**16, fanout=16, queries=QueryLengths.fixed(1000))
    assert model.leaf_factors(1000, 1)["noise"] == pytest.approx(8.0 / 3.0, rel=5e-3)


def test_leaf_levels_are_those_a_chunk_can_hold():
    model = ErrorModel(epsilon=1.0, max_range=R, fanout=16, queries=QueryLengths.fixed(L))
    assert list(model.leaf_levels(24)) == list(range(1, num_levels(R // 24, 16) + 1))
    assert list(model.leaf_levels(R * 2)) == [1]
    with pytest.raises(ValueError, match="measured_levels"):
        model.leaf_factors(24, 9)


def test_more_noise_makes_longer_leaves_win():
    """With a fixed theta, the noise term grows as 1 / eps^2 and the leaves' other terms do not:
    the least-noise structure (the longest leaf) wins at a small budget, a short one at a large."""
    held = cyclic(HOLD, seed=1)
    leaves = window_leaves(L, max_range=R, fanout=16)
    small = model_threshold(held, epsilon=1.0, stream_epsilon=0.001, upper_bound=B, max_range=R, fanout=16,
                            queries=QueryLengths.fixed(L), levels=(), leaves=leaves, seed=3)
    large = model_threshold(held, epsilon=1.0, stream_epsilon=50.0, upper_bound=B, max_range=R, fanout=16,
                            queries=QueryLengths.fixed(L), levels=(), leaves=leaves, seed=3)
    assert small.leaf == max(leaves) and large.leaf == min(leaves)
    assert small.smoothed_levels is None and small.measured_levels in ErrorModel(
        epsilon=1.0, max_range=R, fanout=16, queries=QueryLengths.fixed(L)).leaf_levels(small.leaf)


# -- ToPS with leaves ----------------------------------------------------------------------------------


def test_zero_noise_every_leaf_sums_to_its_truncated_true_sum():
    t = tops(noise=ZeroNoise(), seed=None)
    values = cyclic(HOLD + 5 * R + 77)
    released = t.release(values)
    assert t.leaf in window_leaves(L, max_range=R, fanout=16) and isinstance(t._stream, PeriodicPerturber)
    truncated = np.minimum(values[HOLD:], t.threshold)
    leaf, phase = t.leaf, HOLD % t.leaf
    first = leaf - phase  # leaves are counted from the stream's first value, the hold-out included
    count = (released.size - first) // leaf
    got = released[first : first + count * leaf].reshape(count, leaf).sum(axis=1)
    want = truncated[first : first + count * leaf].reshape(count, leaf).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * t.threshold * leaf)


@pytest.mark.parametrize("kwargs", [dict(seed=7), dict(key=bytes(range(32)))])
def test_batch_equals_one_value_at_a_time(kwargs):
    values = cyclic(HOLD + 3000)
    batch = tops(**dict(kwargs, seed=kwargs.get("seed")))
    single = tops(**dict(kwargs, seed=kwargs.get("seed")))
    released = batch.release(values)
    one = [single.release_one(float(v)) for v in values]
    assert batch.leaf is not None and batch.leaf == single.leaf
    np.testing.assert_array_equal(released, np.array([v for v in one if v is not None]))


def test_privacy_statement_with_leaves():
    t = tops(threshold_epsilon=0.8)
    t.release(cyclic(HOLD + 10))
    assert t.leaf is not None
    guarantee = t.privacy()
    assert guarantee.epsilon <= 0.8 and t.model_choice.epsilon_spent <= 0.8
    assert t._stream.spent_epsilon <= 0.5
    assert f"over leaves of {t.leaf} values" in guarantee.composition


def test_window_leaves_false_and_other_paths_keep_blocks():
    for kwargs in (dict(window_leaves=False), dict(smoothed_levels=1), dict(query_length=None)):
        t = tops(**kwargs)
        t.release(cyclic(HOLD + 10))
        assert t.leaf is None and not isinstance(t._stream, PeriodicPerturber)
    t = tops(period=48)  # a period given by the user is kept
    t.release(cyclic(HOLD + 10))
    assert t.leaf is None and t._stream.period == 48


def test_default_smoother_of_leaves_is_the_periods_and_a_given_one_is_kept():
    t = tops()
    t.release(cyclic(HOLD + 10))
    assert t._stream.smoother.name == "moving_average"
    t = tops(smoother="recent")
    t.release(cyclic(HOLD + 10))
    assert t.leaf is not None and t._stream.smoother.name == "recent"
