"""Load of ``dpstream serve`` on loopback: ingestion rate, ToPL reports rate and the latency of small batches.

Starts its own server (and, for PostgreSQL, its own database server: tests/service_helpers.py), so
it needs nothing running::

    python benchmarks/service_load.py                       # SQLite and PostgreSQL
    python benchmarks/service_load.py --database sqlite --values 500000

Measured (client and server on one machine, so they share its cores):

* ingestion: a ToPS stream fed ``--values`` values in batches of 10,000 (values/s, end to end:
  JSON encoding, HTTP, checks, release, commit of values + state + ledger, the answer);
* reports: a ToPL collector fed ``--reports`` reports in batches of 10,000, randomized in
  advance by the client (reports/s of the service; randomizing is the clients' work);
* latency: ``--requests`` batches of 1,000 values, one at a time (p50, p99, max in ms).

Bounded: every phase sends a fixed count; the whole run takes well under a minute per database.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from dpstream.client import Client  # noqa: E402
from dpstream.release import ToPLRandomizer as LocalToPL  # noqa: E402
from service_helpers import TOKEN, PostgresServer, ServeProcess  # noqa: E402

BATCH = 10_000
SMALL = 1_000


def measure(database: str, *, values: int, reports: int, requests: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    server = ServeProcess(database).start()
    try:
        with Client(server.url, TOKEN) as client:
            client.create_stream("load", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            data = rng.integers(0, 80, values).astype(float)
            client.send("load", data[:BATCH], first_position=0)  # the hold-out: theta is chosen
            start = time.perf_counter()
            for first in range(BATCH, values, BATCH):
                client.send("load", data[first:first + BATCH], first_position=first)
            ingest = (values - BATCH) / (time.perf_counter() - start)

            client.create_collector("reports", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            local = LocalToPL.from_json(client.collector_parameters("reports"))
            client.send_reports("reports", local.report_batch(rng.uniform(0, 100, BATCH), bits=seed).to_json())
            local = LocalToPL.from_json(client.collector_parameters("reports"))  # theta is published
            documents = [local.report_batch(rng.uniform(0, 100, BATCH), bits=seed + i).to_json()
                         for i in range(reports // BATCH)]
            start = time.perf_counter()
            for document in documents:
                client.send_reports("reports", document)
            report_rate = len(documents) * BATCH / (time.perf_counter() - start)

            client.create_stream("latency", epsilon=1.0, upper_bound=100.0, hold=SMALL)
            small = rng.integers(0, 80, SMALL * (requests + 1)).astype(float)
            client.send("latency", small[:SMALL], first_position=0)
            seconds = []
            for i in range(1, requests + 1):
                start = time.perf_counter()
                client.send("latency", small[i * SMALL:(i + 1) * SMALL], first_position=i * SMALL)
                seconds.append(time.perf_counter() - start)
        ms = np.asarray(seconds) * 1e3
        return {"ingest_values_per_s": ingest, "reports_per_s": report_rate,
                "latency_p50_ms": float(np.percentile(ms, 50)), "latency_p99_ms": float(np.percentile(ms, 99)),
                "latency_max_ms": float(ms.max())}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--reports", type=int, default=500_000)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    results = {}
    for kind in (["sqlite", "postgresql"] if args.database == "both" else [args.database]):
        if kind == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                results[kind] = measure(f"sqlite:///{folder}/load.db", values=args.values, reports=args.reports,
                                        requests=args.requests)
        else:
            postgres = PostgresServer().start()
            try:
                results[kind] = measure(postgres.new_database(), values=args.values, reports=args.reports,
                                        requests=args.requests)
            finally:
                postgres.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'database':<12}{'values/s':>12}{'reports/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for kind, r in results.items():
        print(f"{kind:<12}{r['ingest_values_per_s']:>12,.0f}{r['reports_per_s']:>12,.0f}"
              f"{r['latency_p50_ms']:>9.1f}{r['latency_p99_ms']:>9.1f}{r['latency_max_ms']:>9.1f}")


if __name__ == "__main__":
    main()
