"""Revised values of a hierarchical release (:mod:`dpstream.release.revisions`).

A closed leaf's revised values are its measured total (the sum of its first release, the
consistent estimate) spread by the public shape of the predictions; the open leaf's are its
first release.  The checks: per-leaf sums equal the consistent totals (ZeroNoise: the true
truncated sums; seeded noise: the first release's), the truth is recovered when the stream
follows the shape and there is no noise, the first release is never changed, and spreading by
the wrong (flat) shape is caught on a non-flat profile.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.noise import ZeroNoise
from dpstream.release.pak import PAK
from dpstream.release.periodic import PeriodicPerturber
from dpstream.release.perturber import HierarchicalPerturber
from dpstream.release.revisions import Leaves, closed_count, revise
from dpstream.release.tops import ToPS

PERIOD = 24
#: A non-flat profile of the period (four peaks), mean 1, on a dyadic grid: level * profile is exact.
PROFILE = np.tile([0.5, 0.5, 0.75, 1.25, 1.5, 1.5], 4)


def _following_the_shape(days: int, seed: int = 0) -> np.ndarray:
    """A stream whose every period is a level (varying day to day, a multiple of 1/4) times :data:`PROFILE`."""
    levels = np.random.default_rng(seed).integers(2, 9, size=days) / 4.0
    return np.repeat(levels, PERIOD) * np.tile(PROFILE, days)


def _periodic(**kwargs) -> PeriodicPerturber:
    return PeriodicPerturber(threshold=8.0, epsilon=1.0, period=PERIOD, shape=PROFILE, prior=1.0,
                             granularity=1.0 / 64, **kwargs)


def _leaf_sums(values: np.ndarray, leaves: Leaves, count: int) -> np.ndarray:
    return np.add.reduceat(values[:count], leaves.starts(count))


@pytest.mark.parametrize("phase", [0, 5])
def test_no_noise_and_an_exact_profile_give_the_truth(phase):
    stream = _following_the_shape(20)[phase:]
    perturber = _periodic(noise=ZeroNoise(), phase=phase)
    first = perturber.release(stream)
    revised = revise(first, perturber.leaves())
    assert closed_count(stream.size, perturber.leaves()) == stream.size
    np.testing.assert_allclose(revised, stream, rtol=0, atol=1e-12)
    assert np.abs(first - stream).max() > 1.0  # the first release is not the truth: the revision did the work


def test_spreading_by_a_flat_shape_is_caught(monkeypatch):
    """The check above fails for a revision that ignores the shape (an injected bug)."""
    stream = _following_the_shape(10)
    perturber = _periodic(noise=ZeroNoise())
    first = perturber.release(stream)
    monkeypatch.setattr(Leaves, "weights", lambda self, n: np.ones(n))
    wrong = revise(first, perturber.leaves())
    assert np.abs(wrong - stream).max() > 0.1  # what the check above would see
    np.testing.assert_allclose(_leaf_sums(wrong, perturber.leaves(), stream.size),
                               _leaf_sums(stream, perturber.leaves(), stream.size), atol=1e-9)  # sums still agree


@pytest.mark.parametrize("seed", [1, 2])
def test_with_noise_each_closed_period_sums_to_its_consistent_total(seed):
    stream = _following_the_shape(30, seed=seed)[: 30 * PERIOD - 7]  # the last period open
    perturber = _periodic(seed=seed)
    first = perturber.release(stream)
    leaves = perturber.leaves()
    closed = closed_count(stream.size, leaves)
    assert closed == 29 * PERIOD
    revised = revise(first, leaves)
    np.testing.assert_allclose(_leaf_sums(revised, leaves, closed), _leaf_sums(first, leaves, closed),
                               rtol=1e-12, atol=1e-9)
    # within a period the revised values follow the shape: a constant ratio to it
    ratio = (revised[:closed] / np.tile(PROFILE, 29)).reshape(29, PERIOD)
    np.testing.assert_allclose(ratio, ratio[:, :1] * np.ones(PERIOD), rtol=1e-9)
    np.testing.assert_array_equal(revised[closed:], first[closed:])  # the open period: its first release
    assert not np.allclose(_leaf_sums(first, leaves, closed), _leaf_sums(stream, leaves, closed))  # noise there


def test_the_first_release_is_never_changed():
    tops = ToPS(epsilon=1.0, upper_bound=8.0, hold=2 * PERIOD, period=PERIOD, seed=3)
    first = tops.release(_following_the_shape(12))
    kept = first.copy()
    revised = tops.revised(first)
    np.testing.assert_array_equal(first, kept)
    assert revised is not first and not np.shares_memory(revised, first)
    assert not np.array_equal(revised, first)


def test_blocks_of_a_plain_hierarchy_are_revised_flat():
    """Blocks of b^s values (no period): a constant stream without noise is recovered exactly, chunk ends included."""
    perturber = HierarchicalPerturber(threshold=8.0, epsilon=1.0, max_range=40, fanout=4, smoothed_levels=1,
                                      noise=ZeroNoise(), prior=0.0, granularity=1.0 / 64)
    stream = np.full(95, 3.0)
    first = perturber.release(stream)
    leaves = perturber.leaves()
    assert leaves.starts(48).tolist() == [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44]
    revised = revise(first, leaves)
    closed = closed_count(95, leaves)
    assert closed == 92
    np.testing.assert_allclose(revised[:closed], 3.0, atol=1e-12)
    np.testing.assert_array_equal(revised[closed:], first[closed:])


def test_a_resumed_release_revises_as_one_run():
    """revised() reads only the first release and public structure: a release restored from its state revises the
    concatenated first release exactly as the uninterrupted run does."""
    stream = _following_the_shape(15)
    whole = ToPS(epsilon=1.0, upper_bound=8.0, hold=50, period=PERIOD, profile_bins=4, seed=5)
    first = whole.release(stream)
    part = ToPS(epsilon=1.0, upper_bound=8.0, hold=50, period=PERIOD, profile_bins=4, seed=5)
    head = part.release(stream[:200])
    resumed = ToPS.from_state(part.state)
    tail = resumed.release(stream[200:])
    np.testing.assert_array_equal(np.concatenate([head, tail]), first)
    np.testing.assert_array_equal(resumed.revised(np.concatenate([head, tail])), whole.revised(first))
    assert whole._stream.leaves().shape is not None  # the private profile shapes the revision


def test_revised_wants_every_released_value_and_a_hierarchy():
    tops = ToPS(epsilon=1.0, upper_bound=8.0, hold=24, period=PERIOD, seed=1)
    assert tops.revised([]).size == 0
    first = tops.release(np.ones(100))
    with pytest.raises(ValueError, match="every value released so far"):
        tops.revised(first[1:])
    pak = PAK(epsilon=1.0, upper_bound=8.0, hold=64, max_range=256, seed=1)
    released = pak.release(np.ones(100))
    with pytest.raises(TypeError, match="no revised values"):
        pak.revised(released)


def test_a_leaf_the_shape_gives_no_weight_is_spread_evenly():
    leaves = Leaves(length=4, phase=2, shape=np.array([1.0, 1.0, 0.0, 0.0]))
    assert revise(np.array([1.0, 3.0, 2.0, 2.0, 2.0, 2.0]), leaves).tolist() == [2.0, 2.0, 4.0, 4.0, 0.0, 0.0]


def test_leaves_refuse_a_shape_of_the_wrong_length():
    with pytest.raises(ValueError, match="one number per position"):
        Leaves(length=4, shape=np.ones(3))


def test_a_periodic_service_stream_publishes_its_leaves():
    from dpstream.service.mechanisms import stream_facts

    tops = ToPS(epsilon=1.0, upper_bound=8.0, hold=30, period=PERIOD, seed=1)
    assert "leaves" not in stream_facts(tops)  # before the hold-out ends
    tops.release(np.ones(40))
    assert stream_facts(tops)["leaves"] == {"length": PERIOD, "phase": 30 % PERIOD, "chunk": tops.leaves().chunk,
                                            "first_position": 30, "shape": None}
    plain = ToPS(epsilon=1.0, upper_bound=8.0, hold=30, max_range=256, seed=1)
    plain.release(np.ones(40))
    assert "leaves" not in stream_facts(plain) and plain.leaves() is not None


def test_window_leaves_are_revised_with_their_phase():
    """With query_length the model may choose leaves of a fraction of the window, counted from the stream's first
    value (held-out values included): without noise each closed leaf's revised values sum to its true truncated sum
    and are flat."""
    rng = np.random.default_rng(4)
    stream = (np.tile(PROFILE, 4 * 40) * rng.uniform(0.5, 1.5, size=4 * 40 * PERIOD)).round(2)
    tops = ToPS(epsilon=1.0, upper_bound=8.0, hold=900, query_length=4 * PERIOD, noise=ZeroNoise())
    first = tops.release(stream)
    if tops.leaf is None:
        pytest.skip("the model chose blocks of b^s here")  # a fixed input and ZeroNoise: it does not
    leaves = tops.leaves()
    assert (leaves.length, leaves.phase) == (tops.leaf, 900 % tops.leaf)
    truth = np.minimum(stream[900:], tops.threshold)
    closed = closed_count(first.size, leaves)
    revised = tops.revised(first)
    grid = tops.leaf * tops.granularity / 2  # each value is rounded to the grid by at most half a step
    np.testing.assert_allclose(_leaf_sums(revised, leaves, closed), _leaf_sums(truth, leaves, closed), atol=grid)
    starts = leaves.starts(closed)
    assert np.all(revised[starts[1:]] == revised[starts[1:] + 1])  # flat inside a leaf
