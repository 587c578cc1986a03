"""ToPL (Section 4): the Eq. 8 threshold optimizer, the client/collector split, the release and CLI."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream
from dpstream.cli import cli
from dpstream.evaluation import ExperimentConfig, run_study
from dpstream.ldp import HybridMechanism, SquareWave
from dpstream.noise import SeededBits
from dpstream.privacy import LOCAL_REPORT
from dpstream.release import Report, ReportBatch, ToPL, ToPLCollector, ToPLRandomizer
from dpstream.release.topl import PM_REPORT, SR_REPORT, SW_REPORT
from dpstream.thresholds.square_wave import eq8_errors, prune_tail, square_wave_threshold

DOCS = Path(__file__).resolve().parents[1] / "docs" / "topl.md"

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
    f = rng.dirichlet(np.ones(21))  # shares of the grid points 0, 2, ..., 40
    bound, r, eps = 40.0, 5000, 0.8
    candidates, errors = eq8_errors(f, bound, stream_epsilon=eps, max_range=r)
    width = bound / (f.size - 1)
    points = width * np.arange(f.size)
    var_unit = HybridMechanism(epsilon=eps).worst_case_variance()
    for k, theta in enumerate(candidates):
        bias = sum(f[i] * (points[i] - theta) for i in range(f.size) if points[i] > theta)
        direct = r / 3 * theta**2 / 4 * var_unit + r**2 / 6 * bias**2
        assert errors[k] == pytest.approx(direct, rel=1e-10)
    assert candidates[-1] == bound and candidates[0] == width and candidates.size == f.size - 1


def test_eq8_trades_bias_against_variance():
    f = np.zeros(101)
    f[1:11] = 0.1  # all mass at or below 10% of B
    candidates, errors = eq8_errors(f, 100.0, stream_epsilon=1.0, max_range=2**20)
    assert candidates[np.argmin(errors)] == 10.0  # no bias left, least variance
    f[100] = 1e-3  # a little mass at B pulls theta up when r is large
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
    reports = SquareWave(epsilon=1.0).perturb(values / 100, 2)
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
    reports = SquareWave(epsilon=1.0).perturb(values, 5)
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
    bits = SeededBits(seed=5)
    released = []
    clients: dict[str, ToPLRandomizer] = {}  # a client reads the published document (parsed once per version here)
    for value in values:
        published = collector.parameters_json()
        if published not in clients:
            clients[published] = ToPLRandomizer.from_json(published)
        client = clients[published]
        wire = json.dumps(client.report(value, bits))  # a report is two integers
        out = collector.receive(tuple(json.loads(wire)))
        if out is not None:
            released.append(out)
    assert collector.threshold is not None
    assert np.array_equal(np.array(released), simulated)
    assert json.loads(wire)[0] in (SR_REPORT, PM_REPORT) and isinstance(json.loads(wire)[1], int)


def test_collector_keeps_no_raw_value():
    values = _stream(1500, seed=6)
    collector = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=1000, max_range=1024)
    codes, reports = collector.client().report_batch(values[:1000], 0)
    collector.receive_batch(codes, reports)
    # Its only data is the reports it was sent, and after theta not even those.
    assert collector.threshold is not None
    stored = [v for v in vars(collector).values() if isinstance(v, np.ndarray) and v.size]
    assert stored == []
    before = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=1000, max_range=1024)
    before.receive_batch(codes[:999], reports[:999])
    stored = [v for v in vars(before).values() if isinstance(v, np.ndarray)]
    assert len(stored) == 1 and np.array_equal(stored[0][:999], reports[:999])


def _published(collector: ToPLCollector, theta: float) -> ToPLCollector:
    """The collector as if theta were published: the tests fix theta to check the estimator alone."""
    current = collector.client()
    collector._parameters = ToPLRandomizer(epsilon=current.epsilon, upper_bound=current.upper_bound, threshold=theta,
                                       threshold_epsilon=current.threshold_epsilon, buckets=current.buckets)
    collector._received = collector.hold
    return collector


def test_stream_estimates_are_unbiased_for_values_below_and_above_theta():
    theta, eps, n = 40.0, 1.0, 200_000
    client = ToPLRandomizer(epsilon=eps, upper_bound=100.0, threshold=theta)
    collector = _published(ToPLCollector(epsilon=eps, upper_bound=100.0, hold=1), theta)
    hm = HybridMechanism(epsilon=eps)
    for k, value in enumerate((0.0, 13.0, 40.0, 90.0, 27.123)):
        est = collector.receive_batch(client.report_batch(np.full(n, value), k))
        target = min(value, theta)
        unit = 2 * target / theta - 1
        variance = theta**2 / 4 * float(hm.variance(unit))
        assert abs(est.mean() - target) <= Z * math.sqrt(variance / n)
        assert est.var() == pytest.approx(variance, rel=0.03)


def test_collector_rejects_malformed_reports():
    collector = ToPLCollector(epsilon=1.0, upper_bound=10.0, hold=2, max_range=64, buckets=8)
    with pytest.raises(ValueError, match="must be a Square Wave threshold report"):
        collector.receive(Report(PM_REPORT, 0))
    with pytest.raises(ValueError, match=r"Square Wave reports: the report at position 0 \(0-based\) is 500, not a "
                                         r"point of the grid"):
        collector.receive(Report(SW_REPORT, 500))
    with pytest.raises(ValueError, match="mechanism must be one of 0, 1, 2, got 7"):
        collector.receive((7, 0))
    with pytest.raises(TypeError, match="integer codes"):
        collector.receive_batch(np.array([0.5]), np.array([1]))
    with pytest.raises(ValueError, match="one length"):
        collector.receive_batch(np.array([0, 0]), np.array([1]))
    assert collector.receive_batch(np.array([0, 0]), np.array([2, 3])).size == 0
    assert collector.threshold is not None
    with pytest.raises(ValueError, match="must be an HM report"):
        collector.receive(Report(SW_REPORT, 5))
    with pytest.raises(ValueError, match="is SR report 5, not a point of its grid"):
        collector.receive(Report(SR_REPORT, 5))
    with pytest.raises(ValueError, match="not a point of the grid"):
        collector.receive(Report(PM_REPORT, 10**6))
    assert collector.receive(Report(SR_REPORT, 1)) > 0


# -- the wire format ----------------------------------------------------------------------------


def test_report_batches_go_through_json_and_back():
    client = ToPLRandomizer(epsilon=1.0, upper_bound=100.0, threshold=30.0)
    batch = client.report_batch(_stream(50), 3)
    with pytest.raises(TypeError):
        json.dumps(batch.report)  # numpy arrays are not JSON ...
    text = batch.to_json()  # ... the wire format is
    document = json.loads(text)
    assert document["format"] == "dpstream.topl.reports/1" and document["parameters"] == client.parameters_id
    again = ReportBatch.from_json(text)
    assert np.array_equal(again.mechanism, batch.mechanism) and np.array_equal(again.report, batch.report)
    assert again.parameters == batch.parameters and len(again) == 50
    codes, reports = again  # unpacks as the two arrays
    assert codes.dtype == np.int8 and reports.dtype == np.int64


def test_parameters_go_through_json_and_back_and_change_with_theta():
    collector = ToPLCollector(epsilon=0.8, upper_bound=50.0, threshold_epsilon=2.0, hold=500, max_range=256,
                              buckets=64, stream_grid=256)
    before = collector.parameters_json()
    client = ToPLRandomizer.from_json(before)
    assert client == collector.client() and client.to_json() == before
    assert (client.buckets, client.stream_grid, client.threshold) == (64, 256, None)
    collector.receive_batch(client.report_batch(_stream(500) / 2, 1))
    after = ToPLRandomizer.from_json(collector.parameters_json())
    assert after.threshold == collector.threshold and after.parameters_id != client.parameters_id


def _tamper(text: str, **changes) -> str:
    document = json.loads(text)
    for key, value in changes.items():
        document[key] = value
    return json.dumps(document)


def test_bad_parameter_documents_are_refused_plainly():
    good = ToPLRandomizer(epsilon=1.0, upper_bound=100.0, buckets=32).to_json()
    cases = {
        "not valid JSON": good[:-1],
        "must be a JSON object": "[1, 2]",
        'must have "format": "dpstream.topl.parameters/2" \\(or the older "dpstream.topl.parameters/1"\\), '
        'got no format field':
            json.dumps({k: v for k, v in json.loads(good).items() if k != "format"}),
        "got format 'dpstream.topl.parameters/3'": _tamper(good, format="dpstream.topl.parameters/3"),
        "unknown field\\(s\\) colour": _tamper(good, colour="red"),
        "epsilon must be a number, got '1'": _tamper(good, epsilon="1"),
        "buckets must be an integer, got 32.0": _tamper(good, buckets=32.0),
        "does not match the content": _tamper(good, epsilon=2.0),
    }
    for message, text in cases.items():
        with pytest.raises(ValueError, match=message):
            ToPLRandomizer.from_json(text)


def _resealed(document: dict) -> str:
    from dpstream.release.topl_wire import dump_parameters

    return dump_parameters({k: v for k, v in document.items() if k not in ("format", "id")}, version=1)


def test_version_2_writes_the_masses_as_strings_and_both_versions_read_alike():
    client = ToPLRandomizer(epsilon=1.0, upper_bound=100.0, threshold=30.0)
    new, old = json.loads(client.to_json()), json.loads(client.to_json(version=1))
    assert (new["format"], old["format"]) == ("dpstream.topl.parameters/2", "dpstream.topl.parameters/1")
    assert new["id"] == old["id"] == client.parameters_id  # one id: it names the parameters, not their encoding
    assert new["mechanisms"]["hybrid_alpha"] == str(old["mechanisms"]["hybrid_alpha"]) == str(client.hm.alpha_units)
    for core in ("square_wave", "stochastic_rounding", "piecewise"):
        assert new["mechanisms"][core] == {**old["mechanisms"][core], "p": str(old["mechanisms"][core]["p"]),
                                           "q": str(old["mechanisms"][core]["q"])}

    def integers(node):  # every number a double-reading parser meets is below 2^53
        if isinstance(node, dict):
            return [x for value in node.values() for x in integers(value)]
        return [node] if isinstance(node, int) else []

    assert max(integers(new)) < 2**53 < max(integers(old))
    assert ToPLRandomizer.from_json(client.to_json()) == ToPLRandomizer.from_json(client.to_json(version=1)) == client
    with pytest.raises(ValueError, match="version must be one of \\[1, 2\\], got 3"):
        client.to_json(version=3)


@pytest.mark.parametrize(("where", "value", "message"), [
    ("hybrid_alpha", 1814557055283096576, "mechanisms.hybrid_alpha must be a string of decimal digits in version 2"),
    ("piecewise.p", "+12", "mechanisms.piecewise.p must be a string of decimal digits in version 2 .*got '\\+12'"),
    ("square_wave.q", "0123", "mechanisms.square_wave.q must be a string of decimal digits"),
    ("square_wave.q", "1" * 20, "mechanisms.square_wave.q must be a string of decimal digits"),
])
def test_version_2_refuses_masses_that_are_not_decimal_strings(where, value, message):
    document = json.loads(ToPLRandomizer(epsilon=1.0, upper_bound=100.0, threshold=30.0).to_json())
    *path, key = where.split(".")
    node = document["mechanisms"]
    for step in path:
        node = node[step]
    node[key] = value
    with pytest.raises(ValueError, match=message):
        ToPLRandomizer.from_json(json.dumps(document))


def test_parameters_with_wrong_values_or_foreign_mechanisms_are_refused():
    document = json.loads(ToPLRandomizer(epsilon=1.0, upper_bound=100.0, buckets=32).to_json(version=1))
    with pytest.raises(ValueError, match=r"ToPL parameters: threshold must be <= upper_bound 100, got 150\."):
        ToPLRandomizer.from_json(_resealed({**document, "threshold": 150.0}))
    with pytest.raises(ValueError, match="ToPL parameters: epsilon must be a finite number > 0, got -1.0"):
        ToPLRandomizer.from_json(_resealed({**document, "epsilon": -1.0}))
    other = json.loads(json.dumps(document))
    other["mechanisms"]["square_wave"]["q"] += 1
    with pytest.raises(ValueError, match=r"mechanisms.square_wave.q is \d+, but the parameters give \d+ here"):
        ToPLRandomizer.from_json(_resealed(other))


def test_the_collector_refuses_reports_made_with_other_parameters_or_off_the_grid():
    collector = ToPLCollector(epsilon=1.0, upper_bound=100.0, hold=100, max_range=256, buckets=32)
    stale = ToPLRandomizer(epsilon=2.0, upper_bound=100.0, buckets=32).report_batch([1.0], 0).to_json()
    with pytest.raises(ValueError, match="were made with parameters '[0-9a-f]{16}', but the collector's are "
                                         "'[0-9a-f]{16}' \\(theta is not yet published\\)"):
        collector.receive_json(stale)
    made_with = collector.client().parameters_id
    line = '{"format": "dpstream.topl.reports/1", "parameters": "%s", "mechanism": [0, 0], "report": [%s]}'
    with pytest.raises(ValueError, match=r"report at position 1 \(0-based\) is 2.5, not an integer \(off the grid\)"):
        collector.receive_json(line % (made_with, "3, 2.5"))
    with pytest.raises(ValueError, match=r"report at position 1 \(0-based\) is 999, not a point of the grid "
                                         r"\(an integer in \[0, 47\]\)"):
        collector.receive_json(line % (made_with, "3, 999"))
    with pytest.raises(ValueError, match=r"mechanism at position 0 \(0-based\) is 5, not one of"):
        collector.receive_json(line.replace("[0, 0]", "[5, 0]") % (made_with, "3, 4"))
    with pytest.raises(ValueError, match="miss the field\\(s\\) report"):
        collector.receive_json('{"format": "dpstream.topl.reports/1", "parameters": "x", "mechanism": []}')
    with pytest.raises(ValueError, match="mechanism and report must have one length, got 2 and 1"):
        collector.receive_json(line.replace("[0, 0]", "[0, 0]") % (made_with, "3"))
    assert collector.receive_json(line % (made_with, "3, 4")).size == 0 and collector.received == 2


def _doc_block(name: str) -> str:
    blocks = re.findall(r"```python\n(# file: (\S+).*?)```", DOCS.read_text(), flags=re.S)
    return next(code for code, file in blocks if file == name)


def test_the_two_process_example_of_the_docs_runs(tmp_path):
    """The collector and the client of docs/topl.md in two processes, joined by a pipe of JSON lines."""
    for name in ("topl_collector.py", "topl_client.py"):
        (tmp_path / name).write_text(_doc_block(name))
    values = _stream(2600, seed=12)
    values[7] = 900.0  # the client clips it (clip=True), as the example says
    np.savetxt(tmp_path / "values.txt", values)
    command = (f"{sys.executable} topl_client.py values.txt parameters.json 2000 3 | "
               f"{sys.executable} topl_collector.py parameters.json 2000 > estimates.txt")
    source = str(Path(dpstream.__file__).resolve().parents[1])  # this checkout's package, whatever the cwd
    environment = {**os.environ, "PYTHONPATH": source + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    estimates = np.loadtxt(tmp_path / "estimates.txt")
    topl = ToPL(epsilon=1.0, upper_bound=100.0, hold=2000, max_range=4096, clip=True, seed=3)
    assert np.array_equal(estimates, topl.release(values))  # the same reports as in one process
    assert f"theta = {topl.threshold:g}" in done.stderr


def test_the_client_clips_or_names_a_bad_value_plainly():
    client = ToPLRandomizer(epsilon=1.0, upper_bound=100.0)
    with pytest.raises(ValueError, match=r"^value at position 3 \(0-based\) is 900, outside \[0, 100\] "
                                         r"\(clip=True clips it\)\.$"):
        client.report_batch([1.0, 2.0, 3.0, 900.0], 0)
    with pytest.raises(ValueError, match=r"^value at position 0 \(0-based\) is nan, not a finite number\.$"):
        client.report(np.float64("nan"), 0)
    clipping = ToPLRandomizer(epsilon=1.0, upper_bound=100.0, clip=True)
    assert np.array_equal(clipping.report_batch([900.0, -5.0], 4).report, client.report_batch([100.0, 0.0], 4).report)
    with pytest.raises(TypeError, match="clip must be True or False, got 1"):
        ToPLRandomizer(epsilon=1.0, upper_bound=100.0, clip=1)


def test_no_message_shows_a_numpy_repr():
    """Errors print plain numbers, never np.float64(...) or np.int64(...)."""
    collector = _published(ToPLCollector(epsilon=1.0, upper_bound=10.0, hold=1, buckets=8), 5.0)
    attempts = [
        lambda: ToPLRandomizer(epsilon=1.0, upper_bound=np.float64(10.0), threshold=np.float64(11.5)),
        lambda: ToPLRandomizer(epsilon=1.0, upper_bound=10.0).report_batch(np.array([np.float64(12.5)]), 0),
        lambda: collector.receive_batch(np.array([PM_REPORT], dtype=np.int8), np.array([np.int64(10**6)])),
        lambda: collector.receive_batch(np.array([SR_REPORT]), np.array([np.float64(0.5)])),
        lambda: collector.receive_batch(np.array([SW_REPORT]), np.array([np.int64(3)])),
        lambda: SquareWave(epsilon=1.0, grid=8).check_reports(np.array([np.float64(2.5)])),
        lambda: ToPL(epsilon=1.0, upper_bound=10.0, hold=1).release(np.array([np.float64(11.0)])),
    ]
    for attempt in attempts:
        with pytest.raises((ValueError, TypeError)) as error:
            attempt()
        assert "np." not in str(error.value), str(error.value)


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
    with pytest.raises(ValueError, match="position 1 \\(0-based\\) must be in \\[0, 100\\]"):
        topl.release([500.0])
    with pytest.raises(TypeError, match="must be numbers"):
        topl.release_one("3")
    assert ToPL(epsilon=0.5, upper_bound=100.0, hold=10, clip=True, seed=0).release([500.0] * 12).size == 2
    with pytest.raises(ValueError, match=r"threshold must be <= upper_bound 10, got 11\."):
        ToPLRandomizer(epsilon=1.0, upper_bound=10.0, threshold=11.0)
    with pytest.raises(ValueError, match=r"buckets must be an integer in \[2, 65536\], got 1000000\."):
        ToPLRandomizer(epsilon=1.0, upper_bound=10.0, buckets=10**6)
    with pytest.raises(ValueError, match=r"stream_grid must be an integer >= 1, got 0\."):
        ToPL(epsilon=1.0, upper_bound=10.0, stream_grid=0)
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
