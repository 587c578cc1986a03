"""What the routes ask FastAPI for: the application's state, the bearer token's scope and the request body.

:func:`create_app <dpstream.service.app.create_app>` keeps the storage, the mechanisms in memory, the
tokens and the :class:`Settings` on ``app.state``; a route reaches them through the annotated parameters below
(:data:`StorageDep`, :data:`SourcesDep`, :data:`SettingsDep`, :data:`TokensDep`), never through closures.  Every
write carries the scope it needs as a dependency -- ``dependencies=[Depends(authorize)]`` (an admin's) or
``dependencies=[scope("producer", "stream")]`` (a producer's of the stream named in the path): FastAPI runs it
before anything else of the route, so a request without the scope reads no body and touches no source.  The
token is the service's bootstrap token (an admin, compared in constant time, no database read) or one of
:mod:`~dpstream.service.tokens`, found by its digest in the database at every request (a revocation holds at
once, in every process).  A route that reads JSON takes :data:`JsonObject` (or :data:`RawBody` when it hands the
text on), whose limit and errors are those of :mod:`~dpstream.service.parsing`.  None of them is a parameter of
the OpenAPI document: they read only the request.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.params import Depends as DependsParam
from starlette.concurrency import run_in_threadpool

from dpstream.service.errors import ApiError
from dpstream.service.ingest import LiveSources
from dpstream.service.parsing import json_object, read_body
from dpstream.service.storage import Storage
from dpstream.service.tokens import BOOTSTRAP, Principal, RateLimited, TokenStore

__all__ = [
    "JsonObject",
    "RawBody",
    "Settings",
    "SettingsDep",
    "SourcesDep",
    "StorageDep",
    "TokensDep",
    "authorize",
    "charge_reports",
    "has_token",
    "request_body",
    "request_json_object",
    "scope",
]

#: The principal of the bootstrap token (``dpstream serve --token``).
_BOOTSTRAP = Principal(role="admin", id=BOOTSTRAP, note="the service's --token")


@dataclass(frozen=True)
class Settings:
    """What :func:`create_app <dpstream.service.app.create_app>` was given, besides the database.

    ``token`` is SECRET (the bearer token, as bytes): never serve or log it.
    """

    token: bytes
    max_body_bytes: int
    poll_seconds: float

    def __repr__(self) -> str:  # never shows the token
        return f"Settings(token=<token>, max_body_bytes={self.max_body_bytes}, poll_seconds={self.poll_seconds})"


async def _storage(request: Request) -> Storage:
    return request.app.state.storage


async def _sources(request: Request) -> LiveSources:
    return request.app.state.sources


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _tokens(request: Request) -> TokenStore:
    return request.app.state.tokens


#: The service's database.
StorageDep = Annotated[Storage, Depends(_storage)]
#: The mechanisms of the streams and collectors, in memory.
SourcesDep = Annotated[LiveSources, Depends(_sources)]
#: The service's settings.
SettingsDep = Annotated[Settings, Depends(_settings)]
#: The scoped tokens.
TokensDep = Annotated[TokenStore, Depends(_tokens)]


def _bearer(request: Request) -> str | None:
    """The request's bearer token, or None."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


def _is_bootstrap(request: Request, given: str) -> bool:
    return hmac.compare_digest(given.encode(), request.app.state.settings.token)


def has_token(request: Request) -> bool:
    """Whether the request carries a token that may read what the public may not (an admin's or a reader's; for
    reads that show them more).  A missing, wrong or revoked token is no refusal here: the read is public."""
    given = _bearer(request)
    if given is None:
        return False
    if _is_bootstrap(request, given):
        return True
    found = request.app.state.tokens.find(given)
    return found is not None and found.revoked is None and found.allows("reader")


def _needs(role: str, kind: str | None, name: str | None) -> str:
    return f"the scope '{role}'" + (f" for {kind} {name!r}" if kind else "")


async def _authorize(request: Request, role: str, kind: str | None) -> Principal:
    """The request's principal if its token has ``role``'s scope (for the source named in the path): 401 without a
    bearer token, 403 with a wrong or revoked one or one without the scope, each naming the scope needed."""
    name = request.path_params.get("name") if kind else None
    given = _bearer(request)
    if given is None:
        raise ApiError(401, f"this endpoint needs the header Authorization: Bearer TOKEN, of a token with "
                            f"{_needs(role, kind, name)}.", {"WWW-Authenticate": "Bearer"})
    if _is_bootstrap(request, given):  # no database read: the service's own token
        found: Principal | None = _BOOTSTRAP
    else:
        found = await run_in_threadpool(request.app.state.tokens.find, given)
    if found is None:
        raise ApiError(403, f"the bearer token is wrong; this endpoint needs {_needs(role, kind, name)}.")
    request.state.token_id = found.id  # for the access log
    if found.revoked is not None:
        raise ApiError(403, f"token {found.id} was revoked at {found.revoked}.")
    if not found.allows(role, kind, name):
        raise ApiError(403, f"this endpoint needs {_needs(role, kind, name)}; token {found.id} is "
                            f"{found.scope_text()}.")
    request.state.principal = found
    return found


def scope(role: str, kind: str | None = None) -> DependsParam:
    """The dependency of a route that needs ``role``'s scope, for the source of ``kind`` named by the path's
    ``{name}`` when ``kind`` is given (an admin has every scope)."""

    async def needs_scope(request: Request) -> None:
        await _authorize(request, role, kind)

    needs_scope.__name__ = f"needs_{role}" + (f"_of_{kind}" if kind else "")
    return Depends(needs_scope)


async def authorize(request: Request) -> None:
    """An admin's scope: 401 without ``Authorization: Bearer TOKEN``, 403 with a token that is wrong (compared in
    constant time), revoked or not an admin's."""
    await _authorize(request, "admin", None)


async def charge_reports(request: Request, count: int) -> None:
    """Count a batch of ``count`` reports against its contributor token's limits (an admin has none): 413 beyond
    its batch size, 429 with ``Retry-After`` beyond its rate (:meth:`TokenStore.charge
    <dpstream.service.tokens.TokenStore.charge>`: counted in the database, shared by every process)."""
    principal: Principal = request.state.principal
    if principal.role != "contributor":
        return
    if count > principal.max_batch:
        raise ApiError(413, f"token {principal.id} may send at most {principal.max_batch:,} reports a batch, got "
                            f"{count:,}.")
    try:
        await run_in_threadpool(request.app.state.tokens.charge, principal, count)
    except RateLimited as error:
        raise ApiError(429, str(error), {"Retry-After": str(error.retry_after)}) from None
    except PermissionError as error:
        raise ApiError(403, str(error)) from None


async def request_body(request: Request, settings: SettingsDep) -> bytes:
    """The request's body, 413 beyond the service's limit."""
    return await read_body(request, settings.max_body_bytes)


#: The request's body as bytes (413 beyond the limit).
RawBody = Annotated[bytes, Depends(request_body)]


async def request_json_object(body: RawBody) -> dict[str, Any]:
    """The request's body as a JSON object (413, 400 or 422 as :func:`~dpstream.service.parsing.json_object`)."""
    return json_object(body)


#: The request's body as a JSON object.
JsonObject = Annotated[dict[str, Any], Depends(request_json_object)]
