"""Location counts from raw trajectories (``dpstream.release.locations``): sensitivity against brute force, batches
against one row at a time, snapshots, the noise model the post-processing reads, and refused inputs."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import numpy as np
import pytest

from dpstream.datasets.trajectories import trajectories
from dpstream.durable.encoding import decode, encode
from dpstream.noise.sampler import ZeroNoise
from dpstream.postprocess import laplace_scale, postprocess
from dpstream.privacy import USER_STEP
from dpstream.release.locations import LocationCounts, UserSteps, released_users, trajectory_statement

NS = 10**9
PLACES = ["a", "b", "c"]


def _rows(paths: dict[str, list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (time-major) of users' paths: ``paths[user][t]`` is a location index, or -1 where the user has no row."""
    steps = max(len(path) for path in paths.values())
    rows = [(t, user, PLACES[path[t]]) for t in range(steps) for user, path in paths.items()
            if t < len(path) and path[t] >= 0]
    return (np.array([t for t, _, _ in rows], dtype=np.int64) * NS, np.array([u for _, u, _ in rows]),
            np.array([place for _, _, place in rows]))


def _counts(paths: dict[str, list[int]], steps: int, **options) -> np.ndarray:
    """What the release computes before noise: the counts of every step 0 .. steps - 1."""
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, noise=ZeroNoise(), **options)
    times, users, places = _rows(paths)
    out = release.release(times, users, places)
    out = np.concatenate((out.counts, release.flush().counts))
    assert out.shape == (steps, len(PLACES))
    return out


def _worst_window(a: np.ndarray, b: np.ndarray, w: int) -> int:
    """The largest L1 change over ``w`` consecutive steps."""
    per_step = np.abs(a - b).sum(axis=1)
    return max(int(per_step[t:t + w].sum()) for t in range(len(per_step) - w + 1))


BASE = {"u0": [0, 1, 2, 0], "u1": [1, 1, 0, 2], "u2": [2, 0, 0, 1]}


@pytest.mark.parametrize("w", [1, 2, 3])
def test_bounded_sensitivity_against_every_move_of_one_user_within_a_window(w):
    """Every change of one user's locations within w consecutive steps (every user, window and path): the L1
    change over any w steps is at most 2w, reached, and the noise spends at most epsilon on it (exact rationals)."""
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, users=3, w_event=w, seed=0)
    base = _counts(BASE, 4, users=3)
    worst = 0
    for user, start in itertools.product(BASE, range(4 - w + 1)):
        for moved in itertools.product(range(3), repeat=w):
            path = list(BASE[user])
            path[start:start + w] = moved
            worst = max(worst, _worst_window(base, _counts({**BASE, user: path}, 4, users=3), w))
    assert worst == 2 * w
    assert Fraction(worst) / release.noise_scale <= Fraction(1)
    assert release.relation() == (USER_STEP if w == 1 else UserSteps(w, True))


@pytest.mark.parametrize("w", [1, 2])
def test_unbounded_sensitivity_against_every_user_added_or_removed(w):
    """Every user removed, and every new user added with any trajectory (a row or none at each step): the L1
    change over any w steps is at most w, reached, within the budget."""
    release = LocationCounts(epsilon=0.7, locations=PLACES, step=1, neighbours="unbounded", w_event=w, seed=0)
    base = _counts(BASE, 4, neighbours="unbounded")
    changes = [_counts({k: v for k, v in BASE.items() if k != user}, 4, neighbours="unbounded") for user in BASE]
    for path in itertools.product(range(-1, 3), repeat=4):
        changes.append(_counts({**BASE, "new": list(path)}, 4, neighbours="unbounded"))
    worst = max(_worst_window(base, other, w) for other in changes)
    assert worst == w
    assert Fraction(worst) / release.noise_scale <= Fraction(7, 10) * (1 + Fraction(1, 10**12))
    whole = max(int(np.abs(base - other).sum()) for other in changes)  # a whole trajectory: T steps, T eps / w
    assert "ε = 2.8 by composition" in trajectory_statement(release, 4) or w != 1
    assert float(whole / release.noise_scale) <= 4 * 0.7 / w + 1e-12


def _release(chunks, **options):
    times, users, places = _rows(_paths())
    release = LocationCounts(epsilon=0.5, locations=PLACES, step=1, users=5, **options)
    parts, edges = [], [0, *chunks, times.size]
    for lo, hi in zip(edges, edges[1:]):
        parts.append(release.release(times[lo:hi], users[lo:hi], places[lo:hi]))
    parts.append(release.flush())
    return np.concatenate([p.steps for p in parts]), np.concatenate([p.counts for p in parts])


def _paths():
    rng = np.random.default_rng(3)
    return {f"u{i}": rng.integers(0, 3, size=40).tolist() for i in range(5)}


@pytest.mark.parametrize("noise", [{"seed": 7}, {"key": bytes(range(32))}])
def test_batches_of_any_size_release_what_one_row_at_a_time_releases(noise):
    whole = _release([], **noise)
    one = _release(list(range(1, 200)), **noise)
    cuts = _release(sorted(np.random.default_rng(1).choice(np.arange(1, 200), 9, replace=False).tolist()), **noise)
    for other in (one, cuts):
        assert np.array_equal(whole[0], other[0]) and np.array_equal(whole[1], other[1])
    assert whole[1].shape == (40, 3) and not np.array_equal(whole[1].sum(axis=1), np.full(40, 5))


def test_a_snapshot_through_json_continues_bit_for_bit():
    times, users, places = _rows(_paths())
    for noise in ({"seed": 7}, {"key": bytes(range(32))}):
        expected = _release([], **noise)[1]
        release = LocationCounts(epsilon=0.5, locations=PLACES, step=1, users=5, **noise)
        out = []
        for lo, hi in ((0, 13), (13, 101), (101, 200)):  # cut inside a step, twice
            out.append(release.release(times[lo:hi], users[lo:hi], places[lo:hi]).counts)
            state = decode(json.loads(json.dumps(encode(release.state, "state"))), "state")
            release = LocationCounts.from_state(state)
        out.append(release.flush().counts)
        assert np.array_equal(np.concatenate(out), expected)


@pytest.mark.parametrize(("neighbours", "w", "epsilon"), [("bounded", 1, 1.0), ("bounded", 24, 1.0),
                                                          ("unbounded", 7, 0.3), ("unbounded", 1, 0.05)])
def test_the_noise_model_gives_the_estimators_the_scale_drawn(neighbours, w, epsilon):
    users = 10 if neighbours == "bounded" else None
    release = LocationCounts(epsilon=epsilon, locations=PLACES, step=1, neighbours=neighbours, users=users,
                             w_event=w, seed=0)
    model = release.noise_model()
    assert Fraction(laplace_scale(model["epsilon"], model["sensitivity"])) == release.noise_scale
    assert model["likelihood"] == "discrete_laplace"
    assert release.noise_scale >= Fraction(w * {"bounded": 2, "unbounded": 1}[neighbours]) / Fraction(epsilon)


def test_the_noise_has_the_variance_of_its_scale():
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, neighbours="unbounded", w_event=3, seed=5)
    steps = 20_000
    out = release.release(np.arange(steps, dtype=np.int64) * NS, np.full(steps, "u"), np.full(steps, "a"))
    noise = (out.counts - np.array([1, 0, 0])).ravel().astype(float)
    a = np.exp(-1 / release.scale)
    variance = 2 * a / (1 - a) ** 2  # discrete Laplace of scale 3
    assert abs(noise.var() / variance - 1) < 5 * np.sqrt(5 / noise.size)  # kurtosis about 6: the ratio's sd sqrt(5/n)


def test_postprocessing_with_the_noise_model_beats_the_raw_counts():
    data = trajectories(users=300, locations=5, steps=60, seed=4)
    times = np.repeat(np.arange(60, dtype=np.int64) * 3600 * NS, 300)
    release = LocationCounts(epsilon=1.0, locations=data.locations, step=3600, users=300, w_event=6, seed=2)
    out = release.release(times, np.tile(data.users, 60), np.array(data.locations)[data.path].ravel())
    noisy = np.concatenate((out.counts, release.flush().counts)).astype(float)
    truth = data.counts()
    raw = np.mean((noisy - truth) ** 2)
    for method in ("map", "mean", "kalman"):
        estimate = postprocess(noisy, data.matrix, users=300, method=method, **release.noise_model())
        assert np.mean((estimate.counts - truth) ** 2) < raw, method
    assert released_users(noisy) == pytest.approx(300, abs=40)


@pytest.mark.parametrize(("cut", "rows", "message"), [
    (None, ("0,0,1", "u0,u0,u1", "a,b,a"), "row 2: the user 'u0' has a second row in step 1970-01-01T00:00:00Z"),
    (1, ("0,0", "u0,u0", "a,b"), "row 2: the user 'u0' has a second row"),  # across two batches
    (None, ("0,0", "u0,u1", "a,z"), "row 2: the location 'z' is not one of the 3 public locations"),
    (None, ("1,0", "u0,u1", "a,a"), "row 2: its step 1970-01-01T00:00:00Z is before step 1970-01-01T00:00:01Z"),
    (1, ("1,0", "u0,u1", "a,a"), "row 2: its step 1970-01-01T00:00:00Z is before"),
])
def test_bad_rows_are_refused_in_one_line_naming_the_row(cut, rows, message):
    times, users, places = (np.array(text.split(",")) for text in rows)
    times = times.astype(np.int64) * NS
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, neighbours="unbounded", seed=0)
    with pytest.raises(ValueError, match=message) as error:
        edges = [0, times.size] if cut is None else [0, cut, times.size]
        for lo, hi in zip(edges, edges[1:]):
            release.release(times[lo:hi], users[lo:hi], places[lo:hi])
    assert "\n" not in str(error.value)


def test_a_row_of_the_step_flushed_is_refused():
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, neighbours="unbounded", seed=0)
    release.release(np.array([0]), ["u"], ["a"])
    assert len(release.flush()) == 1 and len(release.flush()) == 0
    with pytest.raises(ValueError, match="row 2: its step 1970-01-01T00:00:00Z is the step released at the end"):
        release.release(np.array([0]), ["v"], ["a"])


def test_bounded_steps_must_hold_every_user_once():
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, users=2, seed=0)
    with pytest.raises(ValueError, match="step 1970-01-01T00:00:01Z has 0 rows, but under bounded neighbours each of "
                                         "the 2 users"):
        release.release(np.array([0, 0, 2, 2]) * NS, ["u", "v", "u", "v"], ["a"] * 4)
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=1, users=2, seed=0)
    assert len(release.release(np.array([0, 0, 1]) * NS, ["u", "v", "u"], ["a"] * 3)) == 1
    with pytest.raises(ValueError, match="step 1970-01-01T00:00:01Z has 1 row, but"):
        release.flush()
    gaps = LocationCounts(epsilon=1.0, locations=PLACES, step=1, neighbours="unbounded", seed=0)
    assert len(gaps.release(np.array([0, 5]) * NS, ["u", "u"], ["a", "b"])) == 5  # empty steps released (noise)


@pytest.mark.parametrize(("options", "message"), [
    ({"neighbours": "bounded"}, "bounded neighbours need the public number of users"),
    ({"neighbours": "unbounded", "users": 5}, "not public under unbounded neighbours"),
    ({"users": 5, "w_event": 0}, "w_event"),
    ({"users": 5, "locations": ["a", "a"]}, "distinct names"),
])
def test_bad_parameters_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        LocationCounts(**{"epsilon": 1.0, "locations": PLACES, "step": 1, **options})


def test_the_guarantee_says_the_window_and_the_whole_trajectory():
    release = LocationCounts(epsilon=1.0, locations=PLACES, step=3600, users=5, w_event=24, seed=0)
    text = str(release.privacy())
    assert text.startswith("1-DP; neighbours: bounded databases of n users (n public) differing in one user's "
                           "locations at up to 24 consecutive time steps")
    assert "each step spends 2/scale <= epsilon/24" in text and release.scale == 48.0
    assert trajectory_statement(release, 200).startswith(
        "each user's locations at any 24 consecutive steps: ε = 1; the whole trajectory of 200 steps: ε = 8.33333")
    single = LocationCounts(epsilon=0.5, locations=PLACES, step=1, users=5, seed=0)
    assert single.privacy().neighbours == USER_STEP
    assert trajectory_statement(single, 10) == ("each user's location at each step: ε = 0.5; the whole trajectory of "
                                                "10 steps: ε = 5 by composition")
