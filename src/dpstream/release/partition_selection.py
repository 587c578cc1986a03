"""Private partition selection for :class:`~dpstream.release.aggregate.UnitAggregate`: partitions not known in advance.

With ``partition_selection="private"`` a row may name a partition that is not public.  Such
partitions are *private*: their rows are bounded as every row is (a unit touches at most ``K =
max_partitions`` partitions per window, public and private together), their bucket sums are
**held** until the window closes, and at the close each private partition with rows gets its
number of distinct contributing units (units that kept it among their first ``K`` partitions)
plus exact discrete Laplace noise ``Z`` of scale ``b >= K / eps_sel``.  It is released for that
window -- every bucket of the window at once, with the hierarchy noise public partitions get,
keyed by the partition's *name* and the window -- only if ``count + Z >= tau``.  A partition that
is not selected is never named in the output; a private partition's buckets come out at the close
of their window, not as each bucket closes.

The threshold.  ``Z ~ DLap(b)`` has ``P[Z = z] = (1 - a) / (1 + a) a^|z|`` with ``a = exp(-1/b)``,
so for an integer ``t >= 0``, ``P[Z >= t] = sum_{z >= t} (1 - a) / (1 + a) a^z = a^t / (1 + a)``.
A partition holding one unit's rows only has count 1 and is released with probability
``P[1 + Z >= tau] = a^(tau - 1) / (1 + a)``.  The threshold is the least integer ``tau >= 2`` with
``m a^(tau - 1) / (1 + a) <= delta``, ``m = K e^eps`` (:func:`selection_threshold`):
``tau = 1 + ceil(b ln(m / (delta (1 + a))))``, checked against the law in floating point.

The guarantee, (eps, delta)-DP per unit per window with ``eps = eps_sel + eps_rel``.  Take
neighbours ``D`` and ``D' = D + u`` (one unit's rows of one window, add/remove).  After bounding,
``u`` holds at most ``K`` partitions: ``S0`` of them exist only in ``D'`` (no other unit), the rest
``S1`` in both.  On the partitions of both, the released quantities are the noisy unit counts
(L1 change ``|S1| <= K``, noise of scale ``K / eps_sel``: ``eps_sel``-DP) and the hierarchy
measurements of every partition's buckets (L1 change ``<= C`` over all partitions, from the
bounds: ``eps_rel``-DP, as for public partitions); releasing only the selected partitions' buckets
is post-processing of both.  Call that mechanism ``M_c``; ``M(D) = M_c(D)``, and ``M(D')`` is
``M_c(D')`` on the event ``E`` that no partition of ``S0`` is selected, independent of ``M_c(D')``,
with ``P[not E] <= |S0| a^(tau - 1) / (1 + a) <= K a^(tau - 1) / (1 + a)``.  Then for any set
``O`` of outputs, ``P[M(D') in O] <= P[M_c(D') in O] + P[not E] <= e^eps P[M(D) in O] + P[not E]``
and ``P[M(D) in O] <= e^eps P[M_c(D') in O] <= e^eps (P[M(D') in O] + P[not E])``: both within
``delta`` when ``K e^eps a^(tau - 1) / (1 + a) <= delta``.  Windows are disjoint (parallel
composition); the replacement relation is not offered with private selection.

What is public: the public partitions and the names of the selected ones (each a DP output), in
the order of their names (the order they first arrived in is data), and their numbers in the
output: after the public ones, in the order first selected (:attr:`PartitionSelector.published`).
What is not: which private partitions had rows and how many units (never printed), nor the numbers
they are held under (the order of arrival).
Every private name seen in the run is held, with a window's sums of each: an error when they exceed
what is held in memory (``MAX_LEAVES`` buckets x partitions) depends on the data; it is stated as a limit.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.noise.source import NoiseSource
from dpstream.privacy import EpsilonDelta, Part

__all__ = ["MAX_SELECTION_DELTA", "MAX_SELECTION_PARTITIONS", "SELECTIONS", "PartitionSelector", "check_selection",
           "held_values", "selection_threshold", "single_unit_release_probability"]

#: ``public`` (every partition listed in advance) or ``private`` (others selected per window).
SELECTIONS = ("public", "private")
#: The most partitions one unit may touch per window with private selection: each active unit holds them, and
#: the threshold grows in proportion.
MAX_SELECTION_PARTITIONS = 1024
#: The largest delta accepted: above it a partition of one unit's rows is let out too often to call private.
MAX_SELECTION_DELTA = 1e-3


def check_selection(selection: str, selection_epsilon: float | None, delta: float, *, epsilon: float,
                    max_partitions: int | None, replace: bool) -> float:
    """Refuse a selection the guarantee does not cover; return the epsilon it spends (0 for public partitions).

    >>> check_selection("private", None, 1e-6, epsilon=1.0, max_partitions=None, replace=False)
    Traceback (most recent call last):
    ValueError: private partition selection needs max_partitions (--unit-max-partitions): the partitions one unit \
may touch per window bound the selection's sensitivity.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"partition_selection must be one of {', '.join(SELECTIONS)}, got {selection!r}.")
    if selection == "public":
        if selection_epsilon is not None:
            raise ValueError("selection_epsilon applies with private partition selection only.")
        return 0.0
    if max_partitions is None:
        raise ValueError("private partition selection needs max_partitions (--unit-max-partitions): the partitions "
                         "one unit may touch per window bound the selection's sensitivity.")
    if max_partitions > MAX_SELECTION_PARTITIONS:
        raise ValueError(f"private partition selection takes max_partitions (--unit-max-partitions) up to "
                         f"{MAX_SELECTION_PARTITIONS}, got {max_partitions} (the threshold grows with it).")
    spent = epsilon / 2 if selection_epsilon is None else selection_epsilon
    if isinstance(spent, bool) or not isinstance(spent, (int, float)) or not 0 < spent < epsilon:
        raise ValueError(f"selection_epsilon must lie strictly between 0 and epsilon {epsilon:g} (the rest pays for "
                         f"the buckets), got {spent!r}.")
    try:  # the selection's own noise (the buckets' is checked where it is drawn)
        discrete_laplace_scale(max_partitions, spent)
    except ValueError as error:
        what = ("selection_epsilon (--selection-epsilon)" if selection_epsilon is not None else
                f"half of epsilon {epsilon!r} (the default selection_epsilon, --selection-epsilon),")
        raise ValueError(f"{what} {spent!r} is too small for the selection's exact noise: {error}") from None
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta <= MAX_SELECTION_DELTA:
        raise ValueError(f"selection_delta must lie in (0, {MAX_SELECTION_DELTA:g}], got {delta!r}.")
    if replace:
        raise ValueError("private partition selection is offered for the add/remove relation only, not replace.")
    return float(spent)


def single_unit_release_probability(tau: int, scale: Fraction) -> float:
    """``P[1 + Z >= tau]`` for ``Z ~ DLap(scale)`` and an integer ``tau >= 1``: ``a^(tau - 1) / (1 + a)``.

    >>> round(single_unit_release_probability(1, Fraction(1)), 6)  # P[Z >= 0] = 1 / (1 + e^-1)
    0.731059
    """
    a = math.exp(-1.0 / float(scale))
    return a ** (tau - 1) / (1.0 + a)


def selection_threshold(k: int, scale: Fraction, delta: float, epsilon: float) -> int:
    """The least integer ``tau >= 2`` with ``K e^epsilon P[1 + Z >= tau] <= delta`` (the module docstring).

    >>> selection_threshold(1, Fraction(2), 1e-6, 1.0)  # 1 + ceil(2 ln(e / (1e-6 (1 + e^-0.5))))
    30
    """
    a = math.exp(-1.0 / float(scale))
    factor = k * math.exp(epsilon)
    tau = max(2, 1 + math.ceil(float(scale) * math.log(factor / (delta * (1.0 + a)))))
    while factor * single_unit_release_probability(tau, scale) > delta:  # the float formula, checked
        tau += 1
    while tau > 2 and factor * single_unit_release_probability(tau - 1, scale) <= delta * (1 - 1e-12):
        tau -= 1
    return tau


def held_values(measure: Any, totals: np.ndarray, name: str, window: int) -> np.ndarray:
    """The released values of every bucket of a selected private partition's held ``totals`` (grid units) in
    ``window``: the measure's consistent hierarchy noise, from the part ``(measure, "private", name, window)`` --
    keyed by the name, so the same noise is never published on other data and a resumed run recomputes it."""
    ar, width = measure.arithmetic, measure.width
    levels = ar.draw(measure.source.sampler(measure.name, "private", name, window), width, measure.fanout,
                     measure.levels)
    return ar.estimates(totals, *ar.consistent(levels, measure.fanout, width), np.arange(width))


class PartitionSelector:
    """The private partitions of a release: their names, held bucket sums and per-window selection.

    Private partitions are held under numbers after the ``offset`` public ones, in the order their names first
    arrive (SECRET); a window's held sums of every measure are ``(partitions, width)`` int64 grid units.  Released
    ones are numbered apart, after the public ones in the order first selected (:attr:`published`: public).
    """

    def __init__(self, *, offset: int, width: int, measures: int, max_partitions: int, epsilon: float,
                 delta: float, limit: int) -> None:
        self.offset, self.width, self.limit = offset, width, limit
        self.max_partitions, self.delta = max_partitions, delta
        self.scale = discrete_laplace_scale(max_partitions, epsilon)  # rounded up: spends at most epsilon
        self.spent_epsilon = max_partitions / float(self.scale)
        self.tau: int | None = None
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        #: The selected partitions' names in the order first selected: their output numbers follow the public ones.
        self.published: list[str] = []
        self._number: dict[str, int] = {}
        #: How many values of private partitions were released (every bucket of a selected partition's window).
        self.released = 0
        self.totals = [np.zeros((0, width), dtype=np.int64) for _ in range(measures)]

    def set_threshold(self, epsilon: float) -> None:
        """Fix tau for the whole release's ``epsilon`` (selection and buckets: the factor e^eps of delta)."""
        self.tau = selection_threshold(self.max_partitions, self.scale, self.delta, epsilon)

    def part(self, noise: str) -> Part:
        """The selection's piece of the guarantee, (eps_sel, delta)."""
        return Part(what="selection", budget=EpsilonDelta(self.spent_epsilon, self.delta), noise=noise,
                    text=f"private partitions selected per window: distinct units (L1 sensitivity "
                         f"{self.max_partitions} from the bounds) plus discrete Laplace of scale "
                         f"{float(self.scale):g}, "
                         f"released if at least {self.tau}; a partition of one unit's rows is let out with "
                         f"probability at most delta = {self.delta:g}")

    def indices(self, names: list[str]) -> np.ndarray:
        """The partition numbers of private ``names`` (``offset`` onwards), new names numbered as they come."""
        index = self._index
        for name in names:
            if name not in index:
                if (self.offset + len(index) + 1) * self.width > self.limit:
                    raise ValueError(f"more partitions than the {self.limit:,} leaves a window holds in memory "
                                     f"({self.width:,} buckets each): use longer buckets or a shorter window.")
                index[name] = len(index)
                self.names.append(name)
        grown = len(index) - self.totals[0].shape[0]
        if grown:
            self.totals = [np.concatenate((t, np.zeros((grown, self.width), dtype=np.int64))) for t in self.totals]
        return np.array([self.offset + index[name] for name in names], dtype=np.int64)

    def clear(self) -> None:
        """A new window: nothing held."""
        for totals in self.totals:
            totals[:] = 0

    def select(self, units: np.ndarray, window: int, source: NoiseSource) -> np.ndarray:
        """The private partitions (numbers from 0) selected in ``window`` from their distinct-unit counts
        ``units``: each with rows gets ``DLap(scale)`` from the keyed part ``("selection", name, window)``.

        In the order of their names: the order names first arrived in is data (one unit's row may be a
        partition's first), and the output's order must be a function of the selected set alone.
        """
        assert self.tau is not None
        candidates = np.flatnonzero(units > 0)
        candidates = candidates[np.argsort(np.array([self.names[c] for c in candidates], dtype=object),
                                           kind="stable")]
        noisy = [int(units[c]) + int(source.sampler("selection", self.names[c], window).laplace_units(self.scale, 1)[0])
                 for c in candidates]
        return candidates[np.asarray(noisy, dtype=np.int64) >= self.tau]

    def release(self, measures: list[Any], bounder: Any, window: int,
                source: NoiseSource) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """At the close of ``window``: the selected private partitions' output numbers (from ``offset``, in the
        order first selected: :attr:`published`) and each measure's values of them, shape (width, selected) (None
        when none is selected).

        ``bounder`` (:class:`~dpstream.release.bounding.ContributionBounder`) counts the distinct units holding each
        partition number; each measure releases the held totals through its own hierarchy (:func:`held_values`).
        """
        units = bounder.units_per_partition(self.offset + len(self.names))
        chosen = self.select(units[self.offset:], window, source)
        if not chosen.size:
            return None
        found = [np.stack([held_values(m, totals[c], self.names[c], window) for c in chosen], axis=1)
                 for m, totals in zip(measures, self.totals)]
        for c in chosen:  # in the order of the names: the numbers are a function of the selected sets alone
            self._number.setdefault(self.names[c], len(self._number))
        self.published = list(self._number)
        self.released += chosen.size * self.width
        return self.offset + np.array([self._number[self.names[c]] for c in chosen], dtype=np.int64), found

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The names seen and the held sums of the open window, as plain data."""
        return {"names": list(self.names), "totals": [t.copy() for t in self.totals], "published": list(self.published),
                "released": self.released}

    def restore(self, data: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot`."""
        self.names = [str(name) for name in data["names"]]
        self._index = {name: i for i, name in enumerate(self.names)}
        self.totals = [np.asarray(t, dtype=np.int64).reshape(len(self.names), self.width).copy()
                       for t in data["totals"]]
        self.published = [str(name) for name in data.get("published", [])]  # none before the numbers were public
        self._number = {name: i for i, name in enumerate(self.published)}
        self.released = int(data.get("released", 0))
