"""``/collectors``: ToPL collectors (local DP) -- their creation, their current parameters, the clients' reports,
and the public reads of what they released.

Writes need a bearer token: ``POST /collectors`` and ``DELETE /collectors/{name}`` (archive) an admin's,
``POST /collectors/{name}/reports`` a contributor's of the collector (or an admin's), within the contributor
token's batch size and rate (:mod:`~dpstream.service.tokens`).  Reports made
with other parameters than the collector's current ones are refused (409): the client fetches the
parameters again and randomizes anew.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from dpstream.release import ReportBatch, ToPLCollector
from dpstream.release.topl_wire import PARAMETERS_FORMATS
from dpstream.service import mechanisms
from dpstream.service.answers import describe
from dpstream.service.dependencies import (
    JsonObject,
    RawBody,
    SettingsDep,
    SourcesDep,
    StorageDep,
    authorize,
    charge_reports,
    scope,
)
from dpstream.service.errors import ApiError, unprocessable
from dpstream.service.ingest import ingest
from dpstream.service.parsing import MAX_BATCH, check_name, parse_json, query_int
from dpstream.service.routers import common

__all__ = ["router"]

router = APIRouter()


class _Stale(Exception):
    """Reports made with other parameters than the collector's current ones (another theta, another collector).

    Not a ValueError, so that :func:`~dpstream.service.ingest.ingest` does not turn it into a 422."""


@router.post("/collectors", status_code=201, dependencies=[Depends(authorize)])
async def create_collector(document: JsonObject, storage: StorageDep) -> JSONResponse:
    name, budget = check_name(document.pop("name", None)), common.budget_of(document)
    common.require(document, "collector")
    with unprocessable():
        collector = mechanisms.build_collector(document)
    source = await common.create_source(storage, kind="collector", name=name, params=document,
                                        public=mechanisms.collector_facts(collector), key=b"",
                                        state=mechanisms.snapshot(collector), budget=budget,
                                        guarantee=collector.privacy())
    return JSONResponse(describe(source), status_code=201)


@router.get("/collectors")
def list_collectors(storage: StorageDep) -> dict[str, Any]:
    return {"collectors": [describe(source) for source in storage.sources("collector")]}


@router.get("/collectors/{name}")
def get_collector(name: str, sources: SourcesDep) -> dict[str, Any]:
    return describe(sources.public("collector", name))


@router.delete("/collectors/{name}", dependencies=[Depends(authorize)])
async def archive_collector(name: str, sources: SourcesDep) -> dict[str, Any]:
    return await common.archive(sources, "collector", name)


@router.get("/collectors/{name}/parameters")
def collector_parameters(name: str, request: Request, sources: SourcesDep) -> Response:
    """The parameters document in wire-format version 2 (the masses as strings), or 1 with ``?version=1``."""
    version = query_int(request, "version", minimum=1, default=2)
    if version not in PARAMETERS_FORMATS:
        raise ApiError(422, f"query parameter version must be one of {sorted(PARAMETERS_FORMATS)}, got {version}.")
    with sources.lock("collector", name):  # the collector as committed: theta may come from another process
        text = sources.live("collector", name).mechanism.parameters_json(version)
    return Response(text, media_type="application/json")


@router.post("/collectors/{name}/reports", dependencies=[scope("contributor", "collector")])
async def post_reports(name: str, request: Request, body: RawBody, sources: SourcesDep) -> Response:
    first = query_int(request, "first_position", minimum=0, default=None)
    parse_json(body)  # 400 for what is not JSON at all, as every endpoint; the batch's own checks are 422
    with unprocessable():
        batch = ReportBatch.from_json(body)
    if not 1 <= len(batch) <= MAX_BATCH:
        raise ApiError(422, f"a batch must hold 1 to {MAX_BATCH} reports, got {len(batch)}.")
    await charge_reports(request, len(batch))  # a contributor token's batch size and rate

    def receive(collector: ToPLCollector) -> np.ndarray:
        current = collector.client().parameters_id
        if batch.parameters != current:
            state = "theta is not yet published" if collector.threshold is None else (
                f"theta = {collector.threshold:g}")
            raise _Stale(f"reports were made with parameters {batch.parameters!r}, but collector {name!r} "
                         f"has {current!r} ({state}): fetch its current parameters and randomize again.")
        return np.asarray(collector.receive_batch(batch.mechanism, batch.report), dtype=np.float64)

    try:
        answer = await run_in_threadpool(ingest, sources, "collector", name, first, (batch.mechanism, batch.report),
                                         None, receive)
    except _Stale as error:
        raise ApiError(409, str(error)) from None
    return Response(answer, media_type="application/json")


@router.get("/collectors/{name}/released")
def get_collector_released(name: str, request: Request, sources: SourcesDep) -> Response:
    return common.released(sources, "collector", name, request)


@router.get("/collectors/{name}/ledger")
def get_collector_ledger(name: str, request: Request, sources: SourcesDep) -> dict[str, Any]:
    return common.ledger(sources, "collector", name, request)


@router.get("/collectors/{name}/events")
async def collector_events(name: str, request: Request, sources: SourcesDep, settings: SettingsDep
                           ) -> StreamingResponse:
    return await common.events(sources, "collector", name, request, settings.poll_seconds)
