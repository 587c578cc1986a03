"""``/tokens``: the scoped tokens (:mod:`~dpstream.service.tokens`) -- issued, listed and revoked by an admin.

``POST /tokens`` answers the token once (the database keeps only its SHA-256); ``GET /tokens`` lists every
token's public facts (id, role, scope, limits, when created and revoked), never a token or its digest;
``DELETE /tokens/{token_id}`` revokes it at once, in every process serving the database.  All three need an
admin's scope.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dpstream.service.dependencies import JsonObject, TokensDep, authorize
from dpstream.service.errors import ApiError, unprocessable
from dpstream.service.tokens import token_spec

__all__ = ["router"]

router = APIRouter()


@router.post("/tokens", status_code=201, dependencies=[Depends(authorize)])
async def create_token(document: JsonObject, tokens: TokensDep) -> JSONResponse:
    with unprocessable():
        spec = token_spec(document)
    token, principal = await run_in_threadpool(tokens.create, spec)
    return JSONResponse({"token": token, **principal.describe()}, status_code=201)


@router.get("/tokens", dependencies=[Depends(authorize)])
def list_tokens(tokens: TokensDep) -> dict[str, Any]:
    return {"tokens": [principal.describe() for principal in tokens.tokens()]}


@router.delete("/tokens/{token_id}", dependencies=[Depends(authorize)])
def revoke_token(token_id: str, tokens: TokensDep) -> dict[str, Any]:
    revoked = tokens.revoke(token_id)
    if revoked is None:
        raise ApiError(404, f"no token with id {token_id!r}.")
    return revoked.describe()
