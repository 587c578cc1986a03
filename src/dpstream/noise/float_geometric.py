"""Deprecated path of numpy's float double-geometric sampler (now ``float_noise``).

Its names still resolve here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

from dpstream._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "MAX_SCALE": "dpstream.noise.float_noise:MAX_SCALE",
        "double_geometric_noise": "dpstream.noise.float_noise:double_geometric_noise",
    },
)
