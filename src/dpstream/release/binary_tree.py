"""The binary-tree continual counter (Chan, Shi and Song; Dwork et al.; PAK Section II-D).

A complete binary tree covers ``n = max_range`` values of the stream (the leaves, padded with
zeros to ``2^h``, ``h = ceil(log2 n)``); values lie in ``[0, tau]``, ``tau = upper_bound`` (B for
the plain counter, PAK's threshold when PAK runs it after its hold-out).  Every node below the
would-be root holds the noisy sum of its leaves, ``Lap(tau h / eps)`` per node, so the ``h``
measured levels each spend ``eps / h``.
The noisy count after ``i`` values, ``c^(i)``, is the sum of the nodes that tile ``[0, i)``: the
top-level nodes it covers plus one node per lower level whose bit is set in ``i`` -- at most
``h <= ceil(log2 n) + 1`` nodes (:func:`prefix_nodes`).  The root itself is never measured: it is
only needed for ``i = 2^h`` and its two children serve there, which keeps PAK's noise scale
``tau log2(n) / eps`` exactly.

Online release.  All node noise of a tree is drawn when the tree starts (``2^h`` draws, in the
same order whether values come one by one or in batches), and the noisy count of every prefix
is then the true running sum plus a precomputed noise prefix.  A node's noise is used only once
its interval is complete or is part of the tiling of the current prefix, exactly as in the
online algorithm; drawing it earlier changes nothing in distribution.  After ``n`` values a fresh
tree starts (parallel composition), so the counter also serves unbounded streams.

Outputs.  Each released value is the increment ``c^(i) - c^(i-1)`` of the noisy count, so the
sum of the outputs at positions ``[0, i)`` is exactly ``c^(i)`` and a range sum ``[i, j)`` is
``c^(j) - c^(i)``; the increments are post-processing of the noisy counts.

Privacy
-------
epsilon-DP at event level for values in ``[0, tau]`` (neighbours differ in the value at one
position): one value changes one node per measured level by at most ``tau``, each of the ``h``
levels is ``eps / h``-DP with ``Lap(tau h / eps)`` (sequential composition over levels), and
the trees of successive blocks of ``n`` values read disjoint positions (parallel composition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_epsilon,
    check_magnitude,
    check_positive_int,
    check_stream_values,
)
from dpstream.hierarchy import num_levels
from dpstream.noise import laplace_noise
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.rng import Seed, make_rng

__all__ = ["BinaryTreeCounter", "BinaryTreeState", "prefix_nodes", "noise_prefix_sums"]


def prefix_nodes(count: int, levels: int) -> list[tuple[int, int]]:
    """The (level, index) nodes whose intervals tile ``[0, count)`` in a tree of ``levels`` levels.

    Level ``l`` node ``k`` covers leaves ``[k 2^l, (k + 1) 2^l)``; the top level ``levels - 1``
    has two nodes (the root is not measured).

    >>> prefix_nodes(7, 3)
    [(2, 0), (1, 2), (0, 6)]
    >>> prefix_nodes(8, 3)
    [(2, 0), (2, 1)]
    """
    top = levels - 1
    nodes = [(top, k) for k in range(count >> top)]
    for level in range(top - 1, -1, -1):
        if (count >> level) & 1:
            nodes.append((level, (count >> level) - 1))
    return nodes


def noise_prefix_sums(noise: list[np.ndarray]) -> np.ndarray:
    """``N[i]``, the sum of the noise of :func:`prefix_nodes` ``(i, h)``, for every ``i in 0..2^h``.

    Vectorized in O(2^h): the top level contributes a running sum; a lower level ``l`` adds its
    node ``2k`` to the second half of every block of ``2^(l+1)`` prefixes (the prefixes whose
    bit ``l`` is set).

    >>> noise_prefix_sums([np.array([1., 2, 3, 4]), np.array([10., 20])]).tolist()
    [0.0, 1.0, 10.0, 13.0, 30.0]
    """
    levels = len(noise)
    size = noise[0].size  # 2^h leaves
    prefix = np.zeros(size + 1)
    top = noise[-1]
    width = size // top.size
    prefix[width::width] = np.cumsum(top)
    body = prefix[:size]
    for level in range(levels - 2, -1, -1):
        block = 2 ** (level + 1)
        body.reshape(-1, block)[:, block // 2 :] += noise[level][0::2, None]
    # prefixes inside the last top-level block also carry the full top-level nodes before it
    for k in range(top.size):
        start, stop = k * width + 1, (k + 1) * width
        body[start:stop] += np.sum(top[:k])
    return prefix


@dataclass(kw_only=True)
class BinaryTreeState:
    """The counter's streaming state (SECRET: it holds the current tree's noise).

    ``released`` counts values released; ``running`` is the true sum of the current tree's
    values; ``increments`` the precomputed noise of every output of the current tree (None
    between trees); ``count`` the noisy count of all values released so far.
    """

    released: int
    running: float
    increments: np.ndarray | None
    count: float


class BinaryTreeCounter:
    """Continual counting with the binary-tree mechanism, for values in ``[0, upper_bound]``.

    Parameters
    ----------
    epsilon : float
        Budget of the counter.
    upper_bound : float
        tau: values must lie in ``[0, tau]``.  Public: B for the plain counter, or a threshold
        already chosen (PAK's tau, with values truncated at it).
    max_range : int
        n: leaves of one tree (the stream length PAK assumes; the largest query range); a
        fresh tree every n values.
    clip : bool
        Clip values outside ``[0, upper_bound]`` instead of raising (only sensible when the
        bound is the public B).
    seed : int, Generator or None
        Source of all noise.

    Privacy
    -------
    epsilon-DP at event level (neighbours: streams differing in the value at one position),
    values in ``[0, upper_bound]``; ``Lap(tau h / eps)`` on each of ``h = ceil(log2 n)`` levels
    (sequential), disjoint trees in parallel.  See the module docstring.

    Examples
    --------
    >>> bt = BinaryTreeCounter(epsilon=1e9, upper_bound=1.0, max_range=8, seed=0)
    >>> out = bt.release(np.ones(10))
    >>> np.round(np.cumsum(out), 6).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    >>> bt.levels, bt.noise_scale == 3e-9
    (3, True)
    """

    #: Values held out before the release starts: none (the interface of the release pipelines).
    hold = 0

    def __init__(
        self, *, epsilon: float, upper_bound: float, max_range: int = 2**20, clip: bool = False, seed: Seed = None
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.upper_bound = check_bound(upper_bound)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        self.clip = check_bool(clip, "clip")
        self.levels = num_levels(self.max_range, 2)
        self.noise_scale = check_magnitude(self.upper_bound * self.levels / self.epsilon,
                                           "the noise scale upper_bound * levels / epsilon")
        check_magnitude(self.upper_bound * self.max_range, "upper_bound * max_range (the largest sum of a tree)")
        self._rng = make_rng(seed)
        self.noise: list[np.ndarray] | None = None  # node noise of the current tree (SECRET)
        self.state = BinaryTreeState(released=0, running=0.0, increments=None, count=0.0)

    @property
    def threshold(self) -> float:
        """The bound values are truncated at, known from the start: ``upper_bound`` (the interface
        of the release pipelines, whose threshold is None until their hold-out ends)."""
        return self.upper_bound

    @property
    def position(self) -> int:
        """Number of values released so far."""
        return self.state.released

    @property
    def count(self) -> float:
        """The noisy count of every value released so far."""
        return self.state.count

    def privacy(self) -> PrivacyGuarantee:
        """epsilon-DP at event level for values in [0, upper_bound]."""
        return PrivacyGuarantee(
            epsilon=self.epsilon,
            delta=0.0,
            neighbours=EVENT_LEVEL,
            composition=(
                f"Lap(tau*h/eps) = Lap({self.noise_scale:g}) on every node of h = {self.levels} levels "
                f"(eps/{self.levels} each, sequential); a fresh tree per {self.max_range} values (parallel)"
            ),
        )

    def _start_tree(self) -> np.ndarray:
        size = 2**self.levels
        self.noise = [laplace_noise(self._rng, self.noise_scale, size >> level) for level in range(self.levels)]
        increments = np.diff(noise_prefix_sums(self.noise))[: self.max_range]
        self.state.increments = increments
        return increments

    def release(self, values: object) -> np.ndarray:
        """Release a batch of values in ``[0, upper_bound]``: the increments of the noisy count."""
        clip = True if self.clip else None
        values = check_stream_values(values, self.upper_bound, clip=clip, offset=self.state.released)
        return self._release(values)

    def _release(self, values: np.ndarray) -> np.ndarray:
        st = self.state
        out = np.empty(values.size)
        done = 0
        while done < values.size:
            position = st.released % self.max_range
            increments = st.increments if st.increments is not None else self._start_tree()
            take = min(values.size - done, self.max_range - position)
            segment = values[done : done + take]
            out[done : done + take] = segment + increments[position : position + take]
            st.running += float(np.sum(segment))
            st.count += float(np.sum(out[done : done + take]))
            st.released += take
            done += take
            if position + take == self.max_range:
                st.increments, st.running = None, 0.0
        return out

    def release_one(self, value: float) -> float:
        """Release one value; equals the batch path for the same seed."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= self.upper_bound:
            return float(self._release(np.array([float(value)]))[0])
        return float(self.release([value])[0])
