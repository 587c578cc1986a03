"""The issue's full crash run: 1,000,000 values into a ToPS stream of a real ``dpstream serve``, SIGKILLed at 10
random moments and restarted, on SQLite and on PostgreSQL (a server of its own).

Checks what tests/test_service_crash.py checks at 200,000 values: every acknowledged batch's released
values are served unchanged after the restarts, and the whole released stream equals an
uninterrupted run with the same seed, position for position, bit for bit::

    python benchmarks/service_crash.py                   # both databases
    python benchmarks/service_crash.py --database sqlite --values 1000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_helpers import PostgresServer  # noqa: E402
from test_service_crash import crash_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    for kind in (["sqlite", "postgresql"] if args.database == "both" else [args.database]):
        start = time.perf_counter()
        rng = np.random.default_rng(args.seed)
        if kind == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                crash_run(f"sqlite:///{folder}/crash.db", total=args.values, batch=args.batch, kills=args.kills,
                          rng=rng)
        else:
            postgres = PostgresServer().start()
            try:
                crash_run(postgres.new_database(), total=args.values, batch=args.batch, kills=args.kills, rng=rng)
            finally:
                postgres.stop()
        print(f"{kind}: {args.values} values, {args.kills} SIGKILLs: every acknowledged batch unchanged, the stream "
              f"equals the uninterrupted run ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
