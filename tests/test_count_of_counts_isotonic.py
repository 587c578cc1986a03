"""The L1 isotonic solver's split search cannot overflow (``histograms._first_max``)."""

from __future__ import annotations

import itertools

import numpy as np

from dpstream.count_of_counts.histograms import _first_max, isotonic_l1


def _reference(values, starts):
    bounds = list(starts) + [len(values)]
    segments = [values[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [int(s.max()) for s in segments], [int(np.argmax(s)) for s in segments]  # argmax: first maximiser


def test_first_max_is_exact_at_the_extremes_of_int64():
    # The former key prefix * (n + 1) + position needed |prefix| * n < 2^63, i.e. n below about
    # 3e9 entries.  Values of magnitude 2^62 stand in for such prefixes: any key arithmetic wraps.
    big = 2**62
    values = np.array([-big, big, big - 1, big, 7, -big, -big, 0, big - 1, big - 1], dtype=np.int64)
    starts = np.array([0, 4, 5, 8])
    lengths = np.diff(np.append(starts, values.size))
    best, first = _first_max(values, starts, lengths)
    assert (best.tolist(), first.tolist()) == _reference(values, starts)
    assert best.tolist() == [big, 7, 0, big - 1] and first.tolist() == [1, 0, 2, 0]


def test_first_max_matches_the_per_segment_argmax():
    rng = np.random.default_rng(5)
    for _ in range(50):
        lengths = rng.integers(1, 8, rng.integers(1, 6))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        values = rng.choice(np.array([-(2**63), -3, 0, 2, 2**63 - 1], dtype=np.int64), int(lengths.sum()))
        best, first = _first_max(values, starts, lengths)
        assert (best.tolist(), first.tolist()) == _reference(values, starts)


def test_isotonic_l1_stays_optimal_on_tied_split_points():
    # short segments full of ties between split points, against every non-decreasing candidate
    candidates = np.array(list(itertools.combinations_with_replacement(range(6), 4)))  # sorted tuples
    rng = np.random.default_rng(8)
    values = rng.integers(0, 6, (40, 4))
    fitted = isotonic_l1(values.ravel(), 0, 5, starts=np.arange(0, values.size, 4)).reshape(values.shape)
    assert np.all(np.diff(fitted, axis=1) >= 0) and fitted.min() >= 0 and fitted.max() <= 5
    best = np.abs(candidates[None, :, :] - values[:, None, :]).sum(axis=2).min(axis=1)
    assert np.array_equal(np.abs(fitted - values).sum(axis=1), best)
