"""The zCDP accounting against OpenDP's (a test-only oracle, pinned in the dev extra).

OpenDP states a rho-zCDP measurement's privacy profile by the same Canonne-Kamath-Steinke conversion
(Corollary 13), computed in its own code: our epsilon must never be below OpenDP's at any delta (a
stated epsilon may be loose, never tight beyond the truth), and no looser than its margin of
rounding (2^-40 relative, see ``dpstream.accounting``) plus the two minimizations' error (1e-9).
Composition (rho's add) and pure DP as zCDP (epsilon^2 / 2) are checked against OpenDP's compositor
and ``make_pureDP_to_zCDP``; the discrete Gaussian's rho against OpenDP's ``make_gaussian`` on integers.
"""

from __future__ import annotations

import math

import opendp.prelude as dp
import pytest

from dpstream.accounting import Zcdp, ZcdpGuarantee, rho_for, rho_of_pure, zcdp_delta, zcdp_epsilon
from dpstream.noise.grid_gaussian import GridGaussian
from dpstream.privacy import EVENT_LEVEL, Composition, Part, PrivacyGuarantee

dp.enable_features("contrib")

RHOS = [1e-4, 0.001, 0.02436, 0.1, 0.5, 1.0, 5.0, 15.0, 50.0]
DELTAS = [1e-3, 1e-6, 1e-9, 1e-12]
#: How much looser than OpenDP's our epsilon may be (relative): the 2^-40 margin and the search's error.
LOOSENESS = 1e-9


def _gaussian(scale: float):
    """OpenDP's (continuous) Gaussian on a real value of sensitivity 1: rho = 1 / (2 scale^2)."""
    return dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=scale)


def _integer_gaussian(scale: float):
    """OpenDP's discrete Gaussian on one integer of sensitivity 1."""
    return dp.m.make_gaussian(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=scale)


@pytest.mark.parametrize("rho", RHOS)
def test_the_conversion_to_epsilon_delta_is_opendps_never_below(rho):
    measurement = _gaussian(1.0 / math.sqrt(2.0 * rho))
    rho_odp = measurement.map(1.0)
    assert rho_odp == pytest.approx(rho, rel=1e-12)
    profile = dp.c.make_zCDP_to_approxDP(measurement).map(1.0)
    for delta in DELTAS:
        ours, theirs = zcdp_epsilon(rho_odp, delta), profile.epsilon(delta)
        assert theirs <= ours <= theirs * (1.0 + LOOSENESS), (rho, delta, ours, theirs)
        # and the other way round: at OpenDP's epsilon our delta is OpenDP's, never below it
        delta_ours, delta_theirs = zcdp_delta(rho_odp, theirs), profile.delta(theirs)
        assert delta_theirs <= delta_ours <= delta_theirs * (1.0 + 1e-6), (rho, delta, delta_ours, delta_theirs)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9])
def test_the_rho_a_target_affords_is_within_the_target_by_opendps_conversion(epsilon, delta):
    rho = rho_for(epsilon, delta)
    profile = dp.c.make_zCDP_to_approxDP(_gaussian(1.0 / math.sqrt(2.0 * rho))).map(1.0)
    assert epsilon * (1.0 - 1e-9) <= profile.epsilon(delta) <= epsilon * (1.0 + 1e-12)


def test_a_guarantees_epsilon_is_opendps_at_its_delta():
    guarantee = ZcdpGuarantee.of(Part(what="tree", budget=Zcdp(0.5)), neighbours=EVENT_LEVEL, delta=1e-5)
    profile = dp.c.make_zCDP_to_approxDP(_gaussian(1.0)).map(1.0)  # scale 1: rho = 0.5
    for delta in [1e-5, 1e-8]:
        theirs = profile.epsilon(delta)
        assert theirs <= guarantee.at(delta).epsilon <= theirs * (1.0 + LOOSENESS)


def test_zcdp_composition_adds_rho_as_opendps_compositor_does():
    scales = [1.0, 2.0, 0.5, 3.0]
    measurements = [_integer_gaussian(scale) for scale in scales]
    theirs = dp.c.make_composition(measurements).map(1)
    parts = tuple(Part(what=f"g{i}", budget=Zcdp(m.map(1))) for i, m in enumerate(measurements))
    assert Composition(kind="sequential", parts=parts).budget.rho == pytest.approx(theirs, rel=1e-12)
    assert Zcdp.sequential([p.budget for p in parts]).rho == pytest.approx(theirs, rel=1e-12)
    guarantees = [ZcdpGuarantee.of(p, neighbours=EVENT_LEVEL) for p in parts]
    composed = guarantees[0].compose_sequential(*guarantees[1:])
    assert composed.rho == pytest.approx(theirs, rel=1e-12)
    profile = dp.c.make_zCDP_to_approxDP(dp.c.make_composition(measurements)).map(1)
    assert profile.epsilon(1e-6) <= composed.epsilon <= profile.epsilon(1e-6) * (1.0 + LOOSENESS)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0])
def test_pure_dp_as_zcdp_is_opendps_epsilon_squared_over_two(epsilon):
    laplace = dp.m.make_laplace(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=1.0 / epsilon)
    assert laplace.map(1) == pytest.approx(epsilon, rel=1e-12)
    theirs = dp.c.make_pureDP_to_zCDP(laplace).map(1)
    assert rho_of_pure(laplace.map(1)) == pytest.approx(theirs, rel=1e-12)
    # a pure part joining a zCDP composition: rho's add, as OpenDP's compositor of both
    gaussian = _integer_gaussian(1.0)
    both = dp.c.make_composition([dp.c.make_pureDP_to_zCDP(laplace), gaussian])
    pure = PrivacyGuarantee(epsilon=laplace.map(1), delta=0.0, neighbours=EVENT_LEVEL, composition="laplace")
    zcdp = ZcdpGuarantee.of(Part(what="gauss", budget=Zcdp(gaussian.map(1))), neighbours=EVENT_LEVEL)
    ours = zcdp.compose_sequential(pure)
    assert ours.rho == pytest.approx(both.map(1), rel=1e-12)
    theirs_epsilon = dp.c.make_zCDP_to_approxDP(both).map(1).epsilon(1e-6)
    assert theirs_epsilon <= ours.epsilon <= theirs_epsilon * (1.0 + LOOSENESS)


@pytest.mark.parametrize(("bound", "rho", "granularity", "levels"),
                         [(1.0, 0.5, 0.25, 4), (2.0, 0.02, 0.5, 9), (1.0, 0.125, 1.0, 16)])
def test_the_discrete_gaussians_rho_is_opendps_on_integers(bound, rho, granularity, levels):
    """The grid's discrete Gaussian on ``levels`` integer measurements of L2 sensitivity ``units sqrt(levels)``
    (cases where sigma and the sensitivity are integers, so OpenDP's float scale is exact)."""
    noise = GridGaussian.on_grid(bound, rho, granularity, levels=levels)
    sigma, sensitivity = math.isqrt(int(noise.sigma2)), noise.units * math.isqrt(levels)
    assert sigma * sigma == noise.sigma2 and sensitivity**2 == noise.units**2 * levels
    measurement = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int),
                                     scale=float(sigma))
    theirs = measurement.map(sensitivity)
    assert theirs <= noise.spent_rho <= rho and noise.spent_rho == pytest.approx(theirs, rel=1e-12)
