"""The Python clients retry safely: lost answers, a killed and restarted server, an unreachable one."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.client import Client, Retry, ServiceError, ToPLClient
from dpstream.noise.bits import make_bits
from dpstream.release import ToPLCollector, ToPS
from dpstream.service import create_app
from dpstream.service.mechanisms import derive_key
from service_helpers import TOKEN, ServeProcess, free_port

TOPS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 200, "max_range": 4096}
COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 300, "max_range": 4096, "buckets": 64}
QUICK = Retry(attempts=8, first_delay=0.01, max_delay=0.05, total_seconds=5.0)


class LosingTransport(httpx.BaseTransport):
    """The service through a TestClient, but the answers of the first ``lose`` writes of a batch are lost on the
    way back (the service did the work); every batch posted is recorded with its first_position."""

    def __init__(self, http: TestClient, lose: int) -> None:
        self.http, self.lose, self.posted = http, lose, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        headers = {key: value for key, value in request.headers.items() if key in ("authorization", "content-type")}
        answer = self.http.request(request.method, path, params=request.url.params, content=request.read(),
                                   headers=headers)
        if request.method == "POST" and path.endswith(("/values", "/reports")):
            self.posted.append((request.url.params.get("first_position"), request.content))
            if self.lose > 0:
                self.lose -= 1
                raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def app(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/client.db", token=TOKEN)
    yield application
    application.state.storage.close()


def _client(app, lose: int, cls=Client, *args, **kwargs):
    transport = LosingTransport(TestClient(app), lose)
    http = httpx.Client(base_url="http://testserver", transport=transport)
    return cls("http://testserver", *args, http=http, retry=QUICK, **kwargs), transport


def _values(n, seed=0):
    return np.random.default_rng(seed).integers(0, 60, n).astype(float)


def test_values_whose_answers_were_lost_are_ingested_once(app):
    client, transport = _client(app, 0, Client, TOKEN)
    client.create_stream("a", **TOPS, seed=3)
    values = _values(600)
    released = []
    for start in range(0, 600, 150):
        transport.lose = 2  # the first two answers of every batch are lost: it is sent three times
        released += client.send("a", values[start:start + 150])  # no first_position: the client names it
    assert len(transport.posted) == 12
    ledger = app.state.storage.ledger(app.state.storage.source("stream", "a").id)
    assert [(entry.first_position, entry.count) for entry in ledger] == [(p, 150) for p in range(0, 600, 150)]
    assert client.stream("a")["position"] == 600
    assert [r["position"] for r in released] == list(range(200, 600))
    assert [r["value"] for r in released] == ToPS(**TOPS, key=derive_key(3)).release(values).tolist()


def test_reports_whose_answers_were_lost_are_sent_again_unchanged_never_randomized_again(app):
    Client("http://testserver", TOKEN, http=TestClient(app)).create_collector("c", **COLLECTOR)
    reports, transport = _client(app, 1, ToPLClient, "c", TOKEN, bits=11)
    values = _values(700, seed=4)
    released = reports.send(values[:300])
    transport.lose = 1
    released += reports.send(values[300:])
    # each batch went twice, the same document at the same position; nothing was randomized twice
    assert [position for position, _ in transport.posted] == ["0", "0", "300", "300"]
    assert transport.posted[0][1] == transport.posted[1][1] and transport.posted[2][1] == transport.posted[3][1]
    ledger = app.state.storage.ledger(app.state.storage.source("collector", "c").id)
    assert [(entry.first_position, entry.count) for entry in ledger] == [(0, 300), (300, 400)]
    local, bits = ToPLCollector(**COLLECTOR), make_bits(11)
    first = local.client().report_batch(values[:300], bits=bits)
    local.receive_batch(first.mechanism, first.report)
    second = local.client().report_batch(values[300:], bits=bits)
    assert np.array_equal(local.receive_batch(second.mechanism, second.report), [r["value"] for r in released])


def test_an_unanswered_report_batch_is_kept_and_sent_again_as_it_was(app):
    Client("http://testserver", TOKEN, http=TestClient(app)).create_collector("c", **COLLECTOR)
    reports, transport = _client(app, 100, ToPLClient, "c", TOKEN, bits=5)
    with pytest.raises(ServiceError) as error:  # every answer is lost: the retries run out
        reports.send(_values(100))
    assert error.value.status is None and "ReadError" in str(error.value) and "\n" not in str(error.value)
    sent = {body for _, body in transport.posted}
    assert len(sent) == 1  # one document, sent again and again
    transport.lose = 0
    reports.send(_values(100))  # the caller tries again: the same document, answered from the ledger
    assert {body for _, body in transport.posted} == sent
    assert reports.client.collector("c")["position"] == 100 and reports.discard() == 0


def test_a_client_follows_a_stream_other_clients_moved_on(app):
    one, _ = _client(app, 0, Client, TOKEN)
    two, _ = _client(app, 0, Client, TOKEN)
    one.create_stream("a", **TOPS, seed=3)
    values = _values(400)
    one.send("a", values[:100])
    two.send("a", values[100:200])
    one.send("a", values[200:300])  # its position (100) was taken: sent at 200
    two.send("a", values[300:])
    assert one.stream("a")["position"] == 400
    with pytest.raises(ServiceError) as error:  # an explicit position is the caller's
        one.send("a", values[:10], first_position=100)
    assert error.value.status == 409


def test_an_unreachable_service_is_a_service_error_within_the_budget():
    client = Client(f"http://127.0.0.1:{free_port()}", TOKEN,
                    retry=Retry(attempts=4, first_delay=0.05, max_delay=0.1, total_seconds=2.0))
    began = time.monotonic()
    for call in (client.health, lambda: client.send("a", [1.0], first_position=0),
                 lambda: client.create_stream("a", **TOPS)):
        with pytest.raises(ServiceError) as error:
            call()
        assert error.value.status is None and "ConnectError" in error.value.message and "4 tries" in str(error.value)
        assert "\n" not in str(error.value)
    assert time.monotonic() - began < 6.0


def test_a_server_killed_and_restarted_during_sends_loses_and_duplicates_nothing(tmp_path):
    server = ServeProcess(f"sqlite:///{tmp_path}/restart.db").start()
    patient = Retry(attempts=200, first_delay=0.02, max_delay=0.2, total_seconds=60.0)
    try:
        client = Client(server.url, TOKEN, retry=patient, timeout=10.0)
        client.create_stream("s", **TOPS, seed=9)
        client.create_collector("c", **COLLECTOR)
        reports = ToPLClient(server.url, "c", TOKEN, bits=21, retry=patient)
        values, done = _values(3000, seed=8), threading.Event()

        def restart() -> None:
            for _ in range(2):
                time.sleep(0.3)
                server.kill()
                server.start()
            done.set()

        killer = threading.Thread(target=restart)
        killer.start()
        released, estimates, batches = [], [], 0
        while not done.is_set() or batches < 10:  # send until both restarts are behind, and ten batches at least
            start = batches * 100 % 3000
            released += client.send("s", values[start:start + 100], first_position=None)
            estimates += reports.send(values[start:start + 100])
            batches += 1
        killer.join()
        sent = np.concatenate([values[(b * 100) % 3000:(b * 100) % 3000 + 100] for b in range(batches)])
        check = Client(server.url)
        assert check.stream("s")["position"] == check.collector("c")["position"] == sent.size
        assert [r["position"] for r in released] == list(range(200, sent.size))
        assert [r["value"] for r in released] == ToPS(**TOPS, key=derive_key(9)).release(sent).tolist()
        assert [r["position"] for r in estimates] == list(range(300, sent.size))
        assert list(check.all_released("s", after=-1)) == released
        assert server.starts == 3
    finally:
        server.stop()


def test_a_5xx_is_retried_and_a_create_that_may_have_been_done_is_not_sent_again():
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.url.path == "/health":
            return httpx.Response(503 if len(seen) < 3 else 200, json={"status": "ok"})
        raise httpx.ReadTimeout("timed out", request=request)

    http = httpx.Client(base_url="http://testserver", transport=httpx.MockTransport(answer))
    client = Client("http://testserver", TOKEN, http=http, retry=QUICK)
    assert client.health() == {"status": "ok"} and len(seen) == 3
    with pytest.raises(ServiceError) as error:
        client.create_stream("a", **TOPS)
    assert error.value.status is None and "ReadTimeout" in error.value.message and "not sent again" in str(error.value)
    assert seen[3:] == [("POST", "/streams")]
    with pytest.raises(ServiceError) as error:  # a batch names its position: it is sent again, to the budget's end
        client.send("a", [1.0], first_position=0)
    assert error.value.status is None and "8 tries" in str(error.value) and len(seen) == 4 + 8


def test_a_batch_refused_because_another_process_held_the_source_is_tried_again_where_it_was():
    """The first try lands at 0 but its answer is lost; the retry meets another process holding the source (409,
    "Retry the batch."): the batch is tried again at 0, where it is answered from the ledger, never moved on to the
    position its own first try reached (which would ingest it twice)."""
    posted: list[int] = []
    ingested: dict[int, bytes] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"position": sum(3 for _ in ingested)})
        first = json.loads(request.content)["first_position"]
        posted.append(first)
        if len(posted) == 1:
            ingested[first] = request.content
            raise httpx.ReadTimeout("timed out", request=request)
        if len(posted) == 2:
            return httpx.Response(409, json={"message": "stream 's': another process kept it. Retry the batch."})
        if ingested.get(first) == request.content:  # sent again where it landed: answered from the ledger
            return httpx.Response(200, json={"released": []})
        ingested[first] = request.content
        return httpx.Response(200, json={"released": []})

    http = httpx.Client(base_url="http://testserver", transport=httpx.MockTransport(answer))
    client = Client("http://testserver", TOKEN, http=http, retry=QUICK)
    client.send("s", [1.0, 2.0, 3.0])
    assert posted == [0, 0, 0] and list(ingested) == [0]


def test_a_429_is_sent_again_after_its_retry_after_when_that_fits_and_is_the_callers_otherwise():
    """A contributor's rate refuses a batch before anything is done (429 with Retry-After): the client waits that
    long and sends it again when the wait fits in its tries and total seconds; a longer wait is not slept through."""
    seen, refusals = [], {"left": 2, "after": "0.05"}

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        if refusals["left"] > 0:
            refusals["left"] -= 1
            return httpx.Response(429, json={"detail": "token t is over its rate."},
                                  headers={"Retry-After": refusals["after"]})
        return httpx.Response(200, json={"status": "ok"})

    http = httpx.Client(base_url="http://testserver", transport=httpx.MockTransport(answer))
    client = Client("http://testserver", TOKEN, http=http, retry=QUICK)
    assert client.health() == {"status": "ok"} and len(seen) == 3
    assert seen[1] - seen[0] >= 0.05 and seen[2] - seen[1] >= 0.05  # the wait asked, not the jitter of QUICK
    refusals.update(left=1, after="3600")  # beyond QUICK's 5 s: the caller's, at once
    began = time.monotonic()
    with pytest.raises(ServiceError) as error:
        client.health()
    assert error.value.status == 429 and time.monotonic() - began < 1.0 and len(seen) == 4
    refusals.update(left=1, after="soon")  # not a number of seconds: the caller's, as any 4xx
    with pytest.raises(ServiceError) as error:
        client.health()
    assert error.value.status == 429 and len(seen) == 5
