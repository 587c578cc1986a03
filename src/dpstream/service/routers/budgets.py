"""``/budgets``: the service's budget stores (:mod:`~dpstream.service.budgets`) -- created by an admin, read by anyone.

``POST /budgets`` (an admin's) creates one from ``{"name", "rho" | "epsilon", "delta"}``; ``GET /budgets`` lists
their names and ``GET /budgets/{name}`` shows one: its total, subject, each charge, spent and left (in rho and the
(epsilon, delta) it implies, or in epsilon).  Public reads: every amount is a function of public parameters.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dpstream.service.budgets import NoBudget, ServiceBudgets, budget_spec
from dpstream.service.dependencies import JsonObject, StorageDep, authorize
from dpstream.service.errors import ApiError, unprocessable
from dpstream.service.storage import ConflictError

__all__ = ["router"]

router = APIRouter()


@router.post("/budgets", status_code=201, dependencies=[Depends(authorize)])
async def create_budget(document: JsonObject, storage: StorageDep) -> JSONResponse:
    with unprocessable():
        spec = budget_spec(document)
    try:
        return JSONResponse(await run_in_threadpool(ServiceBudgets(storage).create, *spec), status_code=201)
    except ConflictError as error:
        raise ApiError(409, str(error)) from None


@router.get("/budgets")
def list_budgets(storage: StorageDep) -> dict[str, Any]:
    return {"budgets": ServiceBudgets(storage).names()}


@router.get("/budgets/{name}")
def get_budget(name: str, storage: StorageDep) -> dict[str, Any]:
    try:
        return ServiceBudgets(storage).describe(name)
    except NoBudget as error:
        raise ApiError(404, str(error)) from None
