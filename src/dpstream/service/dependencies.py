"""What the routes ask FastAPI for: the application's state, the bearer token check and the request body.

:func:`create_app <dpstream.service.app.create_app>` keeps the storage, the mechanisms in memory and
the :class:`Settings` on ``app.state``; a route reaches them through the annotated parameters below
(:data:`StorageDep`, :data:`SourcesDep`, :data:`SettingsDep`), never through closures.  Writes carry
``dependencies=[Depends(authorize)]``: FastAPI runs it before anything else of the route, so a
request without the token reads no body and touches no source.  A route that reads JSON takes
:data:`JsonObject` (or :data:`RawBody` when it hands the text on), whose limit and errors are those
of :mod:`~dpstream.service.parsing`.  None of them is a parameter of the OpenAPI document: they
read only the request.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from dpstream.service.errors import ApiError
from dpstream.service.ingest import LiveSources
from dpstream.service.parsing import json_object, read_body
from dpstream.service.storage import Storage

__all__ = [
    "JsonObject",
    "RawBody",
    "Settings",
    "SettingsDep",
    "SourcesDep",
    "StorageDep",
    "authorize",
    "has_token",
    "request_body",
    "request_json_object",
]


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


#: The service's database.
StorageDep = Annotated[Storage, Depends(_storage)]
#: The mechanisms of the streams and collectors, in memory.
SourcesDep = Annotated[LiveSources, Depends(_sources)]
#: The service's settings.
SettingsDep = Annotated[Settings, Depends(_settings)]


def has_token(request: Request) -> bool:
    """Whether the request carries the service's bearer token (for reads that show token holders more)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    token: bytes = request.app.state.settings.token
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


async def authorize(request: Request, settings: SettingsDep) -> None:
    """401 without ``Authorization: Bearer TOKEN``, 403 with another token (compared in constant time)."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "this endpoint needs the header Authorization: Bearer TOKEN.",
                       {"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(given.strip().encode(), settings.token):
        raise ApiError(403, "the bearer token is wrong.")


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
