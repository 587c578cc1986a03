"""Single-region count-of-counts pieces: conversions, isotonic regression, projection, rounding,
the Section 4 estimators and the sensitivities they rely on (Lemma 3, Lemma 4.2, Hg).

Reference solvers share no code with the implementation: L1 isotonic regression is checked
against a linear program (scipy.optimize.linprog), L2 against scipy's SLSQP on the same
constraints, the simplex projection against SLSQP too.  Optimal values are compared (L1
solutions need not be unique), with tolerances set by the solvers' accuracy.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from dpstream.count_of_counts.estimators import estimate_level, estimate_max_size
from dpstream.count_of_counts.histograms import (
    LevelHistograms,
    _first_max,
    from_cumulative,
    isotonic_l1,
    isotonic_l2,
    largest_remainder_round,
    project_to_simplex,
    to_cumulative,
    to_dense,
    to_sparse,
    to_unattributed,
)
from dpstream.noise import ExactNoise, double_geometric_pmf
from dpstream.noise.float_noise import MAX_SCALE, double_geometric_noise


def lp_isotonic_l1(y: np.ndarray, lower: float, upper: float) -> float:
    """min sum t_i s.t. t_i >= |x_i - y_i|, x non-decreasing, lower <= x <= upper."""
    n = y.size
    rows, rhs = [], []
    for i in range(n):
        for sign in (1, -1):
            row = np.zeros(2 * n)
            row[i], row[n + i] = sign, -1
            rows.append(row)
            rhs.append(sign * y[i])
    for i in range(n - 1):
        row = np.zeros(2 * n)
        row[i], row[i + 1] = 1, -1
        rows.append(row)
        rhs.append(0)
    result = linprog(np.r_[np.zeros(n), np.ones(n)], A_ub=np.array(rows), b_ub=rhs,
                     bounds=[(lower, upper)] * n + [(0, None)] * n, method="highs")
    assert result.status == 0
    return float(result.fun)


def slsqp_isotonic_l2(y: np.ndarray, lower: float, upper: float) -> float:
    n = y.size
    constraints = [{"type": "ineq", "fun": lambda x, i=i: x[i + 1] - x[i]} for i in range(n - 1)]
    start = np.clip(np.sort(y), lower, upper)
    result = minimize(lambda x: ((x - y) ** 2).sum(), start, jac=lambda x: 2 * (x - y), method="SLSQP",
                      bounds=[(lower, upper)] * n, constraints=constraints, options={"ftol": 1e-12, "maxiter": 500})
    return float(result.fun)


def test_conversions_round_trip():
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 30, 200)
    distinct, counts = to_sparse(sizes)
    assert np.array_equal(to_unattributed(distinct, counts), np.sort(sizes))
    cumulative = to_cumulative(distinct, counts, 40)
    assert cumulative[-1] == sizes.size and np.all(np.diff(cumulative) >= 0)
    back = from_cumulative(cumulative)
    assert np.array_equal(back[0], distinct) and np.array_equal(back[1], counts)
    # the cap of Section 4.1: groups above K count as K
    assert to_dense(distinct, counts, 10)[10] == np.sum(sizes >= 10)
    with pytest.raises(ValueError, match=">= 0"):
        to_sparse([1, -2])
    with pytest.raises(ValueError, match="non-decreasing"):
        from_cumulative(np.array([0, 3, 2]))


def test_isotonic_l1_matches_a_linear_program():
    rng = np.random.default_rng(1)
    for _ in range(150):
        n = int(rng.integers(1, 14))
        y = rng.integers(-6, 20, n)
        lower = int(rng.integers(-3, 4))
        upper = lower + int(rng.integers(0, 15))
        x = isotonic_l1(y, lower, upper)
        assert x.dtype == np.int64
        assert np.all(np.diff(x) >= 0) and x.min() >= lower and x.max() <= upper
        assert np.abs(x - y).sum() == pytest.approx(lp_isotonic_l1(y, lower, upper), abs=1e-6)


def test_isotonic_l1_segments_are_independent_problems():
    rng = np.random.default_rng(2)
    pieces = [rng.integers(0, 50, int(rng.integers(0, 30))) for _ in range(25)]
    starts = np.cumsum([0] + [p.size for p in pieces[:-1]])
    lower = rng.integers(0, 10, 25)
    upper = lower + rng.integers(0, 40, 25)
    together = isotonic_l1(np.concatenate(pieces), lower, upper, starts=starts)
    for j, piece in enumerate(pieces):
        alone = isotonic_l1(piece, int(lower[j]), int(upper[j]))
        assert np.array_equal(together[starts[j] : starts[j] + piece.size], alone)


def test_isotonic_l2_matches_a_quadratic_program():
    rng = np.random.default_rng(3)
    for _ in range(60):
        n = int(rng.integers(1, 10))
        y = rng.normal(5, 4, n)
        lower, upper = (0.0, np.inf) if rng.random() < 0.5 else (1.0, 7.0)
        x = isotonic_l2(y, lower, upper)
        assert np.all(np.diff(x) >= -1e-12) and x.min() >= lower and x.max() <= upper
        reference = slsqp_isotonic_l2(y, lower, min(upper, 1e6))
        assert ((x - y) ** 2).sum() <= reference + 1e-6


def test_simplex_projection_and_largest_remainder():
    rng = np.random.default_rng(4)
    rows = rng.normal(1, 3, (20, 7))
    totals = rng.integers(0, 25, 20)
    projected = project_to_simplex(rows, totals)
    assert np.all(projected >= 0) and np.allclose(projected.sum(axis=1), totals)
    for row, total, x in zip(rows, totals, projected):
        if total == 0:
            continue
        reference = minimize(lambda z, row=row: ((z - row) ** 2).sum(), np.full(7, total / 7), method="SLSQP",
                             bounds=[(0, None)] * 7,
                             constraints=[{"type": "eq", "fun": lambda z, total=total: z.sum() - total}],
                             options={"ftol": 1e-12})
        assert ((x - row) ** 2).sum() <= reference.fun + 1e-6
    rounded = largest_remainder_round(projected, totals)
    assert np.array_equal(rounded.sum(axis=1), totals) and np.all(rounded >= 0)
    assert np.all(np.abs(rounded - projected) < 1)


def neighbours(rng: np.random.Generator, n: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """Two group-size lists differing by one entity in one group (added or removed)."""
    sizes = rng.integers(0, high, n)
    other = sizes.copy()
    group = int(rng.integers(n))
    other[group] += 1 if (other[group] == 0 or rng.random() < 0.5) else -1
    return sizes, other


def test_sensitivities_on_random_neighbours():
    rng = np.random.default_rng(5)
    worst = {"naive": 0, "hc": 0, "hg": 0}
    for _ in range(2000):
        a, b = neighbours(rng, int(rng.integers(1, 30)), int(rng.choice([3, 12, 40])))
        k = int(rng.integers(1, 20))
        sa, sb = to_sparse(a), to_sparse(b)
        worst["naive"] = max(worst["naive"], int(np.abs(to_dense(*sa, k) - to_dense(*sb, k)).sum()))  # Lemma 3
        worst["hc"] = max(worst["hc"], int(np.abs(to_cumulative(*sa, k) - to_cumulative(*sb, k)).sum()))  # Lemma 4.2
        worst["hg"] = max(worst["hg"], int(np.abs(np.sort(a) - np.sort(b)).sum()))  # Hay et al.
    assert worst == {"naive": 2, "hc": 1, "hg": 1}


@pytest.mark.parametrize("method", ["hc", "hg", "naive"])
@pytest.mark.parametrize("isotonic", ["l1", "l2"])
def test_estimators_keep_the_public_group_counts(method, isotonic):
    rng = np.random.default_rng(6)
    node = rng.integers(0, 6, 400)
    size = rng.geometric(0.3, 400)
    truth = LevelHistograms.from_groups(node, size, 7)  # region 6 has no groups
    noise = ExactNoise(bits=rng)
    estimate = estimate_level(truth, method=method, epsilon=0.5, noise=noise, max_size=60, isotonic=isotonic)
    hist = estimate.histograms
    assert np.array_equal(hist.groups(), truth.groups())
    assert np.all(hist.count > 0) and np.all(hist.size >= 0) and hist.count.dtype == np.int64
    assert np.all(estimate.variance > 0)
    # with (practically) no noise every method returns the truth, except that sizes are capped at K
    exact = estimate_level(truth, method=method, epsilon=1e9, noise=noise, max_size=60, isotonic=isotonic)
    for column in ("node", "size", "count"):
        assert np.array_equal(getattr(exact.histograms, column), getattr(truth, column))


def test_estimator_errors():
    truth = LevelHistograms.from_groups(np.zeros(3), np.array([1, 2, 3]), 1)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="max_size"):
        estimate_level(truth, method="hc", epsilon=1.0, noise=ExactNoise(bits=rng))
    with pytest.raises(ValueError, match="method"):
        estimate_level(truth, method="hx", epsilon=1.0, noise=ExactNoise(bits=rng), max_size=5)
    with pytest.raises(ValueError, match="epsilon"):
        estimate_level(truth, method="hg", epsilon=0.0, noise=ExactNoise(bits=rng))


def test_estimated_max_size_covers_the_largest_group():
    # Pr[K < X] < exp(-5 sqrt 2)/2 ~ 4e-4 (double-geometric noise, see estimate_max_size);
    # 200 draws fail all-cover with prob < 0.09,
    # so assert the (binomial) count of misses instead: P(misses >= 4) < 1e-6.
    rng = np.random.default_rng(7)
    bounds = [estimate_max_size(1000, 0.01, ExactNoise(bits=rng)) for _ in range(200)]
    assert sum(bound < 1000 for bound in bounds) < 4
    assert all(isinstance(bound, int) and bound >= 1 for bound in bounds)


def _reference(values, starts):
    bounds = list(starts) + [len(values)]
    segments = [values[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [int(s.max()) for s in segments], [int(np.argmax(s)) for s in segments]  # argmax: first maximiser


def test_first_max_is_exact_at_the_extremes_of_int64():
    # The former key prefix * (n + 1) + position needed |prefix| * n < 2^63, i.e. n below about
    # 3e9 entries.  Values of magnitude 2^62 stand in for such prefixes: any key arithmetic wraps.
    big = 2**62
    values = np.array([-big, big, big - 1, big, 7, -big, -big, 0, big - 1, big - 1], dtype=np.int64)
    starts = np.array([0, 4, 5, 8])
    lengths = np.diff(np.append(starts, values.size))
    best, first = _first_max(values, starts, lengths)
    assert (best.tolist(), first.tolist()) == _reference(values, starts)
    assert best.tolist() == [big, 7, 0, big - 1] and first.tolist() == [1, 0, 2, 0]


def test_first_max_matches_the_per_segment_argmax():
    rng = np.random.default_rng(5)
    for _ in range(50):
        lengths = rng.integers(1, 8, rng.integers(1, 6))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        values = rng.choice(np.array([-(2**63), -3, 0, 2, 2**63 - 1], dtype=np.int64), int(lengths.sum()))
        best, first = _first_max(values, starts, lengths)
        assert (best.tolist(), first.tolist()) == _reference(values, starts)


def test_isotonic_l1_stays_optimal_on_tied_split_points():
    # short segments full of ties between split points, against every non-decreasing candidate
    candidates = np.array(list(itertools.combinations_with_replacement(range(6), 4)))  # sorted tuples
    rng = np.random.default_rng(8)
    values = rng.integers(0, 6, (40, 4))
    fitted = isotonic_l1(values.ravel(), 0, 5, starts=np.arange(0, values.size, 4)).reshape(values.shape)
    assert np.all(np.diff(fitted, axis=1) >= 0) and fitted.min() >= 0 and fitted.max() <= 5
    best = np.abs(candidates[None, :, :] - values[:, None, :]).sum(axis=2).min(axis=1)
    assert np.array_equal(np.abs(fitted - values).sum(axis=1), best)


ALPHA = 1e-9  # failure probability of each statistical assertion


def _margin(epsilon: float) -> int:
    return math.ceil(5.0 * math.sqrt(2.0) / epsilon)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_estimated_max_size_is_x_plus_double_geometric_noise_plus_margin(epsilon):
    # K - X - margin must follow DGeom(1/epsilon) (the geometric mechanism, Section 3.2), not a
    # rounded-up Laplace variable: compare every cell's frequency with the pmf (Hoeffding bound).
    draws = 20_000
    rng = np.random.default_rng(11)
    largest = 10_000
    source = ExactNoise(bits=rng)
    bounds = np.array([estimate_max_size(largest, epsilon, source) for _ in range(draws)])
    noise = bounds - largest - _margin(epsilon)
    cells = np.arange(-4, 5)
    frequency = (noise[:, None] == cells).mean(axis=0)
    tolerance = math.sqrt(math.log(2 * cells.size / ALPHA) / (2 * draws))
    assert np.abs(frequency - double_geometric_pmf(cells, 1.0 / epsilon)).max() < tolerance


@pytest.mark.parametrize("epsilon", [1e-6, 1e-4, 0.01, 0.1, 1.0, 5.0, 50.0])
def test_the_margin_keeps_pr_k_at_least_x_above_0_9995(epsilon):
    # Pr[K < X] = Pr[N < -margin] = a^(margin + 1) / (1 + a), a = exp(-epsilon)
    a = math.exp(-epsilon)
    miss = a ** (_margin(epsilon) + 1) / (1 + a)
    assert miss < 5e-4
    # the same tail summed from the pmf where it is short enough to enumerate
    if epsilon >= 0.01:
        k = np.arange(-(_margin(epsilon) + 1) - int(200 / epsilon), -_margin(epsilon))
        assert float(double_geometric_pmf(k, 1.0 / epsilon).sum()) == pytest.approx(miss, rel=1e-9)


def test_estimated_max_size_is_an_exact_integer_for_huge_groups():
    # integer arithmetic throughout: float64 would round every K near 2^60 to a multiple of 256,
    # so K - X would be the same for every draw.  Pr[|N| > 60] < 1e-25 at epsilon = 1.
    largest = 2**60 + 1
    rng = np.random.default_rng(0)
    bounds = [estimate_max_size(largest, 1.0, ExactNoise(bits=rng)) for _ in range(50)]
    assert all(isinstance(bound, int) for bound in bounds)
    residuals = {bound - largest - _margin(1.0) for bound in bounds}
    assert residuals <= set(range(-60, 61)) and len(residuals) > 1


def test_absurdly_small_epsilon_is_refused_not_overflowed():
    rng = np.random.default_rng(0)
    draws = double_geometric_noise(rng, MAX_SCALE, 1000)
    assert draws.dtype == np.int64 and np.abs(draws).max() < 2**62
    with pytest.raises(ValueError, match=r"scale must be at most 1e\+15.*got 1e\+19 \(epsilon / sensitivity = 1e-19\)"):
        double_geometric_noise(rng, 1e19, 3)
    with pytest.raises(ValueError, match="1e-17"):
        estimate_max_size(100, 1e-17, ExactNoise(bits=rng))
