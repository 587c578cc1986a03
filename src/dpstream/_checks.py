"""Parameter and input validation: the one place where dpstream checks what users pass.

Every check raises ``TypeError`` for a value of the wrong type and ``ValueError`` for a value
of the right type that breaks a rule.  Messages name the parameter, the rule, and end with
what was received, e.g. ``epsilon must be a finite number > 0, got -1.0.``
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

__all__ = [
    "MAX_ARRAY_VALUES",
    "MAX_GRID_UNITS",
    "MAX_LENGTH",
    "MAX_LOCAL_EPSILON",
    "MAX_MAGNITUDE",
    "MIN_GRID_BOUND",
    "MIN_EPSILON",
    "ROW_SUM_TOLERANCE",
    "check_bool",
    "check_epsilon",
    "check_local_epsilon",
    "check_magnitude",
    "check_positive_int",
    "check_nonnegative_int",
    "check_bound",
    "check_client_values",
    "check_nonnegative",
    "check_percentile",
    "check_probability",
    "check_choice",
    "check_distribution",
    "check_grid",
    "check_length",
    "check_memory",
    "check_stream_values",
    "check_transition",
    "check_unit_values",
    "plain_number",
]


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_float(value: object, name: str) -> float:
    """``float(value)`` of a real number; an integer beyond float64 is a ValueError naming its size."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got an integer of {len(str(abs(value)))} digits "
                         "(beyond float64).") from None


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


#: Largest budget of a local randomizer.  Square Wave's window has half-width about
#: eps e^-eps, below the float64 resolution of [0, 1] past eps ~ 35 (and e^eps overflows past
#: 709); a report with such a budget is not meaningfully private anyway.
MAX_LOCAL_EPSILON = 30.0


def check_local_epsilon(value: object, name: str = "epsilon") -> float:
    """The budget of a local randomizer: :func:`check_epsilon`, and at most :data:`MAX_LOCAL_EPSILON`.

    >>> check_local_epsilon(31)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: epsilon of a local randomizer must be at most 30 (larger budgets ...), got 31.0.
    """
    epsilon = check_epsilon(value, name)
    if epsilon > MAX_LOCAL_EPSILON:
        raise ValueError(f"{name} of a local randomizer must be at most {MAX_LOCAL_EPSILON:g} (larger budgets break "
                         f"the randomizers' float64 arithmetic and protect nothing), got {epsilon!r}.")
    return epsilon


#: The largest noise scale, or worst-case sum of values, a mechanism accepts.  float64 ends at
#: 1.8e308; a release adds up dozens of noise draws (a Laplace draw stays below ~40 noise scales)
#: and up to ``max_range`` values, and a margin of 1e8 keeps every such sum finite.
MAX_MAGNITUDE = 1e300


def check_magnitude(value: float, name: str, hint: str = "lower upper_bound or raise epsilon") -> float:
    """A noise scale or a worst-case sum a mechanism will compute: finite and at most :data:`MAX_MAGNITUDE`.

    Refusing it up front is what keeps a release from publishing ``inf`` or ``nan`` when its
    parameters (a huge ``upper_bound``, a tiny ``epsilon``) overflow float64.

    >>> check_magnitude(1e12, "the noise scale upper_bound * levels / epsilon")
    1000000000000.0
    >>> check_magnitude(1e313, "the noise scale upper_bound * levels / epsilon")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: the noise scale upper_bound * levels / epsilon must be at most 1e+300 (float64 ..., got inf; ...
    """
    value = _as_float(value, name)
    if not (math.isfinite(value) and abs(value) <= MAX_MAGNITUDE):
        raise ValueError(
            f"{name} must be at most {MAX_MAGNITUDE:g} (float64 sums of noisy values overflow beyond), "
            f"got {value:g}; {hint}."
        )
    return value


#: The most values one array of a mechanism may hold (its hold-out, the noise of a tree, a period's
#: profile): 2^31, 16 GiB of float64.  Beyond, numpy fails with MemoryError on the batch that needs it.
MAX_ARRAY_VALUES = 1 << 31


def check_memory(count: int, name: str) -> int:
    """``count`` values a mechanism will keep in one array: at most :data:`MAX_ARRAY_VALUES`.

    Refusing it up front is what keeps a mechanism from failing with MemoryError (or making the machine
    swap) on the batch that ends its hold-out rather than when it is made.

    >>> check_memory(2**40, "period")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: period needs 1,099,511,627,776 values in memory, more than the 2,147,483,648 (16 GiB) a ...
    """
    if count > MAX_ARRAY_VALUES:
        raise ValueError(f"{name} needs {count:,} values in memory, more than the {MAX_ARRAY_VALUES:,} (16 GiB) a "
                         "mechanism keeps in one array.")
    return count


#: The longest length (a window, a query) a mechanism computes with: 2^53, so that positions and
#: lengths stay exact in float64 and their sums in int64.
MAX_LENGTH = 1 << 53


def check_length(value: object, name: str) -> int:
    """A length (a query, a smoother's window): an integer in [1, :data:`MAX_LENGTH`].

    >>> check_length(2**63, "query_length")
    Traceback (most recent call last):
    ValueError: query_length must be an integer in [1, 2^53], got 9223372036854775808.
    """
    value = check_positive_int(value, name)
    if value > MAX_LENGTH:
        raise ValueError(f"{name} must be an integer in [1, 2^53], got {value}.")
    return value


#: The most grid units a bound may span (``B / g``): sums of grid units stay exact in float64.
MAX_GRID_UNITS = 1 << 52

#: The smallest bound a mechanism measures on a grid: the default grid ``B / 2^20`` must be a normal float.
MIN_GRID_BOUND = 2.0**-1000


def check_grid(upper_bound: float, granularity: object = None) -> float | None:
    """The grid of an exact mechanism for values in [0, ``upper_bound``]: a ``granularity`` > 0 that
    splits the bound into at most :data:`MAX_GRID_UNITS` steps, or (None) the default grid, which
    needs a bound of at least :data:`MIN_GRID_BOUND`; returns the granularity as a float (None stays None).

    >>> check_grid(100.0, 1e-300)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: upper_bound / granularity must be at most 2^52 grid units, got 1e+302; raise granularity.
    """
    if granularity is None:
        if upper_bound < MIN_GRID_BOUND:
            raise ValueError("upper_bound must be at least 2^-1000 (the default grid of the exact noise underflows "
                             f"below), got {upper_bound!r}.")
        return None
    granularity = check_bound(granularity, "granularity")
    units = upper_bound / granularity
    if not units <= MAX_GRID_UNITS:
        raise ValueError(f"upper_bound / granularity must be at most 2^52 grid units, got {units:g}; "
                         "raise granularity.")
    return granularity


def check_bool(value: object, name: str) -> bool:
    """A flag: exactly True or False (not 0, 1 or a string).

    >>> check_bool(1, "clip")
    Traceback (most recent call last):
    TypeError: clip must be True or False, got 1.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
    return value


def check_bound(value: object, name: str = "upper_bound") -> float:
    """A positive quantity (a bound, a threshold, a budget): a finite real number > 0."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = _as_float(value, name)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return value


def check_nonnegative(value: object, name: str) -> float:
    """A finite real number >= 0."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = _as_float(value, name)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
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
    value = _as_float(value, name)
    low_ok = value > 0 if open_low else value >= 0
    if not (low_ok and value <= 1):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise ValueError(f"{name} must be in {interval}, got {value!r}.")
    return value


def check_percentile(value: object, name: str = "percentile") -> float:
    """A percentile: a real number in [0, 100].

    >>> check_percentile(120)
    Traceback (most recent call last):
    ValueError: percentile must be in [0, 100], got 120.
    """
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    if not 0 <= value <= 100:  # type: ignore[operator]
        raise ValueError(f"{name} must be in [0, 100], got {value!r}.")
    return float(value)  # type: ignore[arg-type]


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
    if array.size and array.min() >= 0 and array.max() <= upper_bound:  # NaN fails both: no temporaries
        return array
    bad = ~np.isfinite(array)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(
            f"stream value at position {offset + index} (0-based) must be a finite number, "
            f"got {plain_number(array[index])}."
        )
    outside = (array < 0) | (array > upper_bound)
    if outside.any():
        if clip:
            return np.clip(array, 0.0, upper_bound)
        index = int(np.argmax(outside))
        hint = "" if clip is None else " (clip=True, or --clip, clips it)"
        raise ValueError(
            f"stream value at position {offset + index} (0-based) must be in [0, {upper_bound:g}]{hint}, "
            f"got {plain_number(array[index])}."
        )
    return array


def plain_number(x: object) -> str:
    """A number as people write it in a message: ``900``, ``0.1``, ``-3``, ``nan`` (no numpy repr, no ``.0``).

    >>> plain_number(np.float64(900.0)), plain_number(0.1), plain_number(np.int64(-3)), plain_number(float("inf"))
    ('900', '0.1', '-3', 'inf')
    """
    if _is_int(x) or isinstance(x, np.integer):
        return str(int(x))  # type: ignore[call-overload]
    try:
        text = repr(float(x))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return repr(x)
    return text[:-2] if text.endswith(".0") else text


def _number_vector(values: object, name: str, preview: Callable[[object], str]) -> np.ndarray:
    """``values`` as a 1-D float64 array (a scalar becomes one value); ``preview(values)`` shows bad input."""
    try:
        array = np.asarray(values)
        if array.dtype.kind not in "iuf":  # no strings, booleans, objects or complex numbers
            raise TypeError
        array = np.atleast_1d(array.astype(np.float64, copy=False))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be numbers, got {preview(values)}.") from error
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got an array of shape {array.shape}.")
    return array


def check_client_values(values: object, upper_bound: float, *, clip: bool = False) -> np.ndarray:
    """A client's values as a 1-D float64 array in [0, upper_bound]; an error names the first bad one plainly.

    ``clip`` clips values outside [0, B] into it; NaN and infinities are always errors.

    >>> check_client_values([1, 2, 3, 900], 100.0)
    Traceback (most recent call last):
    ValueError: value at position 3 (0-based) is 900, outside [0, 100] (clip=True clips it).
    >>> check_client_values([1, 900], 100.0, clip=True).tolist()
    [1.0, 100.0]
    """
    array = _number_vector(values, "values", _preview)
    bad = ~np.isfinite(array)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(f"value at position {index} (0-based) is {plain_number(array[index])}, not a finite number.")
    outside = (array < 0) | (array > upper_bound)
    if outside.any():
        if clip:
            return np.clip(array, 0.0, upper_bound)
        index = int(np.argmax(outside))
        raise ValueError(f"value at position {index} (0-based) is {plain_number(array[index])}, outside "
                         f"[0, {plain_number(upper_bound)}] (clip=True clips it).")
    return array


def check_unit_values(values: object, low: float = -1.0, high: float = 1.0, name: str = "values") -> np.ndarray:
    """``values`` as a 1-D float64 array inside [low, high]; an error names the first bad one.

    >>> check_unit_values([0.5, 1.5])
    Traceback (most recent call last):
    ValueError: values[1] must be in [-1, 1], got 1.5.
    """
    array = _number_vector(values, name, lambda bad: f"{bad!r:.80}")
    bad = ~((array >= low) & (array <= high))  # NaN fails too
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(f"{name}[{index}] must be in [{low:g}, {high:g}], got {float(array[index])!r}.")
    return array


#: How far a row sum may be from 1 before a matrix or a distribution is refused (CSV files carry
#: rounded numbers).
ROW_SUM_TOLERANCE = 1e-6


def check_transition(matrix: object, name: str = "transition") -> np.ndarray:
    """A square row-stochastic matrix as float64 (rows renormalised to sum to exactly 1).

    >>> check_transition([[0.5, 0.5], [0.0, 1.0]]).tolist()
    [[0.5, 0.5], [0.0, 1.0]]
    >>> check_transition([[0.5, 0.4], [0.0, 1.0]])
    Traceback (most recent call last):
    ...
    ValueError: transition row 1 sums to 0.9, not 1.
    """
    try:
        array = np.array(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a matrix of numbers, got {matrix!r}.") from None
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square matrix, got shape {array.shape}.")
    bad = np.argwhere(~np.isfinite(array) | (array < 0))
    if bad.size:
        row, col = bad[0]
        raise ValueError(
            f"{name} entries must be finite and >= 0; row {row + 1}, column {col + 1} is {float(array[row, col])!r}."
        )
    sums = array.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > ROW_SUM_TOLERANCE)
    if off.size:
        raise ValueError(f"{name} row {off[0] + 1} sums to {sums[off[0]]:.10g}, not 1.")
    return array / sums[:, None]


def check_distribution(values: object, size: int, name: str = "initial") -> np.ndarray:
    """A probability vector of length ``size`` (float64, renormalised)."""
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (size,):
        raise ValueError(f"{name} must have {size} entries, got shape {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array < 0) or abs(array.sum() - 1.0) > ROW_SUM_TOLERANCE:
        raise ValueError(f"{name} must be >= 0 and sum to 1, got {array.tolist()!r}.")
    return array / array.sum()
