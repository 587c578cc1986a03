"""Noise primitives: the only code that draws privacy noise.

Each module is named after what it holds; every module is exact except those whose name starts
with ``float_``:

``bits`` (sources of uniform random words), ``exact_primitives`` (uniform integers and Bernoulli
coins drawn exactly), ``discrete_laplace_law`` (the discrete Laplace law: its exact sampler, pmf,
variance and rounded-up rational scale), ``discrete_gaussian_law`` (its exact sampler and pmf),
``rounded_laplace`` (a continuous Laplace variable observed on a grid, exactly), ``grid`` (the
public grid and rational scales of the stream mechanisms), ``sampler`` (the noise objects
mechanisms take as ``noise=``), ``source`` (a mechanism's ``seed`` / ``noise`` / ``key`` in one
object, keyed parts), ``laplace`` (the Laplace variance and report-noisy-max on exact noise), and
``float_noise`` (numpy's float Laplace, Gaussian and double-geometric samplers and ``FloatNoise``:
studies only).  The old paths ``exact``, ``geometric``, ``continuous``, ``float_continuous`` and
``float_geometric`` still resolve their names, deprecated.
"""

from dpstream._deprecation import moved_names
from dpstream.noise.bits import BitSource, GeneratorBits, KeyedBits, SeededBits, SystemBits, make_bits
from dpstream.noise.discrete_gaussian_law import discrete_gaussian, discrete_gaussian_pmf
from dpstream.noise.discrete_laplace_law import (
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_scale,
    double_geometric_pmf,
    double_geometric_variance,
)
from dpstream.noise.exact_primitives import bernoulli, bernoulli_exp, uniform_below
from dpstream.noise.float_noise import double_geometric_noise
from dpstream.noise.laplace import laplace_noise, laplace_variance, report_noisy_max_counts
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
    "report_noisy_max_counts",
    "uniform_below",
]

#: ``report_noisy_max`` was renamed ``report_noisy_max_counts`` (integer counts, not scores).
__getattr__ = moved_names(__name__, {"report_noisy_max": "dpstream.noise.laplace:report_noisy_max_counts"})
