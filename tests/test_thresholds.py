"""NM-E (Section 3.3, Eq. 5-6) and the non-private percentile oracle.

Privacy is checked twice for report-noisy-max over the Eq. 6 scores on neighbouring hold-outs:
exactly, by integrating the output probabilities numerically, and empirically, with
Clopper-Pearson bounds on the frequencies of the real mechanism's outputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpstream.thresholds import NM_E_CONSTANT, nm_e_scores, noisy_max_threshold, true_percentile
from dpstream.thresholds.noisy_max import threshold_candidates


def brute_force_scores(values, candidates, stream_epsilon, max_range, fanout, c=60.0):
    """Eq. 6 term by term, one candidate at a time, with Eq. 5's m_theta = |{i : v_i >= theta}|."""
    m = len(values)
    log_b_r = math.log(max_range, fanout)  # continuous log_b(r)
    out = []
    for theta in candidates:
        m_theta = sum(1 for v in values if v >= theta)
        noise_term = 3 * m * theta / (c * max_range * stream_epsilon) * math.sqrt(2 * (fanout - 1) * log_b_r**3)
        out.append(-noise_term - m_theta)
    return np.array(out)


def test_constant_is_papers_c():
    assert NM_E_CONSTANT == 60.0


# -- candidates --------------------------------------------------------------------------------


def test_threshold_candidates_grid():
    np.testing.assert_array_equal(threshold_candidates(5), [1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(threshold_candidates(4.5), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(threshold_candidates(1.0, 0.25), [0.25, 0.5, 0.75, 1.0])
    # B / step that is an integer up to rounding still includes B (0.3 / 0.1 = 2.9999999999999996)
    np.testing.assert_allclose(threshold_candidates(0.3, 0.1), [0.1, 0.2, 0.3])
    assert threshold_candidates(1657).size == 1657


def test_threshold_candidates_errors():
    with pytest.raises(ValueError) as info:
        threshold_candidates(5, 6)
    assert "threshold_step" in str(info.value) and "6" in str(info.value)
    with pytest.raises(ValueError, match="candidates"):
        threshold_candidates(1e9, 1e-3)
    with pytest.raises(ValueError, match="upper_bound"):
        threshold_candidates(-1)
    with pytest.raises(TypeError, match="threshold_step"):
        threshold_candidates(5, "1")


# -- scores (Eq. 6) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream_epsilon, max_range, fanout",
    [(1.0, 16, 16), (0.1, 2**20, 16), (0.05, 1000, 16), (2.0, 300, 3), (0.5, 2, 2)],
)
def test_scores_match_brute_force_eq6(stream_epsilon, max_range, fanout):
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.integers(0, 12, 40).astype(float), [3.0, 3.0, 7.5, 0.0]])
    candidates = threshold_candidates(12.0, 0.5)  # includes candidates equal to data values
    got = nm_e_scores(values, candidates, stream_epsilon=stream_epsilon, max_range=max_range, fanout=fanout)
    expected = brute_force_scores(values.tolist(), candidates.tolist(), stream_epsilon, max_range, fanout)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_scores_with_custom_c_and_ties_counted_as_at_least():
    values = np.array([2.0, 2.0, 2.0, 5.0])
    candidates = np.array([1.0, 2.0, 3.0])
    got = nm_e_scores(values, candidates, stream_epsilon=1e12, max_range=16, fanout=16, c=10.0)
    # slope ~ 0; m_theta = |{v >= theta}| counts the three 2.0s at theta = 2
    np.testing.assert_allclose(got, [-4.0, -4.0, -1.0], atol=1e-9)
    expected = brute_force_scores(values.tolist(), candidates.tolist(), 0.3, 50, 4, c=10.0)
    np.testing.assert_allclose(
        nm_e_scores(values, candidates, stream_epsilon=0.3, max_range=50, fanout=4, c=10.0), expected, rtol=1e-12
    )


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.integers(0, 10), min_size=1, max_size=30),
    index=st.integers(0, 29),
    new_value=st.integers(0, 10),
)
def test_scores_have_sensitivity_one_and_are_monotone(values, index, new_value):
    """Neighbours (one value changed): every score moves by at most 1, all in the same direction."""
    candidates = threshold_candidates(10.0)
    neighbour = list(values)
    neighbour[index % len(values)] = new_value
    kwargs = dict(stream_epsilon=0.7, max_range=4096, fanout=16)
    a = nm_e_scores(np.array(values, float), candidates, **kwargs)
    b = nm_e_scores(np.array(neighbour, float), candidates, **kwargs)
    diff = b - a
    assert np.all(np.abs(diff) <= 1 + 1e-9)
    assert np.all(diff >= -1e-9) or np.all(diff <= 1e-9)


def test_scores_validate_parameters():
    with pytest.raises(ValueError, match="max_range"):
        nm_e_scores(np.ones(3), np.ones(2), stream_epsilon=1.0, max_range=1, fanout=16)
    with pytest.raises(ValueError, match="fanout"):
        nm_e_scores(np.ones(3), np.ones(2), stream_epsilon=1.0, max_range=16, fanout=1)
    with pytest.raises(ValueError, match="stream_epsilon"):
        nm_e_scores(np.ones(3), np.ones(2), stream_epsilon=0.0, max_range=16, fanout=16)


# -- the mechanism -----------------------------------------------------------------------------


def test_huge_epsilon_picks_the_argmax():
    """With eps = 1e9 the noise is Lap(1e-9): the choice is the noiseless argmax whenever the
    best score leads the runner-up by far more than that (asserted)."""
    rng = np.random.default_rng(2)
    data = np.minimum(rng.geometric(0.15, 5000), 200).astype(float)
    kwargs = dict(upper_bound=200.0, max_range=2**16, fanout=16)
    candidates = threshold_candidates(200.0)
    scores = nm_e_scores(data, candidates, stream_epsilon=0.5, max_range=2**16, fanout=16)
    top_two = np.sort(scores)[-2:]
    assert top_two[1] - top_two[0] > 1e-4
    best = candidates[np.argmax(scores)]
    assert 1 < best < 200  # an interior optimum: both terms of Eq. 6 matter
    for seed in range(5):
        theta = noisy_max_threshold(
            data, epsilon=1e9, stream_epsilon=0.5, rng=np.random.default_rng(seed), **kwargs
        )
        assert theta == best


def test_small_epsilon_lands_near_argmax_in_score():
    """With eps = 1 the chosen candidate's score is within the noise of the best one: the winner's
    noisy score beats the best's, so q_best - q_chosen <= X_chosen - X_best, and for Lap(1)
    noise P(X_chosen - X_best > 2 ln(2 |C| / alpha)) <= alpha (union bound over candidates)."""
    rng = np.random.default_rng(3)
    data = np.minimum(rng.geometric(0.1, 4000), 300).astype(float)
    candidates = threshold_candidates(300.0)
    scores = nm_e_scores(data, candidates, stream_epsilon=1.0, max_range=2**16, fanout=16)
    bound = 2 * math.log(2 * candidates.size / 1e-9)
    for seed in range(10):
        theta = noisy_max_threshold(
            data, epsilon=1.0, upper_bound=300.0, max_range=2**16, fanout=16, rng=np.random.default_rng(seed)
        )
        chosen = int(np.flatnonzero(candidates == theta)[0])
        assert scores.max() - scores[chosen] <= bound


def test_stream_epsilon_defaults_to_epsilon_and_step_is_used():
    data = np.random.default_rng(4).integers(0, 20, 500).astype(float)
    kwargs = dict(upper_bound=20.0, max_range=1024, fanout=4)
    for seed in range(5):
        a = noisy_max_threshold(data, epsilon=0.3, rng=np.random.default_rng(seed), **kwargs)
        b = noisy_max_threshold(data, epsilon=0.3, stream_epsilon=0.3, rng=np.random.default_rng(seed), **kwargs)
        assert a == b
        theta = noisy_max_threshold(data, epsilon=0.3, step=2.5, rng=np.random.default_rng(seed), **kwargs)
        assert theta in set(threshold_candidates(20.0, 2.5).tolist())


def test_mechanism_is_report_noisy_max_with_lap_one_over_epsilon():
    """noisy_max_threshold == candidates[argmax(scores + rng.laplace(0, 1/eps, |C|))] draw by
    draw on a shared generator -- the vectorized re-implementation used below is the mechanism."""
    values = np.array([0.0, 1.0, 2.0, 2.0, 3.0, 4.0])
    epsilon, kwargs = 0.9, dict(max_range=16, fanout=2)
    candidates = threshold_candidates(5.0)
    scores = nm_e_scores(values, candidates, stream_epsilon=epsilon, **kwargs)
    trials = 300
    real_rng = np.random.default_rng(77)
    real = [
        noisy_max_threshold(values, epsilon=epsilon, upper_bound=5.0, rng=real_rng, **kwargs) for _ in range(trials)
    ]
    noise = np.random.default_rng(77).laplace(0.0, 1.0 / epsilon, (trials, candidates.size))
    vectorized = candidates[np.argmax(scores + noise, axis=1)]
    np.testing.assert_array_equal(real, vectorized)


# -- privacy -----------------------------------------------------------------------------------

EPSILON = 1.0
UPPER = 5.0
NM_KW = dict(stream_epsilon=EPSILON, max_range=16, fanout=2)
# Neighbours differ in one value (position 2: 0 -> 3).  Raising a value from 0 to 3 raises
# m_theta for theta = 1, 2, 3 only, so those scores drop by 1 while 4 and 5 keep theirs: the
# shift is as large as monotone sensitivity-1 queries allow.
V = np.array([1.0, 2.0, 0.0, 4.0, 5.0, 2.0])
V_NEIGHBOUR = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 2.0])


def exact_noisy_max_probabilities(scores: np.ndarray, beta: float) -> np.ndarray:
    """P(argmax_j (q_j + X_j) = i) = integral f(x - q_i) prod_{j != i} F(x - q_j) dx, X_j ~ Lap(beta)."""

    def pdf(x):
        return math.exp(-abs(x) / beta) / (2 * beta)

    def cdf(x):
        return 0.5 * math.exp(x / beta) if x < 0 else 1.0 - 0.5 * math.exp(-x / beta)

    lo, hi = scores.min() - 60 * beta, scores.max() + 60 * beta
    out = []
    for i, qi in enumerate(scores):

        def integrand(x, i=i, qi=qi):
            value = pdf(x - qi)
            for j, qj in enumerate(scores):
                if j != i:
                    value *= cdf(x - qj)
            return value

        p, err = integrate.quad(
            integrand, lo, hi, points=sorted(scores.tolist()), limit=200, epsabs=1e-13, epsrel=1e-11
        )
        assert err < 1e-9
        out.append(p)
    return np.array(out)


def test_exact_output_probabilities_within_e_eps():
    candidates = threshold_candidates(UPPER)
    qa = nm_e_scores(V, candidates, **NM_KW)
    qb = nm_e_scores(V_NEIGHBOUR, candidates, **NM_KW)
    assert np.max(np.abs(qa - qb)) == pytest.approx(1.0)  # the neighbours really differ
    pa = exact_noisy_max_probabilities(qa, 1.0 / EPSILON)
    pb = exact_noisy_max_probabilities(qb, 1.0 / EPSILON)
    assert pa.sum() == pytest.approx(1.0, abs=1e-8) and pb.sum() == pytest.approx(1.0, abs=1e-8)
    ratios = np.concatenate([pa / pb, pb / pa])
    assert ratios.max() <= math.exp(EPSILON) * (1 + 1e-7)
    assert ratios.max() > 1.2  # the outputs do depend on the data (the check has teeth)
    # Negative control: with half the noise the same neighbours break e^eps (ratio ~6.3 at theta=3).
    broken = exact_noisy_max_probabilities(qa, 0.5 / EPSILON) / exact_noisy_max_probabilities(qb, 0.5 / EPSILON)
    assert max(broken.max(), (1 / broken).max()) > math.exp(EPSILON)


def clopper_pearson(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lower = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    upper = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lower, upper


def empirical_counts(values, trials, seed, beta):
    candidates = threshold_candidates(UPPER)
    scores = nm_e_scores(values, candidates, **NM_KW)
    noise = np.random.default_rng(seed).laplace(0.0, beta, (trials, candidates.size))
    return np.bincount(np.argmax(scores + noise, axis=1), minlength=candidates.size)


def ratio_violations(counts_a, counts_b, trials, alpha, min_count=200):
    """Outcomes whose ratio is *significantly* above e^eps: lower CP bound of one frequency above
    e^eps times the upper CP bound of the other (Bonferroni over outcomes and directions)."""
    la, ua = clopper_pearson(counts_a, trials, alpha)
    lb, ub = clopper_pearson(counts_b, trials, alpha)
    enough = (counts_a >= min_count) & (counts_b >= min_count)
    bad = enough & ((la > math.exp(EPSILON) * ub) | (lb > math.exp(EPSILON) * ua))
    return int(bad.sum()), int(enough.sum())


def test_empirical_output_distribution_within_e_eps():
    trials = 50_000
    k = threshold_candidates(UPPER).size
    alpha = 1e-9 / (2 * k * 2)  # per interval: 2 datasets x k outcomes x 2 sides
    a = empirical_counts(V, trials, seed=10, beta=1.0 / EPSILON)
    b = empirical_counts(V_NEIGHBOUR, trials, seed=11, beta=1.0 / EPSILON)
    violations, tested = ratio_violations(a, b, trials, alpha)
    assert tested >= 3
    assert violations == 0
    # The empirical frequencies also agree with the exact probabilities (CP containment).
    candidates = threshold_candidates(UPPER)
    exact = exact_noisy_max_probabilities(nm_e_scores(V, candidates, **NM_KW), 1.0 / EPSILON)
    lo, hi = clopper_pearson(a, trials, alpha)
    assert np.all((lo <= exact) & (exact <= hi))
    # Negative control: Lap(0.5 / eps) -- exact ratio ~6.3 on an outcome of probability 0.2 vs
    # 0.03 -- is detected as a violation by the same procedure, so the check has power.
    a_bad = empirical_counts(V, trials, seed=12, beta=0.5 / EPSILON)
    b_bad = empirical_counts(V_NEIGHBOUR, trials, seed=13, beta=0.5 / EPSILON)
    assert ratio_violations(a_bad, b_bad, trials, alpha)[0] >= 1


# -- the oracle ------------------------------------------------------------------------------


def test_true_percentile():
    values = np.random.default_rng(5).random(101)
    assert true_percentile(values, 50) == float(np.median(values))
    assert true_percentile(np.arange(101.0), 95) == 95.0
    assert true_percentile([3.0, 1.0], 100) == 3.0
    assert true_percentile([3.0, 1.0], 0) == 1.0
    with pytest.raises(ValueError, match=r"p must be in \[0, 100\], got 101"):
        true_percentile(values, 101)
    with pytest.raises(ValueError, match="p must be in"):
        true_percentile(values, -1)
    with pytest.raises(ValueError, match="non-empty"):
        true_percentile([], 50)
