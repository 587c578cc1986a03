"""Random range queries and their error metrics (``dpstream.evaluation.metrics``), and the plain
hierarchy's range answers checked against them."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.evaluation.metrics import (
    RangeQueries,
    error_metrics,
    fixed_length_queries,
    prefix_range_sums,
    random_queries,
)
from dpstream.hierarchy import PlainHierarchy
from dpstream.noise import FloatNoise, ZeroNoise


def test_random_queries_are_sorted_pairs_of_uniform_positions():
    rng = np.random.default_rng(1)
    n, count = 1000, 200_000
    q = random_queries(rng, n, count)
    assert np.all(q.starts <= q.stops) and q.starts.min() >= 0 and q.stops.max() <= n - 1
    # min and max of two uniform positions on {0..n-1}: E[stop - start] = (n^2 - 1) / (3n).
    expected = (n**2 - 1) / (3 * n)
    sd = n / np.sqrt(18)  # standard deviation of |U1 - U2| for uniforms on [0, n]
    assert abs(q.lengths.mean() - expected) < 6 * sd / np.sqrt(count)


def test_prefix_range_sums_match_brute_force():
    rng = np.random.default_rng(2)
    values = rng.normal(size=500)
    q = random_queries(rng, values.size, 300)
    brute = np.array([values[a:b].sum() for a, b in zip(q.starts, q.stops, strict=True)])
    assert np.allclose(prefix_range_sums(values, q), brute, atol=1e-9)


def test_error_metrics_definitions():
    q = RangeQueries(starts=np.array([0, 3, 5]), stops=np.array([2, 7, 5]))
    estimates, truth = np.array([4.0, -1.0, 2.0]), np.array([1.0, 3.0, 2.0])
    errors = estimates - truth
    lengths = np.array([2, 4, 1])  # the empty query counts as length 1
    result = error_metrics(estimates, truth, q)
    assert result["mse"] == pytest.approx(np.mean(errors**2))
    assert result["mae"] == pytest.approx(np.mean(np.abs(errors)))
    assert result["mmse"] == pytest.approx(np.mean((errors / lengths) ** 2))
    assert result["mmae"] == pytest.approx(np.mean(np.abs(errors / lengths)))


def test_plain_hierarchy_without_noise_answers_exactly():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 10, size=3000).astype(float)
    tree = PlainHierarchy(values, threshold=10, epsilon=1.0, max_range=1000, fanout=4, noise=ZeroNoise())
    q = random_queries(rng, values.size, 500)  # many cross the chunk boundaries at 1000 and 2000
    assert np.array_equal(tree.range_sums(q.starts, q.stops), prefix_range_sums(values, q))  # on the grid: exact
    floats = PlainHierarchy(values, threshold=10, epsilon=1e12, max_range=1000, fanout=4, noise=FloatNoise(rng=rng))
    assert np.allclose(floats.range_sums(q.starts, q.stops), prefix_range_sums(values, q), atol=1e-6)


@pytest.mark.parametrize("float_noise", [False, True], ids=["exact", "float"])
def test_plain_hierarchy_range_noise_is_unbiased(float_noise):
    values = np.full(256, 3.0)
    q = RangeQueries(starts=np.array([5]), stops=np.array([200]))
    errors = []
    for seed in range(2000 if float_noise else 500):  # an exact tree costs a few milliseconds more
        noise = dict(noise=FloatNoise(rng=seed)) if float_noise else dict(seed=seed)
        tree = PlainHierarchy(values, threshold=3.0, epsilon=1.0, max_range=256, fanout=4, **noise)
        errors.append(tree.range_sums(q.starts, q.stops)[0] - 195 * 3.0)
    errors = np.array(errors)
    # At most 2(b-1) = 6 nodes per level on 4 levels, each of scale 3 * 4 / 1 (variance at most
    # 2 * 12^2, the discrete Laplace's a little less): variance <= 24 * 2 * 12^2.
    bound = 6 * np.sqrt(24 * 2 * 12.0**2 / errors.size)
    assert abs(errors.mean()) < bound


def test_fixed_length_queries_cover_every_start_and_stay_inside():
    n, length = 50, 20
    q = fixed_length_queries(np.random.default_rng(1), n, 5000, length)
    assert np.all(q.lengths == length) and q.starts.min() == 0 and q.stops.max() == n
    # starts are uniform over the n - L + 1 possible ones: each seen about 5000 / 31 = 161 times
    counts = np.bincount(q.starts, minlength=n - length + 1)
    assert counts.size == n - length + 1 and counts.min() > 161 - 5 * np.sqrt(161)
    assert fixed_length_queries(np.random.default_rng(1), n, 3, n).starts.tolist() == [0, 0, 0]
    for bad in (0, n + 1):
        with pytest.raises(ValueError, match=rf"query length must be between 1 and the 50 released .*, got {bad}"):
            fixed_length_queries(np.random.default_rng(1), n, 3, bad)
