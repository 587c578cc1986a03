"""SR, PM and HM on a finite grid (Appendix E.2): exact ratios, exact pmfs, unbiasedness and variance.

Exact checks enumerate the pmf in integers (every probability is a multiple of 2^-62).  Statistical
checks use z = 5 two-sided bounds (Bonferroni over the few dozen checks of a test keeps the
family-wise false-alarm rate far below 1e-4); chi-square checks use the 1e-6 upper quantile.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.ldp import (
    HM_PM_THRESHOLD,
    HybridMechanism,
    PiecewiseMechanism,
    StochasticRounding,
    WindowRandomizer,
    default_pm_grid,
    exp_lower_bound,
)
from dpstream.ldp.grid import DENOMINATOR, check_indices, sup_variance
from dpstream.noise import SeededBits

Z = 5.0
EPSILONS = (0.3, 0.61, 1.0, 2.0, 4.0)
INPUTS = np.array([-1.0, -0.6, 0.0, 0.35, 1.0])  # both ends included
N = 200_000


def _estimates(mechanism, v: float, seed: int) -> np.ndarray:
    values = np.full(N, v)
    if isinstance(mechanism, HybridMechanism):
        return mechanism.estimate(*mechanism.perturb(values, seed))
    return mechanism.estimate(mechanism.perturb(values, seed))


def _exp_interval(x: float) -> tuple[Fraction, Fraction]:
    """e^x to 100 digits with the decimal module (correctly rounded), as an interval of rationals."""
    with decimal.localcontext() as context:
        context.prec = 100
        value = decimal.Decimal(Fraction(x).numerator) / decimal.Decimal(Fraction(x).denominator)
        rounded = value.exp()
        ulp = decimal.Decimal(1).scaleb(rounded.adjusted() - 99)
        return Fraction(rounded - ulp), Fraction(rounded + ulp)


def _continuous_pm_variance(epsilon: float, v: np.ndarray) -> np.ndarray:
    d = math.expm1(epsilon / 2)
    return v**2 / d + (d + 4) / (3 * d * d)


# -- the certified bound on e^eps ----------------------------------------------------------


@pytest.mark.parametrize("x", [0.0, 1e-12, 0.1, 0.61, 1.0, math.log(2), 2.5, 10.0, 30.0, 700.0])
def test_exp_lower_bound_is_below_e_x_and_tight(x):
    low, high = _exp_interval(x)  # low <= e^x <= high, high / low - 1 < 1e-98
    bound = exp_lower_bound(x)
    assert bound <= high and bound < Fraction(math.exp(x)) * (1 + Fraction(1, 10**15))
    assert bound >= low * (1 - Fraction(1, 10**70))  # within 1e-70 of e^x
    # a lower bound by construction: every partial sum of the positive series, floored, is below e^x
    assert bound <= sum(Fraction(x) ** k / math.factorial(k) for k in range(400)) or x > 100
    with pytest.raises(ValueError, match="0 <= x <= 700, got -1"):
        exp_lower_bound(-1.0)
    assert exp_lower_bound(0.0) == 1


# -- exact privacy ratios, from the integer pmf ----------------------------------------------


@pytest.mark.parametrize("epsilon", EPSILONS + (1e-9, 30.0))
def test_sr_probabilities_are_exact_with_ratio_at_most_e_eps(epsilon):
    core = StochasticRounding(epsilon=epsilon).core
    assert core.p + core.q == DENOMINATOR and core.extra == 0
    assert core.ratio == Fraction(core.p, core.q) <= exp_lower_bound(epsilon)
    # Q is the smallest integer that keeps the ratio below e^eps: one less would exceed it
    assert Fraction(DENOMINATOR - (core.q - 1), core.q - 1) > _exp_interval(epsilon)[1]
    sr = StochasticRounding(epsilon=epsilon)
    ratio = sr.probability(1, 1.0) / sr.probability(1, -1.0)
    assert ratio == pytest.approx(math.exp(epsilon), rel=max(1e-12, 2 / core.q))  # 1 / Q: the granularity of 2^-62


def _all_masses(core: WindowRandomizer) -> np.ndarray:
    """``D Pr[j | i]`` for every output (rows) and grid input (columns), as Python ints."""
    j = np.arange(core.outputs)[:, None]
    i = np.arange(core.grid + 1)[None, :]
    return core.mass(j, i).astype(object)


@pytest.mark.parametrize("epsilon", EPSILONS + (0.05, 30.0))
@pytest.mark.parametrize("grid", [1, 7, 64])
def test_pm_pmf_sums_to_one_exactly_and_every_report_has_ratio_at_most_e_eps(epsilon, grid):
    core = PiecewiseMechanism(epsilon=epsilon, grid=grid).core
    masses = _all_masses(core)
    assert all(total == DENOMINATOR for total in masses.sum(axis=0))  # every row of the pmf, exactly
    assert np.all(masses > 0)
    ratios = {Fraction(int(row.max()), int(row.min())) for row in masses}
    assert max(ratios) == core.ratio <= exp_lower_bound(epsilon)
    assert epsilon - max(2 / core.q, 1e-13) < core.ratio_epsilon <= epsilon  # used up to the granularity 1 / Q


@pytest.mark.parametrize("epsilon", (0.5, 2.0))
def test_real_inputs_mix_two_rows_and_keep_the_ratio(epsilon):
    pm = PiecewiseMechanism(epsilon=epsilon, grid=32)
    v = np.linspace(-1, 1, 257)  # on and between grid points
    prob = pm.probability(np.arange(pm.outputs)[:, None], v[None, :])
    assert np.allclose(prob.sum(axis=0), 1.0, atol=1e-12)
    assert np.all(prob.max(axis=1) <= float(pm.core.ratio) * (1 + 1e-12) * prob.min(axis=1))
    assert np.all(pm.probability(np.array([-1, pm.outputs]), 0.3) == 0)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hm_report_probability_ratio_is_at_most_e_eps(epsilon):
    """A report is (branch, j): probability alpha pm(j|v) or (1 - alpha) sr(j|v); the branch is independent of v."""
    hm = HybridMechanism(epsilon=epsilon, grid=64)
    v = np.linspace(-1, 1, 41)
    branches = [(1 - hm.alpha) * hm.sr.probability(np.array([0, 1])[:, None], v[None, :])]
    if epsilon > HM_PM_THRESHOLD:
        assert hm.alpha > 0 and hm.alpha_units == round(-math.expm1(-epsilon / 2) * DENOMINATOR)
        branches.append(hm.alpha * hm.pm.probability(np.arange(hm.pm.outputs)[:, None], v[None, :]))
    else:
        assert hm.alpha == 0  # SR only: the PM branch never runs
    for prob in branches:
        assert np.all(prob > 0)
        assert np.all(prob.max(axis=1) <= math.exp(epsilon) * (1 + 1e-12) * prob.min(axis=1))


# -- sampling --------------------------------------------------------------------------------


def _ratio_bound_holds(counts_a: np.ndarray, counts_b: np.ndarray, epsilon: float) -> bool:
    """Every bin: a lower confidence bound of freq_a over an upper bound of freq_b is <= e^eps."""
    low = np.maximum(counts_a - Z * np.sqrt(counts_a), 0.0)
    high = counts_b + Z * np.sqrt(counts_b) + 1.0
    return bool(np.all(low / high <= math.exp(epsilon)))


@pytest.mark.parametrize("epsilon", (0.5, 1.0, 2.0))
def test_sampled_ratios_of_all_three_mechanisms_stay_below_e_eps(epsilon):
    bits = SeededBits(seed=11)
    sr, pm, hm = (StochasticRounding(epsilon=epsilon), PiecewiseMechanism(epsilon=epsilon),
                  HybridMechanism(epsilon=epsilon))
    edges = np.linspace(0, pm.outputs, 41)
    hist = {}
    for v in (-1.0, 1.0):  # the most distant inputs
        values = np.full(N, v)
        sr_counts = np.bincount(sr.perturb(values, bits), minlength=2).astype(float)
        pm_counts = np.histogram(pm.perturb(values, bits), edges)[0].astype(float)
        uses_pm, j = hm.perturb(values, bits)
        hm_counts = np.concatenate([np.histogram(j[uses_pm], edges)[0], np.bincount(j[~uses_pm], minlength=2)])
        hist[v] = (sr_counts, pm_counts, hm_counts.astype(float))
    for a, b in ((-1.0, 1.0), (1.0, -1.0)):
        for counts_a, counts_b in zip(hist[a], hist[b], strict=True):
            assert _ratio_bound_holds(counts_a, counts_b, epsilon)
    # The extremes do differ by about e^eps for SR: the check is not vacuous.
    sr_minus, sr_plus = hist[-1.0][0], hist[1.0][0]
    assert sr_minus[0] / sr_plus[0] == pytest.approx(math.exp(epsilon), rel=0.05)


@pytest.mark.parametrize("kind", ("SR", "PM"))
@pytest.mark.parametrize("v", (0.4, -1.0, 0.123456789))
def test_sampled_reports_follow_the_exact_pmf(kind, v):
    """Chi-square over every output: the sampler realizes the pmf (off-grid inputs included)."""
    mechanism = StochasticRounding(epsilon=1.5) if kind == "SR" else PiecewiseMechanism(epsilon=1.5, grid=128)
    counts = np.bincount(mechanism.perturb(np.full(N, v), 5), minlength=mechanism.outputs)
    expected = N * mechanism.probability(np.arange(mechanism.outputs), v)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < stats.chi2.isf(1e-6, keep.sum() - 1)


def test_unseeded_perturbation_reads_the_os_random_source():
    pm = PiecewiseMechanism(epsilon=1.0)
    values = np.zeros(2000)
    first, second = pm.perturb(values), pm.perturb(values)
    assert first.dtype == np.int64 and not np.array_equal(first, second)  # 2000 draws: equal with prob. < 1e-900


# -- unbiasedness and variance: exact enumeration, then sampling ---------------------------


@pytest.mark.parametrize("kind", ("SR", "PM", "HM"))
@pytest.mark.parametrize("epsilon", (0.3, 1.0, 3.0))
def test_estimator_is_unbiased_and_variance_exact_by_enumeration(kind, epsilon):
    mechanism = {"SR": StochasticRounding, "PM": PiecewiseMechanism, "HM": HybridMechanism}[kind](epsilon=epsilon)
    v = np.concatenate([INPUTS, [0.1234567, -0.999, 1 / 3]])
    if kind == "HM":
        pm_j, sr_j = np.arange(mechanism.pm.outputs), np.array([0, 1])
        parts = [(mechanism.alpha * mechanism.pm.probability(pm_j[:, None], v), mechanism.pm.estimate(pm_j)),
                 ((1 - mechanism.alpha) * mechanism.sr.probability(sr_j[:, None], v), mechanism.sr.estimate(sr_j))]
    else:
        j = np.arange(mechanism.outputs)
        parts = [(mechanism.probability(j[:, None], v), mechanism.estimate(j))]
    mean = sum(prob.T @ est for prob, est in parts)
    second = sum(prob.T @ est**2 for prob, est in parts)
    scale = max(1.0, float(np.max(np.abs(parts[0][1]))))
    assert np.allclose(mean, v, atol=1e-9 * scale)
    assert np.allclose(second - v**2, mechanism.variance(v), rtol=1e-9, atol=1e-9 * scale**2)


@pytest.mark.parametrize("epsilon", (0.3, 1.0, 3.0))
@pytest.mark.parametrize("kind", ("SR", "PM", "HM"))
def test_estimates_are_unbiased_with_the_stated_variance(kind, epsilon):
    mechanism = {"SR": StochasticRounding, "PM": PiecewiseMechanism, "HM": HybridMechanism}[kind](epsilon=epsilon)
    for k, v in enumerate(INPUTS):
        est = _estimates(mechanism, float(v), seed=100 * ("SR", "PM", "HM").index(kind) + 10 * k + int(epsilon))
        variance = float(mechanism.variance(v))
        assert abs(est.mean() - v) <= Z * math.sqrt(variance / N)
        centred = est - est.mean()
        sample_var = float(np.mean(centred**2))
        fourth = float(np.mean(centred**4))
        assert abs(sample_var - variance) <= Z * math.sqrt(max(fourth - sample_var**2, 0.0) / N)


@pytest.mark.parametrize("epsilon", (0.1, 0.5, 1.0, 2.0, 4.0, 8.0))
def test_the_grid_costs_under_half_a_percent_of_pm_variance(epsilon):
    """Utility at the default grid: Var_grid(v) / Var_continuous(v) - 1 over v in [-1, 1]."""
    pm = PiecewiseMechanism(epsilon=epsilon)
    v = np.linspace(-1, 1, 4001)
    ratio = pm.variance(v) / _continuous_pm_variance(epsilon, v)
    assert ratio.max() <= 1.005
    assert ratio.min() >= 0.95  # nor is it a different mechanism (a finer window is a little better)


@pytest.mark.parametrize("epsilon", (0.1, 0.5, 0.61, 0.62, 1.0, 2.0, 5.0))
def test_hm_worst_case_variance_is_the_supremum_and_close_to_eq22(epsilon):
    hm = HybridMechanism(epsilon=epsilon)
    v = np.linspace(-1, 1, 20001)
    variance = hm.variance(v)
    assert hm.worst_case_variance() >= variance.max() - 1e-12 * variance.max()
    assert hm.worst_case_variance() <= variance.max() * (1 + 1e-6)
    c2 = ((math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)) ** 2
    half = math.exp(epsilon / 2)
    eq22 = c2 if epsilon <= 0.61 else (c2 + (half + 3) / (3 * (half - 1))) / half
    assert 0.99 * eq22 <= hm.worst_case_variance() <= eq22 * (1 + 1e-4)  # never worse than Eq. 22


def test_sup_variance_matches_a_dense_evaluation():
    points = np.linspace(-1, 1, 9)
    moments = 3.0 + 0.5 * points**2 + 0.1 * points
    dense = np.linspace(-1, 1, 100_001)
    assert sup_variance(points, moments) == pytest.approx(float(np.max(np.interp(dense, points, moments) - dense**2)),
                                                          abs=1e-9)


def test_eq22_is_continuous_at_the_switch():
    below = HybridMechanism(epsilon=HM_PM_THRESHOLD).worst_case_variance()
    above = HybridMechanism(epsilon=HM_PM_THRESHOLD + 1e-9).worst_case_variance()
    assert above == pytest.approx(below, rel=2e-3)


def test_hm_picks_pm_with_probability_alpha():
    hm = HybridMechanism(epsilon=2.0)
    uses_pm, _ = hm.perturb(np.zeros(N), 2)
    assert hm.alpha == pytest.approx(1 - math.exp(-1.0))
    assert abs(uses_pm.mean() - hm.alpha) <= Z * math.sqrt(hm.alpha * (1 - hm.alpha) / N)
    assert HybridMechanism(epsilon=0.5).alpha == 0.0


def test_default_pm_grid_grows_with_epsilon_and_never_costs_variance():
    assert default_pm_grid(0.5) == 1024 and default_pm_grid(30.0) == 32768
    assert PiecewiseMechanism(epsilon=30.0).grid == 32768
    v = np.linspace(-1, 1, 2001)
    for epsilon in (0.05, 0.7, 3.0, 12.0, 16.0, 22.0, 30.0):  # at large budgets the grid beats the continuous PM
        assert PiecewiseMechanism(epsilon=epsilon).variance(v).max() <= _continuous_pm_variance(epsilon, v).max()
    grids = [default_pm_grid(e) for e in np.linspace(0.1, 30, 50)]
    assert grids == sorted(grids) and all(g & (g - 1) == 0 for g in grids)


# -- conventions ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", (StochasticRounding, PiecewiseMechanism, HybridMechanism))
def test_a_batch_equals_a_loop_of_single_values(cls):
    mechanism = cls(epsilon=1.3)
    values = np.linspace(-1, 1, 50) ** 3
    batch = mechanism.perturb(values, SeededBits(seed=9))
    bits = SeededBits(seed=9)
    singles = [mechanism.perturb([v], bits) for v in values]
    if cls is HybridMechanism:
        assert np.array_equal(batch[0], np.concatenate([s[0] for s in singles]))
        assert np.array_equal(batch[1], np.concatenate([s[1] for s in singles]))
    else:
        assert np.array_equal(batch, np.concatenate(singles))
    assert mechanism.privacy().epsilon == 1.3 and mechanism.privacy().delta == 0.0
    assert "exact probability ratio" in mechanism.privacy().composition


@pytest.mark.parametrize("cls", (StochasticRounding, PiecewiseMechanism, HybridMechanism))
def test_bad_inputs_are_named(cls):
    with pytest.raises(ValueError, match=r"values\[1\] must be in \[-1, 1\], got 1.5"):
        cls(epsilon=1.0).perturb([0.0, 1.5], 0)
    with pytest.raises(ValueError, match="got nan"):
        cls(epsilon=1.0).perturb([np.nan], 0)
    with pytest.raises(TypeError, match="must be numbers"):
        cls(epsilon=1.0).perturb(["a"], 0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0, got -1.0"):
        cls(epsilon=-1.0)
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        cls(epsilon="1")


def test_bad_grids_and_reports_are_named():
    with pytest.raises(ValueError, match=r"grid must be an integer in \[1, 1048576\], got 0"):
        PiecewiseMechanism(epsilon=1.0, grid=0)
    with pytest.raises(TypeError, match="grid must be an integer, got 2.5"):
        HybridMechanism(epsilon=1.0, grid=2.5)
    with pytest.raises(ValueError, match="epsilon 1e-12 is too small for a grid of 16777216 points"):
        WindowRandomizer.for_epsilon(1e-12, low=0.0, high=1.0, grid=1 << 24, window=1)
    tiny = PiecewiseMechanism(epsilon=1e-12, grid=1 << 20).core  # the smallest budget on the largest grid
    assert tiny.p > tiny.q and tiny.ratio <= exp_lower_bound(1e-12)
    pm = PiecewiseMechanism(epsilon=1.0, grid=16)
    with pytest.raises(ValueError, match=r"position 2 \(0-based\) is 40, not a point of the grid \(an integer in "
                                         r"\[0, 25\]\)"):
        pm.check_reports([0, 3, 40])
    with pytest.raises(ValueError, match="position 0 .* is -1"):
        check_indices(np.array([-1]), 4)
    hm = HybridMechanism(epsilon=0.5)
    with pytest.raises(ValueError, match="is a PM report, but at epsilon 0.5 <= 0.61 HM only uses SR"):
        hm.check_reports([True], [3])
    with pytest.raises(ValueError, match="is SR report 3, not a point of its grid"):
        HybridMechanism(epsilon=2.0).check_reports([False], [3])
