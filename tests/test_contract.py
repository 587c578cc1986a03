"""The streaming contract: a snapshot through JSON and ``from_state`` continues a stream bit for bit.

For every mechanism (ToPS, the binary tree, PAK capped and uncapped, ToPL's collector) and every
noise source that can be replayed (``key=``, ``seed=``, the studies' ``FloatNoise``), a stream
cut at any points -- before, at and after the end of the hold-out, inside a chunk or tree and
at its edges -- and continued each time from ``from_state(decode(encode(state)))`` releases
exactly what one uninterrupted object releases.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.durable.encoding import decode, encode
from dpstream.noise.bits import SeededBits
from dpstream.noise.sampler import FloatNoise, ZeroNoise
from dpstream.noise.source import NoiseSource
from dpstream.release import PAK, BinaryTreeCounter, StreamRelease, ToPLCollector, ToPS
from dpstream.release.contract import STATE_VERSION
from dpstream.release.registry import REGISTRY

KEY = bytes(range(32))
HOLD = 300
N = 1800  # crosses the hold-out and several chunks / trees of 512 / 256 values
VALUES = np.random.default_rng(11).gamma(2.0, 6.0, size=N).clip(0, 80).round(1)


def through_json(state):
    """What a state file does to a snapshot."""
    return decode(json.loads(json.dumps(encode(state, "state"), allow_nan=False)), "state")


def noise_kwargs(kind: str) -> dict:
    return {"key": dict(key=KEY), "seed": dict(seed=5), "float": dict(noise=FloatNoise(rng=9))}[kind]


def make_tops(kind: str, **extra) -> ToPS:
    return ToPS(epsilon=0.8, upper_bound=80, hold=HOLD, max_range=512, **noise_kwargs(kind), **extra)


def make_bt(kind: str) -> BinaryTreeCounter:
    return BinaryTreeCounter(epsilon=1.0, upper_bound=80, max_range=256, **noise_kwargs(kind))


def make_pak(kind: str, capped: bool = True) -> PAK:
    return PAK(epsilon=2.0, upper_bound=80, hold=HOLD, max_range=256, capped=capped, **noise_kwargs(kind))


MAKERS = {
    "tops": make_tops,
    "tops-nm-e": lambda kind: make_tops(kind, threshold_method="nm-e", smoother="moving_average", window=3),
    "tops-s0": lambda kind: make_tops(kind, smoothed_levels=0, smoother="exponential", alpha=0.3),
    "tops-period": lambda kind: make_tops(kind, period=48, profile_bins=4),
    "tops-period-nm-e": lambda kind: make_tops(kind, period=48, threshold_method="nm-e"),
    "tops-window-leaves": lambda kind: make_tops(kind, query_length=96),  # the model chooses leaves of 24
    "bt": make_bt,
    "pak": make_pak,
    "pak-uncapped": lambda kind: make_pak(kind, **REGISTRY["pak-uncapped"].fixed),
    # zCDP runs on exact noise only: its float kind replays the seeded path
    "bt-zcdp": lambda kind: REGISTRY["bt-zcdp"].cls(epsilon=1.0, delta=1e-6, upper_bound=80, max_range=256,
                                                    **noise_kwargs("seed" if kind == "float" else kind)),
    "sqrt-zcdp": lambda kind: REGISTRY["sqrt-zcdp"].cls(epsilon=1.0, delta=1e-6, upper_bound=80, max_range=256,
                                                        **noise_kwargs("seed" if kind == "float" else kind)),
    "banded-zcdp": lambda kind: REGISTRY["banded-zcdp"].cls(epsilon=1.0, delta=1e-6, upper_bound=80, max_range=64,
                                                            **noise_kwargs("seed" if kind == "float" else kind)),
    "tops-zcdp": lambda kind: REGISTRY["tops-zcdp"].cls(epsilon=1.0, delta=1e-6, upper_bound=80, hold=HOLD,
                                                        max_range=512,
                                                        **noise_kwargs("seed" if kind == "float" else kind)),
    "tops-zcdp-period": lambda kind: ToPS(rho=0.05, upper_bound=80, hold=HOLD, max_range=512, period=48,
                                          **noise_kwargs("seed" if kind == "float" else kind)),
}
KINDS = ("key", "seed", "float")
#: The registered mechanisms (:mod:`dpstream.release.registry`) whose streaming contract this file tests: those of
#: MAKERS, and ToPL (:func:`test_topl_simulation_continues_from_its_snapshot`).
CONTRACT_TESTED = frozenset(name for name in MAKERS if name in REGISTRY) | {"topl", "aggregate"}  # aggregate: rows
# of units, not values: its contract (batches, one row at a time, snapshots) is tested in tests/test_aggregate.py
CONTRACT_TESTED |= {"locations"}  # rows (time, user, location): tested in tests/test_locations.py


def run_split(make, splits: list[int], *, one_by_one: bool = False) -> np.ndarray:
    """Release VALUES, replacing the mechanism by from_state(its snapshot) at every split point."""
    mechanism = make()
    out: list[np.ndarray] = []
    edges = [0, *sorted(set(splits)), N]
    for start, stop in zip(edges, edges[1:]):
        if start:
            mechanism = type(mechanism).from_state(through_json(mechanism.state))
            assert mechanism.position == start
        if one_by_one:
            released = [mechanism.release_one(v) for v in VALUES[start:stop]]
            out.append(np.array([v for v in released if v is not None], dtype=np.float64))
        else:
            out.append(mechanism.release(VALUES[start:stop]))
    return np.concatenate(out)


_UNSPLIT: dict[tuple[str, str], np.ndarray] = {}


def unsplit(name: str, kind: str) -> np.ndarray:
    if (name, kind) not in _UNSPLIT:
        _UNSPLIT[name, kind] = MAKERS[name](kind).release(VALUES)
    return _UNSPLIT[name, kind]


#: Before, at and after the end of the hold-out; inside, at the edge of and just after a chunk.
EDGES = [1, HOLD - 1, HOLD, HOLD + 1, HOLD + 255, HOLD + 256, HOLD + 257, HOLD + 512, 1023, 1024, 1025, N - 1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(MAKERS))
def test_split_at_every_edge_equals_the_unsplit_run(name, kind):
    want = unsplit(name, kind)
    for split in EDGES:
        np.testing.assert_array_equal(run_split(lambda: MAKERS[name](kind), [split]), want, err_msg=f"split {split}")
    assert want.size == N - MAKERS[name](kind).hold


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(MAKERS))
@settings(max_examples=6, deadline=None)
@given(splits=st.lists(st.integers(min_value=1, max_value=N - 1), min_size=1, max_size=4))
def test_split_at_random_points_equals_the_unsplit_run(name, kind, splits):
    np.testing.assert_array_equal(run_split(lambda: MAKERS[name](kind), splits), unsplit(name, kind))


@pytest.mark.parametrize("name", ["tops", "bt", "pak"])
def test_one_value_at_a_time_after_a_restore_equals_the_batch_run(name):
    want = unsplit(name, "seed")
    got = run_split(lambda: MAKERS[name]("seed"), [HOLD - 7, HOLD + 100, 1300], one_by_one=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(MAKERS))
def test_keyed_snapshots_leave_the_tree_noise_out_and_an_older_one_recomputes_it(name):
    """With a key the noise is a function of the key and the node: the snapshot holds no tree noise,
    and continuing from an older snapshot (a rolled-back state) releases the same values again."""
    mechanism = MAKERS[name]("key")
    mechanism.release(VALUES[:700])
    old = through_json(mechanism.state)
    part = old.get("perturber") or old.get("tree") or old.get("counter")
    assert part["noise" if "noise" in part else "increments"] is None
    later = mechanism.release(VALUES[700:1500])
    again = type(mechanism).from_state(old).release(VALUES[700:1500])
    np.testing.assert_array_equal(again, later)


@pytest.mark.parametrize("name", ["tops", "bt", "pak"])
def test_the_secure_default_never_redraws_noise_of_the_current_tree(name):
    """seed=None: the OS CSPRNG has no state, so the snapshot carries the current tree's noise;
    the restored mechanism releases exactly what the original does until that tree ends."""
    make = {"tops": lambda: ToPS(epsilon=0.8, upper_bound=80, hold=HOLD, max_range=512, smoothed_levels=0),
            "bt": lambda: BinaryTreeCounter(epsilon=1.0, upper_bound=80, max_range=512),
            "pak": lambda: PAK(epsilon=2.0, upper_bound=80, hold=HOLD, max_range=512)}[name]
    mechanism = make()
    hold = mechanism.hold
    mechanism.release(VALUES[: hold + 100])
    twin = type(mechanism).from_state(through_json(mechanism.state))
    rest_of_tree = VALUES[hold + 100 : hold + 512]
    np.testing.assert_array_equal(twin.release(rest_of_tree), mechanism.release(rest_of_tree))
    # the next tree draws fresh bits in each: independent noise
    assert not np.array_equal(twin.release(VALUES[hold + 512 :]), mechanism.release(VALUES[hold + 512 :]))


def test_the_restored_mechanism_states_the_same_privacy_and_threshold():
    for name in MAKERS:
        mechanism = MAKERS[name]("seed")
        for stop in (HOLD - 1, 900):
            mechanism.release(VALUES[mechanism.position : stop])
            twin = type(mechanism).from_state(through_json(mechanism.state))
            assert twin.threshold == mechanism.threshold and twin.position == mechanism.position
            assert twin.privacy() == mechanism.privacy()
            assert isinstance(twin, StreamRelease)


def test_a_snapshot_is_plain_data_and_refused_by_another_mechanism_or_version():
    tops = make_tops("seed")
    tops.release(VALUES[:400])
    state = tops.state
    assert state["mechanism"] == "tops" and state["version"] == STATE_VERSION
    json.dumps(encode(state))  # nothing but JSON data once encoded
    with pytest.raises(ValueError, match="a snapshot of 'tops' cannot restore 'pak'"):
        PAK.from_state(state)
    with pytest.raises(ValueError, match="layout version 99"):
        ToPS.from_state({**state, "version": 99})
    with pytest.raises(TypeError, match="must be the dict its state property gave"):
        ToPS.from_state([1, 2])


def test_a_snapshot_is_a_copy_that_later_releases_do_not_change():
    bt = make_bt("seed")
    bt.release(VALUES[:100])
    state = bt.state
    frozen = json.dumps(encode(state))
    bt.release(VALUES[100:400])
    assert json.dumps(encode(state)) == frozen


def test_an_unkeyed_snapshot_inside_a_tree_without_its_noise_is_refused():
    bt = make_bt("seed")
    bt.release(VALUES[:100])
    state = bt.state
    state["counter"]["increments"] = None
    with pytest.raises(ValueError, match="must carry its noise"):
        BinaryTreeCounter.from_state(state)


def test_custom_smoothers_and_zero_noise():
    class Custom:
        def init(self, prior):
            return prior

        def predict(self, state):
            return state

        def step(self, state, observations):
            return observations.copy(), state

    with pytest.raises(TypeError, match="custom smoother"):
        _ = ToPS(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=512, smoother=Custom(), seed=1).state
    zero = ToPS(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=512, noise=ZeroNoise())
    first = zero.release(VALUES[:700])
    twin = ToPS.from_state(through_json(zero.state))
    np.testing.assert_array_equal(twin.release(VALUES[700:]), zero.release(VALUES[700:]))
    assert first.size == 400


def test_noise_source_snapshots_continue_their_draws():
    from fractions import Fraction

    for source in (NoiseSource(seed=3), NoiseSource(noise=FloatNoise(rng=4)),
                   NoiseSource(seed=SeededBits(seed=8)), NoiseSource(seed=np.random.default_rng(2))):
        source.sampler().laplace_units(Fraction(7, 2), 10)  # part of a pool is left
        twin = NoiseSource.from_state(through_json(source.state))
        for size in (5, 3000, 20000):
            np.testing.assert_array_equal(twin.sampler().laplace_units(Fraction(7, 2), size),
                                          source.sampler().laplace_units(Fraction(7, 2), size))


def test_topl_collector_continues_from_its_snapshot():
    values = VALUES[:1200]

    def run(split: int) -> np.ndarray:
        collector = ToPLCollector(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=4096)
        bits = SeededBits(seed=2)
        out = []
        for start in range(0, values.size, 100):
            if start == split:
                collector = ToPLCollector.from_state(through_json(collector.state))
                assert collector.position == split
            out.append(collector.release(collector.client().report_batch(values[start : start + 100], bits)))
        return np.concatenate(out)

    want = run(-1)
    assert want.size == values.size - HOLD
    for split in (100, HOLD, 600, 1100):
        np.testing.assert_array_equal(run(split), want)
    collector = ToPLCollector(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=4096)
    assert collector.release_one(collector.client().report(3.0, 1)) is None and collector.position == 1


def test_topl_simulation_continues_from_its_snapshot():
    from dpstream.release import ToPL

    values = VALUES[:1200]
    want = ToPL(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=4096, seed=3).release(values)
    for split in (100, HOLD, 700):
        topl = ToPL(epsilon=1.0, upper_bound=80, hold=HOLD, max_range=4096, seed=3)
        first = topl.release(values[:split])
        twin = ToPL.from_state(through_json(topl.state))
        assert twin.position == split and twin.threshold == topl.threshold
        np.testing.assert_array_equal(np.concatenate([first, twin.release(values[split:])]), want)
    assert twin.privacy() == topl.privacy()


@pytest.mark.parametrize("kind", KINDS)
def test_the_window_maker_exercises_leaves_of_the_window(kind):
    """The ``tops-window-leaves`` maker is there for the periodic path chosen by the model: it must
    choose leaves (a fraction of the window), not blocks of b^s."""
    mechanism = MAKERS["tops-window-leaves"](kind)
    mechanism.release(VALUES[: HOLD + 1])
    assert mechanism.leaf is not None and 96 % mechanism.leaf == 0
