"""The model threshold (dpstream.thresholds.model): budget, sensitivity, and what it chooses."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.thresholds.error_model import QueryLengths
from dpstream.thresholds.model import (
    DRIFT_MARGIN,
    GRID_RATIO,
    SHARES,
    _round_up,
    _spent_laplace,
    model_candidates,
    model_threshold,
    noisy_mean,
    selection_scores,
)

COMMON = dict(upper_bound=1000.0, max_range=2**16, fanout=16)


def held_out(m=16384, seed=0, scale=10.0):
    return np.minimum(np.random.default_rng(seed).exponential(scale, m).round(), 1000.0)


def test_shares_sum_to_one():
    assert sum(SHARES.values()) == pytest.approx(1.0) and DRIFT_MARGIN >= 0


def test_candidates():
    c = model_candidates(1657.5)
    assert c[0] == 1.0 and c[-1] == 1657.0 and np.all(np.diff(c) > 0) and np.all(c == np.round(c))
    # consecutive candidates at most 2% apart, plus the one step of rounding up
    assert np.all(c[1:] <= c[:-1] * GRID_RATIO + 1.0 + 1e-9)
    half = model_candidates(10.0, step=0.5)
    assert half[0] == 0.5 and np.all(half % 0.5 == 0) and half[-1] == 10.0
    with pytest.raises(ValueError, match="threshold_step must be <= upper_bound"):
        model_candidates(1.0, step=2.0)


@pytest.mark.parametrize("kappa", [0.0, 1 / 1440, 0.3, 1.0])
def test_scores_are_one_lipschitz_and_monotone_in_the_counts(kappa):
    """A neighbouring hold-out moves every count by at most 1, all the same way: the scores must
    move by at most 1, all the same way."""
    rng = np.random.default_rng(1)
    m = 65536
    public = np.concatenate(([0.0], rng.exponential(1e4, 200), rng.exponential(1.0, 50)))
    counts = rng.integers(0, m, public.size)
    for shift in (np.ones_like(counts), (rng.random(public.size) < 0.5).astype(np.int64)):
        up = selection_scores(counts + shift, public, kappa=kappa, m=m)
        base = selection_scores(counts, public, kappa=kappa, m=m)
        assert np.all(base - up >= -1e-9) and np.all(base - up <= 1.0 + 1e-9)
    zero = selection_scores(np.zeros(1), np.zeros(1), kappa=kappa, m=m) - selection_scores(np.ones(1), np.zeros(1),
                                                                                          kappa=kappa, m=m)
    assert zero[0] <= 1.0 + 1e-12  # the steepest place: no public error, no count


def test_budget_is_spent_as_stated():
    for epsilon in (0.01, 0.3):
        choice = model_threshold(held_out(), epsilon=epsilon, stream_epsilon=0.1, seed=2, **COMMON)
        assert 0.995 * epsilon <= choice.epsilon_spent <= epsilon


def test_same_seed_same_choice_and_seeds_differ():
    a = model_threshold(held_out(), epsilon=0.05, stream_epsilon=0.05, seed=5, **COMMON)
    b = model_threshold(held_out(), epsilon=0.05, stream_epsilon=0.05, seed=5, **COMMON)
    assert a == b
    thetas = {model_threshold(held_out(), epsilon=0.05, stream_epsilon=0.05, seed=s, **COMMON).threshold
              for s in range(8)}
    assert len(thetas) > 1


def test_large_budget_finds_the_model_optimum_and_a_good_prior():
    """With a huge threshold budget the private steps are nearly exact: the median is the true
    one, the prior the truncated mean, no drift is seen in independent values, and theta lies where
    the tail count balances the noise (above the bulk, below the maximum)."""
    values = held_out()
    choice = model_threshold(values, epsilon=1e4, stream_epsilon=0.05, seed=3, **COMMON)
    assert choice.details["median"] == pytest.approx(np.median(values), abs=1.0)
    assert choice.prior == pytest.approx(np.minimum(values, choice.threshold).mean(), abs=1e-3)
    assert np.quantile(values, 0.99) < choice.threshold < values.max()


def test_drift_is_seen_when_the_level_moves():
    """A level that doubles from one quarter of the hold-out to the next is always drift.
    Independent values are drift only when the mean square of three correlated differences of
    block fractions exceeds its mean by DRIFT_MARGIN = 1 standard deviation: for such a skewed
    statistic about 15% of the time; 20 hold-outs allow at most 9 (a binomial(20, 0.15) exceeds 8
    with probability 2e-3)."""
    level = np.repeat([5.0, 10.0, 20.0, 40.0], 4096)
    moving, still = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        drifting = np.minimum(rng.exponential(level).round(), 1000.0)
        moving.append(model_threshold(drifting, epsilon=50.0, stream_epsilon=0.05, seed=seed, **COMMON))
        still.append(model_threshold(held_out(seed=seed), epsilon=50.0, stream_epsilon=0.05, seed=seed, **COMMON))
    assert all(choice.drift > 0.0 for choice in moving)
    assert sum(choice.drift > 0.0 for choice in still) <= 8
    assert max(choice.smoothed_levels for choice in moving) <= min(choice.smoothed_levels for choice in still)


def test_levels_and_query_lengths_are_honoured():
    forced = model_threshold(held_out(), epsilon=0.5, stream_epsilon=0.5, levels=(1,), seed=0, **COMMON)
    assert forced.smoothed_levels == 1
    short = model_threshold(held_out(), epsilon=0.5, stream_epsilon=5.0, queries=QueryLengths.fixed(20), seed=0,
                            **COMMON)
    long = model_threshold(held_out(), epsilon=0.5, stream_epsilon=5.0, seed=0, **COMMON)
    assert short.smoothed_levels <= 1 < long.smoothed_levels  # 20-value windows need fine leaves


@pytest.mark.parametrize("selection", ["report-noisy-max", "permute-and-flip", "exponential"])
def test_every_selection_runs(selection):
    choice = model_threshold(held_out(), epsilon=0.2, stream_epsilon=0.2, selection=selection, seed=0, **COMMON)
    assert choice.details["selection"] == selection and choice.threshold in model_candidates(1000.0)


def test_tiny_hold_out():
    choice = model_threshold(np.array([3.0]), epsilon=1.0, stream_epsilon=1.0, seed=0, **COMMON)
    assert 0 < choice.threshold <= 1000 and 0 <= choice.prior <= choice.threshold


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(epsilon=0.0), ValueError, "epsilon"),
        (dict(stream_epsilon=-1.0), ValueError, "stream_epsilon"),
        (dict(selection="gumbel"), ValueError, "selection must be one of"),
        (dict(values=np.array([])), ValueError, "at least 1 held-out value"),
    ],
)
def test_errors(kwargs, error, message):
    call = dict(values=held_out(1000), epsilon=0.1, stream_epsilon=0.1, seed=0, **COMMON)
    call.update(kwargs)
    with pytest.raises(error, match=message):
        model_threshold(call.pop("values"), **call)


def test_noisy_mean():
    values = np.array([1.0, 2.0, 30.0, 4.0])
    exact = np.minimum(values, 10.0).mean()
    assert noisy_mean(values, 10.0, epsilon=1e9, seed=0) == pytest.approx(exact, abs=1e-5)
    draws = np.array([noisy_mean(np.full(100, 5.0), 10.0, epsilon=1.0, seed=s) for s in range(300)])
    assert np.all((0.0 <= draws) & (draws <= 10.0))
    # discrete Laplace of scale 10 / eps on the sum of 100 values: sd of the mean ~ sqrt(2) 10 / 100
    assert abs(draws.mean() - 5.0) < 5 * math.sqrt(2) * 0.1 / math.sqrt(300) + 0.01


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1 << 20), st.floats(1e-4, 1e3))
def test_a_spent_laplace_budget_is_never_understated_nor_above_the_budget(sensitivity, epsilon):
    scale = _round_up(Fraction(sensitivity) / Fraction(epsilon))
    spent = _spent_laplace(sensitivity, scale)
    assert Fraction(sensitivity) / scale <= Fraction(spent) and spent <= epsilon
