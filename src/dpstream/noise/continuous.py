"""Deprecated path of exact rounded continuous Laplace (now ``rounded_laplace``).

Its names still resolve here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

from dpstream._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "rounded_laplace": "dpstream.noise.rounded_laplace:rounded_laplace",
    },
)
