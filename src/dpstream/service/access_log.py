"""The access log of ``dpstream serve --access-log``: one JSON line per request, without secrets.

Each line: ``time`` (ISO 8601 UTC, when the request came), ``method``, ``path`` (without the query),
``status``, ``seconds`` (to the answer's start), ``token`` (the token's public id,
:mod:`~dpstream.service.tokens`: ``"bootstrap"`` for the service's own, null when the request had none
or it was wrong) and ``client`` (its address).  Never the token itself, a header, a query or a body.

>>> import io
>>> out = io.StringIO()
>>> AccessLog(out).write({"method": "GET", "path": "/health", "status": 200})
>>> out.getvalue()
'{"method":"GET","path":"/health","status":200}\\n'
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AccessLog", "AccessLogMiddleware", "open_access_log"]


class AccessLog:
    """Lines written whole to a text stream (one lock: lines of concurrent requests never mix), flushed each."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            self.stream.write(line)
            self.stream.flush()


def open_access_log(target: str) -> AccessLog:
    """The access log of ``--access-log``: ``-`` for the standard error, else a file appended to (OSError when it
    cannot be opened)."""
    return AccessLog(sys.stderr if target == "-" else open(target, "a", encoding="utf-8"))  # noqa: SIM115


class AccessLogMiddleware:
    """Writes one line of :class:`AccessLog` per HTTP request once its answer starts (a failure is a 500 line)."""

    def __init__(self, app: ASGIApp, log: AccessLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, when, written = time.perf_counter(), datetime.now(UTC), False

        def write(status: int) -> None:
            nonlocal written
            written = True
            client = scope.get("client")
            self.log.write({"time": when.isoformat(timespec="milliseconds"), "method": scope["method"],
                            "path": scope["path"], "status": status,
                            "seconds": round(time.perf_counter() - began, 6),
                            "token": scope.get("state", {}).get("token_id"),
                            "client": client[0] if client else None})

        async def logged(message: Message) -> None:
            if message["type"] == "http.response.start" and not written:
                write(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, logged)
        except Exception:
            if not written:
                write(500)
            raise
