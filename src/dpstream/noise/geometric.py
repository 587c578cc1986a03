"""Deprecated path of the discrete Laplace law and its scale (now ``discrete_laplace_law``).

Its names still resolve here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

from dpstream._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "SCALE_BITS": "dpstream.noise.discrete_laplace_law:SCALE_BITS",
        "discrete_laplace_scale": "dpstream.noise.discrete_laplace_law:discrete_laplace_scale",
        "double_geometric_pmf": "dpstream.noise.discrete_laplace_law:double_geometric_pmf",
        "double_geometric_variance": "dpstream.noise.discrete_laplace_law:double_geometric_variance",
    },
)
