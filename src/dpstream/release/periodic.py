"""A perturber whose measured leaves are the periods of the stream (days of minute readings).

ToPS's perturber measures blocks of ``b^s`` values; a window of another length that lies inside
a block is released as the smoother's prediction from the previous block, so on a stream
whose days vary (the smart-meter stream: a day factor of sd 0.15) a daily sum inside a
4,096-value block errs by the day-to-day variation, whatever the budget.  When the windows a
user cares about are the periods of the stream (``period = 1440`` minutes), measuring each
period directly removes that error: the leaves of the hierarchy are the periods, aligned with
the stream's own clock, so an aligned window is the sum of whole leaves and errs by their
noise only.  This is a departure from the paper (Section 3.4 measures blocks of ``b^s``).

Layout.  Position ``p`` of the released stream sits at clock position ``p + phase`` (``phase``
public: where the first released value falls in its period, e.g. ``hold % period`` when the
stream starts at a period boundary).  Leaf ``k`` holds the clock positions
``[k P, (k + 1) P)``; only the first leaf can be partial.  A chunk is ``C = max(1, r // P)``
leaves (``C P`` clock positions, at most ``r``) under ``d`` measured levels of a fan-out-``b``
forest (``d = 1``: the leaves only), made consistent exactly as ToPS's hierarchy
(:func:`~dpstream.hierarchy.tree.consistent_leaves`), released online with the smoother within
a leaf: every value but the last is the smoother's level times a public ``shape`` of the period
(default flat; e.g. a private daily profile of the hold-out,
:func:`~dpstream.thresholds.profile.noisy_profile`), the last makes the leaf sum to its estimate,
and the smoother observes each leaf's level ``u / sum(shape over the leaf)``.
:func:`periodic_levels` chooses ``d`` for the windows that matter, from public quantities only.

Privacy
-------
epsilon-DP at event level for values in [0, theta], as :class:`HierarchicalPerturber`: one
value changes one node per measured level by at most theta (``theta_units`` grid units on the
exact path), each node gets (discrete) Laplace noise of scale ``theta d / eps``, the ``d``
levels compose sequentially and disjoint chunks in parallel.  The period, the phase and ``d``
are public (they must not depend on the released values); consistency and smoothing are
post-processing.  Under zCDP (``rho=``) the same holds with discrete Gaussian noise of variance
``theta^2 d / (2 rho)``: one value moves one node per level, an L2 change of ``theta sqrt(d)``
(derived in :mod:`dpstream.release.tops_zcdp`).
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_bound, check_nonnegative, check_positive_int
from dpstream.accounting import DEFAULT_DELTA, check_budget
from dpstream.noise.bits import BitsSeed
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import PrivacyGuarantee
from dpstream.release.perturber import HierarchicalPerturber
from dpstream.release.revisions import Leaves
from dpstream.smoothers import Smoother, make_smoother
from dpstream.thresholds.error_model import QueryLengths, aligned_noise_factors

__all__ = ["PeriodicPerturber", "periodic_levels"]


def periodic_levels(*, period: int, max_range: int, fanout: int, queries: QueryLengths | None = None) -> int:
    """The number ``d`` of measured levels whose noise is least for windows starting at period boundaries.

    A window's noise variance is ``2 (theta d / eps)^2`` times its factor
    (:func:`~dpstream.thresholds.error_model.aligned_noise_factors`, windows of ``queries``,
    default one period); ``theta / eps`` is common, so ``d`` minimizes ``d^2`` times the
    factor.  Public: it depends on the parameters only.

    >>> periodic_levels(period=1440, max_range=2**20, fanout=16)
    1
    >>> periodic_levels(period=1440, max_range=2**20, fanout=16, queries=QueryLengths.fixed(400 * 1440)) > 1
    True
    """
    queries = QueryLengths.fixed(check_positive_int(period, "period")) if queries is None else queries
    factors = aligned_noise_factors(period=period, max_range=max_range, fanout=fanout, queries=queries)
    return min(factors, key=lambda d: d * d * factors[d])


class PeriodicPerturber(HierarchicalPerturber):
    """Release a stream in [0, threshold] with leaves of one period each (see the module docstring).

    Parameters
    ----------
    threshold, epsilon, rho, fanout, smoother, granularity, seed, noise, key, prior
        As :class:`~dpstream.release.perturber.HierarchicalPerturber`.
    period : int
        P, the length of a leaf (e.g. 1440 minutes: a day).
    phase : int
        Where the first released value falls in its period, in ``[0, P)``; public.
    max_range : int
        r: a chunk holds ``max(1, r // P)`` leaves.
    levels : int
        d, the measured levels (1: the leaves only); see :func:`periodic_levels`.
    shape : array of float, optional
        The within-period profile of the predictions: ``period`` non-negative numbers with a
        positive sum (normalized here to mean 1); public.  Default flat.

    Privacy
    -------
    ``privacy().epsilon`` (at most ``epsilon``) -DP at event level for values in [0, threshold].

    Examples
    --------
    >>> from dpstream.noise.sampler import ZeroNoise
    >>> p = PeriodicPerturber(threshold=10, epsilon=1.0, period=4, phase=1, noise=ZeroNoise(), prior=0.0)
    >>> p.release(np.arange(7.0)).tolist()  # periods [0, 3), [3, 7): each sums exactly
    [0.0, 0.0, 3.0, 1.0, 1.0, 1.0, 15.0]
    """

    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float | None = None,
        period: int,
        phase: int = 0,
        max_range: int = 2**20,
        fanout: int = 16,
        levels: int = 1,
        shape: object = None,
        smoother: str | Smoother = "recent",
        granularity: float | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | NoiseSource | None = None,
        key: bytes | None = None,
        prior: float | None = None,
        rho: float | None = None,
    ) -> None:
        threshold = check_bound(threshold, "threshold")
        self.epsilon, self.rho = check_budget(epsilon, rho)
        self.period = check_positive_int(period, "period")
        self.phase = int(check_nonnegative(phase, "phase"))
        if self.phase != phase or self.phase >= self.period:
            raise ValueError(f"phase must be an integer in [0, period = {self.period}), got {phase!r}.")
        self.fanout = check_positive_int(fanout, "fanout", minimum=2)
        self.blocks_per_chunk = max(1, check_positive_int(max_range, "max_range", minimum=2) // self.period)
        self.max_range = self.blocks_per_chunk * self.period
        self.measured_levels = check_positive_int(levels, "levels")
        self.smoothed_levels = None  # leaves are periods, not b^s blocks
        self.levels = self.measured_levels
        self.block_size = self.period
        self.shape = _check_shape(shape, self.period)
        self._flat = shape is None  # predictions need no shaping (multiplying by 1.0 changes nothing)
        self._cumulative = np.concatenate(([0.0], np.cumsum(self.shape)))  # shape summed over [0, j)
        self.smoother = make_smoother(smoother)
        self._start(threshold, granularity=granularity, source=make_source(seed=seed, noise=noise, key=key,
                                                                          identity=("tops",)),
                    prior=prior, block_end=self.period - 1, levels_name="levels")

    def privacy(self, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
        """As :meth:`HierarchicalPerturber.privacy`, for ``d`` levels over leaves of one period."""
        return self._guarantee(f"d = {self.measured_levels} levels over leaves of one period of {self.period} values",
                               delta)

    def leaves(self) -> Leaves:
        """The periods as leaves (the first one from ``phase``), with the public shape of the predictions."""
        return Leaves(length=self.period, phase=self.phase, chunk=self.max_range,
                      shape=None if self._flat else self.shape)

    def _end_chunk(self) -> None:
        super()._end_chunk()
        self.state.block_end = self.period - 1

    def _release_in_chunk(self, segment: np.ndarray, position: int) -> np.ndarray:
        st, bs, n = self.state, self.block_size, segment.size
        seg = self._segment(segment, position)
        origin = self.phase if self._clock() < self.max_range else 0  # clock position of the stream's first value
        skipped = np.maximum(seg.done * bs, origin) - seg.done * bs  # positions before the stream began
        weights = self._cumulative[bs] - self._cumulative[skipped]  # shape summed over each leaf's values
        before = self._cumulative[bs - 1] - self._cumulative[skipped]  # ... over all but the last
        after, new_smoother_state = self.smoother.step(st.smoother_state, seg.sums / weights)
        predictions = np.concatenate(([st.prediction], after))
        out = np.repeat(predictions[: seg.blocks.size], seg.lengths)
        if not self._flat:
            out *= self.shape[(position + np.arange(n)) % bs]
        out[seg.done_ends] = seg.sums - before * predictions[: seg.done.size]
        self._advance(seg, position, n, predictions, new_smoother_state)
        return out

    def _release_one(self, value: float) -> float:
        st = self.state
        if st.noise is None:
            self._draw_chunk()
        clock = self._clock()
        position = clock % self.max_range
        st.chunk_total += self._arithmetic.unit(value)
        st.released += 1
        bs = self.block_size
        if position != st.block_end:
            return st.prediction * float(self.shape[position % bs])
        block = position // bs
        total = st.chunk_total - st.block_start_total
        block_sum = self._arithmetic.estimate(total, st.noise, st.noise_fraction, block)
        skipped = max(block * bs, self.phase if clock < self.max_range else 0) - block * bs
        out = block_sum - float(self._cumulative[bs - 1] - self._cumulative[skipped]) * st.prediction
        weight = self._cumulative[bs] - self._cumulative[skipped]
        after, st.smoother_state = self.smoother.step(st.smoother_state, np.array([block_sum / weight]))
        st.prediction = float(after[0])
        if position + 1 == self.max_range:
            self._end_chunk()
        else:
            st.block_start_total = st.chunk_total
            st.block_end = position + bs
        return out


def _check_shape(shape: object, period: int) -> np.ndarray:
    """A public profile of ``period`` non-negative finite numbers with a positive sum, scaled to mean 1."""
    if shape is None:
        return np.ones(period)
    array = np.asarray(shape, dtype=np.float64).ravel()
    if array.size != period:
        raise ValueError(f"shape must hold one number per position of the period ({period}), got {array.size}.")
    if not (np.all(np.isfinite(array)) and np.all(array >= 0) and array.sum() > 0):
        raise ValueError("shape must be finite and non-negative with a positive sum, got min "
                         f"{float(np.nanmin(array)) if not np.all(np.isnan(array)) else float('nan')!r}.")
    return array * (period / array.sum())
