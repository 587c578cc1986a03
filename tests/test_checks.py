"""Validation (``dpstream._checks``) and the generator convention (``dpstream.rng``).

The documented contract: ``TypeError`` for a value of the wrong type, ``ValueError`` for a value
of the right type that breaks a rule; messages name the parameter and the value received.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream._checks import (
    MAX_ARRAY_VALUES,
    MAX_LENGTH,
    MAX_LOCAL_EPSILON,
    MIN_EPSILON,
    MIN_GRID_BOUND,
    check_bool,
    check_bound,
    check_choice,
    check_distribution,
    check_epsilon,
    check_grid,
    check_length,
    check_local_epsilon,
    check_memory,
    check_nonnegative,
    check_nonnegative_int,
    check_percentile,
    check_positive_int,
    check_probability,
    check_stream_values,
    check_unit_values,
)
from dpstream.release import PAK, BinaryTreeCounter, ToPL, ToPLCollector, ToPS
from dpstream.rng import make_rng

# -- real-number parameters ------------------------------------------------------------------


@pytest.mark.parametrize("check", [check_epsilon, check_bound])
@pytest.mark.parametrize("value", [1, 0.5, 1e-12, np.float64(3.0), np.int64(2), 1e300])
def test_positive_real_accepts_finite_positive_numbers(check, value):
    result = check(value)
    assert type(result) is float
    assert result == float(value)


@pytest.mark.parametrize("check, name", [(check_epsilon, "epsilon"), (check_bound, "upper_bound")])
@pytest.mark.parametrize(
    "value, error, shown",
    [
        (0, ValueError, "0"),
        (-1, ValueError, "-1"),
        (-0.0, ValueError, "0.0"),
        (math.nan, ValueError, "nan"),
        (math.inf, ValueError, "inf"),
        (-math.inf, ValueError, "-inf"),
        ("1.0", TypeError, "'1.0'"),
        (True, TypeError, "True"),
        (False, TypeError, "False"),
        (None, TypeError, "None"),
        (1 + 2j, TypeError, "(1+2j)"),
        ([1.0], TypeError, "[1.0]"),
    ],
)
def test_positive_real_rejects_with_named_parameter_and_value(check, name, value, error, shown):
    with pytest.raises(error) as info:
        check(value)
    message = str(info.value)
    assert message.startswith(name)
    assert shown in message


def test_custom_parameter_name_appears_in_message():
    with pytest.raises(ValueError, match=r"threshold_epsilon .*got -2"):
        check_epsilon(-2, "threshold_epsilon")
    with pytest.raises(TypeError, match=r"threshold .*got 'x'"):
        check_bound("x", "threshold")


# -- integer parameters ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 2, 10**12, np.int64(7), np.uint8(3)])
def test_positive_int_accepts_integers(value):
    result = check_positive_int(value, "hold")
    assert type(result) is int and result == int(value)


@pytest.mark.parametrize(
    "value, error",
    [
        (1.5, TypeError),
        (2.0, TypeError),
        ("3", TypeError),
        (True, TypeError),
        (None, TypeError),
        (0, ValueError),
        (-4, ValueError),
    ],
)
def test_positive_int_rejects(value, error):
    with pytest.raises(error) as info:
        check_positive_int(value, "hold")
    assert str(info.value).startswith("hold")
    assert repr(value) in str(info.value)


def test_positive_int_minimum_is_enforced_and_named():
    assert check_positive_int(2, "fanout", minimum=2) == 2
    with pytest.raises(ValueError, match=r"fanout must be an integer >= 2, got 1\."):
        check_positive_int(1, "fanout", minimum=2)


def test_nonnegative_int():
    assert check_nonnegative_int(0, "smoothed_levels") == 0
    with pytest.raises(ValueError, match=r"smoothed_levels .*>= 0, got -1"):
        check_nonnegative_int(-1, "smoothed_levels")
    with pytest.raises(TypeError, match="smoothed_levels"):
        check_nonnegative_int(0.0, "smoothed_levels")


# -- probabilities and choices ---------------------------------------------------------------


def test_probability_closed_interval():
    assert check_probability(0, "alpha") == 0.0
    assert check_probability(1, "alpha") == 1.0
    assert check_probability(0.25, "alpha") == 0.25
    for bad in (-1e-12, 1 + 1e-12, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got"):
            check_probability(bad, "alpha")
    with pytest.raises(TypeError, match="alpha"):
        check_probability("0.5", "alpha")
    with pytest.raises(TypeError, match="alpha"):
        check_probability(True, "alpha")


def test_probability_open_low():
    assert check_probability(1e-300, "p", open_low=True) == 1e-300
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\], got 0\.0"):
        check_probability(0, "p", open_low=True)


@pytest.mark.parametrize("value", [True, False])
def test_bool_accepts_exactly_true_and_false(value):
    assert check_bool(value, "clip") is value


@pytest.mark.parametrize("value", [1, 0, "yes", None, np.bool_(True), 1.0])
def test_bool_rejects_everything_else_with_name_and_value(value):
    with pytest.raises(TypeError, match=rf"^capped must be True or False, got {value!r}\.$"):
        check_bool(value, "capped")


@pytest.mark.parametrize(
    "release, flag",
    [(ToPS, "clip"), (PAK, "clip"), (PAK, "capped"), (ToPL, "clip"), (BinaryTreeCounter, "clip")],
)
def test_every_flag_of_the_releases_is_checked_by_check_bool(release, flag):
    with pytest.raises(TypeError, match=rf"^{flag} must be True or False, got 'yes'\.$"):
        release(epsilon=1.0, upper_bound=10.0, **{flag: "yes"})


def test_nonnegative_real():
    assert check_nonnegative(0, "epsilon") == 0.0 and check_nonnegative(np.float64(2.5), "x") == 2.5
    with pytest.raises(ValueError, match=r"^epsilon must be a finite number >= 0, got -1\.0\.$"):
        check_nonnegative(-1, "epsilon")
    with pytest.raises(ValueError, match="got inf"):
        check_nonnegative(math.inf, "epsilon")
    with pytest.raises(TypeError, match="epsilon must be a real number, got True"):
        check_nonnegative(True, "epsilon")


def test_percentile():
    assert check_percentile(0) == 0.0 and check_percentile(np.float64(99.575)) == 99.575
    assert check_percentile(100, "p") == 100.0
    for bad in (-0.1, 100.5, math.nan):
        with pytest.raises(ValueError, match=r"^percentile must be in \[0, 100\], got"):
            check_percentile(bad)
    with pytest.raises(TypeError, match="p must be a real number, got '50'"):
        check_percentile("50", "p")


def test_local_epsilon_has_a_ceiling():
    assert check_local_epsilon(MAX_LOCAL_EPSILON) == MAX_LOCAL_EPSILON
    with pytest.raises(ValueError, match=r"^epsilon of a local randomizer must be at most 30 .*, got 30\.5\.$"):
        check_local_epsilon(30.5)
    with pytest.raises(ValueError, match="at least 1e-12"):
        check_local_epsilon(1e-13)


def test_unit_values():
    assert check_unit_values([-1, 0, 1]).tolist() == [-1.0, 0.0, 1.0]
    assert check_unit_values(0.5, 0.0, 1.0).shape == (1,)
    with pytest.raises(ValueError, match=r"^reports\[2\] must be in \[0, 1\], got nan\.$"):
        check_unit_values([0.0, 1.0, math.nan], 0.0, 1.0, name="reports")
    with pytest.raises(TypeError, match="values must be numbers"):
        check_unit_values(["a"])
    with pytest.raises(ValueError, match="one-dimensional"):
        check_unit_values(np.zeros((2, 2)))


def test_distribution():
    assert check_distribution([0.25, 0.75], 2).tolist() == [0.25, 0.75]
    with pytest.raises(ValueError, match="initial must have 3 entries"):
        check_distribution([0.5, 0.5], 3)
    with pytest.raises(ValueError, match="start must be >= 0 and sum to 1"):
        check_distribution([1.5, -0.5], 2, "start")


def test_choice():
    choices = ("recent", "mean")
    assert check_choice("mean", "smoother", choices) == "mean"
    with pytest.raises(ValueError) as info:
        check_choice("foo", "smoother", choices)
    assert "smoother" in str(info.value) and "'foo'" in str(info.value)
    assert "recent" in str(info.value) and "mean" in str(info.value)
    with pytest.raises(TypeError, match=r"smoother must be a string, got 3"):
        check_choice(3, "smoother", choices)


# -- stream values -----------------------------------------------------------------------------


def test_stream_values_returns_float64_1d_copy_semantics():
    out = check_stream_values([0, 1, 2.5, 10], 10.0)
    assert out.dtype == np.float64 and out.ndim == 1
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.5, 10.0])
    # A scalar becomes a one-element stream; the bounds 0 and B themselves are inside.
    np.testing.assert_array_equal(check_stream_values(3, 10.0), [3.0])
    np.testing.assert_array_equal(check_stream_values([0.0, 10.0], 10.0), [0.0, 10.0])
    assert check_stream_values([], 10.0).shape == (0,)


@pytest.mark.parametrize(
    "values, position, shown",
    [
        ([1.0, -0.5, 2.0], 1, "-0.5"),
        ([1.0, 2.0, 10.5], 2, "10.5"),
        ([math.nan, 1.0], 0, "nan"),
        ([1.0, 1.0, 1.0, math.inf], 3, "inf"),
        ([1.0, -math.inf], 1, "-inf"),
    ],
)
@pytest.mark.parametrize("offset", [0, 1000])
def test_stream_values_errors_name_global_position_and_value(values, position, shown, offset):
    with pytest.raises(ValueError) as info:
        check_stream_values(values, 10.0, offset=offset)
    message = str(info.value)
    assert f"position {offset + position} " in message
    assert shown in message


def test_stream_values_first_offending_position_is_reported():
    with pytest.raises(ValueError, match="position 2 "):
        check_stream_values([0.0, 1.0, 11.0, -1.0, math.nan][:4], 10.0)
    # NaN/inf are reported before range errors, wherever they are.
    with pytest.raises(ValueError, match=r"position 3 \(0-based\) must be a finite number"):
        check_stream_values([0.0, 11.0, 1.0, math.nan], 10.0)


def test_stream_values_clip():
    out = check_stream_values([-3.0, 0.0, 4.0, 12.0], 10.0, clip=True)
    np.testing.assert_array_equal(out, [0.0, 0.0, 4.0, 10.0])
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="position 1 \\(0-based\\) must be a finite number"):
            check_stream_values([1.0, bad], 10.0, clip=True)


def test_stream_values_shape_and_type_errors():
    with pytest.raises(ValueError, match=r"one-dimensional.*\(2, 2\)"):
        check_stream_values([[1.0, 2.0], [3.0, 4.0]], 10.0)
    with pytest.raises(TypeError, match="stream values must be numbers.*'abc'"):
        check_stream_values("abc", 10.0)
    with pytest.raises(TypeError, match="stream values must be numbers"):
        check_stream_values([1.0, "x"], 10.0)
    with pytest.raises(TypeError, match="stream values must be numbers"):
        check_stream_values({"a": 1}, 10.0)


# -- generators --------------------------------------------------------------------------------


def test_make_rng_same_seed_same_stream_and_different_seed_differs():
    a = make_rng(123).random(8)
    b = make_rng(123).random(8)
    c = make_rng(124).random(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # An integer seed means PCG64 seeded with it (numpy's default_rng).
    np.testing.assert_array_equal(a, np.random.default_rng(123).random(8))
    np.testing.assert_array_equal(make_rng(np.int64(5)).random(3), np.random.default_rng(5).random(3))


def test_make_rng_shares_a_given_generator():
    generator = np.random.default_rng(9)
    assert make_rng(generator) is generator


def test_make_rng_none_gives_fresh_generator():
    assert isinstance(make_rng(None), np.random.Generator)
    assert isinstance(make_rng(), np.random.Generator)


@pytest.mark.parametrize("seed, error", [(-1, ValueError), ("x", TypeError), (1.5, TypeError), (True, TypeError)])
def test_make_rng_rejects_bad_seeds(seed, error):
    with pytest.raises(error) as info:
        make_rng(seed)
    assert str(info.value).startswith("seed")
    assert repr(seed) in str(info.value)


def test_epsilon_has_a_floor():
    assert check_epsilon(MIN_EPSILON) == MIN_EPSILON
    with pytest.raises(ValueError, match=r"at least 1e-12 .*got 1e-300"):
        check_epsilon(1e-300)


def test_an_integer_beyond_float64_is_a_value_error_naming_its_size():
    """float(10**400) overflows: every real-number check says so in one line, not an OverflowError."""
    from dpstream._checks import check_bound, check_magnitude, check_nonnegative, check_probability

    for check in (check_bound, check_nonnegative, check_probability, check_magnitude):
        with pytest.raises(ValueError, match="x must be a finite number, got an integer of 401 digits"):
            check(-(10**400) if check is check_probability else 10**400, "x")


# -- what a mechanism will need, checked when it is made -------------------------------------------


def test_memory_length_and_grid_checks_name_their_limit():
    assert check_memory(MAX_ARRAY_VALUES, "hold") == MAX_ARRAY_VALUES
    with pytest.raises(ValueError, match="hold needs 2,147,483,649 values in memory"):
        check_memory(MAX_ARRAY_VALUES + 1, "hold")
    assert check_length(MAX_LENGTH, "window") == MAX_LENGTH
    for bad, error in ((MAX_LENGTH + 1, ValueError), (0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="window must be an integer"):
            check_length(bad, "window")
    assert check_grid(100.0) is None and check_grid(100.0, 2.0**-40) == 2.0**-40
    assert check_grid(MIN_GRID_BOUND, MIN_GRID_BOUND) == MIN_GRID_BOUND  # a given grid needs no default
    with pytest.raises(ValueError, match="upper_bound must be at least 2\\^-1000"):
        check_grid(MIN_GRID_BOUND / 2)
    with pytest.raises(ValueError, match="at most 2\\^52 grid units"):
        check_grid(1.0, 2.0**-53)
    with pytest.raises(ValueError, match="granularity must be a finite number, got an integer of 401 digits"):
        check_grid(1.0, 10**400)


@pytest.mark.parametrize("build, match", [
    (lambda: ToPS(epsilon=1.0, upper_bound=100, period=10**15), "period needs .* values in memory"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, hold=10**13), "hold needs .* values in memory"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, threshold_epsilon=1e200), "threshold_epsilon must be in"),
    (lambda: ToPS(epsilon=1e155, upper_bound=100), "epsilon must be at most 1e154"),
    (lambda: ToPS(epsilon=1e100, upper_bound=100), "epsilon .* must be in"),
    (lambda: ToPS(epsilon=1e155, upper_bound=100, threshold_epsilon=1.0), "at most 1e154 for Eq. 7"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, threshold_epsilon=1e-6), "threshold_epsilon must be in"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, threshold_method="nm-e", c=1e-300), "NM-E's largest offset"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, query_length=2**63), "query_length must be an integer in"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, smoother="moving_average", window=2**63), "window must be"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, fanout=10**400), "fanout must be an integer in"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, threshold_step=5e-324), "upper_bound / threshold_step"),
    (lambda: ToPS(epsilon=1.0, upper_bound=100, granularity=5e-324), "at most 2\\^52 grid units"),
    (lambda: BinaryTreeCounter(epsilon=1.0, upper_bound=100, granularity=10**400), "integer of 401 digits"),
    (lambda: BinaryTreeCounter(epsilon=1.0, upper_bound=100, max_range=2**40, granularity=1.0), "max_range needs"),
    (lambda: PAK(epsilon=1.0, upper_bound=100, delta=5e-324), "delta must be large enough"),
    (lambda: PAK(epsilon=1.0, upper_bound=100, multiplier=1.7e308), "S-PAK's largest threshold"),
    (lambda: PAK(epsilon=1.0, upper_bound=100, multiplier=1e300, capped=False), "must be at most 1e\\+300"),
    (lambda: PAK(epsilon=1.0, upper_bound=5e-324), "upper_bound must be at least 2\\^-1000"),
    (lambda: ToPLCollector(epsilon=1.0, upper_bound=5e-324), "upper_bound must be at least 2\\^-1000"),
    (lambda: ToPLCollector(epsilon=1.0, upper_bound=1e155), "Eq. 8's largest squared error"),
    (lambda: ToPLCollector(epsilon=1.0, upper_bound=100, hold=2**40), "hold needs"),
    (lambda: ToPLCollector(epsilon=1.0, upper_bound=100, max_range=10**400), "max_range must be an integer in"),
])
def test_parameters_that_would_fail_after_the_hold_out_are_refused_when_the_mechanism_is_made(build, match):
    with pytest.raises(ValueError, match=match) as info:
        build()
    assert "\n" not in str(info.value)


def test_the_model_budget_range_is_what_the_model_can_draw():
    """Just inside the range the threshold is chosen and the stream released; the range's ends come from the
    model's rounding of its noise scales (a numerator of at most 2^40, a denominator below 2^62)."""
    values = np.random.default_rng(1).uniform(0, 100, 80)
    for threshold_epsilon in (7.7e-6, 3.35e7):
        tops = ToPS(epsilon=1.0, upper_bound=100, hold=40, max_range=64, threshold_epsilon=threshold_epsilon, seed=3)
        assert tops.release(values).size == 40 and tops.threshold is not None
    for threshold_epsilon in (7.6e-6, 3.36e7):
        with pytest.raises(ValueError, match="threshold_epsilon must be in"):
            ToPS(epsilon=1.0, upper_bound=100, hold=40, max_range=64, threshold_epsilon=threshold_epsilon, seed=3)


def test_theta_below_the_grid_is_rounded_up_to_one_step():
    """A grid chosen for a large B can be coarser than the smallest candidate theta."""
    tops = ToPS(epsilon=1.0, upper_bound=2.0**22, hold=50, max_range=64, threshold_method="nm-e", seed=1)
    assert tops.granularity == 4.0
    out = tops.release(np.zeros(100))
    assert tops.threshold == 4.0 and out.size == 50 and np.all(np.isfinite(out))
