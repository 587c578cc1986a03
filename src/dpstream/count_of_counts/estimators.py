"""The single-region methods of Section 4: naive, ``Hg`` and ``Hc`` (and the footnote's ``K``).

Every method takes the true histograms of all regions of one level and returns an estimate
for each region together with the Section 5.1 variance estimate of every estimated group's
size.  Regions are disjoint (every group lies in one leaf), so one call on a whole level
spends its ``epsilon`` once, by parallel composition.

Noise.  Every method adds discrete Laplace (double-geometric) noise to integer queries, drawn
by a :class:`~dpstream.noise.sampler.NoiseSampler`: :class:`~dpstream.noise.sampler.ExactNoise`
samples it exactly from random bits (CKS 2020), at the scale ``Delta / epsilon`` rounded **up**
to a multiple of ``2^-20`` (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace_scale`).

Privacy
-------
epsilon-DP at the entity level: neighbouring databases share the public Hierarchy and Groups
tables and differ in one row of Entities, so exactly one group's size changes by one.  With
``b`` the rounded scale, each method is ``Delta / b``-DP and ``Delta / b <= epsilon``.  Sizes are
capped at the public bound ``K`` (``max_size``) before the noise when it is given: ``min(x, K)``
moves by at most one when ``x`` does, so no sensitivity below grows.

* naive (Section 4.1): ``H'`` (sizes capped at ``K``) has L1 sensitivity 2 (Lemma 3);
  noise of scale ``2 / epsilon`` (rounded up) on all ``K + 1`` cells.
* ``Hg`` (Section 4.2): the sorted sizes have sensitivity 1; noise of scale ``1 / epsilon`` on
  each of the ``G`` entries (``G`` is public).
* ``Hc`` (Section 4.3): the cumulative histogram has sensitivity 1 (Lemma 4.2); noise of scale
  ``1 / epsilon`` on cells ``0 .. K - 1``.  Cell ``K`` always equals the public ``G`` and is
  released without noise, which is what the paper's constraint ``Hc[K] = G`` amounts to.

Everything after the noise (isotonic regression, projection, rounding, variance estimates) is
post-processing.  The exact guarantee holds only with :class:`~dpstream.noise.sampler.ExactNoise`
(the default of the mechanisms); :class:`~dpstream.noise.sampler.FloatNoise` draws the same law
with numpy's float geometric sampler, for studies.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpstream._checks import check_choice, check_epsilon, check_positive_int
from dpstream._progress import Progress, notify
from dpstream.count_of_counts.histograms import (
    LevelHistograms,
    isotonic_l1,
    isotonic_l2,
    largest_remainder_round,
    project_to_simplex,
)
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource

__all__ = [
    "BYTES_PER_CELL",
    "METHODS",
    "LevelEstimate",
    "dense_memory",
    "estimate_level",
    "estimate_max_size",
    "format_bytes",
    "noise_scale",
]

METHODS = ("hc", "hg", "naive")
ISOTONIC = ("l1", "l2")
#: Dense K-length rows handled at once by the naive and Hc methods (bounds memory to ~ this * 40 bytes).
CHUNK_CELLS = 4_000_000
#: Peak bytes of working memory per dense cell of the naive and Hc methods (int64 rows, their
#: cumulative sums, the noise, the isotonic regression's index and work arrays): measured with
#: tracemalloc at 89 for Hc with L1 isotonic regression (the most), 72 for naive, 48 for Hc-L2.
BYTES_PER_CELL = 96
#: L1 sensitivity of each method's noisy query (Section 4).
SENSITIVITY = {"hc": 1, "hg": 1, "naive": 2}


def noise_scale(method: str, epsilon: float | Fraction) -> Fraction:
    """The exact discrete Laplace scale of ``method`` at budget ``epsilon``: sensitivity / epsilon,
    rounded up to a multiple of ``2^-20`` (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace_scale`).

    >>> noise_scale("naive", 0.5), noise_scale("hc", Fraction(1, 3))
    (Fraction(4, 1), Fraction(3, 1))
    """
    return discrete_laplace_scale(SENSITIVITY[check_choice(method, "method", METHODS)], epsilon)


def dense_memory(n_regions: int, max_size: int) -> int:
    """Peak bytes the naive and Hc methods allocate for a level of ``n_regions`` regions at bound ``K``.

    They work through dense rows of ``K + 1`` cells, as many regions at a time as fit in
    :data:`CHUNK_CELLS` cells and at least one: ``min(n_regions, max(1, CHUNK_CELLS // (K + 1)))``
    rows of :data:`BYTES_PER_CELL` bytes per cell.  The Hg method keeps no dense rows.

    >>> format_bytes(dense_memory(3000, 100_000)), format_bytes(dense_memory(10, 10**9))
    ('357 MiB', '89.4 GiB')
    """
    width = check_positive_int(max_size, "max_size") + 1
    rows = min(check_positive_int(n_regions, "n_regions"), max(1, CHUNK_CELLS // width))
    return rows * width * BYTES_PER_CELL


def format_bytes(count: int) -> str:
    """A byte count in binary units, three significant digits.

    >>> format_bytes(512), format_bytes(3 * 2**30), format_bytes(1536 * 2**40)
    ('512 B', '3 GiB', '1.5 PiB')
    """
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}"


@dataclass(frozen=True, kw_only=True)
class LevelEstimate:
    """Estimated histograms of one level and the variance of each estimated group's size.

    ``variance[r]`` belongs to every group of row ``r`` of ``histograms`` (Section 5.1).
    """

    histograms: LevelHistograms
    variance: np.ndarray


def estimate_level(
    truth: LevelHistograms,
    *,
    method: str,
    epsilon: float | Fraction,
    noise: NoiseSampler | NoiseSource,
    max_size: int | None = None,
    isotonic: str | None = None,
    progress: Progress | None = None,
    regions: np.ndarray | None = None,
) -> LevelEstimate:
    """Run ``method`` ("hc", "hg" or "naive") on every region of a level with budget ``epsilon``.

    ``noise`` draws the discrete Laplace noise; its scale is :func:`noise_scale` of ``epsilon``
    (a float, or a ``Fraction`` for an exact share of a budget).  A keyed
    :class:`~dpstream.noise.source.NoiseSource` (a release) draws the whole vector of region
    ``r``'s cells from its own stream ``source.sampler(regions[r])``, so a region's noise depends
    on the key and its identity only, not on which other regions are estimated with it or in
    which order; ``regions`` (default ``0 .. n - 1``) names the rows of ``truth`` in the level.
    Any other sampler (:class:`~dpstream.noise.sampler.FloatNoise` for studies,
    :class:`~dpstream.noise.sampler.ZeroNoise` for tests) draws the level in consecutive calls.
    ``max_size`` is the public bound ``K``: needed by "hc" and
    "naive", optional for "hg"; when given, every method counts groups larger than ``K`` as
    size ``K`` ("K or more").  ``isotonic`` is "l1" or "l2" (default: "l1" for "hc", the paper's
    choice, and "l2" for "hg").  ``progress`` is called with the regions done out of the level's
    regions (the protocol of :mod:`dpstream._progress`).  The estimate of every region is
    integral, non-negative, at most ``K`` and has the region's ``G`` groups.

    >>> from dpstream.noise import ExactNoise
    >>> truth = LevelHistograms.from_groups(np.zeros(5), np.array([1, 1, 2, 3, 3]), 1)
    >>> est = estimate_level(truth, method="hc", epsilon=1e6, noise=ExactNoise(bits=0), max_size=5)
    >>> est.histograms.size.tolist(), est.histograms.count.tolist()
    ([1, 2, 3], [2, 1, 2])
    """
    method = check_choice(method, "method", METHODS)
    epsilon = _exact_epsilon(epsilon)
    if not isinstance(noise, (NoiseSampler, NoiseSource)):
        raise TypeError(
            f"noise must be a NoiseSampler (ExactNoise, FloatNoise, ZeroNoise) or a NoiseSource, got {noise!r}."
        )
    regions = np.arange(truth.n_nodes, dtype=np.int64) if regions is None else np.asarray(regions, dtype=np.int64)
    if regions.shape != (truth.n_nodes,):
        raise ValueError(f"regions needs one entry per region ({truth.n_nodes}), got shape {regions.shape}.")
    draw = _RegionNoise(noise, regions)
    scale = noise_scale(method, epsilon)
    if isotonic is None:
        isotonic = "l2" if method == "hg" else "l1"
    isotonic = check_choice(isotonic, "isotonic", ISOTONIC)
    if max_size is not None:
        max_size = check_positive_int(max_size, "max_size")
    if method == "hg":
        notify(progress, 0, truth.n_nodes)
        estimate = _estimate_hg(truth, float(epsilon), draw, scale, isotonic, max_size)
        notify(progress, truth.n_nodes, truth.n_nodes)
        return estimate
    if max_size is None:
        raise ValueError(f"method {method!r} needs the public maximum group size max_size (K), got None.")
    notify(progress, 0, truth.n_nodes)
    if method == "hc":
        return _estimate_hc(truth, float(epsilon), draw, scale, max_size, isotonic, progress)
    return _estimate_naive(truth, float(epsilon), draw, scale, max_size, progress)


def _exact_epsilon(epsilon: object) -> Fraction:
    """``epsilon`` checked, as an exact rational (a Fraction is kept as it is)."""
    if isinstance(epsilon, Fraction):
        if not epsilon > 0:
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}.")
        return epsilon
    return Fraction(check_epsilon(epsilon))


class _RegionNoise:
    """The noise of blocks of regions: per region from a keyed source, else in one call per block."""

    def __init__(self, noise: NoiseSampler | NoiseSource, regions: np.ndarray) -> None:
        self.keyed = isinstance(noise, NoiseSource) and noise.keyed
        self.source = noise
        self.sampler = noise.shared if isinstance(noise, NoiseSource) else noise
        self.regions = regions

    def rows(self, scale: Fraction, lo: int, hi: int, width: int) -> np.ndarray:
        """Noise of shape ``(hi - lo, width)`` for regions ``lo .. hi - 1``."""
        if not self.keyed:
            return self.sampler.laplace_units(scale, (hi - lo, width))
        out = np.empty((hi - lo, width), dtype=np.int64)
        for row, region in enumerate(self.regions[lo:hi].tolist()):
            out[row] = self.source.sampler(region).laplace_units(scale, width)
        return out

    def ragged(self, scale: Fraction, widths: np.ndarray) -> np.ndarray:
        """``widths[r]`` values for every region ``r``, concatenated."""
        total = int(widths.sum())
        if not self.keyed:
            return self.sampler.laplace_units(scale, total)
        out = np.empty(total, dtype=np.int64)
        start = 0
        for region, width in zip(self.regions.tolist(), widths.tolist()):
            if width:
                out[start : start + width] = self.source.sampler(region).laplace_units(scale, width)
                start += width
        return out


def _chunks(n_nodes: int, width: int, progress: Progress | None) -> Iterator[tuple[int, int]]:
    """Consecutive blocks of regions whose dense rows of ``width`` cells fit in :data:`CHUNK_CELLS`;
    the regions done are reported after each block."""
    step = max(1, CHUNK_CELLS // width)
    for lo in range(0, n_nodes, step):
        hi = min(n_nodes, lo + step)
        yield lo, hi
        notify(progress, hi, n_nodes)


def _dense_rows(truth: LevelHistograms, lo: int, hi: int, max_size: int) -> np.ndarray:
    """``H'`` of regions ``lo .. hi - 1`` as rows of length ``max_size + 1`` (sizes capped at K)."""
    a, b = np.searchsorted(truth.node, [lo, hi])
    cells = (truth.node[a:b] - lo) * (max_size + 1) + np.minimum(truth.size[a:b], max_size)
    flat = np.bincount(cells, weights=truth.count[a:b], minlength=(hi - lo) * (max_size + 1))
    return flat.astype(np.int64).reshape(hi - lo, max_size + 1)


def _sparse_rows(rows: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    node, size = np.nonzero(rows)
    return node + lo, size.astype(np.int64), rows[node, size]


def _finish(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n_nodes: int, factor: float) -> LevelEstimate:
    node, size, count = (np.concatenate(column) if column else np.zeros(0, np.int64) for column in zip(*parts))
    histograms = LevelHistograms.from_sorted(node, size, count, n_nodes)
    return LevelEstimate(histograms=histograms, variance=factor / histograms.count)


def _estimate_hc(
    truth: LevelHistograms, epsilon: float, noise: _RegionNoise, scale: Fraction, max_size: int, isotonic: str,
    progress: Progress | None,
) -> LevelEstimate:
    groups = truth.groups()
    parts = []
    for lo, hi in _chunks(truth.n_nodes, max_size, progress):
        cumulative = np.cumsum(_dense_rows(truth, lo, hi, max_size), axis=1)[:, :max_size]
        noisy = cumulative + noise.rows(scale, lo, hi, max_size)
        bounds = groups[lo:hi]
        if isotonic == "l1":
            starts = np.arange(hi - lo, dtype=np.int64) * max_size
            fitted = isotonic_l1(noisy.ravel(), 0, bounds, starts=starts).reshape(noisy.shape)
        else:
            fitted = np.stack([isotonic_l2(row, 0, bound) for row, bound in zip(noisy, bounds)])
            fitted = np.rint(fitted).astype(np.int64)
        cumulative = np.concatenate((fitted, bounds[:, None]), axis=1)
        parts.append(_sparse_rows(np.diff(cumulative, axis=1, prepend=0), lo))
    # Section 5.1.2: Var(H[j]) ~ 2 * 2 / eps^2, shared by the groups estimated to have size j
    return _finish(parts, truth.n_nodes, 4.0 / epsilon**2)


def _estimate_naive(
    truth: LevelHistograms, epsilon: float, noise: _RegionNoise, scale: Fraction, max_size: int,
    progress: Progress | None,
) -> LevelEstimate:
    groups = truth.groups()
    parts = []
    for lo, hi in _chunks(truth.n_nodes, max_size + 1, progress):
        dense = _dense_rows(truth, lo, hi, max_size)
        noisy = dense + noise.rows(scale, lo, hi, max_size + 1)
        projected = project_to_simplex(noisy, groups[lo:hi])
        parts.append(_sparse_rows(largest_remainder_round(projected, groups[lo:hi]), lo))
    # Not in the paper (Section 5.1 covers Hg and Hc): each cell carries noise of variance
    # ~ 2 (2 / eps)^2 = 8 / eps^2, shared by the groups estimated to have that size.
    return _finish(parts, truth.n_nodes, 8.0 / epsilon**2)


def _estimate_hg(
    truth: LevelHistograms, epsilon: float, noise: _RegionNoise, scale: Fraction, isotonic: str, max_size: int | None
) -> LevelEstimate:
    groups = truth.groups()
    starts = np.concatenate(([0], np.cumsum(groups)[:-1]))
    sizes = truth.size if max_size is None else np.minimum(truth.size, max_size)
    noisy = np.repeat(sizes, truth.count) + noise.ragged(scale, groups)
    ceiling = np.inf if max_size is None else max_size
    if isotonic == "l1":
        upper = np.maximum(np.maximum.reduceat(noisy, starts[groups > 0]), 0) if noisy.size else np.zeros(0, np.int64)
        if max_size is not None:
            upper = np.minimum(upper, max_size)
        fitted = isotonic_l1(noisy, 0, upper, starts=starts[groups > 0])
    else:
        fitted = np.empty(noisy.size, dtype=np.int64)
        for start, size in zip(starts[groups > 0], groups[groups > 0]):
            fitted[start : start + size] = np.rint(isotonic_l2(noisy[start : start + size], 0.0, ceiling))
    node = np.repeat(np.arange(truth.n_nodes), groups)
    histograms = LevelHistograms.from_sorted(node, fitted, np.ones(fitted.size, dtype=np.int64), truth.n_nodes)
    # Section 5.1.1: 2 / (|S_i| eps^2), S_i the run of equal estimated sizes containing group i
    return LevelEstimate(histograms=histograms, variance=2.0 / (epsilon**2 * histograms.count))


def estimate_max_size(largest_group: int, epsilon: float | Fraction, noise: NoiseSampler) -> int:
    """A public bound ``K`` from a tiny budget (the footnote of Section 4.3).

    ``K = max(1, X + N + ceil(5 sqrt(2) b))`` for ``X`` the size of the largest group, which has
    sensitivity 1, and ``N`` discrete Laplace of scale ``b``, ``1 / epsilon`` rounded up
    (:func:`noise_scale`): the footnote's ``Lap(1/epsilon)`` is replaced by its integer
    counterpart, the geometric mechanism the paper uses throughout (Section 3.2), drawn exactly
    by ``noise`` (:class:`~dpstream.noise.sampler.ExactNoise`), so ``K`` is computed exactly in
    integers.  The margin keeps the footnote's guarantee ``Pr[K >= X] > 0.9995``: with
    ``a = exp(-1/b)`` and ``m`` the margin, ``Pr[N < -m] = a^(m+1) / (1 + a)
    <= exp(-5 sqrt 2) a / (1 + a) < exp(-5 sqrt 2) / 2 < 4.3e-4`` for every scale (the Laplace
    bound of the footnote is the same ``exp(-5 sqrt 2) / 2``).

    Privacy
    -------
    ``1 / b``-DP at the entity level, and ``1 / b <= epsilon`` (one entity moves ``X`` by at
    most one).  It composes sequentially with the release that uses ``K``.

    >>> from dpstream.noise import ExactNoise
    >>> estimate_max_size(10_000, 1e-4, ExactNoise(bits=0)) > 10_000
    True
    """
    if not isinstance(epsilon, Fraction):
        epsilon = check_epsilon(epsilon, "max_size_epsilon")
    epsilon = _exact_epsilon(epsilon)
    scale = noise_scale("hg", epsilon)  # sensitivity 1
    draw = int(noise.laplace_units(scale, 1)[0])
    return max(1, int(largest_group) + draw + math.ceil(5.0 * math.sqrt(2.0) * float(scale)))
