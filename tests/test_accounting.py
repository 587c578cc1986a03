"""rho-zCDP accounting: conversions against closed forms and brute force, composition, guarantees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dpstream.accounting import (
    Zcdp,
    ZcdpGuarantee,
    rho_for,
    rho_of_pure,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_epsilon_standard,
)
from dpstream.privacy import ENTITY_ROW, EVENT_LEVEL, Composition, EpsilonDelta, Part, PrivacyGuarantee

RHOS = (1e-4, 0.005, 0.125, 0.5, 15.0, 200.0)
DELTAS = (1e-3, 1e-6, 1e-10)


def _brute_cks(rho: float, delta: float) -> float:
    """Canonne-Kamath-Steinke's epsilon minimized on a dense grid of alpha (an independent computation)."""
    alpha = 1.0 + np.logspace(-7, 7, 400_001)
    log_inv = math.log(1.0 / delta)
    return float(np.min(alpha * rho + (log_inv + (alpha - 1) * np.log1p(-1 / alpha) - np.log(alpha)) / (alpha - 1)))


def _gaussian_epsilon(rho: float, delta: float) -> float:
    """The exact (epsilon, delta) curve of the Gaussian mechanism with Delta / sigma = sqrt(2 rho)
    (Balle and Wang 2018): the least epsilon any rho-zCDP statement can give for it."""
    mu = math.sqrt(2.0 * rho)

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(excess, 0.0, 10.0 * (rho + 2 * math.sqrt(rho * math.log(1 / delta))) + 1.0)


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("delta", DELTAS)
def test_the_conversion_is_the_minimum_over_alpha_and_below_the_standard_bound(rho, delta):
    eps = zcdp_epsilon(rho, delta)
    assert eps == pytest.approx(_brute_cks(rho, delta), rel=1e-9)
    assert eps <= zcdp_epsilon_standard(rho, delta)
    assert zcdp_epsilon_standard(rho, delta) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)),
                                                               rel=1e-11)


@pytest.mark.parametrize("rho", RHOS[:5])
@pytest.mark.parametrize("delta", DELTAS)
def test_the_conversion_is_never_below_the_gaussian_mechanisms_exact_curve(rho, delta):
    # the Gaussian mechanism of rho is rho-zCDP: a valid conversion cannot promise less than its true epsilon
    exact = _gaussian_epsilon(rho, delta)
    assert exact <= zcdp_epsilon(rho, delta) <= exact * 1.6 + 0.05


@pytest.mark.parametrize("rho", RHOS)
def test_delta_and_epsilon_are_inverse(rho):
    for delta in DELTAS:
        eps = zcdp_epsilon(rho, delta)
        assert zcdp_delta(rho, eps) <= delta * (1 + 1e-9)
        assert zcdp_delta(rho, eps * 0.999) > delta


def test_rho_for_is_the_largest_rho_of_a_target():
    for eps, delta in ((1.0, 1e-6), (30.0, 1e-6), (0.1, 1e-5)):
        rho = rho_for(eps, delta)
        assert zcdp_epsilon(rho, delta) <= eps < zcdp_epsilon(rho * (1 + 1e-9), delta)
    assert rho_for(0.0, 1e-6) == 0.0


def test_the_conversions_hold_at_the_ends_of_the_range_of_rho_and_delta():
    # a huge rho took alpha - 1 below the float resolution (math domain error); a tiny one, or a delta near 1,
    # took the bound below 0 (a budget store of rho 1e-300 said "epsilon -1.409e-143")
    assert zcdp_epsilon(1e30, 1e-6) == pytest.approx(1e30) and zcdp_epsilon(1e308, 1e-6) == math.inf
    assert zcdp_epsilon(1e-300, 1e-6) == 0.0 and zcdp_epsilon(1e-12, 1e-6) == 0.0
    assert zcdp_epsilon(1.0, 0.9999999) == 0.0 <= zcdp_epsilon(1.0, 0.5)
    assert zcdp_delta(1e30, 1.0) == 1.0 and zcdp_delta(1e308, 0.0) == 1.0


def test_pure_dp_is_epsilon_squared_over_two():
    assert rho_of_pure(1.0) == 0.5 and rho_of_pure(0.2) == pytest.approx(0.02)
    assert Zcdp.of_pure(EpsilonDelta(2.0)) == Zcdp(2.0)
    with pytest.raises(ValueError, match="only pure DP"):
        Zcdp.of_pure(EpsilonDelta(1.0, 1e-6))


def test_zcdp_budgets_compose_by_adding_and_by_the_largest():
    a, b = Part(what="a", budget=Zcdp(0.25)), Part(what="b", budget=Zcdp(0.125))
    assert Composition(kind="sequential", parts=(a, b)).budget == Zcdp(0.375)
    assert Composition(kind="parallel", parts=(a, b)).budget == Zcdp(0.25)
    with pytest.raises(TypeError, match="one accounting"):
        Composition(kind="sequential", parts=(a, Part(what="c", budget=EpsilonDelta(1.0))))


def test_thirty_days_of_zcdp_grow_like_the_square_root():
    day = ZcdpGuarantee.of(Part(what="day", budget=Zcdp(rho_of_pure(1.0))), neighbours=EVENT_LEVEL)
    month = day.compose_sequential(*[day] * 29)
    assert month.rho == pytest.approx(15.0)
    # at epsilon = 1 a day, pure composition (30) beats 30 pure days read as zCDP: epsilon^2 / 2 is loose there
    assert month.epsilon == zcdp_epsilon(15.0, 1e-6) and month.epsilon > 30.0
    assert month.delta == 1e-6 and month.label.startswith("15-zCDP, so (42.37, 1e-06)-DP")
    small = ZcdpGuarantee.of(Part(what="day", budget=Zcdp(rho_of_pure(0.1))), neighbours=EVENT_LEVEL)
    assert small.compose_sequential(*[small] * 29).epsilon < 3.0  # at 0.1 a day it wins (2.67)


def test_pure_guarantees_join_a_zcdp_composition():
    pure = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="a pure part")
    zcdp = ZcdpGuarantee.of(Part(what="gauss", budget=Zcdp(0.5)), neighbours=EVENT_LEVEL, delta=1e-5)
    both = zcdp.compose_sequential(pure)
    assert both.rho == 1.0 and both.delta == 1e-5 and "as rho = epsilon^2/2 = 0.5" in both.composition
    assert isinstance(both, ZcdpGuarantee) and both.epsilon == zcdp_epsilon(1.0, 1e-5)
    assert zcdp.compose_parallel(pure).rho == 0.5
    with pytest.raises(ValueError, match="one neighbour relation"):
        zcdp.compose_sequential(PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=ENTITY_ROW, composition=""))
    with pytest.raises(ValueError, match="only pure DP"):
        zcdp.compose_sequential(PrivacyGuarantee(epsilon=1.0, delta=1e-9, neighbours=EVENT_LEVEL, composition=""))


def test_a_guarantee_cannot_claim_less_than_its_rho_implies():
    with pytest.raises(ValueError, match="below what rho"):
        ZcdpGuarantee(rho=0.5, epsilon=5.0, delta=1e-6, neighbours=EVENT_LEVEL, composition="")
    with pytest.raises(ValueError, match="strictly between"):
        ZcdpGuarantee.of(Part(what="x", budget=Zcdp(0.5)), neighbours=EVENT_LEVEL, delta=0.0)
    with pytest.raises(TypeError, match="Zcdp budgets"):
        ZcdpGuarantee.of(Part(what="x", budget=EpsilonDelta(0.5)), neighbours=EVENT_LEVEL)
