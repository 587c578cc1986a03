"""The HTTP server of ``dpstream serve``: uvicorn, with deadlines on reading a request and a cap on connections.

uvicorn reads a request for as long as its client takes: its only timeout is the keep-alive one,
which starts again with every byte, so a client sending one header line a second (or one byte of
its body) holds its socket and its memory for good, and a few hundred such clients hold them all.
:class:`BoundedHttpProtocol` is uvicorn's HTTP/1.1 protocol (the httptools parser) with the
bounds of :class:`ClientLimits` added:

* the request head (request line and headers) must be complete within ``header_timeout``
  seconds of the connection's opening, or of the request's first byte on a kept-alive
  connection, and within its first ``max_head_bytes`` bytes (431 beyond);
* the body must be complete within ``body_timeout`` seconds of the head's end, plus one second
  for every ``body_min_rate`` bytes received: a body sent at ``body_min_rate`` bytes a second or
  faster always arrives, whatever its size, and a client trickling it is cut off after about
  ``body_timeout`` seconds;
* while more than ``max_connections`` connections are open, every request is answered 503 (as
  uvicorn's ``limit_concurrency``, with the API's JSON error) and its connection closed.

Only the client's time counts: while the server itself has stopped reading a connection (a
pipelined request waits for the one before it, or the application has not yet taken the body read
so far) its clock stands still.  A client that has sent part of a request and no more is answered
408 and closed (a connection that has sent nothing is closed silently, as an idle keep-alive
connection is); one still receiving an earlier response is closed without an answer.

:func:`build_server` assembles the uvicorn server; :func:`listen` binds the socket first, so that
a port in use is an error before anything starts.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import uvicorn
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from dpstream.service.errors import error_response

__all__ = ["BoundedHttpProtocol", "ClientLimits", "build_server", "listen"]


@dataclass(frozen=True)
class ClientLimits:
    """How long and how much a client may take to send a request, and how many connections are served at once.

    >>> limits = ClientLimits(body_timeout=10.0, body_min_rate=16384)
    >>> limits.body_seconds(8 * 1024 * 1024)  # a body of 8 MiB: 10 s plus 512 s at 16 KiB/s
    522.0
    >>> ClientLimits(header_timeout=0)
    Traceback (most recent call last):
    ValueError: header_timeout must be a positive number of seconds, got 0.
    """

    #: Seconds for the whole request head, from the connection's opening or the request's first byte.
    header_timeout: float = 10.0
    #: Seconds for the body beyond what its size at ``body_min_rate`` takes.
    body_timeout: float = 10.0
    #: Bytes a second a body is allowed at least.
    body_min_rate: float = 16384.0
    #: Connections served at once; requests on any connection beyond are answered 503.
    max_connections: int = 1000
    #: A request head still incomplete after this many bytes is refused (431).
    max_head_bytes: int = 65536

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "body_min_rate"):
            value = getattr(self, name)
            if not value > 0:  # NaN too; infinity means no bound
                unit = "bytes a second" if name == "body_min_rate" else "seconds"
                raise ValueError(f"{name} must be a positive number of {unit}, got {value}.")
        for name in ("max_connections", "max_head_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")

    def body_seconds(self, received: int) -> float:
        """Seconds a body is allowed once ``received`` bytes of it have arrived."""
        return self.body_timeout + received / self.body_min_rate


class _Phase(Enum):
    HEAD = "head"  # reading a request head (or waiting for the first request of a new connection)
    BODY = "body"  # reading a request body
    IDLE = "idle"  # between requests: uvicorn's keep-alive timeout (or the application's response) runs
    DONE = "done"  # closed, or handed to another protocol


class _PausedClock(FlowControl):
    """uvicorn's flow control that also counts how long the server has stopped reading, and says when it reads again."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 on_resume: Callable[[], None]) -> None:
        super().__init__(transport)
        self._loop, self._on_resume = loop, on_resume
        self._since, self._total = 0.0, 0.0

    def pause_reading(self) -> None:
        if not self.read_paused:
            self._since = self._loop.time()
        super().pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self._total += self._loop.time() - self._since
            super().resume_reading()
            self._on_resume()

    def paused_seconds(self) -> float:
        """Seconds reading has been paused since the connection opened."""
        return self._total + (self._loop.time() - self._since if self.read_paused else 0.0)


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with deadlines on each request's head and body and a cap on connections.

    The limits are a class attribute: :meth:`with_limits` makes the subclass that uvicorn's
    ``http=`` setting takes.  One timer per connection at most, armed for the deadline of the
    phase being read and checked again when it fires (a body's deadline moves with every byte).
    """

    limits: ClassVar[ClientLimits] = ClientLimits()

    @classmethod
    def with_limits(cls, limits: ClientLimits) -> type[BoundedHttpProtocol]:
        """This protocol with ``limits``."""
        return type(cls.__name__, (cls,), {"limits": limits, "__module__": cls.__module__})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _Phase.IDLE
        self._started = 0.0  # when the phase began (event loop time)
        self._paused_before = 0.0  # seconds reading was paused before the phase began
        self._received = 0  # bytes received in the phase
        self._timer: asyncio.TimerHandle | None = None
        self._clock: _PausedClock = None  # type: ignore[assignment]

    # the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = self._clock = _PausedClock(transport, self.loop, self._arm)
        self._begin(_Phase.HEAD)  # the first request's head is due from the connection's opening
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is _Phase.IDLE:
            self._begin(_Phase.HEAD)
        if self._phase is _Phase.HEAD:
            self._received += len(data)
        super().data_received(data)
        if self.transport.is_closing():  # answered 400 by uvicorn
            return
        if self._phase is _Phase.HEAD and self._received > self.limits.max_head_bytes:
            self._refuse(431, f"request head is larger than the limit of {self.limits.max_head_bytes} bytes.")
        else:
            self._arm()

    def handle_websocket_upgrade(self) -> None:
        self._stop()
        super().handle_websocket_upgrade()

    # the parser's callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase is _Phase.IDLE:  # a pipelined request, in the data of the one before
            self._begin(_Phase.HEAD)

    def on_headers_complete(self) -> None:
        if len(self.connections) <= self.limits.max_connections:
            super().on_headers_complete()
        else:
            self.logger.warning("More than %d connections open: a request answered 503.", self.limits.max_connections)
            app, self.app = self.app, error_response(
                503, f"the service has more than {self.limits.max_connections} connections open; try again later.",
                headers={"connection": "close", "retry-after": "1"})
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        self._begin(_Phase.BODY)

    def on_body(self, body: bytes) -> None:
        self._received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _Phase.IDLE

    # the deadlines

    def _begin(self, phase: _Phase) -> None:
        self._phase, self._started, self._received = phase, self.loop.time(), 0
        self._paused_before = self._clock.paused_seconds()

    def _stop(self) -> None:
        self._phase = _Phase.DONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline(self) -> float:
        """When the phase being read must be complete (event loop time)."""
        allowed = self.limits.header_timeout if self._phase is _Phase.HEAD else self.limits.body_seconds(self._received)
        return self._started + allowed + self._clock.paused_seconds() - self._paused_before

    def _arm(self) -> None:
        """Have the timer fire at the current phase's deadline, or earlier."""
        if self._phase not in (_Phase.HEAD, _Phase.BODY) or self.flow.read_paused:
            return  # nothing due, or the server is the one not reading: resume_reading arms it again
        deadline = self._deadline()
        if self._timer is not None:
            if self._timer.when() <= deadline:
                return  # fires first, and looks again
            self._timer.cancel()
        self._timer = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._phase not in (_Phase.HEAD, _Phase.BODY) or self.flow.read_paused or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline():
            self._arm()
        elif self._phase is _Phase.HEAD:
            if self._received == 0:  # nothing sent: closed as an idle keep-alive connection is
                self._stop()
                self.transport.close()
            else:
                self._refuse(408, f"request head not complete within {self.limits.header_timeout:g} seconds.")
        else:
            self._refuse(408, f"request body not complete within {self.limits.body_timeout:g} seconds plus one "
                              f"second per {self.limits.body_min_rate:g} bytes.")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` (unless a response is under way on the connection) and close it."""
        prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
        self.logger.warning("%s%s", prefix, message)
        cycle = self.cycle
        if self._phase is _Phase.HEAD:  # answered unless the request before is still being answered
            answer = cycle is None or cycle.response_complete
        else:  # answered unless this request's response has begun (or waits for the one before)
            answer = cycle is not None and not cycle.response_started and not self.pipeline
        if cycle is not None and not cycle.response_complete:  # the application waiting for the body hears of it
            cycle.disconnected = True
            cycle.message_event.set()
        if answer:
            response = error_response(status, message, headers={"connection": "close"})
            head = [STATUS_LINE[status]]
            for name, value in [*self.server_state.default_headers, *response.raw_headers]:
                head += [name, b": ", value, b"\r\n"]
            self.transport.write(b"".join([*head, b"\r\n", response.body]))
        self._stop()
        self.transport.close()


class _ClientGone:
    """``app`` with a client that left mid-request (starlette's ClientDisconnect) ending the request quietly.

    The application hears of a connection closed while it waits for the body, by the client or
    by a deadline, as ``ClientDisconnect``; uvicorn would log it with a traceback, once per client.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            pass


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: a free one); OSError when it cannot be bound."""
    return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)


def build_server(app: ASGIApp, limits: ClientLimits, *, log_level: str = "info", ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, access_log: bool = True) -> uvicorn.Server:
    """The uvicorn server of ``app`` (the service or any ASGI application) reading with :class:`BoundedHttpProtocol`;
    ``access_log=False``: without uvicorn's plain access lines (the service writes its JSON ones instead)."""
    config = uvicorn.Config(_ClientGone(app), http=BoundedHttpProtocol.with_limits(limits), log_level=log_level,
                            ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile, server_header=False,
                            access_log=access_log)
    return uvicorn.Server(config)
