"""What the budget store adds to ``dpstream release``: the same release with and without ``--budget-store``,
interleaved (both under the same load of the machine), and the charge alone, in a file and in the service's
database::

    PYTHONPATH=src python benchmarks/budget_store_cost.py --values 1000000 --rounds 7

Each round runs ``release --method bt`` (and ``--method tops --threshold``) of the same file in this process, once
plain and once charging a store large enough never to refuse; the medians and their ratio are printed.  The
charge alone is a locked read and an atomic write with fsync (file) or one transaction (SQLite, synchronous=FULL).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

from dpstream.cli import cli
from dpstream.durable.budget_store import BudgetStore
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.service import open_storage
from dpstream.service.budgets import ServiceBudgets

METHODS = {"bt": ["--method", "bt"], "tops": ["--method", "tops", "--threshold", "6"]}


def _release(args: list[str]) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        cli.main(args, standalone_mode=False)
    return time.perf_counter() - start


def releases(folder: Path, values: int, rounds: int) -> None:
    data = folder / "values.txt"
    data.write_text("".join(f"{i % 7}\n" for i in range(values)))
    store = folder / "budget.json"
    BudgetStore.create(store, epsilon=1e9)
    for method, flags in METHODS.items():
        base = ["release", str(data), "-o", str(folder / "out.txt"), "--force", *flags, "--epsilon", "1",
                "--upper-bound", "10", "--granularity", "0.5"]
        plain, charged = [], []
        for _ in range(rounds):
            plain.append(_release(base))
            charged.append(_release([*base, "--budget-store", str(store)]))
        a, b = statistics.median(plain), statistics.median(charged)
        print(f"release --method {method}, {values:,} values: {a:.3f} s plain, {b:.3f} s with --budget-store "
              f"(median of {rounds}): {100 * (b - a) / a:+.1f}%")


def charges(folder: Path, count: int) -> None:
    guarantee = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="one release")
    store = BudgetStore.create(folder / "charges.json", epsilon=1e9)
    start = time.perf_counter()
    for i in range(count):
        store.charge(f"r{i}", guarantee)
    print(f"one charge of a file store: {1000 * (time.perf_counter() - start) / count:.1f} ms ({count} charges)")
    storage = open_storage(f"sqlite:///{folder}/service.db")
    budgets = ServiceBudgets(storage)
    budgets.create("b", "pure", 1e9, 1e-6)
    start = time.perf_counter()
    for i in range(count):
        budgets.charge("b", f"stream s{i}", guarantee)
    print(f"one charge of a service budget (SQLite): {1000 * (time.perf_counter() - start) / count:.1f} ms")
    storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--charges", type=int, default=100)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        releases(Path(folder), options.values, options.rounds)
        charges(Path(folder), options.charges)


if __name__ == "__main__":
    main()
