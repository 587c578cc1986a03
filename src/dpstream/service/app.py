"""The HTTP API of ``dpstream serve``: :func:`create_app` builds the FastAPI application.

Writes (creating streams and collectors, values, reports) need ``Authorization: Bearer TOKEN``;
reads (parameters, released values, events, the page, health) are public.  Every error is JSON
``{"status": N, "message": "..."}`` with a 4xx status that names the problem and the value, and
changes nothing: a batch is checked by the mechanism before anything is committed, and the
mechanism kept in memory is dropped and reloaded from the database after any failed batch.

A batch of values (or reports) and everything it changes -- its released values, its ledger row,
the mechanism's new secret state -- are committed in one transaction before the answer is sent
(:meth:`Storage.commit_batch <dpstream.service.storage.Storage.commit_batch>`).  A retry of a batch
whose answer was lost names the same ``first_position``: it is recognized by the ledger (same
length, same content) and answered with the values released the first time, never ingested twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from dpstream.release import ReportBatch, ToPLCollector
from dpstream.service.dashboard import mount_dashboard
from dpstream.service.mechanisms import (
    STREAM_METHODS,
    build_collector,
    build_stream,
    collector_facts,
    derive_key,
    restore,
    snapshot,
    stream_facts,
)
from dpstream.service.storage import ConflictError, Source, Storage, open_storage

__all__ = ["MAX_BATCH", "MAX_BODY_BYTES", "MAX_LIMIT", "create_app"]

logger = logging.getLogger("dpstream.service")

#: The most values (or reports) in one batch.
MAX_BATCH = 100_000
#: Default limit of a request body: a batch of MAX_BATCH values with times fits.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: The most released values one GET answers (a larger ``limit`` is capped).
MAX_LIMIT = 10_000
#: ``limit`` when none is given.
DEFAULT_LIMIT = 1_000
#: Names of streams and collectors.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Seconds between two looks for new released values of an events stream; a comment keeps it alive.
POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0

_SEED_WARNING = "seed makes the noise recomputable by anyone who knows it; this stream is for testing only."


class ApiError(Exception):
    """An answer with a 4xx status and one clear message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"status": status, "message": message}, status_code=status, headers=headers)


# -- reading requests ----------------------------------------------------------------------------

async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {int(declared)} bytes is larger than the limit of {limit} bytes.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def _refuse_constant(name: str) -> None:
    raise ApiError(400, f"request body is not valid JSON: {name} is not a JSON number (NaN and infinities are "
                        "refused).")


def _json(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"request body is not valid JSON: {error}.") from None
    except RecursionError:
        raise ApiError(400, "request body is not valid JSON: nested too deeply.") from None
    if not isinstance(document, dict):
        raise ApiError(422, f"request body must be a JSON object, got {type(document).__name__}.")
    return document


def _numbers(values: object, name: str, size: int | None = None) -> np.ndarray:
    """A JSON list of numbers as float64 (ints and floats only: no booleans, strings or nulls), all finite."""
    if not isinstance(values, list):
        raise ApiError(422, f"{name} must be a list of numbers, got {json.dumps(values)[:80]}.")
    if not values or len(values) > MAX_BATCH:
        raise ApiError(422, f"{name} must hold 1 to {MAX_BATCH} numbers, got {len(values)}.")
    if size is not None and len(values) != size:
        raise ApiError(422, f"{name} must have one entry per value ({size}), got {len(values)}.")
    if not set(map(type, values)) <= {int, float}:
        index = next(i for i, v in enumerate(values) if type(v) not in (int, float))
        raise ApiError(422, f"{name}[{index}] must be a number, got {json.dumps(values[index])[:80]}.")
    try:
        array = np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise ApiError(422, f"{name} holds an integer too large for a float64.") from None
    finite = np.isfinite(array)
    if not finite.all():
        index = int(np.argmax(~finite))
        raise ApiError(422, f"{name}[{index}] must be a finite number, got {values[index]!r}.")
    return array


def _integer(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(422, f"{name} must be an integer >= {minimum}, got {json.dumps(value)[:80]}.")
    return value


def _query_int(request: Request, name: str, *, minimum: int, default: int | None) -> int | None:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,18}", text) or int(text) < minimum:
        raise ApiError(422, f"query parameter {name} must be an integer >= {minimum}, got {text[:80]!r}.")
    return int(text)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ApiError(422, "name must be 1 to 64 letters, digits, '.', '_' or '-' (starting with a letter or "
                            f"digit), got {json.dumps(name)[:80]}.")
    return name


def _released_json(positions: list[int], times: list[float], values: list[float], **extra: Any) -> bytes:
    """``{"released": [{"position", "time", "value"}, ...]}`` (numbers are finite: repr is JSON)."""
    rows = ",".join(f'{{"position":{p},"time":{t!r},"value":{v!r}}}' for p, t, v in zip(positions, times, values))
    head = "".join(f'"{key}":{json.dumps(value)},' for key, value in extra.items())
    return f'{{{head}"released":[{rows}]}}'.encode()


def _digest(key: bytes, *arrays: np.ndarray) -> str:
    """HMAC-SHA256 of a batch under the source's key: recognizes a retry, and tells nothing about the values
    to whoever reads the ledger without the key (a plain hash of a few raw values could be inverted by guessing)."""
    digest = hmac.new(key, digestmod=hashlib.sha256)
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:32]


# -- the sources held in memory ---------------------------------------------------------------

@dataclass
class _Live:
    """A source's mechanism in memory, at ``position``; dropped after any failure and reloaded."""

    source: Source
    mechanism: Any
    position: int
    key: bytes


class _Sources:
    """The mechanisms of the streams and collectors, loaded from the database on first use, one lock each."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._live: dict[tuple[str, str], _Live] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, kind: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((kind, name), threading.Lock())

    def public(self, kind: str, name: str) -> Source:
        source = self.storage.source(kind, name)
        if source is None:
            raise ApiError(404, f"no {kind} named {name!r}.")
        return source

    def live(self, kind: str, name: str) -> _Live:
        """The source's mechanism (call with its lock held)."""
        live = self._live.get((kind, name))
        if live is None:
            source = self.storage.source(kind, name, secret=True)
            if source is None:
                raise ApiError(404, f"no {kind} named {name!r}.")
            cls = ToPLCollector if kind == "collector" else STREAM_METHODS[source.params["method"]]
            mechanism = restore(cls, source.state)
            live = _Live(source=_public_only(source), mechanism=mechanism, position=source.position, key=source.key)
            self._live[(kind, name)] = live
        return live

    def drop(self, kind: str, name: str) -> None:
        self._live.pop((kind, name), None)


def _public_only(source: Source) -> Source:
    return Source(id=source.id, kind=source.kind, name=source.name, params=source.params, public=source.public,
                  position=source.position, released=source.released, created=source.created)


def _describe(source: Source) -> dict[str, Any]:
    """The public facts of a source (never its key or state)."""
    public = dict(source.public)
    privacy = public.pop("privacy")
    spent = source.position > 0
    params = {key: value for key, value in source.params.items() if key != "method"}
    described = {"name": source.name}
    if source.kind == "stream":
        described["method"] = source.params["method"]
    described.update({
        "parameters": params, "position": source.position, "released": source.released, **public,
        "privacy": privacy["statement"],
        "budget": {"epsilon": privacy["epsilon"], "delta": privacy["delta"],
                   "epsilon_spent": privacy["epsilon"] if spent else 0.0,
                   "delta_spent": privacy["delta"] if spent else 0.0},
        "created": source.created,
    })
    return described


# -- the application ---------------------------------------------------------------------------

def create_app(*, database: str | Storage, token: str, database_key: bytes | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, poll_seconds: float = POLL_SECONDS) -> FastAPI:
    """The service's ASGI application.

    Parameters
    ----------
    database : str or Storage
        A database URL (``sqlite:///FILE`` or ``postgresql://...``) or an open storage.
    token : str
        The bearer token every write must carry (at least 16 characters).
    database_key : bytes, optional
        32 bytes: seal every stream's key and state in the database with it (AES-256-GCM); a
        database made with a key opens only with it.  Only with a database URL.
    max_body_bytes : int
        Largest request body accepted (413 beyond).
    poll_seconds : float
        How often an events stream looks for new released values.
    """
    if not isinstance(token, str) or len(token) < 16:
        raise ValueError("token must be a string of at least 16 characters (e.g. python -c 'import secrets; "
                         "print(secrets.token_urlsafe())').")
    storage = open_storage(database, database_key=database_key) if isinstance(database, str) else database
    sources = _Sources(storage)
    expected = token.encode()
    app = FastAPI(title="dpstream", summary="Differentially private release of data streams", docs_url="/docs",
                  redoc_url=None)
    app.state.storage = storage

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.message, error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.method} {request.url.path}.",
                   405: f"method {request.method} is not allowed on {request.url.path}."}.get(
                       error.status_code, str(error.detail))
        return _error(error.status_code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        # the type and message only: no traceback, no local values, so no key or state reaches the log
        logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(error).__name__, error)
        return _error(500, "the service failed on this request; see its log (a batch retried with the same "
                           "first_position is never ingested twice).")

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _error(422, f"{where}: {first.get('msg', 'invalid request')}.")

    def authorize(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "this endpoint needs the header Authorization: Bearer TOKEN.",
                           {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.strip().encode(), expected):
            raise ApiError(403, "the bearer token is wrong.")

    # -- health and the page ---------------------------------------------------------------

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "database": storage.describe().split(":")[0],
                "schema_version": storage.schema_version(), "secrets_encrypted": storage.encrypted}

    mount_dashboard(app)

    # -- streams ---------------------------------------------------------------------------

    @app.post("/streams", status_code=201)
    async def create_stream(request: Request) -> JSONResponse:
        authorize(request)
        document = _json(await _body(request, max_body_bytes))
        name = _check_name(document.pop("name", None))
        method = document.pop("method", "tops")
        seed = document.pop("seed", None)
        for required in ("epsilon", "upper_bound"):
            if required not in document:
                raise ApiError(422, f"a stream needs {required}.")
        try:
            key = derive_key(seed)
            mechanism = build_stream(method, document, key)
        except (TypeError, ValueError) as error:
            raise ApiError(422, str(error)) from None
        params = {"method": method, **document}
        public = {**stream_facts(mechanism), "seeded": seed is not None}
        try:
            source = await run_in_threadpool(storage.create_source, kind="stream", name=name, params=params,
                                             public=public, key=key, state=snapshot(mechanism))
        except ConflictError as error:
            raise ApiError(409, str(error)) from None
        answer = _describe(source)
        if seed is not None:
            logger.warning("stream %r: %s", name, _SEED_WARNING)
            answer["warning"] = _SEED_WARNING
        return JSONResponse(answer, status_code=201)

    @app.get("/streams")
    def list_streams() -> dict[str, Any]:
        return {"streams": [_describe(source) for source in storage.sources("stream")]}

    @app.get("/streams/{name}")
    def get_stream(name: str) -> dict[str, Any]:
        return _describe(sources.public("stream", name))

    def ingest(kind: str, name: str, first_position: int | None, inputs: np.ndarray, times: np.ndarray | None,
               release: Callable[[Any], np.ndarray]) -> bytes:
        """Ingest one batch (values or reports) under the source's lock; the answer's JSON."""
        count = (inputs if kind == "stream" else inputs[0]).size
        with sources.lock(kind, name):
            live = sources.live(kind, name)
            digest = _digest(live.key, *((inputs,) if kind == "stream" else inputs))
            position = live.position
            start = position if first_position is None else first_position
            if start < position:
                return _retry(live.source, start, count, digest, position)
            if start > position:
                raise ApiError(409, f"{kind} {name!r} is at position {position}; a batch at first_position {start} "
                                    f"would leave a gap (send positions {position}..{start - 1} first).")
            try:
                try:  # the mechanism checks the batch first and refuses it whole
                    released = release(live.mechanism)
                except (TypeError, ValueError) as error:
                    raise ApiError(422, str(error)) from None
                held = count - released.size  # the released positions are the batch's last ones
                positions = np.arange(position + held, position + count)
                stamps = np.full(released.size, time.time()) if times is None else times[held:]
                facts = stream_facts(live.mechanism) if kind == "stream" else collector_facts(live.mechanism)
                public = {**live.source.public, **facts}
                storage.commit_batch(source=live.source, first_position=position, count=count, digest=digest,
                                     state=snapshot(live.mechanism), public=public,
                                     epsilon=facts["privacy"]["epsilon"], delta=facts["privacy"]["delta"],
                                     positions=positions, times=stamps, values=released)
            except ConflictError as error:
                sources.drop(kind, name)
                raise ApiError(409, f"{kind} {name!r}: {error} Retry the batch.") from None
            except BaseException:
                sources.drop(kind, name)
                raise
            live.position = position + count
            live.source = Source(**{**live.source.__dict__, "public": public, "position": live.position})
        return _released_json(positions.tolist(), stamps.tolist(), released.tolist())

    def _retry(source: Source, start: int, count: int, digest: str, position: int) -> bytes:
        entry = storage.ledger_entry(source.id, start)
        if entry is None or entry.count != count or entry.digest != digest:
            raise ApiError(409, f"{source.kind} {source.name!r} is at position {position}; the batch at "
                                f"first_position {start} is not the one ingested there (a retry must resend the "
                                "same values).")
        rows = storage.released(source.id, after=start - 1, before=start + count, limit=count)
        return _released_json(*(list(column) for column in zip(*rows))) if rows else _released_json([], [], [])

    @app.post("/streams/{name}/values")
    async def post_values(name: str, request: Request) -> Response:
        authorize(request)
        document = _json(await _body(request, max_body_bytes))
        unknown = sorted(set(document) - {"values", "times", "first_position"})
        if unknown:
            raise ApiError(422, f"unknown field(s) {', '.join(unknown)}; a batch has values, times, first_position.")
        if "values" not in document:
            raise ApiError(422, "a batch needs values.")
        values = _numbers(document["values"], "values")
        times = None if document.get("times") is None else _numbers(document["times"], "times", values.size)
        first = document.get("first_position")
        first = None if first is None else _integer(first, "first_position", minimum=0)
        body = await run_in_threadpool(ingest, "stream", name, first, values, times,
                                       lambda mechanism: np.asarray(mechanism.release(values), dtype=np.float64))
        return Response(body, media_type="application/json")

    def released(kind: str, name: str, request: Request) -> Response:
        source = sources.public(kind, name)
        after = _query_int(request, "after", minimum=-1, default=None)
        limit = min(_query_int(request, "limit", minimum=1, default=DEFAULT_LIMIT), MAX_LIMIT)
        rows = storage.released(source.id, after=after, limit=limit)
        columns = [list(column) for column in zip(*rows)] if rows else [[], [], []]
        return Response(_released_json(*columns), media_type="application/json")

    def ledger(kind: str, name: str, request: Request) -> dict[str, Any]:
        source = sources.public(kind, name)
        limit = min(_query_int(request, "limit", minimum=1, default=DEFAULT_LIMIT), MAX_LIMIT)
        return {"ledger": [{"first_position": row.first_position, "count": row.count, "epsilon": row.epsilon,
                            "delta": row.delta, "recorded": row.recorded}
                           for row in storage.ledger(source.id, limit=limit)]}

    @app.get("/streams/{name}/ledger")
    def get_ledger(name: str, request: Request) -> dict[str, Any]:
        return ledger("stream", name, request)

    @app.get("/streams/{name}/released")
    def get_released(name: str, request: Request) -> Response:
        return released("stream", name, request)

    async def events(kind: str, name: str, request: Request) -> StreamingResponse:
        source = await run_in_threadpool(sources.public, kind, name)
        after = _query_int(request, "after", minimum=-1, default=None)
        last_id = request.headers.get("last-event-id")
        if last_id is not None and re.fullmatch(r"[0-9]{1,18}", last_id):
            after = int(last_id)
        if after is None:  # from now on: every value released so far has a position below the stream's
            after = source.position - 1

        async def stream() -> AsyncIterator[str]:
            cursor, quiet = after, 0.0
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                rows = await run_in_threadpool(storage.released, source.id, after=cursor, limit=MAX_LIMIT)
                for position, stamp, value in rows:
                    yield (f"id: {position}\nevent: released\n"
                           f'data: {{"position":{position},"time":{stamp!r},"value":{value!r}}}\n\n')
                if rows:
                    cursor, quiet = rows[-1][0], 0.0
                    continue
                await asyncio.sleep(poll_seconds)
                quiet += poll_seconds
                if quiet >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/streams/{name}/events")
    async def stream_events(name: str, request: Request) -> StreamingResponse:
        return await events("stream", name, request)

    # -- collectors ------------------------------------------------------------------------

    @app.post("/collectors", status_code=201)
    async def create_collector(request: Request) -> JSONResponse:
        authorize(request)
        document = _json(await _body(request, max_body_bytes))
        name = _check_name(document.pop("name", None))
        for required in ("epsilon", "upper_bound"):
            if required not in document:
                raise ApiError(422, f"a collector needs {required}.")
        try:
            collector = build_collector(document)
        except (TypeError, ValueError) as error:
            raise ApiError(422, str(error)) from None
        try:
            source = await run_in_threadpool(storage.create_source, kind="collector", name=name, params=document,
                                             public=collector_facts(collector), key=b"", state=snapshot(collector))
        except ConflictError as error:
            raise ApiError(409, str(error)) from None
        return JSONResponse(_describe(source), status_code=201)

    @app.get("/collectors")
    def list_collectors() -> dict[str, Any]:
        return {"collectors": [_describe(source) for source in storage.sources("collector")]}

    @app.get("/collectors/{name}")
    def get_collector(name: str) -> dict[str, Any]:
        return _describe(sources.public("collector", name))

    @app.get("/collectors/{name}/parameters")
    def collector_parameters(name: str) -> Response:
        sources.public("collector", name)
        with sources.lock("collector", name):
            text = sources.live("collector", name).mechanism.parameters_json()
        return Response(text, media_type="application/json")

    @app.post("/collectors/{name}/reports")
    async def post_reports(name: str, request: Request) -> Response:
        authorize(request)
        body = await _body(request, max_body_bytes)
        first = _query_int(request, "first_position", minimum=0, default=None)
        try:
            json.loads(body, parse_constant=_refuse_constant)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"request body is not valid JSON: {error}.") from None
        except RecursionError:
            raise ApiError(400, "request body is not valid JSON: nested too deeply.") from None
        try:
            batch = ReportBatch.from_json(body)
        except (TypeError, ValueError) as error:
            raise ApiError(422, str(error)) from None
        if not 1 <= len(batch) <= MAX_BATCH:
            raise ApiError(422, f"a batch must hold 1 to {MAX_BATCH} reports, got {len(batch)}.")

        def receive(collector: ToPLCollector) -> np.ndarray:
            current = collector.client().parameters_id
            if batch.parameters != current:
                state = "theta is not yet published" if collector.threshold is None else (
                    f"theta = {collector.threshold:g}")
                raise _Stale(f"reports were made with parameters {batch.parameters!r}, but collector {name!r} "
                             f"has {current!r} ({state}): fetch its current parameters and randomize again.")
            return np.asarray(collector.receive_batch(batch.mechanism, batch.report), dtype=np.float64)

        try:
            answer = await run_in_threadpool(ingest, "collector", name, first, (batch.mechanism, batch.report),
                                             None, receive)
        except _Stale as error:
            raise ApiError(409, str(error)) from None
        return Response(answer, media_type="application/json")

    @app.get("/collectors/{name}/released")
    def get_collector_released(name: str, request: Request) -> Response:
        return released("collector", name, request)

    @app.get("/collectors/{name}/ledger")
    def get_collector_ledger(name: str, request: Request) -> dict[str, Any]:
        return ledger("collector", name, request)

    @app.get("/collectors/{name}/events")
    async def collector_events(name: str, request: Request) -> StreamingResponse:
        return await events("collector", name, request)

    return app


class _Stale(Exception):
    """Reports made with other parameters than the collector's current ones (another theta, another collector).

    Not a ValueError, so that :func:`ingest` does not turn it into a 422."""
