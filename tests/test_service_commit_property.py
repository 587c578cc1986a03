"""Random sequences of batches, retries, crashes and restarts of the service: a position is answered with one value.

A seeded loop (bounded in time) sends a stream's batches through FastAPI's TestClient on SQLite, to
either of two processes serving the database: new batches (with or without ``first_position``),
retries of earlier batches with the same or a changed content or length, batches that overlap
earlier ones or leave a gap, batches whose commit fails before or after the database has it (the
answer lost: a crash in between), and restarts (a new app on the same database, the old one gone
without a word).  Whatever happens: no position is ever answered with two different values, the
released values the service lists are those answered, a batch that changes committed positions is
refused (409), and the values listed are the library's release of the committed input.
"""

from __future__ import annotations

import time

import numpy as np
from fastapi.testclient import TestClient

from dpstream.release import ToPS
from dpstream.service import create_app
from dpstream.service.app import MAX_LIMIT
from dpstream.service.mechanisms import derive_key

TOKEN = "property-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARAMS = {"epsilon": 1.0, "upper_bound": 50.0, "hold": 40, "max_range": 4096}
SECONDS = 13


class Crash(Exception):
    """The commit fails: before the database has the batch, or after (the answer is lost)."""


class Service:
    """Two processes serving the database (each batch goes to one of them), restarted at will, and what the
    client knows."""

    def __init__(self, database: str, rng: np.random.Generator) -> None:
        self.database, self.rng = database, rng
        self.apps = [create_app(database=database, token=TOKEN) for _ in range(2)]
        self.pick()
        #: The input the database committed, position by position, and the batches it was sent in.
        self.input: list[float] = []
        self.batches: list[tuple[int, list[float]]] = []
        #: position -> the value answered there.
        self.answered: dict[int, float] = {}
        self.statuses: dict[str, int] = {}

    def pick(self) -> None:
        """The next requests go to one of the processes."""
        self.app = self.apps[int(self.rng.integers(0, len(self.apps)))]
        self.http = TestClient(self.app, raise_server_exceptions=False)

    def restart(self) -> None:
        """The process last used dies and a new one serves the database."""
        self.app.state.storage.close()
        self.apps[self.apps.index(self.app)] = create_app(database=self.database, token=TOKEN)
        self.pick()

    def send(self, values: list[float], first: int | None, crash: str | None = None):
        storage = self.app.state.storage
        original = storage.commit_batch
        if crash is not None:
            def commit_batch(**batch):
                if crash == "after":
                    original(**batch)
                raise Crash(crash)
            storage.commit_batch = commit_batch
        body = {"values": values, **({} if first is None else {"first_position": first})}
        try:
            answer = self.http.post("/streams/a/values", json=body, headers=AUTH)
        finally:
            if crash is not None:
                del storage.commit_batch
        return answer

    def record(self, answer) -> None:
        """Check the values of a 200 answer against those answered before."""
        for row in answer.json()["released"]:
            seen = self.answered.setdefault(row["position"], row["value"])
            assert seen == row["value"], f"position {row['position']} answered with {seen} and {row['value']}"

    def position(self) -> int:
        return self.http.get("/streams/a", headers=AUTH).json()["position"]


def _step(service: Service) -> None:
    rng = service.rng
    service.pick()
    position = len(service.input)
    action = str(rng.choice(["new", "new", "new", "bare", "same", "changed", "resized", "overlap", "gap",
                             "crash", "restart"]))
    fresh = rng.integers(0, 50, int(rng.integers(1, 40))).astype(float).tolist()
    if action in ("new", "bare", "crash"):
        crash = str(rng.choice(["before", "after"])) if action == "crash" else None
        answer = service.send(fresh, None if action == "bare" else position, crash)
        if crash is None:
            assert answer.status_code == 200, answer.text
            service.record(answer)
        else:
            assert answer.status_code == 500, answer.text
            if rng.random() < 0.5:  # the crash killed the process
                service.restart()
            else:  # the client sends again, maybe to the other process
                service.pick()
            # the client does not know whether it was committed: it sends the batch again, changed or not
            again = fresh if rng.random() < 0.6 else [(value + 1) % 50 for value in fresh]
            answer = service.send(again, position)
            if crash == "after" and again != fresh:
                assert answer.status_code == 409, answer.text  # committed: a changed batch is refused
                again = fresh
            else:
                assert answer.status_code == 200, answer.text
                service.record(answer)
        committed = again if action == "crash" else fresh
        service.batches.append((position, committed))
        service.input += committed
    elif action in ("same", "changed", "resized") and service.batches:
        start, values = service.batches[int(rng.integers(0, len(service.batches)))]
        if action == "changed":
            at = int(rng.integers(0, len(values)))
            values = values[:at] + [(values[at] + 1 + int(rng.integers(0, 48))) % 50] + values[at + 1:]
        elif action == "resized":
            values = values[:-1] if len(values) > 1 and rng.random() < 0.5 else values + [1.0]
        answer = service.send(values, start)
        if action == "same":
            assert answer.status_code == 200, answer.text
            service.record(answer)
        else:
            assert answer.status_code == 409, answer.text
    elif action == "overlap" and position:
        start = int(rng.integers(0, position))
        values = service.input[start : start + int(rng.integers(1, 40))]
        answer = service.send(values, start)
        if answer.status_code == 200:  # only the very batch sent there earlier is answered again
            assert (start, values) in service.batches, (start, len(values))
            service.record(answer)
        else:
            assert answer.status_code == 409, answer.text
    elif action == "gap":
        answer = service.send(fresh, position + int(rng.integers(1, 20)))
        assert answer.status_code == 409, answer.text
    elif action == "restart":
        service.restart()
    service.statuses[action] = service.statuses.get(action, 0) + 1
    assert service.position() == len(service.input)


def test_no_position_is_answered_with_two_values(tmp_path):
    service = Service(f"sqlite:///{tmp_path}/property.db", np.random.default_rng(2026))
    created = service.http.post("/streams", json={"name": "a", **PARAMS, "seed": 7}, headers=AUTH)
    assert created.status_code == 201, created.text
    deadline, steps = time.monotonic() + SECONDS, 0
    while time.monotonic() < deadline and steps < 3000:
        _step(service)
        steps += 1
    listed = service.http.get(f"/streams/a/released?limit={MAX_LIMIT}", headers=AUTH).json()
    rows = {row["position"]: row["value"] for row in listed["released"]}
    assert rows and all(rows[at] == value for at, value in service.answered.items() if at <= max(rows))
    expected = ToPS(**PARAMS, key=derive_key(7)).release(np.array(service.input)).tolist()
    assert all(value == expected[at - PARAMS["hold"]] for at, value in rows.items())
    for app in service.apps:
        app.state.storage.close()
    assert steps >= 100 and min(service.statuses.values()) >= 5, service.statuses
