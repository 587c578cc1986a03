"""What streams and collectors share: their creation, their archive (``DELETE /{kind}s/{name}``), and the public
reads of their released values, ledger and events (``GET /{kind}s/{name}/released``, ``/ledger``, ``/events``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from dpstream.accounting import MAX_TARGET_DELTA, check_target_delta
from dpstream.durable.budget_store import BudgetExhausted
from dpstream.privacy import PrivacyGuarantee
from dpstream.service.answers import describe, released_rows_json, standard_errors
from dpstream.service.budgets import NoBudget, ServiceBudgets
from dpstream.service.errors import ApiError, logger
from dpstream.service.ingest import LiveSources
from dpstream.service.parsing import DEFAULT_LIMIT, MAX_LIMIT, query_int
from dpstream.service.storage import ConflictError, Source, Storage

__all__ = ["KEEPALIVE_SECONDS", "SEED_WARNING", "archive", "batch_fields", "budget_of", "check_new_target",
           "create_source", "created", "events", "ledger", "released", "require"]

#: The warning a seeded stream or aggregate is created with (in its answer and the log).
SEED_WARNING = "seed makes the noise recomputable by anyone who knows it; this stream is for testing only."

#: Seconds of quiet after which an events stream sends a comment that keeps the connection alive.
KEEPALIVE_SECONDS = 15.0


def require(document: dict[str, Any], kind: str) -> None:
    """422 unless the request gives the parameters every stream and collector needs."""
    for required in ("epsilon", "upper_bound"):
        if required not in document:
            raise ApiError(422, f"a {kind} needs {required}.")


def batch_fields(document: dict[str, Any], fields: tuple[str, ...], required: tuple[str, ...]) -> None:
    """422 when a batch names a field outside ``fields`` or lacks one of ``required``."""
    unknown = sorted(set(document) - set(fields))
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}; a batch has {', '.join(fields)}.")
    for name in required:
        if name not in document:
            raise ApiError(422, f"a batch needs {name}.")


def check_new_target(delta: object) -> None:
    """422 when a new zCDP source's target delta is a number above the cap
    (:func:`~dpstream.accounting.check_target_delta`); other bad deltas get the mechanism's own message, and a
    source restored from the database continues at the delta it was created with."""
    if isinstance(delta, (int, float)) and not isinstance(delta, bool) and delta > MAX_TARGET_DELTA:
        try:
            check_target_delta(delta)
        except ValueError as error:
            raise ApiError(422, str(error)) from None


def budget_of(document: dict[str, Any]) -> str | None:
    """The budget a create document names (``"budget": "NAME"``, taken out of it), or None."""
    budget = document.pop("budget", None)
    if budget is not None and not isinstance(budget, str):
        raise ApiError(422, f"budget must name a budget (a string), got {budget!r}.")
    return budget


async def create_source(storage: Storage, *, kind: str, name: str, params: dict[str, Any], public: dict[str, Any],
                        key: bytes, state: str, budget: str | None = None,
                        guarantee: PrivacyGuarantee | None = None) -> Source:
    """Store a new source (409 when one of that kind has the name already); with a ``budget``, charge it the
    source's ``guarantee`` first (:mod:`~dpstream.service.budgets`: 409 when that would pass its total, 422 when it
    names no budget or one about another subject), recorded in the source's parameters."""
    release = f"{kind} {name}"
    if budget is not None:
        try:
            await run_in_threadpool(ServiceBudgets(storage).charge, budget, release, guarantee)
        except (BudgetExhausted, ConflictError) as error:
            raise ApiError(409, str(error)) from None
        except (NoBudget, ValueError) as error:
            raise ApiError(422, str(error)) from None
        params = {**params, "budget": budget}
    try:
        return await run_in_threadpool(storage.create_source, kind=kind, name=name, params=params, public=public,
                                       key=key, state=state)
    except ConflictError as error:
        if budget is not None:  # not created: nothing of it will be published
            await run_in_threadpool(ServiceBudgets(storage).refund, budget, release)
        raise ApiError(409, str(error)) from None


async def created(storage: Storage, *, kind: str, name: str, params: dict[str, Any], public: dict[str, Any],
                  key: bytes, state: str, seeded: bool, budget: str | None = None,
                  guarantee: PrivacyGuarantee | None = None) -> JSONResponse:
    """Store a new source (:func:`create_source`) and answer 201 with its public facts; a ``seeded`` one's answer
    carries :data:`SEED_WARNING`, which the log says too."""
    source = await create_source(storage, kind=kind, name=name, params=params, public={**public, "seeded": seeded},
                                 key=key, state=state, budget=budget, guarantee=guarantee)
    answer = describe(source)
    if seeded:
        logger.warning("%s %r: %s", kind, name, SEED_WARNING)
        answer["warning"] = SEED_WARNING
    return JSONResponse(answer, status_code=201)


async def archive(sources: LiveSources, kind: str, name: str) -> dict[str, Any]:
    """Archive the source (:meth:`LiveSources.archive <dpstream.service.ingest.LiveSources.archive>`: it takes no
    more batches in any process, its key and state are erased, its released values and ledger stay, its name stays
    taken) and answer with its public facts, ``"archived": true`` among them; 404 when there is none."""
    return describe(await run_in_threadpool(sources.archive, kind, name))


def _limit(request: Request) -> int:
    return min(query_int(request, "limit", minimum=1, default=DEFAULT_LIMIT), MAX_LIMIT)


def released(sources: LiveSources, kind: str, name: str, request: Request) -> Response:
    """A page of released values: after ``?after=`` (all when not given), at most ``?limit=``."""
    source = sources.public(kind, name)
    after = query_int(request, "after", minimum=-1, default=None)
    rows = sources.storage.released(source.id, after=after, limit=_limit(request))
    return Response(released_rows_json(rows, source), media_type="application/json")


def ledger(sources: LiveSources, kind: str, name: str, request: Request, *, counts: bool = True) -> dict[str, Any]:
    """The last ``?limit=`` batches of the ledger, oldest first (without their digests; ``counts=False``: without
    their positions and counts, an aggregate's rows, data under its unit-level relation).  A zCDP source's rows
    carry its ``rho`` (what it spends: rho's add up over sources, the epsilon's they imply do not) beside the
    (epsilon, delta) each was recorded with (ToPS's, a bound until theta is chosen)."""
    source = sources.public(kind, name)
    rho = source.public["privacy"].get("rho")  # zCDP: what each batch is released under, beside what it implies
    spent = {} if rho is None else {"rho": rho}
    return {"ledger": [{**({"first_position": row.first_position, "count": row.count} if counts else {}),
                        **spent, "epsilon": row.epsilon, "delta": row.delta, "recorded": row.recorded}
                       for row in sources.storage.ledger(source.id, limit=_limit(request))]}


async def events(sources: LiveSources, kind: str, name: str, request: Request, poll_seconds: float
                 ) -> StreamingResponse:
    """Server-sent events of the released values: after ``Last-Event-ID`` or ``?after=``, else from now on."""
    source = await run_in_threadpool(sources.public, kind, name)
    after = query_int(request, "after", minimum=-1, default=None)
    last_id = request.headers.get("last-event-id")
    if last_id is not None and re.fullmatch(r"[0-9]{1,18}", last_id):
        after = int(last_id)
    if after is None:  # from now on: every value released so far has a position below the stream's
        after = source.position - 1
    return StreamingResponse(_released_events(sources.storage, source, after, request, poll_seconds),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _released_events(storage: Storage, source: Source, after: int, request: Request, poll_seconds: float
                           ) -> AsyncIterator[str]:
    cursor, quiet = after, 0.0
    yield "retry: 2000\n\n"
    while not await request.is_disconnected():
        rows = await run_in_threadpool(storage.released, source.id, after=cursor, limit=MAX_LIMIT)
        errors = standard_errors(source, [row[0] for row in rows]) if rows else None
        for i, (position, stamp, value) in enumerate(rows):
            error = "" if errors is None else f',"standard_error":{errors[i]!r}'
            yield (f"id: {position}\nevent: released\n"
                   f'data: {{"position":{position},"time":{stamp!r},"value":{value!r}{error}}}\n\n')
        if rows:
            cursor, quiet = rows[-1][0], 0.0
            continue
        await asyncio.sleep(poll_seconds)
        quiet += poll_seconds
        if quiet >= KEEPALIVE_SECONDS:
            quiet = 0.0
            yield ": keep-alive\n\n"
