"""ToPL's wire format: the JSON a collector publishes and the JSON of the reports clients send back.

This module is the one definition of the format (version 1); :class:`~dpstream.release.ToPLRandomizer`,
:class:`~dpstream.release.topl.ReportBatch` and :class:`~dpstream.release.ToPLCollector` read and
write it through the functions here, and a service accepts exactly this.

Parameters (collector -> clients), one JSON object::

    {"format": "dpstream.topl.parameters/1",
     "epsilon": 1.0, "threshold_epsilon": 1.0, "upper_bound": 100.0, "threshold": null,
     "buckets": 1024, "stream_grid": 1024,
     "mechanisms": {"square_wave": {"grid": 1024, "window": 524, "p": ..., "q": ..., "extra": ...},
                    "stochastic_rounding": {...}, "piecewise": {...}, "hybrid_alpha": ...,
                    "denominator_bits": 62},
     "id": "3f2a..."}

* ``epsilon``, ``threshold_epsilon``, ``upper_bound``: numbers; ``threshold``: null until theta
  is published, then a number in (0, upper_bound].
* ``buckets``: the Square Wave grid (d); ``stream_grid``: the Piecewise grid (n) of HM.
* ``mechanisms``: the integers that define every report's probabilities (masses in units of
  2^-62, see :mod:`dpstream.ldp.grid`), derived from the fields above; a reader recomputes them and
  refuses a document whose numbers differ (another version of the mechanisms, or an altered
  document).  They exceed 2^53: parse them as 64-bit integers, not as doubles.
* ``id``: the first 16 hex digits of the SHA-256 of the document without ``id``, serialized with
  sorted keys and no spaces.  Reports name it, so the collector can refuse reports made with
  other parameters (an old theta, another epsilon).

Reports (clients -> collector), one JSON object per batch (one line of a JSON-lines stream)::

    {"format": "dpstream.topl.reports/1", "parameters": "3f2a...",
     "mechanism": [0, 0, 0], "report": [17, 912, 630]}

* ``mechanism[k]``: 0 = Square Wave (threshold phase), 1 = SR, 2 = PM (HM's two branches);
* ``report[k]``: the report's grid index, an integer (the range depends on the mechanism and the
  parameters, and is checked by the collector).

Every malformed document raises a ``ValueError`` that says what is wrong and where.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from typing import Any

import numpy as np

from dpstream._checks import plain_number

__all__ = [
    "MECHANISM_CODES",
    "PARAMETERS_FORMAT",
    "PM_REPORT",
    "REPORTS_FORMAT",
    "SR_REPORT",
    "SW_REPORT",
    "dump_parameters",
    "dump_reports",
    "load_parameters",
    "load_reports",
    "parameters_id",
]

PARAMETERS_FORMAT = "dpstream.topl.parameters/1"
REPORTS_FORMAT = "dpstream.topl.reports/1"

#: Mechanism codes of a report.
SW_REPORT, SR_REPORT, PM_REPORT = 0, 1, 2
MECHANISM_CODES = (SW_REPORT, SR_REPORT, PM_REPORT)

_PARAMETER_FIELDS = ("epsilon", "threshold_epsilon", "upper_bound", "threshold", "buckets", "stream_grid",
                     "mechanisms")
_REPORT_FIELDS = ("format", "parameters", "mechanism", "report")


def _canonical(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)


def parameters_id(fields: dict[str, Any]) -> str:
    """The id of a parameters document: SHA-256 of its canonical JSON without ``id``, 16 hex digits."""
    body = {key: value for key, value in fields.items() if key != "id"}
    body["format"] = PARAMETERS_FORMAT
    return hashlib.sha256(_canonical(body).encode()).hexdigest()[:16]


def dump_parameters(fields: dict[str, Any]) -> str:
    """The parameters document (one line of JSON) for ``fields`` (the keys of the module docstring)."""
    document = {"format": PARAMETERS_FORMAT, **fields}
    document["id"] = parameters_id(document)
    return _canonical(document)


def _parse(text: object, what: str) -> dict[str, Any]:
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a JSON string, got {type(text).__name__}.")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} are not valid JSON: {error}.") from None
    if not isinstance(document, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(document).__name__}.")
    return document


def _check_format(document: dict[str, Any], expected: str, what: str) -> None:
    found = document.get("format")
    if found != expected:
        shown = "no format field" if "format" not in document else f"format {found!r}"
        raise ValueError(f"{what} must have \"format\": \"{expected}\", got {shown}.")


def _check_fields(document: dict[str, Any], expected: tuple[str, ...], what: str) -> None:
    missing = [key for key in expected if key not in document]
    unknown = sorted(key for key in document if key not in expected)
    if missing:
        raise ValueError(f"{what} miss the field(s) {', '.join(missing)}.")
    if unknown:
        raise ValueError(f"{what} have unknown field(s) {', '.join(unknown)}.")


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def load_parameters(text: object) -> dict[str, Any]:
    """Parse and check a parameters document; returns its fields (with ``id``).

    Checks the format, the fields and their JSON types, and that ``id`` matches the content; the
    values themselves are checked by :meth:`ToPLRandomizer.from_json <dpstream.release.ToPLRandomizer.from_json>`.

    >>> load_parameters('{"format": "dpstream.topl.parameters/0"}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: ToPL parameters must have "format": "dpstream.topl.parameters/1", got format '...parameters/0'.
    """
    what = "ToPL parameters"
    document = _parse(text, what)
    _check_format(document, PARAMETERS_FORMAT, what)
    _check_fields(document, ("format", *_PARAMETER_FIELDS, "id"), what)
    for key in ("epsilon", "threshold_epsilon", "upper_bound"):
        if not _is_number(document[key]):
            raise ValueError(f"{what}: {key} must be a number, got {document[key]!r}.")
    if document["threshold"] is not None and not _is_number(document["threshold"]):
        raise ValueError(f"{what}: threshold must be a number or null, got {document['threshold']!r}.")
    for key in ("buckets", "stream_grid"):
        if not (isinstance(document[key], int) and not isinstance(document[key], bool)):
            raise ValueError(f"{what}: {key} must be an integer, got {document[key]!r}.")
    if not isinstance(document["mechanisms"], dict):
        raise ValueError(f"{what}: mechanisms must be an object, got {document['mechanisms']!r:.80}.")
    if document["id"] != parameters_id(document):
        raise ValueError(f"{what}: id {document['id']!r} does not match the content (its hash is "
                         f"{parameters_id(document)!r}): the document was altered.")
    return document


def dump_reports(mechanism: np.ndarray, report: np.ndarray, parameters: str) -> str:
    """The reports document (one line of JSON) of a batch made with the parameters of id ``parameters``."""
    return _canonical({"format": REPORTS_FORMAT, "parameters": parameters,
                       "mechanism": np.asarray(mechanism).astype(int).tolist(),
                       "report": np.asarray(report).astype(np.int64).tolist()})


def _integers(values: object, key: str, what: str) -> np.ndarray:
    if not isinstance(values, list):
        raise ValueError(f"{what}: {key} must be a list of integers, got {values!r:.80}.")
    for position, value in enumerate(values):
        if not (isinstance(value, int) and not isinstance(value, bool)):
            shown = plain_number(value) if _is_number(value) else repr(value)
            raise ValueError(f"{what}: the {key} at position {position} (0-based) is {shown}, not an integer"
                             + (" (off the grid)" if key == "report" and _is_number(value) else "") + ".")
    if values and not (-(2**63) <= min(values) and max(values) < 2**63):
        raise ValueError(f"{what}: {key} holds an integer beyond 64 bits.")
    return np.asarray(values, dtype=np.int64)


def load_reports(text: object) -> tuple[np.ndarray, np.ndarray, str]:
    """Parse and check a reports document: ``(mechanism codes (int8), report indices (int64), parameters id)``.

    The indices' ranges depend on the parameters: the collector checks them
    (:meth:`~dpstream.release.ToPLCollector.receive_json`).

    >>> codes, reports, made_with = load_reports(
    ...     '{"format": "dpstream.topl.reports/1", "parameters": "ab", "mechanism": [0, 0], "report": [3, 7]}')
    >>> codes.tolist(), reports.tolist(), made_with
    ([0, 0], [3, 7], 'ab')
    >>> load_reports('{"format": "dpstream.topl.reports/1", "parameters": "ab", "mechanism": [2], "report": [1.5]}')
    Traceback (most recent call last):
    ValueError: ToPL reports: the report at position 0 (0-based) is 1.5, not an integer (off the grid).
    """
    what = "ToPL reports"
    document = _parse(text, what)
    _check_format(document, REPORTS_FORMAT, what)
    _check_fields(document, _REPORT_FIELDS, what)
    if not isinstance(document["parameters"], str):
        raise ValueError(f"{what}: parameters must be the id string of the parameters, got {document['parameters']!r}.")
    codes = _integers(document["mechanism"], "mechanism", what)
    reports = _integers(document["report"], "report", what)
    if codes.size != reports.size:
        raise ValueError(f"{what}: mechanism and report must have one length, got {codes.size} and {reports.size}.")
    unknown = ~np.isin(codes, MECHANISM_CODES)
    if unknown.any():
        index = int(np.argmax(unknown))
        raise ValueError(f"{what}: the mechanism at position {index} (0-based) is {codes[index]}, not one of "
                         f"{SW_REPORT} (Square Wave), {SR_REPORT} (SR), {PM_REPORT} (PM).")
    return codes.astype(np.int8), reports, document["parameters"]
