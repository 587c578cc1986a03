"""Slow clients of a real ``dpstream serve`` process on loopback: cut off on time, while others are served.

One server with short deadlines (1.5 s for a head, 1.5 s plus the minimum rate for a body) and a
cap of 40 connections.  An attack is one thread driving a bounded number of sockets, each sending a
little at a time until the server closes them or a hard limit passes.  That the clock stands still
while the server itself does not read is tested on the protocol alone, in this process, under an
application that takes its body late.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.service.server import ClientLimits, build_server, listen
from service_helpers import SOURCE, TOKEN, free_port

HEAD_TIMEOUT = 1.5
BODY_TIMEOUT = 1.5
MIN_RATE = 16384
CAP = 40
#: How late a cut may come on a loaded machine (the deadline itself is exact to a timer's precision).
SLACK = 2.0
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``dpstream serve`` with short deadlines; yields its port and the path of its log."""
    root = tmp_path_factory.mktemp("slow")
    port, log = free_port(), root / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(SOURCE), DPSTREAM_TOKEN=TOKEN)
    command = [sys.executable, "-m", "dpstream.cli", "serve", "--database", f"sqlite:///{root}/slow.db",
               "--port", str(port), "--log-level", "warning", "--header-timeout", str(HEAD_TIMEOUT),
               "--body-timeout", str(BODY_TIMEOUT), "--body-min-rate", str(MIN_RATE), "--max-connections", str(CAP)]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "dpstream serve did not answer /health in time"
                time.sleep(0.05)
        yield port, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Client:
    """One socket sending ``chunks`` one every ``interval`` seconds; what it received and when it was closed."""

    sock: socket.socket
    chunks: list[bytes]
    interval: float
    opened: float = field(default_factory=time.monotonic)
    received: bytes = b""
    closed: float | None = None

    @property
    def lasted(self) -> float:
        return self.closed - self.opened

    @property
    def status(self) -> int | None:
        return int(self.received.split()[1]) if self.received.startswith(b"HTTP/1.1 ") else None


def attack(port: int, chunks: list[bytes], count: int, interval: float, limit: float) -> list[Client]:
    """``count`` clients sending ``chunks`` slowly, all driven by one thread until closed or ``limit`` seconds pass."""
    clients = [Client(socket.create_connection(("127.0.0.1", port)), list(chunks), interval) for _ in range(count)]
    selector = selectors.DefaultSelector()
    for client in clients:
        client.sock.setblocking(False)
        selector.register(client.sock, selectors.EVENT_READ, client)
    sends = {id(client): client.opened for client in clients}
    end = time.monotonic() + limit
    while any(client.closed is None for client in clients) and time.monotonic() < end:
        now = time.monotonic()
        for client in clients:
            if client.closed is None and client.chunks and now >= sends[id(client)]:
                try:
                    client.sock.send(client.chunks.pop(0))
                except OSError:
                    client.closed = now
                sends[id(client)] = now + interval
        for key, _ in selector.select(timeout=0.02):
            client = key.data
            try:
                data = client.sock.recv(65536)
            except OSError:
                data = b""
            client.received += data
            if not data:
                client.closed = time.monotonic()
                selector.unregister(client.sock)
    for client in clients:
        client.sock.close()
    return clients


def attack_in_background(port: int, *args) -> tuple[threading.Thread, list[list[Client]]]:
    result: list[list[Client]] = []
    thread = threading.Thread(target=lambda: result.append(attack(port, *args)), daemon=True)
    thread.start()
    return thread, result


def health_latencies(port: int, seconds: float) -> list[float]:
    """Seconds each ``GET /health`` took, from a fresh connection each, for ``seconds``."""
    latencies, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        answer = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5.0)
        latencies.append(time.monotonic() - start)
        assert answer.status_code == 200, answer.text
        time.sleep(0.1)
    return latencies


def assert_cut_on_time(clients: list[Client], timeout: float, status: int | None) -> None:
    for client in clients:
        assert client.closed is not None, "a slow client was never cut off"
        assert timeout - 0.05 <= client.lasted <= timeout + SLACK, client.lasted
        assert client.status == status, client.received[:200]
    if status is not None:
        assert all(json.loads(client.received.split(b"\r\n\r\n", 1)[1])["status"] == status for client in clients)


def test_slow_header_clients_are_cut_off_on_time_while_health_stays_fast(server):
    port, log = server
    header_lines = [b"GET /health HTTP/1.1\r\n"] + [b"X-Slow: %d\r\n" % i for i in range(20)]  # never ends
    thread, result = attack_in_background(port, header_lines, 30, 0.5, 10.0)
    latencies = health_latencies(port, HEAD_TIMEOUT + 0.5)
    thread.join(15)
    assert max(latencies) < 1.0, latencies
    assert_cut_on_time(result[0], HEAD_TIMEOUT, 408)
    assert "request head not complete within 1.5 seconds." in log.read_text()


def test_slow_body_clients_are_cut_off_on_time_while_health_stays_fast(server):
    port, log = server
    head = (b"POST /streams HTTP/1.1\r\nHost: x\r\n" + AUTH
            + b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
    body = [b'{"name": "slow", ' + b" " * 33] * 80  # 4,000 bytes at 200 bytes a second: far below the minimum rate
    thread, result = attack_in_background(port, [head, *body], 30, 0.25, 10.0)
    latencies = health_latencies(port, BODY_TIMEOUT + 0.5)
    thread.join(15)
    assert max(latencies) < 1.0, latencies
    # the head arrives at once; the body's 1.5 s grow by 1/16384 s per byte received (about 0.02 s here)
    assert_cut_on_time(result[0], BODY_TIMEOUT, 408)
    text = log.read_text()
    assert "request body not complete within 1.5 seconds plus one second per 16384 bytes." in text
    assert "Traceback" not in text
    assert httpx.get(f"http://127.0.0.1:{port}/streams/slow").status_code == 404  # nothing was created


def test_a_client_idle_after_connecting_is_closed_without_an_answer(server):
    port, _ = server
    assert_cut_on_time(attack(port, [], 5, 1.0, 10.0), HEAD_TIMEOUT, None)


def test_a_kept_alive_connection_trickling_its_next_request_is_cut_off(server):
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        assert answer.status == 200 and json.loads(answer.read())["status"] == "ok"
        time.sleep(1.0)  # idle within uvicorn's keep-alive timeout: the next head's clock starts at its first byte
        start, received = time.monotonic(), b""
        sock.settimeout(0.5)
        for line in [b"GET /health HTTP/1.1\r\n"] + [b"X-Slow: 1\r\n"] * 12:
            try:
                sock.sendall(line)
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            received += data
            if not data:
                break
        lasted = time.monotonic() - start
    assert received.startswith(b"HTTP/1.1 408 "), received[:200]
    assert HEAD_TIMEOUT - 0.05 <= lasted <= HEAD_TIMEOUT + SLACK, lasted


async def _late_reader(scope, receive, send):
    """An application that takes its request's body only after 2.5 s, and answers its length."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await asyncio.sleep(2.5)
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body, more = body + message.get("body", b""), message.get("more_body", False)
    answer = str(len(body)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


def test_the_clock_stands_still_while_the_server_does_not_read():
    # a body of 2 MiB sent at once, read by the application after 2.5 s: uvicorn stops reading at 64 kB
    # unread, so the client waits for the server, and a body deadline of 1 s (no rate allowance) must not cut it
    limits = ClientLimits(body_timeout=1.0, body_min_rate=1e12)
    listener = listen("127.0.0.1", 0)
    server = build_server(_late_reader, limits, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        body = b"x" * (2 * 1024 * 1024)
        with socket.create_connection(listener.getsockname()) as sock:
            sock.settimeout(10.0)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            assert answer.status == 200 and answer.read() == str(len(body)).encode()
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


def test_a_large_body_slower_than_the_body_timeout_but_above_the_minimum_rate_is_ingested(server):
    port, _ = server
    base = f"http://127.0.0.1:{port}"
    created = httpx.post(f"{base}/streams", json={"name": "big", "method": "bt", "epsilon": 1.0, "upper_bound": 1.0},
                         headers={"Authorization": f"Bearer {TOKEN}"})
    assert created.status_code == 201, created.text
    body = json.dumps({"values": [0.5] * 100_000, "first_position": 0}).encode()  # 500 kB
    pieces = 25  # one every 0.1 s: 2.5 s in all (longer than the body timeout), 200 kB/s (12 times the minimum rate)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /streams/big/values HTTP/1.1\r\nHost: x\r\n" + AUTH
                     + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        start = time.monotonic()
        for i in range(pieces):
            sock.sendall(body[i * len(body) // pieces:(i + 1) * len(body) // pieces])
            time.sleep(0.1)
        assert time.monotonic() - start > BODY_TIMEOUT
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        assert answer.status == 200, answer.read()[:300]
        answer.read()
    assert httpx.get(f"{base}/streams/big").json()["position"] == 100_000


def test_a_head_beyond_its_limit_is_refused_with_431(server):
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (ClientLimits().max_head_bytes + 1))
        sock.settimeout(5.0)
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received.startswith(b"HTTP/1.1 431 "), received[:200]
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["status"] == 431


def test_beyond_the_connection_cap_requests_are_503_until_connections_close(server):
    port, _ = server
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    try:
        time.sleep(0.3)  # accepted by the server
        answer = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5.0)
        assert answer.status_code == 503
        assert answer.json() == {"status": 503, "message": f"the service has more than {CAP} connections open; "
                                                           f"try again later."}
        assert answer.headers["retry-after"] == "1"
    finally:
        for sock in sockets[CAP // 2:]:
            sock.close()
    try:
        time.sleep(0.3)  # 20 idle connections are left, under the cap
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5.0).status_code == 200
    finally:
        for sock in sockets[:CAP // 2]:
            sock.close()


def test_the_help_shows_the_defaults_the_server_uses():
    shown = " ".join(CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200).output.split())
    limits = ClientLimits()
    for option, default in [("--header-timeout", limits.header_timeout), ("--body-timeout", limits.body_timeout),
                            ("--body-min-rate", limits.body_min_rate), ("--max-connections", limits.max_connections)]:
        help_text = re.search(rf"{option} [A-Z]+ (.*?)\[", shown).group(1)  # up to the range click adds
        assert f"(default {default:g})" in help_text, help_text


@pytest.mark.parametrize("field_name", ["header_timeout", "body_timeout", "body_min_rate"])
@pytest.mark.parametrize("value", [0, -1.0, float("nan")])
def test_limits_refuse_times_and_rates_that_are_not_positive(field_name, value):
    with pytest.raises(ValueError, match=f"{field_name} must be a positive number"):
        ClientLimits(**{field_name: value})


@pytest.mark.parametrize("option", ["--header-timeout", "--body-timeout", "--body-min-rate"])
def test_serve_refuses_a_limit_that_is_not_a_number_in_one_line(tmp_path, monkeypatch, option):
    monkeypatch.chdir(tmp_path)  # where a database would be created
    result = CliRunner().invoke(cli, ["serve", "--token", TOKEN, option, "nan"])
    assert result.exit_code == 2 and "must be a positive number" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
