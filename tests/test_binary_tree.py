"""The binary-tree continual counter: tree arithmetic, grid, noise scale, streaming, privacy."""

import math
from fractions import Fraction

import numpy as np
import pytest

from dpstream.hierarchy import num_levels
from dpstream.noise import ExactNoise, FloatNoise, KeyedBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import discrete_laplace_pmf, laplace_units_variance
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
    """Exact path: every output is an integer number of grid steps, and the sum of the first
    ``count`` outputs is exactly (the rounded values plus the noise of the tiling nodes) times g."""
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=5.0, max_range=100, seed=3)
    values = np.random.default_rng(0).uniform(0, 5, 100)
    out = counter.release(values)
    g = counter.granularity
    assert g == 2.0**-18  # the largest power of two <= 5 / 2^20
    units = out / g
    assert np.array_equal(units, np.rint(units))  # exact multiples of g
    rounded = np.rint(values / g).astype(np.int64)
    levels = counter.levels
    for count in (1, 17, 64, 99, 100):
        noise = sum(int(counter.noise[level][index]) for level, index in prefix_nodes(count, levels))
        assert int(units[:count].sum()) == int(rounded[:count].sum()) + noise  # integers: exactly
    assert counter.count == float(units.sum()) * g


def test_float_path_is_the_float_algorithm():
    """noise=FloatNoise(rng) (the studies): float Laplace per level, no grid, counts from the nodes."""
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=5.0, max_range=100, noise=FloatNoise(rng=3))
    values = np.random.default_rng(0).uniform(0, 5, 100)
    out = counter.release(values)
    rng = np.random.default_rng(3)
    noise = [rng.laplace(0.0, 35.0, 128 >> level) for level in range(7)]
    for count in (1, 17, 64, 99, 100):
        expected = np.sum(values[:count]) + sum(noise[level][index] for level, index in prefix_nodes(count, 7))
        assert np.sum(out[:count]) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert counter.granularity is None and "NOT for publication" in counter.privacy().noise


def test_noise_has_the_stated_scale():
    """Discrete Laplace of scale tau_units h / eps grid units: its variance (closed form) and
    E|X| = 2a / (1 - a^2), a = exp(-1 / scale), within 6 standard errors over 2^17 leaves."""
    counter = BinaryTreeCounter(epsilon=0.5, upper_bound=3.0, max_range=2**16, seed=11)
    counter.release(np.zeros(1))
    g = 2.0**-19  # the largest power of two <= 3 / 2^20
    assert counter.granularity == g and counter.bound_units == 3 * 2**19 and counter.levels == 16
    assert counter.noise_scale_units == Fraction(3 * 2**19 * 16 * 2)  # exact: no rounding needed
    assert counter.noise_scale == 3.0 * 16 / 0.5
    leaves = counter.noise[0].astype(np.float64)
    scale = float(counter.noise_scale_units)
    a = math.exp(-1 / scale)
    mean_abs = 2 * a / (1 - a**2)
    variance = laplace_units_variance(counter.noise_scale_units)
    assert abs(np.mean(np.abs(leaves)) - mean_abs) < 6 * math.sqrt(variance) / math.sqrt(leaves.size)
    assert abs(np.mean(leaves)) < 6 * math.sqrt(variance) / math.sqrt(leaves.size)
    assert counter.noise[0].dtype == np.int64


def test_small_scale_noise_matches_the_discrete_laplace_pmf():
    """At scale 3 units (tau = 3 g, h = 1 level... of a 2-leaf tree at eps = 1) the leaf noise of
    many trees follows tanh(1/6) exp(-|x| / 3): every frequency within 5 binomial sds."""
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=3.0, max_range=2, granularity=1.0, seed=5)
    assert counter.noise_scale_units == 3 and counter.levels == 1
    draws = []
    for _ in range(5000):
        counter.release(np.zeros(2))
        draws.append(counter.noise[0])
    draws = np.concatenate(draws)
    for x in range(-6, 7):
        p = float(discrete_laplace_pmf(x, 3, 1))
        assert abs(np.mean(draws == x) - p) < 5 * math.sqrt(p * (1 - p) / draws.size)


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
    assert counter.position == 9


def test_privacy_is_epsilon_at_event_level():
    counter = BinaryTreeCounter(epsilon=0.3, upper_bound=1.0, max_range=1000)
    guarantee = counter.privacy()
    assert 0.3 * (1 - 2**-20) <= guarantee.epsilon <= 0.3 and guarantee.delta == 0.0
    assert Fraction(guarantee.epsilon) >= Fraction(counter.bound_units * counter.levels) / counter.noise_scale_units
    assert guarantee.neighbours is EVENT_LEVEL
    assert guarantee.noise == "exact discrete Laplace in grid units, OS CSPRNG bits (os.urandom)"


def test_keyed_trees_are_recomputed_from_the_key():
    key = bytes(range(7, 39))
    values = np.random.default_rng(2).uniform(0, 1, 40)
    a = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=16, key=key)
    out = a.release(values)
    assert np.array_equal(out, BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=16, key=key).release(values))
    third = ExactNoise(bits=KeyedBits(key=key, identity=("binary-tree", 2))).laplace_units(a.noise_scale_units, 30)
    assert np.array_equal(a.noise[0], third[:16])  # tree 2 (values 32..39): its identity's stream, leaves first


def test_grid_limits_and_options():
    with pytest.raises(ValueError, match="must stay below 2\\^53 grid units"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=2**34, granularity=2.0**-20)
    with pytest.raises(ValueError, match="granularity must be a finite number > 0, got -1.0"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, granularity=-1.0)
    with pytest.raises(ValueError, match="granularity applies to exact noise only"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, granularity=0.5, noise=FloatNoise(rng=0))
    zero = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, granularity=0.125, noise=ZeroNoise())
    assert zero.release([0.3, 0.0625, 1.0]).tolist() == [0.25, 0.0, 1.0]  # to the nearest multiple, ties to even


def test_bad_inputs_are_refused_with_their_value():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8)
    with pytest.raises(ValueError, match="position 2.*got 5"):
        counter.release([0.5, 0.5, 5.0])
    with pytest.raises(ValueError, match="max_range"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=1)
    with pytest.raises(ValueError, match="epsilon"):
        BinaryTreeCounter(epsilon=0.0, upper_bound=1.0)
    with pytest.raises(TypeError, match="number"):
        counter.release_one("x")
    assert BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, clip=True).release([3.0]).size == 1
