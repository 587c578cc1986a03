"""Noise primitives: the only code that draws privacy noise."""

from dpstream.noise.laplace import laplace_noise, laplace_variance, report_noisy_max

__all__ = ["laplace_noise", "laplace_variance", "report_noisy_max"]
