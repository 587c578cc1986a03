"""SR, PM and HM (Appendix E.2): the e^eps ratio, unbiasedness and the variance formulas.

Statistical checks use z = 5 two-sided bounds (Bonferroni over the few dozen checks of a test
keeps the family-wise false-alarm rate far below 1e-4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.ldp import HM_PM_THRESHOLD, HybridMechanism, PiecewiseMechanism, StochasticRounding

Z = 5.0
EPSILONS = (0.3, 0.61, 1.0, 2.0, 4.0)
INPUTS = np.array([-1.0, -0.6, 0.0, 0.35, 1.0])  # both ends included
N = 200_000


def _estimates(mechanism, v: float, rng: np.random.Generator) -> np.ndarray:
    values = np.full(N, v)
    if isinstance(mechanism, HybridMechanism):
        return mechanism.estimate(*mechanism.perturb(values, rng))
    return mechanism.estimate(mechanism.perturb(values, rng))


# -- exact privacy ratios, from the definitions ------------------------------------------


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_sr_probability_ratio_is_at_most_e_eps_and_tight(epsilon):
    sr = StochasticRounding(epsilon=epsilon)
    v = np.linspace(-1, 1, 81)
    for y in (-1.0, 1.0):
        prob = sr.probability(np.full_like(v, y), v)
        assert np.all(prob > 0)
        assert prob.max() / prob.min() <= math.exp(epsilon) * (1 + 1e-12)
    # v = 1 against v = -1 attains e^eps exactly: the bound is the mechanism's, not slack.
    assert sr.probability(1.0, 1.0) / sr.probability(1.0, -1.0) == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert np.allclose(sr.probability(1.0, v) + sr.probability(-1.0, v), 1.0)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_pm_density_ratio_is_at_most_e_eps_and_integrates_to_one(epsilon):
    pm = PiecewiseMechanism(epsilon=epsilon)
    assert pm.p / pm.q == pytest.approx(math.exp(epsilon), rel=1e-12)
    v = np.linspace(-1, 1, 41)
    left, right = pm.piece(v)
    y = np.unique(np.concatenate([np.linspace(-pm.s, pm.s, 2001), left, right]))
    density = pm.density(y[:, None], v[None, :])  # rows: outputs, columns: inputs
    assert np.all(density > 0)
    assert np.all(density.max(axis=1) / density.min(axis=1) <= math.exp(epsilon) * (1 + 1e-12))
    width = right - left
    assert np.allclose(width, 2 / math.expm1(epsilon / 2))
    assert np.allclose(pm.p * width + pm.q * (2 * pm.s - width), 1.0)
    assert np.all(left >= -pm.s - 1e-12) and np.all(right <= pm.s + 1e-12)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hm_report_density_ratio_is_at_most_e_eps(epsilon):
    """A report is (branch, y): density alpha pm(y|v) or (1 - alpha) sr(y|v); the branch is independent of v."""
    hm = HybridMechanism(epsilon=epsilon)
    v = np.linspace(-1, 1, 41)
    ys = np.linspace(-hm.pm.s, hm.pm.s, 1001)
    branches = [(1 - hm.alpha) * hm.sr.probability(np.array([-1.0, 1.0])[:, None], v[None, :])]
    if epsilon > HM_PM_THRESHOLD:
        assert hm.alpha > 0
        branches.append(hm.alpha * hm.pm.density(ys[:, None], v[None, :]))
    else:
        assert hm.alpha == 0  # SR only: the PM branch never runs
    for density in branches:
        assert np.all(density > 0)
        assert np.all(density.max(axis=1) <= math.exp(epsilon) * (1 + 1e-12) * density.min(axis=1))


# -- sampled privacy ratios ---------------------------------------------------------------


def _ratio_bound_holds(counts_a: np.ndarray, counts_b: np.ndarray, epsilon: float) -> bool:
    """Every bin: a lower confidence bound of freq_a over an upper bound of freq_b is <= e^eps."""
    low = np.maximum(counts_a - Z * np.sqrt(counts_a), 0.0)
    high = counts_b + Z * np.sqrt(counts_b) + 1.0
    return bool(np.all(low / high <= math.exp(epsilon)))


@pytest.mark.parametrize("epsilon", (0.5, 1.0, 2.0))
def test_sampled_ratios_of_all_three_mechanisms_stay_below_e_eps(epsilon):
    rng = np.random.default_rng(11)
    sr, pm, hm = (
        StochasticRounding(epsilon=epsilon),
        PiecewiseMechanism(epsilon=epsilon),
        HybridMechanism(epsilon=epsilon),
    )
    edges = np.linspace(-pm.s, pm.s, 41)
    hist = {}
    for v in (-1.0, 1.0):  # the most distant inputs
        values = np.full(N, v)
        sr_counts = np.array([np.sum(sr.perturb(values, rng) < 0), 0.0])
        sr_counts[1] = N - sr_counts[0]
        pm_counts = np.histogram(pm.perturb(values, rng), edges)[0].astype(float)
        uses_pm, y = hm.perturb(values, rng)
        hm_counts = np.concatenate(
            [np.histogram(y[uses_pm], edges)[0], [np.sum(y[~uses_pm] < 0), np.sum(y[~uses_pm] > 0)]]
        )
        hist[v] = (sr_counts, pm_counts, hm_counts.astype(float))
    for a, b in ((-1.0, 1.0), (1.0, -1.0)):
        for counts_a, counts_b in zip(hist[a], hist[b]):
            assert _ratio_bound_holds(counts_a, counts_b, epsilon)
    # The extremes do differ by about e^eps for SR: the check is not vacuous.
    sr_minus, sr_plus = hist[-1.0][0], hist[1.0][0]
    assert sr_minus[0] / sr_plus[0] == pytest.approx(math.exp(epsilon), rel=0.05)


def test_pm_samples_follow_the_density():
    pm = PiecewiseMechanism(epsilon=1.5)
    rng = np.random.default_rng(5)
    v = 0.4
    edges = np.linspace(-pm.s, pm.s, 61)
    counts = np.histogram(pm.perturb(np.full(N, v), rng), edges)[0]
    fine = np.linspace(0, 1, 201)[:, None]
    points = edges[:-1] + fine * np.diff(edges)  # integrate the density over each bin
    expected = N * pm.density(points, v).mean(axis=0) * np.diff(edges)
    assert np.all(np.abs(counts - expected) <= Z * np.sqrt(expected) + 0.01 * expected)


# -- unbiasedness and variance ----------------------------------------------------------


@pytest.mark.parametrize("epsilon", (0.3, 1.0, 3.0))
@pytest.mark.parametrize("kind", ("SR", "PM", "HM"))
def test_estimates_are_unbiased_with_the_stated_variance(kind, epsilon):
    mechanism = {"SR": StochasticRounding, "PM": PiecewiseMechanism, "HM": HybridMechanism}[kind](epsilon=epsilon)
    rng = np.random.default_rng([("SR", "PM", "HM").index(kind), int(epsilon * 10)])
    for v in INPUTS:
        est = _estimates(mechanism, float(v), rng)
        variance = float(mechanism.variance(v))
        assert abs(est.mean() - v) <= Z * math.sqrt(variance / N)
        centred = est - est.mean()
        sample_var = float(np.mean(centred**2))
        fourth = float(np.mean(centred**4))
        assert abs(sample_var - variance) <= Z * math.sqrt(max(fourth - sample_var**2, 0.0) / N)


@pytest.mark.parametrize("epsilon", (0.1, 0.5, 0.61, 0.62, 1.0, 2.0, 5.0))
def test_hm_worst_case_variance_is_eq22(epsilon):
    hm = HybridMechanism(epsilon=epsilon)
    v = np.linspace(-1, 1, 201)
    variance = hm.variance(v)
    assert hm.worst_case_variance() == pytest.approx(variance.max(), rel=1e-12)
    c2 = ((math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)) ** 2
    half = math.exp(epsilon / 2)
    eq22 = c2 if epsilon <= 0.61 else (c2 + (half + 3) / (3 * (half - 1))) / half
    assert hm.worst_case_variance() == pytest.approx(eq22, rel=1e-12)
    if epsilon > HM_PM_THRESHOLD:  # alpha = 1 - e^(-eps/2) makes the variance flat in v
        assert np.ptp(variance) <= 1e-9 * variance.max()
        assert hm.worst_case_variance() <= min(hm.sr.variance(0.0), hm.pm.variance(1.0))


def test_eq22_is_continuous_at_the_switch():
    below = HybridMechanism(epsilon=HM_PM_THRESHOLD).worst_case_variance()
    above = HybridMechanism(epsilon=HM_PM_THRESHOLD + 1e-9).worst_case_variance()
    assert above == pytest.approx(below, rel=1e-3)


def test_hm_picks_pm_with_probability_alpha():
    hm = HybridMechanism(epsilon=2.0)
    uses_pm, _ = hm.perturb(np.zeros(N), np.random.default_rng(2))
    assert hm.alpha == pytest.approx(1 - math.exp(-1.0))
    assert abs(uses_pm.mean() - hm.alpha) <= Z * math.sqrt(hm.alpha * (1 - hm.alpha) / N)
    assert HybridMechanism(epsilon=0.5).alpha == 0.0


# -- conventions ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", (StochasticRounding, PiecewiseMechanism, HybridMechanism))
def test_a_batch_equals_a_loop_of_single_values(cls):
    mechanism = cls(epsilon=1.3)
    values = np.random.default_rng(0).uniform(-1, 1, 50)
    batch = mechanism.perturb(values, np.random.default_rng(9))
    rng = np.random.default_rng(9)
    singles = [mechanism.perturb([v], rng) for v in values]
    if cls is HybridMechanism:
        assert np.array_equal(batch[0], np.concatenate([s[0] for s in singles]))
        assert np.array_equal(batch[1], np.concatenate([s[1] for s in singles]))
    else:
        assert np.array_equal(batch, np.concatenate(singles))
    assert mechanism.privacy().epsilon == 1.3 and mechanism.privacy().delta == 0.0


@pytest.mark.parametrize("cls", (StochasticRounding, PiecewiseMechanism, HybridMechanism))
def test_bad_inputs_are_named(cls):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"values\[1\] must be in \[-1, 1\], got 1.5"):
        cls(epsilon=1.0).perturb([0.0, 1.5], rng)
    with pytest.raises(ValueError, match="got nan"):
        cls(epsilon=1.0).perturb([np.nan], rng)
    with pytest.raises(TypeError, match="must be numbers"):
        cls(epsilon=1.0).perturb(["a"], rng)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0, got -1.0"):
        cls(epsilon=-1.0)
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        cls(epsilon="1")
