"""The budget store across releases: refusals under adaptive sequences, accounting, subjects, the commands."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import dpstream
from dpstream.accounting import Zcdp, ZcdpGuarantee, rho_for, rho_of_pure
from dpstream.cli import cli
from dpstream.durable import StreamState
from dpstream.durable.budget_store import BudgetExhausted, BudgetStore, KeyCharged
from dpstream.durable.keys import key_fingerprint
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


# -- release --budget-store ------------------------------------------------------------------

def _stream(tmp_path, n=400):
    path = tmp_path / "values.txt"
    path.write_text("".join(f"{i % 7}\n" for i in range(n)))
    return path


def _release(*args, seed=1):
    seeded = [] if seed is None else ["--seed", str(seed)]
    return CliRunner().invoke(cli, ["release", *map(str, args), "--upper-bound", "10", *seeded])


def test_release_is_charged_before_it_publishes_and_refused_past_the_total(tmp_path):
    store, values = tmp_path / "budget.json", _stream(tmp_path)
    BudgetStore.create(store, epsilon=2.5)
    first = _release(values, "-o", tmp_path / "a.txt", "--method", "tops", "--hold", "100", "--epsilon", "1",
                     "--budget-store", store)
    assert first.exit_code == 0, first.output
    # the charge comes before the threshold chosen on the hold-out is said
    assert first.output.index("budget store: charged 1 (") < first.output.index("threshold theta")
    assert _release(values, "-o", tmp_path / "b.txt", "--method", "bt", "--epsilon", "1", "--budget-store",
                    store).exit_code == 0
    refused = _release(values, "-o", tmp_path / "c.txt", "--method", "tops", "--hold", "100", "--epsilon", "1",
                       "--budget-store", store)
    assert refused.exit_code == 2 and "needs epsilon 1 but the budget store has 0.5 left of 2.5" in refused.output
    assert "threshold theta" not in refused.output and not (tmp_path / "c.txt").exists()
    assert BudgetStore.open(store).spent == 2.0
    approximate = _release(values, "-o", tmp_path / "d.txt", "--method", "pak", "--hold", "100", "--epsilon", "0.1",
                           "--budget-store", store)
    assert approximate.exit_code == 2 and "pure and zCDP releases only" in approximate.output


def test_a_resumed_state_is_charged_once_and_keys_and_windows_are_subjects_of_their_own(tmp_path):
    store, values = tmp_path / "budget.json", _stream(tmp_path)
    BudgetStore.create(store, rho=1.0)
    run = [values, "-o", tmp_path / "d.txt", "--method", "bt-zcdp", "--epsilon", "1", "--delta", "1e-6", "--state",
           tmp_path / "state", "--budget-store", store]
    assert _release(*run).exit_code == 0
    again = _release(*run)
    assert again.exit_code == 0 and "charged by an earlier run of this release, not again" in again.output
    pure = _release(values, "-o", tmp_path / "e.txt", "--method", "bt", "--epsilon", "0.5", "--budget-store", store)
    assert pure.exit_code == 0
    spent = BudgetStore.open(store)
    assert len(spent.charges) == 2 and spent.spent == pytest.approx(spent.charges[0].amount + 0.125)
    keyed = tmp_path / "keyed.csv"
    keyed.write_text("k,v\n" + "".join(f"k{i % 3},{i % 7}\n" for i in range(300)))
    mixed = _release(keyed, "-o", tmp_path / "k.csv", "--key-column", "k", "--column", "v", "--method", "bt",
                     "--epsilon", "1", "--budget-store", store)
    assert mixed.exit_code == 2 and "is about EVENT_LEVEL; release" in mixed.output
    assert "is about EVENT_LEVEL in each key" in mixed.output and not (tmp_path / "k.csv").exists()
    per_key = tmp_path / "keys.json"
    BudgetStore.create(per_key, epsilon=1.5)
    args = [keyed, "--key-column", "k", "--column", "v", "--method", "bt", "--epsilon", "1", "--budget-store", per_key]
    assert "charged 1 (every key alike)" in _release(*args[:1], "-o", tmp_path / "k1.csv", *args[1:]).output
    assert _release(*args[:1], "-o", tmp_path / "k2.csv", *args[1:]).exit_code == 2  # 1 + 1 > 1.5, for every key
    windows = tmp_path / "windows.json"
    BudgetStore.create(windows, epsilon=1.0)
    assert _release(values, "-o", tmp_path / "w.txt", "--method", "bt", "--w-event", "10", "--epsilon", "1",
                    "--budget-store", windows).exit_code == 0
    assert BudgetStore.open(windows).report().splitlines()[0].endswith("about WEvent(w=10)")


def test_an_aggregate_and_a_release_are_about_different_subjects(tmp_path):
    """A unit-level aggregate protects a unit's rows in a window, a release one value of a stream: one store holds
    one of them, and the other is refused before it publishes (with one line)."""
    store = tmp_path / "budget.json"
    BudgetStore.create(store, rho=1.0)
    assert _release(_stream(tmp_path), "-o", tmp_path / "a.txt", "--method", "bt", "--epsilon", "1",
                    "--budget-store", store).exit_code == 0
    rows = tmp_path / "rows.csv"
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in range(0, 86400, 3600) for m in range(3)))
    refused = CliRunner().invoke(cli, [
        "aggregate", str(rows), "-o", str(tmp_path / "agg.csv"), "--time-column", "time", "--unit-column", "meter",
        "--column", "kwh", "--bucket", "1h", "--unit-window", "1d", "--unit-bound", "30", "--epsilon", "1", "--seed",
        "1", "--budget-store", str(store)])
    assert refused.exit_code == 2 and "is about EVENT_LEVEL; release 'aggregate -o" in refused.output
    said = [line for line in refused.output.strip().splitlines() if not line.startswith("warning: --seed")]
    assert len(said) == 1 and not (tmp_path / "agg.csv").exists()


@settings(max_examples=5, deadline=None)
@given(asks=st.lists(st.tuples(st.sampled_from(["bt", "bt-zcdp", "tops"]), st.floats(0.2, 1.5)), min_size=2,
                     max_size=4))
def test_adaptive_release_sequences_on_one_store_never_pass_the_total(tmp_path_factory, asks):
    """Releases of several methods, each choosing its epsilon from what the store has left (adaptive): a release
    runs exactly when its cost fits, a refused one writes nothing and changes nothing."""
    tmp = tmp_path_factory.mktemp("releases")
    store, values, total = tmp / "budget.json", _stream(tmp, 100), 1.0
    BudgetStore.create(store, rho=total)
    for i, (method, share) in enumerate(asks):
        left = BudgetStore.open(store).left
        epsilon = round(max(share * math.sqrt(2 * max(left, 0.005)), 0.05), 3)  # adapted to what is left
        extra = ["--delta", "1e-6"] if method == "bt-zcdp" else ["--threshold", "5"] if method == "tops" else []
        cost = rho_for(epsilon, 1e-6) if method == "bt-zcdp" else rho_of_pure(epsilon)
        before = store.read_bytes()
        result = _release(values, "-o", tmp / f"{i}.txt", "--method", method, "--epsilon", epsilon, *extra,
                          "--budget-store", store)
        if cost <= left * (1 - 1e-9):
            assert result.exit_code == 0, result.output
            assert BudgetStore.open(store).left == pytest.approx(left - cost, abs=1e-9)
        elif cost > left * (1 + 1e-9):
            assert result.exit_code == 2 and "the budget store has" in result.output
            assert store.read_bytes() == before and not (tmp / f"{i}.txt").exists()
        assert BudgetStore.open(store).spent <= total * (1 + 1e-12)


def test_concurrent_releases_charge_one_after_the_other(tmp_path):
    """Five release processes at once on a store with room for three: three run, two are refused, none is lost."""
    store, values = tmp_path / "budget.json", _stream(tmp_path, 200)
    BudgetStore.create(store, epsilon=3.0)
    env = {**os.environ, "PYTHONPATH": str(Path(dpstream.__file__).parents[1])}
    processes = [subprocess.Popen([sys.executable, "-m", "dpstream.cli", "release", str(values), "-o",
                                   str(tmp_path / f"{i}.txt"), "--method", "bt", "--epsilon", "1", "--upper-bound",
                                   "10", "--budget-store", str(store)], env=env, stderr=subprocess.DEVNULL)
                 for i in range(5)]
    codes = sorted(process.wait(timeout=120) for process in processes)
    assert codes == [0, 0, 0, 2, 2]
    assert BudgetStore.open(store).spent == 3.0 and len(BudgetStore.open(store).charges) == 3
    assert sum((tmp_path / f"{i}.txt").exists() for i in range(5)) == 3


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


def test_a_state_made_again_under_the_name_of_a_charged_one_is_a_new_release_and_charged_again(tmp_path):
    # a new state is a new key, fresh noise on the same people's data: a charge named after its path alone would
    # let a deleted and re-made state release again uncharged
    store, values = tmp_path / "budget.json", _stream(tmp_path)
    BudgetStore.create(store, rho=1.0)
    run = ["--method", "banded-zcdp", "--epsilon", "1", "--delta", "1e-6", "--max-range", "8", "--state",
           tmp_path / "state", "--budget-store", store]
    assert _release(values, "-o", tmp_path / "a.txt", *run).exit_code == 0
    assert "not again" in _release(values, "-o", tmp_path / "a.txt", *run).output  # resumed: the same release
    (tmp_path / "state").unlink()
    before = store.read_bytes()  # made again of the same seed: the same key, the same noise -- refused
    same = _release(values, "-o", tmp_path / "b.txt", *run)
    assert same.exit_code == 2 and "--seed 1 makes the key charged for release --state" in same.output
    assert store.read_bytes() == before and not (tmp_path / "state").exists() and not (tmp_path / "b.txt").exists()
    again = _release(values, "-o", tmp_path / "b.txt", *run, seed=2)
    assert again.exit_code == 0 and "not again" not in again.output, again.output
    charges = BudgetStore.open(store).charges
    assert len(charges) == 2 and charges[0].amount == charges[1].amount
    assert "not again" in _release(values, "-o", tmp_path / "b.txt", *run, seed=2).output  # resumed: charged once
    assert len(BudgetStore.open(store).charges) == 2


# -- copies of a state -------------------------------------------------------------------------

_BT = ["--method", "bt-zcdp", "--epsilon", "1", "--delta", "1e-6"]


def _copied(tmp_path):
    """A store, a first run of ``s`` (unseeded: a fresh key) on 400 values, and a copy of its state and output made
    after it (``c``, ``c.txt``); returns the store, the longer stream the original continues on, other data."""
    store, values = tmp_path / "budget.json", _stream(tmp_path)
    BudgetStore.create(store, rho=1.0)
    first = _release(values, "-o", tmp_path / "a.txt", *_BT, "--state", tmp_path / "s", "--budget-store", store,
                     seed=None)
    assert first.exit_code == 0, first.output
    shutil.copy(tmp_path / "s", tmp_path / "c")
    shutil.copy(tmp_path / "a.txt", tmp_path / "c.txt")
    longer, other = tmp_path / "longer.txt", tmp_path / "other.txt"
    longer.write_text(values.read_text() + "3\n" * 100)
    other.write_text(values.read_text() + "9\n" * 100)
    return store, longer, other


def test_a_copied_state_resumed_at_its_own_path_is_refused_and_the_original_resumes(tmp_path):
    # each copy is consistent with itself (the output and input checks pass), and the copy's charge was named after
    # its own path: it published the noise of the original's next positions on other data, charged as a new release
    store, longer, other = _copied(tmp_path)
    before, state, output = store.read_bytes(), (tmp_path / "c").read_bytes(), (tmp_path / "c.txt").read_bytes()
    copy = _release(other, "-o", tmp_path / "c.txt", *_BT, "--state", tmp_path / "c", "--budget-store", store,
                    seed=None)
    assert copy.exit_code == 2 and copy.output.count("\n") == 1, copy.output
    assert f"c's key was charged for release --state {(tmp_path / 's').resolve()} (budget store" in copy.output
    assert "is a copy of that state; resuming a copy on other data would publish the same noise twice" in copy.output
    assert store.read_bytes() == before and (tmp_path / "c").read_bytes() == state
    assert (tmp_path / "c.txt").read_bytes() == output  # nothing published
    original = _release(longer, "-o", tmp_path / "a.txt", *_BT, "--state", tmp_path / "s", "--budget-store", store,
                        seed=None)
    assert original.exit_code == 0 and "not again" in original.output, original.output
    assert len(BudgetStore.open(store).charges) == 1
    assert len((tmp_path / "a.txt").read_text().splitlines()) == 500


def test_a_store_without_fingerprints_still_charges_and_records_them_on_a_resume(tmp_path):
    store, longer, other = _copied(tmp_path)
    old = json.loads(store.read_text())  # as an earlier version wrote it: no fingerprint, version 1
    del old["charges"][0]["key"]
    store.write_text(json.dumps({**old, "version": 1}))
    assert CliRunner().invoke(cli, ["budget", str(store)]).exit_code == 0
    original = _release(longer, "-o", tmp_path / "a.txt", *_BT, "--state", tmp_path / "s", "--budget-store", store,
                        seed=None)
    assert original.exit_code == 0 and "not again" in original.output, original.output
    charge, = BudgetStore.open(store).charges
    assert charge.key == key_fingerprint(StreamState.read(tmp_path / "s").key)  # recorded by the resume
    copy = _release(other, "-o", tmp_path / "c.txt", *_BT, "--state", tmp_path / "c", "--budget-store", store,
                    seed=None)
    assert copy.exit_code == 2 and "is a copy of that state" in copy.output


def test_a_charge_records_a_fingerprint_of_the_key_never_the_key(tmp_path):
    store, _, _ = _copied(tmp_path)
    key = StreamState.read(tmp_path / "s").key
    charge, = BudgetStore.open(store).charges
    assert charge.key == key_fingerprint(key) and len(charge.key) == 64
    assert charge.key not in (key.hex(), hashlib.sha256(key).hexdigest())  # a hash of its own domain
    text = store.read_bytes()
    assert all(form not in text for form in (key, key.hex().encode(), base64.b64encode(key),
                                             base64.urlsafe_b64encode(key).rstrip(b"=")))
    assert charge.key not in CliRunner().invoke(cli, ["budget", str(store)]).output
    with pytest.raises(KeyCharged, match="was charged for release 'release --state"):  # the library's refusal
        BudgetStore.open(store).charge("another", _zcdp(0.01), key=charge.key)
    assert BudgetStore.open(store).charge("another", _zcdp(0.01), key=key_fingerprint(bytes(32))).key is not None


def test_a_copied_aggregate_state_is_refused(tmp_path):
    store = tmp_path / "budget.json"
    BudgetStore.create(store, epsilon=5.0)
    rows = tmp_path / "rows.csv"
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in range(0, 86400, 3600) for m in range(3)))
    run = ["aggregate", str(rows), "--time-column", "time", "--unit-column", "meter", "--column", "kwh", "--bucket",
           "1h", "--unit-window", "1d", "--unit-bound", "24", "--epsilon", "1", "--budget-store", str(store)]
    first = CliRunner().invoke(cli, [*run, "-o", str(tmp_path / "a.csv"), "--state", str(tmp_path / "s")])
    assert first.exit_code == 0, first.output
    shutil.copy(tmp_path / "s", tmp_path / "c")
    shutil.copy(tmp_path / "a.csv", tmp_path / "c.csv")
    before = store.read_bytes()
    copy = CliRunner().invoke(cli, [*run, "-o", str(tmp_path / "c.csv"), "--state", str(tmp_path / "c")])
    assert copy.exit_code == 2 and copy.output.count("\n") == 1 and "is a copy of that state" in copy.output
    assert store.read_bytes() == before
    resumed = CliRunner().invoke(cli, [*run, "-o", str(tmp_path / "a.csv"), "--state", str(tmp_path / "s")])
    assert resumed.exit_code == 0 and "not again" in resumed.output, resumed.output


def test_a_run_without_state_is_named_by_its_command_and_output_and_charged_every_time(tmp_path):
    # the name carried "(pid, time_ns)" to be unique: 'aggregate -o out.txt (1546, 1795...)'
    store, values = tmp_path / "budget.json", _stream(tmp_path)
    BudgetStore.create(store, epsilon=2.5)
    run = [values, "-o", tmp_path / "a.txt", "--method", "bt", "--epsilon", "1", "--budget-store", store, "--force"]
    assert [_release(*run).exit_code for _ in range(2)] == [0, 0]
    refused = _release(*run)
    assert refused.exit_code == 2, refused.output
    assert f"release 'release -o {tmp_path / 'a.txt'}' needs epsilon 1 but the budget store has 0.5 left" \
        in refused.output
    charges = BudgetStore.open(store).charges
    assert [(c.release, c.amount) for c in charges] == [(f"release -o {tmp_path / 'a.txt'}", 1.0)] * 2
    listing = CliRunner().invoke(cli, ["budget", str(store)]).output
    assert listing.count(f"  epsilon 1  release -o {tmp_path / 'a.txt'}\n") == 2 and "spent epsilon 2 by 2" in listing


def test_only_a_resumable_name_is_charged_once(tmp_path):
    store = BudgetStore.create(tmp_path / "b.json", epsilon=3.0)
    assert [store.charge("r", _pure(1.0), resumable=False).amount for _ in range(2)] == [1.0, 1.0]
    assert store.charge("s", _pure(0.5)).amount == store.charge("s", _pure(0.5)).amount == 0.5
    assert math.isclose(BudgetStore.open(tmp_path / "b.json").spent, 2.5)
    with pytest.raises(BudgetExhausted, match="release 'r' needs epsilon 1 but the budget store has 0.5 left of 3"):
        store.charge("r", _pure(1.0), resumable=False)
