"""ToPL's wire format: the JSON a collector publishes and the JSON of the reports clients send back.

This module is the one definition of the format; :class:`~dpstream.release.ToPLRandomizer`,
:class:`~dpstream.release.topl.ReportBatch` and :class:`~dpstream.release.ToPLCollector` read and
write it through the functions here, and a service accepts exactly this.

Parameters (collector -> clients), one JSON object (version 2, written by default)::

    {"format": "dpstream.topl.parameters/2",
     "epsilon": 1.0, "threshold_epsilon": 1.0, "upper_bound": 100.0, "threshold": null,
     "buckets": 1024, "stream_grid": 1024,
     "mechanisms": {"square_wave": {"grid": 1024, "window": 524, "p": "5120...", "q": "1883...", "extra": 516},
                    "stochastic_rounding": {...}, "piecewise": {...}, "hybrid_alpha": "1814557055283096576",
                    "denominator_bits": 62},
     "id": "3f2a..."}

* ``epsilon``, ``threshold_epsilon``, ``upper_bound``: numbers; ``threshold``: null until theta
  is published, then a number in (0, upper_bound].
* ``buckets``: the Square Wave grid (d); ``stream_grid``: the Piecewise grid (n) of HM.
* ``mechanisms``: the integers that define every report's probabilities (masses in units of
  2^-62, see :mod:`dpstream.ldp.grid`), derived from the fields above; a reader recomputes them and
  refuses a document whose numbers differ (another version of the mechanisms, or an altered
  document).  The masses ``p``, ``q`` and ``hybrid_alpha`` exceed 2^53, so version 2 writes them as
  decimal strings: a JSON parser that reads every number as a double (JavaScript's ``JSON.parse``)
  keeps them exact.  Every other integer is below 2^53 and stays a number.
* ``id``: the first 16 hex digits of the SHA-256 of the document without ``id`` in its version-1
  form (``"format": "dpstream.topl.parameters/1"``, the masses as integers), serialized with sorted
  keys and no spaces.  It names the parameters, not their encoding: both versions of one document
  carry one id.  Reports name it, so the collector can refuse reports made with other parameters
  (an old theta, another epsilon).

Version 1 (``"format": "dpstream.topl.parameters/1"``) is the same document with the masses as JSON
integers; it is still read, and written on request (``version=1``).

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
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from dpstream._checks import plain_number

__all__ = [
    "MECHANISM_CODES",
    "PARAMETERS_FORMAT",
    "PARAMETERS_FORMATS",
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

#: The parameters document's format of each version; :data:`PARAMETERS_FORMAT` is the one written by default.
PARAMETERS_FORMATS = {1: "dpstream.topl.parameters/1", 2: "dpstream.topl.parameters/2"}
PARAMETERS_FORMAT = PARAMETERS_FORMATS[2]
REPORTS_FORMAT = "dpstream.topl.reports/1"

#: Mechanism codes of a report.
SW_REPORT, SR_REPORT, PM_REPORT = 0, 1, 2
MECHANISM_CODES = (SW_REPORT, SR_REPORT, PM_REPORT)

_PARAMETER_FIELDS = ("epsilon", "threshold_epsilon", "upper_bound", "threshold", "buckets", "stream_grid",
                     "mechanisms")
_REPORT_FIELDS = ("format", "parameters", "mechanism", "report")
#: The mechanisms' randomizers, each with its grid, window and masses.
_CORES = ("square_wave", "stochastic_rounding", "piecewise")
#: The masses a randomizer's entry holds that exceed 2^53 (version 2 writes them, and hybrid_alpha, as strings).
_WIDE = ("p", "q")


def _canonical(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)


def parameters_id(fields: dict[str, Any]) -> str:
    """The id of a parameters document: SHA-256 of its canonical version-1 JSON without ``id``, 16 hex digits.

    ``fields`` hold the masses as integers (as :func:`load_parameters` returns them, whatever the version read)."""
    body = {key: value for key, value in fields.items() if key != "id"}
    body["format"] = PARAMETERS_FORMATS[1]
    return hashlib.sha256(_canonical(body).encode()).hexdigest()[:16]


def _wide(mechanisms: dict[str, Any], convert: Callable[[Any, str], Any]) -> dict[str, Any]:
    """``mechanisms`` with ``convert(value, where)`` applied to every mass above 2^53 (other entries as they are)."""
    out = dict(mechanisms)
    for core in _CORES:
        if isinstance(out.get(core), dict):
            out[core] = {key: convert(value, f"{core}.{key}") if key in _WIDE else value
                         for key, value in out[core].items()}
    if "hybrid_alpha" in out:
        out["hybrid_alpha"] = convert(out["hybrid_alpha"], "hybrid_alpha")
    return out


def _decimal(value: object, where: str) -> int:
    """A mass of a version-2 document: a string of decimal digits (at most 19, no sign, no leading zero)."""
    if not (isinstance(value, str) and re.fullmatch(r"0|[1-9][0-9]{0,18}", value)):
        raise ValueError(f"ToPL parameters: mechanisms.{where} must be a string of decimal digits in version 2 "
                         f"(integers above 2^53 do not survive parsers that read doubles), got {value!r:.80}.")
    return int(value)


def dump_parameters(fields: dict[str, Any], version: int = 2) -> str:
    """The parameters document (one line of JSON) for ``fields`` (the keys of the module docstring, the masses as
    integers) in wire-format ``version`` (2, the default: the masses as strings; or 1)."""
    if version not in PARAMETERS_FORMATS:
        raise ValueError(f"version must be one of {sorted(PARAMETERS_FORMATS)}, got {version!r}.")
    document = {"format": PARAMETERS_FORMATS[version], **fields}
    document["id"] = parameters_id(document)
    if version == 2:
        document["mechanisms"] = _wide(document["mechanisms"], lambda value, _: str(value))
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


def _check_format(document: dict[str, Any], expected: str, what: str, older: tuple[str, ...] = ()) -> None:
    found = document.get("format")
    if found != expected and found not in older:
        shown = "no format field" if "format" not in document else f"format {found!r}"
        also = "".join(f" (or the older \"{name}\")" for name in older)
        raise ValueError(f"{what} must have \"format\": \"{expected}\"{also}, got {shown}.")


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
    """Parse and check a parameters document of either version; returns its fields (with ``format`` and ``id``),
    the masses as integers.

    Checks the format, the fields and their JSON types, and that ``id`` matches the content; the
    values themselves are checked by :meth:`ToPLRandomizer.from_json <dpstream.release.ToPLRandomizer.from_json>`.

    >>> load_parameters('{"format": "dpstream.topl.parameters/0"}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: ToPL parameters must have "format": "...parameters/2" (or the older "...parameters/1"), got ...
    """
    what = "ToPL parameters"
    document = _parse(text, what)
    _check_format(document, PARAMETERS_FORMAT, what, older=(PARAMETERS_FORMATS[1],))
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
    if document["format"] == PARAMETERS_FORMATS[2]:
        document["mechanisms"] = _wide(document["mechanisms"], _decimal)
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
