"""The five smoothers of Appendix D (``dpstream.smoothers.predictors``).

Each is checked against the independent re-computation in ``conftest.reference_predictions``
(plain loops over explicit histories), and fed one observation at a time, all at once and in
random pieces, which must agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.smoothers import (
    SMOOTHERS,
    ExponentialSmoother,
    MeanSmoother,
    MedianSmoother,
    MovingAverageSmoother,
    RecentSmoother,
    make_smoother,
)

FIXTURE_OK = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def feed(smoother, prior, observations, pieces):
    """Feed ``observations`` cut at ``pieces`` (sorted cut points); return predictions, state."""
    state = smoother.init(prior)
    out = []
    bounds = [0, *pieces, len(observations)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        predictions, state = smoother.step(state, observations[a:b])
        assert predictions.shape == (b - a,)
        out.append(predictions)
    return np.concatenate(out), state


def test_registry_names():
    assert set(SMOOTHERS) == {"recent", "mean", "median", "moving_average", "exponential"}
    for name, cls in SMOOTHERS.items():
        assert cls().name == name


def test_init_predicts_the_prior(smoother_case):
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    assert smoother.predict(smoother.init(7.25)) == 7.25


@pytest.mark.parametrize("prior", [0.0, 5.0, 123.4])
def test_predictions_match_appendix_d_definitions(smoother_case, reference_smoother, prior):
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    observations = np.random.default_rng(1).normal(10.0, 4.0, 41)
    predictions, state = smoother.step(smoother.init(prior), observations)
    expected = reference_smoother(name, prior, observations, **params)
    np.testing.assert_allclose(predictions, expected, rtol=1e-12, atol=1e-12)
    # predict(state) is the last prediction
    assert smoother.predict(state) == predictions[-1]


@pytest.mark.parametrize("window", [1, 2, 5, 50])
def test_moving_average_windows(reference_smoother, window):
    smoother = MovingAverageSmoother(window=window)
    observations = np.random.default_rng(2).random(30) * 100
    predictions, _ = smoother.step(smoother.init(3.0), observations)
    expected = reference_smoother("moving_average", 3.0, observations, window=window)
    np.testing.assert_allclose(predictions, expected, rtol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.6, 1.0])
def test_exponential_alphas(reference_smoother, alpha):
    smoother = ExponentialSmoother(alpha=alpha)
    observations = np.random.default_rng(3).random(20)
    predictions, _ = smoother.step(smoother.init(0.5), observations)
    np.testing.assert_allclose(
        predictions, reference_smoother("exponential", 0.5, observations, alpha=alpha), rtol=1e-14
    )
    if alpha == 1.0:
        np.testing.assert_array_equal(predictions, observations)  # reduces to recent
    if alpha == 0.0:
        assert np.all(predictions == 0.5)  # never moves from the prior


def test_hand_examples():
    """Small cases worked by hand from the definitions."""
    obs = np.array([4.0, 8.0, 0.0, 2.0])
    assert RecentSmoother().step(RecentSmoother().init(1.0), obs)[0].tolist() == [4.0, 8.0, 0.0, 2.0]
    # mean of (1, 4), (1, 4, 8), (1, 4, 8, 0), (1, 4, 8, 0, 2): the prior counts
    assert MeanSmoother().step(MeanSmoother().init(1.0), obs)[0].tolist() == [2.5, 13 / 3, 13 / 4, 3.0]
    # median of (4), (4, 8), (4, 8, 0), (4, 8, 0, 2): the prior does not count
    assert MedianSmoother().step(MedianSmoother().init(100.0), obs)[0].tolist() == [4.0, 6.0, 4.0, 3.0]
    # window 2 over (1, 4, 8, 0, 2): (1+4)/2, (4+8)/2, (8+0)/2, (0+2)/2
    s = MovingAverageSmoother(window=2)
    assert s.step(s.init(1.0), obs)[0].tolist() == [2.5, 6.0, 4.0, 1.0]
    # alpha 0.5: 2.5, 5.25, 2.625, 2.3125
    e = ExponentialSmoother(alpha=0.5)
    assert e.step(e.init(1.0), obs)[0].tolist() == [2.5, 5.25, 2.625, 2.3125]


def test_median_with_ties_and_duplicates(reference_smoother):
    observations = np.array([3.0, 3.0, 1.0, 3.0, 1.0, 1.0, 2.0, 2.0, 5.0, -1.0, 3.0])
    smoother = MedianSmoother()
    predictions, _ = smoother.step(smoother.init(0.0), observations)
    np.testing.assert_array_equal(predictions, reference_smoother("median", 0.0, observations))


def test_one_at_a_time_equals_all_at_once_bit_for_bit(smoother_case):
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    observations = np.random.default_rng(4).normal(50.0, 30.0, 200)
    together, state_a = feed(smoother, 2.0, observations, [])
    singly, state_b = feed(smoother, 2.0, observations, list(range(1, observations.size)))
    assert np.array_equal(together, singly)
    assert smoother.predict(state_a) == smoother.predict(state_b)


@FIXTURE_OK
@given(data=st.data())
def test_random_pieces_equal_all_at_once(smoother_case, data):
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    n = data.draw(st.integers(1, 60), label="n")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=8), label="cuts")))
    observations = np.random.default_rng(seed).exponential(20.0, n)
    together, _ = feed(smoother, 1.5, observations, [])
    pieces, _ = feed(smoother, 1.5, observations, cuts)  # empty pieces included
    assert np.array_equal(together, pieces)


def test_empty_observations_keep_state(smoother_case):
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    state = smoother.step(smoother.init(4.0), np.array([1.0, 9.0]))[1]
    predictions, same = smoother.step(state, np.empty(0))
    assert predictions.shape == (0,)
    assert smoother.predict(same) == smoother.predict(state)


def test_state_is_immutable_and_replayable(smoother_case):
    """Stepping twice from the same saved state gives the same result (no hidden mutation)."""
    name, params = smoother_case
    smoother = make_smoother(name, **params)
    saved = smoother.step(smoother.init(1.0), np.array([2.0, 7.0, 1.0]))[1]
    first, _ = smoother.step(saved, np.array([4.0, 4.0]))
    second, _ = smoother.step(saved, np.array([4.0, 4.0]))
    assert np.array_equal(first, second)


def test_moving_average_state_is_bounded():
    smoother = MovingAverageSmoother(window=4)
    _, state = smoother.step(smoother.init(0.0), np.arange(1000.0))
    assert len(state) == 5


# -- factory and parameters ----------------------------------------------------------------------


def test_make_smoother_by_name_and_params():
    assert make_smoother() == RecentSmoother()
    assert make_smoother("moving_average", window=4) == MovingAverageSmoother(window=4)
    assert make_smoother("exponential", alpha=0.2) == ExponentialSmoother(alpha=0.2)
    custom = MedianSmoother()
    assert make_smoother(custom) is custom


def test_make_smoother_unknown_name():
    with pytest.raises(ValueError) as info:
        make_smoother("foo")
    assert "smoother" in str(info.value) and "'foo'" in str(info.value)


@pytest.mark.parametrize("bad", [3, None, ["recent"]])
def test_make_smoother_rejects_non_smoother_objects_with_type_error(bad):
    with pytest.raises(TypeError) as info:
        make_smoother(bad)
    assert "smoother" in str(info.value) and repr(bad) in str(info.value)


def test_make_smoother_does_not_silently_drop_params_given_with_an_instance():
    with pytest.raises(ValueError, match="window"):
        make_smoother(RecentSmoother(), window=5)


@pytest.mark.parametrize(
    "name, param", [("recent", "window"), ("mean", "alpha"), ("exponential", "window"), ("moving_average", "alpha")]
)
def test_make_smoother_rejects_parameter_of_another_smoother(name, param):
    with pytest.raises(ValueError) as info:
        make_smoother(name, **{param: 2})
    assert repr(name) in str(info.value) and repr(param) in str(info.value)


@pytest.mark.parametrize(
    "build, error, shown",
    [
        (lambda: MovingAverageSmoother(window=0), ValueError, "window"),
        (lambda: MovingAverageSmoother(window=-3), ValueError, "-3"),
        (lambda: MovingAverageSmoother(window=2.5), TypeError, "2.5"),
        (lambda: ExponentialSmoother(alpha=1.5), ValueError, "1.5"),
        (lambda: ExponentialSmoother(alpha=-0.1), ValueError, "-0.1"),
        (lambda: ExponentialSmoother(alpha="0.5"), TypeError, "alpha"),
        (lambda: make_smoother("exponential", alpha=2.0), ValueError, "alpha"),
        (lambda: make_smoother("moving_average", window=0), ValueError, "window"),
    ],
)
def test_smoother_parameter_errors(build, error, shown):
    with pytest.raises(error) as info:
        build()
    assert shown in str(info.value)
