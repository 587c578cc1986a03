"""Python values as plain JSON and back, bit for bit: the value encoding of the state file.

JSON's own types carry what they carry exactly: ``null``, ``true``/``false``, strings, lists,
objects with string keys, integers up to 2^53 in magnitude and finite floats (Python writes the
shortest text that reads back to the same double, ``-0.0`` included).  Everything else is a
*tagged object*, an object with exactly one key that starts with ``$``:

=====================  ==============================================================================
``{"$int": "..."}``     an integer beyond +-2^53, as its decimal digits (exact at any size)
``{"$float": "inf"}``   a non-finite float: ``"inf"``, ``"-inf"`` or ``"nan"``
``{"$bytes": "..."}``   bytes, base64
``{"$tuple": [...]}``   a tuple (a JSON list reads back as a list)
``{"$dict": [[k, v]]}`` a dict whose keys are not all plain strings (or start with ``$``)
``{"$ndarray": {...}}`` a numpy array: ``dtype`` (little-endian, e.g. ``"<f8"``), ``shape`` and
                        ``data``, the base64 of its C-order bytes; bit-exact, inf and NaN included
``{"$scalar": {...}}``  a numpy scalar (``np.int64(3)``), as a 0-d ``$ndarray`` without ``shape``
=====================  ==============================================================================

Only booleans, integers, unsigned integers, floats and complex numbers are stored as arrays;
object and string arrays are refused (they would need pickle).  Any other type is refused too,
with the path of the offending value, e.g. ``mechanism['perturber']: cannot store a value of
type Generator``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any

import numpy as np

__all__ = ["decode", "encode"]

#: Integers up to this magnitude are JSON numbers; every JSON reader holds them exactly (IEEE doubles).
SAFE_INTEGER = 2**53
_ARRAY_KINDS = "biufc"
_DIGITS = re.compile(r"-?[0-9]+")
_FLOAT_NAMES = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _array_fields(array: np.ndarray, path: str) -> dict[str, Any]:
    if array.dtype.kind not in _ARRAY_KINDS or array.dtype.fields is not None or array.dtype.subdtype is not None:
        raise TypeError(f"{path}: cannot store a numpy array of dtype {array.dtype} (only booleans and numbers).")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {"dtype": little.dtype.str, "data": base64.b64encode(little.tobytes()).decode("ascii")}


def encode(value: Any, path: str = "value") -> Any:
    """``value`` as plain JSON data (see the module docstring); :func:`decode` inverts it exactly.

    Parameters
    ----------
    value : object
        None, bool, int, float, str, bytes, list, tuple, dict, numpy array or numpy scalar,
        nested freely.
    path : str
        How errors name ``value``, e.g. ``"mechanism"``.

    Raises
    ------
    TypeError
        For a value (at any depth) of another type, naming its path.

    Examples
    --------
    >>> encode({"n": 2**64, "x": -0.0, "top": float("inf"), "key": b"\\x00\\xff"})
    {'n': {'$int': '18446744073709551616'}, 'x': -0.0, 'top': {'$float': 'inf'}, 'key': {'$bytes': 'AP8='}}
    >>> encode(np.array([1.5, -2.0]))
    {'$ndarray': {'dtype': '<f8', 'data': 'AAAAAAAA+D8AAAAAAAAAwA==', 'shape': [2]}}
    >>> encode({"rng": object()})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: value['rng']: cannot store a value of type object ...
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value) if abs(value) <= SAFE_INTEGER else {"$int": str(int(value))}
    if isinstance(value, float) and not isinstance(value, np.floating):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray):
        return {"$ndarray": {**_array_fields(value, path), "shape": list(value.shape)}}
    if isinstance(value, np.generic):
        return {"$scalar": _array_fields(np.asarray(value), path)}
    if isinstance(value, list):
        return [encode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [encode(item, f"{path}[{index}]") for index, item in enumerate(value)]}
    if isinstance(value, dict):
        if all(isinstance(key, str) and not key.startswith("$") for key in value):
            return {key: encode(item, f"{path}[{key!r}]") for key, item in value.items()}
        return {"$dict": [[encode(key, f"{path} key {key!r}"), encode(item, f"{path}[{key!r}]")]
                          for key, item in value.items()]}
    raise TypeError(f"{path}: cannot store a value of type {type(value).__name__} (JSON data, bytes, "
                    "tuples and numpy arrays of numbers only).")


def _decode_array(fields: Any, path: str, *, scalar: bool) -> Any:
    if not isinstance(fields, dict) or set(fields) != ({"dtype", "data"} if scalar else {"dtype", "data", "shape"}):
        raise ValueError(f"{path}: a malformed array record.")
    try:
        dtype = np.dtype(fields["dtype"])
        data = base64.b64decode(fields["data"], validate=True)
    except (TypeError, ValueError, binascii.Error):
        raise ValueError(f"{path}: a malformed array record (dtype {fields['dtype']!r}).") from None
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"{path}: an array of dtype {dtype} cannot be stored.")
    shape = [] if scalar else fields["shape"]
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise ValueError(f"{path}: a malformed array shape {shape!r}.")
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{path}: {len(data)} bytes do not hold an array of shape {tuple(shape)} and dtype {dtype}.")
    array = np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)
    return array[()] if scalar else array


def decode(data: Any, path: str = "value") -> Any:
    """The value that :func:`encode` turned into ``data``.

    Raises
    ------
    ValueError
        For a malformed tagged object, naming its path.

    Examples
    --------
    >>> import json
    >>> value = {"n": -(2**70), "t": (1, "a"), 3: np.arange(3, dtype=np.int64), "x": float("-inf")}
    >>> back = decode(json.loads(json.dumps(encode(value))))
    >>> back["n"] == value["n"], back["t"], back[3].dtype.name, back[3].tolist(), back["x"]
    (True, (1, 'a'), 'int64', [0, 1, 2], -inf)
    """
    if isinstance(data, list):
        return [decode(item, f"{path}[{index}]") for index, item in enumerate(data)]
    if not isinstance(data, dict):
        return data
    tags = [key for key in data if key.startswith("$")]
    if not tags:
        return {key: decode(item, f"{path}[{key!r}]") for key, item in data.items()}
    if len(data) != 1:
        raise ValueError(f"{path}: a tagged value must have exactly one key, got {sorted(data)!r}.")
    tag, inner = tags[0], data[tags[0]]
    try:
        if tag == "$int" and isinstance(inner, str) and _DIGITS.fullmatch(inner):
            return int(inner)
        if tag == "$float" and inner in _FLOAT_NAMES:
            return _FLOAT_NAMES[inner]
        if tag == "$bytes" and isinstance(inner, str):
            return base64.b64decode(inner, validate=True)
        if tag == "$tuple" and isinstance(inner, list):
            return tuple(decode(item, f"{path}[{index}]") for index, item in enumerate(inner))
        if tag == "$dict" and isinstance(inner, list) and all(isinstance(p, list) and len(p) == 2 for p in inner):
            return {decode(key, f"{path} key"): decode(item, f"{path}[{key!r}]") for key, item in inner}
        if tag in ("$ndarray", "$scalar"):
            return _decode_array(inner, path, scalar=tag == "$scalar")
    except (ValueError, TypeError, binascii.Error) as error:
        if str(error).startswith(path):
            raise
        raise ValueError(f"{path}: a malformed {tag} value.") from None
    raise ValueError(f"{path}: unknown or malformed tagged value {tag!r}.")
