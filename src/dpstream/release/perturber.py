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

Privacy
-------
epsilon-DP at event level for streams with values in [0, theta] (neighbours differ in one
value; theta must not depend on the stream after the hold-out).  One value changes one node per
measured level by at most theta, so ``Lap(theta (h - s) / eps)`` is ``eps / (h - s)``-DP per
level and eps-DP over the ``h - s`` levels (sequential composition).  Chunks are disjoint
(parallel composition), and consistency and smoothing are post-processing.

The streaming state is explicit (:class:`PerturberState`): noise is drawn once per chunk and
kept until the chunk ends, so saving and restoring the state (with the generator's state)
never re-draws noise for a released position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream._checks import (
    check_bound,
    check_epsilon,
    check_nonnegative,
    check_nonnegative_int,
    check_positive_int,
    check_stream_values,
)
from dpstream.hierarchy import draw_noise_levels, make_consistent, num_levels
from dpstream.noise.sampler import NoiseSampler, make_noise
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.rng import Seed, make_rng
from dpstream.smoothers import Smoother, make_smoother

__all__ = ["HierarchicalPerturber", "PerturberState", "optimal_smoothed_levels"]


def optimal_smoothed_levels(epsilon: float, max_range: int, fanout: int) -> int:
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

    >>> [optimal_smoothed_levels(e, 2**20, 16) for e in (0.01, 0.05, 0.1, 1.0)]
    [3, 3, 2, 2]
    """
    epsilon = check_epsilon(epsilon)
    h = num_levels(max_range, fanout)
    log_r = math.log(max_range) / math.log(fanout)
    s = np.linspace(0.0, h - 1.0, 1000 * (h - 1) + 1)
    error = (fanout - 1) * np.maximum(log_r - s, 0.0) ** 3 * 2.0 / epsilon**2 + np.exp(2 * s * math.log(fanout)) / 36.0
    return int(min(h - 1, max(0, round(float(s[np.argmin(error)])))))


@dataclass(kw_only=True)
class PerturberState:
    """Everything the perturber needs to continue a stream (the generator aside).

    Attributes
    ----------
    released : int
        Values released so far.
    noise : ndarray or None
        Consistent noise of the current chunk's leaves (blocks); None between chunks.
    chunk_total, block_start_total : float
        Running sum of the chunk's values, and its value where the current block started.
    block_end : int
        Position in the chunk of the current block's last value.
    prediction : float
        The smoother's prediction for the values of the current block.
    smoother_state : object
        The smoother's own state.
    """

    released: int
    noise: np.ndarray | None
    chunk_total: float
    block_start_total: float
    block_end: int
    prediction: float
    smoother_state: Any


class HierarchicalPerturber:
    """Release a stream in [0, threshold] with an online, consistent hierarchy and a smoother.

    Parameters
    ----------
    threshold : float
        theta: values must already be truncated to [0, theta].  Public.
    epsilon : float
        Budget of the hierarchy.
    max_range : int
        r: chunk length and the largest query range the hierarchy serves (paper: 2^20).
    fanout : int
        b (paper: 16).
    smoothed_levels : int or None
        s; None chooses it by Eq. 7.  ``0`` releases every leaf (no smoothing).
    smoother : str or Smoother
        recent (default), mean, median, moving_average or exponential.
    seed : int, Generator or None
        Source of all noise.
    noise : NoiseSampler or None
        Where the node noise comes from; None (default) is numpy's float Laplace on the
        generator of ``seed``.  ``ZeroNoise()`` makes the arithmetic exact for tests.
    prior : float, optional
        The smoother's start, a_0: the prediction for every value of the first block.  None
        (default) is Algorithm 1's ``theta / 2``; a private estimate of the level (e.g. the
        noisy mean of the hold-out, :func:`~dpstream.thresholds.model.noisy_mean`) is better.
        It must not depend on the values this perturber releases; clipped to [0, theta].

    Examples
    --------
    >>> p = HierarchicalPerturber(threshold=10, epsilon=1.0, max_range=256, fanout=16, seed=1)
    >>> out = p.release(np.full(512, 5.0))
    >>> out.shape, p.smoothed_levels
    ((512,), 1)
    """

    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float,
        max_range: int = 2**20,
        fanout: int = 16,
        smoothed_levels: int | None = None,
        smoother: str | Smoother = "recent",
        seed: Seed = None,
        noise: NoiseSampler | None = None,
        prior: float | None = None,
    ) -> None:
        self.threshold = check_bound(threshold, "threshold")
        self.epsilon = check_epsilon(epsilon)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        self.fanout = check_positive_int(fanout, "fanout", minimum=2)
        self.levels = num_levels(self.max_range, self.fanout)
        if smoothed_levels is None:
            smoothed_levels = optimal_smoothed_levels(self.epsilon, self.max_range, self.fanout)
        self.smoothed_levels = check_nonnegative_int(smoothed_levels, "smoothed_levels")
        if self.smoothed_levels >= self.levels:
            raise ValueError(
                f"smoothed_levels must be < the hierarchy's {self.levels} levels "
                f"(ceil(log_{self.fanout} {self.max_range})), got {self.smoothed_levels}."
            )
        self.smoother = make_smoother(smoother)
        self.block_size = self.fanout**self.smoothed_levels
        self.measured_levels = self.levels - self.smoothed_levels
        self.noise_scale = self.threshold * self.measured_levels / self.epsilon
        self.blocks_per_chunk = -(-self.max_range // self.block_size)
        self._rng = make_rng(seed)
        self._noise = make_noise(noise, self._rng)
        prior = self.threshold / 2.0 if prior is None else min(check_nonnegative(prior, "prior"), self.threshold)
        self.prior = prior
        self.state = PerturberState(
            released=0,
            noise=None,
            chunk_total=0.0,
            block_start_total=0.0,
            block_end=min(self.block_size, self.max_range) - 1,
            prediction=prior,
            smoother_state=self.smoother.init(prior),
        )

    def privacy(self) -> PrivacyGuarantee:
        """The guarantee: epsilon-DP at event level for values in [0, threshold]."""
        return PrivacyGuarantee(
            epsilon=self.epsilon,
            delta=0.0,
            neighbours=EVENT_LEVEL,
            composition=(
                f"Laplace noise of scale theta*(h-s)/eps = {self.noise_scale:g} on each of "
                f"h-s = {self.measured_levels} levels (eps/{self.measured_levels} each, sequential); "
                f"a fresh hierarchy per {self.max_range} values (parallel)"
            ),
        )

    # -- noise ---------------------------------------------------------------------------

    def _draw_chunk(self) -> np.ndarray:
        levels = draw_noise_levels(
            self._rng, self.blocks_per_chunk, self.fanout, self.measured_levels, self.noise_scale, noise=self._noise
        )
        noise = make_consistent(levels, self.fanout)[0][: self.blocks_per_chunk].copy()
        self.state.noise = noise
        return noise

    def _end_chunk(self) -> None:
        st = self.state
        st.noise = None
        st.chunk_total = 0.0
        st.block_start_total = 0.0
        st.block_end = min(self.block_size, self.max_range) - 1

    # -- batch -----------------------------------------------------------------------------

    def release(self, values: object) -> np.ndarray:
        """Release a batch of values in [0, threshold] (continuing the stream); vectorized.

        Values must already be truncated (``np.minimum(values, threshold)``): a value above
        the threshold would break the privacy guarantee, so it is an error that names it.
        """
        return self._release(check_stream_values(values, self.threshold, clip=None, offset=self.state.released))

    def release_one(self, value: float) -> float:
        """Release one value in [0, threshold]; bit-identical to the batch path for a seed."""
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= self.threshold):
            check_stream_values([value], self.threshold, clip=None, offset=self.state.released)
        return self._release_one(float(value))

    def _release(self, values: np.ndarray) -> np.ndarray:
        """The batch path, for values already checked and truncated."""
        out = np.empty(values.size, dtype=np.float64)
        done = 0
        while done < values.size:
            position = self.state.released % self.max_range
            take = min(values.size - done, self.max_range - position)
            out[done : done + take] = self._release_in_chunk(values[done : done + take], position)
            done += take
        return out

    def _release_in_chunk(self, segment: np.ndarray, position: int) -> np.ndarray:
        st, bs, n = self.state, self.block_size, segment.size
        noise = st.noise if st.noise is not None else self._draw_chunk()
        totals = np.cumsum(np.concatenate(([st.chunk_total], segment)))  # totals[i+1]: after segment[i]
        first_block = position // bs
        blocks = np.arange(first_block, (position + n - 1) // bs + 1)
        ends = np.minimum((blocks + 1) * bs, self.max_range) - 1
        done_blocks = blocks[ends <= position + n - 1]
        done_ends = ends[: done_blocks.size] - position  # indices into segment
        counts = ends[: done_blocks.size] - done_blocks * bs + 1
        end_totals = totals[done_ends + 1]
        start_totals = np.concatenate(([st.block_start_total], end_totals[:-1]))
        sums = (end_totals - start_totals) + noise[done_blocks]
        if bs == 1:
            predictions = np.full(done_blocks.size + 1, st.prediction)  # never used: count is 1
            new_smoother_state = st.smoother_state
        else:
            after, new_smoother_state = self.smoother.step(st.smoother_state, sums / counts)
            predictions = np.concatenate(([st.prediction], after))
        out = predictions[(position + np.arange(n)) // bs - first_block]
        out[done_ends] = sums - (counts - 1) * predictions[: done_blocks.size]
        st.released += n
        st.chunk_total = float(totals[-1])
        st.prediction = float(predictions[done_blocks.size])
        st.smoother_state = new_smoother_state
        if done_blocks.size:
            st.block_start_total = float(end_totals[-1])
            st.block_end = int(min((done_blocks[-1] + 2) * bs, self.max_range) - 1)
        if position + n == self.max_range:
            self._end_chunk()
        return out

    # -- one value -------------------------------------------------------------------------

    def _release_one(self, value: float) -> float:
        """The one-value path, for a value already checked and truncated."""
        st = self.state
        noise = st.noise if st.noise is not None else self._draw_chunk()
        position = st.released % self.max_range
        st.chunk_total += value
        st.released += 1
        if position != st.block_end:
            return st.prediction
        bs = self.block_size
        block = position // bs
        block_sum = (st.chunk_total - st.block_start_total) + float(noise[block])
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
