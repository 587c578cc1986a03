"""NM-E (Section 3.3, Eq. 5-6) and the non-private percentile oracle.

Privacy is checked twice for report-noisy-max over the Eq. 6 scores on neighbouring hold-outs:
exactly, by summing the output probabilities of the discrete mechanism (integer counts, discrete
Laplace noise, public offsets compared exactly, ties to the lowest index), and empirically, with
Clopper-Pearson bounds on the frequencies of a vectorized re-implementation that is checked
draw by draw against the real mechanism.  The float path of the studies is checked against its
own float re-implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpstream.noise import FloatNoise, SeededBits, discrete_laplace
from dpstream.noise.laplace import noisy_max_scale
from dpstream.noise.source import NoiseSource
from dpstream.thresholds import NM_E_CONSTANT, nm_e_counts, nm_e_scores, noisy_max_threshold, true_percentile
from dpstream.thresholds.noisy_max import nm_e_slope, threshold_candidates


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
        theta = noisy_max_threshold(data, epsilon=1e9, stream_epsilon=0.5, seed=seed, **kwargs)
        assert theta == best


def test_small_epsilon_lands_near_argmax_in_score():
    """With eps = 1 the chosen candidate's score is within the noise of the best one: the winner's
    noisy score beats the best's, so q_best - q_chosen <= X_chosen - X_best, and for discrete
    Laplace noise of scale 1 (P[X >= k] <= e^-k) P(X_chosen - X_best > 2 ln(2 |C| / alpha)) <= alpha
    (union bound over candidates)."""
    rng = np.random.default_rng(3)
    data = np.minimum(rng.geometric(0.1, 4000), 300).astype(float)
    candidates = threshold_candidates(300.0)
    scores = nm_e_scores(data, candidates, stream_epsilon=1.0, max_range=2**16, fanout=16)
    bound = 2 * math.log(2 * candidates.size / 1e-9)
    for seed in range(10):
        theta = noisy_max_threshold(data, epsilon=1.0, upper_bound=300.0, max_range=2**16, fanout=16, seed=seed)
        chosen = int(np.flatnonzero(candidates == theta)[0])
        assert scores.max() - scores[chosen] <= bound


def test_stream_epsilon_defaults_to_epsilon_and_step_is_used():
    data = np.random.default_rng(4).integers(0, 20, 500).astype(float)
    kwargs = dict(upper_bound=20.0, max_range=1024, fanout=4)
    for seed in range(5):
        a = noisy_max_threshold(data, epsilon=0.3, seed=seed, **kwargs)
        b = noisy_max_threshold(data, epsilon=0.3, stream_epsilon=0.3, seed=seed, **kwargs)
        assert a == b
        theta = noisy_max_threshold(data, epsilon=0.3, step=2.5, seed=seed, **kwargs)
        assert theta in set(threshold_candidates(20.0, 2.5).tolist())


def exact_argmax(counts: np.ndarray, offsets: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Row-wise index of the largest counts + Z - offsets, compared exactly: the integer part
    counts + Z - floor(offsets) first, then the smaller fractional part, then the lower index."""
    whole = np.floor(offsets)
    key = counts + noise - whole.astype(np.int64)
    top = key == key.max(axis=-1, keepdims=True)
    return np.argmin(np.where(top, offsets - whole, np.inf), axis=-1)


def test_mechanism_is_exact_report_noisy_max_with_scale_one_over_epsilon():
    """noisy_max_threshold == candidates[exact_argmax(-m_theta, slope theta, Z)] draw by draw on
    a shared noise source, Z discrete Laplace of scale 1/eps (rounded up) -- the vectorized
    re-implementation used below is the mechanism."""
    values = np.array([0.0, 1.0, 2.0, 2.0, 3.0, 4.0])
    epsilon, kwargs = 0.9, dict(max_range=16, fanout=2)
    candidates = threshold_candidates(5.0)
    counts = -nm_e_counts(values, candidates)
    offsets = nm_e_slope(values.size, stream_epsilon=epsilon, **kwargs) * candidates
    trials = 300
    real_noise = NoiseSource(seed=77).sampler()
    real = [
        noisy_max_threshold(values, epsilon=epsilon, upper_bound=5.0, noise=real_noise, **kwargs)
        for _ in range(trials)
    ]
    replay = NoiseSource(seed=77).sampler()
    scale = noisy_max_scale(epsilon, monotone=True)
    noise = np.array([replay.laplace_units(scale, candidates.size) for _ in range(trials)])
    np.testing.assert_array_equal(real, candidates[exact_argmax(counts, offsets, noise)])
    # the scores are Eq. 6's: -m_theta - slope theta
    np.testing.assert_allclose(counts - offsets, nm_e_scores(values, candidates, stream_epsilon=epsilon, **kwargs))


def test_float_path_is_report_noisy_max_with_float_lap_one_over_epsilon():
    """noise=FloatNoise(rng), the studies' path: candidates[argmax(scores + rng.laplace(0, 1/eps))]."""
    values = np.array([0.0, 1.0, 2.0, 2.0, 3.0, 4.0])
    epsilon, kwargs = 0.9, dict(max_range=16, fanout=2)
    candidates = threshold_candidates(5.0)
    scores = nm_e_scores(values, candidates, stream_epsilon=epsilon, **kwargs)
    trials = 300
    real_noise = FloatNoise(rng=np.random.default_rng(77))
    real = [
        noisy_max_threshold(values, epsilon=epsilon, upper_bound=5.0, noise=real_noise, **kwargs)
        for _ in range(trials)
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


def discrete_laplace_cdf(k: np.ndarray, scale: float) -> np.ndarray:
    """P[Z <= k] for the discrete Laplace of ``scale``, P[Z = z] = tanh(1 / 2s) exp(-|z| / s)."""
    a = math.exp(-1.0 / scale)
    k = np.asarray(k, dtype=np.float64)
    below = a ** (-k) / (1 + a) * np.ones_like(k)  # k < 0: sum_{z <= k} = a^-k / (1 + a)
    above = 1.0 - a ** (k + 1) / (1 + a)
    return np.where(k < 0, np.where(np.isfinite(below), below, 0.0), above)


def exact_noisy_max_probabilities(values: np.ndarray, scale: float) -> np.ndarray:
    """P(NM-E picks candidate i), summed over candidate i's noise z (|z| <= 60 scales):
    pmf(z) times, for every other j, P(its score is below, or equal with j > i), i.e.
    Z_j <= ceil(t_j) - 1 for j < i and Z_j <= floor(t_j) for j > i, t_j = v - y_j + c_j."""
    candidates = threshold_candidates(UPPER)
    y = -nm_e_counts(values, candidates).astype(np.float64)
    c = nm_e_slope(values.size, **NM_KW) * candidates
    z = np.arange(-int(60 * scale) - 30, int(60 * scale) + 31, dtype=np.float64)
    pmf = math.tanh(0.5 / scale) * np.exp(-np.abs(z) / scale)
    out = []
    for i in range(candidates.size):
        v = y[i] + z - c[i]
        product = pmf.copy()
        for j in range(candidates.size):
            if j != i:
                t = v - y[j] + c[j]
                product *= discrete_laplace_cdf(np.ceil(t) - 1 if j < i else np.floor(t), scale)
        out.append(product.sum())
    return np.array(out)


def test_exact_output_probabilities_within_e_eps():
    candidates = threshold_candidates(UPPER)
    qa = nm_e_scores(V, candidates, **NM_KW)
    qb = nm_e_scores(V_NEIGHBOUR, candidates, **NM_KW)
    assert np.max(np.abs(qa - qb)) == pytest.approx(1.0)  # the neighbours really differ
    scale = float(noisy_max_scale(EPSILON, monotone=True))
    pa = exact_noisy_max_probabilities(V, scale)
    pb = exact_noisy_max_probabilities(V_NEIGHBOUR, scale)
    assert pa.sum() == pytest.approx(1.0, abs=1e-9) and pb.sum() == pytest.approx(1.0, abs=1e-9)
    ratios = np.concatenate([pa / pb, pb / pa])
    assert ratios.max() <= math.exp(EPSILON) * (1 + 1e-9)
    assert ratios.max() > 1.2  # the outputs do depend on the data (the check has teeth)
    # Negative control: with half the noise the same neighbours break e^eps.
    broken = exact_noisy_max_probabilities(V, scale / 2) / exact_noisy_max_probabilities(V_NEIGHBOUR, scale / 2)
    assert max(broken.max(), (1 / broken).max()) > math.exp(EPSILON)


def clopper_pearson(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lower = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    upper = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lower, upper


def empirical_counts(values, trials, seed, scale):
    """Outcome counts of the vectorized mechanism (exact_argmax) with discrete Laplace noise of
    ``scale`` (a Fraction) on the given values."""
    candidates = threshold_candidates(UPPER)
    counts = -nm_e_counts(values, candidates)
    offsets = nm_e_slope(values.size, **NM_KW) * candidates
    noise = discrete_laplace(SeededBits(seed=seed), scale.numerator, scale.denominator, (trials, candidates.size))
    return np.bincount(exact_argmax(counts, offsets, noise), minlength=candidates.size)


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
    scale = noisy_max_scale(EPSILON, monotone=True)
    a = empirical_counts(V, trials, seed=10, scale=scale)
    b = empirical_counts(V_NEIGHBOUR, trials, seed=11, scale=scale)
    violations, tested = ratio_violations(a, b, trials, alpha)
    assert tested >= 3
    assert violations == 0
    # The empirical frequencies also agree with the exact probabilities (CP containment).
    exact = exact_noisy_max_probabilities(V, float(scale))
    lo, hi = clopper_pearson(a, trials, alpha)
    assert np.all((lo <= exact) & (exact <= hi))
    # Negative control: noise of scale 0.5 / eps is detected as a violation by the same
    # procedure, so the check has power.
    a_bad = empirical_counts(V, trials, seed=12, scale=scale / 2)
    b_bad = empirical_counts(V_NEIGHBOUR, trials, seed=13, scale=scale / 2)
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
