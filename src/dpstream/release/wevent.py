"""w-event privacy for a stream's hierarchy: every window of ``w`` consecutive values protected at epsilon.

The relation (:class:`~dpstream.privacy.WEvent`, Kellaris et al., VLDB 2014): two streams are
neighbours when they differ in at most ``w`` consecutive values, each anywhere in ``[0, B]``.  A
household's half-hourly meter over a day is ``w = 48``.  This module derives what the hierarchies
of :class:`~dpstream.release.tops.ToPS` (with a public threshold) and of
:class:`~dpstream.release.binary_tree.BinaryTreeCounter` spend under it.

Sensitivity
-----------
Every measured level of a hierarchy partitions the positions of its chunk into nodes (leaves of
one value, of ``b^s`` values, of one period; their parents).  Let a window change the values at
positions ``W`` (``|W| <= w``, consecutive), each by at most theta after truncation at theta.  A
node covering ``m`` positions changes by at most ``min(m, w) theta``, and a level by

    ``sum over its nodes of |sum of the changes inside the node| <= sum over W of |change| <= w theta``,

whatever ``m``: the nodes of one level are disjoint.  So under w-event **each level has L1
sensitivity ``w theta``, not ``min(m, w) theta`` per level** (nodes narrower than the window are
many: ``w / m`` of them each change by ``m theta``), and ``d`` levels at (discrete) Laplace scale
``d w theta / eps`` are eps-DP.  That is exactly group privacy over ``w`` values: the noise of
``eps / w`` per value at event level.  Re-deriving the sensitivity of the hierarchy gains
nothing by itself (``tests/test_wevent.py`` finds ``w theta`` by brute force on every level).

What a window does not touch is what can be bought: **a bound on each period's total**
(``period_bound`` C, with ``period`` P: ToPS's leaves are the periods).  Within each period the
values add, in order, until they reach C: the value that crosses C is cut to what is left, later
values of the period count 0 (the clipped running total, in grid units on the exact path; the
same rule as :mod:`dpstream.release.bounding`).  A period's bounded total then changes by at
most ``min(j theta, C)`` when the window holds ``j`` of its positions, and a window of ``w``
consecutive positions covers ``j_1, P, ..., P, j_k`` positions of consecutive periods, so every
level (its nodes are unions of whole periods) changes by at most

    ``S = max over the window's offset in its first period of sum over the periods it touches of min(j theta, C)``

(:func:`window_sensitivity`; ``2C`` when ``w <= P`` and ``C <= w theta / 2``, against ``w theta``).
The hierarchy runs at ``eps theta / S`` per value (:func:`event_epsilon`) and its noise scale
``d theta / (eps theta / S) = d S / eps`` is what the w-event claim needs; the budget stated is
recomputed from the scale drawn (``d S_units / beta``, rounded up, at most eps).

The threshold must be public (``threshold=``): a threshold chosen from a hold-out would read up
to ``w`` held-out positions of one window (and a window across the end of the hold-out both
parts), which the selection's analysis does not cover.  Smoothing, consistency and the
predictions inside a period are post-processing of the noisy nodes, as at event level.
Chunks (``max_range`` values, whole periods) are disjoint hierarchies: a window that straddles
two chunks splits its changes between them and the sum above still bounds the total.

Over a stream's horizon: ``n`` values are ``ceil(n / w)`` disjoint windows, so changing all of
them is ``ceil(n / w)`` steps of the relation: ``ceil(n / w) eps`` by composition
(:func:`horizon`), and no more is claimed.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpstream._checks import MIN_EPSILON, check_bound, check_positive_int
from dpstream.noise.grid import epsilon_of_scale, float_down, float_up
from dpstream.privacy import Composition, EpsilonDelta, Part, PrivacyGuarantee, WEvent

__all__ = ["PeriodBounded", "bound_periods", "check_wevent", "event_epsilon", "hierarchy_wevent", "horizon",
           "spent_of_scale", "wevent_privacy", "window_sensitivity"]


def window_sensitivity(window: int, period: int, step: int | float, bound: int | float | None = None) -> Any:
    """S: the most a window of ``window`` consecutive values, each changed by at most ``step``, moves one level
    whose nodes are unions of whole periods of ``period`` values with each period's total bounded at ``bound``.

    Without a bound (or with ``period`` 1, one value a node) it is ``window * step``.  Exact for
    integers (grid units).

    >>> window_sensitivity(48, 48, 5), window_sensitivity(48, 48, 5, 30), window_sensitivity(48, 48, 5, 200)
    (240, 60, 240)
    >>> window_sensitivity(4, 4, 1, 1), window_sensitivity(10, 4, 1, 1)  # 1 + 1 of two periods; 1 + 1 + 1 + 1
    (2, 4)
    """
    if bound is None:
        return window * step
    offsets = np.arange(period, dtype=np.int64)  # where the window starts in its first period
    first = np.minimum(period - offsets, window)
    whole, last = np.divmod(window - first, period)
    totals = [min(int(j) * step, bound) + int(k) * min(period * step, bound) + min(int(r) * step, bound)
              for j, k, r in zip(first.tolist(), whole.tolist(), last.tolist())]
    return max(totals)


def check_wevent(w_event: object, period_bound: object, *, threshold: float | None, period: int | None
                 ) -> tuple[int | None, float | None]:
    """``w_event`` and ``period_bound`` checked against the rest of a ToPS (see the module docstring)."""
    if w_event is None:
        if period_bound is not None:
            raise ValueError("period_bound applies with w_event only (it bounds what one window changes).")
        return None, None
    window = check_positive_int(w_event, "w_event")
    if threshold is None:
        raise ValueError("w_event needs a public threshold: a threshold chosen from a hold-out would read up to "
                         f"w_event = {window} held-out values of one window.")
    if period_bound is None:
        return window, None
    if period is None:
        raise ValueError("period_bound bounds each period's total: it needs period.")
    return window, check_bound(period_bound, "period_bound")


def event_epsilon(epsilon: float, window: int, *, theta: float, period: int | None, bound: float | None) -> float:
    """The budget per value at event level that spends ``epsilon`` per window: ``epsilon theta / S``, rounded down.

    >>> event_epsilon(1.0, 48, theta=5.0, period=48, bound=None) == 1 / 48  # group privacy
    True
    >>> event_epsilon(1.0, 48, theta=5.0, period=48, bound=30.0) == 5 / 60  # S = 2C = 60
    True
    """
    sensitivity = window_sensitivity(window, period or 1, Fraction(theta), None if bound is None else Fraction(bound))
    per_value = float_down(Fraction(epsilon) * Fraction(theta) / sensitivity)
    if per_value < MIN_EPSILON:  # said here, with the window that made it small, not as a bad epsilon
        raise ValueError(f"w_event = {window:,} leaves epsilon {per_value:.3g} per value, below {MIN_EPSILON:g} "
                         "(smaller budgets drown the data in float64 noise): a shorter window or a larger epsilon.")
    return per_value


def bound_periods(values: np.ndarray, *, start: int, running: Any, period: int, bound: Any) -> np.ndarray:
    """Values at clock positions ``start, start + 1, ...`` with each period's running total clipped at ``bound``.

    ``running`` is the bounded total of the period ``start`` falls in, before ``values``.  Vectorized;
    exact for integers (grid units).

    >>> bound_periods(np.array([2, 2, 2, 1, 3, 3]), start=2, running=1, period=4, bound=4).tolist()
    [2, 1, 2, 1, 1, 0]
    """
    if not values.size:
        return values
    index = np.arange(start, start + values.size) // period
    first = np.flatnonzero(np.diff(index, prepend=index[0] - 1))  # where each period begins in ``values``
    totals = np.cumsum(values)
    before = np.repeat(np.concatenate(([0], totals[first[1:] - 1])), np.diff(np.append(first, values.size)))
    inside = totals - before  # each period's running total inside ``values``
    inside[: first[1] if first.size > 1 else values.size] += running
    clipped = np.minimum(inside, bound)
    previous = np.concatenate(([0], clipped[:-1]))
    previous[first] = 0
    previous[0] = min(running, bound)
    return clipped - previous


class PeriodBounded:
    """A periodic perturber whose every period's total is bounded at ``bound`` before it is measured.

    The values (already truncated at theta) are rounded to the perturber's grid and bounded in grid
    units by :func:`bound_periods` (on the float path, as reals); the perturber then measures the
    bounded values, which lie on its grid already.  The running total of the open period is the
    perturber's own (its chunk's total since the period began), so a snapshot needs nothing more.
    Everything else is the perturber's.
    """

    def __init__(self, perturber: Any, bound: float) -> None:
        self.perturber = perturber
        self.bound = bound_units(bound, perturber)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.perturber, name)

    def _running(self) -> Any:
        state = self.perturber.state
        return state.chunk_total - state.block_start_total

    def _values(self, units: Any) -> Any:
        return units * self.perturber.granularity if self.perturber.exact else units

    def release(self, values: np.ndarray) -> np.ndarray:
        """Bound a batch of values in ``[0, theta]`` period by period, then release it."""
        perturber = self.perturber
        units = perturber._arithmetic.units(np.asarray(values, dtype=np.float64))
        bounded = bound_periods(units, start=perturber.state.released + perturber.phase, running=self._running(),
                                period=perturber.period, bound=self.bound)
        return perturber.release(self._values(bounded))

    def release_one(self, value: float) -> float:
        """One value in ``[0, theta]``, bounded as the batch path bounds it."""
        unit = self.perturber._arithmetic.unit(value)
        return self.perturber.release_one(self._values(min(unit, self.bound - self._running())))


def bound_units(bound: float, stream: Any) -> Any:
    """C as the release enforces it: whole grid units at most C on the exact path (C itself on the float path)."""
    return math.floor(Fraction(bound) / Fraction(stream.granularity)) if stream.exact else bound


def hierarchy_wevent(stream: Any, *, window: int, period: int | None, bound: float | None) -> PrivacyGuarantee:
    """The w-event guarantee of a ToPS hierarchy ``stream`` (a perturber, bounded by :class:`PeriodBounded` with
    ``bound``): ``d S / beta`` for its ``d`` measured levels of noise scale ``beta`` and S of
    :func:`window_sensitivity` on its grid."""
    exact, g = stream.exact, stream.granularity
    step = stream.threshold_units if exact else stream.threshold
    cap = None if bound is None else bound_units(bound, stream)
    sensitivity = window_sensitivity(window, period or 1, step, cap)
    levels = stream.measured_levels
    spent = spent_of_scale(sensitivity, levels, stream.noise_scale_units if exact else None, stream.noise_scale)
    real = sensitivity * g if exact else sensitivity
    how = (f"w theta = {window} x {stream.threshold:g}" if bound is None else
           f"the periods of {period} values it touches, each total bounded at C = {float(cap * g if exact else cap):g}")
    words = (f"w-event over {window} consecutive values: a window moves each of the {levels} measured levels by at "
             f"most S = {real:g} in L1 ({how}); noise of scale d S / eps on each level spends eps = {spent:g} per "
             f"window; the same noise at event level (eps theta / S per value):")
    return wevent_privacy(stream.privacy(), window=window, spent=spent, sensitivity=words)


def wevent_privacy(event: PrivacyGuarantee, *, window: int, spent: float, sensitivity: str) -> PrivacyGuarantee:
    """The guarantee of a hierarchy at the w-event relation: ``spent`` (from its noise scale and the window's
    sensitivity), the event-level statement of its noise as the part's words."""
    part = Part(what="w-event hierarchy", budget=EpsilonDelta(spent), noise=event.noise, text=(
        f"{sensitivity} {event.composition}"))
    return PrivacyGuarantee.of(Composition(kind="parallel", parts=(part,), layout="{}"), neighbours=WEvent(window))


def spent_of_scale(sensitivity: int, levels: int, scale: Fraction | None, value: float) -> float:
    """``levels * sensitivity / scale`` rounded up (exact path, grid units), or of the float scale ``value``."""
    if scale is not None:
        return epsilon_of_scale(levels * sensitivity, scale)
    return float_up(Fraction(levels) * Fraction(sensitivity) / Fraction(value))


def horizon(values: int, window: int, epsilon: float) -> str:
    """What a w-event guarantee gives over a stream of ``values`` values: ``ceil(values / window)`` windows.

    >>> horizon(1440, 48, 1.0)
    'any 48 consecutive values: epsilon = 1; over 1,440 values (30 disjoint windows of 48): epsilon = 30 by composition'
    """
    windows = max(1, math.ceil(values / window))
    return (f"any {window:,} consecutive values: epsilon = {epsilon:g}; over {values:,} values ({windows:,} disjoint "
            f"window{'s' * (windows != 1)} of {window:,}): epsilon = {float_up(Fraction(epsilon) * windows):g} by "
            "composition")
