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

PAK's optimizer of its local parameters (Eq. 16) and its heuristics for m tune on the data:
they are analysis, not part of the mechanism, and live in :mod:`dpstream.evaluation.pak_analysis`.

Privacy
-------
(eps, delta)-DP at event level (neighbours: streams differing in the value at one position;
values in [0, B]).  Steps 1-2 read the first m values: (eps1, delta) + (eps2, 0) compose
sequentially to (eps1 + eps2, delta).  Steps 3-6 read the rest: eps-DP given the public tau.
The two parts read disjoint positions (parallel composition), so the whole is
``(max(eps1 + eps2, eps), delta) = (eps, delta)``.
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_choice,
    check_epsilon,
    check_magnitude,
    check_percentile,
    check_positive_int,
    check_probability,
)
from dpstream.hierarchy import num_levels
from dpstream.noise import laplace_noise
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.holdout import HoldOutRelease
from dpstream.rng import Seed, make_rng
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


class PAK(HoldOutRelease):
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
    percentile, beta, multiplier, noise
        Of S-PAK (:func:`~dpstream.thresholds.smooth_sensitivity.pak_threshold`).
    capped : bool
        True: tau >= B falls back to B (Mechanism 1).  False: the ToPS paper's uncapped variant.
    clip : bool
        Clip values outside [0, B] instead of raising.
    seed : int, Generator or None

    Privacy
    -------
    (epsilon, delta)-DP at event level; see the module docstring and :meth:`privacy`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> stream = rng.integers(0, 20, size=3000).astype(float)
    >>> pak = PAK(epsilon=5.0, upper_bound=1000, hold=1000, max_range=2048, seed=1)
    >>> out = pak.release(stream)
    >>> out.shape, pak.threshold <= 1000, pak.privacy().delta == 1 / 3048**2
    ((2000,), True, True)
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
        noise: str = "laplace",
        capped: bool = True,
        clip: bool = False,
        seed: Seed = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.upper_bound = check_bound(upper_bound)
        self.hold = check_positive_int(hold, "hold")
        self.max_range = check_positive_int(max_range, "max_range", minimum=2)
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
        self.noise = check_choice(noise, "noise", NOISES)
        self.capped = check_bool(capped, "capped")
        self.clip = check_bool(clip, "clip")
        pak_parameters(epsilon=self.threshold_epsilon, delta=self.delta, beta=beta, multiplier=multiplier,
                       noise=self.noise)  # validates the threshold's parameters now, not after the hold-out
        # tau <= B when capped: refuse now the parameters whose noise would overflow float64 after the hold-out
        check_magnitude(self.upper_bound * num_levels(self.max_range, 2) / self.epsilon,
                        "the binary tree's largest noise scale upper_bound * levels / epsilon")
        check_magnitude(self.upper_bound / self.sum_epsilon, "the held-out sum's noise scale upper_bound / eps2")
        check_magnitude(self.upper_bound * max(self.hold, self.max_range), "upper_bound * max(hold, max_range)")
        self._rng = make_rng(seed)
        self._start_hold_out()
        self.raw_threshold: float | None = None
        self.held_sum: float | None = None

    def privacy(self) -> PrivacyGuarantee:
        """(epsilon, delta) for any split: eps1 + eps2 on the hold-out, eps on the rest, in parallel."""
        threshold = PrivacyGuarantee(epsilon=self.threshold_epsilon, delta=self.delta, neighbours=EVENT_LEVEL,
                                     composition="S-PAK threshold")
        held_sum = PrivacyGuarantee(epsilon=self.sum_epsilon, delta=0.0, neighbours=EVENT_LEVEL,
                                    composition="Lap(tau/eps2) sum of the held-out values")
        tree = PrivacyGuarantee(epsilon=self.epsilon, delta=0.0, neighbours=EVENT_LEVEL,
                                composition="binary tree on the rest")
        return threshold.compose_sequential(held_sum).compose_parallel(tree, composition=(
            f"S-PAK threshold ({self.threshold_epsilon:g}, {self.delta:g})-DP and Lap(tau/{self.sum_epsilon:g}) "
            f"sum, sequential, on the first {self.hold} values; binary tree {self.epsilon:g}-DP on the "
            "rest; parallel composition"
        ))

    def _choose_threshold(self) -> None:
        self.raw_threshold = pak_threshold(
            self._held, epsilon=self.threshold_epsilon, delta=self.delta, upper_bound=self.upper_bound,
            rng=self._rng, percentile=self.percentile, beta=self.beta, multiplier=self.multiplier,
            noise=self.noise,
        )
        tau = cap_threshold(self.raw_threshold, self.upper_bound, capped=self.capped)
        truncated_sum = float(np.minimum(self._held, tau).sum())
        self.held_sum = truncated_sum + float(laplace_noise(self._rng, tau / self.sum_epsilon, 1)[0])
        self._threshold = tau
        self._stream = BinaryTreeCounter(epsilon=self.epsilon, upper_bound=tau, max_range=self.max_range,
                                         seed=self._rng)

    def release(self, values: object) -> np.ndarray:
        """Consume a batch; return the increments of the noisy running sum after the hold-out.

        ``held_sum + cumsum(outputs)`` is PAK's released ``c^(sigma, i)`` for ``i > m``; the
        threshold tau (after the cap) is :attr:`threshold`.
        """
        return super().release(values)

    def release_one(self, value: float) -> float | None:
        """Consume one value; None while it is held out."""
        out = self.release([value])
        return None if out.size == 0 else float(out[0])
