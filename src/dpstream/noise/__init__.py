"""Noise primitives: the only code that draws privacy noise."""

from dpstream.noise.geometric import double_geometric_noise, double_geometric_pmf, double_geometric_variance
from dpstream.noise.laplace import laplace_noise, laplace_variance, report_noisy_max

__all__ = [
    "double_geometric_noise",
    "double_geometric_pmf",
    "double_geometric_variance",
    "laplace_noise",
    "laplace_variance",
    "report_noisy_max",
]
