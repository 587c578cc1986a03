"""What every mechanism says about itself: ``repr`` and ``get_params`` from its constructor's keywords.

A mechanism class lists :class:`Params` among its bases and gets

* ``get_params()``: the constructor's public keyword arguments as given (defaults filled in), a
  dict from which ``type(m)(**m.get_params(), seed=...)`` builds the same mechanism again (as
  scikit-learn's and River's estimators do);
* ``repr(m)``: the class and the arguments that differ from their defaults,
  ``ToPS(epsilon=0.5, upper_bound=100)``.

The noise source is never a parameter: its arguments (:data:`SECRET`: ``seed``, ``key``,
``noise``, ...) are left out of ``get_params`` and shown by type only in ``repr``
(``key=<bytes>``), since anyone who knows a seed or a key can remove the noise.

For a class with its own ``__init__``, the arguments are recorded when the object is built (the
outermost constructor's, so a subclass calling ``super().__init__`` does not overwrite them); a
dataclass's are its init fields, read back from the object.

>>> class Demo(Params):
...     def __init__(self, *, epsilon: float, fanout: int = 16, seed: int | None = None) -> None:
...         self.epsilon = epsilon
>>> demo = Demo(epsilon=0.5, seed=7)
>>> demo
Demo(epsilon=0.5, seed=<int>)
>>> demo.get_params()
{'epsilon': 0.5, 'fanout': 16}
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SECRET", "Params"]

#: Constructor arguments that carry the noise's secret (or the data): never shown, never returned.
SECRET = frozenset({"seed", "key", "noise", "sampler", "rng", "bits"})

#: Where an object keeps the arguments its constructor was given.
_GIVEN = "_given_params"

#: The longest repr of one argument's value.
_VALUE_LIMIT = 60


class Params:
    """``repr`` and ``get_params`` from the constructor's keyword arguments (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_records_params", False):
            cls.__init__ = _recording(init)  # type: ignore[misc]

    def get_params(self) -> dict[str, Any]:
        """The constructor's public keyword arguments, as given, with the defaults of those not given.

        The noise source (:data:`SECRET`) is not among them.
        """
        return {name: value for name, (value, _default) in _arguments(self).items()}

    def __repr__(self) -> str:
        shown = [f"{name}={_short(value)}" for name, (value, default) in _arguments(self).items()
                 if not _same(value, default)]
        given = getattr(self, "__dict__", {}).get(_GIVEN, {})
        shown += [f"{name}=<{type(value).__name__}>" for name, value in given.items()
                  if name in SECRET and value is not None]
        return f"{type(self).__name__}({', '.join(shown)})"


def _recording(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, recording the arguments of the outermost call on the object first."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        state = getattr(self, "__dict__", None)
        if state is not None and _GIVEN not in state:  # keywords only (every mechanism's): no binding to pay for
            state[_GIVEN] = dict(kwargs) if not args else dict(list(signature.bind(self, *args, **kwargs)
                                                                    .arguments.items())[1:])
        init(self, *args, **kwargs)

    __init__._records_params = True  # type: ignore[attr-defined]
    return __init__


def _arguments(obj: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (value, default) of every public constructor argument of ``obj``, in signature order."""
    if dataclasses.is_dataclass(obj):
        return {field.name: (getattr(obj, field.name), _field_default(field)) for field in dataclasses.fields(obj)
                if field.init and field.name not in SECRET}
    given = getattr(obj, "__dict__", {}).get(_GIVEN, {})
    parameters = list(inspect.signature(inspect.unwrap(type(obj).__init__)).parameters.values())[1:]
    found = {}
    for parameter in parameters:
        if parameter.name in SECRET or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = None if parameter.default is parameter.empty else parameter.default
        found[parameter.name] = (given.get(parameter.name, default), default)
    return found


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty  # required: always shown


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is its default (then ``repr`` leaves it out)."""
    if value is default:
        return True
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray) or type(value) is not type(default):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


def _short(value: Any) -> str:
    """The repr of an argument, an array by its shape and a long text cut in the middle.

    >>> _short(np.zeros((3, 2)))
    '<array (3, 2) float64>'
    >>> _short("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx'"
    """
    if isinstance(value, np.ndarray):
        return f"<array {value.shape} {value.dtype}>"
    text = repr(value)
    if len(text) <= _VALUE_LIMIT:
        return text
    head = (_VALUE_LIMIT - 3) // 2
    return text[:head] + "..." + text[len(text) - (_VALUE_LIMIT - 3 - head):]
