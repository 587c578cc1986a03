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

Exact noise on a public grid (the default).  Values are rounded to the nearest multiple of a
public granularity ``g`` (default: the largest power of two at most ``tau / 2^20``; PAK passes
the one of its bound B) and held as int64 grid units; tau is rounded **up** to ``tau_units``
steps.  Every node is its integer sum plus discrete Laplace noise of scale ``tau_units h / eps``
grid units, rounded up to a multiple of ``2^-k``.  Noisy counts and their increments are then
integers times ``g``: with a power-of-two ``g`` they are exact floats as long as they stay
below ``2^53`` grid units, which the constructor checks up front (``n tau_units`` plus 40 noise
scales per node on a prefix must stay below ``2^53``; a prefix's noise exceeds that with
probability below ``h e^-40``, and a count that would reach ``2^53`` units raises rather than
rounds).  ``noise=FloatNoise(rng)`` runs the float algorithm of the studies (NOT for
publication): the same code on the float arithmetic of :mod:`dpstream.hierarchy.arithmetic`.

Privacy
-------
epsilon'-DP at event level for values in ``[0, tau]`` (neighbours differ in the value at one
position), with ``epsilon' = tau_units h / beta <= epsilon`` for the rounded-up scale ``beta``:
one value changes one node per measured level by at most ``tau_units`` grid units, each of the
``h`` levels is ``tau_units / beta``-DP (sequential composition over levels), and the trees of
successive blocks of ``n`` values read disjoint positions (parallel composition).  Every node
is an exact integer and every output a function of the nodes, so the guarantee holds for the
numbers produced.  With ``key=``, tree ``i`` draws from ``KeyedBits(key, ("binary-tree", i))``.

zCDP (``rho=`` instead of ``epsilon``).  Every node gets exact discrete Gaussian noise instead,
of variance parameter ``sigma^2 = tau_units^2 h / (2 rho)`` grid units^2 rounded up
(:class:`~dpstream.noise.grid_gaussian.GridGaussian`): one value changes one node per measured
level by at most ``tau_units``, an L2 change of ``tau_units sqrt(h)``, so the tree is
``spent_rho``-zCDP (at most rho), stated with the (epsilon, delta) it implies
(:class:`~dpstream.accounting.ZcdpGuarantee`).  Where Laplace noise pays for the ``h`` levels
with a scale ``h`` times one node's (variance ``h^2``), Gaussian noise pays ``sqrt(h)`` in sigma
(variance ``h``).

Error bars.  The noise of a noisy count is the sum of the independent noise of its tiling's
nodes, so its variance is the number of those nodes times one node's variance
(:meth:`BinaryTreeCounter.count_standard_errors`), and that of a released increment or a range
sum the number of nodes in the symmetric difference of two tilings
(:meth:`BinaryTreeCounter.range_standard_error`): exact, as the noise is linear and its law known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_epsilon,
    check_grid,
    check_magnitude,
    check_memory,
    check_positive_int,
    check_stream_values,
)
from dpstream._params import Params
from dpstream.accounting import DEFAULT_DELTA, ZcdpGuarantee, check_budget, rho_for
from dpstream.hierarchy import num_levels
from dpstream.hierarchy.arithmetic import MAX_EXACT_UNITS, arithmetic
from dpstream.noise.bits import BitsSeed
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import EVENT_LEVEL, Composition, Part, PrivacyGuarantee
from dpstream.release.contract import BINARY_TREE, read_header, snapshot_header
from dpstream.release.wevent import event_epsilon, spent_of_scale, wevent_privacy

__all__ = ["MAX_EXACT_UNITS", "BinaryTreeCounter", "BinaryTreeState", "increment_standard_errors", "prefix_nodes",
           "noise_prefix_sums", "ZcdpBinaryTree"]


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
    bit ``l`` is set).  Integer noise gives integer (int64) sums, exactly.

    >>> noise_prefix_sums([np.array([1., 2, 3, 4]), np.array([10., 20])]).tolist()
    [0.0, 1.0, 10.0, 13.0, 30.0]
    >>> noise_prefix_sums([np.array([1, 2, 3, 4]), np.array([10, 20])]).tolist()
    [0, 1, 10, 13, 30]
    """
    levels = len(noise)
    size = noise[0].size  # 2^h leaves
    prefix = np.zeros(size + 1, dtype=np.result_type(*noise))
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


def _tiling_counts(counts: np.ndarray, levels: int) -> np.ndarray:
    """``len(prefix_nodes(c, levels))`` for each ``c`` of ``counts`` (inside one tree), vectorized.

    >>> _tiling_counts(np.array([0, 7, 8]), 3).tolist()
    [0, 3, 2]
    """
    top = levels - 1
    counts = np.asarray(counts, dtype=np.int64)
    bits = sum((counts >> level) & 1 for level in range(top))
    return (counts >> top) + bits


def increment_standard_errors(positions: object, *, levels: int, max_range: int, node_variance: float
                              ) -> np.ndarray:
    """The exact standard error of the released value (an increment) at each of ``positions`` of a binary tree:
    the nodes of the tilings of ``a`` and ``a + 1`` (``a`` the position in its tree; ``a + 1`` the whole tree at
    its end) that do not cancel, as :meth:`BinaryTreeCounter.range_standard_error` counts them, vectorized.

    >>> increment_standard_errors([0, 1, 3], levels=3, max_range=8, node_variance=4.0).tolist()
    [2.0, 2.8284271247461903, 3.4641016151377544]
    """
    a = np.asarray(positions, dtype=np.int64).ravel()
    if a.size and a.min() < 0:
        raise ValueError(f"positions must be >= 0, got {int(a.min())}.")
    a = a % max_range
    b, top = a + 1, levels - 1
    shared = np.minimum(a >> top, b >> top)  # top-level nodes in both tilings
    for level in range(top):
        shared += ((a >> level) & 1) & ((a >> level) == (b >> level))
    nodes = _tiling_counts(a, levels) + _tiling_counts(b, levels) - 2 * shared
    return np.sqrt(nodes * node_variance)


@dataclass(kw_only=True)
class BinaryTreeState:
    """The counter's streaming state (SECRET: it holds the current tree's noise).

    ``released`` counts values released; ``running`` is the true sum of the current tree's
    values; ``increments`` the precomputed noise of every output of the current tree (None
    between trees); ``count`` the noisy count of all values released so far.  On the exact path
    ``running``, ``increments`` and ``count`` are in grid units (ints), on the float path reals.
    """

    released: int
    running: int | float
    increments: np.ndarray | None
    count: int | float


class BinaryTreeCounter(Params):
    """Continual counting with the binary-tree mechanism, for values in ``[0, upper_bound]``.

    Parameters
    ----------
    epsilon : float
        Budget of the counter (pure DP, discrete Laplace noise).
    rho : float, optional
        Instead of ``epsilon``: a zCDP budget, discrete Gaussian noise (see the module docstring).
    upper_bound : float
        tau: values must lie in ``[0, tau]``.  Public: B for the plain counter, or a threshold
        already chosen (PAK's tau, with values truncated at it).
    max_range : int
        n: leaves of one tree (the stream length PAK assumes; the largest query range); a
        fresh tree every n values.
    clip : bool
        Clip values outside ``[0, upper_bound]`` instead of raising (only sensible when the
        bound is the public B).
    granularity : float, optional
        g, the public grid (exact path); default the largest power of two at most
        ``upper_bound / 2^20``.
    seed : None, int, numpy Generator or bit source
        Bits of the exact samplers: None (default) is the OS CSPRNG, an int a replayable PCG64.
    noise : NoiseSampler or NoiseSource, optional
        Instead of ``seed``: ``ZeroNoise()`` (tests) or ``FloatNoise(rng)`` (the studies' float
        algorithm, NOT for publication).
    key : bytes, optional
        Instead of ``seed``: tree ``i`` draws from ``KeyedBits(key, ("binary-tree", i))``.
    w_event : int, optional
        w: ``epsilon`` protects every ``w`` consecutive values (:class:`~dpstream.privacy.WEvent`); each level's
        noise is then ``w`` times the event-level scale (:mod:`dpstream.release.wevent`: group privacy is exact here).

    Privacy
    -------
    ``privacy().epsilon`` (at most epsilon) -DP at event level (neighbours: streams differing
    in the value at one position), values in ``[0, upper_bound]``; discrete Laplace of scale
    ``tau h / eps`` (grid units, rounded up) on each of ``h = ceil(log2 n)`` levels
    (sequential), disjoint trees in parallel.  See the module docstring.

    Examples
    --------
    >>> bt = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, seed=0)
    >>> out = bt.release(np.ones(10))
    >>> bool(np.all(out / bt.granularity == np.rint(out / bt.granularity)))  # multiples of g
    True
    >>> bt.levels, bt.granularity == 2.0**-20, bt.noise_scale == 3.0
    (3, True, True)
    """

    #: Values held out before the release starts: none (the interface of the release pipelines).
    hold = 0
    #: The ``mechanism`` field of its snapshots.
    _KIND = BINARY_TREE

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        upper_bound: float,
        max_range: int = 2**20,
        clip: bool = False,
        granularity: float | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | NoiseSource | None = None,
        key: bytes | None = None,
        w_event: int | None = None,
        rho: float | None = None,
    ) -> None:
        self.epsilon, self.rho = check_budget(epsilon, rho)
        #: With ``w_event``: the window w, and ``epsilon`` is what each value spends (the window's epsilon / w).
        self.w_event = None if w_event is None else check_positive_int(w_event, "w_event")
        if self.w_event is not None:
            if self.rho is not None:
                raise ValueError("w_event applies to the pure-DP tree (epsilon), not under zCDP (rho).")
            self.epsilon = event_epsilon(self.epsilon, self.w_event, theta=1.0, period=None, bound=None)
        bound = check_bound(upper_bound)
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
        self.clip = check_bool(clip, "clip")
        self.levels = num_levels(self.max_range, 2)
        check_magnitude(bound * self.levels / (self.epsilon or self.rho), "the noise scale upper_bound * levels / "
                        f"{'epsilon' if self.rho is None else 'rho'}")
        check_magnitude(bound * self.max_range, "upper_bound * max_range (the largest sum of a tree)")
        self._source = make_source(seed=seed, noise=noise, key=key, identity=("binary-tree",))
        self.exact = self._source.exact
        if self.exact:
            check_grid(bound, granularity)
        self._arithmetic = arithmetic(self.exact, bound=bound, epsilon=self.epsilon, levels=self.levels,
                                      granularity=granularity, rho=self.rho)
        self.granularity, self.upper_bound = self._arithmetic.granularity, self._arithmetic.bound
        self.noise_scale, self.spent_epsilon = self._arithmetic.scale_value, self._arithmetic.spent_epsilon
        self.spent_rho = None if self.rho is None else self._arithmetic.budget.rho  # type: ignore[attr-defined]
        if self.exact:
            self._check_exact_counts()
        check_memory(self.max_range, "max_range")  # the noise of a tree's 2^h leaves is drawn when it starts
        self.noise: list[np.ndarray] | None = None  # node noise of the current tree (SECRET; grid units if exact)
        zero = self._arithmetic.zero
        self._state = BinaryTreeState(released=0, running=zero, increments=None, count=zero)
        self._params = dict(epsilon=epsilon, upper_bound=upper_bound, max_range=max_range, clip=clip,
                            granularity=granularity, **({} if rho is None else {"rho": rho}))
        if w_event is not None:
            self._params["w_event"] = w_event

    def _check_exact_counts(self) -> None:
        """Refuse a grid on which a noisy count could reach 2^53 grid units (see the module docstring)."""
        grid = self._arithmetic.noise
        self.bound_units, self.noise_scale_units = grid.units, grid.scale
        worst = 2**self.levels * self.bound_units + 40 * self.levels * self.noise_scale_units
        if worst >= MAX_EXACT_UNITS:
            raise ValueError(
                f"max_range * upper_bound / granularity plus the noise must stay below 2^53 grid units so that "
                f"counts are exact, got {float(worst):.4g} units; use a coarser granularity or a smaller max_range."
            )

    # -- the streaming contract: state and from_state ----------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot of the counter as plain data (SECRET: the key or the noise; see :mod:`dpstream.release.contract`).

        ``type(self).from_state(state)`` continues exactly where the snapshot was taken.
        """
        return {**snapshot_header(self._KIND, self._params, self._source), "counter": self.stream_state()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BinaryTreeCounter:
        """The counter a :attr:`state` snapshot describes, continuing where it was taken."""
        params, source = read_header(state, cls._KIND)
        # a zCDP tree's snapshot keeps its (epsilon, delta) target, so it is stated at that delta again; one taken
        # before it did keeps its rho alone and is stated at the default delta
        zcdp_target = cls is BinaryTreeCounter and "delta" in params
        counter = (ZcdpBinaryTree if zcdp_target else cls)(**params, noise=source)
        counter.resume_stream(state["counter"])
        return counter

    def stream_state(self) -> dict[str, Any]:
        """The counter's own progress as plain data, without its parameters and noise source
        (what a mechanism that runs the counter on its own source stores).  With a keyed source
        the current tree's noise is left out: it is recomputed from the key."""
        st = self._state
        increments = None if self._source.keyed or st.increments is None else st.increments.copy()
        return {"released": st.released, "running": st.running, "count": st.count, "increments": increments}

    def resume_stream(self, data: dict[str, Any]) -> None:
        """Continue from :meth:`stream_state` (on a counter built with the same parameters and source)."""
        increments = data["increments"]
        if increments is None and data["released"] % self.max_range and not self._source.keyed:
            raise ValueError("a binary-tree snapshot taken inside a tree must carry its noise (an unkeyed source "
                             "cannot recompute it).")
        self._state = BinaryTreeState(released=int(data["released"]), running=data["running"],
                                      increments=None if increments is None else np.asarray(increments),
                                      count=data["count"])
        self.noise = None

    @property
    def threshold(self) -> float:
        """The bound values are truncated at, known from the start: ``upper_bound`` (the interface
        of the release pipelines, whose threshold is None until their hold-out ends)."""
        return self.upper_bound

    @property
    def position(self) -> int:
        """Number of values released so far."""
        return self._state.released

    @property
    def count(self) -> float:
        """The noisy count of every value released so far (grid units times g, correctly rounded)."""
        return self._arithmetic.released_one(self._state.count)

    def privacy(self, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
        """``spent_epsilon``-DP (at most epsilon) at event level for values in [0, upper_bound]; with ``w_event``,
        ``w spent_epsilon`` per window of w values (each level's L1 sensitivity is ``w tau``,
        :mod:`dpstream.release.wevent`); under zCDP ``spent_rho``-zCDP, stated with the (epsilon, delta) it
        implies at ``delta``."""
        if self.rho is not None:
            grid = self._arithmetic.noise
            noise = (f"discrete Gaussian of sigma^2 = tau^2 h / (2 rho) = {float(grid.sigma2):.6g} grid units^2 "
                     f"(sigma = {self.noise_scale:g}; g = {self.granularity:g}, tau = {grid.units} units)")
            how = "L2 sensitivity tau sqrt(h)"
        elif self.exact:
            scale = self.noise_scale_units
            noise = (
                f"discrete Laplace of scale tau*h/eps = {scale.numerator}/{scale.denominator} grid units "
                f"(= {self.noise_scale:g}; g = {self.granularity:g}, tau = {self.bound_units} units)"
            )
        else:
            noise = f"Lap(tau*h/eps) = Lap({self.noise_scale:g})"
        if self.rho is None:
            how = f"eps/{self.levels} each, sequential"
        tree = Part(what="binary tree", budget=self._arithmetic.budget,
                    noise=self._source.describe(self._arithmetic.law_name if self.exact else "discrete Laplace"),
                    text=f"{noise} on every node of h = {self.levels} levels ({how})")
        chunks = Composition(kind="parallel", parts=(tree,),
                             layout=f"{{}}; a fresh tree per {self.max_range} values (parallel)")
        if self.rho is not None:
            return ZcdpGuarantee.of(chunks, neighbours=EVENT_LEVEL, delta=delta)
        event = PrivacyGuarantee.of(chunks, neighbours=EVENT_LEVEL)
        if self.w_event is None:
            return event
        w = self.w_event
        step = self.bound_units if self.exact else self.upper_bound
        spent = spent_of_scale(w * step, self.levels, self.noise_scale_units if self.exact else None, self.noise_scale)
        return wevent_privacy(event, window=w, spent=spent, sensitivity=(
            f"w-event over {w} consecutive values: a window moves each of the {self.levels} levels by at most "
            f"w tau = {w * self.upper_bound:g} in L1; noise of scale h w tau / eps spends eps = {spent:g} per window, "
            f"the same noise at event level (eps / w per value):"))

    # -- error bars ----------------------------------------------------------------------------

    def _tiling_sizes(self, ends: np.ndarray) -> np.ndarray:
        """For prefixes ``ends`` of the stream, the number of measured nodes whose noise their count holds."""
        ends = np.asarray(ends, dtype=np.int64)
        full, rest = np.divmod(ends, self.max_range)
        per_tree = len(prefix_nodes(self.max_range, self.levels))
        return full * per_tree + _tiling_counts(rest, self.levels)

    def count_standard_errors(self, ends: object) -> np.ndarray:
        """The exact standard error of the noisy count of the first ``e`` values, for each ``e`` of ``ends``:
        ``sqrt(nodes x node variance)`` (the noise only: values clipped or rounded to the grid are not in it)."""
        return np.sqrt(self._tiling_sizes(np.asarray(ends)) * self._arithmetic.node_variance)

    def range_standard_error(self, start: int, stop: int) -> float:
        """The exact standard error of the released sum of positions ``[start, stop)``, ``c(stop) - c(start)``:
        the nodes of the two tilings that do not cancel (inside one tree), whole trees apart."""
        if not 0 <= start <= stop:
            raise ValueError(f"need 0 <= start <= stop, got {start} and {stop}.")
        first, last = divmod(start, self.max_range), divmod(stop, self.max_range)
        if first[0] == last[0]:
            nodes = len(set(prefix_nodes(first[1], self.levels)) ^ set(prefix_nodes(last[1], self.levels)))
        else:
            per_tree = set(prefix_nodes(self.max_range, self.levels))
            nodes = (len(per_tree ^ set(prefix_nodes(first[1], self.levels))) + (last[0] - first[0] - 1)
                     * len(per_tree) + len(prefix_nodes(last[1], self.levels)))
        return float(np.sqrt(nodes * self._arithmetic.node_variance))

    def standard_errors(self, positions: object) -> np.ndarray:
        """The exact standard error of the released value (an increment) at each of ``positions``: the nodes of
        the tilings of ``a`` and ``a + 1`` (``a`` the position in its tree; ``a + 1`` the whole tree at its end)
        that do not cancel, as :meth:`range_standard_error` counts them, vectorized over the positions."""
        return increment_standard_errors(positions, **self.error_model())

    def error_model(self) -> dict[str, Any]:
        """What the standard errors of the released values depend on, all public: the tree's ``levels``, its
        ``max_range`` and the variance of one node's noise (:func:`increment_standard_errors` takes them)."""
        return {"levels": self.levels, "max_range": self.max_range, "node_variance": self._arithmetic.node_variance}

    def _start_tree(self) -> np.ndarray:
        size = 2**self.levels
        sampler = self._source.sampler(self._state.released // self.max_range)
        self.noise = self._arithmetic.draw(sampler, size, 2, self.levels)  # leaves first, then up
        increments = np.diff(noise_prefix_sums(self.noise))[: self.max_range]
        self._state.increments = increments
        return increments

    def release(self, values: object) -> np.ndarray:
        """Release a batch of values in ``[0, upper_bound]``: the increments of the noisy count."""
        clip = True if self.clip else None
        values = check_stream_values(values, self.upper_bound, clip=clip, offset=self._state.released)
        return self._release(values)

    def _release(self, values: np.ndarray) -> np.ndarray:
        """Values already checked: rounded to the grid on the exact path, then the increments of the
        noisy count (grid units, or values on the float path), released as values."""
        ar, st = self._arithmetic, self._state
        units = ar.units(values)
        out = np.empty(units.size, dtype=units.dtype)
        done = 0
        while done < units.size:
            position = st.released % self.max_range
            increments = st.increments if st.increments is not None else self._start_tree()
            take = min(units.size - done, self.max_range - position)
            segment = units[done : done + take]
            out[done : done + take] = segment + increments[position : position + take]
            st.running += ar.sum(segment)
            st.count += ar.sum(out[done : done + take])
            st.released += take
            done += take
            if position + take == self.max_range:
                st.increments, st.running = None, ar.zero
        return ar.released(out)

    def release_one(self, value: float) -> float:
        """Release one value; equals the batch path for the same seed."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= self.upper_bound:
            return float(self._release(np.array([float(value)]))[0])
        return float(self.release([value])[0])


class ZcdpBinaryTree(BinaryTreeCounter):
    """The binary tree under zCDP at the largest rho whose (epsilon, delta) is the target's
    (:func:`~dpstream.accounting.rho_for`): ``release --method bt-zcdp --epsilon E --delta D``.  Its
    guarantee states that rho and the (epsilon, delta) it implies at ``delta``; its snapshots are the binary
    tree's with the target in place of rho (as :class:`~dpstream.release.factorization.SqrtFactorization`'s), so a
    restored tree spends the same rho and states it at the same delta.  A snapshot taken before the target was
    kept holds rho alone: it restores a :class:`BinaryTreeCounter` at that rho, stated at the default delta.

    >>> tree = ZcdpBinaryTree(epsilon=1.0, delta=1e-5, upper_bound=1.0, max_range=8, seed=0)
    >>> round(tree.rho, 6), tree.privacy().delta, BinaryTreeCounter.from_state(tree.state).privacy().label
    (0.030557, 1e-05, '0.0305566-zCDP, so (1, 1e-05)-DP')
    """

    def __init__(self, *, epsilon: float, delta: float | None, upper_bound: float, max_range: int = 2**20,
                 clip: bool = False, granularity: float | None = None, seed: BitsSeed = None,
                 noise: NoiseSampler | NoiseSource | None = None, key: bytes | None = None) -> None:
        if delta is None:
            raise ValueError("the binary tree under zCDP needs delta (--delta): the delta of its (epsilon, delta) "
                             "target, e.g. 1e-6.")
        super().__init__(rho=rho_for(check_epsilon(epsilon), delta), upper_bound=upper_bound, max_range=max_range,
                         clip=clip, granularity=granularity, seed=seed, noise=noise, key=key)
        self.delta = delta
        self._params = {**{k: v for k, v in self._params.items() if k != "rho"}, "epsilon": epsilon, "delta": delta}

    def privacy(self, delta: float | None = None) -> PrivacyGuarantee:
        """The guarantee stated at ``delta``, by default at the target's (not at the library's default delta)."""
        return super().privacy(self.delta if delta is None else delta)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BinaryTreeCounter:
        """The binary tree (at this rho) a :attr:`state` snapshot describes, continuing where it was taken."""
        return BinaryTreeCounter.from_state(state)
