"""Reading requests: the limits, the one JSON parser of request bodies, and the checks of the values in them.

Every check raises :class:`~dpstream.service.errors.ApiError` with the status and the message the
API answers: 400 for a body that is not JSON (NaN and infinities are not JSON numbers; a document
nested too deeply is refused, not a crash), 422 for JSON that is not what the endpoint takes.

>>> parse_json(b'{"values": [1, 2.5]}')
{'values': [1, 2.5]}
>>> parse_json(b'[' * 100_000)
Traceback (most recent call last):
dpstream.service.errors.ApiError: request body is not valid JSON: nested too deeply.
>>> numbers([1, 2.5], "values").tolist()
[1.0, 2.5]
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
from starlette.requests import Request

from dpstream.service.errors import ApiError

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_LIMIT",
    "NAME",
    "check_name",
    "integer",
    "json_object",
    "numbers",
    "parse_json",
    "query_int",
    "read_body",
]

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


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to be larger than ``limit`` bytes."""
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


def parse_json(body: bytes) -> Any:
    """The JSON document of a request body (400 when it is not JSON)."""
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"request body is not valid JSON: {error}.") from None
    except RecursionError:
        raise ApiError(400, "request body is not valid JSON: nested too deeply.") from None


def json_object(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body (400 when it is not JSON, 422 when it is not an object)."""
    document = parse_json(body)
    if not isinstance(document, dict):
        raise ApiError(422, f"request body must be a JSON object, got {type(document).__name__}.")
    return document


def numbers(values: object, name: str, size: int | None = None) -> np.ndarray:
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


def integer(value: object, name: str, *, minimum: int) -> int:
    """A JSON integer (not a boolean) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(422, f"{name} must be an integer >= {minimum}, got {json.dumps(value)[:80]}.")
    return value


def query_int(request: Request, name: str, *, minimum: int, default: int | None) -> int | None:
    """The query parameter ``name`` as an integer of at least ``minimum``, or ``default`` when it is not given."""
    text = request.query_params.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,18}", text) or int(text) < minimum:
        raise ApiError(422, f"query parameter {name} must be an integer >= {minimum}, got {text[:80]!r}.")
    return int(text)


def check_name(name: object) -> str:
    """The name of a new stream or collector (:data:`NAME`)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ApiError(422, "name must be 1 to 64 letters, digits, '.', '_' or '-' (starting with a letter or "
                            f"digit), got {json.dumps(name)[:80]}.")
    return name
