"""The grid-Laplace recipe (GridLaplace) and the two arithmetics the hierarchy mechanisms run on."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpstream.hierarchy.arithmetic import FloatArithmetic, GridArithmetic, arithmetic
from dpstream.hierarchy.tree import draw_noise_levels, draw_noise_units, level_sizes
from dpstream.noise import ExactNoise, FloatNoise
from dpstream.noise.grid import (
    GridLaplace,
    ceil_units,
    choose_granularity,
    epsilon_of_scale,
    round_up_scale,
    to_units,
)
from dpstream.release.perturber import HierarchyShape, check_chunk_sums, optimal_smoothed_levels


@pytest.mark.parametrize("bound, epsilon, levels, granularity", [
    (1657.0, 1.0, 5, None), (10.0, 0.3, 3, None), (1.0, 0.01, 20, None), (7.3, 2.5, 1, 0.1), (100.0, 1e-9, 4, None),
])
def test_grid_laplace_is_the_recipe(bound, epsilon, levels, granularity):
    """Granularity, units, the scale rounded up and the budget recomputed from it, as each step defines them."""
    noise = GridLaplace.choose(bound, epsilon, granularity, levels=levels)
    g = choose_granularity(granularity, bound, units_factor=Fraction(levels) / Fraction(epsilon))
    assert noise.granularity == g and noise.units == ceil_units(bound, g) and noise.levels == levels
    assert noise.scale == round_up_scale(Fraction(noise.units * levels) / Fraction(epsilon))
    assert noise.spent_epsilon == epsilon_of_scale(noise.units * levels, noise.scale) <= epsilon
    assert Fraction(noise.units * levels) / noise.scale <= Fraction(epsilon)  # exactly, not only as floats
    assert bound <= noise.bound < bound + g and noise.scale_value == float(noise.scale) * g
    assert noise.scale_per_unit == Fraction(levels) / Fraction(epsilon)
    assert GridLaplace.on_grid(bound, epsilon, g, levels=levels) == noise


def test_grid_laplace_refuses_a_grid_too_fine_with_its_name():
    with pytest.raises(ValueError, match="noise scale is .* grid units, above the 2\\^40"):
        GridLaplace.choose(1.0, 1e-3, 2.0**-40, levels=2)
    with pytest.raises(ValueError, match="^held-out sum's noise scale is"):
        GridLaplace.on_grid(1.0, 1e-3, 2.0**-40, what="held-out sum's noise scale")


@pytest.mark.parametrize("granularity", [0.25, 0.1, 2.0**-10])
def test_grid_units_batch_and_one_value_round_alike(granularity):
    ar = GridArithmetic(GridLaplace.on_grid(10.0, 1.0, granularity))
    values = np.concatenate([np.random.default_rng(1).random(2000) * 10.0,
                             np.arange(0, 10.0, granularity / 2)])  # ties to even included
    values = np.minimum(values, ar.bound)
    units = ar.units(values)
    assert units.dtype == np.int64 and np.array_equal(units, to_units(values, granularity, ar.noise.units))
    assert [ar.unit(float(v)) for v in values] == units.tolist()
    assert ar.sum(units) == int(units.sum()) and isinstance(ar.sum(units), int)


@pytest.mark.parametrize("ar", [
    GridArithmetic(GridLaplace.on_grid(10.0, 0.7, 2.0**-6, levels=3)),
    FloatArithmetic(bound=10.0, scale=30.0 / 0.7, epsilon=0.7),
])
def test_estimates_of_a_batch_equal_those_of_one_leaf_bit_for_bit(ar):
    seed = ExactNoise(bits=4) if ar.exact else FloatNoise(rng=4)
    levels = ar.draw(seed, 64, 4, 3)
    noise, fraction = ar.consistent(levels, 4, 50)
    assert noise.shape == (50,) and (fraction is None) == (not ar.exact)
    totals = ar.units(np.random.default_rng(2).random(50) * 10.0)
    leaves = np.arange(50)
    batch = ar.estimates(totals, noise, fraction, leaves)
    assert [ar.estimate(ar.total(t), noise, fraction, j) for j, t in enumerate(totals)] == batch.tolist()


def test_draws_are_the_hierarchy_draws_of_each_path():
    grid = GridArithmetic(GridLaplace.on_grid(5.0, 1.0, 0.5, levels=2))
    for got, want in zip(grid.draw(ExactNoise(bits=7), 16, 2, 2),
                         draw_noise_units(ExactNoise(bits=7), 16, 2, 2, grid.noise.scale), strict=True):
        assert got.dtype == np.int64 and np.array_equal(got, want)
    floats = FloatArithmetic(bound=5.0, scale=10.0, epsilon=1.0)
    for got, want in zip(floats.draw(FloatNoise(rng=7), 16, 2, 2),
                         draw_noise_levels(np.random.default_rng(7), 16, 2, 2, 10.0), strict=True):
        assert np.array_equal(got, want)
    assert [level.size for level in floats.draw(FloatNoise(rng=7), 16, 2, 2)] == level_sizes(16, 2, 2)


def test_released_values_are_units_times_the_grid_and_refused_from_2_53_units():
    grid = GridArithmetic(GridLaplace.on_grid(1.0, 1.0, 2.0**-20))
    assert grid.released(np.array([3, -5])).tolist() == [3 * 2.0**-20, -5 * 2.0**-20]
    assert grid.released_one(2**60 + 1) == float((2**60 + 1) * Fraction(2**-20))
    with pytest.raises(OverflowError, match="2\\^53 grid units"):
        grid.released(np.array([1 << 53]))
    floats = FloatArithmetic(bound=1.0, scale=1.0, epsilon=1.0)
    assert floats.released(np.array([1e300])).tolist() == [1e300] and floats.granularity is None


def test_arithmetic_chooses_the_path_and_refuses_a_grid_on_the_float_path():
    exact = arithmetic(True, bound=1657.0, epsilon=1.0, levels=5, granularity=None)
    assert exact.exact and exact.granularity == 2.0**-10 and exact.zero == 0
    floats = arithmetic(False, bound=1657.0, epsilon=0.5, levels=5, granularity=None)
    assert not floats.exact and floats.scale_value == 1657.0 * 5 / 0.5 and floats.spent_epsilon == 0.5
    with pytest.raises(ValueError, match="granularity applies to exact noise only"):
        arithmetic(False, bound=1.0, epsilon=1.0, levels=1, granularity=0.5)


def test_hierarchy_shape_checks_r_b_and_s():
    shape = HierarchyShape.of(0.05, 2**20, 16, None)
    assert shape.levels == 5 and shape.smoothed_levels == optimal_smoothed_levels(0.05, 2**20, 16)
    assert shape.measured_levels == shape.levels - shape.smoothed_levels
    with pytest.raises(ValueError, match="smoothed_levels must be < the hierarchy's 2 levels"):
        HierarchyShape.of(1.0, 256, 16, 2)
    with pytest.raises(ValueError, match="fanout"):
        HierarchyShape.of(1.0, 256, 1, None)


def test_chunk_sums_must_stay_below_2_52_units():
    check_chunk_sums(2**20, 2**31)
    with pytest.raises(ValueError, match="must be below 2\\^52"):
        check_chunk_sums(2**20, 2**32)
