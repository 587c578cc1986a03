"""Cost of one-value batches into a stream with a large hold-out, through the service's ingest and storage.

A ToPS stream with ``hold: 2^20`` (``--hold``) is fed ``--held`` values in batches of 100,000 (the
largest the API takes), then ``--batches`` batches of one value each, all still held out; the
seconds per one-value batch and the database's size (its file and its ``-wal``) are printed.  The
application runs in this process (no HTTP server), on a SQLite file in a temporary directory, so
what is measured is the batch's transaction: the mechanism, its stored state and the commit::

    python benchmarks/service_holdout.py                           # hold 2^20, 1,000,000 values held
    python benchmarks/service_holdout.py --held 4000000 --hold 4194304 --database-key

Measured (2 shared cores, SQLite on local disk), ms per one-value batch, database + ``-wal`` size:

======================================  ===============================  ============================
held before the timed batches           state rewritten every batch      held-out values in rows
======================================  ===============================  ============================
1,000,000 (hold 2^20)                   159 ms, 21 MB + 21 MB             11 ms, 8 MB + 4 MB
4,000,000 (hold 2^22)                   895 ms, 85 MB + 86 MB             13 ms, 32 MB + 4 MB
1,000 (hold 2^20)                       --                                7 ms
1,000,000, database key, 1,000 batches  225 ms, 27 MB + 27 MB             6 ms, 8 MB + 4 MB
the same, one batch after a reload      330 ms                            148 ms (1,010 rows read)
======================================  ===============================  ============================

A reload reads one row per batch held so far: the hold-out fed in many small batches costs a process
that loads it more than one fed in few large ones.

Bounded: a fixed count of batches; well under a minute with the defaults.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from dpstream.service import create_app

TOKEN = "benchmark-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LARGEST_BATCH = 100_000


def _sizes(path: Path) -> str:
    sizes = {suffix: os.path.getsize(f"{path}{suffix}") if os.path.exists(f"{path}{suffix}") else 0
             for suffix in ("", "-wal")}
    return f"database {sizes[''] / 1e6:.1f} MB, -wal {sizes['-wal'] / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=int, default=1 << 20)
    parser.add_argument("--held", type=int, default=1_000_000, help="values held before the one-value batches")
    parser.add_argument("--batches", type=int, default=50, help="one-value batches timed")
    parser.add_argument("--database-key", action="store_true", help="seal the secrets with a database key")
    args = parser.parse_args()
    if args.held + args.batches >= args.hold:
        parser.error("--held + --batches must stay below --hold (every timed batch is held out)")
    values = np.random.default_rng(1).integers(0, 80, args.held + args.batches).astype(float)
    key = os.urandom(32) if args.database_key else None
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "service.db"
        app = create_app(database=f"sqlite:///{path}", token=TOKEN, database_key=key)
        try:
            http = TestClient(app)
            answer = http.post("/streams", headers=AUTH, json={"name": "held", "method": "tops", "epsilon": 1.0,
                                                                "upper_bound": 100.0, "hold": args.hold,
                                                                "max_range": 1 << 16, "seed": 1})
            assert answer.status_code == 201, answer.text
            started = time.perf_counter()
            for first in range(0, args.held, LARGEST_BATCH):
                part = values[first:min(first + LARGEST_BATCH, args.held)]
                answer = http.post("/streams/held/values", headers=AUTH,
                                   json={"values": part.tolist(), "first_position": first})
                assert answer.status_code == 200, answer.text
            filled = time.perf_counter() - started
            print(f"hold {args.hold:,}: {args.held:,} values held in {filled:.1f} s; {_sizes(path)}")
            started = time.perf_counter()
            for position in range(args.held, args.held + args.batches):
                answer = http.post("/streams/held/values", headers=AUTH,
                                   json={"values": [values[position]], "first_position": position})
                assert answer.status_code == 200, answer.text
            each = (time.perf_counter() - started) / args.batches
            print(f"{args.batches} one-value batches: {each * 1000:.1f} ms per batch; {_sizes(path)}"
                  f"{' (database key)' if key else ''}")
        finally:
            app.state.storage.close()
        app = create_app(database=f"sqlite:///{path}", token=TOKEN, database_key=key)  # another process
        try:
            started = time.perf_counter()
            position = args.held + args.batches
            answer = TestClient(app).post("/streams/held/values", headers=AUTH,
                                          json={"values": [1.0], "first_position": position})
            assert answer.status_code == 200, answer.text
            print(f"a one-value batch in a process that loads the stream first: "
                  f"{(time.perf_counter() - started) * 1000:.0f} ms")
        finally:
            app.state.storage.close()


if __name__ == "__main__":
    main()
