"""A real ``dpstream serve`` SIGKILLed at random moments while it ingests: no acknowledged value changes or is
lost, and the released stream equals an uninterrupted run with the same seed -- on SQLite and PostgreSQL.

The issue's full size (1,000,000 values) is benchmarks/service_crash.py; here 200,000 keep the family short.
"""

from __future__ import annotations

import base64
import threading

import numpy as np
import pytest

from dpstream.client import Client, Retry, ServiceError
from dpstream.release import ToPS
from dpstream.service.mechanisms import derive_key
from dpstream.service.storage import open_storage
from service_helpers import TOKEN, ServeProcess

PARAMS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 10_000, "max_range": 1 << 16}
SEED = 2024


def crash_run(database: str, *, total: int, batch: int, kills: int, rng: np.random.Generator,
              database_key: str | None = None, params: dict | None = None) -> None:
    """Ingest ``total`` values in batches; SIGKILL the server ``kills`` times at random moments, restart it, retry."""
    params = PARAMS if params is None else params
    values = rng.integers(0, 80, total).astype(float)
    expected = ToPS(**params, key=derive_key(SEED)).release(values)  # the uninterrupted run
    batches = total // batch
    kill_at = dict(zip(rng.choice(batches, size=kills, replace=False).tolist(), rng.uniform(0.0, 0.08, kills)))
    server = ServeProcess(database, database_key=database_key).start()
    try:
        Client(server.url, TOKEN).create_stream("load", **params, seed=SEED)
        acknowledged: dict[int, list[dict]] = {}
        for index in range(batches):
            start = index * batch
            killer = None
            if index in kill_at:
                killer = threading.Timer(kill_at[index], server.kill)
                killer.start()
            while start not in acknowledged:
                try:
                    with Client(server.url, TOKEN, timeout=30, retry=Retry(attempts=1)) as client:
                        acknowledged[start] = client.send("load", values[start:start + batch], first_position=start)
                except ServiceError as error:  # killed while the batch was on its way: restart and retry
                    if error.status is not None:
                        raise
                    if killer is not None:
                        killer.join()
                    server.kill()
                    server.start()
            if killer is not None:
                killer.join()
                if server.process.poll() is not None:  # killed after the answer: start again before the next batch
                    server.start()
        assert server.starts == kills + 1
        with Client(server.url) as client:
            released = list(client.all_released("load"))
        held = params["hold"]
        assert [r["position"] for r in released] == list(range(held, total))
        assert np.array_equal([r["value"] for r in released], expected)  # bit for bit
        for start, answer in acknowledged.items():  # every acknowledged batch, unchanged
            assert answer == released[max(start - held, 0):max(start + batch - held, 0)]
    finally:
        server.stop()


def test_sqlite_survives_sigkill(tmp_path):
    crash_run(f"sqlite:///{tmp_path}/crash.db", total=200_000, batch=10_000, kills=10,
              rng=np.random.default_rng(15))


def test_postgresql_survives_sigkill(postgres_server):  # with its secrets sealed under a database key
    crash_run(postgres_server.new_database(), total=200_000, batch=10_000, kills=10, rng=np.random.default_rng(16),
              database_key=base64.urlsafe_b64encode(bytes(range(32))).decode())


def test_a_hold_out_stored_batch_by_batch_survives_sigkill(tmp_path):  # most kills fall in the hold-out
    crash_run(f"sqlite:///{tmp_path}/held.db", total=60_000, batch=2_000, kills=6, rng=np.random.default_rng(17),
              database_key=base64.urlsafe_b64encode(bytes(range(32))).decode(), params={**PARAMS, "hold": 40_000})


def test_events_stream_released_values_as_they_come(tmp_path):
    key = base64.urlsafe_b64encode(bytes(range(32))).decode()  # and the secrets are sealed with a database key
    server = ServeProcess(f"sqlite:///{tmp_path}/events.db", database_key=key).start()
    try:
        client = Client(server.url, TOKEN)
        client.create_stream("s", method="bt", epsilon=1.0, upper_bound=10.0, max_range=1024, seed=1)
        first = client.send("s", [1.0] * 5)
        received: list[dict] = []

        def listen() -> None:
            for event in Client(server.url).events("s", after=-1):
                received.append(event)
                if len(received) == 8:
                    return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        second = client.send("s", [2.0] * 3, first_position=5)
        listener.join(timeout=30)
        assert received == first + second
        server.kill()
        assert server.start() and Client(server.url, TOKEN).send("s", [3.0], first_position=8)[0]["position"] == 8
    finally:
        server.stop()
    with open_storage(f"sqlite:///{tmp_path}/events.db", database_key=bytes(range(32))) as storage:
        assert storage.source("stream", "s").position == 9


@pytest.mark.parametrize("args, env, message", [
    ([], {}, "a token is needed: --token TOKEN or the environment variable DPSTREAM_TOKEN"),
    (["--token", "short"], {}, "token must be a string of at least 16 characters"),
    (["--database", "mysql://x"], {"DPSTREAM_TOKEN": TOKEN}, "database URL must start with sqlite:///"),
    ([], {"DPSTREAM_TOKEN": TOKEN, "DPSTREAM_DATABASE_KEY": "short"}, "the database key must be 32 bytes"),
])
def test_serve_refuses_bad_options_in_one_line(tmp_path, args, env, message):
    import os
    import subprocess
    import sys

    from service_helpers import SOURCE

    result = subprocess.run([sys.executable, "-m", "dpstream.cli", "serve", "--port", "0", *args],
                            env={**{k: v for k, v in os.environ.items() if k != "DPSTREAM_TOKEN"},
                                 "PYTHONPATH": str(SOURCE), **env},
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode in (1, 2) and message in result.stderr and "Traceback" not in result.stderr


def test_serve_on_a_port_in_use_is_one_line(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    from service_helpers import SOURCE

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "dpstream.cli", "serve", "--port", str(port)],
                                env={**os.environ, "PYTHONPATH": str(SOURCE), "DPSTREAM_TOKEN": TOKEN},
                                cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{port}: address already in use" in result.stderr
    assert "Traceback" not in result.stderr
