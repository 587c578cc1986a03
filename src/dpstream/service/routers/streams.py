"""``/streams``: central DP streams -- their creation, their values, and the public reads of what they released.

Writes need a bearer token: ``POST /streams`` and ``DELETE /streams/{name}`` (archive) an admin's,
``POST /streams/{name}/values`` a producer's of the stream (:mod:`~dpstream.service.tokens`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from dpstream.service import mechanisms
from dpstream.service.answers import describe
from dpstream.service.dependencies import JsonObject, SettingsDep, SourcesDep, StorageDep, authorize, scope
from dpstream.service.errors import unprocessable
from dpstream.service.ingest import ingest
from dpstream.service.parsing import check_name, integer, numbers
from dpstream.service.routers import common
from dpstream.service.routers.common import SEED_WARNING

__all__ = ["SEED_WARNING", "router"]

router = APIRouter()

#: The fields of a batch of values.
_BATCH_FIELDS = ("values", "times", "first_position")


@router.post("/streams", status_code=201, dependencies=[Depends(authorize)])
async def create_stream(document: JsonObject, storage: StorageDep) -> JSONResponse:
    name = check_name(document.pop("name", None))
    method = document.pop("method", "tops")
    seed, budget = document.pop("seed", None), common.budget_of(document)
    common.require(document, "stream")
    with unprocessable():
        if method.endswith("-zcdp"):  # a new release's target: at most 1e-3 (other bad deltas: the class's message)
            common.check_new_target(document.get("delta"))
        key = mechanisms.derive_key(seed)
        mechanism = mechanisms.build_stream(method, document, key)
    delta = document.get("delta")  # a zCDP method's: the delta of its (epsilon, delta) target, its guarantee's
    return await common.created(storage, kind="stream", name=name, params={"method": method, **document},
                                public=mechanisms.stream_facts(mechanism, delta), key=key,
                                state=mechanisms.snapshot(mechanism), seeded=seed is not None, budget=budget,
                                guarantee=mechanisms.guarantee(mechanism, delta))


@router.get("/streams")
def list_streams(storage: StorageDep) -> dict[str, Any]:
    return {"streams": [describe(source) for source in storage.sources("stream")]}


@router.get("/streams/{name}")
def get_stream(name: str, sources: SourcesDep) -> dict[str, Any]:
    return describe(sources.public("stream", name))


@router.delete("/streams/{name}", dependencies=[Depends(authorize)])
async def archive_stream(name: str, sources: SourcesDep) -> dict[str, Any]:
    return await common.archive(sources, "stream", name)


@router.post("/streams/{name}/values", dependencies=[scope("producer", "stream")])
async def post_values(name: str, document: JsonObject, sources: SourcesDep) -> Response:
    common.batch_fields(document, _BATCH_FIELDS, ("values",))
    values = numbers(document["values"], "values")
    times = None if document.get("times") is None else numbers(document["times"], "times", values.size)
    first = document.get("first_position")
    first = None if first is None else integer(first, "first_position", minimum=0)
    body = await run_in_threadpool(ingest, sources, "stream", name, first, values, times,
                                   lambda mechanism: np.asarray(mechanism.release(values), dtype=np.float64))
    return Response(body, media_type="application/json")


@router.get("/streams/{name}/ledger")
def get_ledger(name: str, request: Request, sources: SourcesDep) -> dict[str, Any]:
    return common.ledger(sources, "stream", name, request)


@router.get("/streams/{name}/released")
def get_released(name: str, request: Request, sources: SourcesDep) -> Response:
    return common.released(sources, "stream", name, request)


@router.get("/streams/{name}/events")
async def stream_events(name: str, request: Request, sources: SourcesDep, settings: SettingsDep) -> StreamingResponse:
    return await common.events(sources, "stream", name, request, settings.poll_seconds)
