"""Deprecated path of the exact samplers (now ``exact_primitives`` and the ``*_law`` modules).

Its names still resolve here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

from dpstream._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "MAX_LAPLACE_NUMERATOR": "dpstream.noise.discrete_laplace_law:MAX_LAPLACE_NUMERATOR",
        "bernoulli": "dpstream.noise.exact_primitives:bernoulli",
        "bernoulli_exp": "dpstream.noise.exact_primitives:bernoulli_exp",
        "discrete_gaussian": "dpstream.noise.discrete_gaussian_law:discrete_gaussian",
        "discrete_gaussian_pmf": "dpstream.noise.discrete_gaussian_law:discrete_gaussian_pmf",
        "discrete_laplace": "dpstream.noise.discrete_laplace_law:discrete_laplace",
        "discrete_laplace_pmf": "dpstream.noise.discrete_laplace_law:discrete_laplace_pmf",
        "uniform_below": "dpstream.noise.exact_primitives:uniform_below",
    },
)
