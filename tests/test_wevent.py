"""w-event per stream and per key (``release --w-event N``): sensitivities by brute force, batches, resume, the CLI.

The sensitivity tests change one window of ``N`` consecutive values in every allowed way (every
start, every value of a set that reaches 0, theta and above theta in each position), release
both streams without noise and compute the L1 change of every node of every level of the
hierarchy (the periods, their parents up to the chunk), against the bound the release derives
(:func:`~dpstream.release.wevent.window_sensitivity`) -- which the brute force must also reach.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.noise.sampler import ZeroNoise
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee, WEvent
from dpstream.release import ToPS
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.wevent import bound_periods, horizon, window_sensitivity
from dpstream.service.mechanisms import build_stream
from test_resume import kill_and_resume, timed_run


def tops(**params) -> ToPS:
    base = dict(epsilon=1.0, upper_bound=2.0, threshold=1.0, period=4, max_range=16, fanout=2)
    return ToPS(**{**base, **params})


def level_sums(leaves: np.ndarray, fanout: int, per_chunk: int) -> list[np.ndarray]:
    """Every level of each chunk's tree over ``leaves`` (totals of consecutive nodes), leaves first."""
    levels, nodes = [], leaves.reshape(-1, per_chunk)
    while True:
        levels.append(nodes.ravel())
        if nodes.shape[1] == 1:
            return levels
        nodes = nodes.reshape(nodes.shape[0], -1, fanout).sum(axis=2)


def released_leaves(mechanism: ToPS, stream: np.ndarray) -> np.ndarray:
    """The period totals the release measured, in grid units (without noise: each period's released values sum to
    its bounded total, up to float rounding)."""
    out = mechanism.release(stream)
    return np.rint(out.reshape(-1, mechanism.period).sum(axis=1) / mechanism.granularity).astype(np.int64)


def brute_force(window: int, bound: float | None, base: np.ndarray) -> tuple[list[int], list[int], int]:
    """The largest L1 change of each level and of each node width over every change of one window of ``base``."""
    probe = tops(w_event=window, period_bound=bound, noise=ZeroNoise())
    reference = level_sums(released_leaves(probe, base), 2, 16 // 4)
    worst_level = [0] * len(reference)
    worst_node = [0] * len(reference)
    # 2.0 is above theta = 1 (truncated); longer windows take the extremes only
    choices = (0.0, 0.5, 1.0, 2.0) if window <= 3 else (0.0, 2.0)
    for start in range(base.size - window + 1):
        for values in itertools.product(choices, repeat=window):
            stream = base.copy()
            stream[start : start + window] = values
            moved = level_sums(released_leaves(tops(w_event=window, period_bound=bound, noise=ZeroNoise()), stream),
                               2, 4)
            for level, (a, b) in enumerate(zip(reference, moved)):
                worst_level[level] = max(worst_level[level], int(np.abs(a - b).sum()))
                worst_node[level] = max(worst_node[level], int(np.abs(a - b).max()))
    return worst_level, worst_node, round(1.0 / probe.granularity)


@pytest.mark.parametrize(("window", "bound"), [(3, None), (3, 1.5), (4, 1.0), (6, 1.5)])
def test_every_level_moves_by_at_most_the_derived_sensitivity_and_some_window_reaches_it(window, bound):
    # 8 periods, two chunks of 4 (windows across them too): runs of 0 and theta where a window can reach the bound
    base = np.concatenate((np.zeros(12), np.ones(8), np.tile([0.0, 1.0, 0.5, 0.0], 3)))
    worst_level, worst_node, theta = brute_force(window, bound, base)
    derived = window_sensitivity(window, 4, theta, None if bound is None else round(bound * theta))
    assert max(worst_level) == derived  # reached (on the leaves at least) ...
    assert all(worst <= derived for worst in worst_level)  # ... and never exceeded on any level
    # a node of m periods never moves by more than min(m periods, w values) of theta
    assert all(worst <= min(4 * 2**level, window) * theta for level, worst in enumerate(worst_node))
    if bound is None:
        assert derived == window * theta  # each level's L1 sensitivity is w theta: exactly group privacy


def test_the_binary_trees_levels_move_by_w_tau_at_most_and_reach_it():
    window, tau = 3, 1.0
    base = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])

    def levels(stream: np.ndarray) -> list[np.ndarray]:
        counter = BinaryTreeCounter(epsilon=1.0, upper_bound=tau, max_range=8, w_event=window, noise=ZeroNoise())
        return level_sums(np.rint(counter.release(stream) / counter.granularity).astype(np.int64), 2, 8)

    reference, worst = levels(base), 0
    for start in range(base.size - window + 1):
        for values in itertools.product((0.0, tau), repeat=window):
            stream = base.copy()
            stream[start : start + window] = values
            worst = max(worst, *(int(np.abs(a - b).sum()) for a, b in zip(reference, levels(stream))))
    units = round(tau / BinaryTreeCounter(epsilon=1.0, upper_bound=tau, max_range=8).granularity)
    assert worst == window_sensitivity(window, 1, units) == window * units


def test_bounding_periods_matches_the_running_total_value_by_value():
    rng = np.random.default_rng(5)
    values = rng.integers(0, 7, size=200)
    running, expected = 3, []
    for position, value in enumerate(values, start=9):
        if position % 8 == 0:
            running = 0
        cut = min(int(value), 10 - running)
        expected.append(cut)
        running += cut
    assert bound_periods(values, start=9, running=3, period=8, bound=10).tolist() == expected


@pytest.mark.parametrize("bound", [None, 30.0])
def test_a_batch_releases_what_values_one_at_a_time_release(bound):
    rng = np.random.default_rng(2)
    stream = rng.gamma(0.6, 0.5, size=48 * 20).clip(0, 5)
    params = dict(epsilon=1.0, upper_bound=5.0, threshold=2.0, period=48, max_range=48 * 8, w_event=48,
                  period_bound=bound)
    whole = ToPS(**params, seed=3).release(stream)
    pieces = ToPS(**params, seed=3)
    cuts = np.sort(rng.choice(stream.size, size=9, replace=False))
    parts = [pieces.release(part) for part in np.split(stream, cuts)]
    one = ToPS(**params, seed=3)
    single = [one.release_one(float(value)) for value in stream]
    assert np.array_equal(whole, np.concatenate(parts)) and np.array_equal(whole, single)
    restored = ToPS.from_state(pieces.state)  # the running period total is the perturber's own
    assert restored.w_event == 48 and restored.period_bound == bound
    assert np.array_equal(restored.release(stream[:100]), pieces.release(stream[:100]))
    bt = dict(epsilon=1.0, upper_bound=5.0, max_range=64, w_event=6)
    counter = BinaryTreeCounter(**bt, seed=1)
    assert np.array_equal(BinaryTreeCounter(**bt, seed=1).release(stream), [counter.release_one(v) for v in stream])


def test_without_a_bound_w_event_is_group_privacy_to_the_bit():
    """The derivation's point: each level's sensitivity is w theta, so the release is the event-level one at eps / w."""
    stream = np.random.default_rng(1).uniform(0, 3, size=48 * 6)
    common = dict(upper_bound=5.0, threshold=2.0, period=48, max_range=48 * 4, seed=7)
    assert np.array_equal(ToPS(epsilon=1.0, w_event=48, **common).release(stream),
                          ToPS(epsilon=1.0 / 48, **common).release(stream))
    blocks = dict(upper_bound=5.0, threshold=2.0, max_range=4096, seed=7)  # no period: s by Eq. 7, for eps / w
    assert np.array_equal(ToPS(epsilon=1.0, w_event=48, **blocks).release(stream),
                          ToPS(epsilon=1.0 / 48, **blocks).release(stream))
    tree = dict(upper_bound=5.0, max_range=64, seed=7)
    assert np.array_equal(BinaryTreeCounter(epsilon=2.0, w_event=8, **tree).release(stream),
                          BinaryTreeCounter(epsilon=0.25, **tree).release(stream))


def test_the_guarantee_is_about_w_event_and_composes_only_with_the_same_window():
    mechanism = ToPS(epsilon=1.0, upper_bound=5.0, threshold=5.0, period=48, max_range=48 * 4, w_event=48,
                     period_bound=30.0, seed=0)
    guarantee = mechanism.privacy()
    assert guarantee.neighbours == WEvent(48) and 1.0 - 1e-9 < guarantee.epsilon <= 1.0
    assert "S = 60" in guarantee.composition and "C = 30" in guarantee.composition
    # the noise per level is d S / eps with d = 1 and S = 2C = 60, a quarter of w theta = 240 (group privacy)
    assert mechanism.period_levels == 1 and math.isclose(mechanism._stream.noise_scale, 60.0, rel_tol=1e-9)
    unbounded = ToPS(epsilon=1.0, upper_bound=5.0, threshold=5.0, period=48, max_range=48 * 4, w_event=48, seed=0)
    assert math.isclose(unbounded._stream.noise_scale, 240.0, rel_tol=1e-9)
    same = BinaryTreeCounter(epsilon=0.5, upper_bound=1.0, max_range=8, w_event=48, seed=0).privacy()
    assert guarantee.compose_sequential(same).epsilon == pytest.approx(1.5)
    other = BinaryTreeCounter(epsilon=0.5, upper_bound=1.0, max_range=8, w_event=24, seed=0).privacy()
    event = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="")
    for wrong in (other, event):
        with pytest.raises(ValueError, match="needs one neighbour relation"):
            guarantee.compose_sequential(wrong)
    assert horizon(1440, 48, 1.0).endswith("over 1,440 values (30 disjoint windows of 48): epsilon = 30 by composition")


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "pak"], "--w-event does not apply to --method pak."),
    (["--method", "topl"], "--w-event does not apply to --method topl."),
    (["--hold", "8"], "w_event needs a public threshold"),
    (["--threshold", "1", "--period-bound", "3"], "period_bound bounds each period's total: it needs period."),
    (["--threshold", "1", "--w-event", "0"], "w_event must be an integer >= 1, got 0."),
    (["--method", "bt", "--period-bound", "3"], "--period-bound does not apply to --method bt."),
    # a huge window was refused as "epsilon must be at least 1e-12 ..., got 1e-20", naming a value never given
    (["--threshold", "1", "--w-event", str(10**20)], "w_event = 100,000,000,000,000,000,000 leaves epsilon 1e-20"),
    (["--method", "bt", "--w-event", str(10**20)], "w_event = 100,000,000,000,000,000,000 leaves epsilon 1e-20"),
])
def test_bad_options_are_one_line_errors(tmp_path, extra, message):
    source = tmp_path / "in.txt"
    source.write_text("1\n" * 20)
    args = ["release", str(source), "-o", str(tmp_path / "out"), "--epsilon", "1", "--upper-bound", "5",
            "--w-event", "4", *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error:")


def write_meters(path, meters: int, days: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    rows = [f"m{m},{rng.gamma(0.7, 0.4):.3f}" for _ in range(days * 48) for m in range(meters)]
    path.write_text("meter,kWh\n" + "\n".join(rows) + "\n")


W_EVENT = ["--column", "kWh", "--key-column", "meter", "--epsilon", "1", "--upper-bound", "5", "--clip",
           "--threshold", "2", "--period", "48", "--max-range", "768", "--w-event", "48", "--period-bound", "20"]


def test_the_cli_states_the_window_and_the_horizon_per_key(tmp_path):
    source = tmp_path / "meters.csv"
    write_meters(source, meters=3, days=10)
    result = CliRunner().invoke(cli, ["release", str(source), "-o", str(tmp_path / "out.csv"), *W_EVENT,
                                      "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "neighbours: w-event (w = 48)" in result.output and "S = 40" in result.output  # 2C
    assert ("w-event per key: any 48 consecutive values: epsilon = 1; over 480 values (10 disjoint windows of 48): "
            "epsilon = 10 by composition (the longest key).") in result.output


def test_a_killed_w_event_release_resumes_and_never_releases_a_position_twice(tmp_path):
    source = tmp_path / "meters.csv"
    write_meters(source, meters=100, days=30)  # 144,000 rows: three batches of 65,536
    reference = tmp_path / "reference.csv"

    def args(out, state, *extra):
        return ["release", str(source), "-o", str(out), "--state", str(state), "--checkpoint-seconds", "0", *W_EVENT,
                "--seed", "9", *extra]

    duration = timed_run(args(reference, tmp_path / "reference.state"))
    want = reference.read_bytes()
    assert want.count(b"\n") == 1 + 100 * 30 * 48
    out = tmp_path / "out.csv"
    seen, killed = kill_and_resume(args(out, tmp_path / "state"), out, kills=8, final_size=len(want),
                                   duration=duration, rng=np.random.default_rng(3))
    assert out.read_bytes() == want and all(want.startswith(published) for published in seen)
    assert killed >= 4 and len({len(published) for published in seen}) >= 2  # killed after different batches
    # the same command again: nothing left to release, nothing written twice
    assert timed_run(args(out, tmp_path / "state")) >= 0 and out.read_bytes() == want


def test_the_service_does_not_offer_w_event():
    """Its cards say what each value gets, at event level: a w-event stream would be misdescribed there."""
    for method in ("tops", "bt"):
        with pytest.raises(ValueError, match="takes no parameter 'w_event'"):
            build_stream(method, {"epsilon": 1.0, "upper_bound": 1.0, "threshold": 1.0, "w_event": 4}
                         if method == "tops" else {"epsilon": 1.0, "upper_bound": 1.0, "w_event": 4}, bytes(32))
