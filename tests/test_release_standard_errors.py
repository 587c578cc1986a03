"""``release --standard-errors``: the column of each released value's exact standard error (bt, bt-zcdp), on every
output layout and resumed with --state; refused for the other methods; the vectorized standard errors of the
binary tree against its range standard error, position by position."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.tops import ToPS


@pytest.mark.parametrize("max_range", [2**20, 16, 13, 2])
def test_the_vectorized_standard_errors_are_the_range_standard_errors(max_range):
    tree = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=max_range, seed=0)
    positions = np.concatenate([np.arange(200), np.arange(max(max_range - 3, 0), max_range + 40), [5 * max_range - 1]])
    slow = [tree.range_standard_error(int(p), int(p) + 1) for p in positions]
    assert tree.standard_errors(positions).tolist() == slow
    with pytest.raises(ValueError, match="positions must be >= 0"):
        tree.standard_errors([-1])


def _run(tmp_path, *args):
    return CliRunner().invoke(cli, ["release", *map(str, args), "--upper-bound", "10", "--seed", "1",
                                    "--granularity", "0.5"])


def test_the_column_is_the_noise_s_standard_error_on_every_layout(tmp_path):
    values = tmp_path / "v.txt"
    values.write_text("".join(f"{i % 7}\n" for i in range(300)))
    plain = _run(tmp_path, values, "-o", tmp_path / "p.csv", "--method", "bt", "--epsilon", "1", "--standard-errors")
    assert plain.exit_code == 0, plain.output
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(rows) == 300 and list(rows[0]) == ["value", "standard_error"]
    # every value's error is that of the nodes its increment does not cancel; at position 0 one leaf: Laplace of
    # scale h B / epsilon = 20 x 10 / 1, standard deviation sqrt(2) times that (up to the grid's discreteness)
    tree = BinaryTreeCounter(epsilon=1.0, upper_bound=10.0, granularity=0.5, seed=1)
    assert [float(row["standard_error"]) for row in rows] == tree.standard_errors(np.arange(300)).tolist()
    assert float(rows[0]["standard_error"]) == pytest.approx(math.sqrt(2) * 20 * 10 / 1.0, rel=1e-5)
    same = _run(tmp_path, values, "-o", tmp_path / "q.txt", "--method", "bt", "--epsilon", "1")
    assert [row["value"] for row in rows] == (tmp_path / "q.txt").read_text().split()  # the values are unchanged
    keyed = tmp_path / "k.csv"
    keyed.write_text("t,k,v\n" + "".join(f"{i},k{i % 3},{i % 7}\n" for i in range(90)))
    got = _run(tmp_path, keyed, "-o", tmp_path / "ko.csv", "--key-column", "k", "--time-column", "t", "--column",
               "v", "--method", "bt-zcdp", "--epsilon", "1", "--delta", "1e-6", "--standard-errors")
    assert got.exit_code == 0 and same.exit_code == 0, got.output
    rows = list(csv.DictReader((tmp_path / "ko.csv").open()))
    assert list(rows[0]) == ["key", "position", "time", "value", "standard_error"] and len(rows) == 90
    zcdp = BinaryTreeCounter(rho=0.0243560, upper_bound=10.0, granularity=0.5, seed=1)  # only sigma matters below
    ratio = zcdp.standard_errors(np.array([int(row["position"]) for row in rows]))
    errors = np.array([float(row["standard_error"]) for row in rows])
    assert np.allclose(errors / errors[0], ratio / ratio[0])  # a function of each key's position alone


def test_resumed_with_the_column_and_refused_elsewhere(tmp_path):
    values = tmp_path / "v.txt"
    values.write_text("".join(f"{i % 7}\n" for i in range(100)))
    run = ["-o", tmp_path / "d.csv", "--method", "bt", "--epsilon", "1", "--standard-errors", "--state",
           tmp_path / "state"]
    assert _run(tmp_path, values, *run).exit_code == 0
    longer = tmp_path / "w.txt"
    longer.write_text(values.read_text() * 2)
    assert _run(tmp_path, longer, *run).exit_code == 0
    lines = (tmp_path / "d.csv").read_text().splitlines()
    assert lines[0] == "value,standard_error" and len(lines) == 201 and lines.count("value,standard_error") == 1
    changed = _run(tmp_path, longer, *run[:-3], "--state", tmp_path / "state")
    assert changed.exit_code != 0 and "standard_errors" in changed.output
    tops = CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "t.txt"), "--method", "topl",
                                    "--epsilon", "1", "--upper-bound", "10", "--standard-errors"])
    assert tops.exit_code == 2 and "--standard-errors applies to --method tops, pak, pak-uncapped, bt" in tops.output
    assert len(tops.output.strip().splitlines()) == 1 and not (tmp_path / "t.txt").exists()


def test_the_service_s_released_values_carry_their_standard_error_where_known(tmp_path):
    from fastapi.testclient import TestClient

    from dpstream.service import create_app

    token = "errors-test-token-0123456789"
    admin = {"Authorization": f"Bearer {token}"}
    app = create_app(database=f"sqlite:///{tmp_path}/errors.db", token=token)
    try:
        http = TestClient(app)
        for name, method in (("tree", "bt"), ("tops", "tops")):
            made = http.post("/streams", json={"name": name, "method": method, "epsilon": 1.0, "upper_bound": 10.0,
                                               "hold": 40, "max_range": 64, "seed": 1} if method == "tops" else
                             {"name": name, "method": method, "epsilon": 1.0, "upper_bound": 10.0, "seed": 1},
                             headers=admin)
            assert made.status_code == 201, made.text
        values = [float(i % 7) for i in range(50)]
        answer = http.post("/streams/tree/values", json={"values": values}, headers=admin).json()["released"]
        model = http.get("/streams/tree").json()["error_model"]
        tree = BinaryTreeCounter(epsilon=1.0, upper_bound=10.0, seed=1)
        assert model == tree.error_model()
        assert [row["standard_error"] for row in answer] == tree.standard_errors(np.arange(50)).tolist()
        read = http.get("/streams/tree/released?after=9&limit=5").json()["released"]
        assert [row["standard_error"] for row in read] == tree.standard_errors(np.arange(10, 15)).tolist()
        with http.stream("GET", "/streams/tree/events?after=47") as events:
            lines = [line for _, line in zip(range(8), events.iter_lines()) if line.startswith("data:")]
        assert '"standard_error":' in lines[0]
        plain = http.post("/streams/tops/values", json={"values": values}, headers=admin).json()["released"]
        tops = ToPS(epsilon=1.0, upper_bound=10.0, hold=40, max_range=64, seed=1)
        tops.release(values)  # theta is chosen at the end of the hold-out: the errors are known from then on
        assert [row["standard_error"] for row in plain] == tops.standard_errors(np.arange(40, 50)).tolist()
        for statistic in ("sum", "mean"):
            params = {"epsilon": 1.0, "bucket": "1h", "unit_window": "1d", "unit_bound": 5, "upper_bound": 5.0,
                      "statistic": statistic, **({"unit_max_rows": 10} if statistic == "mean" else {})}
            assert http.post("/aggregates", json={"name": statistic, **params, "seed": 3}, headers=admin).status_code \
                == 201
            rows = {"times": [3600 * i for i in range(30)], "units": [f"u{i % 4}" for i in range(30)],
                    "values": [1.0] * 30, "flush": True}
            got = http.post(f"/aggregates/{statistic}/rows", json=rows, headers=admin).json()["released"]
            assert got
            if statistic == "sum":  # every bucket's noise: the aggregate's exact standard error
                expected = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5, upper_bound=5.0,
                                         seed=3).standard_error()
                assert {row["standard_error"] for row in got} == {expected}
            else:  # a mean's ratio has no exact one: not there
                assert all("standard_error" not in row for row in got)
    finally:
        app.state.storage.close()
