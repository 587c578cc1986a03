"""The JSON the API answers with: a source's public facts and pages of released values.

Nothing here ever reads a source's key or state: :func:`describe` takes the public columns only.

>>> released_json([3, 4], [60.0, 120.0], [1.5, -0.25])
b'{"released":[{"position":3,"time":60.0,"value":1.5},{"position":4,"time":120.0,"value":-0.25}]}'
>>> released_json([3], [60.0], [1.5], errors=[2.0])
b'{"released":[{"position":3,"time":60.0,"value":1.5,"standard_error":2.0}]}'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from dpstream.release.banded import BandedFactorization
from dpstream.release.binary_tree import increment_standard_errors
from dpstream.release.factorization import SqrtFactorization
from dpstream.release.tops_errors import model_standard_errors
from dpstream.service.storage import Source

__all__ = ["describe", "released_json", "released_rows_json", "standard_errors"]


def describe(source: Source, *, counts: bool = True) -> dict[str, Any]:
    """The public facts of a source (never its key or state); ``counts=False`` leaves out ``position``, the inputs
    consumed (an aggregate's rows: data under its unit-level relation, shown to the token's holder only).  An
    archived source says so: ``"archived": true`` and ``"archived_at"``, when.  A zCDP source's ``budget`` states
    ``rho`` (what it spends) beside the ``epsilon`` and ``delta`` it implies."""
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
                   "delta_spent": privacy["delta"] if spent else 0.0,
                   **({"rho": privacy["rho"], "rho_spent": privacy["rho"] if spent else 0.0}
                      if "rho" in privacy else {})},
        "created": source.created,
    })
    if source.archived is not None:
        described.update(archived=True, archived_at=source.archived)
    return described


def standard_errors(source: Source, positions: list[int]) -> list[float] | None:
    """The exact standard errors of a source's released values at ``positions``, when its mechanism states them
    (its public ``error_model``: the binary tree's, PAK's tree's or ToPS's perturber's once theta is chosen, or the
    square-root or banded factorization's), else None.  The noise's only: clipping, truncation, smoothing bias, the
    grid's rounding and the factorization's decoding rounding are not in them."""
    model = source.public.get("error_model")
    if model is None:
        return None
    shifted = np.asarray(positions, dtype=np.int64) - model.get("first_position", 0)  # a hold-out's released ones
    for name, kind in _FACTORIZATIONS.items():
        if name in model:
            return _factorization(kind, **model[name]).standard_errors(shifted).tolist()
    if "perturber" in model:
        return model_standard_errors(model, shifted).tolist()
    return increment_standard_errors(shifted, levels=model["levels"], max_range=model["max_range"],
                                     node_variance=model["node_variance"]).tolist()


#: The factorizations by the name of their error model (the parameters that rebuild them).
_FACTORIZATIONS: dict[str, type[SqrtFactorization | BandedFactorization]] = {
    "square_root": SqrtFactorization, "banded": BandedFactorization}


@lru_cache(maxsize=32)
def _factorization(kind: type[SqrtFactorization | BandedFactorization], *, rho: float, upper_bound: float,
                   max_range: int, granularity: float) -> SqrtFactorization | BandedFactorization:
    """A factorization of ``kind`` with a stream's public parameters, for its standard errors alone (it never
    releases: its seed is no secret).  Kept, because its weights cost O(max_range^2) (square root) or about
    O(max_range log max_range) (banded) once."""
    return kind(rho=rho, upper_bound=upper_bound, max_range=max_range, granularity=granularity, seed=0)


def released_json(positions: list[int], times: list[float], values: list[float],
                  errors: list[float] | None = None) -> bytes:
    """``{"released": [{"position", "time", "value"}, ...]}`` (numbers are finite: repr is JSON), each with its
    ``"standard_error"`` when ``errors`` are given (a field older clients ignore)."""
    if errors is None:
        rows = ",".join(f'{{"position":{p},"time":{t!r},"value":{v!r}}}' for p, t, v in zip(positions, times, values))
    else:
        rows = ",".join(f'{{"position":{p},"time":{t!r},"value":{v!r},"standard_error":{e!r}}}'
                        for p, t, v, e in zip(positions, times, values, errors))
    return f'{{"released":[{rows}]}}'.encode()


def released_rows_json(rows: Sequence[tuple[int, float, float]], source: Source | None = None) -> bytes:
    """:func:`released_json` of the ``(position, time, value)`` rows the storage reads (with the standard errors
    of ``source``'s values, when it states them)."""
    columns = [list(column) for column in zip(*rows)] if rows else [[], [], []]
    return released_json(*columns, errors=None if source is None else standard_errors(source, columns[0]))
