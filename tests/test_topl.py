"""ToPL (Section 4): the Eq. 8 threshold optimizer, the client/collector split, the release and CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.evaluation import ExperimentConfig, run_study
from dpstream.ldp import HybridMechanism, SquareWave
from dpstream.privacy import LOCAL_REPORT
from dpstream.release import Report, ToPL, ToPLClient, ToPLCollector
from dpstream.release.topl import PM_REPORT, SR_REPORT, SW_REPORT
from dpstream.thresholds.square_wave import eq8_errors, prune_tail, square_wave_threshold

Z = 5.0


def _stream(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(0.15, n), 100).astype(float)


# -- Eq. 8 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("r", (1, 2, 7, 100, 1000))
def test_average_query_length_moments_behind_eq8(r):
    """Over all ranges within r positions: E[j] = (r + 2) / 3 and E[j^2] = (r + 1)(r + 2) / 6 ~ r^2 / 6."""
    j = np.arange(1, r + 1)
    weights = (r - j + 1) / (r * (r + 1) / 2)
    assert weights @ j == pytest.approx((r + 2) / 3)
    assert weights @ j**2 == pytest.approx((r + 1) * (r + 2) / 6)


def test_eq8_equals_a_direct_evaluation():
    rng = np.random.default_rng(1)
    f = rng.dirichlet(np.ones(20))
    bound, r, eps = 40.0, 5000, 0.8
    candidates, errors = eq8_errors(f, bound, stream_epsilon=eps, max_range=r)
    width = bound / f.size
    centres = width * (np.arange(f.size) + 0.5)
    var_unit = HybridMechanism(epsilon=eps).worst_case_variance()
    for k, theta in enumerate(candidates):
        bias = sum(f[i] * (centres[i] - theta) for i in range(f.size) if centres[i] > theta)
        direct = r / 3 * theta**2 / 4 * var_unit + r**2 / 6 * bias**2
        assert errors[k] == pytest.approx(direct, rel=1e-10)
    assert candidates[-1] == bound and candidates[0] == width


def test_eq8_trades_bias_against_variance():
    f = np.zeros(100)
    f[:10] = 0.1  # all mass below 10% of B
    candidates, errors = eq8_errors(f, 100.0, stream_epsilon=1.0, max_range=2**20)
    assert candidates[np.argmin(errors)] == 10.0  # no bias left, least variance
    f[99] = 1e-3  # a little mass at B pulls theta up when r is large
    f /= f.sum()
    _, errors = eq8_errors(f, 100.0, stream_epsilon=1.0, max_range=2**20)
    assert candidates[np.argmin(errors)] > 10.0


def test_prune_tail_cuts_after_the_first_quiet_run():
    f = np.array([0.3, 0.3, 0.2, 0.00005, 0.00002, 0, 0, 0.00009, 0.1, 0.1])
    pruned = prune_tail(f)
    assert np.all(pruned[3:] == 0) and pruned.sum() == pytest.approx(1.0)
    assert np.allclose(pruned[:3], f[:3] / f[:3].sum())
    noisy = np.full(10, 0.1)
    assert np.array_equal(prune_tail(noisy), noisy)
    # A quiet run of four is not enough.
    four = np.array([0.5, 0, 0, 0, 0, 0.5])
    assert np.array_equal(prune_tail(four), four)


def test_threshold_is_deterministic_and_sw_w_is_not_pulled_to_b():
    values = _stream(65536)
    rng = np.random.default_rng(2)
    reports = SquareWave(epsilon=1.0).perturb(values / 100, rng)
    kwargs = dict(epsilon=1.0, stream_epsilon=1.0, upper_bound=100.0, max_range=2**20)
    theta_w = square_wave_threshold(reports, **kwargs)
    assert theta_w == square_wave_threshold(reports, **kwargs)
    assert square_wave_threshold(reports, variant="SW", **kwargs) > 0
    assert np.quantile(values, 0.9) <= theta_w <= 100
    with pytest.raises(ValueError, match="variant must be one of SW-W, SW; got 'EM'"):
        square_wave_threshold(reports, variant="EM", **kwargs)


@pytest.mark.parametrize(("low", "high"), [(0.2, 0.3), (0.4, 0.6)])
def test_sw_w_keeps_the_bulk_when_the_low_end_is_empty(low, high):
    """No mass near 0: the quiet low end is not a tail, so theta stays inside the data."""
    rng = np.random.default_rng(5)
    values = rng.uniform(low, high, 65536)
    reports = SquareWave(epsilon=1.0).perturb(values, rng)
    theta = square_wave_threshold(reports, epsilon=1.0, stream_epsilon=1.0, upper_bound=1000.0, max_range=2**20)
    assert theta >= 1000.0 * low


# -- client / collector ---------------------------------------------------------------------


def test_the_collector_needs_only_reports_sent_as_plain_data():
    """Independent clients (own value + public parameters) -> JSON -> collector == the ToPL simulation."""
    values = _stream(3000, seed=4)
    hold = 2000
    topl = ToPL(epsilon=1.0, upper_bound=100.0, hold=hold, max_range=4096, threshold_epsilon=2.0, seed=5)
    simulated = topl.release(values)

    collector = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=hold, max_range=4096, threshold_epsilon=2.0)
    rng = np.random.default_rng(5)
    released = []
    for value in values:
        client = collector.client()  # what the collector publishes: epsilon, B, theta when known
        wire = json.dumps(client.report(value, rng))  # a report is numbers only
        out = collector.receive(tuple(json.loads(wire)))
        if out is not None:
            released.append(out)
    assert collector.threshold is not None
    assert np.array_equal(np.array(released), simulated)
    assert json.loads(wire)[0] in (SR_REPORT, PM_REPORT) and isinstance(json.loads(wire)[1], float)


def test_collector_keeps_no_raw_value():
    values = _stream(1500, seed=6)
    collector = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=1000, max_range=1024)
    codes, outputs = collector.client().report_batch(values[:1000], np.random.default_rng(0))
    collector.receive_batch(codes, outputs)
    # Its only data is the reports it was sent, and after theta not even those.
    assert collector.threshold is not None
    stored = [v for v in vars(collector).values() if isinstance(v, np.ndarray) and v.size]
    assert stored == []
    before = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=1000, max_range=1024)
    before.receive_batch(codes[:999], outputs[:999])
    stored = [v for v in vars(before).values() if isinstance(v, np.ndarray)]
    assert len(stored) == 1 and np.array_equal(stored[0][:999], outputs[:999])


def test_stream_estimates_are_unbiased_for_values_below_and_above_theta():
    theta, eps, n = 40.0, 1.0, 200_000
    client = ToPLClient(epsilon=eps, upper_bound=100.0, threshold=theta)
    collector = ToPLCollector(epsilon=eps, upper_bound=100.0, hold=1)
    collector.receive(Report(SW_REPORT, 0.5))
    collector._threshold = theta  # as if published: the test fixes theta to check the estimator alone
    rng = np.random.default_rng(7)
    var_unit = HybridMechanism(epsilon=eps)
    for value in (0.0, 13.0, 40.0, 90.0):
        est = collector.receive_batch(*client.report_batch(np.full(n, value), rng))
        target = min(value, theta)
        unit = 2 * target / theta - 1
        variance = theta**2 / 4 * float(var_unit.variance(unit))
        assert abs(est.mean() - target) <= Z * math.sqrt(variance / n)
        assert est.var() == pytest.approx(variance, rel=0.03)


def test_collector_rejects_malformed_reports():
    collector = ToPLCollector(epsilon=1.0, upper_bound=10.0, hold=2, max_range=64, buckets=8)
    with pytest.raises(ValueError, match="must be a Square Wave threshold report"):
        collector.receive(Report(PM_REPORT, 0.0))
    with pytest.raises(ValueError, match="Square Wave reports.* must be in"):
        collector.receive(Report(SW_REPORT, 5.0))
    with pytest.raises(ValueError, match="mechanism must be one of 0, 1, 2, got 7"):
        collector.receive((7, 0.0))
    with pytest.raises(TypeError, match="integer codes"):
        collector.receive_batch(np.array([0.5]), np.array([0.1]))
    with pytest.raises(ValueError, match="one length"):
        collector.receive_batch(np.array([0, 0]), np.array([0.1]))
    assert collector.receive_batch(np.array([0, 0]), np.array([0.2, 0.3])).size == 0
    assert collector.threshold is not None
    with pytest.raises(ValueError, match="must be an HM report"):
        collector.receive(Report(SW_REPORT, 0.5))
    with pytest.raises(ValueError, match="must be an HM report"):
        collector.receive(Report(SR_REPORT, 0.5))
    with pytest.raises(ValueError, match="must be an HM report"):
        collector.receive(Report(PM_REPORT, 1e6))
    assert collector.receive(Report(SR_REPORT, 1.0)) > 0


# -- the ToPL release ---------------------------------------------------------------------------


def test_batches_of_any_size_equal_single_values():
    values = _stream(2500, seed=8)
    whole = ToPL(epsilon=1.5, upper_bound=100.0, hold=1000, max_range=1024, seed=3).release(values)
    topl = ToPL(epsilon=1.5, upper_bound=100.0, hold=1000, max_range=1024, seed=3)
    pieces = [topl.release(chunk) for chunk in np.split(values, [10, 999, 1001, 1700])]
    assert np.array_equal(np.concatenate(pieces), whole)
    assert topl.position == values.size and whole.size == values.size - 1000


def test_release_privacy_and_errors():
    topl = ToPL(epsilon=0.5, upper_bound=100.0, hold=10, threshold_epsilon=2.0, seed=0)
    guarantee = topl.privacy()
    assert guarantee.epsilon == 2.0 and guarantee.delta == 0.0
    assert guarantee.neighbours is LOCAL_REPORT and "Definition 2.2" in str(guarantee.neighbours)
    assert topl.release_one(3.0) is None and topl.threshold is None
    with pytest.raises(ValueError, match="position 1 must be in \\[0, 100\\]"):
        topl.release([500.0])
    with pytest.raises(TypeError, match="must be numbers"):
        topl.release_one("3")
    assert ToPL(epsilon=0.5, upper_bound=100.0, hold=10, clip=True, seed=0).release([500.0] * 12).size == 2
    with pytest.raises(ValueError, match="threshold must be <= upper_bound 10"):
        ToPLClient(epsilon=1.0, upper_bound=10.0, threshold=11.0)
    with pytest.raises(ValueError, match="variant must be one of"):
        ToPL(epsilon=1.0, upper_bound=10.0, variant="median")


def test_topl_study_runs_its_three_methods():
    values = _stream(3000, seed=9)
    config = ExperimentConfig(hold=1000, max_range=2000, rounds=2, queries=50, stream_epsilon=2.0)
    records = run_study("topl", values, 100.0, epsilons=[0.5, 2.0], config=config)
    assert {r["method"] for r in records} == {"SW-W", "SW", "Base"}
    assert all(r["threshold"] is not None for r in records if r["method"] != "Base")
    assert records[0]["threshold_source"] == "Square Wave + Eq. 8 (LDP)"
    bad = ExperimentConfig(hold=1000, max_range=2000, rounds=1, queries=5, stream_epsilon=-1.0)
    with pytest.raises(ValueError, match="stream_epsilon must be a finite number > 0, got -1.0"):
        run_study("topl", values, 100.0, epsilons=[1.0], config=bad)


# -- command line --------------------------------------------------------------------------------


def test_cli_release_topl(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("\n".join(str(v) for v in _stream(1500, seed=10)) + "\n")
    out = tmp_path / "out.txt"
    runner = CliRunner()
    result = runner.invoke(cli, ["release", str(source), "-o", str(out), "--method", "topl", "--epsilon", "1",
                                 "--threshold-epsilon", "2", "--upper-bound", "100", "--hold", "1000", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert len(out.read_text().split()) == 500
    assert "Square Wave" in result.output and "LDP" in result.output
    result = runner.invoke(cli, ["release", str(source), "-o", str(tmp_path / "x"), "--method", "topl",
                                 "--epsilon", "1", "--upper-bound", "100", "--fanout", "4"])
    assert result.exit_code != 0 and "--fanout does not apply to --method topl" in result.output


def test_cli_evaluate_topl_with_a_stream_epsilon(tmp_path):
    source = tmp_path / "s.csv"
    source.write_text("\n".join(str(v) for v in _stream(3000, seed=11)) + "\n")
    result = CliRunner().invoke(
        cli,
        [
            "evaluate",
            "--dataset",
            str(source),
            "--upper-bound",
            "100",
            "--study",
            "topl",
            "--epsilons",
            "0.5,1",
            "--stream-epsilon",
            "2",
            "--rounds",
            "1",
            "--queries",
            "20",
            "--hold",
            "1000",
            "--max-range",
            "2000",
            "--out",
            str(tmp_path / "res"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "res" / "topl-s.json").read_text())
    assert summary["config"]["stream_epsilon"] == 2.0
    assert {row["method"] for row in summary["summary"]} == {"SW-W", "SW", "Base"}


def test_cli_topl_demo_plots_and_refuses_to_overwrite(tmp_path):
    runner = CliRunner()
    args = ["topl-demo", "--epsilon", "2", "--intervals", "30", "--out", str(tmp_path)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "topl-pos-eps2-moving-average.png").stat().st_size > 0
    assert "released 450,061 values" in result.output
    again = runner.invoke(cli, args)
    assert again.exit_code != 0 and "--force" in again.output


def test_guarantees_are_stated_as_local_dp():
    topl = ToPL(epsilon=1.0, upper_bound=100.0, threshold_epsilon=0.5)
    for guarantee in (topl.privacy(), HybridMechanism(epsilon=2.0).privacy(), SquareWave(epsilon=0.5).privacy()):
        assert guarantee.local and "-LDP" in str(guarantee) and guarantee.delta == 0
    assert str(ToPL(epsilon=1.0, upper_bound=100.0, threshold_epsilon=0.5).privacy()).startswith("1-LDP")


@pytest.mark.parametrize("intervals", ["450062", "0"])
def test_cli_topl_demo_rejects_more_intervals_than_released_values(tmp_path, intervals):
    result = CliRunner().invoke(cli, ["topl-demo", "--intervals", intervals, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    message = result.output.strip().splitlines()[-1]  # the installed command prints only this line
    assert message.startswith("Error: Invalid value for '--intervals'")
    assert "450,061" in message and f"got {int(intervals):,}" in message
    assert list(tmp_path.iterdir()) == []
