"""Square Wave on a finite grid (Appendix E.1, Eq. 16) and the collector's density estimation by EM / EMS.

Client side.  The continuous Square Wave reports ``y`` in [-b, 1 + b] with density ``p`` when
``|y - v| <= b`` and ``q`` elsewhere, where

    b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)),   p / q = e^eps.

Here it is a :class:`~dpstream.ldp.grid.WindowRandomizer` on the grid of the collector's
histogram: a value ``v`` in [0, 1] is rounded at random to one of the ``d + 1`` points ``i / d``
(``E[x] = v``), and grid input ``i`` is reported as an index ``j`` in ``[0, d + w)``, in the window
``i <= j < i + w`` of ``w = round(2 b d)`` outputs with probability ``m_{j - i} / 2^62`` (``P`` or
``P + 1`` units) and anywhere else with ``Q / 2^62``; ``(P + [r > 0]) / Q <= e^eps`` exactly.  Output
``j`` stands for the continuous report ``y = (j + 1/2) / d - b``: the window of width ``w / d ~ 2b``
slides with the input, as Eq. 16's does.  Two draws below 2^62 per value (rounding, report).

Collector side.  EM estimates the distribution ``f`` of the rounded inputs over the ``d + 1`` grid
points from the reports' histogram, with the exact transition matrix of the discretized mechanism,

    Pr[j | i] = Q / 2^62 + (m_{j - i} - Q) / 2^62 [0 <= j - i < w],

a constant plus a band: each EM step is a few cumulative sums, not two dense products.  EMS
(Li et al.) smooths the estimate with the binomial kernel (1, 2, 1) / 4 after every step.
Rounding at random to the grid changes no threshold computation at a grid point: for
``theta = k / d``, ``E[min(x, theta)] = min(v, theta)`` (the function is affine between grid
points), so the bias of Eq. 8 computed from ``f`` is that of the true values.

Privacy
-------
``SquareWave.perturb`` is epsilon-LDP (Definition 2.2) exactly: every report's probability under
two inputs differs by at most ``(P + [r > 0]) / Q <= e^eps`` (exact arithmetic), and the sampler
realizes the probabilities exactly.  Density estimation only reads reports (post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpstream._checks import check_local_epsilon, check_positive_int, check_unit_values
from dpstream._params import Params
from dpstream.ldp.grid import DENOMINATOR, WindowRandomizer, as_bits, check_indices, draw_words
from dpstream.noise.bits import BitsSeed
from dpstream.privacy import LOCAL_REPORT, EpsilonDelta, Part, PrivacyGuarantee

__all__ = ["MAX_SW_GRID", "DensityEstimate", "SquareWave", "estimate_density"]

#: Largest grid of Square Wave (and of the collector's histogram).
MAX_SW_GRID = 1 << 16


def window_half_width(epsilon: float) -> float:
    """Eq. 16's b = (x e^x - e^x + 1) / (2 e^x (e^x - 1 - x)), without cancellation for small x.

    >>> round(window_half_width(1.0), 4)
    0.2561
    """
    x = epsilon
    # with g = e^x - 1 - x the numerator is x (e^x - 1) - g
    g = x * x / 2.0 * (1.0 + x / 3.0 * (1.0 + x / 4.0 * (1.0 + x / 5.0))) if x < 1e-2 else math.expm1(x) - x
    return (x * math.expm1(x) - g) / (2.0 * math.exp(x) * g)


@dataclass(frozen=True, kw_only=True)
class SquareWave(Params):
    """The Square Wave randomizer on [0, 1], on a grid of ``grid`` steps (the collector's buckets).

    >>> sw = SquareWave(epsilon=1.0)
    >>> round(sw.b, 4), sw.grid, sw.window, sw.outputs
    (0.2561, 1024, 524, 1548)
    >>> y = sw.perturb(np.array([0.0, 0.5, 1.0]), 0)
    >>> bool(np.all((y >= 0) & (y < sw.outputs)))
    True
    """

    epsilon: float
    grid: int = 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_local_epsilon(self.epsilon))
        object.__setattr__(self, "grid", check_positive_int(self.grid, "grid", minimum=2))
        if self.grid > MAX_SW_GRID:
            raise ValueError(f"grid must be an integer in [2, {MAX_SW_GRID}], got {self.grid}.")

    draws = 2

    @property
    def b(self) -> float:
        """Half-width of the continuous high-probability window (Eq. 16)."""
        return window_half_width(self.epsilon)

    @cached_property
    def core(self) -> WindowRandomizer:
        """The grid randomizer: n = grid, w = round(2 b n) (at least 1)."""
        window = min(self.grid, max(1, round(2.0 * self.b * self.grid)))
        return WindowRandomizer.for_epsilon(self.epsilon, low=0.0, high=1.0, grid=self.grid, window=window)

    @property
    def window(self) -> int:
        """w: outputs of the high-probability window."""
        return self.core.window

    @property
    def outputs(self) -> int:
        """N = grid + w: reports are the integers 0..N-1."""
        return self.core.outputs

    @property
    def p(self) -> float:
        """Probability of one output in the window (its lighter mass ``P / 2^62``)."""
        return self.core.p / DENOMINATOR

    @property
    def q(self) -> float:
        """Probability of one output outside the window (``Q / 2^62``)."""
        return self.core.q / DENOMINATOR

    def positions(self, reports: object) -> np.ndarray:
        """Where each report index sits on the continuous output range: ``(j + 1/2) / d - b``."""
        return (np.asarray(reports, dtype=np.float64) + 0.5) / self.grid - self.window / (2.0 * self.grid)

    def probability(self, reports: object, values: object) -> np.ndarray:
        """``Pr[j | v]`` for reports j and inputs v in [0, 1] (broadcasting); 0 off the grid."""
        return self.core.probability(reports, values)

    def perturb_draws(self, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Reports from two draws below 2^62 per value."""
        return self.core.sample(values, draws)

    def perturb(self, values: object, bits: BitsSeed = None) -> np.ndarray:
        """Client side: a report index in ``[0, N)`` for each value in [0, 1] (int64).

        ``bits``: a bit source, or a seed for one (None: the OS CSPRNG; an int: replayable).
        """
        values = check_unit_values(values, 0.0, 1.0)
        return self.perturb_draws(values, draw_words(as_bits(bits), values.size, self.draws))

    def check_reports(self, reports: object, name: str = "Square Wave reports") -> np.ndarray:
        """Reports as int64 indices in [0, N) (else a ValueError naming the first bad one)."""
        return check_indices(reports, self.outputs, name)

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-LDP per report, with the exact ratio."""
        report = Part(what="SW report", budget=EpsilonDelta(self.epsilon), text=(
            f"SW on a grid of {self.grid + 1} inputs and {self.outputs} outputs: one report per value, "
            f"{self.core.describe_ratio()}; no composition"))
        return PrivacyGuarantee.of(report, neighbours=LOCAL_REPORT, local=True)


@dataclass(frozen=True)
class _Channel:
    """``Pr[j | i] = q + (p - q) [0 <= j - i < w] + 2^-62 [0 <= j - i < r]``: box filters by cumulative sums."""

    q: float
    gap: float  # (P - Q) / 2^62
    unit: float  # 2^-62, the extra mass of the first r window offsets
    grid: int  # n: inputs 0..n
    window: int
    extra: int

    @property
    def outputs(self) -> int:
        return self.grid + self.window

    def _box(self, f: np.ndarray, width: int) -> np.ndarray:
        """``out[j] = sum_{i = j - width + 1}^{j} f_i`` for j in [0, N), with f_i = 0 outside [0, n]."""
        cumulative = np.concatenate(([0.0], np.cumsum(f)))
        j = np.arange(self.outputs)
        return cumulative[np.minimum(j, self.grid) + 1] - cumulative[np.clip(j - width + 1, 0, self.grid + 1)]

    def _box_transposed(self, x: np.ndarray, width: int) -> np.ndarray:
        """``out[i] = sum_{j = i}^{i + width - 1} x_j`` for i in [0, n]."""
        cumulative = np.concatenate(([0.0], np.cumsum(x)))
        i = np.arange(self.grid + 1)
        return cumulative[i + width] - cumulative[i]

    def forward(self, f: np.ndarray) -> np.ndarray:
        """Distribution of the reports when the grid inputs have distribution f."""
        out = self.q * f.sum() + self.gap * self._box(f, self.window)
        return out + self.unit * self._box(f, self.extra) if self.extra else out

    def backward(self, x: np.ndarray) -> np.ndarray:
        """The transposed product ``M^T x``."""
        out = self.q * x.sum() + self.gap * self._box_transposed(x, self.window)
        return out + self.unit * self._box_transposed(x, self.extra) if self.extra else out


def _channel(sw: SquareWave) -> _Channel:
    core = sw.core
    return _Channel(q=core.q / DENOMINATOR, gap=(core.p - core.q) / DENOMINATOR, unit=1.0 / DENOMINATOR,
                    grid=core.grid, window=core.window, extra=core.extra)


@dataclass(frozen=True, kw_only=True)
class DensityEstimate:
    """The collector's estimate: ``frequencies[i]`` is the share of values rounded to the grid point ``i / d``."""

    frequencies: np.ndarray
    iterations: int
    converged: bool

    @property
    def points(self) -> np.ndarray:
        """The grid points ``i / d`` of [0, 1] (multiply by B for the value domain)."""
        return np.linspace(0.0, 1.0, self.frequencies.size)


def _smooth(f: np.ndarray) -> np.ndarray:
    """Binomial (1, 2, 1) / 4 smoothing; the end points use (2, 1) / 3 so no mass leaves [0, 1]."""
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
    """Estimate the distribution of the inputs over the ``buckets + 1`` grid points of [0, 1] from SW reports.

    Parameters
    ----------
    reports : array of int
        Square Wave report indices, made by ``SquareWave(epsilon=epsilon, grid=buckets)``.
    epsilon : float
        The budget the reports were made with.
    buckets : int
        d, the steps of the grid (paper: 1024 buckets).
    smoothing : bool
        EMS (smooth after every step, Li et al.'s default) or plain EM (the paper's SW-W).
    tolerance : float
        Stop when the log-likelihood per report improves by less than this.
    max_iterations : int
        Stop after this many steps in any case (``converged`` is then False).

    Post-processing of the reports: no privacy cost.

    >>> sw = SquareWave(epsilon=2.0, grid=32)
    >>> values = np.repeat([0.1, 0.2, 0.3, 0.8], [8000, 8000, 3000, 1000])
    >>> est = estimate_density(sw.perturb(values, 1), 2.0, buckets=32)
    >>> round(float(est.frequencies.sum()), 6), int(np.argmax(est.frequencies)) in range(2, 9)
    (1.0, True)
    """
    epsilon = check_local_epsilon(epsilon)
    buckets = check_positive_int(buckets, "buckets", minimum=2)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    sw = SquareWave(epsilon=epsilon, grid=buckets)
    y = sw.check_reports(reports)
    if y.size == 0:
        raise ValueError("reports must hold at least one Square Wave report, got none.")
    channel = _channel(sw)
    counts = np.bincount(y, minlength=channel.outputs).astype(np.float64)
    seen = counts > 0
    share = counts[seen] / y.size
    f = np.full(buckets + 1, 1.0 / (buckets + 1))
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
