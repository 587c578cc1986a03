"""Parameter and input validation: the one place where dpstream checks what users pass.

Every check raises ``TypeError`` for a value of the wrong type and ``ValueError`` for a value
of the right type that breaks a rule.  Messages name the parameter, the rule, and end with
what was received, e.g. ``epsilon must be a finite number > 0, got -1.0.``
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "MIN_EPSILON",
    "check_epsilon",
    "check_positive_int",
    "check_nonnegative_int",
    "check_bound",
    "check_probability",
    "check_choice",
    "check_stream_values",
]


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


#: The smallest budget accepted: below it the noise scale exceeds 1e12 times the sensitivity
#: and float64 sums of released values lose every digit of the data.
MIN_EPSILON = 1e-12


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """A privacy budget: a finite real number >= :data:`MIN_EPSILON`.

    >>> check_epsilon(1e-13)
    Traceback (most recent call last):
    ValueError: epsilon must be at least 1e-12 (smaller budgets drown the data in float64 noise), got 1e-13.
    """
    value = check_bound(value, name)
    if value < MIN_EPSILON:
        raise ValueError(
            f"{name} must be at least {MIN_EPSILON:g} (smaller budgets drown the data in float64 noise), got {value!r}."
        )
    return value


def check_bound(value: object, name: str = "upper_bound") -> float:
    """A positive quantity (a bound, a threshold, a budget): a finite real number > 0."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return value


def check_positive_int(value: object, name: str, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (default 1)."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {value!r}.")
    value = int(value)  # type: ignore[call-overload]
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return value


def check_nonnegative_int(value: object, name: str) -> int:
    """An integer >= 0."""
    return check_positive_int(value, name, minimum=0)


def check_probability(value: object, name: str, *, open_low: bool = False) -> float:
    """A real number in [0, 1] (or (0, 1] with ``open_low``)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)  # type: ignore[arg-type]
    low_ok = value > 0 if open_low else value >= 0
    if not (low_ok and value <= 1):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise ValueError(f"{name} must be in {interval}, got {value!r}.")
    return value


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of names."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}.")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")
    return value


def _preview(values: object) -> str:
    text = repr(values)
    return text if len(text) <= 80 else text[:77] + "..."


def check_stream_values(
    values: object, upper_bound: float, *, clip: bool | None = False, offset: int = 0
) -> np.ndarray:
    """Return ``values`` as a 1-D float64 array of finite numbers in [0, upper_bound].

    Parameters
    ----------
    values : array-like
        The values, in stream order.
    upper_bound : float
        B, the public bound of the domain [0, B].
    clip : bool or None
        Clip values outside [0, B] into it instead of raising.  NaN and infinities are
        always errors: clipping them would invent a value.  None: clipping is not offered
        (the error then does not suggest it).
    offset : int
        Stream position of ``values[0]``, so that errors name the position in the whole stream.

    Raises
    ------
    TypeError
        If ``values`` is not numeric.
    ValueError
        Naming the first offending position and its value.
    """
    try:
        array = np.asarray(values)
        if array.dtype.kind not in "iuf":  # no strings, booleans, objects or complex numbers
            raise TypeError
        array = array.astype(np.float64, copy=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"stream values must be numbers, got {_preview(values)}.") from error
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1:
        raise ValueError(f"stream values must be one-dimensional, got an array of shape {array.shape}.")
    bad = ~np.isfinite(array)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(
            f"stream value at position {offset + index} must be a finite number, got {float(array[index])!r}."
        )
    outside = (array < 0) | (array > upper_bound)
    if outside.any():
        if clip:
            return np.clip(array, 0.0, upper_bound)
        index = int(np.argmax(outside))
        hint = "" if clip is None else " (clip=True, or --clip, clips it)"
        raise ValueError(
            f"stream value at position {offset + index} must be in [0, {upper_bound:g}]{hint}, "
            f"got {float(array[index])!r}."
        )
    return array
