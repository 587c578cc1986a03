"""NOT FOR PUBLICATION: the continuous, floating-point LDP randomizers, kept only to measure what the grid costs.

dpstream's randomizers (:mod:`dpstream.ldp`) report grid indices with exact probabilities.  The
continuous mechanisms of the papers report real numbers; sampled in floating point their reports
leak the input (issue 11: 18-59% of the reports are impossible under the neighbouring input).  They
live here, under ``evaluation/``, for one purpose: the utility study that compares the two.

* :class:`FloatHybrid` -- SR and PM on [-1, 1] and their mixture HM (Appendix E.2, Eq. 19, Eq. 22),
  ``perturb(values, rng)`` from ``rng.random``; unbiased estimates and exact variances;
* :class:`FloatSquareWave` and :func:`float_threshold` -- Square Wave (Eq. 16), EM / EMS over ``d``
  buckets with the bucketed channel, and Eq. 8 at bucket edges with bucket centres;
* :func:`compare_mean_variance` -- the variance of the grid mechanisms over the continuous ones,
  analytically, for every input;
* :func:`compare_topl` -- ToPL on a stream with both versions: the threshold each chooses, the
  expected MSE of random range queries given that threshold (bias squared plus the exact
  variances) and the observed MSE, over rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream.evaluation.metrics import error_metrics, prefix_range_sums, random_queries
from dpstream.evaluation.streams import extend_stream
from dpstream.ldp import HM_PM_THRESHOLD, HybridMechanism, PiecewiseMechanism, StochasticRounding
from dpstream.ldp.square_wave import window_half_width
from dpstream.release import ToPL
from dpstream.thresholds.square_wave import prune_tail

__all__ = ["FloatHybrid", "FloatSquareWave", "compare_mean_variance", "compare_topl", "float_threshold"]


@dataclass(frozen=True)
class FloatHybrid:
    """Continuous HM (and its branches): PM with probability alpha = 1 - e^(-eps/2) when eps > 0.61, else SR."""

    epsilon: float

    @property
    def alpha(self) -> float:
        return -math.expm1(-self.epsilon / 2.0) if self.epsilon > HM_PM_THRESHOLD else 0.0

    @property
    def c(self) -> float:
        """SR's estimate of +1: (e^eps + 1) / (e^eps - 1)."""
        return 1.0 / math.tanh(self.epsilon / 2.0)

    def sr_variance(self, v: np.ndarray) -> np.ndarray:
        return self.c**2 - np.asarray(v, dtype=np.float64) ** 2

    def pm_variance(self, v: np.ndarray) -> np.ndarray:
        d = math.expm1(self.epsilon / 2.0)
        return np.asarray(v, dtype=np.float64) ** 2 / d + (d + 4.0) / (3.0 * d * d)

    def variance(self, v: np.ndarray) -> np.ndarray:
        return self.alpha * self.pm_variance(v) + (1.0 - self.alpha) * self.sr_variance(v)

    def worst_case_variance(self) -> float:
        """Eq. 22."""
        c2 = self.c**2
        if self.epsilon <= HM_PM_THRESHOLD:
            return c2
        half = math.exp(self.epsilon / 2.0)
        return (c2 + (half + 3.0) / (3.0 * (half - 1.0))) / half

    def perturb_estimate(self, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The collector's estimates of continuous HM reports of ``v`` (float sampling)."""
        v = np.asarray(v, dtype=np.float64)
        u = rng.random((v.size, 3))
        sr = np.where(u[:, 1] < 0.5 + 0.5 * v / self.c, self.c, -self.c)
        half = math.exp(self.epsilon / 2.0)
        s = 1.0 / math.tanh(self.epsilon / 4.0)
        left = (half * v - 1.0) / (half - 1.0)
        width = 2.0 / (half - 1.0)
        t = u[:, 2] * (2.0 * s - width)
        outside = np.where(t < left + s, t - s, left + width + (t - left - s))
        pm = np.where(u[:, 1] < half / (half + 1.0), left + u[:, 2] * width, outside)
        return np.where(u[:, 0] < self.alpha, pm, sr)


def _ramp_integral(x: np.ndarray, width: float) -> np.ndarray:
    """G(x) = integral from -inf to x of clip(t, 0, width) dt."""
    return np.where(x <= 0.0, 0.0, np.where(x <= width, 0.5 * x * x, width * (x - 0.5 * width)))


@dataclass(frozen=True)
class FloatSquareWave:
    """Continuous Square Wave on [0, 1] (Eq. 16) and its EM over ``buckets`` buckets."""

    epsilon: float

    @property
    def b(self) -> float:
        return window_half_width(self.epsilon)

    @property
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (2.0 * self.b * e + 1.0)

    @property
    def q(self) -> float:
        return 1.0 / (2.0 * self.b * math.exp(self.epsilon) + 1.0)

    def perturb(self, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        u = rng.random((v.size, 2))
        b = self.b
        far = np.where(u[:, 1] < v, u[:, 1] - b, u[:, 1] + b)
        return np.where(u[:, 0] < 2.0 * b * self.p, v - b + u[:, 1] * 2.0 * b, far)

    def estimate_density(self, reports: np.ndarray, *, buckets: int, smoothing: bool,
                         tolerance: float = 1e-6, max_iterations: int = 10_000) -> np.ndarray:
        """EM (or EMS) over ``buckets`` equal buckets with the bucketed channel (inputs uniform in a bucket)."""
        w, b = 1.0 / buckets, self.b
        k = np.arange(int(math.ceil(2.0 * b / w)) + 2, dtype=np.float64)
        hi, lo = (k + 1.0) * w, k * w
        band = (_ramp_integral(hi, 2 * b) - _ramp_integral(hi - w, 2 * b)
                - _ramp_integral(lo, 2 * b) + _ramp_integral(lo - w, 2 * b)) / w
        band = np.trim_zeros(np.maximum(band, 0.0), "b")
        edges = -b + w * np.arange(buckets + band.size, dtype=np.float64)
        out_width = np.clip(edges[1:], -b, 1.0 + b) - np.clip(edges[:-1], -b, 1.0 + b)
        gap = self.p - self.q
        index = np.clip(((np.asarray(reports) + b) * buckets).astype(np.int64), 0, out_width.size - 1)
        counts = np.bincount(index, minlength=out_width.size).astype(np.float64)
        seen = counts > 0
        share = counts[seen] / index.size
        f = np.full(buckets, 1.0 / buckets)
        likelihood = -math.inf
        for _ in range(max_iterations):
            predicted = (self.q * out_width * f.sum() + gap * np.convolve(f, band))[seen]
            new = float(share @ np.log(predicted))
            if new - likelihood < tolerance:
                break
            likelihood = new
            ratio = np.zeros(counts.size)
            ratio[seen] = share / predicted
            f = f * (self.q * float(out_width @ ratio) + gap * np.correlate(ratio, band, "valid"))
            f /= f.sum()
            if smoothing:
                smoothed = np.empty_like(f)
                smoothed[1:-1] = 0.25 * f[:-2] + 0.5 * f[1:-1] + 0.25 * f[2:]
                smoothed[0], smoothed[-1] = (2.0 * f[0] + f[1]) / 3.0, (2.0 * f[-1] + f[-2]) / 3.0
                f = smoothed / smoothed.sum()
        return f


def float_threshold(reports: np.ndarray, *, epsilon: float, stream_epsilon: float, upper_bound: float,
                    max_range: int, buckets: int = 1024, variant: str = "SW-W") -> float:
    """theta of the continuous pipeline: EM over buckets, Eq. 8 at bucket edges with mass at bucket centres."""
    f = FloatSquareWave(epsilon).estimate_density(reports, buckets=buckets, smoothing=variant == "SW")
    if variant == "SW-W":
        f = prune_tail(f)
    width = upper_bound / buckets
    candidates = width * np.arange(1, buckets + 1, dtype=np.float64)
    centres = width * (np.arange(buckets) + 0.5)
    tail_mass = np.append(np.cumsum(f[::-1])[::-1][1:], 0.0)
    tail_moment = np.append(np.cumsum((f * centres)[::-1])[::-1][1:], 0.0)
    bias = np.maximum(tail_moment - candidates * tail_mass, 0.0)
    variance = candidates**2 / 4.0 * FloatHybrid(stream_epsilon).worst_case_variance()
    errors = max_range / 3.0 * variance + max_range**2 / 6.0 * bias**2
    return float(candidates[int(np.argmin(errors))])


def compare_mean_variance(epsilons: list[float] | tuple[float, ...], points: int = 4001) -> list[dict[str, Any]]:
    """For SR, PM and HM at their default grids: ``Var_grid(v) / Var_continuous(v)`` over ``points`` inputs
    of [-1, 1] (largest and mean), and the worst cases (HM: the supremum against Eq. 22).

    >>> row = compare_mean_variance([1.0])[1]
    >>> row["mechanism"], row["grid"], bool(row["max_ratio"] < 1.005)
    ('PM', 1024, True)
    """
    v = np.linspace(-1.0, 1.0, points)
    rows = []
    for epsilon in epsilons:
        reference = FloatHybrid(epsilon)
        pairs = [("SR", StochasticRounding(epsilon=epsilon), reference.sr_variance, 1),
                 ("PM", PiecewiseMechanism(epsilon=epsilon), reference.pm_variance, None),
                 ("HM", HybridMechanism(epsilon=epsilon), reference.variance, None)]
        for name, mechanism, continuous, grid in pairs:
            ratio = mechanism.variance(v) / continuous(v)
            worst_grid = float(np.max(mechanism.variance(v)))
            worst_continuous = float(np.max(continuous(v)))
            if name == "HM":
                worst_grid, worst_continuous = mechanism.worst_case_variance(), reference.worst_case_variance()
            rows.append({"epsilon": epsilon, "mechanism": name, "grid": grid or mechanism.grid,
                         "max_ratio": float(ratio.max()), "mean_ratio": float(ratio.mean()),
                         "worst_case_ratio": worst_grid / worst_continuous})
    return rows


def _expected_mse(stream: np.ndarray, theta: float, queries: Any, truth: np.ndarray, unit_variance) -> float:
    """E[MSE | theta] over the queries: squared truncation bias plus the sum of the estimates' variances."""
    clipped = np.minimum(stream, theta)
    bias = prefix_range_sums(clipped, queries) - truth
    variance = prefix_range_sums(theta**2 / 4.0 * unit_variance(2.0 * clipped / theta - 1.0), queries)
    return float(np.mean(bias**2 + variance))


def compare_topl(values: np.ndarray, upper_bound: float, *, epsilon: float = 1.0, threshold_epsilon: float = 1.0,
                 hold: int = 65536, max_range: int = 2**20, queries: int = 200, rounds: int = 20,
                 variant: str = "SW-W", seed: int = 0, observe: bool = True) -> list[dict[str, Any]]:
    """ToPL with the grid mechanisms and with the continuous ones, ``rounds`` times each on the same
    stream and queries: one record per (round, version) with theta, the expected MSE given theta
    (exact: squared bias plus the variance formulas) and the observed MSE (with ``observe=False``
    the stream is not perturbed and ``mse`` is NaN: the threshold phase alone, several times faster).

    >>> values = np.tile(np.arange(40.0), 200)
    >>> rows = compare_topl(values, 100.0, hold=4000, max_range=4000, queries=50, rounds=1)
    >>> sorted(row["version"] for row in rows)
    ['continuous', 'grid']
    """
    stream, _ = extend_stream(np.asarray(values, dtype=np.float64), hold + max_range)
    held, released = stream[:hold], stream[hold:hold + max_range]
    rng = np.random.default_rng(seed)
    ranges = random_queries(rng, released.size, queries)
    truth = prefix_range_sums(released, ranges)
    grid_hm, float_hm = HybridMechanism(epsilon=epsilon), FloatHybrid(epsilon)
    rows = []
    for round_index in range(rounds):
        topl = ToPL(epsilon=epsilon, threshold_epsilon=threshold_epsilon, upper_bound=upper_bound, hold=hold,
                    max_range=max_range, variant=variant, seed=rng)
        topl.release(held)
        theta = float(topl.threshold)
        mse = math.nan
        if observe:
            mse = error_metrics(prefix_range_sums(topl.release(released), ranges), truth, ranges)["mse"]
        rows.append({"round": round_index, "version": "grid", "threshold": theta,
                     "expected_mse": _expected_mse(released, theta, ranges, truth, grid_hm.variance), "mse": mse})
        reports = FloatSquareWave(threshold_epsilon).perturb(held / upper_bound, rng)
        theta = float_threshold(reports, epsilon=threshold_epsilon, stream_epsilon=epsilon, upper_bound=upper_bound,
                                max_range=max_range, variant=variant)
        mse = math.nan
        if observe:
            unit = 2.0 * np.minimum(released, theta) / theta - 1.0
            estimates = theta * (float_hm.perturb_estimate(unit, rng) + 1.0) / 2.0
            mse = error_metrics(prefix_range_sums(estimates, ranges), truth, ranges)["mse"]
        rows.append({"round": round_index, "version": "continuous", "threshold": theta,
                     "expected_mse": _expected_mse(released, theta, ranges, truth, float_hm.variance), "mse": mse})
    return rows
