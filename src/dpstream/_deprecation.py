"""Old names kept working for one release: moved module names and renamed keywords, with a warning.

A module whose public names moved (or a module that moved as a whole) sets

    __getattr__ = moved_names(__name__, {"old_name": "dpstream.new.module:new_name", ...})

and ``old_name`` keeps resolving, to the object at its new home, with a DeprecationWarning that
names that home.  The target module is imported only when an old name is used, so an old path
adds no import edge (and no import circle) to the package.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

__all__ = ["moved_names", "renamed_keyword"]


def moved_names(module: str, moves: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` resolving each old name of ``moves`` (``"package.module:name"``).

    >>> getattr_ = moved_names("old.place", {"pi": "math:pi"})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = getattr_("pi")
    >>> round(value, 4), str(caught[0].message)
    (3.1416, 'old.place.pi is deprecated: use math.pi (the old name goes in the next release).')
    """

    def __getattr__(name: str) -> object:
        target = moves.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        path, _, new_name = target.partition(":")
        warnings.warn(
            f"{module}.{name} is deprecated: use {path}.{new_name} (the old name goes in the next release).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(path), new_name)

    return __getattr__


def renamed_keyword(owner: str, old: str, new: str, old_value: object, new_value: object) -> object:
    """The value of a renamed keyword: ``new_value``, or ``old_value`` (with a warning) when given.

    ``old_value`` is None when the caller did not pass the old keyword.

    >>> renamed_keyword("f", "methods", "method", None, "hc")
    'hc'
    """
    if old_value is None:
        return new_value
    warnings.warn(f"{owner}({old}=) is deprecated: use {new}=.", DeprecationWarning, stacklevel=3)
    return old_value
