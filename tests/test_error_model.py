"""The error model of ToPS's pipeline (dpstream.thresholds.error_model).

The noise part is checked exactly against brute-force least squares on small forests, and its
quadrature against the exact average over all starts; the whole model against simulated
releases, with tolerances from the simulation's own standard error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.release import HierarchicalPerturber
from dpstream.thresholds.error_model import DataSummary, ErrorModel, QueryLengths, range_noise_factor


def _leaf_functional(start: int, stop: int, block: int, n_leaves: int) -> np.ndarray:
    """The released sum over [start, stop) as a linear functional of the consistent leaf noise:
    whole blocks in between, plus offset / block of the leaf before each end's block (Recent)."""
    q = np.zeros(n_leaves)
    ka, kb = start // block, stop // block
    q[ka:kb] += 1.0
    q[kb - 1] += (stop % block) / block
    q[ka - 1] -= (start % block) / block
    return q


@pytest.mark.parametrize(("fanout", "levels", "block"), [(4, 3, 1), (4, 3, 4), (3, 2, 2), (2, 4, 1)])
def test_noise_factor_is_least_squares_variance(least_squares, fanout, levels, block):
    top_nodes = 3
    n_leaves = top_nodes * fanout ** (levels - 1)
    sizes = [n_leaves // fanout**k for k in range(levels)]
    covariance = least_squares.leaf_covariance(sizes, fanout)  # per unit node variance
    rng = np.random.default_rng(fanout * 10 + levels)
    starts = rng.integers(block, n_leaves * block - 1, 60)
    stops = np.minimum(starts + rng.integers(0, n_leaves * block, 60), n_leaves * block - 1)
    stops = np.maximum(stops, starts)
    expected = [q @ covariance @ q for q in (_leaf_functional(a, b, block, n_leaves) for a, b in zip(starts, stops))]
    got = range_noise_factor(starts, stops, block_size=block, fanout=fanout, measured_levels=levels)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_noise_factor_rejects_queries_in_the_first_block():
    with pytest.raises(ValueError, match="block_size <= start <= stop"):
        range_noise_factor(np.array([3]), np.array([40]), block_size=16, fanout=16, measured_levels=2)


@pytest.mark.parametrize("s", [0, 1, 2])
@pytest.mark.parametrize("length", [7, 300, 5000])
def test_quadrature_matches_the_exact_average_over_starts(s, length):
    """The forest is periodic with the width b^(h-1) of a top node: averaging over one period of
    starts is exact; the model's 4096-point quadrature must agree within 2%."""
    model = ErrorModel(epsilon=1.0, max_range=4096, fanout=16, queries=QueryLengths.fixed(length))
    period = 16**2
    starts = period + np.arange(period)
    exact = range_noise_factor(starts, starts + length, block_size=16**s, fanout=16, measured_levels=3 - s).mean()
    assert model.factors(s)["noise"] == pytest.approx(exact, rel=0.02)


def test_random_query_law_in_closed_form():
    n = 777
    lengths = np.arange(1, n)
    weights = (n - lengths) / (n - lengths).sum()
    q = QueryLengths.random(n)
    assert q.mean == pytest.approx(weights @ lengths, rel=1e-12)
    assert q.mean_square == pytest.approx(weights @ lengths.astype(float) ** 2, rel=1e-12)
    targets = (np.arange(50) + 0.5) / 50
    explicit = lengths[np.searchsorted(np.cumsum(weights), targets)]
    np.testing.assert_array_equal(q.strata(50), explicit)
    assert q.stream_length == n and QueryLengths.random(n) == q and hash(QueryLengths.random(n)) == hash(q)


def test_explicit_query_law():
    q = QueryLengths(np.array([10, 20]), np.array([3.0, 1.0]))
    assert q.mean == pytest.approx(12.5) and q.mean_square == pytest.approx(175.0)
    assert q.strata(4).tolist() == [10, 10, 10, 20]
    assert QueryLengths.fixed(60) == QueryLengths(np.array([60]), np.array([2.0]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(lengths=np.array([0, 3]), weights=np.array([1.0, 1.0])), "query lengths must be >= 1, got 0"),
        (dict(lengths=np.array([3]), weights=np.array([1.0, 1.0])), "one shape"),
        (dict(lengths=np.array([3]), weights=np.array([0.0])), "not all zero"),
        (dict(lengths=np.array([3]), weights=np.array([-1.0])), ">= 0"),
    ],
)
def test_query_law_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QueryLengths(**kwargs)


def test_fixed_length_must_be_positive():
    with pytest.raises(ValueError, match="query_length"):
        QueryLengths.fixed(0)


def test_data_summary_from_values_is_the_definition():
    rng = np.random.default_rng(1)
    values = rng.exponential(5.0, 500).round()
    thetas = np.array([0.0, 3.0, 7.5, 40.0])
    s = DataSummary.from_values(values, thetas, drift=0.25, prior=4.0)
    for i, theta in enumerate(thetas):
        excess = np.maximum(values - theta, 0.0)
        truncated = np.minimum(values, theta)
        assert s.excess_mean[i] == pytest.approx(excess.mean())
        assert s.excess_square[i] == pytest.approx((excess**2).mean())
        assert s.spread[i] == pytest.approx(truncated.var())
        assert s.prior_error[i] == pytest.approx((4.0 - truncated.mean()) ** 2)
    assert s.drift == 0.25


def test_error_model_errors():
    with pytest.raises(TypeError, match="QueryLengths"):
        ErrorModel(epsilon=1.0, max_range=256, fanout=16, queries=100)
    model = ErrorModel(epsilon=1.0, max_range=256, fanout=16, queries=QueryLengths.fixed(10))
    with pytest.raises(ValueError, match=r"smoothed_levels must be in \[0, 1\], got 2"):
        model.factors(2)


def test_components_scale_as_the_math_says():
    """Noise grows as (theta (h - s) / eps)^2; truncation is E[L^2] mu^2 + E[L] tau^2."""
    queries = QueryLengths.fixed(100)
    summary = DataSummary(np.array([1.0, 2.0]), np.array([0.5, 0.25]), np.array([1.0, 0.5]),
                          np.array([0.1, 0.2]), 0.0, 0.0)
    a = ErrorModel(epsilon=1.0, max_range=4096, fanout=16, queries=queries).components(summary, 1)
    b = ErrorModel(epsilon=2.0, max_range=4096, fanout=16, queries=queries).components(summary, 1)
    np.testing.assert_allclose(a["noise"][1] / a["noise"][0], 4.0)
    np.testing.assert_allclose(a["noise"] / b["noise"], 4.0)
    np.testing.assert_allclose(a["truncation"], 100**2 * summary.excess_mean**2 + 100 * (summary.excess_square -
                                                                                         summary.excess_mean**2))


@pytest.mark.parametrize("s", [0, 1, 2])
def test_model_matches_simulated_releases(s):
    """Windows of 700 values over a stream of independent exponential values, truncated at 12:
    the mean squared error of all windows (after the first block), averaged over releases, must
    equal the model within 4 standard errors of the simulation plus 3% (the model's quadrature
    and its independence approximations)."""
    r, n, theta, eps, length = 4096, 3 * 4096, 12.0, 2.0, 700
    rng = np.random.default_rng(7)
    values = rng.exponential(4.0, n)
    summary = DataSummary.from_values(values, np.array([theta]), prior=None)
    model = ErrorModel(epsilon=eps, max_range=r, fanout=16, queries=QueryLengths.fixed(length))
    expected = float(model.expected_error(summary, s)[0])
    block = 16**s
    prior = float(np.minimum(values, theta)[:block].mean())  # a perfect prior: the model's prior_error = 0
    errors = []
    for seed in range(60):
        p = HierarchicalPerturber(threshold=theta, epsilon=eps, max_range=r, fanout=16, smoothed_levels=s,
                                  seed=seed, prior=prior)
        e = np.concatenate(([0.0], np.cumsum(p.release(np.minimum(values, theta)) - values)))
        windows = e[block + length :] - e[block : -length]
        errors.append(np.mean(windows**2))
    errors = np.array(errors)
    standard_error = errors.std(ddof=1) / math.sqrt(errors.size)
    assert abs(errors.mean() - expected) <= 4 * standard_error + 0.03 * expected
