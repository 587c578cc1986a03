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

With ``--scoped-tokens`` the values and the reports are sent with a producer's and a contributor's token
(issued by ``POST /tokens``; the contributor's rate and batch size set out of the way), each looked up in
the database at every request, instead of the service's bootstrap token (compared in memory).

On PostgreSQL it then measures one and two ``dpstream serve`` processes on one database, as behind a
round-robin load balancer: two streams fed at once by two clients, ``--values`` values each in batches
of 10,000, batch ``i`` of a stream sent to process ``i mod P`` (values/s of both streams together);
and the latency of 1,000-value batches sent one at a time, alternating between the processes, so
that every batch reaches a process whose copy of the stream another process moved on (it reloads
the mechanism from the database first).

Bounded: every phase sends a fixed count; the whole run takes well under a minute per database.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from dpstream.client import Client  # noqa: E402
from dpstream.release import ToPLRandomizer as LocalToPL  # noqa: E402
from service_helpers import TOKEN, PostgresServer, ServeProcess  # noqa: E402

BATCH = 10_000
SMALL = 1_000


def _tokens(url: str, scoped: bool) -> tuple[str, str]:
    """The tokens the values and the reports are sent with: the bootstrap one, or a producer's and a contributor's."""
    if not scoped:
        return TOKEN, TOKEN
    issued = [httpx.post(f"{url}/tokens", json=document, headers={"Authorization": f"Bearer {TOKEN}"}).json()["token"]
              for document in ({"role": "producer", "streams": ["load", "latency"]},
                               {"role": "contributor", "collector": "reports", "rate": 10**9, "max_batch": BATCH})]
    return issued[0], issued[1]


def measure(database: str, *, values: int, reports: int, requests: int, seed: int = 0,
            scoped: bool = False) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    server = ServeProcess(database).start()
    try:
        producer, contributor = _tokens(server.url, scoped)
        with Client(server.url, TOKEN) as admin, Client(server.url, producer) as client, \
                Client(server.url, contributor) as reporter:
            admin.create_stream("load", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            data = rng.integers(0, 80, values).astype(float)
            client.send("load", data[:BATCH], first_position=0)  # the hold-out: theta is chosen
            start = time.perf_counter()
            for first in range(BATCH, values, BATCH):
                client.send("load", data[first:first + BATCH], first_position=first)
            ingest = (values - BATCH) / (time.perf_counter() - start)

            admin.create_collector("reports", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            local = LocalToPL.from_json(client.collector_parameters("reports"))
            reporter.send_reports("reports", local.report_batch(rng.uniform(0, 100, BATCH), bits=seed).to_json())
            local = LocalToPL.from_json(client.collector_parameters("reports"))  # theta is published
            documents = [local.report_batch(rng.uniform(0, 100, BATCH), bits=seed + i).to_json()
                         for i in range(reports // BATCH)]
            start = time.perf_counter()
            for document in documents:
                reporter.send_reports("reports", document)
            report_rate = len(documents) * BATCH / (time.perf_counter() - start)

            admin.create_stream("latency", epsilon=1.0, upper_bound=100.0, hold=SMALL)
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


def measure_processes(database: str, *, processes: int, values: int, requests: int, seed: int = 0
                      ) -> dict[str, float]:
    """Two streams fed at once over ``processes`` servers on one database, and alternating small batches."""
    rng = np.random.default_rng(seed)
    servers = [ServeProcess(database).launch() for _ in range(processes)]
    try:
        for server in servers:
            server.wait()
        data = {name: rng.integers(0, 80, values).astype(float) for name in ("a", "b")}
        with Client(servers[0].url, TOKEN) as client:
            for name in data:
                client.create_stream(name, epsilon=1.0, upper_bound=100.0, hold=BATCH)
                client.send(name, data[name][:BATCH], first_position=0)  # the hold-out: theta is chosen

        def feed(name: str, shift: int) -> None:
            clients = [Client(server.url, TOKEN) for server in servers]
            for i, first in enumerate(range(BATCH, values, BATCH)):
                clients[(i + shift) % processes].send(name, data[name][first:first + BATCH], first_position=first)
            for client in clients:
                client.close()

        threads = [threading.Thread(target=feed, args=(name, shift)) for shift, name in enumerate(data)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rate = 2 * (values - BATCH) / (time.perf_counter() - start)

        clients = [Client(server.url, TOKEN) for server in servers]
        clients[0].create_stream("latency", epsilon=1.0, upper_bound=100.0, hold=SMALL)
        small = rng.integers(0, 80, SMALL * (requests + 1)).astype(float)
        clients[0].send("latency", small[:SMALL], first_position=0)
        seconds = []
        for i in range(1, requests + 1):
            start = time.perf_counter()
            clients[i % processes].send("latency", small[i * SMALL:(i + 1) * SMALL], first_position=i * SMALL)
            seconds.append(time.perf_counter() - start)
        for client in clients:
            client.close()
        ms = np.asarray(seconds) * 1e3
        return {"ingest_values_per_s": rate, "latency_p50_ms": float(np.percentile(ms, 50)),
                "latency_p99_ms": float(np.percentile(ms, 99)), "latency_max_ms": float(ms.max())}
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--reports", type=int, default=500_000)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--scoped-tokens", action="store_true",
                        help="send values and reports with a producer's and a contributor's token")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    shared: dict[str, dict[str, float]] = {}
    for kind in (["sqlite", "postgresql"] if args.database == "both" else [args.database]):
        if kind == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                results[kind] = measure(f"sqlite:///{folder}/load.db", values=args.values, reports=args.reports,
                                        requests=args.requests, scoped=args.scoped_tokens)
        else:
            postgres = PostgresServer().start()
            try:
                results[kind] = measure(postgres.new_database(), values=args.values, reports=args.reports,
                                        requests=args.requests, scoped=args.scoped_tokens)
                for processes in (1, 2):
                    shared[f"{processes} process{'es' if processes > 1 else ''}"] = measure_processes(
                        postgres.new_database(), processes=processes, values=args.values, requests=args.requests)
            finally:
                postgres.stop()
    if args.json:
        print(json.dumps({**results, **({"postgresql, shared": shared} if shared else {})}, indent=2))
        return
    print(f"{'database':<12}{'values/s':>12}{'reports/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for kind, r in results.items():
        print(f"{kind:<12}{r['ingest_values_per_s']:>12,.0f}{r['reports_per_s']:>12,.0f}"
              f"{r['latency_p50_ms']:>9.1f}{r['latency_p99_ms']:>9.1f}{r['latency_max_ms']:>9.1f}")
    if shared:
        print("\npostgresql, one database: two streams at once, batches round-robin over the processes")
        print(f"{'processes':<12}{'values/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        for kind, r in shared.items():
            print(f"{kind:<12}{r['ingest_values_per_s']:>12,.0f}{r['latency_p50_ms']:>9.1f}"
                  f"{r['latency_p99_ms']:>9.1f}{r['latency_max_ms']:>9.1f}")


if __name__ == "__main__":
    main()
