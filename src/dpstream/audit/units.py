"""The audit of unit-level releases: one privacy unit's rows added within (and beyond) its bounds.

:class:`UnitAggregateWindows` audits :class:`~dpstream.release.aggregate.UnitAggregate` at its
relation (:class:`~dpstream.privacy.UnitLevel`, add/remove): input A is a population of
background units; input B adds one unit whose rows in the window sum to three times the L1 bound
``C`` -- a unit exceeding its bound, which the release must bring down to ``C``.  Windows of one
bucket are independent runs (each window draws its own noise and bounds each unit afresh), so
one stream of ``n`` windows is ``n`` runs; the output is each window's released value, the
statistic the log-likelihood ratio of truths ``t`` and ``t + C`` under Laplace noise of the
claimed scale.  A release that does not bound the unit (or adds less noise than its bound needs)
spends more than it claims, and the bound shows it.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, granularity_of, on_lattice
from dpstream.audit.streams import laplace_log_ratio
from dpstream.release.aggregate import UnitAggregate

__all__ = ["UnitAggregateWindows"]

_NS = 1_000_000_000


class UnitAggregateWindows(MechanismAdapter):
    """One unit's rows (3C in total, scaled to C by the bounds) added to each window of one bucket."""

    name = "unit-aggregate"
    statistic_name = "the log-likelihood ratio of the window's released sum"

    def __init__(self, *, epsilon: float = 1.0, bound: float = 4.0, rows: int = 3, samples: int = 20_000) -> None:
        self._params = dict(epsilon=epsilon, bucket=1, window=1, unit_bound=bound, upper_bound=bound, rows=rows)
        probe = self._make(seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale = granularity_of(probe), probe.noise_scale
        self.bound, self.rows, self.samples = bound, rows, samples
        background = 1.5  # one background unit with one row per window
        self.neighbours = (background, background + bound)

    def _make(self, **noise: object) -> UnitAggregate:
        params = {name: value for name, value in self._params.items() if name != "rows"}
        return UnitAggregate(**params, unit="unit", **noise)  # type: ignore[arg-type]

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` windows: the background unit's row, and with B the audited unit's rows (each ``bound``)."""
        added = x != self.neighbours[0]
        per = 1 + (self.rows if added else 0)
        times = np.repeat(np.arange(n, dtype=np.int64) * _NS, per)
        units = np.tile(np.array(["background"] + ["audited"] * (per - 1)), n)
        values = np.tile(np.array([self.neighbours[0]] + [self.bound] * (per - 1)), n)
        agg = self._make(seed=rng)
        out = agg.release(times, units, values)
        return np.concatenate((out.values, agg.flush().values))

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        return laplace_log_ratio(outputs, self.neighbours[1], self.neighbours[0], self.scale)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        return on_lattice(outputs, x, self.granularity, what="the unit aggregate")
