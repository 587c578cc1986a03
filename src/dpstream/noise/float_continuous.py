"""Deprecated path of numpy's float Laplace and Gaussian (now ``float_noise``).

Its names still resolve here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

from dpstream._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "float_gaussian": "dpstream.noise.float_noise:float_gaussian",
        "float_laplace": "dpstream.noise.float_noise:float_laplace",
        "laplace_noise": "dpstream.noise.float_noise:laplace_noise",
    },
)
