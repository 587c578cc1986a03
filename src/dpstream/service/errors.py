"""The errors of the HTTP API: every one is JSON ``{"status": N, "message": "..."}``.

A route refuses a request by raising :class:`ApiError`; :func:`install_error_handlers` turns it,
FastAPI's own errors (no such endpoint, method not allowed, validation) and any unexpected failure
into that one shape.  An unexpected failure is logged with its type and message only: no traceback
and no local values, so no key or state reaches the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["ApiError", "error_response", "install_error_handlers", "logger", "unprocessable"]

#: The service's log (the seed warning, unexpected failures).
logger = logging.getLogger("dpstream.service")


class ApiError(Exception):
    """An answer with a 4xx status and one clear message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@contextmanager
def unprocessable() -> Iterator[None]:
    """Turn the library's refusal of a parameter or a batch (a TypeError or ValueError) into a 422 with its message."""
    try:
        yield
    except (TypeError, ValueError) as error:
        raise ApiError(422, str(error)) from None


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"status": status, "message": message}`` with that status."""
    return JSONResponse({"status": status, "message": message}, status_code=status, headers=headers)


async def _api_error(request: Request, error: ApiError) -> JSONResponse:
    return error_response(error.status, error.message, error.headers)


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    message = {404: f"no such endpoint: {request.method} {request.url.path}.",
               405: f"method {request.method} is not allowed on {request.url.path}."}.get(
                   error.status_code, str(error.detail))
    return error_response(error.status_code, message)


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    # the type and message only: no traceback, no local values, so no key or state reaches the log
    logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(error).__name__, error)
    return error_response(500, "the service failed on this request; see its log (a batch retried with the same "
                               "first_position is never ingested twice).")


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return error_response(422, f"{where}: {first.get('msg', 'invalid request')}.")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as ``{"status", "message"}`` JSON."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(RequestValidationError, _validation_error)
