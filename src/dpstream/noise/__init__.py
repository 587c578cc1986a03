"""Noise primitives: the only code that draws privacy noise.

``bits`` (sources of uniform random words), ``exact`` (exact samplers on the integers),
``sampler`` (the noise objects mechanisms take as ``noise=``), ``geometric`` (the discrete
Laplace law and the exact rational scale of a mechanism), and today's float samplers ``laplace``
and ``float_geometric`` (studies only).
"""

from dpstream.noise.bits import BitSource, GeneratorBits, KeyedBits, SeededBits, SystemBits, make_bits
from dpstream.noise.exact import (
    bernoulli,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_laplace,
    discrete_laplace_pmf,
    uniform_below,
)
from dpstream.noise.float_geometric import double_geometric_noise
from dpstream.noise.geometric import discrete_laplace_scale, double_geometric_pmf, double_geometric_variance
from dpstream.noise.laplace import laplace_noise, laplace_variance, report_noisy_max
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler, ZeroNoise, make_noise

__all__ = [
    "BitSource",
    "ExactNoise",
    "FloatNoise",
    "GeneratorBits",
    "KeyedBits",
    "NoiseSampler",
    "SeededBits",
    "SystemBits",
    "ZeroNoise",
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_pmf",
    "discrete_laplace",
    "discrete_laplace_scale",
    "discrete_laplace_pmf",
    "double_geometric_noise",
    "double_geometric_pmf",
    "double_geometric_variance",
    "laplace_noise",
    "laplace_variance",
    "make_bits",
    "make_noise",
    "report_noisy_max",
    "uniform_below",
]
