"""A zCDP release continued from its state states what its first run stated: the (epsilon, delta) target's delta
is kept in the binary tree's snapshot (a resumed ``bt-zcdp --state`` run was stated at the default 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.accounting import DEFAULT_DELTA, rho_for
from dpstream.cli import cli
from dpstream.release.binary_tree import BinaryTreeCounter, ZcdpBinaryTree


def _same_guarantee(a, b) -> None:
    assert (a.rho, a.epsilon, a.delta, a.label, str(a)) == (b.rho, b.epsilon, b.delta, b.label, str(b))


@pytest.mark.parametrize("delta", [1e-3, 1e-5, DEFAULT_DELTA, 1e-9])
def test_a_restored_zcdp_tree_states_its_targets_delta(delta):
    tree = ZcdpBinaryTree(epsilon=1.0, delta=delta, upper_bound=4.0, max_range=16, key=b"k" * 32)
    values = np.arange(40) % 5
    first = tree.release(values[:23])
    for restore in (BinaryTreeCounter.from_state, ZcdpBinaryTree.from_state):
        again = restore(tree.state)
        assert isinstance(again, ZcdpBinaryTree) and again.rho == tree.rho == rho_for(1.0, delta)
        _same_guarantee(again.privacy(), tree.privacy())
        assert again.privacy().delta == delta and again.privacy().epsilon <= 1.0
        whole = ZcdpBinaryTree(epsilon=1.0, delta=delta, upper_bound=4.0, max_range=16, key=b"k" * 32)
        np.testing.assert_array_equal(np.concatenate((first, again.release(values[23:]))), whole.release(values))


def test_a_state_taken_before_the_target_was_kept_restores_at_its_rho_and_the_default_delta():
    tree = ZcdpBinaryTree(epsilon=1.0, delta=1e-3, upper_bound=4.0, max_range=16, key=b"k" * 32)
    tree.release(np.ones(5))
    state = tree.state
    params = {k: v for k, v in state["params"].items() if k not in ("epsilon", "delta")}
    old = {**state, "params": {**params, "epsilon": None, "rho": tree.rho}}  # the layout before: rho alone
    again = BinaryTreeCounter.from_state(old)
    assert type(again) is BinaryTreeCounter and again.rho == tree.rho and again.position == 5
    _same_guarantee(again.privacy(), tree.privacy(DEFAULT_DELTA))


def _guarantee_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("privacy")]


@pytest.mark.parametrize("keyed", [False, True])
def test_a_resumed_bt_zcdp_run_prints_the_first_runs_guarantee(tmp_path, keyed):
    values = tmp_path / "values.csv"
    rows = [f"k{i % 2},{i % 7}\n" if keyed else f"{i % 7}\n" for i in range(60)]
    header = "key,value\n" if keyed else ""
    values.write_text(header + "".join(rows[:30]))
    args = ["release", str(values), "-o", str(tmp_path / "out.csv"), "--method", "bt-zcdp", "--epsilon", "1",
            "--delta", "1e-3", "--upper-bound", "10", "--state", str(tmp_path / "state"),
            *(["--key-column", "key", "--column", "value"] if keyed else [])]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    values.write_text(header + "".join(rows))
    resumed = CliRunner().invoke(cli, args)
    assert resumed.exit_code == 0 and "resumed" in resumed.output, resumed.output
    stated = _guarantee_lines(first.output)
    assert stated and _guarantee_lines(resumed.output) == stated
    assert f"{rho_for(1.0, 1e-3):g}-zCDP, so (1, 0.001)-DP" in stated[0]
