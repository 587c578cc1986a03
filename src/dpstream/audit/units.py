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

:class:`UnitAggregateSelection` audits the same release with private partition selection, an
(eps, delta) guarantee (:mod:`dpstream.release.partition_selection`): one private partition ``p``
held by ``tau - 1`` background units (one below the threshold), each window of one bucket a run;
input B adds one unit whose rows in ``p`` sum to ``3C``.  The unit moves ``p``'s distinct-unit
count by 1 (``K = 1``) and its bucket sum by ``C``: ``p`` is released with probability
``P[Z >= 1]`` on A and ``P[Z >= 0]`` on B (ratio ``e^(1 / b)``, the selection's whole budget), and,
when released, its value carries the buckets' budget.  The output is (released, value); the
statistic their exact log-likelihood ratio, which reaches the claimed epsilon on the runs
where ``p`` is released with a value beyond ``t + C``.  A selection whose noise is smaller than
claimed, or that counts a unit more than once, spends more, and the bound shows it.  The delta
(a partition of the added unit's rows alone let out) has probability at most
``delta / (K e^eps)`` per window -- about 4e-7 here -- which no feasible number of runs sees:
:mod:`tests.test_aggregate_partition_selection` checks it exactly, over every value of the noise.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter, granularity_of, on_lattice
from dpstream.audit.streams import laplace_log_ratio
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.partition_selection import single_unit_release_probability

__all__ = ["UnitAggregateSelection", "UnitAggregateWindows"]

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


class UnitAggregateSelection(MechanismAdapter):
    """A private partition one unit below the selection's threshold; the unit (3C, scaled to C) added to it in
    each window of one bucket.  Outputs ``(released, value)`` per window (value 0 when not released)."""

    name = "unit-aggregate-selection"
    statistic_name = "the log-likelihood ratio of whether the private partition is released and its value"

    def __init__(self, *, epsilon: float = 1.0, bound: float = 4.0, rows: int = 3, samples: int = 20_000) -> None:
        self._params = dict(epsilon=epsilon, bucket=1, window=1, unit_bound=bound, upper_bound=bound,
                            max_partitions=1, partition_selection="private", selection_epsilon=epsilon / 2)
        probe = self._make(seed=0)
        guarantee = probe.privacy()
        self.claimed_epsilon, self.claimed_delta = guarantee.epsilon, guarantee.delta
        self.granularity, self.scale = granularity_of(probe), probe.noise_scale
        self.bound, self.rows, self.samples = bound, rows, samples
        self.background = int(probe.selection_threshold or 0) - 1  # units of p besides the audited one
        scale = discrete_laplace_scale(1, epsilon / 2)  # the selection's law, from its public parameters
        # P[released]: count tau - 1 (A) or tau (B) plus the noise reaches tau
        released = [single_unit_release_probability(2, scale), single_unit_release_probability(1, scale)]
        self._released = np.log(released[1] / released[0])
        self._held = np.log((1.0 - released[1]) / (1.0 - released[0]))
        self.value = 1.5  # each background unit's row
        truth = self.background * self.value
        self.neighbours = (truth, truth + bound)

    def _make(self, **noise: object) -> UnitAggregate:
        return UnitAggregate(**self._params, unit="unit", **noise)  # type: ignore[arg-type]

    def sample(self, x: float, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` windows: the background units' rows in p, and with B the audited unit's rows (each ``bound``)."""
        added = self.rows if x != self.neighbours[0] else 0
        per = self.background + added
        times = np.repeat(np.arange(n, dtype=np.int64) * _NS, per)
        units = np.tile(np.array([f"b{i}" for i in range(self.background)] + ["audited"] * added), n)
        values = np.tile(np.array([self.value] * self.background + [self.bound] * added), n)
        agg = self._make(seed=rng)
        out = [agg.release(times, units, values, np.full(times.size, "p")), agg.flush()]
        windows = np.concatenate([part.buckets for part in out]) // _NS
        outputs = np.zeros((n, 2))
        outputs[windows, 0] = 1.0
        outputs[windows, 1] = np.concatenate([part.values for part in out])
        return outputs

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        value = laplace_log_ratio(outputs[:, 1], self.neighbours[1], self.neighbours[0], self.scale)
        return np.where(outputs[:, 0] > 0, self._released + value, self._held)

    def possible_under(self, x: float, outputs: np.ndarray) -> np.ndarray:
        held = outputs[:, 0] == 0
        return np.where(held, outputs[:, 1] == 0, (outputs[:, 0] == 1) & on_lattice(
            outputs[:, 1], x, self.granularity, what="the unit aggregate's selected partition"))
