"""The perturber and smoother of ToPS: an online, consistent fan-out-b hierarchy (Sections 3.4-3.5).

Given a public threshold theta, the perturber releases every value of a stream in [0, theta]
the moment it arrives:

1. Chunks.  The stream is cut into chunks of ``r = max_range`` values; each chunk gets its own
   hierarchy of ``h = ceil(log_b r)`` levels, of which the ``s`` lowest are left to the
   smoother (``s`` from Eq. 7), so ``h - s`` levels are measured and the leaves are blocks of
   ``b^s`` values.
2. Online consistency (Appendix C).  When a chunk starts, the noise of all its nodes is drawn,
   ``Lap(theta (h - s) / eps)`` each, and made consistent by the two passes of Eq. 10-11.  The
   consistent noise of a leaf is then added to that block's true sum, so a block's estimate
   ``u`` equals what the offline algorithm would give (Theorem 3.1) and needs no future values.
3. Smoothing (Algorithm 1, Appendix D).  Within a block, every value but the last is released
   as the smoother's prediction from earlier blocks; the last is released as ``u`` minus the
   other predictions, so the block's outputs sum exactly to ``u``.

Algorithm 1 prints the last output as ``cur_node - u x (16^s - 1)``; since the other outputs
were ``u / 16^s`` each, the sum property the algorithm relies on needs
``cur_node - (16^s - 1) u / 16^s``, which is what we release.

Exact noise on a public grid (the default).  Values are rounded to the nearest multiple of a
public granularity ``g`` (default: the largest power of two at most ``theta / 2^20``; ToPS
passes the one of its bound B) and held as int64 grid units; theta is rounded **up** to
``theta_units = ceil(theta / g)`` steps.  A node's measurement is its integer sum plus discrete
Laplace noise of scale ``theta_units (h - s) / eps`` grid units, rounded up to a multiple of
``2^-k`` (:func:`~dpstream.noise.grid.round_up_scale`).  Consistency is computed exactly
(:func:`~dpstream.hierarchy.tree.consistent_leaves`): a block's estimate is the rational
``u = T + integer + remainder / q``, and the released float ``(float(T + integer) +
remainder / q) g`` is a deterministic function of the exact measurements (not of ``T`` and the
noise separately, which float sums would make it).  The smoother and the last-value rule are
float post-processing of these estimates.  ``noise=FloatNoise(rng)`` runs the float algorithm
of the studies instead (no grid, float Laplace; NOT for publication): the same code on the float
arithmetic of :mod:`dpstream.hierarchy.arithmetic`.

Privacy
-------
epsilon-DP at event level for streams with values in [0, theta] (neighbours differ in one
value; theta must not depend on the stream after the hold-out).  One value changes one node per
measured level by at most ``theta_units`` grid units, so discrete Laplace noise of scale
``beta >= theta_units (h - s) / eps`` is ``theta_units / beta``-DP per level, and the ``h - s``
levels compose sequentially to ``theta_units (h - s) / beta <= eps``: the budget
:meth:`HierarchicalPerturber.privacy` states, recomputed from the rounded scale.  It holds for
the numbers the computer produces: every measurement is an exact integer, every output a
deterministic function of the measurements.  Chunks are disjoint (parallel composition), and
rounding to the grid (a function of each value alone), consistency and smoothing are
post-processing.

zCDP (``rho=`` instead of ``epsilon``).  Every node gets exact discrete Gaussian noise of variance
parameter ``sigma^2 = theta_units^2 (h - s) / (2 rho)`` grid units^2, rounded up
(:class:`~dpstream.noise.grid_gaussian.GridGaussian`): one value moves one node per measured level
by at most ``theta_units``, an L2 change of ``theta_units sqrt(h - s)`` (derived, with every part
of the hierarchy a value touches, in :mod:`dpstream.release.tops_zcdp`), so the hierarchy is
``spent_rho``-zCDP (at most rho), stated with the (epsilon, delta) it implies.

The streaming state is explicit (:class:`PerturberState`): noise is drawn once per chunk and
kept until the chunk ends, so saving and restoring the state (with the noise source) never
re-draws noise for a released position.  With ``key=``, the noise of chunk ``c`` is drawn from
``KeyedBits(key, ("tops", c))``: it depends on nothing but the key and ``c``, so a restarted
release recomputes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpstream._checks import (
    check_bound,
    check_length,
    check_magnitude,
    check_memory,
    check_nonnegative,
    check_nonnegative_int,
    check_positive_int,
    check_stream_values,
)
from dpstream._params import Params
from dpstream.accounting import DEFAULT_DELTA, ZcdpGuarantee, check_budget
from dpstream.hierarchy import num_levels
from dpstream.hierarchy.arithmetic import GridArithmetic, arithmetic
from dpstream.hierarchy.tree import consistency_weights
from dpstream.noise.bits import BitsSeed
from dpstream.noise.grid import GridLaplace, ceil_units, choose_granularity
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import EVENT_LEVEL, Composition, EpsilonDelta, Part, PrivacyGuarantee
from dpstream.release.revisions import Leaves
from dpstream.release.tops_errors import perturber_error_model, perturber_standard_errors, range_standard_error
from dpstream.smoothers import Smoother, make_smoother

__all__ = ["HierarchicalPerturber", "HierarchyShape", "PerturberState", "optimal_smoothed_levels"]


def optimal_smoothed_levels(epsilon: float | None, max_range: int, fanout: int, *, rho: float | None = None) -> int:
    """s of Eq. 7: the number of lowest levels replaced by the smoother.

    Eq. 7 models the squared error as ``(b - 1) (log_b r - s)^3 2 theta^2 / eps^2`` (noise of
    the ``h - s`` measured levels) plus ``b^(2s) theta^2 / 36`` (smoothing bias); theta^2 is a
    common factor, so s does not depend on theta.  The expression is convex in a real s; we
    minimize it over the reals in [0, h - 1] and round to the nearest level, which is how the
    paper's authors evaluate it in their published code.  The integer argmin can be one level
    lower, because the expression rises faster to the right of its minimum than to the left:
    on POS with r = 2^20 it picks s = 2 at eps = 0.04-0.05 where rounding picks 3, and the
    measured MSE (``dpstream evaluate``) is about 2.5x worse there and stops decreasing in eps.
    Pass ``smoothed_levels`` to force any other s.

    Under zCDP (``rho`` instead of ``epsilon``) a node's noise variance is ``theta^2 (h - s) / (2 rho)``
    instead of ``2 theta^2 (h - s)^2 / eps^2``, so the noise term of Eq. 7 -- ``(b - 1)(h - s)`` nodes
    times that variance -- is ``(b - 1)(log_b r - s)^2 / (2 rho)`` (times theta^2).

    >>> [optimal_smoothed_levels(e, 2**20, 16) for e in (0.01, 0.05, 0.1, 1.0)]
    [3, 3, 2, 2]
    >>> [optimal_smoothed_levels(None, 2**20, 16, rho=r) for r in (0.0001, 0.01, 1.0)]
    [3, 2, 1]
    """
    epsilon, rho = check_budget(epsilon, rho)
    budget = epsilon if rho is None else rho
    if not math.isfinite(budget * budget):
        raise ValueError(f"{'epsilon' if rho is None else 'rho'} must be at most 1e154 for Eq. 7 to choose s (its "
                         f"square overflows float64 beyond): give smoothed_levels, got {budget!r}.")
    h = num_levels(max_range, fanout)
    log_r = math.log(max_range) / math.log(fanout)
    s = np.linspace(0.0, h - 1.0, 1000 * (h - 1) + 1)
    above = np.maximum(log_r - s, 0.0)
    noise = above**3 * 2.0 / budget**2 if rho is None else above**2 / (2.0 * rho)
    error = (fanout - 1) * noise + np.exp(2 * s * math.log(fanout)) / 36.0
    return int(min(h - 1, max(0, round(float(s[np.argmin(error)])))))


def check_chunk_sums(max_range: int, units: int) -> None:
    """Refuse a grid on which a chunk's sum of ``max_range`` values of at most ``units`` grid units
    could reach 2^52 (the limit the perturber has always kept, below float64's exact integers)."""
    if max_range * units >= 1 << 52:
        raise ValueError(
            f"max_range * threshold / granularity must be below 2^52 (chunk sums of grid units exact in "
            f"float64), got {max_range} * {units}; use a coarser granularity."
        )


@dataclass(frozen=True)
class HierarchyShape:
    """The public shape of ToPS's hierarchy: chunks of ``max_range`` values, fan-out ``b``,
    ``h = ceil(log_b r)`` levels of which the ``s`` lowest are smoothed.

    >>> HierarchyShape.of(1.0, 256, 16, None)
    HierarchyShape(max_range=256, fanout=16, levels=2, smoothed_levels=1)
    """

    max_range: int
    fanout: int
    levels: int
    smoothed_levels: int

    @classmethod
    def of(cls, epsilon: float | None, max_range: int, fanout: int, smoothed_levels: int | None, *,
           rho: float | None = None) -> HierarchyShape:
        """The shape checked; ``smoothed_levels`` None chooses s by Eq. 7 (:func:`optimal_smoothed_levels`, for
        ``epsilon`` or, under zCDP, ``rho``)."""
        max_range = check_memory(check_positive_int(max_range, "max_range", minimum=2), "max_range")
        fanout = check_positive_int(fanout, "fanout", minimum=2)
        check_length(fanout, "fanout")
        levels = num_levels(max_range, fanout)
        if smoothed_levels is None:
            smoothed_levels = optimal_smoothed_levels(epsilon, max_range, fanout, rho=rho)
        smoothed_levels = check_nonnegative_int(smoothed_levels, "smoothed_levels")
        if smoothed_levels >= levels:
            raise ValueError(
                f"smoothed_levels must be < the hierarchy's {levels} levels "
                f"(ceil(log_{fanout} {max_range})), got {smoothed_levels}."
            )
        return cls(max_range=max_range, fanout=fanout, levels=levels, smoothed_levels=smoothed_levels)

    @property
    def measured_levels(self) -> int:
        """h - s."""
        return self.levels - self.smoothed_levels


@dataclass(frozen=True, kw_only=True)
class _Segment:
    """The blocks a batch of values of one chunk touches (:meth:`HierarchicalPerturber._segment`)."""

    blocks: np.ndarray  # every block the segment touches
    lengths: np.ndarray  # how many of its values fall in each
    done: np.ndarray  # the blocks it completes ...
    done_ends: np.ndarray  # ... their last index in the segment
    sums: np.ndarray  # ... and their estimates u (real units)
    chunk_total: Any  # the chunk's running sum after the segment
    block_start_total: Any  # its value where the block after the last completed one starts


@dataclass(kw_only=True)
class PerturberState:
    """Everything the perturber needs to continue a stream (the noise source aside).

    Attributes
    ----------
    released : int
        Values released so far.
    noise : ndarray or None
        The current chunk's consistent leaf noise: on the exact path its integer part (int64
        grid units), on the float path the noise itself (float64); None between chunks.
    noise_fraction : ndarray or None
        Exact path: ``remainder / q`` of each leaf's consistent noise, as float64.
    chunk_total, block_start_total : int or float
        Running sum of the chunk's values (grid units on the exact path), and its value where
        the current block started.
    block_end : int
        Position in the chunk of the current block's last value.
    prediction : float
        The smoother's prediction for the values of the current block.
    smoother_state : object
        The smoother's own state.
    """

    released: int
    noise: np.ndarray | None
    chunk_total: int | float
    block_start_total: int | float
    block_end: int
    prediction: float
    smoother_state: Any
    noise_fraction: np.ndarray | None = None


class HierarchicalPerturber(Params):
    """Release a stream in [0, threshold] with an online, consistent hierarchy and a smoother.

    Parameters
    ----------
    threshold : float
        theta: values must already be truncated to [0, theta].  Public.  On the exact path it
        is rounded up to the grid (:attr:`threshold` is the rounded value).
    epsilon : float
        Budget of the hierarchy (pure DP, discrete Laplace noise).
    rho : float, optional
        Instead of ``epsilon``: a zCDP budget, exact discrete Gaussian noise on the grid (see the module docstring).
    max_range : int
        r: chunk length and the largest query range the hierarchy serves (paper: 2^20).
    fanout : int
        b (paper: 16).
    smoothed_levels : int or None
        s; None chooses it by Eq. 7.  ``0`` releases every leaf (no smoothing).
    smoother : str or Smoother
        recent (default), mean, median, moving_average or exponential.
    granularity : float, optional
        g, the public grid step (exact path); default the largest power of two at most
        ``threshold / 2^20`` (coarser only for tiny budgets, see
        :func:`~dpstream.noise.grid.choose_granularity`).
    seed : None, int, numpy Generator or bit source
        Bits of the exact samplers: None (default) is the OS CSPRNG, an int a replayable PCG64
        (tests; not secret).
    noise : NoiseSampler or NoiseSource, optional
        Instead of ``seed``: ``ZeroNoise()`` makes the arithmetic exact for tests;
        ``FloatNoise(rng)`` runs the float algorithm of the studies (NOT for publication).
    key : bytes, optional
        Instead of ``seed``: a secret key; chunk ``c`` draws from ``KeyedBits(key, ("tops", c))``.
    prior : float, optional
        The smoother's start, a_0: the prediction for every value of the first block.  None
        (default) is Algorithm 1's ``theta / 2``; a private estimate of the level (e.g. the
        noisy mean of the hold-out, :func:`~dpstream.thresholds.model.noisy_mean`) is better.
        It must not depend on the values this perturber releases; clipped to [0, theta].

    Privacy
    -------
    ``privacy().epsilon`` (at most ``epsilon``) -DP at event level for values in [0, threshold]:
    discrete Laplace on each of the ``h - s`` measured levels; see the module docstring.

    Examples
    --------
    >>> p = HierarchicalPerturber(threshold=10, epsilon=1.0, max_range=256, fanout=16, seed=1)
    >>> out = p.release(np.full(512, 5.0))
    >>> out.shape, p.smoothed_levels, p.granularity == 2.0**-17, p.privacy().epsilon <= 1.0
    ((512,), 1, True, True)
    """

    #: Clock position of the first released value (chunks start where the clock is a multiple of r).
    phase = 0

    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float | None = None,
        max_range: int = 2**20,
        fanout: int = 16,
        smoothed_levels: int | None = None,
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
        shape = HierarchyShape.of(self.epsilon, max_range, fanout, smoothed_levels, rho=self.rho)
        self.max_range, self.fanout, self.levels, self.smoothed_levels = (
            shape.max_range, shape.fanout, shape.levels, shape.smoothed_levels)
        self.smoother = make_smoother(smoother)
        self.block_size = self.fanout**self.smoothed_levels
        self.measured_levels = self.levels - self.smoothed_levels
        self.blocks_per_chunk = -(-self.max_range // self.block_size)
        self._start(threshold, granularity=granularity, source=make_source(seed=seed, noise=noise, key=key,
                                                                          identity=("tops",)),
                    prior=prior, block_end=min(self.block_size, self.max_range) - 1, levels_name="(h - s)")

    def _start(self, threshold: float, *, granularity: float | None, source: NoiseSource, prior: float | None,
               block_end: int, levels_name: str) -> None:
        """What every hierarchy shape shares once its levels are set: the overflow checks, the noise
        source and its grid (or the float scale), the prior and the empty state."""
        if self.rho is None:
            check_magnitude(threshold * self.measured_levels / self.epsilon,
                            f"the noise scale threshold * {levels_name} / epsilon")
        else:
            check_magnitude(threshold * math.sqrt(self.measured_levels / (2.0 * self.rho)),
                            f"the noise's sigma threshold * sqrt({levels_name} / (2 rho))")
        check_magnitude(threshold * self.max_range, "threshold * max_range (the largest sum of a hierarchy)")
        self._source = source
        self.exact = self._source.exact
        if self.exact:
            self._set_grid(threshold, granularity)
        else:
            self._arithmetic = arithmetic(False, bound=threshold, epsilon=self.epsilon, levels=self.measured_levels,
                                          granularity=granularity, rho=self.rho)
        ar = self._arithmetic
        self.granularity, self.threshold, self.noise_scale = ar.granularity, ar.bound, ar.scale_value
        #: What the hierarchy spends, recomputed from the rounded-up noise: epsilon (pure DP) or rho (zCDP); the
        #: other is None.
        self.spent_epsilon = ar.spent_epsilon
        self.spent_rho = None if self.rho is None else ar.budget.rho
        prior = self.threshold / 2.0 if prior is None else min(check_nonnegative(prior, "prior"), self.threshold)
        self.prior = prior
        self.state = PerturberState(
            released=0,
            noise=None,
            chunk_total=ar.zero,
            block_start_total=ar.zero,
            block_end=block_end,
            prediction=prior,
            smoother_state=self.smoother.init(prior),
        )

    def _set_grid(self, threshold: float, granularity: float | None) -> None:
        if self.rho is None:
            factor = Fraction(self.measured_levels) / Fraction(self.epsilon)
            g = choose_granularity(granularity, threshold, units_factor=factor)
            check_chunk_sums(self.max_range, ceil_units(threshold, g))  # before the scale, whose error it would hide
            noise = GridLaplace.on_grid(threshold, self.epsilon, g, levels=self.measured_levels)
            self._arithmetic = GridArithmetic(noise)
        else:
            self._arithmetic = arithmetic(True, bound=threshold, epsilon=None, rho=self.rho, granularity=granularity,
                                          levels=self.measured_levels)
            noise = self._arithmetic.noise
            check_chunk_sums(self.max_range, noise.units)
        self.threshold_units, self.noise_scale_units = noise.units, noise.scale
        self.consistency_denominator = consistency_weights(self.fanout, self.measured_levels)[0]

    # -- snapshots -----------------------------------------------------------------------------

    def stream_state(self) -> dict[str, Any]:
        """The perturber's progress as plain data, without its parameters and noise source (what
        ToPS stores).  With a keyed source the current chunk's noise is left out: it is
        recomputed from the key when the next value arrives."""
        st = self.state
        keep = not self._source.keyed and st.noise is not None
        return {
            "released": st.released,
            "noise": st.noise.copy() if keep else None,
            "noise_fraction": st.noise_fraction.copy() if keep and st.noise_fraction is not None else None,
            "chunk_total": st.chunk_total,
            "block_start_total": st.block_start_total,
            "block_end": st.block_end,
            "prediction": st.prediction,
            "smoother_state": st.smoother_state,
        }

    def resume_stream(self, data: dict[str, Any]) -> None:
        """Continue from :meth:`stream_state` (on a perturber built with the same parameters and source)."""
        released = int(data["released"])
        inside = released and (released + self.phase) % self.max_range  # a chunk has begun and not ended
        if data["noise"] is None and inside and not self._source.keyed:
            raise ValueError("a perturber snapshot taken inside a chunk must carry its noise (an unkeyed source "
                             "cannot recompute it).")
        self.state = PerturberState(
            released=released, noise=data["noise"], noise_fraction=data["noise_fraction"],
            chunk_total=data["chunk_total"], block_start_total=data["block_start_total"],
            block_end=int(data["block_end"]), prediction=data["prediction"],
            smoother_state=_as_smoother_state(data["smoother_state"]),
        )

    @property
    def leaf_granularity(self) -> float | None:
        """Exact path: the block estimates ``u`` lie on the lattice ``g / q`` (q the consistency
        denominator) around the block's true sum; at ``s = 0`` every released value does."""
        return None if not self.exact else self.granularity / self.consistency_denominator

    def leaves(self) -> Leaves:
        """The public layout of the measured leaves over the released values (blocks of ``b^s`` values from
        each chunk's start), what :func:`~dpstream.release.revisions.revise` spreads each closed block's total over."""
        return Leaves(length=self.block_size, chunk=self.max_range)

    #: The exact variance of one node's noise, in the values' units squared.
    node_variance = property(lambda self: self._arithmetic.node_variance)
    #: ``standard_errors(positions)`` and ``range_standard_error(start, stop)`` of the released values' noise, exact
    #: from the public structure, theta and a linear smoother (:mod:`dpstream.release.tops_errors`).
    standard_errors, range_standard_error = perturber_standard_errors, range_standard_error
    error_model = perturber_error_model  #: what they depend on, as plain data (None for a median smoother)

    def privacy(self, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
        """The guarantee: ``spent_epsilon``-DP (at most ``epsilon``) at event level for values in [0, threshold]; under
        zCDP ``spent_rho``-zCDP (at most ``rho``), stated with the (epsilon, delta) it implies at ``delta``."""
        return self._guarantee(f"h-s = {self.measured_levels} levels", delta)

    def _guarantee(self, levels: str, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
        """:meth:`privacy`, the measured levels named by ``levels`` (``"h-s = 3 levels"``), stated at ``delta`` under
        zCDP."""
        h_s = self.measured_levels
        if self.rho is not None:
            grid = self._arithmetic.noise
            hierarchy = Part(what="hierarchy", budget=self._arithmetic.budget,
                             noise=self._source.describe(self._arithmetic.law_name), text=(
                                 f"discrete Gaussian of sigma^2 = theta^2 {h_s} / (2 rho) = {float(grid.sigma2):.6g} "
                                 f"grid units^2 (sigma = {self.noise_scale:g}; g = {self.granularity:g}, theta = "
                                 f"{grid.units} units) on each of {levels} (L2 sensitivity theta sqrt({h_s}))"))
            chunks = Composition(kind="parallel", parts=(hierarchy,),
                                 layout=f"{{}}; a fresh hierarchy per {self.max_range} values (parallel)")
            return ZcdpGuarantee.of(chunks, neighbours=EVENT_LEVEL, delta=delta)
        if self.exact:
            noise = (
                f"discrete Laplace of scale {self.noise_scale_units.numerator}/{self.noise_scale_units.denominator} "
                f"grid units (= {self.noise_scale:g}; g = {self.granularity:g}, theta = {self.threshold_units} units) "
            )
        else:
            noise = f"Laplace noise of scale theta*(h-s)/eps = {self.noise_scale:g} "
        hierarchy = Part(what="hierarchy", budget=EpsilonDelta(self.spent_epsilon), noise=self._source.describe(),
                         text=f"{noise}on each of {levels} (eps/{h_s} each, sequential)")
        chunks = Composition(kind="parallel", parts=(hierarchy,),
                             layout=f"{{}}; a fresh hierarchy per {self.max_range} values (parallel)")
        return PrivacyGuarantee.of(chunks, neighbours=EVENT_LEVEL)

    # -- noise ---------------------------------------------------------------------------

    def _clock(self) -> int:
        """Clock position of the next value (chunks start where it is a multiple of r)."""
        return self.state.released + self.phase

    def _draw_chunk(self) -> None:
        """Draw the current chunk's node noise and make it consistent (its leaves' share, kept until the chunk ends)."""
        st, ar = self.state, self._arithmetic
        levels = ar.draw(self._source.sampler(self._clock() // self.max_range), self.blocks_per_chunk, self.fanout,
                         self.measured_levels)
        st.noise, st.noise_fraction = ar.consistent(levels, self.fanout, self.blocks_per_chunk)

    def _end_chunk(self) -> None:
        st = self.state
        st.noise = None
        st.noise_fraction = None
        st.chunk_total = self._arithmetic.zero
        st.block_start_total = self._arithmetic.zero
        st.block_end = min(self.block_size, self.max_range) - 1

    def _block_totals(self, segment: np.ndarray, done_ends: np.ndarray) -> tuple[np.ndarray, Any, Any]:
        """True sums of the blocks that end in ``segment`` (at indices ``done_ends``), and the chunk's running
        sum after the segment and where the block after the last of them starts (as the state holds them).

        On the exact path they are int64 sums of grid units, below 2^52 (:func:`check_chunk_sums`): exact.
        """
        st, ar = self.state, self._arithmetic
        cumulative = np.cumsum(np.concatenate(([st.chunk_total], segment)))  # [i+1]: after segment[i]
        end_totals = cumulative[done_ends + 1]
        totals = end_totals - np.concatenate(([st.block_start_total], end_totals[:-1]))
        block_start_total = ar.total(end_totals[-1].item()) if done_ends.size else st.block_start_total
        return totals, ar.total(cumulative[-1].item()), block_start_total

    def _block_values(self, totals: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """Block estimates ``u`` (real units) from true block totals and the chunk's noise."""
        return self._arithmetic.estimates(totals, self.state.noise, self.state.noise_fraction, blocks)

    # -- batch -----------------------------------------------------------------------------

    def release(self, values: object) -> np.ndarray:
        """Release a batch of values in [0, threshold] (continuing the stream); vectorized.

        Values must already be truncated (``np.minimum(values, threshold)``): a value above
        the threshold would break the privacy guarantee, so it is an error that names it.
        """
        return self._release(check_stream_values(values, self.threshold, clip=None, offset=self.state.released))

    def release_one(self, value: float) -> float:
        """Release one value in [0, threshold]; bit-identical to the batch path for a seed."""
        if type(value) is float and 0.0 <= value <= self.threshold:  # the common case, checked at once
            return self._release_one(value)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= self.threshold):
            check_stream_values([value], self.threshold, clip=None, offset=self.state.released)
        return self._release_one(float(value))

    def _release(self, values: np.ndarray) -> np.ndarray:
        """The batch path, for values already checked and truncated."""
        values = self._arithmetic.units(values)
        out = np.empty(values.size, dtype=np.float64)
        done = 0
        while done < values.size:
            position = self._clock() % self.max_range
            take = min(values.size - done, self.max_range - position)
            out[done : done + take] = self._release_in_chunk(values[done : done + take], position)
            done += take
        return out

    def _release_in_chunk(self, segment: np.ndarray, position: int) -> np.ndarray:
        st, bs, n = self.state, self.block_size, segment.size
        seg = self._segment(segment, position)
        counts = seg.done_ends + position - seg.done * bs + 1  # values of each completed block
        if bs == 1:
            predictions = np.full(seg.done.size + 1, st.prediction)  # never used: count is 1
            new_smoother_state = st.smoother_state
        else:
            after, new_smoother_state = self.smoother.step(st.smoother_state, seg.sums / counts)
            predictions = np.concatenate(([st.prediction], after))
        out = np.repeat(predictions[: seg.blocks.size], seg.lengths)
        out[seg.done_ends] = seg.sums - (counts - 1) * predictions[: seg.done.size]
        self._advance(seg, position, n, predictions, new_smoother_state)
        return out

    def _segment(self, segment: np.ndarray, position: int) -> _Segment:
        """The blocks ``segment`` (values of one chunk from ``position`` on) touches, and the estimates
        ``u`` of those it completes (drawing the chunk's noise first if it starts here)."""
        st, bs, n = self.state, self.block_size, segment.size
        if st.noise is None:
            self._draw_chunk()
        blocks = np.arange(position // bs, (position + n - 1) // bs + 1)
        starts = blocks[1:] * bs - position  # where each later block starts in the segment
        ends = np.minimum((blocks + 1) * bs, self.max_range) - 1
        done = blocks[ends <= position + n - 1]
        done_ends = ends[: done.size] - position  # indices into segment
        totals, chunk_total, block_start_total = self._block_totals(segment, done_ends)
        return _Segment(blocks=blocks, lengths=np.diff(np.concatenate(([0], starts, [n]))), done=done,
                        done_ends=done_ends, sums=self._block_values(totals, done), chunk_total=chunk_total,
                        block_start_total=block_start_total)

    def _advance(self, seg: _Segment, position: int, n: int, predictions: np.ndarray, smoother_state: Any) -> None:
        """Move the state past a released segment: its totals, the next prediction, the next block's end."""
        st = self.state
        st.released += n
        st.chunk_total = seg.chunk_total
        st.prediction = float(predictions[seg.done.size])
        st.smoother_state = smoother_state
        if seg.done.size:
            st.block_start_total = seg.block_start_total
            st.block_end = int(min((seg.done[-1] + 2) * self.block_size, self.max_range) - 1)
        if position + n == self.max_range:
            self._end_chunk()

    # -- one value -------------------------------------------------------------------------

    def _release_one(self, value: float) -> float:
        """The one-value path, for a value already checked and truncated."""
        st = self.state
        if st.noise is None:
            self._draw_chunk()
        position = st.released % self.max_range
        st.chunk_total += self._arithmetic.unit(value)
        st.released += 1
        if position != st.block_end:
            return st.prediction
        bs = self.block_size
        block = position // bs
        total = st.chunk_total - st.block_start_total
        block_sum = self._arithmetic.estimate(total, st.noise, st.noise_fraction, block)
        count = position - block * bs + 1
        out = block_sum - (count - 1) * st.prediction
        if bs > 1:
            after, st.smoother_state = self.smoother.step(st.smoother_state, np.array([block_sum / count]))
            st.prediction = float(after[0])
        if position + 1 == self.max_range:
            self._end_chunk()
        else:
            st.block_start_total = st.chunk_total
            st.block_end = min(position + 1 + bs, self.max_range) - 1
        return out


def _as_smoother_state(state: Any) -> Any:
    """A smoother state read back from JSON: lists (a JSON reader's tuples) become tuples again."""
    if isinstance(state, list):
        return tuple(_as_smoother_state(item) for item in state)
    if isinstance(state, tuple):
        return tuple(_as_smoother_state(item) for item in state)
    return state
