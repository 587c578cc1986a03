"""The delta of an (epsilon, delta) target: at most ``MAX_TARGET_DELTA`` (1e-3) wherever a new zCDP release spends the
rho of a target (``release --method *-zcdp``, ``aggregate --noise gaussian``, the service's new streams and
aggregates), while a release begun at a larger delta before that rule continues; a bad ``--delta`` on the command
line is one line naming the option and the value."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.accounting import MAX_TARGET_DELTA, check_target_delta, rho_for
from dpstream.cli import cli
from dpstream.release.binary_tree import ZcdpBinaryTree
from dpstream.service import create_app

TOKEN = "target-delta-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REFUSED = "Invalid value for '--delta': the delta of an (epsilon, delta) target must lie in (0, 0.001]"


@pytest.mark.parametrize("delta", [0.999999, 0.5, 0.1, 1.5e-3])
def test_a_target_delta_above_the_cap_is_refused_for_a_new_release_and_converts_for_one_begun(delta):
    with pytest.raises(ValueError, match=rf"must lie in \(0, 0.001\] .*, got {delta!r}\."):
        check_target_delta(delta)
    # the library converts it: a release begun at it (before the rule) is restored and continues
    assert ZcdpBinaryTree(epsilon=1.0, delta=delta, upper_bound=5.0).rho == rho_for(1.0, delta) > 0


def test_the_cap_itself_and_below_are_targets():
    assert check_target_delta(MAX_TARGET_DELTA) == MAX_TARGET_DELTA
    assert 0 < rho_for(1.0, MAX_TARGET_DELTA) and rho_for(1.0, 1e-6) < rho_for(1.0, MAX_TARGET_DELTA)
    for bad in (math.nan, 0.0, -1e-6, True, "1e-6"):
        with pytest.raises(ValueError, match="the delta of an"):
            check_target_delta(bad)


def _release(tmp_path, method, delta, *extra):
    values = tmp_path / "values.txt"
    values.write_text("1\n2\n3\n")
    return CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "out.txt"), "--method", method,
                                    "--epsilon", "1", "--upper-bound", "5", "--delta", delta, "--seed", "1", *extra])


def _aggregate(tmp_path, delta):
    rows = tmp_path / "rows.csv"
    rows.write_text("time,unit,value\n2024-01-01T00:00:00,a,1\n2024-01-01T01:00:00,b,2\n")
    return CliRunner().invoke(cli, ["aggregate", str(rows), "-o", str(tmp_path / "out.csv"), "--time-column", "time",
                                    "--unit-column", "unit", "--column", "value", "--bucket", "1h", "--unit-window",
                                    "1d", "--unit-bound", "5", "--epsilon", "1", "--noise", "gaussian", "--delta",
                                    delta, "--seed", "1"])


@pytest.mark.parametrize("delta", ["nan", "1.5", "0", "-1"])
@pytest.mark.parametrize("method", ["bt-zcdp", "pak"])
def test_a_bad_release_delta_names_the_option_and_the_value(tmp_path, method, delta):
    result = _release(tmp_path, method, delta)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--delta': delta must lie in (0, 1], got {float(delta)!r}." in result.output
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("method", ["bt-zcdp", "tops-zcdp", "sqrt-zcdp", "banded-zcdp"])
def test_a_zcdp_release_refuses_a_void_delta_in_one_line(tmp_path, method):
    # it stated "1-zCDP, so (0, 0.999999)-DP"
    result = _release(tmp_path, method, "0.999999")
    assert result.exit_code == 2, result.output
    assert REFUSED in result.output
    assert "got 0.999999." in result.output and "-DP" not in result.output
    assert not (tmp_path / "out.txt").exists()


def test_pak_keeps_its_delta_of_the_threshold(tmp_path):
    # PAK's delta is that of its smooth-sensitivity threshold, not a zCDP target: the cap is not its
    result = _release(tmp_path, "pak", "0.01", "--hold", "2", "--max-range", "8")
    assert result.exit_code == 0 and "privacy: (1, 0.01)-DP" in result.output, result.output


@pytest.mark.parametrize(("delta", "words"), [
    ("nan", "delta must lie in (0, 1], got nan."), ("1.5", "delta must lie in (0, 1], got 1.5."),
    ("0", "delta must lie in (0, 1], got 0.0."), ("0.999999", REFUSED[len("Invalid value for '--delta': "):]),
])
def test_a_bad_aggregate_delta_names_the_option_and_the_value(tmp_path, delta, words):
    result = _aggregate(tmp_path, delta)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--delta': " + words in result.output and not (tmp_path / "out.csv").exists()


def test_the_cap_is_a_target_the_commands_take(tmp_path):
    assert _aggregate(tmp_path, "1e-3").exit_code == 0
    assert _release(tmp_path, "bt-zcdp", "1e-3").exit_code == 0


@pytest.fixture
def http(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/delta.db", token=TOKEN)
    yield TestClient(app)
    app.state.storage.close()


@pytest.mark.parametrize(("path", "body"), [
    ("/streams", {"method": "bt-zcdp", "upper_bound": 5.0, "max_range": 64}),
    ("/aggregates", {"noise": "gaussian", "bucket": "1h", "unit_window": "1d", "unit_bound": 5.0}),
])
def test_the_service_refuses_a_void_delta_in_one_line(http, path, body):
    answer = http.post(path, json={"name": "void", "epsilon": 1.0, "delta": 0.999999, **body}, headers=AUTH)
    message = answer.json()["message"]
    assert answer.status_code == 422 and "\n" not in message, answer.text
    assert "the delta of an (epsilon, delta) target must lie in (0, 0.001]" in message and "0.999999" in message
    assert http.get(f"{path}/void").status_code == 404


@pytest.mark.parametrize("command", ["release", "aggregate"])
def test_a_state_begun_at_a_larger_delta_continues_at_it(tmp_path, monkeypatch, command):
    # states written before the cap hold their delta: refusing them would strand a release half published
    import dpstream.accounting

    state = ["--state", str(tmp_path / "state.json")]
    run = (lambda: _release(tmp_path, "bt-zcdp", "0.01", *state)) if command == "release" else \
        (lambda: _aggregate_state(tmp_path, "0.01", state))
    monkeypatch.setattr(dpstream.accounting, "MAX_TARGET_DELTA", 0.5)  # as an earlier version let it begin
    first = run()
    assert first.exit_code == 0 and "0.01)-DP" in first.output, first.output
    monkeypatch.undo()
    again = run()
    assert again.exit_code == 0 and "0.01)-DP" in again.output, again.output
    (tmp_path / "state.json").unlink()
    (tmp_path / ("out.txt" if command == "release" else "out.csv")).unlink()
    refused = run()  # a new release at it is refused
    assert refused.exit_code == 2 and REFUSED in refused.output, refused.output


def _aggregate_state(tmp_path, delta, state):
    rows = tmp_path / "rows.csv"
    rows.write_text("time,unit,value\n2024-01-01T00:00:00,a,1\n2024-01-01T01:00:00,b,2\n")
    return CliRunner().invoke(cli, ["aggregate", str(rows), "-o", str(tmp_path / "out.csv"), "--time-column", "time",
                                    "--unit-column", "unit", "--column", "value", "--bucket", "1h", "--unit-window",
                                    "1d", "--unit-bound", "5", "--epsilon", "1", "--noise", "gaussian", "--delta",
                                    delta, "--seed", "1", *state])
