"""Private partition selection of the unit aggregate: the threshold against the discrete Laplace law, the release
probability of a partition of one unit's rows computed exactly, the selection without noise, and the command."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.cli.aggregate as aggregate_command
import dpstream.io.rows as rows
from dpstream.cli import cli
from dpstream.noise.discrete_laplace_law import discrete_laplace_pmf
from dpstream.noise.sampler import ZeroNoise
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.partition_selection import selection_threshold
from durable_faults import killed_until_finished

_NS = 10**9
HOUR = 3600


def _tail(t: int, scale: Fraction) -> float:
    """``P[Z >= t]`` for ``Z ~ DLap(scale)``, summed from the law's pmf (not the closed form under test)."""
    z = np.arange(t, t + int(80 * float(scale)) + 200)
    return float(np.sum(discrete_laplace_pmf(z, scale.numerator, scale.denominator)))


@pytest.mark.parametrize(("k", "scale", "delta", "epsilon"), [
    (1, Fraction(2), 1e-6, 1.0), (3, Fraction(6), 1e-5, 1.5), (2, Fraction(7, 3), 1e-3, 0.9),
    (1, Fraction(1, 2), 1e-9, 4.0), (5, Fraction(50), 1e-6, 0.2)])
def test_the_threshold_is_the_least_that_bounds_delta_under_the_law(k, scale, delta, epsilon):
    tau = selection_threshold(k, scale, delta, epsilon)
    factor = k * math.exp(epsilon)
    assert factor * _tail(tau - 1, scale) <= delta  # a partition of one unit's rows: count 1, released if 1 + Z >= tau
    assert tau == 2 or factor * _tail(tau - 2, scale) > delta  # one less would not do


class _Shift:
    """Every draw is ``z``: the release as a function of the noise value, to sum the law over it exactly."""

    def __init__(self, z: int) -> None:
        self.z = z

    def laplace_units(self, scale, size):
        return np.full(size, self.z, dtype=np.int64)

    def laplace(self, scale, size):
        return np.full(size, float(self.z))


def _rows(units_of: dict[str, list[str]], hour: int = 0):
    """Rows of one window: each partition's units, one row each, in the order given."""
    times, units, parts = [], [], []
    for part, names in units_of.items():
        for name in names:
            times.append((hour * HOUR + 60) * _NS)
            units.append(name)
            parts.append(part)
    return np.array(times), np.array(units), np.ones(len(units)), np.array(parts)


def _selected(agg: UnitAggregate, data) -> set[str]:
    out = agg.release(*data[:3], data[3])
    out = [out, agg.release(np.array([2 * HOUR * _NS]), np.array(["later"]), np.ones(1), np.array(["x"]))]
    names = agg.partition_names
    return {names[p] for part in out for p in part.partitions.tolist()}


def test_a_partition_of_one_units_rows_is_released_with_probability_at_most_delta():
    """One unit u adds rows to three partitions no one else has (K = 2: its third is dropped by the bound) beside a
    crowded one; the release is run for every value z of the noise, and the probability that a partition of u's
    rows comes out is the law's mass over the z that release it: at most delta in total."""
    params = dict(epsilon=1.0, bucket=HOUR, window=2 * HOUR, unit_bound=4.0, max_partitions=2,
                  partition_selection="private", selection_delta=1e-4)
    crowd = {"crowd": [f"c{i}" for i in range(50)]}
    with_u = {**crowd, "solo1": ["u"], "solo2": ["u"], "solo3": ["u"]}
    probe = UnitAggregate(**params, noise=ZeroNoise())
    tau, scale = probe.selection_threshold, probe._selector.scale
    released_at = {}
    for z in range(-60, 80):
        released_at[z] = _selected(UnitAggregate(**params, noise=_Shift(z)), _rows(with_u))
    assert all("solo3" not in names for names in released_at.values())  # beyond u's K partitions: never
    assert released_at[-60] == set() and "crowd" in released_at[0]
    law = {z: float(discrete_laplace_pmf(z, scale.numerator, scale.denominator)) for z in released_at}
    for solo in ("solo1", "solo2"):
        zs = [z for z, names in released_at.items() if solo in names]
        assert zs == list(range(tau - 1, 80))  # released exactly when 1 + z >= tau
        probability = sum(law[z] for z in zs) + _tail(80, scale)
        assert 2 * probability <= 1e-4 / math.exp(probe.privacy().epsilon)
    assert probe.privacy().delta == 1e-4
    # a threshold one lower lets out more than delta (the bound is tight, not loose by luck)
    assert 2 * math.exp(probe.privacy().epsilon) * _tail(tau - 2, scale) > 1e-4


def test_without_noise_the_selection_is_the_distinct_unit_counts_against_the_threshold():
    rng = np.random.default_rng(5)
    params = dict(epsilon=1.0, bucket=HOUR, window=2 * HOUR, unit_bound=100.0, max_partitions=2,
                  partition_selection="private", selection_delta=1e-3, partitions=["pub"])
    agg = UnitAggregate(**params, noise=ZeroNoise())
    tau = agg.selection_threshold
    assert 20 <= tau <= 40
    times, units, parts, values = [], [], [], []
    weights = np.arange(1, 13) / 78
    for i in range(300):  # units touch 1 to 3 partitions of 12, of sizes from about tau / 4 to 3 tau
        for part in rng.choice(12, size=int(rng.integers(1, 4)), replace=False, p=weights):
            for _ in range(int(rng.integers(1, 3))):
                times.append(int(rng.integers(0, 2 * HOUR)))
                units.append(f"u{i}")
                parts.append("pub" if part == 0 else f"p{part}")
                values.append(float(rng.integers(1, 4)))
    order = np.argsort(times, kind="stable")
    times = np.array(times)[order] * _NS
    units, parts, values = np.array(units)[order], np.array(parts)[order], np.array(values)[order]
    held: dict[str, list[str]] = {}
    sums: dict[tuple[str, int], float] = {}
    for t, u, p, v in zip(times, units, parts, values):  # the bound, row by row: a unit's first K partitions
        kept = held.setdefault(u, [])
        if p not in kept and len(kept) < 2:
            kept.append(p)
        if p in kept:
            sums[p, int(t // (HOUR * _NS))] = sums.get((p, int(t // (HOUR * _NS))), 0.0) + v
    counts = {p: sum(p in kept for kept in held.values()) for p in set(parts)}
    out = agg.release(times, units, values, parts)
    out = [out, agg.release(np.array([2 * HOUR * _NS]), np.array(["z"]), np.ones(1), np.array(["pub"]))]
    names = agg.partition_names
    got = {(names[p], int(b // (HOUR * _NS))): v for part in out for b, p, v in
           zip(part.buckets.tolist(), part.partitions.tolist(), part.values.tolist()) if b < 2 * HOUR * _NS}
    expected = {p for p, c in counts.items() if p != "pub" and c >= tau}
    assert {p for p, _ in got} == expected | {"pub"}  # the public one always; a private one only when selected
    private = [names[p] for p in out[1].partitions.tolist() if p > 0]
    assert private == sorted(expected) * 2  # by name, not by first arrival (data): bucket by bucket
    assert 0 < len(expected) < len(counts) - 1  # both sides of the threshold occur
    assert got == {(p, b): sums.get((p, b), 0.0) for p in expected | {"pub"} for b in (0, 1)}


def test_selected_partitions_come_out_in_the_order_of_their_names_not_of_their_first_rows():
    """Which partition's first row came first is data (it may be one unit's row): it must not order the output."""
    params = dict(epsilon=1.0, bucket=HOUR, window=HOUR, unit_bound=10.0, max_partitions=1,
                  partition_selection="private", selection_delta=1e-3, noise=ZeroNoise())
    crowd = [f"c{i}" for i in range(80)]
    orders = []
    for first in ("zeta", "alpha"):
        agg = UnitAggregate(**params)
        for part, units in ((first, crowd[:40]), (({"zeta", "alpha"} - {first}).pop(), crowd[40:])):
            data = _rows({part: units})  # a batch each: the first batch's partition is seen first
            assert not len(agg.release(*data[:3], data[3]))
        orders.append([agg.partition_names[p] for p in agg.flush().partitions.tolist()])
    assert orders == [["alpha", "zeta"], ["alpha", "zeta"]]


def test_private_buckets_are_held_until_their_window_closes_and_survive_a_snapshot():
    params = dict(epsilon=1.0, bucket=HOUR, window=3 * HOUR, unit_bound=10.0, max_partitions=1,
                  partition_selection="private", selection_delta=1e-3, partitions=["pub"], seed=7)
    crowd = [f"c{i}" for i in range(60)]
    first = _rows({"pub": crowd[:5], "priv": crowd}, hour=0)
    second = _rows({"pub": crowd[:5], "priv": crowd}, hour=1)
    whole = UnitAggregate(**params)
    out0 = whole.release(*first[:3], first[3])
    out1 = whole.release(*second[:3], second[3])
    assert set(out1.partitions.tolist()) == {0}  # hour 0 of pub only: priv is held
    restored = UnitAggregate.from_state(whole.state)
    tail = _rows({"pub": ["x"]}, hour=3)
    a, b = whole.release(*tail[:3], tail[3]), restored.release(*tail[:3], tail[3])
    assert np.array_equal(a.values, b.values) and np.array_equal(a.partitions, b.partitions)
    priv = a.partitions == 1
    assert whole.partition_names[1] == "priv" and priv.sum() == 3  # the window's three buckets, at its close
    assert np.array_equal(a.buckets[priv], np.arange(3) * HOUR * _NS) and len(out0) == 0


# -- the command ------------------------------------------------------------------------------------------------------

BASE = ["--time-column", "time", "--unit-column", "meter", "--column", "kWh", "--bucket", "1h", "--unit-window", "1d",
        "--unit-bound", "8", "--epsilon", "1", "--upper-bound", "2", "--clip", "--seed", "4"]
PRIVATE = ["--partition-column", "feeder", "--partition-selection", "private", "--unit-max-partitions", "1",
           "--selection-delta", "1e-3"]


def _csv(path, *, days=2, meters=60, seed=0):
    """Two feeders of `meters / 2` meters (30: well above the threshold of 16) and one of a single meter, hourly."""
    rng = np.random.default_rng(seed)
    lines = ["time,meter,kWh,feeder"]
    for hour in range(24 * days):
        stamp = f"2024-03-{1 + hour // 24:02d}T{hour % 24:02d}:{int(rng.integers(60)):02d}:00Z"
        for meter in rng.permutation(meters + 1):
            feeder = "lonely" if meter == meters else f"f{meter % 2}"
            lines.append(f"{stamp},m{meter},{rng.gamma(2, 0.3):.3f},{feeder}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(*args):
    return CliRunner().invoke(cli, ["aggregate", *map(str, args)])


def test_the_command_names_only_selected_partitions_and_states_delta(tmp_path):
    data = _csv(tmp_path / "in.csv")
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, *PRIVATE)
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert {line.split(",")[1] for line in lines[1:]} == {"f0", "f1"} and len(lines) == 1 + 48 * 2
    assert "(1, 0.001)-DP" in result.output
    assert "each meter's readings in each UTC day: ε = 1, δ = 0.001; over 2 days: ε = 2, δ = 0.002" in result.output
    (tmp_path / "parts").write_text("f0\n")
    mixed = _run(data, "-o", tmp_path / "mixed.csv", *BASE, *PRIVATE, "--partitions", tmp_path / "parts")
    assert mixed.exit_code == 0, mixed.output
    lines = (tmp_path / "mixed.csv").read_text().splitlines()
    assert lines[1].startswith("2024-03-01T00:00:00Z,f0,") and lines[25].startswith("2024-03-01T00:00:00Z,f1,")


@pytest.mark.parametrize(("extra", "message"), [
    (["--partition-column", "feeder", "--partition-selection", "private"], "needs max_partitions"),
    ([*PRIVATE, "--selection-delta", "0.01"], "selection_delta must lie in (0, 0.001], got 0.01"),
    ([*PRIVATE, "--selection-delta", "0"], "selection_delta must lie in (0, 0.001], got 0.0"),
    ([*PRIVATE, "--selection-epsilon", "1"], "selection_epsilon must lie strictly between 0 and epsilon 1"),
    ([*PRIVATE, "--selection-epsilon", "1e-300"], "selection_epsilon (--selection-epsilon) 1e-300 is too small for "
                                                  "the selection's exact noise: sensitivity / epsilon must be at most"),
    ([*PRIVATE, "--epsilon", "1e-12"], "half of epsilon 1e-12 (the default selection_epsilon, --selection-epsilon), "
                                       "5e-13 is too small"),
    ([*PRIVATE, "--replace"], "add/remove relation only"),
    ([*PRIVATE, "--unit-max-partitions", "5000"], "up to 1024, got 5000"),
    ([*PRIVATE, "--revised", "r.csv"], "--revised applies with public partitions only"),
    (["--partition-selection", "private", "--unit-max-partitions", "1"], "needs --partition-column"),
    (["--selection-delta", "1e-7"], "--selection-delta applies with --partition-selection private only"),
])
def test_bad_selection_options_are_one_line_usage_errors(tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    data = _csv(tmp_path / "in.csv", days=1, meters=2)
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, *extra)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


def test_kill_and_resume_with_private_selection_writes_what_an_uninterrupted_run_writes(tmp_path, monkeypatch):
    data = _csv(tmp_path / "in.csv", days=2)
    options = [*BASE, *PRIVATE, "--checkpoint-seconds", "0"]
    monkeypatch.setattr(rows, "_BLOCK", 1500)  # CSV batches of about 30 rows: many commits to kill, mid-window
    monkeypatch.setattr(aggregate_command, "_BATCH", 40)
    whole = _run(data, "-o", tmp_path / "whole.csv", "--state", tmp_path / "whole.state", *options)
    assert whole.exit_code == 0, whole.output
    expected = (tmp_path / "whole.csv").read_bytes()
    assert b",f0," in expected and b"lonely" not in expected
    result, kills = killed_until_finished(
        monkeypatch, lambda: _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "out.state", *options),
        seed=3, tries=60)
    assert result.exit_code == 0 and kills >= 3, result.output
    assert (tmp_path / "out.csv").read_bytes() == expected
