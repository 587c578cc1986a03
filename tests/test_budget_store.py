"""The budget store across releases: refusals under adaptive sequences, accounting, subjects, the commands."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.accounting import Zcdp, ZcdpGuarantee, rho_of_pure
from dpstream.cli import cli
from dpstream.durable.budget_store import BudgetExhausted, BudgetStore
from dpstream.privacy import ENTITY_ROW, EVENT_LEVEL, Part, PrivacyGuarantee, UnitLevel


def _zcdp(rho: float, relation=EVENT_LEVEL) -> ZcdpGuarantee:
    return ZcdpGuarantee.of(Part(what="r", budget=Zcdp(rho)), neighbours=relation)


def _pure(epsilon: float, relation=EVENT_LEVEL) -> PrivacyGuarantee:
    return PrivacyGuarantee(epsilon=epsilon, delta=0.0, neighbours=relation, composition="r")


@settings(max_examples=60, deadline=None)
@given(total=st.floats(0.05, 5.0), asks=st.lists(st.tuples(st.booleans(), st.floats(0.001, 2.0)), max_size=25),
       adapt=st.floats(0.0, 1.0))
def test_an_adaptive_sequence_never_passes_the_total(tmp_path_factory, total, asks, adapt):
    """Each release asks for an amount that may depend on what was accepted and refused before (adaptive);
    the store accepts exactly while the sum stays within the total, and a refusal changes nothing."""
    path = tmp_path_factory.mktemp("store") / "budget.json"
    store = BudgetStore.create(path, rho=total)
    spent, refused = 0.0, 0
    for i, (pure, base) in enumerate(asks):
        amount = base * (1.0 + adapt * refused) if i % 2 else base * (1.0 - adapt * spent / total / 2)
        guarantee = _pure(math.sqrt(2 * amount)) if pure else _zcdp(amount)
        cost = rho_of_pure(guarantee.epsilon) if pure else amount
        before = path.read_bytes()
        if spent + cost <= total * (1 - 1e-9):
            assert store.charge(f"r{i}", guarantee).amount == pytest.approx(cost)
            spent += cost
        elif spent + cost > total * (1 + 1e-9):
            with pytest.raises(BudgetExhausted):
                store.charge(f"r{i}", guarantee)
            assert path.read_bytes() == before
            refused += 1
        else:  # at the total up to float rounding: either answer is sound
            continue
        assert BudgetStore.open(path).spent <= total * (1 + 1e-12)
    assert BudgetStore.open(path).spent == pytest.approx(spent)


def test_pure_stores_take_pure_releases_and_zcdp_stores_convert_them(tmp_path):
    pure = BudgetStore.create(tmp_path / "pure.json", epsilon=2.0)
    pure.charge("a", _pure(1.5))
    with pytest.raises(BudgetExhausted, match="needs epsilon 1 but the budget store has 0.5 left of 2"):
        pure.charge("b", _pure(1.0))
    with pytest.raises(ValueError, match="cannot count a zCDP release"):
        pure.charge("c", _zcdp(0.1))
    zcdp = BudgetStore.create(tmp_path / "zcdp.json", rho=1.0)
    assert zcdp.charge("a", _pure(1.0)).amount == 0.5
    with pytest.raises(ValueError, match="pure and zCDP releases only"):
        zcdp.charge("b", PrivacyGuarantee(epsilon=0.1, delta=1e-9, neighbours=EVENT_LEVEL, composition=""))
    assert "left rho 0.5" in BudgetStore.open(tmp_path / "zcdp.json").report()


def test_a_release_charged_again_is_not_charged_twice_and_subjects_do_not_mix(tmp_path):
    store = BudgetStore.create(tmp_path / "b.json", rho=1.0)
    day = UnitLevel("household", "UTC day", "at most 30 in total")
    other_bounds = UnitLevel("household", "UTC day", "at most 10 in total")
    store.charge("resumed", _zcdp(0.4, day))
    store.charge("resumed", _zcdp(0.4, day))
    store.charge("other bounds", _zcdp(0.4, other_bounds))  # the same households' days: one budget
    assert BudgetStore.open(tmp_path / "b.json").spent == pytest.approx(0.8)
    with pytest.raises(ValueError, match="is about unit level: each household in each UTC day"):
        store.charge("entities", _zcdp(0.1, ENTITY_ROW))
    with pytest.raises(ValueError, match="exists already"):
        BudgetStore.create(tmp_path / "b.json", rho=1.0)
    with pytest.raises(ValueError, match="one of them"):
        BudgetStore.create(tmp_path / "c.json")


def test_concurrent_charges_queue_and_none_is_lost(tmp_path):
    path = tmp_path / "b.json"
    BudgetStore.create(path, rho=1.0)
    results: list[str] = []

    def charge(i: int) -> None:
        try:
            BudgetStore.open(path).charge(f"r{i}", _zcdp(0.1))
            results.append("ok")
        except BudgetExhausted:
            results.append("refused")

    threads = [threading.Thread(target=charge, args=(i,)) for i in range(14)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count("ok") == 10 and results.count("refused") == 4
    assert len(BudgetStore.open(path).charges) == 10


def test_the_commands_create_charge_and_show_a_store(tmp_path):
    store = tmp_path / "budget.json"
    made = CliRunner().invoke(cli, ["budget", str(store), "--new-rho", "0.06"])
    assert made.exit_code == 0 and "total rho 0.06" in made.output
    rows = tmp_path / "rows.csv"
    times = np.arange(0, 86400, 1800)
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in times for m in range(3)))
    run = ["aggregate", str(rows), "--time-column", "time", "--unit-column", "meter", "--column", "kwh", "--bucket",
           "30m", "--unit-window", "1d", "--unit-bound", "30", "--epsilon", "1", "--noise", "gaussian", "--delta",
           "1e-6", "--seed", "1", "--budget-store", str(store)]
    outputs = [tmp_path / f"out{i}.csv" for i in range(3)]
    results = [CliRunner().invoke(cli, [*run, "-o", str(out)]) for out in outputs]
    assert [r.exit_code for r in results] == [0, 0, 2], [r.output for r in results]
    assert "needs rho 0.024356 but the budget store has 0.0112881 left of 0.06" in results[2].output
    assert not outputs[2].exists()  # refused before anything is written
    shown = CliRunner().invoke(cli, ["budget", str(store)])
    assert "spent rho 0.0487119" in shown.output and "about unit level: each meter in each UTC day" in shown.output


@pytest.mark.parametrize("rho", ["1e308", "1e-300"])
def test_a_store_of_an_extreme_rho_is_shown_with_its_epsilon(tmp_path, rho):
    # "budget FILE --new-rho 1e308" wrote the store, then it and every later "budget FILE" said "math domain error"
    store = tmp_path / "budget.json"
    for command in (["budget", str(store), "--new-rho", rho], ["budget", str(store)]):
        shown = CliRunner().invoke(cli, command)
        assert shown.exit_code == 0, shown.output
        assert f"total rho {float(rho):g} (epsilon {'inf' if rho == '1e308' else '0'} at delta 1e-06)" in shown.output


def test_a_refused_input_output_or_option_is_not_charged(tmp_path):
    # the charge came before the input, the output and --checkpoint-seconds were checked: a misspelt column, an
    # existing output without --force spent the budget of a release never made
    store = tmp_path / "budget.json"
    CliRunner().invoke(cli, ["budget", str(store), "--new-epsilon", "5"])
    rows = tmp_path / "rows.csv"
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in range(0, 86400, 3600) for m in range(3)))
    run = ["aggregate", str(rows), "-o", str(tmp_path / "out.csv"), "--unit-column", "meter", "--column", "kwh",
           "--bucket", "1h", "--unit-window", "1d", "--unit-bound", "24", "--epsilon", "1", "--seed", "1",
           "--budget-store", str(store)]
    (tmp_path / "taken.csv").write_text("")
    for bad, message in ((["--time-column", "tme"], "has no column 'tme'"),  # each was refused after the charge
                         (["--time-column", "time", "-o", str(tmp_path / "taken.csv")], "pass --force"),
                         (["--time-column", "time", "--checkpoint-seconds", "5"], "applies with --state only")):
        refused = CliRunner().invoke(cli, [*run, *bad])
        assert refused.exit_code in (1, 2) and message in refused.output and "charged" not in refused.output
    assert BudgetStore.open(store).charges == []
    released = CliRunner().invoke(cli, [*run, "--time-column", "time"])
    assert released.exit_code == 0 and "budget store: charged 1" in released.output
    assert len(BudgetStore.open(store).charges) == 1


def test_summary_is_refused_for_a_budget_store_rather_than_ignored(tmp_path):
    store, other = tmp_path / "budget.json", tmp_path / "other.json"
    CliRunner().invoke(cli, ["budget", str(store), "--new-rho", "1"])
    for command in (["budget", str(other), "--new-rho", "1"], ["budget", str(store)]):  # creating one, showing one
        result = CliRunner().invoke(cli, [*command, "--summary", str(tmp_path / "s.csv")])
        assert result.exit_code == 2 and "--summary applies to the state of a release" in result.output
        assert not (tmp_path / "s.csv").exists()
    assert not other.exists()
