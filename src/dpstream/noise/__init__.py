"""Noise primitives: the only code that draws privacy noise.

``bits`` (sources of uniform random words), ``exact`` (exact samplers on the integers),
``sampler`` (the noise objects mechanisms take as ``noise=``), ``source`` (a mechanism's
``seed`` / ``noise`` / ``key`` in one object, keyed parts), ``grid`` (the public grid and
rational scales), ``continuous`` (a continuous Laplace variable observed on a grid, exactly),
``geometric`` (the discrete Laplace law and the exact rational scale of a mechanism),
``laplace`` (report-noisy-max on exact noise), and the float samplers of the studies:
``float_continuous`` (numpy's float Laplace and Gaussian) and ``float_geometric``.
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
from dpstream.noise.source import NoiseSource, PooledNoise, describe_noise

__all__ = [
    "BitSource",
    "ExactNoise",
    "FloatNoise",
    "GeneratorBits",
    "KeyedBits",
    "NoiseSampler",
    "NoiseSource",
    "PooledNoise",
    "SeededBits",
    "SystemBits",
    "ZeroNoise",
    "bernoulli",
    "bernoulli_exp",
    "describe_noise",
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
