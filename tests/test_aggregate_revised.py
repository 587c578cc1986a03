"""Revised values of the unit aggregate: exact under an exact profile, the least-squares window totals, variance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.hierarchy.arithmetic import GridArithmetic
from dpstream.noise.discrete_laplace_law import double_geometric_variance
from dpstream.noise.sampler import ZeroNoise
from dpstream.release.aggregate import Released, UnitAggregate
from dpstream.release.aggregate_revisions import revise_released, revise_windows

NS = 10**9
PROFILE = np.array([0.1, 0.2, 0.3, 0.4])


def _release(agg, times, units, values):
    out = agg.release(np.asarray(times, dtype=np.int64) * NS, np.asarray(units), np.asarray(values, dtype=float))
    last = agg.flush()
    return Released(*(np.concatenate((getattr(out, f), getattr(last, f))) for f in ("buckets", "partitions",
                                                                                   "values")))


def _noise_only(windows, *, seed, width=4, levels=None):
    """The first release of ``windows`` windows of zero truth (a row at the first and the last bucket: every bucket
    in between is released), and the variance ``v`` of one node's noise."""
    agg = UnitAggregate(epsilon=1.0, bucket=1, window=width, unit_bound=10.0, seed=seed, levels=levels)
    released = _release(agg, [0, width * windows - 1], ["a", "b"], [0.0, 0.0])
    step = agg.granularity
    return agg, released, double_geometric_variance(agg.noise_scale / step) * step**2


def test_zero_noise_and_an_exact_profile_give_the_truth():
    totals = np.array([10.0, 20.0, 40.0, 30.0])
    truth = totals[:, None] * PROFILE  # each window's buckets follow PROFILE exactly
    agg = UnitAggregate(epsilon=1.0, bucket=1, window=4, unit_bound=100.0, upper_bound=20.0, noise=ZeroNoise())
    times = np.arange(truth.size)
    released = _release(agg, times, [f"u{t}" for t in times], truth.ravel())
    assert np.array_equal(released.values, truth.ravel())
    revised = agg.revised(released)
    assert np.allclose(revised, truth.ravel(), rtol=1e-12)
    assert np.allclose(agg.revised(released, history=1), truth.ravel(), rtol=1e-12)


def test_each_closed_window_keeps_its_least_squares_total_and_the_open_window_its_first_release():
    agg, released, _ = _noise_only(40, seed=1)
    first = released.values.copy()
    cut = len(released) - 2  # the last window is open: two of its buckets released
    partial = Released(released.buckets[:cut], released.partitions[:cut], released.values[:cut])
    revised = agg.revised(partial, history=3)
    assert np.array_equal(released.values, first)  # never changes the first release
    windows = revised[: cut - 2].reshape(-1, 4)
    assert np.allclose(windows.sum(axis=1), first[: cut - 2].reshape(-1, 4).sum(axis=1), rtol=0, atol=1e-9)
    assert np.array_equal(revised[cut - 2 :], first[cut - 2 : cut])
    assert np.array_equal(revised[:4], first[:4])  # the first window has no past: its first release
    assert not np.allclose(revised[4:8], first[4:8])


def test_partitions_and_cycles_are_revised_on_their_own():
    first = np.arange(2 * 3 * 7 * 2, dtype=float).reshape(7 * 2, 3, 2) % 5 + 1  # 14 windows, 3 partitions
    revised = revise_windows(first, history=7, cycle=7)
    assert np.array_equal(revised[:7], first[:7])
    for k in range(7, 14):
        for p in range(3):
            expected = first[k, p].sum() * first[k - 7, p] / first[k - 7, p].sum()
            assert np.allclose(revised[k, p], expected)


def test_the_first_release_of_a_window_is_least_squares_over_both_of_its_nodes():
    """The window total and each bucket of the first release have variance ``v W / (W + 1)``: least squares
    over the window node and the leaves (the leaves alone: ``W v`` for the total)."""
    windows, width = 12000, 4
    _, released, v = _noise_only(windows, seed=2)
    noise = released.values.reshape(windows, width)
    expected = v * width / (width + 1)
    tolerance = 4 * math.sqrt(5.0 / windows)  # four standard errors of a variance estimate (kurtosis <= 6)
    assert abs(noise.sum(axis=1).var() / expected - 1) < tolerance
    assert abs(noise[:, 0].var() / expected - 1) < tolerance  # one bucket a window: independent samples


def test_a_release_that_ignores_the_window_node_is_caught(monkeypatch):
    windows, width = 12000, 4
    monkeypatch.setattr(GridArithmetic, "consistent",
                        lambda self, levels, fanout, count: (levels[0][:count].copy(), np.zeros(count)))
    _, released, v = _noise_only(windows, seed=2)
    total = released.values.reshape(windows, width).sum(axis=1).var()
    assert abs(total / (v * width / (width + 1)) - 1) > 4 * math.sqrt(5.0 / windows)


def _revised_variance(history):
    """Delta-method variance of bucket j revised by the mean of ``history`` earlier windows (see the test)."""
    width = PROFILE.size
    return lambda v: (PROFILE**2 * v * width / (width + 1)
                      + v * (width - 2 * PROFILE + width * PROFILE**2) / ((width + 1) * history))


@pytest.mark.parametrize("history", [8])
def test_revised_values_have_the_closed_form_variance_below_the_first_release(history):
    """Windows of total T spread as PROFILE: the revised bucket j is the window's least-squares total (variance
    ``v W/(W+1)``, times ``p_j^2``) spread by the mean of ``history`` earlier windows, whose leaf noise (variance
    ``v W/(W+1)``, covariance ``-v/(W+1)`` within a window) enters through ``(E_j - p_j sum E) / history``:
    ``p_j^2 v W/(W+1) + v (W - 2 p_j + W p_j^2) / ((W+1) history)`` to first order (T large: the second order is
    below 0.1% here).  The noise does not depend on the data, so the release of that truth is the truth plus the
    noise of a release of zeros.  Windows ``(history+1) m`` use disjoint pasts: independent samples."""
    windows, width = 18000, 4
    agg, noise, v = _noise_only(windows, seed=3)
    total = 2000.0
    truth = np.tile(total * PROFILE, windows)
    first = Released(noise.buckets, noise.partitions, truth + noise.values)
    revised = agg.revised(first, history=history).reshape(windows, width)
    picked = np.arange(history + 1, windows, history + 1)
    errors = revised[picked] - total * PROFILE
    expected = _revised_variance(history)(v)
    tolerance = 4 * math.sqrt(5.0 / picked.size)
    assert np.all(np.abs(errors.var(axis=0) / expected - 1) < tolerance)
    assert abs(errors.mean(axis=0)).max() < 4 * math.sqrt(expected.max() / picked.size)
    first_errors = first.values.reshape(windows, width)[picked] - total * PROFILE
    assert np.all(errors.var(axis=0) < 0.5 * first_errors.var(axis=0))  # far below the first release's v W/(W+1)


def test_a_revision_that_ignores_the_profile_or_the_past_is_caught():
    """What the variance test checks: the first release kept, or the window's total spread evenly, fail it."""
    windows, width, history = 18000, 4, 8
    agg, noise, v = _noise_only(windows, seed=3)
    truth = np.tile(2000.0 * PROFILE, windows)
    first = truth + noise.values
    picked = np.arange(history + 1, windows, history + 1)
    expected = _revised_variance(history)(v)
    flat = np.repeat(first.reshape(windows, width).sum(axis=1) / width, width)
    for wrong in (first, flat):
        errors = wrong.reshape(windows, width)[picked] - 2000.0 * PROFILE
        assert np.any(np.abs(errors.var(axis=0) / expected - 1) > 4 * math.sqrt(5.0 / picked.size))


def test_the_mean_is_refused_and_rows_in_any_layout_are_read():
    agg = UnitAggregate(epsilon=1.0, bucket=1, window=4, unit_bound=5.0, statistic="mean", max_rows=4,
                        noise=ZeroNoise())
    with pytest.raises(ValueError, match="not the mean"):
        agg.revised(Released(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)))
    buckets = np.repeat(np.arange(8), 2) * NS
    parts = np.tile([0, 1], 8)
    values = np.arange(16, dtype=float) + 1
    order = np.random.default_rng(0).permutation(16)
    together = revise_released(buckets, parts, values, bucket=1, width=4, count=2)
    shuffled = revise_released(buckets[order], parts[order], values[order], bucket=1, width=4, count=2)
    assert np.array_equal(shuffled, together[order])


# -- the command ---------------------------------------------------------------------------------

BASE = ["--time-column", "time", "--unit-column", "meter", "--column", "kWh", "--bucket", "1h", "--unit-window", "1d",
        "--unit-bound", "8", "--epsilon", "1", "--upper-bound", "2", "--clip", "--seed", "4", "--missing", "zero"]


def _csv(path, *, days, meters=6, seed=0):
    """Hourly readings, one file per number of days; a shorter one is a prefix of a longer one."""
    rng = np.random.default_rng(seed)
    lines = ["time,meter,kWh,feeder"]
    for hour in range(24 * days):
        for meter in range(meters):
            lines.append(f"2024-03-{1 + hour // 24:02d}T{hour % 24:02d}:00:00Z,m{meter},{rng.gamma(2, 0.3):.3f},"
                         f"f{meter % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(*args):
    from click.testing import CliRunner

    from dpstream.cli import cli

    return CliRunner().invoke(cli, ["aggregate", *map(str, args)])


def _read(path):
    rows = [line.split(",") for line in path.read_text().splitlines()]
    return rows[0], rows[1:]


def _expected(out_rows, names, history=28, cycle=1):
    from dpstream.io.times import parse_times

    buckets = parse_times([row[0] for row in out_rows], kind="iso")
    parts = np.array([names.index(row[1]) for row in out_rows])
    return revise_released(buckets, parts, np.array([float(row[2]) for row in out_rows]), bucket=3600, width=24,
                           count=len(names), history=history, cycle=cycle)


def test_revised_is_written_beside_an_unchanged_output(tmp_path):
    data = _csv(tmp_path / "in.csv", days=4)
    (tmp_path / "parts").write_text("f0\nf1\n")
    parts = ["--partition-column", "feeder", "--partitions", tmp_path / "parts"]
    plain = _run(data, "-o", tmp_path / "plain.csv", *BASE, *parts)
    both = _run(data, "-o", tmp_path / "out.csv", *BASE, *parts, "--revised", tmp_path / "rev.csv",
                "--revised-history", "2")
    assert plain.exit_code == 0 and both.exit_code == 0, both.output
    assert (tmp_path / "out.csv").read_bytes() == (tmp_path / "plain.csv").read_bytes()
    head, out_rows = _read(tmp_path / "out.csv")
    revised_head, revised_rows = _read(tmp_path / "rev.csv")
    assert head == ["bucket", "partition", "value"] and revised_head == ["bucket", "partition", "revised"]
    assert [row[:2] for row in revised_rows] == [row[:2] for row in out_rows]
    revised = np.array([float(row[2]) for row in revised_rows])
    assert np.array_equal(revised, _expected(out_rows, ["f0", "f1"], history=2))
    first = np.array([float(row[2]) for row in out_rows])
    assert np.allclose(revised.reshape(4, 24, 2).sum(axis=1), first.reshape(4, 24, 2).sum(axis=1), atol=1e-9)
    assert np.array_equal(revised[:48], first[:48]) and not np.allclose(revised[48:], first[48:])
    assert "revised values: 192 written to" in both.output and "not final" in both.output


def test_with_state_the_revised_file_is_rewritten_whole_by_every_run(tmp_path):
    state = ["--state", tmp_path / "s", "-o", tmp_path / "out.csv", "--revised", tmp_path / "rev.csv"]
    first = _run(_csv(tmp_path / "in.csv", days=2), *state, *BASE)
    assert first.exit_code == 0, first.output
    assert len(_read(tmp_path / "rev.csv")[1]) == 48
    again = _run(_csv(tmp_path / "in.csv", days=3), *state, *BASE)
    assert again.exit_code == 0, again.output
    _, out_rows = _read(tmp_path / "out.csv")
    _, revised_rows = _read(tmp_path / "rev.csv")
    assert len(out_rows) == len(revised_rows) == 72
    assert np.array_equal(np.array([float(row[2]) for row in revised_rows]), _expected(out_rows, [""]))


@pytest.mark.parametrize(("extra", "message"), [
    (["--revised", "{tmp}/rev.csv", "--statistic", "mean", "--unit-max-rows", "24"], "not mean"),
    (["--revised", "{tmp}/out.csv"], "--revised and -o must name different files"),
    (["--revised", "{tmp}/in.csv"], "--revised and INPUT must name different files"),
    (["--revised-history", "3"], "--revised-history applies with --revised only"),
    (["--revised", "{tmp}/no/rev.csv"], "of --revised does not exist"),
])
def test_bad_revised_options_are_usage_errors_before_any_work(tmp_path, extra, message):
    data = _csv(tmp_path / "in.csv", days=1)
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, *[arg.format(tmp=tmp_path) for arg in extra])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "rev.csv").exists()


def test_revised_needs_a_regular_output_file(tmp_path):
    result = _run(_csv(tmp_path / "in.csv", days=1), "-o", "-", *BASE, "--revised", tmp_path / "rev.csv")
    assert result.exit_code == 2 and "--revised reads the release back from -o" in result.output
