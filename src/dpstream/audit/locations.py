"""The audit of location counts from raw trajectories at their user-step relation, under w-event windows.

:class:`LocationWindows` audits :class:`~dpstream.release.locations.LocationCounts` end to end,
from rows ``(time, user, location)``, with ``w_event = 2`` (its claim: any 2 consecutive steps of
one user at epsilon).  Every window of 2 steps draws its own noise, so a stream of ``2 n``
steps is ``n`` runs, one per window:

* ``bounded`` (``locations``): 5 users at 2 locations, 3 and 2 in input A; in input B one user
  is at the other location at both steps of every window (a user moved: L1 2 per step);
* ``unbounded`` (``locations-unbounded``): 4 users in input A; B adds a fifth user's rows at
  both steps (L1 1 per step).

The output is the window's 4 noisy counts, the statistic their log-likelihood ratio under
discrete Laplace noise of the claimed scale: a release whose noise is drawn for a smaller
sensitivity, or for a window of fewer steps, spends more than it claims, and the bound shows it.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, granularity_of, on_lattice
from dpstream.audit.streams import laplace_log_ratio
from dpstream.release.locations import LocationCounts

__all__ = ["LocationWindows"]

_NS = 1_000_000_000
#: Steps per window (``w_event``).
_WINDOW = 2


class LocationWindows(MechanismAdapter):
    """One user moved (bounded) or added (unbounded) at both steps of every window of 2 steps."""

    statistic_name = "the log-likelihood ratio of the window's four noisy counts"

    def __init__(self, *, neighbours: str = "bounded", epsilon: float = 1.0, samples: int = 40_000) -> None:
        self.name = "locations" if neighbours == "bounded" else f"locations-{neighbours}"
        self.bounded = neighbours == "bounded"
        self._params = dict(epsilon=epsilon, locations=["a", "b"], step=1, neighbours=neighbours,
                            users=5 if self.bounded else None, w_event=_WINDOW)
        probe = LocationCounts(**self._params, seed=0)  # type: ignore[arg-type]
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale, self.samples = granularity_of(probe), probe.scale, samples
        a = np.array([3.0, 2.0] * _WINDOW) if self.bounded else np.array([2.0, 2.0] * _WINDOW)
        b = np.array([2.0, 3.0] * _WINDOW) if self.bounded else np.array([3.0, 2.0] * _WINDOW)
        self.neighbours = (a, b)

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` windows of rows: per step, ``x[0]`` users at location a and ``x[1]`` at b."""
        per_step = np.array(["a"] * int(x[0]) + ["b"] * int(x[1]))
        users = np.array([f"u{i}" for i in range(per_step.size)])
        steps = _WINDOW * n
        times = np.repeat(np.arange(steps, dtype=np.int64) * _NS, per_step.size)
        release = LocationCounts(**self._params, seed=rng)  # type: ignore[arg-type]
        out = release.release(times, np.tile(users, steps), np.tile(per_step, steps))
        counts = np.concatenate((out.counts, release.flush().counts))
        return counts.reshape(n, 2 * _WINDOW).astype(np.float64)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, x[None, :], self.granularity, what="LocationCounts").all(axis=1)
