"""The registry of mechanisms: each entry audited and contract-tested; one entry is all a new mechanism needs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.audit import MECHANISMS
from dpstream.cli import cli
from dpstream.durable import StreamState
from dpstream.release import BinaryTreeCounter, ToPS
from dpstream.release.contract import read_header
from dpstream.release.registry import (
    REGISTRY,
    Mechanism,
    class_of_kind,
    mechanism,
    register,
    served,
    specific_options,
    unregister,
)
from dpstream.service import create_app
from dpstream.service.mechanisms import STREAM_METHODS, derive_key
from test_contract import CONTRACT_TESTED

TOKEN = "registry-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_mechanism_is_audited(name):
    audits = REGISTRY[name].audits
    assert audits, f"{name} names no audit experiment"
    missing = sorted(set(audits) - set(MECHANISMS))
    assert not missing, f"{name} names audits {missing} that do not exist"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_mechanism_has_a_contract_test(name):
    assert name in CONTRACT_TESTED, f"{name} has no test of its streaming contract in tests/test_contract.py"


def test_one_name_per_mechanism_and_the_stored_names_are_read():
    assert class_of_kind("bt") is BinaryTreeCounter is class_of_kind("binary-tree")
    assert class_of_kind("no such kind") is None
    served_names = ["tops", "bt", "pak", "bt-zcdp", "sqrt-zcdp", "tops-zcdp", "banded-zcdp"]
    assert set(STREAM_METHODS) == set(served()) == set(served_names)
    assert list(STREAM_METHODS) == served_names  # the order the service's messages name them in
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=10, max_range=16, seed=1)
    counter.release(np.ones(5))
    old = {**counter.state, "mechanism": "binary-tree"}
    assert counter.state["mechanism"] == "bt"
    read_header(old, "bt")  # accepted
    np.testing.assert_array_equal(BinaryTreeCounter.from_state(old).release(np.ones(7)), counter.release(np.ones(7)))
    with pytest.raises(ValueError, match="method must be one of tops, pak, pak-uncapped, bt, topl"):
        mechanism("binary-tree")
    assert "noise" in specific_options() and "hold" not in REGISTRY["bt"].options


class Throwaway(BinaryTreeCounter):
    """A mechanism that exists only in this test: the binary tree under a snapshot kind of its own."""

    KIND = "throwaway"

    @property
    def state(self) -> dict[str, Any]:
        return {**super().state, "mechanism": self.KIND}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Throwaway:
        read_header(state, cls.KIND)
        twin = BinaryTreeCounter.from_state({**state, "mechanism": "bt"})
        twin.__class__ = cls
        return twin


@pytest.fixture
def throwaway():
    entry = register(Mechanism("throwaway", Throwaway, Throwaway.KIND, lambda counter: "a throw-away mechanism",
                               {"granularity": "granularity"}, service=4, audits=("binary-tree",)))
    yield entry
    unregister(entry.name)


def _release(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["release", *args])
    assert result.exit_code == 0, result.output
    return result


def test_a_mechanism_added_through_the_registry_alone_runs_in_the_cli_with_state_and_in_the_service(tmp_path,
                                                                                                     throwaway):
    values = np.random.default_rng(4).integers(0, 30, 300).astype(float)
    (tmp_path / "part.txt").write_text("".join(f"{v}\n" for v in values[:170]))
    (tmp_path / "all.txt").write_text("".join(f"{v}\n" for v in values))
    common = ["--method", "throwaway", "--epsilon", "1", "--upper-bound", "30", "--max-range", "64", "--seed", "3"]
    # the CLI: the releases of the class it registered, announced with its description
    result = _release(str(tmp_path / "all.txt"), "-o", str(tmp_path / "plain.out"), *common)
    assert "a throw-away mechanism" in result.stderr
    expected = Throwaway(epsilon=1.0, upper_bound=30.0, max_range=64, seed=3).release(values)
    assert (tmp_path / "plain.out").read_text() == "".join(f"{v!r}\n" for v in expected.tolist())
    # --state: an interrupted release continued from its state equals an uninterrupted one
    resumed, whole = tmp_path / "resumed.out", tmp_path / "whole.out"
    _release(str(tmp_path / "part.txt"), "-o", str(resumed), *common, "--state", str(tmp_path / "resumed.state"))
    _release(str(tmp_path / "all.txt"), "-o", str(resumed), *common, "--state", str(tmp_path / "resumed.state"))
    _release(str(tmp_path / "all.txt"), "-o", str(whole), *common, "--state", str(tmp_path / "whole.state"))
    assert resumed.read_bytes() == whole.read_bytes() and len(whole.read_bytes().splitlines()) == values.size
    # the service: a stream of it continues from its stored state in a new process
    database = f"sqlite:///{tmp_path}/service.db"
    released = []
    for first in (0, 170):
        app = create_app(database=database, token=TOKEN)
        try:
            http = TestClient(app)
            if first == 0:
                answer = http.post("/streams", json={"name": "t", "method": "throwaway", "epsilon": 1.0,
                                                     "upper_bound": 30.0, "max_range": 64, "seed": 7}, headers=AUTH)
                assert answer.status_code == 201, answer.text
            chunk = values[first:170] if first == 0 else values[170:]
            answer = http.post("/streams/t/values", json={"values": chunk.tolist(), "first_position": first},
                               headers=AUTH)
            assert answer.status_code == 200, answer.text
            released += [row["value"] for row in answer.json()["released"]]
        finally:
            app.state.storage.close()
    keyed = Throwaway(epsilon=1.0, upper_bound=30.0, max_range=64, key=derive_key(7)).release(values)
    assert released == keyed.tolist()


def test_an_option_of_another_mechanism_is_refused_and_the_deprecated_noise_flag_still_works(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{v % 7}\n" for v in range(200)))
    base = [str(source), "-o", "-", "--epsilon", "1", "--upper-bound", "10", "--hold", "50", "--seed", "1"]
    runner = CliRunner()
    refused = runner.invoke(cli, ["release", *base, "--method", "tops", "--threshold-noise", "laplace"])
    assert refused.exit_code == 2 and "--threshold-noise does not apply to --method tops." in refused.stderr
    refused = runner.invoke(cli, ["release", *base, "--method", "tops", "--noise", "laplace"])
    assert refused.exit_code == 2 and "--noise does not apply to --method tops." in refused.stderr
    new = runner.invoke(cli, ["release", *base, "--method", "pak", "--threshold-noise", "gaussian"])
    old = runner.invoke(cli, ["release", *base, "--method", "pak", "--noise", "gaussian"])
    assert new.exit_code == old.exit_code == 2 and "is float-only" in new.stderr
    assert old.stderr == "warning: --noise is deprecated; use --threshold-noise.\n" + new.stderr
    assert "--noise" not in runner.invoke(cli, ["release", "--help"]).output.replace("--threshold-noise", "")


def test_the_optional_tops_options_reach_the_constructor_and_a_state_only_when_given(tmp_path):
    values = np.random.default_rng(5).gamma(2.0, 6.0, 600).clip(0, 40).round(1)
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{v}\n" for v in values))
    common = ["--epsilon", "1", "--upper-bound", "40", "--hold", "200", "--max-range", "64", "--seed", "2"]
    chosen = ["--period", "8", "--profile-bins", "4", "--selection", "exponential", "--no-window-leaves", "--c", "30"]
    _release(str(source), "-o", str(tmp_path / "out"), *common, *chosen)
    expected = ToPS(epsilon=1.0, upper_bound=40.0, hold=200, max_range=64, period=8, profile_bins=4,
                    selection="exponential", window_leaves=False, c=30.0, seed=2).release(values)
    assert (tmp_path / "out").read_text() == "".join(f"{v!r}\n" for v in expected.tolist())
    _release(str(source), "-o", str(tmp_path / "plain"), *common, "--state", str(tmp_path / "plain.state"))
    _release(str(source), "-o", str(tmp_path / "given"), *common, *chosen, "--state", str(tmp_path / "given.state"))
    plain = StreamState.read(tmp_path / "plain.state").params
    given = StreamState.read(tmp_path / "given.state").params
    assert not {"selection", "profile_bins", "window_leaves", "c"} & plain.keys()
    assert (given["selection"], given["profile_bins"], given["window_leaves"], given["c"]) == ("exponential", 4,
                                                                                               False, 30.0)
    refused = CliRunner().invoke(cli, ["release", str(source), "-o", "-", "--method", "bt", "--epsilon", "1",
                                       "--upper-bound", "40", "--selection", "exponential"])
    assert refused.exit_code == 2 and "--selection does not apply to --method bt." in refused.stderr
