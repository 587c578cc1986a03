"""The service's mechanisms: which parameters each accepts, how its noise key is made, and its secret state.

The HTTP API's ``method`` of a stream is a mechanism of the registry that the service offers
(:mod:`dpstream.release.registry`, :data:`STREAM_METHODS` its view); the parameters a request may
give are the class's own keyword arguments (less ``seed``, ``noise`` and ``key``, which the
service sets), checked by the class itself, so the API validates exactly as the library.

Noise.  Every stream's mechanism is built with ``key=``: its noise is a deterministic function of
a secret 32-byte key and the identity of each node (:class:`dpstream.noise.KeyedBits`), never of
the stream's name.  The key is ``os.urandom(32)``; with ``seed`` (tests only) it is the key
``dpstream release --seed --state`` uses (:func:`dpstream.durable.keys.seed_key`), so two streams
with the same parameters and seed release the same values for the same input.

State.  :func:`snapshot` turns a mechanism into text that :func:`restore` turns back into a
mechanism that continues exactly, through the streaming contract
(:mod:`dpstream.release.contract`): the mechanism's ``state``, encoded as JSON by
:mod:`dpstream.durable.encoding`, and its ``from_state``.  A keyed snapshot leaves the current
tree's noise out (``from_state`` recomputes it from the key), so it stays small; during the
hold-out it holds the raw held-out values.  The key is stored once, in the stream's own secret
column: the snapshot is :func:`dpstream.durable.snapshots.keyless` (format :data:`KEYLESS_FORMAT`,
as a state file keeps it) and :func:`restore` puts the key back; states of
:data:`STATE_FORMAT`, which carried the key inside as well, still read.  No pickle: reading the
database never runs code.

Held-out values.  The service stores a hold-out apart from the state, appended batch by batch (the
``holdout`` table of :mod:`dpstream.service.storage`), so that a batch does not rewrite every value
held so far: :func:`split_snapshot` gives the state (format :data:`APART_FORMAT`, the held-out values
replaced by a marker ``{"apart": {"dtype", "count"}}``) and the values apart, and :func:`restore_stored`
puts back the values read from their rows.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from dpstream._checks import check_choice
from dpstream.accounting import ZcdpGuarantee, zcdp_unit_statement
from dpstream.durable.encoding import decode, encode
from dpstream.durable.keys import seed_key
from dpstream.durable.snapshots import keyless, with_key
from dpstream.privacy import PrivacyGuarantee
from dpstream.release import ToPLCollector
from dpstream.release.aggregate import UnitAggregate, unit_statement
from dpstream.release.registry import served

__all__ = [
    "APART_FORMAT",
    "COLLECTOR_PARAMETERS",
    "STREAM_METHODS",
    "aggregate_facts",
    "build_collector",
    "build_stream",
    "collector_facts",
    "derive_key",
    "facts",
    "guarantee",
    "mechanism_class",
    "restore",
    "restore_stored",
    "snapshot",
    "split_snapshot",
    "stream_facts",
]


class _StreamMethods(Mapping[str, Any]):
    """The HTTP API's ``method`` of a stream -> the class that releases it: the registry's served mechanisms."""

    def __getitem__(self, name: str) -> Any:
        return served()[name].cls

    def __iter__(self) -> Iterator[str]:
        return iter(served())

    def __len__(self) -> int:
        return len(served())


#: The HTTP API's ``method`` of a stream -> the class that releases it (a view of the registry).
STREAM_METHODS: Mapping[str, Any] = _StreamMethods()

#: Parameters the service sets itself, never taken from a request.
_RESERVED = ("noise", "key", "seed")
#: Parameters the service does not offer: w-event (its cards and budget words speak of each value, event level), and
#: ``rho`` (a zCDP stream takes its (epsilon, delta) target, ``epsilon`` and ``delta``, as ``release --method`` does).
_NOT_SERVED = ("w_event", "period_bound", "rho")

#: The largest ``hold`` and ``max_range`` (and ``period``, a chunk's length when it is longer) a request may ask
#: for: a stream's memory grows with them (the binary tree keeps about 32 bytes per leaf of its current tree), and
#: one request must not exhaust the service.
MAX_HOLD = 1 << 22
MAX_RANGE = 1 << 22

#: The format of the text of :func:`snapshot` (the secret_state column): the snapshot with its key.
STATE_FORMAT = "dpstream.state/1"
#: The format of a snapshot stored without its key (:func:`dpstream.durable.snapshots.keyless`), the key beside it.
KEYLESS_FORMAT = "dpstream.state/2"
#: The format of a keyless snapshot whose held-out values are stored apart (:func:`split_snapshot`).
APART_FORMAT = "dpstream.state/3"


def _keywords(cls: Any) -> tuple[str, ...]:
    signature = inspect.signature(cls.__init__)
    return tuple(name for name, p in signature.parameters.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _RESERVED + _NOT_SERVED)


#: What ``POST /collectors`` accepts besides ``name``.
COLLECTOR_PARAMETERS = _keywords(ToPLCollector)


def _check_plain(params: dict[str, Any], allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"{what} takes no parameter {', '.join(map(repr, unknown))}; it takes {', '.join(allowed)}.")
    for name, value in params.items():
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise TypeError(f"{name} must be a number, a string or a boolean, got {json.dumps(value)[:80]}.")
    for name, largest in (("hold", MAX_HOLD), ("max_range", MAX_RANGE), ("period", MAX_RANGE)):
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > largest:
            raise ValueError(f"the service takes {name} up to {largest}, got {value!r}.")
    return {name: value for name, value in params.items() if value is not None}


def derive_key(seed: object) -> bytes:
    """A stream's secret key: 32 random bytes, or (``seed``, tests only) the key of ``release --seed --state``
    (:func:`dpstream.durable.keys.seed_key`)."""
    if seed is None:
        return os.urandom(32)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"seed must be a non-negative integer, got {seed!r}.")
    return seed_key(seed)


def build_stream(method: object, params: dict[str, Any], key: bytes) -> Any:
    """A fresh mechanism of ``method`` with ``params`` (checked by the class) and noise keyed by ``key``."""
    entries = served()
    entry = entries[check_choice(method, "method", tuple(entries))]
    params = _check_plain(params, _keywords(entry.cls), f"method {entry.name!r}")
    delta = inspect.signature(entry.cls.__init__).parameters.get("delta")
    if delta is not None and delta.default is inspect.Parameter.empty:  # a zCDP method's own message when missing
        params.setdefault("delta", None)
    return entry.cls(**params, **entry.fixed, **entry.noise(None, key))


def build_collector(params: dict[str, Any]) -> ToPLCollector:
    """A fresh ToPL collector with ``params`` (checked by the class; it has no randomness)."""
    return ToPLCollector(**_check_plain(params, COLLECTOR_PARAMETERS, "a ToPL collector"))


def snapshot(mechanism: Any) -> str:
    """The mechanism's secret state as text (see the module docstring).  SECRET: never serve or log it."""
    return json.dumps({"format": KEYLESS_FORMAT, "state": encode(keyless(mechanism.state), "state")}, allow_nan=False)


def split_snapshot(mechanism: Any) -> tuple[str, np.ndarray | None]:
    """:func:`snapshot` with the held-out values apart: the text (format :data:`APART_FORMAT`) and, until the
    threshold is chosen, the values held so far in position order (None after).  SECRET, both."""
    state = keyless(mechanism.state)
    held = state.get("held")
    if not isinstance(held, np.ndarray):
        return json.dumps({"format": APART_FORMAT, "state": encode(state, "state")}, allow_nan=False), None
    held = held.astype(held.dtype.newbyteorder("<"), copy=False)
    marker = {"apart": {"dtype": held.dtype.str, "count": held.size}}
    return json.dumps({"format": APART_FORMAT, "state": encode({**state, "held": marker}, "state")},
                      allow_nan=False), held


def restore(cls: Any, text: str, key: bytes | None = None) -> Any:
    """The mechanism of class ``cls`` continued from :func:`snapshot`'s text and the stream's ``key``.

    A snapshot of format :data:`KEYLESS_FORMAT` is stored without its key (the key is stored once,
    in its own column: :mod:`dpstream.durable.snapshots`) and needs ``key``; one of
    :data:`STATE_FORMAT` carries it (``key``, when given, is the same key).
    """
    return restore_stored(cls, text, key=key)[0]


def restore_stored(cls: Any, text: str, key: bytes | None = None, held: bytes | None = None) -> tuple[Any, int]:
    """:func:`restore`, for a text of :func:`split_snapshot` too: ``held`` holds the bytes of the held-out values
    stored apart, in position order.  The mechanism, and how many held-out values it took from ``held``."""
    document = json.loads(text)
    stored = document.get("format")
    if stored not in (STATE_FORMAT, KEYLESS_FORMAT, APART_FORMAT):
        raise ValueError(f"a stored state of format {stored!r} cannot be read (this dpstream reads "
                         f"{STATE_FORMAT!r}, {KEYLESS_FORMAT!r} and {APART_FORMAT!r}).")
    state = decode(document["state"])
    apart = 0
    marker = state.get("held") if stored == APART_FORMAT else None
    if isinstance(marker, dict):
        values = np.frombuffer(held or b"", dtype=np.dtype(marker["apart"]["dtype"]))
        apart = int(marker["apart"]["count"])
        if values.size != apart:
            raise ValueError(f"the state holds {apart} held-out values apart, their rows {values.size}.")
        state = {**state, "held": values.astype(values.dtype.newbyteorder("="))}
    if key is not None:
        state = with_key(state, key)
    elif stored != STATE_FORMAT:
        raise ValueError(f"a stored state of format {stored!r} needs the stream's key.")
    return cls.from_state(state), apart


def guarantee(mechanism: Any, delta: float | None = None) -> PrivacyGuarantee:
    """The mechanism's guarantee; a zCDP one stated at ``delta`` when given (the delta of the source's (epsilon,
    delta) target: a restored mechanism no longer knows it)."""
    stated = mechanism.privacy()
    return stated.at(delta) if delta is not None and isinstance(stated, ZcdpGuarantee) else stated


def _guarantee(mechanism: Any, delta: float | None = None) -> dict[str, Any]:
    """The ``privacy`` fact: epsilon, delta and the statement; under zCDP ``rho`` too (what it spends, composed by
    adding rho's: its epsilon is implied, and does not add up)."""
    stated = guarantee(mechanism, delta)
    rho = {"rho": stated.rho} if isinstance(stated, ZcdpGuarantee) else {}
    return {"epsilon": stated.epsilon, "delta": stated.delta, **rho, "statement": str(stated)}


def stream_facts(mechanism: Any, delta: float | None = None) -> dict[str, Any]:
    """The public facts of a stream's mechanism: theta once chosen, the hierarchy's shape, PAK's noisy sum of the
    hold-out (its running sums start there), the guarantee; for a periodic ToPS stream its public leaves (length,
    phase, chunk, the first released position and the shape of the period), which the dashboard revises by."""
    facts: dict[str, Any] = {"threshold": mechanism.threshold, "privacy": _guarantee(mechanism, delta)}
    if hasattr(mechanism, "error_model"):  # its released values carry their standard error (public parameters)
        model = mechanism.error_model()  # a hold-out's: None until theta is chosen
        if model is not None and math.isfinite(model.get("node_variance", 0.0) * 4 * model.get("levels", 1)):
            facts["error_model"] = model  # beyond a float (an extreme bound): none stated
    for name in ("smoothed_levels", "levels", "granularity", "held_sum", "held_sum_standard_error"):
        if hasattr(mechanism, name):
            value = getattr(mechanism, name)
            if not (isinstance(value, float) and not math.isfinite(value)):  # beyond a float (huge bounds): not stated
                facts[name] = value
    leaves = mechanism.leaves() if getattr(mechanism, "period", None) or getattr(mechanism, "leaf", None) else None
    if leaves is not None:  # a periodic stream: the dashboard revises its closed periods (post-processing)
        facts["leaves"] = {"length": leaves.length, "phase": leaves.phase, "chunk": leaves.chunk,
                           "first_position": mechanism.hold,
                           "shape": None if leaves.shape is None else leaves.shape.tolist()}
    return facts


def collector_facts(collector: ToPLCollector) -> dict[str, Any]:
    """The public facts of a collector: theta once published, the parameters' id, the guarantee of each report."""
    return {"threshold": collector.threshold, "hold": collector.hold,
            "parameters_id": collector.client().parameters_id, "privacy": _guarantee(collector)}


def aggregate_facts(agg: UnitAggregate, delta: float | None = None) -> dict[str, Any]:
    """The public facts of an aggregate: its grid, noise scale and hierarchy, the windows released so far, the
    partitions released (the public ones, then the selected private ones in the order first selected: a released
    value's partition number names one) and the guarantee, also in words per unit (each unit's rows in each window,
    and over the windows released; under zCDP in rho and the (epsilon, delta) it implies at ``delta``)."""
    stated = guarantee(agg, delta)
    relation = agg.relation()
    windows = -(-agg.released // agg.width)  # the span released is public, as a stream's length is
    statement = zcdp_unit_statement if isinstance(stated, ZcdpGuarantee) else unit_statement
    facts = {"granularity": agg.granularity, "noise_scale": agg.noise_scale, "levels": agg.levels,
             "fanout": agg.fanout, "windows": windows, "partitions": agg.partition_names,
             "privacy": _guarantee(agg, delta),
             "guarantee": statement(stated, unit=relation.unit, window=relation.window, windows=windows)}
    if agg.statistic != "mean":  # every bucket's sum or count shares it
        facts["standard_error"] = agg.standard_error()
    else:  # a ratio of noisy values has no exact one: its noisy sum's and count's, each exact
        facts.update(sum_standard_error=agg.standard_error("sum"), count_standard_error=agg.standard_error("count"))
    return facts


def facts(kind: str, mechanism: Any, delta: float | None = None) -> dict[str, Any]:
    """The public facts of a source's mechanism, by the source's kind (a zCDP one's guarantee stated at ``delta``,
    its target's)."""
    if kind == "collector":
        return collector_facts(mechanism)
    return aggregate_facts(mechanism, delta) if kind == "aggregate" else stream_facts(mechanism, delta)


def mechanism_class(kind: str, params: dict[str, Any]) -> Any:
    """The class that continues a stored source of ``kind`` (a stream's from its ``method``)."""
    if kind == "collector":
        return ToPLCollector
    return UnitAggregate if kind == "aggregate" else STREAM_METHODS[params["method"]]
