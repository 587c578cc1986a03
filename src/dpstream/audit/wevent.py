"""The audit of w-event releases: a neighbour changes up to ``w`` consecutive values within ``[0, B]``.

:class:`ToPSWEvent` audits ToPS at :class:`~dpstream.privacy.WEvent` with a public threshold,
daily-like periods and each period's total bounded (``release --w-event --period --period-bound``):
periods of 4 values, a window of 4, theta = B = 1 and C = 1, chunks of two periods under one
measured level.  Input A is all zeros; input B puts theta at the window's four positions from the
middle of the first period, ``(0, 0, 1, 1 | 1, 1, 0, 0)``: both periods' bounded totals move by C,
S = 2C = 2 (:func:`~dpstream.release.wevent.window_sensitivity`), the most any window moves the
level.  Every chunk draws its own noise, so one stream of ``n`` chunks is ``n`` runs; the output is
the two sums released over the periods (their measurements) and the statistic their Laplace
log-likelihood ratio for truths ``(0, 0)`` and ``(C, C)``.  A release that takes the sensitivity of
one value (theta) or does not bound the periods spends twice its claim.

:class:`BinaryTreeWEvent` audits the binary tree at ``w = 2`` on trees of 4 leaves: the first two
values are 0 or tau; a run's output is the noisy counts after 1 and 2 values (nodes (0, 0) and
(1, 0)), which move by tau and 2 tau: 3/4 of the claim ``h w tau`` (the leaf (0, 1) is measured but
never released), so the bound reaches about 0.75, and a tree at the event-level scale 1.5.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, on_lattice
from dpstream.audit.streams import laplace_log_ratio
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.tops import ToPS

__all__ = ["BinaryTreeWEvent", "ToPSWEvent"]


class ToPSWEvent(MechanismAdapter):
    """ToPS with ``w_event`` and ``period_bound``: a window across two periods, both bounded totals moved by C."""

    name = "tops-w-event"
    statistic_name = "the log-likelihood ratio of the two periods' released sums"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 40_000) -> None:
        self._params = dict(epsilon=epsilon, upper_bound=1.0, threshold=1.0, period=4, max_range=8, w_event=4,
                            period_bound=1.0)
        probe = ToPS(**self._params, seed=0)
        if probe.period_levels != 1:  # pragma: no cover - the configuration keeps one level
            raise ValueError("the tops-w-event adapter needs one measured level (the periods).")
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        # the scale the claim needs, d S / eps (a common factor of the statistic: its events do not depend on it)
        self.granularity, self.scale, self.samples = probe.granularity, 2.0 / epsilon, samples
        self.neighbours = (np.zeros(8), np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]))
        self.truths = {False: np.zeros(2), True: np.ones(2)}  # the bounded period totals, C = 1

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        released = ToPS(**self._params, seed=rng).release(np.tile(x, n))
        return released.reshape(n, 2, 4).sum(axis=2)

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.truths[True], self.truths[False], self.scale)

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        truth = self.truths[bool(x.any())]
        return on_lattice(outputs, truth[None, :], self.granularity, what="tops-w-event's periods").all(axis=1)


class BinaryTreeWEvent(MechanismAdapter):
    """The binary tree with ``w_event = 2`` on trees of 4 leaves: the first two values are 0 or tau."""

    name = "bt-w-event"
    statistic_name = "the log-likelihood ratio of the noisy counts after 1 and 2 values"

    def __init__(self, *, epsilon: float = 1.0, samples: int = 100_000) -> None:
        self._params = dict(epsilon=epsilon, upper_bound=1.0, max_range=4, w_event=2)
        probe = BinaryTreeCounter(**self._params, seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale, self.samples = probe.granularity, probe.noise_scale, samples
        self.neighbours = (0.0, probe.upper_bound)

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        stream = np.zeros((n, 4))
        stream[:, :2] = x
        released = BinaryTreeCounter(**self._params, seed=rng).release(stream.ravel()).reshape(n, 4)
        return np.cumsum(released, axis=1)[:, :2]

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        tau = self.neighbours[1]
        return laplace_log_ratio(outputs, np.array([tau, 2 * tau]), np.zeros(2), self.scale)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, np.array([[x, 2 * x]]), self.granularity, what="bt-w-event's counts").all(axis=1)
