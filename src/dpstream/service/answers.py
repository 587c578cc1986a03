"""The JSON the API answers with: a source's public facts and pages of released values.

Nothing here ever reads a source's key or state: :func:`describe` takes the public columns only.

>>> released_json([3, 4], [60.0, 120.0], [1.5, -0.25])
b'{"released":[{"position":3,"time":60.0,"value":1.5},{"position":4,"time":120.0,"value":-0.25}]}'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpstream.service.storage import Source

__all__ = ["describe", "released_json", "released_rows_json"]


def describe(source: Source, *, counts: bool = True) -> dict[str, Any]:
    """The public facts of a source (never its key or state); ``counts=False`` leaves out ``position``, the inputs
    consumed (an aggregate's rows: data under its unit-level relation, shown to the token's holder only).  An
    archived source says so: ``"archived": true`` and ``"archived_at"``, when."""
    public = dict(source.public)
    privacy = public.pop("privacy")
    spent = source.position > 0
    params = {key: value for key, value in source.params.items() if key != "method"}
    described = {"name": source.name}
    if source.kind == "stream":
        described["method"] = source.params["method"]
    described.update({
        "parameters": params, **({"position": source.position} if counts else {}), "released": source.released,
        **public,
        "privacy": privacy["statement"],
        "budget": {"epsilon": privacy["epsilon"], "delta": privacy["delta"],
                   "epsilon_spent": privacy["epsilon"] if spent else 0.0,
                   "delta_spent": privacy["delta"] if spent else 0.0},
        "created": source.created,
    })
    if source.archived is not None:
        described.update(archived=True, archived_at=source.archived)
    return described


def released_json(positions: list[int], times: list[float], values: list[float]) -> bytes:
    """``{"released": [{"position", "time", "value"}, ...]}`` (numbers are finite: repr is JSON)."""
    rows = ",".join(f'{{"position":{p},"time":{t!r},"value":{v!r}}}' for p, t, v in zip(positions, times, values))
    return f'{{"released":[{rows}]}}'.encode()


def released_rows_json(rows: Sequence[tuple[int, float, float]]) -> bytes:
    """:func:`released_json` of the ``(position, time, value)`` rows the storage reads."""
    columns = [list(column) for column in zip(*rows)] if rows else [[], [], []]
    return released_json(*columns)
