"""PAK (Perrier, Asghar and Kaafar, NDSS 2019): Mechanism 1 and its public defaults.

Mechanism 1.  The first ``m`` values choose tau by S-PAK (Eq. 6-12, times r of Eq. 15) with
budget ``eps1``; their sum ``c(sigma, m)`` is released at once with ``Lap(tau / eps2)``; every
later value is truncated at tau and released by the binary-tree counter with noise scaled to
tau and budget ``eps = eps1 + eps2``.  Mechanism 1 requires ``tau < B``: a tau of at least B
(or not positive) falls back to B, i.e. to the plain binary tree.  ``capped=False`` is the
variant the ToPS paper ran (its Section 3.1: "the value of theta is usually larger than the
maximal possible value"): tau above B is kept and scales the noise; a non-positive tau still
falls back to B, since no truncation threshold can be <= 0.

Step 2's ``Lap(tau / eps2)`` has sensitivity tau only if the first m values are truncated at
tau too; PAK does not say so, and we truncate them (post-processing of the private tau).

Exact noise on a public grid (the default; ``g`` the largest power of two at most
``B / 2^20``).  tau is S-PAK's continuous mechanism rounded up to the grid, sampled exactly
(:mod:`dpstream.thresholds.smooth_sensitivity` says what that covers: its center and scale are
float64 evaluations); the held-out sum is the integer sum of the truncated values in grid units
plus discrete Laplace noise of scale ``tau_units / eps2`` (rounded up); the tree is the exact
binary tree on the same grid (for an uncapped tau so far above B that the noise scale would
leave the sampler's range, the grid of the sum and the tree is doubled until it fits: a function
of the public tau).  S-PAK with Gaussian noise is float-only and refused there.
``noise=FloatNoise(rng)`` runs the float algorithm of the studies (NOT for publication).  With
``key=``, S-PAK draws from the identity ``("pak", "threshold")``, the sum from
``("pak", "sum")`` and tree ``i`` from ``("pak", "tree", i)``.

PAK's optimizer of its local parameters (Eq. 16) and its heuristics for m tune on the data:
they are analysis, not part of the mechanism, and live in :mod:`dpstream.evaluation.pak_analysis`.

Privacy
-------
(eps, delta)-DP at event level (neighbours: streams differing in the value at one position;
values in [0, B]).  Steps 1-2 read the first m values: (eps1, delta) + (eps2', 0) compose
sequentially to (eps1 + eps2', delta).  Steps 3-6 read the rest: eps'-DP given the public tau.
The primes are the budgets recomputed from the rounded-up scales, at most those asked.  The
two parts read disjoint positions (parallel composition), so the whole is
``(max(eps1 + eps2', eps'), delta) <= (eps, delta)``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_choice,
    check_epsilon,
    check_grid,
    check_magnitude,
    check_memory,
    check_percentile,
    check_positive_int,
    check_probability,
)
from dpstream._params import Params
from dpstream.hierarchy import num_levels
from dpstream.hierarchy.arithmetic import FloatArithmetic, GridArithmetic
from dpstream.noise.bits import BitsSeed
from dpstream.noise.discrete_laplace_law import MAX_LAPLACE_NUMERATOR
from dpstream.noise.grid import GridLaplace, ceil_units
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import make_source
from dpstream.privacy import EVENT_LEVEL, Composition, EpsilonDelta, Part, PrivacyGuarantee
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.contract import PAK_STATE, read_header, snapshot_header
from dpstream.release.holdout import HoldOutRelease
from dpstream.thresholds.smooth_sensitivity import NOISES, pak_parameters, pak_threshold

__all__ = [
    "PAK",
    "PAK_BETA",
    "PAK_MULTIPLIER",
    "PAK_PERCENTILE",
    "PAK_THRESHOLD_FRACTION",
    "cap_threshold",
]

#: ToPS Appendix B: the 99.5th percentile with lambda = 0.85 (p = 99.575) and beta = 0.3 * 0.02.
PAK_PERCENTILE = 99.575
PAK_BETA = 0.3 * 0.02
#: PAK Section VI-B: "a value in the range 0.8 to 0.9 is a reasonable choice for eps1"; "an r
#: between 1 and 2 suffices".
PAK_THRESHOLD_FRACTION = 0.85
PAK_MULTIPLIER = 1.5


def cap_threshold(theta: float, upper_bound: float, *, capped: bool = True) -> float:
    """tau as Mechanism 1 uses it: below B, else B (capped); uncapped keeps tau > B.

    A tau that is not positive falls back to B in both variants.  Post-processing only.

    >>> cap_threshold(2000.0, 1657), cap_threshold(2000.0, 1657, capped=False), cap_threshold(-3.0, 10)
    (1657.0, 2000.0, 10.0)
    """
    if not theta > 0 or (capped and theta >= upper_bound):
        return float(upper_bound)
    return float(theta)


class PAK(HoldOutRelease, Params):
    """Continual release of a stream's running sum under (epsilon, delta)-DP (PAK, Mechanism 1).

    Parameters
    ----------
    epsilon : float
        eps = eps1 + eps2, also the budget of the binary tree.
    upper_bound : float
        B (public): values lie in [0, B].
    hold : int
        m, the time lag: values used for tau and released only as one noisy sum.
    max_range : int
        n - m: leaves of the binary tree, the largest query range (a fresh tree after that
        many values).
    threshold_fraction : float
        eps1 / eps (default 0.85, PAK Section VI-B).
    delta : float, optional
        Default ``1 / n^2`` with ``n = hold + max_range`` (ToPS Appendix B).
    percentile, beta, multiplier
        Of S-PAK (:func:`~dpstream.thresholds.smooth_sensitivity.pak_threshold`).
    threshold_noise : str
        S-PAK's noise, "laplace" (default) or "gaussian" (float-only: needs ``noise=FloatNoise``).
    capped : bool
        True: tau >= B falls back to B (Mechanism 1).  False: the ToPS paper's uncapped variant.
    clip : bool
        Clip values outside [0, B] instead of raising.
    granularity : float, optional
        g, the public grid of tau, the held-out sum and the tree (exact path); default the
        largest power of two at most ``B / 2^20``.
    seed : None, int, numpy Generator or bit source
        Bits of the exact samplers: None (default) is the OS CSPRNG, an int a replayable PCG64.
    noise : NoiseSampler, optional
        Instead of ``seed``: ``ZeroNoise()`` (tests) or ``FloatNoise(rng)`` (the studies' float
        algorithm, NOT for publication).
    key : bytes, optional
        Instead of ``seed``: a secret key; each part draws from its own keyed stream.

    Privacy
    -------
    (epsilon, delta)-DP at event level; see the module docstring and :meth:`privacy`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> stream = rng.integers(0, 20, size=3000).astype(float)
    >>> pak = PAK(epsilon=5.0, upper_bound=1000, hold=1000, max_range=2048, seed=1)
    >>> out = pak.release(stream)
    >>> out.shape, pak.threshold <= 1000, pak.privacy().delta == 1 / 3048**2, pak.privacy().epsilon <= 5
    ((2000,), True, True, True)
    """

    def __init__(
        self,
        *,
        epsilon: float,
        upper_bound: float,
        hold: int = 65536,
        max_range: int = 2**20,
        threshold_fraction: float = PAK_THRESHOLD_FRACTION,
        delta: float | None = None,
        percentile: float = PAK_PERCENTILE,
        beta: float = PAK_BETA,
        multiplier: float = PAK_MULTIPLIER,
        threshold_noise: str = "laplace",
        capped: bool = True,
        clip: bool = False,
        granularity: float | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
        key: bytes | None = None,
    ) -> None:
        self._params = dict(
            epsilon=epsilon, upper_bound=upper_bound, hold=hold, max_range=max_range,
            threshold_fraction=threshold_fraction, delta=delta, percentile=percentile, beta=beta,
            multiplier=multiplier, threshold_noise=threshold_noise, capped=capped, clip=clip, granularity=granularity,
        )
        self.epsilon = check_epsilon(epsilon)
        self.upper_bound = check_bound(upper_bound)
        self.hold = check_memory(check_positive_int(hold, "hold"), "hold")
        self.max_range = check_memory(check_positive_int(max_range, "max_range", minimum=2), "max_range")
        fraction = check_probability(threshold_fraction, "threshold_fraction", open_low=True)
        if fraction >= 1:
            raise ValueError(f"threshold_fraction must be < 1 (eps2 > 0), got {threshold_fraction!r}.")
        self.threshold_epsilon = fraction * self.epsilon
        self.sum_epsilon = self.epsilon - self.threshold_epsilon
        n = self.hold + self.max_range
        self.delta = 1.0 / n**2 if delta is None else check_probability(delta, "delta", open_low=True)
        self.percentile = check_percentile(percentile)
        self.beta = beta
        self.multiplier = multiplier
        self.threshold_noise = check_choice(threshold_noise, "threshold_noise", NOISES)
        self.capped = check_bool(capped, "capped")
        self.clip = check_bool(clip, "clip")
        self._source = make_source(seed=seed, noise=noise, key=key, identity=("pak",))
        if self._source.exact and self.threshold_noise == "gaussian":
            raise ValueError(
                "threshold_noise='gaussian' is float-only (S-PAK's Gaussian threshold has no exact sampler); "
                "use threshold_noise='laplace', or noise=FloatNoise(rng) for a study (NOT for publication)."
            )
        self._check_threshold(*pak_parameters(epsilon=self.threshold_epsilon, delta=self.delta, beta=beta,
                                              multiplier=multiplier, noise=self.threshold_noise))
        self.granularity: float | None = None
        if self._source.exact:  # a grid too fine for the budget: refused now
            check_grid(self.upper_bound, granularity)
            self.granularity = self._noisier_on_grid(granularity).granularity
        elif granularity is not None:
            raise ValueError("granularity applies to exact noise only; the float path (FloatNoise) has no grid.")
        self._start_hold_out()
        self.raw_threshold: float | None = None
        self.held_sum: float | None = None
        self._sum_epsilon_spent: float | None = None
        self._sum_scale: Fraction | None = None
        self._held_noise: GridArithmetic | FloatArithmetic | None = None  # of the held-out sum, once tau is known

    def _check_threshold(self, a: float, b: float, offset: float, kappa: float) -> None:
        """Refuse now the parameters whose threshold, or noise scaled to it, cannot be computed after the hold-out.

        ``(a, b, offset, kappa)`` are S-PAK's (:func:`~dpstream.thresholds.smooth_sensitivity.pak_parameters`).  The
        smooth sensitivity is at most B, so tau stays below ``r (B + kappa B / a (offset + 40))`` but with probability
        ``e^-40``; capped, tau is at most B.
        """
        if not b > 0:
            raise ValueError(f"delta must be large enough for S-PAK's smoothing b = eps1 / (2 ln(2 / delta)) to be "
                             f"positive, got delta={self.delta!r}.")
        largest = check_magnitude(self.multiplier * (self.upper_bound + kappa * self.upper_bound / a * (offset + 40.0)),
                                  "S-PAK's largest threshold r (B + kappa B / a (G^-1(1 - beta) + 40))",
                                  "lower multiplier or upper_bound, or raise epsilon")
        tau = self.upper_bound if self.capped else max(largest, self.upper_bound)
        # refuse now the parameters whose noise would overflow float64 after the hold-out
        check_magnitude(tau * num_levels(self.max_range, 2) / self.epsilon,
                        "the binary tree's largest noise scale upper_bound * levels / epsilon")
        check_magnitude(tau / self.sum_epsilon, "the held-out sum's noise scale upper_bound / eps2")
        check_magnitude(tau * max(self.hold, self.max_range), "upper_bound * max(hold, max_range)")

    def privacy(self) -> PrivacyGuarantee:
        """(epsilon, delta) for any split: eps1 + eps2' on the hold-out, eps' on the rest, in parallel.

        eps2' and eps' are recomputed from the rounded-up scales once tau is known (they depend
        on tau in grid units); before, they are stated as eps2 and eps, upper bounds.
        """
        sum_epsilon = self.sum_epsilon if self._sum_epsilon_spent is None else self._sum_epsilon_spent
        source = self._source.describe()
        threshold_noise = source
        if self._source.exact:
            threshold_noise = ("S-PAK's Laplace threshold sampled exactly and rounded up to the grid (its center and "
                               f"scale are float64 evaluations, not covered exactly) + {source}")
        spent = EpsilonDelta(self.threshold_epsilon, self.delta)
        threshold = Part(what="S-PAK threshold", budget=spent, noise=threshold_noise,
                         text=f"S-PAK threshold {spent.label()}")
        held_sum = Part(what="Lap(tau/eps2) sum of the held-out values", budget=EpsilonDelta(sum_epsilon),
                        noise=source, text=f"Lap(tau/{sum_epsilon:g}) sum")
        tree = EpsilonDelta(self.epsilon if self._stream is None else self._stream.spent_epsilon)
        grid = "" if self.granularity is None else f" (grid g = {self.granularity:g})"
        hold_out = Composition(kind="sequential", parts=(threshold, held_sum),
                               layout=f"{{}} and {{}}, sequential, on the first {self.hold} values")
        rest = Part(what="binary tree on the rest", budget=tree, noise=source,
                    text=f"binary tree {tree.label()} on the rest")
        release = Composition(kind="parallel", parts=(hold_out, rest), layout=f"{{}}; {{}}; parallel composition{grid}")
        return PrivacyGuarantee.of(release, neighbours=EVENT_LEVEL)

    def _choose_threshold(self) -> None:
        sampler = self._source.sampler("threshold")
        raw_threshold = pak_threshold(
            self._held, epsilon=self.threshold_epsilon, delta=self.delta, upper_bound=self.upper_bound,
            sampler=sampler, granularity=self.granularity, percentile=self.percentile, beta=self.beta,
            multiplier=self.multiplier, noise=self.threshold_noise,
        )
        self._start_tree(raw_threshold)
        held = self._held_noise  # the held-out values truncated at tau, summed, plus Lap(tau / eps2)
        total = held.sum(held.units(np.minimum(self._held, self._threshold)))
        self.held_sum = held.released_one(total + held.draw_one(self._source.sampler("sum")))

    def _start_tree(self, raw_threshold: float) -> None:
        """Set tau from S-PAK's raw threshold and start the binary tree (also when a snapshot is restored)."""
        self.raw_threshold = raw_threshold
        tau = cap_threshold(raw_threshold, self.upper_bound, capped=self.capped)
        if self._source.exact:
            g = self.granularity
            factor = self._noisier_on_grid(g).scale_per_unit
            while ceil_units(tau, g) * factor > MAX_LAPLACE_NUMERATOR // 2 and 2 * g <= tau:
                g *= 2.0  # an uncapped tau far above B: a coarser grid, a function of the public tau
            self.granularity = g
        self._stream = BinaryTreeCounter(epsilon=self.epsilon, upper_bound=tau, max_range=self.max_range,
                                         granularity=self.granularity, noise=self._source.child("tree"))
        self._threshold = self._stream.upper_bound  # tau rounded up to the grid
        self._held_noise = self._held_sum_noise(tau)

    @property
    def held_sum_standard_error(self) -> float | None:
        """The exact standard error of :attr:`held_sum`'s noise (``Lap(tau / eps2)``, discrete on the grid), once tau
        is chosen (None before); truncation at tau is not in it."""
        return None if self._stream is None else float(np.sqrt(self._held_noise.node_variance))

    def _held_sum_noise(self, tau: float) -> GridArithmetic | FloatArithmetic:
        """The arithmetic of the held-out sum: ``Lap(tau / eps2)`` on the tree's grid, or in float (the studies)."""
        if not self._source.exact:
            return FloatArithmetic(bound=tau, scale=tau / self.sum_epsilon, epsilon=self.sum_epsilon)
        grid = GridLaplace.on_grid(tau, self.sum_epsilon, self.granularity, what="held-out sum's noise scale")
        self._sum_scale, self._sum_epsilon_spent = grid.scale, grid.spent_epsilon
        return GridArithmetic(grid)

    def _noisier_on_grid(self, granularity: float | None) -> GridLaplace:
        """The tree's noise or the held-out sum's on the grid for B, whichever has the larger scale per
        unit of sensitivity: both measure on one grid, which must be coarse enough for the noisier."""
        tree = (self.epsilon, num_levels(self.max_range, 2))
        epsilon, levels = tree if Fraction(tree[1]) / Fraction(tree[0]) >= 1 / Fraction(self.sum_epsilon) else (
            self.sum_epsilon, 1)
        return GridLaplace.choose(self.upper_bound, epsilon, granularity, levels=levels)

    # -- the streaming contract: state and from_state ----------------------------------------

    @property
    def state(self) -> dict:
        """A snapshot of the release as plain data (SECRET: the held-out values, the key or the
        noise; see :mod:`dpstream.release.contract`).  ``PAK.from_state(state)`` continues exactly
        where it was taken."""
        chosen = None if self._stream is None else {"raw_threshold": self.raw_threshold, "held_sum": self.held_sum}
        return {
            **snapshot_header(PAK_STATE, self._params, self._source),
            **self._hold_out_state(),
            "chosen": chosen,
            "tree": None if self._stream is None else self._stream.stream_state(),
        }

    @classmethod
    def from_state(cls, state: dict) -> PAK:
        """The release a :attr:`state` snapshot describes, continuing where it was taken."""
        params, source = read_header(state, PAK_STATE)
        pak = cls(**params, noise=source)
        pak._resume_hold_out(state)
        if state["chosen"] is not None:
            pak._start_tree(state["chosen"]["raw_threshold"])
            pak.held_sum = state["chosen"]["held_sum"]
            pak._stream.resume_stream(state["tree"])
        return pak

    def release(self, values: object) -> np.ndarray:
        """Consume a batch; return the increments of the noisy running sum after the hold-out.

        ``held_sum + cumsum(outputs)`` is PAK's released ``c^(sigma, i)`` for ``i > m``; the
        threshold tau (after the cap) is :attr:`threshold`.
        """
        return super().release(values)

    def release_one(self, value: float) -> float | None:
        """Consume one value; None while it is held out."""
        stream = self._stream
        if stream is not None and type(value) is float and 0.0 <= value <= self.upper_bound:
            self._position += 1  # the common case after the hold-out: the tree's own one-value path
            return stream.release_one(value if value < self._threshold else self._threshold)
        out = self.release([value])
        return None if out.size == 0 else float(out[0])
