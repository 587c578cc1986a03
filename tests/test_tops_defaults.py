"""ToPS's defaults fitted to a public expected length, their refusals, and the warning of useless public parameters."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.datasets.meters import READINGS_PER_DAY, meter_readings
from dpstream.hierarchy import num_levels
from dpstream.release import ToPS
from dpstream.release.tops_defaults import (
    MIN_BLOCKS,
    MIN_HOLD,
    PAPER_HOLD,
    PAPER_MAX_RANGE,
    THRESHOLD_UNITS,
    ReleaseWarning,
    fit_defaults,
)

LENGTHS = [256, 300, 2880, 10_000, 100_000, 10**6, 10**8]


@pytest.mark.parametrize("fanout", [2, 4, 16])
@pytest.mark.parametrize("length", LENGTHS)
def test_fitted_defaults_fit_the_expected_length(length, fanout):
    fitted = fit_defaults(length, upper_bound=5.0, fanout=fanout, hold=None, max_range=None, threshold_step=None)
    released = length - fitted.hold
    assert MIN_HOLD <= fitted.hold <= min(length / 4, PAPER_HOLD)
    assert fitted.hold <= max(MIN_HOLD, math.ceil(length / 8))
    # the tree: a power of the fan-out covering the released values, at most the paper's
    assert fitted.max_range == min(PAPER_MAX_RANGE, fitted.max_range)
    assert fitted.max_range >= min(released, PAPER_MAX_RANGE) and fitted.max_range < max(released, fanout) * fanout
    assert fanout ** round(math.log(fitted.max_range, fanout)) == fitted.max_range
    assert fitted.threshold_step == 5.0 / THRESHOLD_UNITS
    # no block longer than a quarter of what is released, and the longest such block allowed
    s, levels = fitted.max_smoothed_levels, num_levels(fitted.max_range, fanout)
    assert 0 <= s < levels and fanout**s * MIN_BLOCKS <= max(released, MIN_BLOCKS)
    assert s + 1 == levels or fanout ** (s + 1) * MIN_BLOCKS > released


def test_the_hold_out_is_whole_periods_when_one_fits():
    for period in (96, 144, 1440):
        fitted = fit_defaults(2880 * 4, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None,
                              period=period)
        assert fitted.hold % period == 0 and fitted.hold <= 2880 * 4 / 8
    assert fit_defaults(2880, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None,
                        query_length=96).hold == 288


def test_without_an_expected_length_the_papers_values_and_given_values_are_kept():
    paper = fit_defaults(None, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None)
    assert (paper.hold, paper.max_range, paper.threshold_step, paper.max_smoothed_levels) == (65536, 2**20, 1.0, None)
    given = fit_defaults(10**7, upper_bound=5.0, fanout=16, hold=65536, max_range=2**20, threshold_step=1.0)
    assert (given.hold, given.max_range, given.threshold_step) == (65536, 2**20, 1.0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"expected_length": 200}, "expected_length 200 is too short to choose a threshold from a hold-out"),
    ({"expected_length": 2880, "hold": 2880}, "hold 2880 leaves nothing of expected_length 2880 to release"),
    ({"expected_length": 0}, "expected_length"),
])
def test_what_cannot_be_fitted_is_refused_naming_what_to_set(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ToPS(epsilon=1.0, upper_bound=5.0, seed=1, **kwargs)


def _meter_stream(length: int = 2880) -> np.ndarray:
    return np.nan_to_num(meter_readings(1, length // READINGS_PER_DAY, seed=3).by_meter()[0])


def test_a_fitted_tops_never_chooses_blocks_longer_than_the_stream_can_fill():
    stream = _meter_stream()
    for method in ("model", "nm-e"):
        tops = ToPS(epsilon=1.0, upper_bound=5.0, expected_length=stream.size, threshold_method=method, seed=2)
        released = tops.release(stream)
        assert released.size == stream.size - tops.hold and tops.hold == 360 and tops.max_range == 4096
        assert tops.fanout**tops.smoothed_levels * MIN_BLOCKS <= released.size
        assert tops.threshold < 5.0 and (tops.threshold / (5.0 / THRESHOLD_UNITS)) % 1 == 0
    public = ToPS(epsilon=1.0, upper_bound=5.0, expected_length=stream.size, threshold=1.0, smoother="mean", seed=2)
    assert public.hold == 0 and public.fanout**public.smoothed_levels * MIN_BLOCKS <= stream.size


def test_a_fitted_snapshot_keeps_what_was_fitted_and_continues_exactly():
    stream = _meter_stream()
    tops = ToPS(epsilon=1.0, upper_bound=5.0, expected_length=stream.size, period=96, seed=4)
    first = tops.release(stream[:1000])
    state = tops.state
    assert state["params"]["expected_length"] == 2880 and state["params"]["hold"] == 288
    assert state["params"]["max_range"] == 4096 and state["params"]["threshold_step"] == 5.0 / 1024
    rest = ToPS.from_state(state).release(stream[1000:])
    whole = ToPS(epsilon=1.0, upper_bound=5.0, expected_length=stream.size, period=96, seed=4).release(stream)
    assert np.array_equal(np.concatenate([first, rest]), whole)


def test_without_an_expected_length_a_release_is_the_papers():
    stream = np.random.default_rng(5).integers(0, 40, 70_000).astype(float)
    default = ToPS(epsilon=1.0, upper_bound=40.0, seed=6)
    paper = ToPS(epsilon=1.0, upper_bound=40.0, hold=65536, max_range=2**20, threshold_step=1.0, seed=6)
    assert np.array_equal(default.release(stream), paper.release(stream))
    assert default.state["params"]["hold"] is None and "expected_length" not in default.state["params"]


def test_the_warning_fires_on_the_issues_configuration_and_not_on_a_good_one():
    with pytest.warns(ReleaseWarning, match="theta is chosen from 96 held-out values.*theta can only be 1, 2"):
        ToPS(epsilon=0.05, upper_bound=5.0, hold=96, clip=True, seed=1)
    with pytest.warns(ReleaseWarning, match="leave more than half of the 2,592 released values to the smoother's"):
        ToPS(epsilon=1.0, upper_bound=5.0, expected_length=2880, smoothed_levels=3, max_range=4096 * 16,
             hold=288, seed=1)
    noise = r"noise of standard deviation about 8 x B \(epsilon 0.5, 3 levels, s = 0\)"  # sqrt(2) 3 / 0.5 = 8.5
    with pytest.warns(ReleaseWarning, match=noise):
        ToPS(epsilon=0.5, upper_bound=5.0, expected_length=2880, smoothed_levels=0, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReleaseWarning)
        ToPS(epsilon=1.0, upper_bound=5.0, expected_length=2880, clip=True, seed=1)
        ToPS(epsilon=1.0, upper_bound=5.0, expected_length=2880, period=96, seed=1)
        ToPS(epsilon=0.05, upper_bound=1657.0, seed=1)  # the paper's setting
        ToPS(epsilon=1.0, upper_bound=5.0, threshold=1.0, seed=1)


@pytest.fixture(scope="module")
def meters_csv(tmp_path_factory):
    """Three meters' month of quarter-hours (2,880 readings each, some missing)."""
    path = tmp_path_factory.mktemp("meters") / "meters.csv"
    meter_readings(3, 30, seed=2).write_csv(path)
    return path


def _release(path, *options):
    return CliRunner().invoke(cli, ["release", str(path), "-o", "-", "--key-column", "meter", "--column", "kWh",
                                    "--missing", "zero", "--seed", "1", *options])


def test_the_command_warns_on_the_issues_configuration_once_and_is_silent_on_a_good_one(meters_csv):
    bad = _release(meters_csv, "--hold", "96", "--epsilon", "0.05", "--upper-bound", "5", "--clip")
    assert bad.exit_code == 0, bad.output
    warned = [line for line in bad.stderr.splitlines() if line.startswith("warning: theta is chosen from 96")]
    assert len(warned) == 1 and "theta can only be 1, 2, ..., 5" in warned[0] and "ReleaseWarning" not in bad.stderr
    good = _release(meters_csv, "--expected-length", "2880", "--epsilon", "1", "--upper-bound", "5", "--clip")
    assert good.exit_code == 0, good.output
    assert [line for line in good.stderr.splitlines() if line.startswith("warning:")] == [
        "warning: --seed makes the noise recomputable by anyone who knows it; this release is for testing only."]
    assert "fitted to --expected-length 2,880 (given values kept): hold-out 360, max-range 4,096" in good.stderr
    rows = good.stdout.splitlines()[1:]
    assert len(rows) == 3 * (2880 - 360)
    values = np.array([float(row.rsplit(",", 1)[1]) for row in rows])
    assert np.abs(values).max() < 100 * 5 and np.mean(values == 0.0) < 0.01


def test_a_keyed_release_at_the_default_hold_out_says_what_to_set(meters_csv):
    result = _release(meters_csv, "--epsilon", "1", "--upper-bound", "5", "--clip")
    assert result.exit_code == 1
    assert "warning: every key holds out its first 65,536 values (the default --hold)" in result.stderr
    assert "give --expected-length N" in result.stderr


@pytest.mark.parametrize(("options", "message"), [
    (["--expected-length", "200"], "Error: expected_length 200 is too short to choose a threshold from a hold-out"),
    (["--expected-length", "2880", "--hold", "3000"], "Error: hold 3000 leaves nothing of expected_length 2880"),
    (["--expected-length", "2880", "--method", "pak"], "Error: --expected-length does not apply to --method pak."),
])
def test_the_command_refuses_in_one_line_naming_what_to_set(meters_csv, options, message):
    result = _release(meters_csv, "--epsilon", "1", "--upper-bound", "5", "--clip", *options)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith(message)


def test_the_meter_readings_are_a_month_of_quarter_hours_with_missing_values(tmp_path):
    readings = meter_readings(20, 30, seed=0)
    grid = readings.by_meter()
    assert grid.shape == (20, 2880) and 0.005 < np.isnan(grid).mean() < 0.05
    daily = np.nansum(grid.reshape(20, 30, 96), axis=2)
    assert 3 < daily.mean() < 40 and np.nanmax(grid) <= 5.0 and np.nanmin(grid) >= 0.0
    readings.write_csv(tmp_path / "m.csv")
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "meter,time,kWh" and len(lines) == 1 + 20 * 2880
    assert lines[1].startswith("M0000,2024-01-01T00:00,") and lines[21].startswith("M0000,2024-01-01T00:15,")
    assert sum(line.endswith(",NA") for line in lines) == np.isnan(grid).sum()


def test_a_fitted_keyed_state_release_resumes_as_one_run_and_says_what_was_fitted(meters_csv, tmp_path):
    lines = meters_csv.read_text().splitlines(keepends=True)
    (tmp_path / "part.csv").write_text("".join(lines[:4001]))
    options = ["--key-column", "meter", "--column", "kWh", "--missing", "zero", "--seed", "3", "--epsilon", "1",
               "--upper-bound", "5", "--clip", "--expected-length", "2880"]

    def run(source, name):
        result = CliRunner().invoke(cli, ["release", str(source), "-o", str(tmp_path / f"{name}.csv"), *options,
                                          "--state", str(tmp_path / f"{name}.state")])
        assert result.exit_code == 0, result.output
        return result

    run(tmp_path / "part.csv", "resumed")
    resumed = run(meters_csv, "resumed")
    whole = run(meters_csv, "whole")
    assert (tmp_path / "resumed.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    for result in (resumed, whole):
        assert "fitted to --expected-length 2,880 (given values kept): hold-out 360" in result.stderr
        assert "each its own stream after a hold-out of 360 values" in result.stderr


@pytest.mark.parametrize(("length", "period", "needed"), [(1, None, "64 values must be at most a quarter of the "
                                                                    "stream: at least 256 values"),
                                                           (150, 48, "48 values must be at most a quarter of the "
                                                                     "stream: at least 192 values")])
def test_a_too_short_expected_length_says_how_long_it_must_be(length, period, needed):
    """The message said "at least 64 values" even where the hold-out, whole periods, is 48: it now names the
    hold-out it would take and the length that needs."""
    with pytest.raises(ValueError, match=f"expected_length {length} is too short .*{needed}"):
        fit_defaults(length, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None,
                     period=period)
