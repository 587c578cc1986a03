"""The release of Section 4 of Cao et al.: the location-count vector of every time step with
Laplace noise (Theorem 3.1)."""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_bound, check_epsilon
from dpstream.noise import laplace_noise
from dpstream.privacy import USER_STEP, PrivacyGuarantee
from dpstream.rng import Seed, make_rng

__all__ = ["COUNT_SENSITIVITY", "LaplaceCounts", "laplace_scale"]

#: L1 sensitivity of one step's count vector when a neighbour moves one user to another location.
COUNT_SENSITIVITY = 2.0


def laplace_scale(epsilon: float, sensitivity: float = COUNT_SENSITIVITY) -> float:
    """Scale ``lambda = Delta / epsilon`` of the per-step noise; ``Delta = sensitivity``, by
    default 2 (one user moves; 1 for add/remove-one-user neighbours).

    >>> laplace_scale(0.5), laplace_scale(0.5, sensitivity=1)
    (4.0, 2.0)
    """
    return check_bound(sensitivity, "sensitivity") / check_epsilon(epsilon)


class LaplaceCounts:
    """Add ``Lap(2 / epsilon)`` to every cell of a ``T x m`` count stream.

    Parameters
    ----------
    epsilon : float
        Budget of each time step's release.
    seed : int, Generator or None
        Source of the noise (see :mod:`dpstream.rng`; never publish a seeded release).

    Privacy
    -------
    epsilon-DP per time step.  The database is bounded (Section 4: ``n`` users, ``n`` public);
    neighbouring databases differ in the location of one user at one time step, which moves
    one unit of count from one location to another, so the count vector changes by 1 in two
    cells: L1 sensitivity ``Delta = 2``.  (The paper writes ``Lap(Delta / epsilon)`` without
    fixing ``Delta``; 2 is what its bounded-database neighbour requires.)  Over ``T`` steps the
    releases compose sequentially: a user's whole trajectory is protected at ``T epsilon``.
    Post-processing (:mod:`dpstream.postprocess.estimators`) uses only the released counts
    and public knowledge, so it costs nothing more.

    >>> noisy = LaplaceCounts(epsilon=1.0, seed=0).release(np.array([[3, 2], [1, 4]]))
    >>> noisy.shape
    (2, 2)
    """

    #: The noise law of the release, the likelihood post-processing assumes by default:
    #: ``"laplace"`` (continuous) or ``"discrete_laplace"`` (two-sided geometric, same scale).
    likelihood = "laplace"

    def __init__(self, *, epsilon: float, seed: Seed = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.scale = laplace_scale(self.epsilon)
        self._rng = make_rng(seed)

    def release(self, counts: np.ndarray) -> np.ndarray:
        """Noisy counts ``R~ = R + Lap(2 / epsilon)``, same shape as ``counts``."""
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 2 or counts.size == 0:
            raise ValueError(f"counts must be a non-empty T x m array, got shape {counts.shape}.")
        return counts + laplace_noise(self._rng, self.scale, counts.shape)

    def privacy(self) -> PrivacyGuarantee:
        """What one step's release spends."""
        return PrivacyGuarantee(
            epsilon=self.epsilon,
            delta=0.0,
            neighbours=USER_STEP,
            composition=f"Lap(2/epsilon) = Lap({self.scale:g}) per cell (count-vector L1 sensitivity 2); epsilon per "
            "time step; T steps of one user's trajectory compose to T * epsilon",
        )
