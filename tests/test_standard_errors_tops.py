"""Exact standard errors of ToPS (pure and zCDP) and PAK: each released value's and each range's, against the
linear map from the nodes' noise to the outputs found by brute force (zeros released with unit noise on one node
at a time), against the empirical variance of seeded releases, through the CLI's column, and the refusals."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from dpstream.cli import cli
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.pak import PAK
from dpstream.release.periodic import PeriodicPerturber
from dpstream.release.perturber import HierarchicalPerturber
from dpstream.release.tops import ToPS
from test_zcdp import OneHot

_CASES = {
    "recent, b = 2, a short last leaf per chunk": lambda s: HierarchicalPerturber(
        threshold=1, epsilon=1, max_range=20, fanout=2, smoothed_levels=1, noise=s, prior=0.3),
    "mean across chunks, b = 3": lambda s: HierarchicalPerturber(
        threshold=1, epsilon=1, max_range=27, fanout=3, smoothed_levels=1, smoother="mean", noise=s),
    "moving average, zCDP": lambda s: HierarchicalPerturber(
        threshold=1, rho=0.5, max_range=16, fanout=2, smoothed_levels=2, smoother="moving_average", noise=s),
    "exponential, 2 measured levels": lambda s: HierarchicalPerturber(
        threshold=1, epsilon=1, max_range=30, fanout=2, smoothed_levels=2, smoother="exponential", noise=s),
    "smoothing off (median allowed)": lambda s: HierarchicalPerturber(
        threshold=1, epsilon=1, max_range=16, fanout=2, smoothed_levels=0, smoother="median", noise=s),
    "period with a phase": lambda s: PeriodicPerturber(
        threshold=1, epsilon=1, period=3, phase=1, max_range=12, fanout=2, levels=2, noise=s,
        smoother="moving_average"),
    "period, shape, exponential, zCDP, one leaf per chunk": lambda s: PeriodicPerturber(
        threshold=1, rho=1, period=3, phase=2, max_range=7, fanout=2, levels=1, noise=s, shape=[1, 2, 3],
        smoother="exponential"),
    "period, shape, mean, 3 levels": lambda s: PeriodicPerturber(
        threshold=1, epsilon=1, period=2, phase=1, max_range=8, fanout=2, levels=3, noise=s, shape=[1, 3],
        smoother="mean"),
    "ToPS, public threshold, zCDP": lambda s: ToPS(
        rho=0.3, upper_bound=4, threshold=2, max_range=16, fanout=4, smoothed_levels=1, noise=s,
        smoother="moving_average", window=3),
}


def _outputs(make, sampler, n: int):
    made = make(sampler)
    return made, made.release(np.zeros(n))


def _linear_map(make, n: int) -> tuple[np.ndarray, object]:
    """Rows: released positions; columns: nodes (grid units), the prior's constant taken out."""
    probe = OneHot(np.zeros(10**5, dtype=np.int64))
    _outputs(make, probe, n)
    nodes = probe.used
    made, base = _outputs(make, OneHot(np.zeros(nodes, dtype=np.int64)), n)
    columns = [(_outputs(make, OneHot(np.eye(nodes, dtype=np.int64)[k]), n)[1] - base) / made.granularity
               for k in range(nodes)]
    return np.stack(columns, axis=1), made


def _node_variance(made) -> float:
    return (made._stream if isinstance(made, ToPS) else made).node_variance


@pytest.mark.parametrize("case", list(_CASES))
def test_each_value_s_and_each_range_s_standard_error_is_the_noise_s_linear_map(case):
    n = 40
    linear, made = _linear_map(_CASES[case], n)
    variance = _node_variance(made)
    want = np.sqrt(variance * np.sum(linear**2, axis=1))
    np.testing.assert_allclose(made.standard_errors(np.arange(n)), want, rtol=1e-9, atol=1e-12)
    starts, stops = np.triu_indices(n + 1, k=1)
    for start, stop in zip(starts.tolist(), stops.tolist()):
        expected = np.sqrt(variance * np.sum(linear[start:stop].sum(axis=0) ** 2))
        assert made.range_standard_error(start, stop) == pytest.approx(expected, rel=1e-8, abs=1e-12), (start, stop)


def test_the_standard_errors_match_the_variance_of_seeded_releases():
    # zCDP: discrete Gaussian nodes, so each output is close to normal and (runs - 1) s^2 / sigma^2 ~ chi^2(runs - 1)
    runs, n = 400, 96

    def perturber(seed):
        return PeriodicPerturber(threshold=1, rho=0.5, period=5, phase=3, max_range=40, fanout=2, levels=3,
                                 smoother="moving_average", prior=0.0, seed=seed)

    outputs = np.stack([perturber(seed).release(np.zeros(n)) for seed in range(runs)])
    positions = np.array([1, 3, 6, 41, 57, 95])  # a partial first leaf, predictions and last values, two chunks
    ratio = (runs - 1) * outputs[:, positions].var(axis=0, ddof=1) / perturber(0).standard_errors(positions) ** 2
    low, high = stats.chi2.ppf([1e-6, 1 - 1e-6], runs - 1)
    assert np.all((ratio > low) & (ratio < high)), ratio / (runs - 1)
    sums = outputs[:, 10:60].sum(axis=1)
    ratio = (runs - 1) * sums.var(ddof=1) / perturber(0).range_standard_error(10, 60) ** 2
    assert low < ratio < high, ratio / (runs - 1)


def test_tops_states_its_perturber_s_errors_once_theta_is_chosen():
    values = np.random.default_rng(0).integers(0, 20, size=3000).astype(float)
    tops = ToPS(epsilon=1.0, upper_bound=100, hold=1000, max_range=4096, smoother="mean", seed=4)
    with pytest.raises(ValueError, match="known once the hold-out has chosen it"):
        tops.standard_errors([1000])
    tops.release(values)
    assert tops.standard_errors([1000, 2999]).tolist() == tops._stream.standard_errors([0, 1999]).tolist()
    assert tops.range_standard_error(1500, 2500) == tops._stream.range_standard_error(500, 1500)
    with pytest.raises(ValueError, match="positions must be >= hold = 1000"):
        tops.standard_errors([999])
    median = ToPS(epsilon=1.0, upper_bound=100, threshold=50, max_range=256, smoothed_levels=1, smoother="median",
                  seed=0)
    median.release(values[:10])
    with pytest.raises(ValueError, match="median smoother's predictions are not a linear function"):
        median.standard_errors([0])


def test_pak_states_its_tree_s_errors_given_tau_and_its_held_sum_s():
    values = np.random.default_rng(1).integers(0, 50, size=3000).astype(float)
    pak = PAK(epsilon=1.0, upper_bound=100, hold=1000, max_range=1024, seed=2)
    assert pak.held_sum_standard_error is None
    pak.release(values)
    tree = BinaryTreeCounter(epsilon=1.0, upper_bound=pak.threshold, max_range=1024, granularity=pak.granularity,
                             seed=0)
    assert pak.standard_errors(np.arange(1000, 3000)).tolist() == tree.standard_errors(np.arange(2000)).tolist()
    assert pak.range_standard_error(1200, 2100) == tree.range_standard_error(200, 1100)
    scale = pak._held_noise.noise.scale  # Lap(tau / eps2) on the grid
    assert pak.held_sum_standard_error == pytest.approx(np.sqrt(laplace_units_variance(scale)) * pak.granularity)


def _release(tmp_path, *args):
    return CliRunner().invoke(cli, ["release", *map(str, args), "--upper-bound", "100", "--seed", "1"])


@pytest.mark.parametrize("method", ["tops", "tops-zcdp", "pak"])
def test_the_column_is_the_api_s_standard_errors(tmp_path, method):
    values = tmp_path / "v.txt"
    values.write_text("".join(f"{(i * 7) % 23}\n" for i in range(1500)))
    extra = ["--delta", "1e-6"] if method == "tops-zcdp" else []
    got = _release(tmp_path, values, "-o", tmp_path / "o.csv", "--method", method, "--epsilon", "1", "--hold", "500",
                   "--max-range", "256", *extra, "--standard-errors")
    assert got.exit_code == 0, got.output
    rows = list(csv.DictReader((tmp_path / "o.csv").open()))
    assert list(rows[0]) == ["value", "standard_error"] and len(rows) == 1000
    cls = {"tops": ToPS, "pak": PAK}.get(method)
    if cls is None:
        from dpstream.release.tops_zcdp import ZcdpToPS as cls
    made = cls(epsilon=1.0, upper_bound=100.0, hold=500, max_range=256, seed=1, **({"delta": 1e-6} if extra else {}))
    released = made.release(np.loadtxt(values))
    assert [float(row["value"]) for row in rows] == released.tolist()  # the same release
    assert [float(row["standard_error"]) for row in rows] == made.standard_errors(np.arange(500, 1500)).tolist()


def test_keyed_columns_are_each_key_s_and_the_median_is_refused_in_one_line(tmp_path):
    keyed = tmp_path / "k.csv"
    keyed.write_text("t,k,v\n" + "".join(f"{i},k{i % 2},{(i % 9) * (1 + i % 2)}\n" for i in range(600)))
    got = _release(tmp_path, keyed, "-o", tmp_path / "ko.csv", "--key-column", "k", "--time-column", "t",
                   "--column", "v", "--method", "tops", "--epsilon", "1", "--hold", "100", "--max-range", "64",
                   "--standard-errors")
    assert got.exit_code == 0, got.output
    rows = list(csv.DictReader((tmp_path / "ko.csv").open()))
    assert list(rows[0]) == ["key", "position", "time", "value", "standard_error"] and len(rows) == 400
    columns = {}
    for key in ("k0", "k1"):  # each key chooses its own theta: its errors are its own stream's
        mine = [row for row in rows if row["key"] == key]
        assert [int(row["position"]) for row in mine] == list(range(100, 300))
        columns[key] = np.array([float(row["standard_error"]) for row in mine])
    assert np.all(np.isfinite(columns["k0"])) and not np.array_equal(columns["k0"], columns["k1"])
    refused = _release(tmp_path, keyed, "-o", tmp_path / "m.csv", "--key-column", "k", "--column", "v", "--method",
                       "tops", "--epsilon", "1", "--smoother", "median", "--standard-errors")
    assert refused.exit_code == 2 and "--standard-errors does not apply to --smoother median" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and not (tmp_path / "m.csv").exists()


def test_a_mean_states_its_sum_s_and_its_count_s_standard_errors(tmp_path):
    from fastapi.testclient import TestClient

    from dpstream.release.aggregate import UnitAggregate
    from dpstream.service import create_app

    params = dict(epsilon=1.0, bucket=3600, window=86400, unit_bound=5, upper_bound=5.0, max_rows=10, seed=3)
    mean = UnitAggregate(statistic="mean", **params)
    # half the budget each: the sum's nodes as a sum aggregate's at epsilon / 2; the count's on the unit grid
    half = UnitAggregate(**{**params, "epsilon": 0.5})
    assert mean.standard_error("sum") == mean.standard_error() == half.standard_error()
    count = UnitAggregate(statistic="count", **{**params, "epsilon": 0.5, "unit_bound": 10})
    assert mean.standard_error("count") == count.standard_error()
    with pytest.raises(ValueError):
        mean.standard_error("mean")
    token = "errors-test-token-0123456789"
    app = create_app(database=f"sqlite:///{tmp_path}/mean.db", token=token)
    try:
        http, admin = TestClient(app), {"Authorization": f"Bearer {token}"}
        made = http.post("/aggregates", json={"name": "m", "epsilon": 1.0, "bucket": "1h", "unit_window": "1d",
                                              "unit_bound": 5, "upper_bound": 5.0, "statistic": "mean",
                                              "unit_max_rows": 10, "seed": 3}, headers=admin)
        assert made.status_code == 201, made.text
        rows = {"times": [3600 * i for i in range(30)], "units": [f"u{i % 4}" for i in range(30)],
                "values": [1.0] * 30, "flush": True}
        got = http.post("/aggregates/m/rows", json=rows, headers=admin).json()["released"]
        assert got and all("standard_error" not in row for row in got)
        assert {(row["sum_standard_error"], row["count_standard_error"]) for row in got} == {
            (mean.standard_error("sum"), mean.standard_error("count"))}
    finally:
        app.state.storage.close()


@pytest.mark.parametrize("case", list(_CASES))
def test_the_public_error_model_gives_the_same_standard_errors(case):
    import json

    from dpstream.release.tops_errors import model_standard_errors

    made = _CASES[case](OneHot(np.zeros(10**4, dtype=np.int64)))
    made.release(np.zeros(5))
    model = json.loads(json.dumps(made.error_model()))  # what the service stores among a stream's facts
    positions = np.arange(60)
    for _ in range(2):  # the model is read, never changed
        got = model_standard_errors(model, positions - model.get("first_position", 0))
        assert got.tolist() == made.standard_errors(positions).tolist()
    median = HierarchicalPerturber(threshold=1, epsilon=1, max_range=16, fanout=2, smoothed_levels=1,
                                   smoother="median", seed=0)
    assert median.error_model() is None


def test_a_resumed_tops_release_writes_the_column_of_an_uninterrupted_one(tmp_path):
    values = [f"{(i * 7) % 23}\n" for i in range(1500)]
    (tmp_path / "part.txt").write_text("".join(values[:900]))
    (tmp_path / "all.txt").write_text("".join(values))
    run = ["--method", "tops", "--epsilon", "1", "--hold", "500", "--max-range", "256", "--standard-errors"]
    for name in ("part.txt", "all.txt"):
        assert _release(tmp_path, tmp_path / name, "-o", tmp_path / "r.csv", *run, "--state",
                        tmp_path / "s").exit_code == 0
    assert _release(tmp_path, tmp_path / "all.txt", "-o", tmp_path / "u.csv", *run, "--state",
                    tmp_path / "t").exit_code == 0
    assert (tmp_path / "r.csv").read_text() == (tmp_path / "u.csv").read_text()
    assert (tmp_path / "r.csv").read_text().startswith("value,standard_error\n")


def test_a_pak_stream_in_the_service_carries_its_tree_s_standard_errors(tmp_path):
    from fastapi.testclient import TestClient

    from dpstream.service import create_app

    token = "errors-test-token-0123456789"
    app = create_app(database=f"sqlite:///{tmp_path}/pak.db", token=token)
    try:
        http, admin = TestClient(app), {"Authorization": f"Bearer {token}"}
        params = {"epsilon": 1.0, "upper_bound": 10.0, "hold": 40, "max_range": 64}
        made = http.post("/streams", json={"name": "p", "method": "pak", **params, "seed": 1}, headers=admin)
        assert made.status_code == 201, made.text
        values = [float(i % 7) for i in range(100)]
        got = http.post("/streams/p/values", json={"values": values}, headers=admin).json()["released"]
        pak = PAK(**params, seed=1)
        pak.release(values)
        assert [row["standard_error"] for row in got] == pak.standard_errors(np.arange(40, 100)).tolist()
        facts = http.get("/streams/p").json()
        assert facts["held_sum_standard_error"] == pak.held_sum_standard_error
        assert facts["error_model"]["first_position"] == 40
    finally:
        app.state.storage.close()
