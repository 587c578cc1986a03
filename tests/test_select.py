"""Private selection (dpstream.thresholds.select): exact laws, exact privacy, and the samplers.

Privacy is checked exactly: the laws of :func:`selection_probabilities` (computed from the same
grid scores the samplers use) on neighbouring score vectors never differ by more than
``exp(epsilon)``.  The samplers are checked against those laws by a chi-square test (fixed
seeds; a correct sampler fails with probability 1e-4).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpstream.noise.bits import SeededBits
from dpstream.thresholds.select import (
    SELECTIONS,
    exponential_mechanism,
    permute_and_flip,
    report_noisy_max_scores,
    select,
    selection_epsilon,
    selection_probabilities,
)

SCORES = np.array([0.0, -0.004, -0.002, -0.01])  # a few grid steps apart: every candidate is likely
EPSILON = 500.0  # with Delta = 1 the grid step is 1/1024, so this is a budget of ~0.5 per step


@pytest.mark.parametrize(("seed", "mechanism", "monotone"), [
    (1, "report-noisy-max", True), (2, "permute-and-flip", True), (3, "permute-and-flip", False),
    (4, "exponential", True), (5, "exponential", False),
])
def test_sampler_follows_its_exact_law(seed, mechanism, monotone):
    p = selection_probabilities(mechanism, SCORES, epsilon=EPSILON, monotone=monotone)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    bits = SeededBits(seed=seed)
    n = 800
    draws = [select(mechanism, SCORES, epsilon=EPSILON, monotone=monotone, seed=bits) for _ in range(n)]
    observed = np.bincount(draws, minlength=SCORES.size)
    chi2 = float(((observed - n * p) ** 2 / (n * p)).sum())
    assert stats.chi2.sf(chi2, SCORES.size - 1) > 1e-4, (observed, n * p)


def test_report_noisy_max_general_law():
    """The non-monotone law sums over the winner's noise with ties to the lowest index."""
    p = selection_probabilities("report-noisy-max", [0.0, 0.0], epsilon=EPSILON, monotone=False)
    assert p[0] > p[1] and p.sum() == pytest.approx(1.0, abs=1e-9)  # ties go to index 0
    assert p[0] - p[1] == pytest.approx(float(np.sum(_tie_mass(EPSILON))), rel=1e-6)


def _tie_mass(epsilon):
    from dpstream.thresholds.select import _laplace_scale

    t = float(_laplace_scale(epsilon, False))
    z = np.arange(-int(60 * t), int(60 * t) + 1)
    pmf = np.exp(-np.abs(z) / t) * math.tanh(1 / (2 * t))
    return pmf**2  # both noises equal


def _neighbours(scores, monotone):
    """Score vectors at distance Delta = 1 (the vertices of the cube, monotone: one direction)."""
    shifts = [0.0, 1.0] if monotone else [-1.0, 0.0, 1.0]
    for shift in itertools.product(shifts, repeat=len(scores)):
        yield scores + np.array(shift)


@pytest.mark.parametrize("mechanism", list(SELECTIONS))
@pytest.mark.parametrize("monotone", [True, False])
def test_exact_privacy_on_neighbouring_scores(mechanism, monotone):
    """max over outputs and neighbours of P(i | q) / P(i | q') <= exp(spent epsilon)."""
    epsilon = 0.7
    scores = np.array([0.0, -0.6, -1.3])
    spent = selection_epsilon(mechanism, epsilon, monotone=monotone)
    assert spent <= epsilon
    base = selection_probabilities(mechanism, scores, epsilon=epsilon, monotone=monotone)
    worst = 0.0
    for other in _neighbours(scores, monotone):
        p = selection_probabilities(mechanism, other, epsilon=epsilon, monotone=monotone)
        worst = max(worst, float(np.max(np.abs(np.log(p / base)))))
    assert worst <= spent + 1e-9
    assert worst >= 0.5 * spent  # the bound is nearly attained: the mechanism is not over-noised


@pytest.mark.parametrize("mechanism", list(SELECTIONS))
def test_clear_winner_is_found(mechanism):
    scores = np.full(50, -1000.0)
    scores[17] = 0.0
    assert select(mechanism, scores, epsilon=1.0, seed=3) == 17


@pytest.mark.parametrize("sampler", [report_noisy_max_scores, permute_and_flip, exponential_mechanism])
def test_same_seed_same_choice(sampler):
    scores = np.linspace(0.0, -3.0, 30)
    assert sampler(scores, epsilon=1.0, seed=11) == sampler(scores, epsilon=1.0, seed=11)


def test_permute_and_flip_handles_huge_gaps():
    """Gaps whose exponent numerator exceeds 2^64 go through the Python-integer path."""
    scores = np.array([0.0, -3e12, -1e12])
    assert permute_and_flip(scores, epsilon=1e6, seed=0) == 0


def test_selection_epsilon_is_at_most_the_budget():
    for mechanism in SELECTIONS:
        for epsilon in (1e-4, 0.01, 0.3, 2.0):
            for monotone in (True, False):
                spent = selection_epsilon(mechanism, epsilon, monotone=monotone)
                assert 0.999 * epsilon <= spent <= epsilon


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(scores=[]), ValueError, "non-empty 1-D"),
        (dict(scores=[[1.0]]), ValueError, "non-empty 1-D"),
        (dict(scores=[0.0, float("nan")]), ValueError, "finite"),
        (dict(scores=[0.0, 1e20]), ValueError, "must stay below"),
        (dict(epsilon=0.0), ValueError, "epsilon"),
        (dict(sensitivity=-1.0), ValueError, "sensitivity"),
        (dict(monotone="yes"), TypeError, "monotone"),
        (dict(mechanism="gumbel"), ValueError, "selection must be one of"),
    ],
)
def test_errors(kwargs, error, message):
    call = dict(mechanism="permute-and-flip", scores=[0.0, 1.0], epsilon=1.0)
    call.update(kwargs)
    mechanism = call.pop("mechanism")
    with pytest.raises(error, match=message):
        select(mechanism, call.pop("scores"), **call)


def test_exact_probabilities_need_few_candidates_for_permute_and_flip():
    with pytest.raises(ValueError, match="at most 16 candidates"):
        selection_probabilities("permute-and-flip", np.zeros(17), epsilon=1.0)
