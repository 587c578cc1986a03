"""What checking scoped tokens costs ``dpstream serve``: one server, batches with either token, interleaved.

One ``dpstream serve`` on a SQLite file (tests/service_helpers.py) takes batches of 10,000 values
sent alternately with the bootstrap token (compared in memory) and a producer's token (looked up in
the database at every request), then batches of 10,000 ToPL reports alternately with the bootstrap
token and a contributor's (looked up, and its rate counted in the database).  Interleaving puts both
under the same load of the machine, which ``benchmarks/service_load.py`` run twice cannot.  Then,
in this process, the two database operations alone: a token's lookup and a contributor's count::

    python benchmarks/service_tokens.py --batches 80
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from dpstream.client import Client  # noqa: E402
from dpstream.release import ToPLRandomizer  # noqa: E402
from dpstream.service import open_storage  # noqa: E402
from dpstream.service.tokens import TokenStore, token_spec  # noqa: E402
from service_helpers import TOKEN, ServeProcess  # noqa: E402

BATCH = 10_000


def _issue(url: str, document: dict) -> str:
    return httpx.post(f"{url}/tokens", json=document, headers={"Authorization": f"Bearer {TOKEN}"}).json()["token"]


def interleaved(folder: str, batches: int) -> dict[str, float]:
    """Inputs a second of each kind of batch (the median batch), each token's batches interleaved."""
    rng = np.random.default_rng(0)
    server = ServeProcess(f"sqlite:///{folder}/tokens.db").start()
    try:
        producer = _issue(server.url, {"role": "producer", "streams": ["s"]})
        contributor = _issue(server.url, {"role": "contributor", "collector": "c", "rate": 10**9, "max_batch": BATCH})
        seconds: dict[str, list[float]] = {}
        with Client(server.url, TOKEN) as admin, Client(server.url, producer) as scoped, \
                Client(server.url, contributor) as reporter:
            admin.create_stream("s", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            data = rng.integers(0, 80, BATCH * (batches + 1)).astype(float)
            admin.send("s", data[:BATCH], first_position=0)
            for i in range(1, batches + 1):
                name, client = ("values, bootstrap token", admin) if i % 2 else ("values, producer token", scoped)
                start = time.perf_counter()
                client.send("s", data[i * BATCH:(i + 1) * BATCH], first_position=i * BATCH)
                seconds.setdefault(name, []).append(time.perf_counter() - start)
            admin.create_collector("c", epsilon=1.0, upper_bound=100.0, hold=BATCH)
            local = ToPLRandomizer.from_json(admin.collector_parameters("c"))
            admin.send_reports("c", local.report_batch(rng.uniform(0, 100, BATCH), bits=1).to_json(), first_position=0)
            local = ToPLRandomizer.from_json(admin.collector_parameters("c"))  # theta is published
            for i in range(batches // 2):
                document = local.report_batch(rng.uniform(0, 100, BATCH), bits=i + 2).to_json()
                name, client = ("reports, bootstrap token", admin) if i % 2 else ("reports, contributor", reporter)
                start = time.perf_counter()
                client.send_reports("c", document, first_position=(i + 1) * BATCH)
                seconds.setdefault(name, []).append(time.perf_counter() - start)
        return {name: BATCH / float(np.median(times)) for name, times in seconds.items()}
    finally:
        server.stop()


def operations(folder: str, repeats: int = 2000) -> dict[str, float]:
    """Microseconds of a token's lookup and of a contributor's count, on a SQLite file."""
    storage = open_storage(f"sqlite:///{folder}/operations.db")
    try:
        store = TokenStore(storage)
        token, principal = store.create(token_spec({"role": "contributor", "collector": "c", "rate": 10**9}))
        start = time.perf_counter()
        for _ in range(repeats):
            store.find(token)
        lookup = (time.perf_counter() - start) / repeats
        start = time.perf_counter()
        for _ in range(repeats):
            store.charge(principal, 1)
        return {"lookup_us": lookup * 1e6, "count_us": (time.perf_counter() - start) / repeats * 1e6}
    finally:
        storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=80, help="batches of values (half as many of reports)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name, rate in interleaved(folder, args.batches).items():
            print(f"{name:<28}{rate:>12,.0f} /s (median batch)")
        for name, value in operations(folder).items():
            print(f"{name:<28}{value:>12.1f}")


if __name__ == "__main__":
    main()
