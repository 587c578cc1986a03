"""``/aggregates``: population aggregates under unit-level privacy -- their creation, their rows in batches, and
the public reads of the buckets they released.

An aggregate is :class:`~dpstream.release.aggregate.UnitAggregate` (what ``dpstream aggregate`` runs), kept
as a source of kind ``aggregate`` in the tables streams use: its position counts the rows consumed, its
released values are numbered in the order released (bucket by bucket, the partitions of a bucket in their
public order, so a value's partition is its position modulo the number of partitions) with the bucket's
start as their time.  With private partition selection (``"partition_selection": "private"``) the partitions
are not known in advance: the ``n``-th value released is at position ``n * PARTITION_STRIDE + p``, ``p`` its
partition's number in the public facts' ``partitions`` (the public ones, then the selected private ones in
the order first selected), so positions still increase in the order released and each names its partition.

A batch of rows goes through the one ingest transaction of :mod:`~dpstream.service.ingest`: the buckets it
closes, the ledger row (with the first position and span of the values it released) and the new state are
committed together before the answer is sent, and a retry (same ``first_position``, same rows) is answered
with the buckets released the first time.  The noise is keyed by the aggregate's stored key, so a restart
recomputes it, never re-draws it.

Writes need a bearer token: ``POST /aggregates`` and ``DELETE /aggregates/{name}`` (archive) an admin's,
``POST /aggregates/{name}/rows`` a producer's of the aggregate (:mod:`~dpstream.service.tokens`); an aggregate's
rows consumed are shown to an admin's or a reader's token only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from dpstream.accounting import rho_for
from dpstream.io.times import NS, duration_text, format_times, parse_duration, parse_times, time_kind
from dpstream.release.aggregate import MAX_LEAVES, UnitAggregate
from dpstream.release.aggregate_watermark import buckets_closed
from dpstream.service import mechanisms
from dpstream.service.answers import describe
from dpstream.service.dependencies import JsonObject, SourcesDep, StorageDep, authorize, has_token, scope
from dpstream.service.errors import ApiError, unprocessable
from dpstream.service.ingest import Rows, ingest
from dpstream.service.parsing import MAX_BATCH, check_name, integer, numbers, query_int
from dpstream.service.routers import common
from dpstream.service.storage import Source

__all__ = ["MAX_CLOSED", "PARAMETERS", "PARTITION_STRIDE", "router"]

router = APIRouter()

#: ``POST /aggregates``'s parameters (``dpstream aggregate``'s options) -> the keyword of UnitAggregate each sets.
PARAMETERS = {"epsilon": "epsilon", "bucket": "bucket", "unit_window": "window", "unit_bound": "unit_bound",
              "upper_bound": "upper_bound", "clip": "clip", "statistic": "statistic", "partitions": "partitions",
              "unit_max_rows": "max_rows", "unit_max_partitions": "max_partitions", "levels": "levels",
              "replace": "replace", "late": "late", "unit": "unit", "start": "start",
              "partition_selection": "partition_selection", "selection_epsilon": "selection_epsilon",
              "selection_delta": "selection_delta", "noise": "rho", "delta": "rho"}
#: The parameters of the aggregate's budget (:func:`_budget`: epsilon, or the rho of (epsilon, delta)).
_BUDGET = ("epsilon", "noise", "delta")
#: The most bucket values one batch may release (a gap between two rows releases every bucket in between).
MAX_CLOSED = 1 << 22
#: The most empty bucket values the gaps between a batch's rows may release, or a window's if more: about the answer
#: of the largest request body and a few seconds' work (438,288 of them took 34 s), a cost rows do not bound.
MAX_GAP = 1 << 16
#: With private partition selection, a released value's position is its number in the order released times this
#: plus its partition's number (a window holds at most MAX_LEAVES buckets x partitions, so fewer partitions).
PARTITION_STRIDE = MAX_LEAVES
#: The fields of a batch of rows.
_BATCH_FIELDS = ("times", "units", "values", "partitions", "first_position", "flush")


def _texts(items: object, name: str, size: int | None = None) -> list[str]:
    """A JSON list of strings (or integers, read as their text): unit labels, partition names; ``size`` entries
    when given (one per row), else 1 to :data:`~dpstream.service.parsing.MAX_BATCH`."""
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ApiError(422, f"{name} must be a list of 1 to {MAX_BATCH} strings, got {json.dumps(items)[:80]}.")
    if size is not None and len(items) != size:
        raise ApiError(422, f"{name} must have one entry per row ({size}), got {len(items)}.")
    if not set(map(type, items)) <= {str, int}:
        index = next(i for i, v in enumerate(items) if type(v) not in (str, int))
        raise ApiError(422, f"{name}[{index}] must be a string, got {json.dumps(items[index])[:80]}.")
    return [str(item) for item in items]


def _time(value: object, name: str) -> int:
    """One time, ISO 8601 or epoch seconds, as int64 nanoseconds (:func:`~dpstream.io.times.parse_times`)."""
    return int(_times([value], name)[0])


def _times(values: object, name: str) -> np.ndarray:
    """Times as ISO 8601 texts or epoch seconds (numbers or their texts), which the first decides, as int64
    nanoseconds: the one parser of :mod:`dpstream.io.times`; an error names the entry."""
    if not isinstance(values, list) or not values or not set(map(type, values)) <= {str, int, float}:
        raise ApiError(422, f"{name} must be a list of times (ISO 8601 texts or epoch seconds), got "
                            f"{json.dumps(values)[:80]}.")
    texts = [value if isinstance(value, str) else repr(value) for value in values]
    try:
        return parse_times(texts, kind=time_kind(texts[0]), first_row=0, what="time")
    except ValueError as error:
        raise ApiError(422, re.sub(r"^row ([0-9]+): ", rf"{name}[\1]: ", str(error))) from None


def _parameters(document: dict[str, Any]) -> dict[str, Any]:
    """UnitAggregate's keywords of a creation request (its own checks follow: a ValueError is a 422)."""
    unknown = sorted(set(document) - set(PARAMETERS))
    if unknown:
        raise ApiError(422, f"an aggregate takes no parameter {', '.join(map(repr, unknown))}; it takes "
                            f"{', '.join(PARAMETERS)}.")
    for required in ("epsilon", "bucket", "unit_window", "unit_bound"):
        if required not in document:
            raise ApiError(422, f"an aggregate needs {required}.")
    params: dict[str, Any] = _budget(document)
    for name, value in document.items():
        if value is None or name in _BUDGET:
            continue
        if name == "partitions":
            params["partitions"] = _texts(value, name)
        elif name in ("bucket", "unit_window"):
            params[PARAMETERS[name]] = parse_duration(value, name)
        elif name == "start":
            params["start"] = _time(value, "start")
        elif not isinstance(value, (bool, int, float, str)):
            raise TypeError(f"{name} must be a number, a string or a boolean, got {json.dumps(value)[:80]}.")
        else:
            params[PARAMETERS[name]] = value
    given = [name for name in ("selection_epsilon", "selection_delta") if name in params]
    if given and params.get("partition_selection", "public") == "public":  # as the command: never silently ignored
        raise ApiError(422, f"{given[0]} applies with partition_selection private only.")
    return params


def _budget(document: dict[str, Any]) -> dict[str, Any]:
    """The aggregate's budget keyword: ``epsilon`` (Laplace noise, pure DP), or with ``"noise": "gaussian"`` the rho
    whose (epsilon, delta) per window is the target (``dpstream aggregate --noise gaussian --delta``)."""
    noise, delta = document.get("noise", "laplace"), document.get("delta")
    if noise not in ("laplace", "gaussian"):
        raise ApiError(422, f"noise must be \"laplace\" or \"gaussian\", got {json.dumps(noise)[:80]}.")
    if noise == "laplace":
        if delta is not None:
            raise ApiError(422, "delta applies with \"noise\": \"gaussian\" only (Laplace noise is pure epsilon-DP).")
        return {"epsilon": document["epsilon"]}
    if delta is None:
        raise ApiError(422, "\"noise\": \"gaussian\" needs delta: the delta of the per-window (epsilon, delta) "
                            "target, e.g. 1e-6.")
    common.check_new_target(delta)  # a new aggregate's target: at most 1e-3
    return {"rho": rho_for(document["epsilon"], delta)}


@router.post("/aggregates", status_code=201, dependencies=[Depends(authorize)])
async def create_aggregate(document: JsonObject, storage: StorageDep) -> JSONResponse:
    name = check_name(document.pop("name", None))
    seed, budget = document.pop("seed", None), common.budget_of(document)
    with unprocessable():
        params = _parameters(document)
        key = mechanisms.derive_key(seed)
        agg = UnitAggregate(**params, key=key)
    shown = {**document, "bucket": duration_text(agg.bucket), "unit_window": duration_text(agg.window)}
    return await common.created(storage, kind="aggregate", name=name, params=shown,
                                public=mechanisms.aggregate_facts(agg, document.get("delta")), key=key,
                                state=mechanisms.snapshot(agg), seeded=seed is not None, budget=budget,
                                guarantee=mechanisms.guarantee(agg, document.get("delta")))


@router.get("/aggregates")
def list_aggregates(request: Request, storage: StorageDep) -> dict[str, Any]:
    """Every aggregate's public facts; the rows consumed (data) only to the token's holder."""
    counts = has_token(request)
    return {"aggregates": [describe(source, counts=counts) for source in storage.sources("aggregate")]}


@router.get("/aggregates/{name}")
def get_aggregate(name: str, request: Request, sources: SourcesDep) -> dict[str, Any]:
    """An aggregate's public facts; ``position`` (the rows consumed: data) only to the token's holder."""
    return describe(sources.public("aggregate", name), counts=has_token(request))


def released_buckets_json(source: Source, rows: Sequence[tuple[int, float, float]]) -> bytes:
    """``{"released": [{"position", "bucket", "partition", "value"}, ...]}``: the bucket's start in ISO 8601 UTC, the
    partition's name (empty without partitions), the value, and for a sum or a count ``"standard_error"``, that of
    its noise (every bucket's, a public fact of the aggregate; bounding is not in it), for a mean
    ``"sum_standard_error"`` and ``"count_standard_error"`` (a ratio of noisy values has no exact one)."""
    if not rows:
        return b'{"released":[]}'
    positions, times, values = (list(column) for column in zip(*rows))
    starts = format_times(np.round(np.asarray(times) * NS).astype(np.int64))
    if source.params.get("partition_selection") == "private":  # the partition's number is in the position
        names, stride = source.public["partitions"], PARTITION_STRIDE
    else:
        names = source.params.get("partitions") or [""]
        stride = len(names)
    items = [{"position": p, "bucket": b, "partition": names[p % stride], "value": v}
             for p, b, v in zip(positions, starts, values)]
    errors = {name: source.public[name] for name in ("standard_error", "sum_standard_error", "count_standard_error")
              if source.public.get(name) is not None}
    for item in items:
        item.update(errors)
    return json.dumps({"released": items}, separators=(",", ":"), allow_nan=False).encode()


@router.delete("/aggregates/{name}", dependencies=[Depends(authorize)])
async def archive_aggregate(name: str, sources: SourcesDep) -> dict[str, Any]:
    return await common.archive(sources, "aggregate", name)


@router.post("/aggregates/{name}/rows", dependencies=[scope("producer", "aggregate")])
async def post_rows(name: str, document: JsonObject, sources: SourcesDep) -> Response:
    common.batch_fields(document, _BATCH_FIELDS, ("times", "units", "values"))
    values = numbers(document["values"], "values")
    times = _times(document["times"], "times")
    if times.size != values.size:
        raise ApiError(422, f"times must have one entry per value ({values.size}), got {times.size}.")
    units = np.array(_texts(document["units"], "units", values.size), dtype=str)
    given = document.get("partitions")
    partitions = None if given is None else np.array(_texts(given, "partitions", values.size), dtype=str)
    flush = document.get("flush", False)
    if not isinstance(flush, bool):
        raise ApiError(422, f"flush must be true or false, got {json.dumps(flush)[:80]}.")
    first = document.get("first_position")
    first = None if first is None else integer(first, "first_position", minimum=0)
    inputs = (times, values, units, np.array([flush])) + (() if partitions is None else (partitions,))

    def release(agg: UnitAggregate) -> Rows:
        _check_gap(agg, times)
        start = agg.released_values
        parts = list(agg.release_parts(times, units, values, partitions))  # a window at a time: a long gap is cut
        parts += [agg.flush()] if flush else []
        buckets = np.concatenate([np.zeros(0, dtype=np.int64)] + [part.buckets for part in parts])
        positions = np.arange(start, start + buckets.size, dtype=np.int64)
        if agg.partition_selection == "private":  # each value's partition number in its position
            numbers = np.concatenate([np.zeros(0, dtype=np.int64)] + [part.partitions for part in parts])
            positions = positions * PARTITION_STRIDE + numbers
        return Rows(first=start, times=(buckets // NS).astype(np.float64), positions=positions,
                    values=np.concatenate([np.zeros(0)] + [part.values for part in parts]))

    body = await run_in_threadpool(ingest, sources, "aggregate", name, first, inputs, None, release,
                                   released_buckets_json)
    return Response(body, media_type="application/json")


def _check_gap(agg: UnitAggregate, times: np.ndarray) -> None:
    """Refuse, before any work, a batch whose gaps would release more than MAX_GAP empty bucket values (or a window's,
    if more), or that would release more than MAX_CLOSED in all: public numbers, as the times are."""
    closed = buckets_closed(agg, times)
    per = len(agg.partition_names)
    empty, total = int(np.maximum(closed - 1, 0).sum()) * per, int(closed.sum()) * per
    row = int(np.argmax(closed)) if closed.size else 0
    if empty > max(MAX_GAP, agg.width * per):
        raise ValueError(f"row {agg.position + row + 1}: its time {format_times(times[row:row + 1])[0]} comes "
                         f"{duration_text(int(closed[row]) * agg.bucket)} after the newest bucket before it: the gaps "
                         f"of this batch would release {empty:,} empty bucket values (every bucket between two rows "
                         f"is released), more than the {max(MAX_GAP, agg.width * per):,} a batch may; the service "
                         "refuses so long a gap: create another aggregate, starting after it.")
    if total > MAX_CLOSED:
        raise ValueError(f"this batch would release {total:,} bucket values, more than the {MAX_CLOSED:,} one batch "
                         "may: post its rows in smaller batches.")


@router.get("/aggregates/{name}/released")
def get_released(name: str, request: Request, sources: SourcesDep) -> Response:
    """Released buckets in the order released, after position ``?after=`` (from the first when omitted), at most
    ``?limit=``."""
    source = sources.public("aggregate", name)
    after = query_int(request, "after", minimum=-1, default=None)
    rows = sources.storage.released(source.id, after=after, limit=common._limit(request))
    return Response(released_buckets_json(source, rows), media_type="application/json")


@router.get("/aggregates/{name}/ledger")
def get_ledger(name: str, request: Request, sources: SourcesDep) -> dict[str, Any]:
    return common.ledger(sources, "aggregate", name, request, counts=has_token(request))
