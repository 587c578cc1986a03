"""A public threshold: ``ToPS(threshold=T)`` and ``release --threshold T`` release from position 0, spend nothing."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._durable import seed_key
from dpstream.durable import StreamState
from dpstream.release import ToPS
from dpstream.release.by_key import ByKey, key_secret
from dpstream.release.perturber import HierarchicalPerturber

OPTIONS = ["--epsilon", "1", "--upper-bound", "50", "--max-range", "4096"]


def _values(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).gamma(2.0, 4.0, size=n).clip(0, 50).round(2)


def _run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


@pytest.mark.parametrize("noise", [dict(seed=11), dict(key=b"k" * 32)], ids=["seed", "key"])
def test_the_release_from_position_0_is_the_hierarchy_for_theta(noise):
    values = _values(9000)
    tops = ToPS(epsilon=1.0, upper_bound=50, threshold=12.5, max_range=4096, **noise)
    assert tops.hold == 0 and tops.threshold == 12.5 and tops.public_threshold == 12.5
    perturber = HierarchicalPerturber(threshold=12.5, epsilon=1.0, max_range=4096, **noise)
    released = tops.release(values)
    assert released.shape == values.shape  # nothing held out
    assert np.array_equal(released, perturber.release(np.minimum(values, 12.5)))  # clipped to theta
    assert tops.smoothed_levels == perturber.smoothed_levels and tops.granularity == perturber.granularity


def test_value_by_value_and_a_restored_snapshot_continue_the_same_release():
    values = _values(5000, seed=2)
    whole = ToPS(epsilon=0.5, upper_bound=50, threshold=20, max_range=1024, seed=3).release(values)
    first = ToPS(epsilon=0.5, upper_bound=50, threshold=20, max_range=1024, seed=3)
    head = [first.release_one(v) for v in values[:1500]]
    assert None not in head
    restored = ToPS.from_state(first.state)
    assert restored.public_threshold == 20 and restored.granularity == first.granularity
    assert np.array_equal(np.concatenate([head, restored.release(values[1500:])]), whole)


def test_nothing_is_spent_on_theta():
    tops = ToPS(epsilon=0.5, upper_bound=50, threshold=20, max_range=1024, seed=3)
    guarantee = str(tops.privacy())
    assert "theta = 20 is public" in guarantee and "spends nothing" in guarantee and "no hold-out" in guarantee
    assert "threshold" not in guarantee.split("theta = 20")[0]  # no part for a threshold choice
    assert tops.privacy().epsilon == pytest.approx(tops._stream.spent_epsilon)
    rebuilt = ToPS(**tops.get_params(), seed=3)
    assert tops.get_params()["threshold"] == 20 and rebuilt.hold == 0 and rebuilt.threshold == 20


@pytest.mark.parametrize(("extra", "named"), [
    (dict(hold=100), "hold"), (dict(threshold_epsilon=0.5), "threshold_epsilon"),
    (dict(threshold_method="nm-e"), "threshold_method"), (dict(selection="exponential"), "selection"),
    (dict(query_length=96), "query_length"), (dict(hold=5, profile_bins=4, period=24), "hold, profile_bins"),
])
def test_the_options_of_a_chosen_threshold_are_refused(extra, named):
    with pytest.raises(ValueError, match=f"public threshold is not chosen from a hold-out: {named} do"):
        ToPS(epsilon=1.0, upper_bound=50, threshold=10, **extra)


def test_a_threshold_above_the_bound_is_refused():
    with pytest.raises(ValueError, match="threshold 60.0 is above upper_bound 50.0"):
        ToPS(epsilon=1.0, upper_bound=50, threshold=60)
    assert ToPS(epsilon=1.0, upper_bound=50, threshold=50).threshold == 50


def test_a_period_with_a_public_threshold_is_released_from_its_first_value():
    values = _values(2000, seed=4)
    tops = ToPS(epsilon=1.0, upper_bound=50, threshold=10, period=24, query_length=96, max_range=4096, seed=5)
    assert tops.release(values).shape == values.shape and tops.period_levels is not None


def test_release_threshold_is_the_library_release(tmp_path):
    values = _values(6000)
    (tmp_path / "in.txt").write_text("".join(f"{v:g}\n" for v in values))
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--threshold", 12.5,
                  "--seed", 4)
    assert result.exit_code == 0, result.output
    want = ToPS(epsilon=1, upper_bound=50, threshold=12.5, max_range=4096, seed=4).release(values)
    assert (tmp_path / "out.txt").read_text() == "".join(f"{v!r}\n" for v in want.tolist())
    assert "public, given: no hold-out, nothing spent on it; values above it are clipped to it" in result.output
    assert "released 6,000 values from the first value (no hold-out)." in result.output


@pytest.mark.parametrize(("extra", "flag"), [(["--hold", "100"], "--hold"),
                                             (["--threshold-epsilon", "0.5"], "--threshold-epsilon"),
                                             (["--threshold-method", "nm-e"], "--threshold-method"),
                                             (["--method", "bt"], "--threshold")])
def test_release_refuses_the_options_of_a_chosen_threshold_in_one_line(tmp_path, extra, flag):
    (tmp_path / "in.txt").write_text("1\n2\n")
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--threshold", 5, *extra)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(f"Error: {flag} does not apply")
    assert not (tmp_path / "out.txt").exists()


def test_a_keyed_state_release_with_a_public_threshold_resumes_where_it_ended(tmp_path):
    rng = np.random.default_rng(6)
    values, names = _values(4000, seed=6), [f"m{k}" for k in rng.integers(0, 3, size=4000)]
    lines = ["meter,kWh\n", *(f"{k},{v:g}\n" for k, v in zip(names, values))]

    def run(rows: int):
        (tmp_path / "in.csv").write_text("".join(lines[: rows + 1]))
        return _run("release", tmp_path / "in.csv", "-o", tmp_path / "out.csv", "--state", tmp_path / "state",
                    *OPTIONS, "--threshold", 12.5, "--key-column", "meter", "--column", "kWh", "--seed", 9)

    for rows in (1000, 4000):
        result = run(rows)
        assert result.exit_code == 0, result.output
    assert "resumed" in result.output
    build = lambda name: ToPS(epsilon=1, upper_bound=50, threshold=12.5, max_range=4096,  # noqa: E731
                              key=key_secret(seed_key(9), name))
    got = ByKey(build=build).release(values, names)
    want = io.StringIO()
    csv.writer(want, lineterminator="\n").writerows(
        [["key", "position", "value"], *zip(got.keys, got.positions.tolist(), got.values.tolist())])
    assert (tmp_path / "out.csv").read_text() == want.getvalue() and got.values.size == 4000
    assert StreamState.read(tmp_path / "state").params["threshold"] == 12.5
