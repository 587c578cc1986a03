"""The binary-tree continual counter: tree arithmetic, noise scale, streaming, privacy."""

import math

import numpy as np
import pytest

from dpstream.hierarchy import num_levels
from dpstream.privacy import EVENT_LEVEL
from dpstream.release.binary_tree import BinaryTreeCounter, noise_prefix_sums, prefix_nodes


@pytest.mark.parametrize("n", [2, 3, 7, 8, 9, 100, 1024, 1025])
def test_prefix_nodes_tile_the_prefix_with_at_most_log_n_plus_one_nodes(n):
    levels = num_levels(n, 2)
    for count in range(n + 1):
        nodes = prefix_nodes(count, levels)
        assert len(nodes) <= math.ceil(math.log2(n)) + 1
        covered = np.zeros(2**levels, dtype=int)
        for level, index in nodes:
            assert 0 <= index < 2 ** (levels - level)
            covered[index * 2**level : (index + 1) * 2**level] += 1
        assert covered[:count].tolist() == [1] * count and not covered[count:].any()


@pytest.mark.parametrize("levels", [1, 2, 5, 10])
def test_noise_prefix_sums_add_the_noise_of_the_tiling_nodes(levels):
    rng = np.random.default_rng(levels)
    noise = [rng.normal(size=2 ** (levels - level)) for level in range(levels)]
    prefix = noise_prefix_sums(noise)
    for count in range(2**levels + 1):
        expected = sum(noise[level][index] for level, index in prefix_nodes(count, levels))
        assert prefix[count] == pytest.approx(expected, abs=1e-12)


def test_outputs_are_increments_of_the_noisy_count_from_the_tree_nodes():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=5.0, max_range=100, seed=3)
    values = np.random.default_rng(0).uniform(0, 5, 100)
    out = counter.release(values)
    levels = counter.levels
    for count in (1, 17, 64, 99, 100):
        noise = sum(counter.noise[level][index] for level, index in prefix_nodes(count, levels))
        assert np.sum(out[:count]) == pytest.approx(np.sum(values[:count]) + noise, rel=1e-9, abs=1e-6)
    assert counter.count == pytest.approx(np.sum(out))


def test_noise_has_the_stated_scale():
    # Lap(s): E|X| = s and sd(|X|) = s, so the mean of N draws is within 6 s / sqrt(N) of s.
    counter = BinaryTreeCounter(epsilon=0.5, upper_bound=3.0, max_range=2**16, seed=11)
    counter.release(np.zeros(1))
    scale = 3.0 * 16 / 0.5
    assert counter.noise_scale == scale and counter.levels == 16
    leaves = counter.noise[0]
    assert abs(np.mean(np.abs(leaves)) - scale) < 6 * scale / math.sqrt(leaves.size)
    assert abs(np.mean(leaves)) < 6 * math.sqrt(2) * scale / math.sqrt(leaves.size)


def test_batch_equals_one_at_a_time_across_trees():
    values = np.random.default_rng(1).uniform(0, 2, 70)
    batch = BinaryTreeCounter(epsilon=1.0, upper_bound=2.0, max_range=16, seed=5)
    single = BinaryTreeCounter(epsilon=1.0, upper_bound=2.0, max_range=16, seed=5)
    out = np.concatenate([batch.release(values[:30]), batch.release(values[30:])])
    streamed = np.array([single.release_one(float(v)) for v in values])
    np.testing.assert_array_equal(out, streamed)
    assert batch.position == single.position == 70


def test_a_fresh_tree_starts_after_max_range_values():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, seed=0)
    counter.release(np.ones(8))
    first = counter.noise
    counter.release(np.ones(1))
    assert counter.noise is not first
    assert counter.state.released == 9


def test_privacy_is_epsilon_at_event_level():
    guarantee = BinaryTreeCounter(epsilon=0.3, upper_bound=1.0, max_range=1000).privacy()
    assert (guarantee.epsilon, guarantee.delta) == (0.3, 0.0)
    assert guarantee.neighbours is EVENT_LEVEL


def test_bad_inputs_are_refused_with_their_value():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8)
    with pytest.raises(ValueError, match="position 2.*got 5.0"):
        counter.release([0.5, 0.5, 5.0])
    with pytest.raises(ValueError, match="max_range"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=1)
    with pytest.raises(ValueError, match="epsilon"):
        BinaryTreeCounter(epsilon=0.0, upper_bound=1.0)
    with pytest.raises(TypeError, match="number"):
        counter.release_one("x")
    assert BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, clip=True).release([3.0]).size == 1
