"""Square Wave (Appendix E.1, Eq. 16) and the collector's density estimation by EM / EMS.

Client side: a value ``v`` in [0, 1] is reported as ``y`` in [-b, 1 + b] with density ``p`` when
``|y - v| <= b`` and ``q`` otherwise, where

    b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)),
    p = e^eps / (2 b e^eps + 1),   q = 1 / (2 b e^eps + 1).

Collector side: the input domain [0, 1] is cut into ``d`` equal buckets (default 1024) and the
output domain into buckets of the same width starting at ``-b``.  With the input spread uniformly
within its bucket, ``Pr[y in output bucket j | input bucket i]`` is ``q`` times the part of bucket
j inside [-b, 1 + b] plus ``(p - q)`` times the mean overlap of bucket j with the window
``[v - b, v + b]``.  The overlap term depends on ``j - i`` only (the grids share their width), so
the transition matrix is a constant plus a Toeplitz band and each EM step is two short
convolutions, not two dense products.  EM maximizes the likelihood of the reports' histogram;
EMS (Li et al.) smooths the estimate with the binomial kernel (1, 2, 1) / 4 after every step.

Privacy
-------
``SquareWave.perturb`` is epsilon-LDP (Definition 2.2): the output density is ``p`` or ``q`` and
``p / q = e^eps``.  Density estimation only reads reports (post-processing, no budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpstream._checks import check_local_epsilon, check_positive_int, check_unit_values
from dpstream.privacy import LOCAL_REPORT, PrivacyGuarantee

__all__ = ["DensityEstimate", "SquareWave", "estimate_density"]


@dataclass(frozen=True, kw_only=True)
class SquareWave:
    """The Square Wave randomizer on [0, 1].

    >>> sw = SquareWave(epsilon=1.0)
    >>> round(sw.b, 4), round(sw.p / sw.q, 4) == round(math.e, 4)
    (0.2561, True)
    >>> y = sw.perturb(np.array([0.0, 0.5, 1.0]), np.random.default_rng(0))
    >>> bool(np.all((y >= -sw.b) & (y <= 1 + sw.b)))
    True
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))

    draws = 2

    @property
    def b(self) -> float:
        """Half-width of the high-probability window."""
        # (x e^x - e^x + 1) / (2 e^x (e^x - 1 - x)), written so that small x does not cancel:
        # with g = e^x - 1 - x the numerator is x (e^x - 1) - g.
        x = self.epsilon
        g = x * x / 2.0 * (1.0 + x / 3.0 * (1.0 + x / 4.0 * (1.0 + x / 5.0))) if x < 1e-2 else math.expm1(x) - x
        return (x * math.expm1(x) - g) / (2.0 * math.exp(x) * g)

    @property
    def p(self) -> float:
        """Density within b of the input."""
        e = math.exp(self.epsilon)
        return e / (2.0 * self.b * e + 1.0)

    @property
    def q(self) -> float:
        """Density elsewhere in [-b, 1 + b]."""
        return 1.0 / (2.0 * self.b * math.exp(self.epsilon) + 1.0)

    def density(self, reports: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Density of report y given v (broadcasting); 0 outside [-b, 1 + b]."""
        reports = np.asarray(reports, dtype=np.float64)
        near = np.abs(reports - np.asarray(values, dtype=np.float64)) <= self.b
        density = np.where(near, self.p, self.q)
        return np.where((reports >= -self.b) & (reports <= 1.0 + self.b), density, 0.0)

    def perturb_uniforms(self, values: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Reports from two uniforms per value: near or far (Pr near = 2 b p), then where."""
        b = self.b
        near = values - b + uniforms[:, 1] * (2.0 * b)
        # Far: uniform over [-b, v - b) and (v + b, 1 + b], of total length 1.
        t = uniforms[:, 1]
        far = np.where(t < values, t - b, t + b)
        return np.where(uniforms[:, 0] < 2.0 * b * self.p, near, far)

    def perturb(self, values: object, rng: np.random.Generator) -> np.ndarray:
        """Client side: a report in [-b, 1 + b] for each value in [0, 1]."""
        values = check_unit_values(values, 0.0, 1.0)
        return self.perturb_uniforms(values, rng.random((values.size, self.draws)))

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report."""
        return PrivacyGuarantee(epsilon=self.epsilon, delta=0.0, neighbours=LOCAL_REPORT,
                                composition="SW: one randomized report per value, no composition", local=True)


def _ramp_integral(x: np.ndarray, width: float) -> np.ndarray:
    """G(x) = integral from -inf to x of clip(t, 0, width) dt."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x <= 0.0, 0.0, np.where(x <= width, 0.5 * x * x, width * (x - 0.5 * width)))


@dataclass(frozen=True)
class _Channel:
    """``Pr[output bucket j | input bucket i] = q * out_width[j] + (p - q) * band[j - i]``."""

    q: float
    gap: float  # p - q
    out_width: np.ndarray  # length d + len(band) - 1
    band: np.ndarray

    def forward(self, f: np.ndarray) -> np.ndarray:
        """Distribution of the report buckets when the input buckets have distribution f."""
        return self.q * self.out_width * f.sum() + self.gap * np.convolve(f, self.band)

    def backward(self, x: np.ndarray) -> np.ndarray:
        """The transposed product ``M^T x``."""
        return self.q * float(self.out_width @ x) + self.gap * np.correlate(x, self.band, "valid")


def _channel(sw: SquareWave, buckets: int) -> _Channel:
    w, b = 1.0 / buckets, sw.b
    # band[k]: mean over v in [0, w] of |[k w, (k+1) w] ∩ [v, v + 2b]| / w, for k = 0, 1, ...
    k = np.arange(int(math.ceil(2.0 * b / w)) + 2, dtype=np.float64)
    hi, lo = (k + 1.0) * w, k * w
    band = (_ramp_integral(hi, 2 * b) - _ramp_integral(hi - w, 2 * b)
            - _ramp_integral(lo, 2 * b) + _ramp_integral(lo - w, 2 * b)) / w
    band = np.trim_zeros(np.maximum(band, 0.0), "b")
    edges = -b + w * np.arange(buckets + band.size, dtype=np.float64)
    out_width = np.clip(edges[1:], -b, 1.0 + b) - np.clip(edges[:-1], -b, 1.0 + b)
    return _Channel(sw.q, sw.p - sw.q, out_width, band)


@dataclass(frozen=True, kw_only=True)
class DensityEstimate:
    """The collector's estimate: ``frequencies[i]`` is the share of values in bucket i of [0, 1]."""

    frequencies: np.ndarray
    iterations: int
    converged: bool

    @property
    def edges(self) -> np.ndarray:
        """Bucket edges over [0, 1] (multiply by B for the value domain)."""
        return np.linspace(0.0, 1.0, self.frequencies.size + 1)


def _smooth(f: np.ndarray) -> np.ndarray:
    """Binomial (1, 2, 1) / 4 smoothing; the end buckets use (2, 1) / 3 so no mass leaves [0, 1]."""
    out = np.empty_like(f)
    out[1:-1] = 0.25 * f[:-2] + 0.5 * f[1:-1] + 0.25 * f[2:]
    out[0] = (2.0 * f[0] + f[1]) / 3.0
    out[-1] = (2.0 * f[-1] + f[-2]) / 3.0
    return out / out.sum()


def estimate_density(
    reports: object,
    epsilon: float,
    *,
    buckets: int = 1024,
    smoothing: bool = True,
    tolerance: float = 1e-6,
    max_iterations: int = 10_000,
) -> DensityEstimate:
    """Estimate the distribution of the inputs over ``buckets`` buckets of [0, 1] from SW reports.

    Parameters
    ----------
    reports : array of float
        Square Wave reports, in [-b, 1 + b].
    epsilon : float
        The budget the reports were made with (it fixes b, p, q).
    buckets : int
        d, the number of equal input buckets (paper: 1024).
    smoothing : bool
        EMS (smooth after every step, Li et al.'s default) or plain EM (the paper's SW-W).
    tolerance : float
        Stop when the log-likelihood per report improves by less than this.
    max_iterations : int
        Stop after this many steps in any case (``converged`` is then False).

    Post-processing of the reports: no privacy cost.

    >>> sw = SquareWave(epsilon=2.0)
    >>> rng = np.random.default_rng(1)
    >>> est = estimate_density(sw.perturb(rng.beta(2, 5, 20000), rng), 2.0, buckets=32)
    >>> round(float(est.frequencies.sum()), 6), int(np.argmax(est.frequencies)) in range(3, 10)
    (1.0, True)
    """
    epsilon = check_local_epsilon(epsilon)
    buckets = check_positive_int(buckets, "buckets", minimum=2)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    sw = SquareWave(epsilon=epsilon)
    y = check_unit_values(reports, -sw.b - 1e-12, 1.0 + sw.b + 1e-12, name="reports")
    if y.size == 0:
        raise ValueError("reports must hold at least one Square Wave report, got none.")
    channel = _channel(sw, buckets)
    index = np.clip(((y + sw.b) * buckets).astype(np.int64), 0, channel.out_width.size - 1)
    counts = np.bincount(index, minlength=channel.out_width.size).astype(np.float64)
    seen = counts > 0
    share = counts[seen] / y.size
    f = np.full(buckets, 1.0 / buckets)
    likelihood = -math.inf
    for iteration in range(max_iterations):
        predicted = channel.forward(f)[seen]
        new = float(share @ np.log(predicted))
        if new - likelihood < tolerance:
            return DensityEstimate(frequencies=f, iterations=iteration, converged=True)
        likelihood = new
        ratio = np.zeros(counts.size)
        ratio[seen] = share / predicted
        f = f * channel.backward(ratio)
        f /= f.sum()
        if smoothing:
            f = _smooth(f)
    return DensityEstimate(frequencies=f, iterations=max_iterations, converged=False)
