"""The five smoothers of Appendix D, as pure functions of the perturber's past outputs.

The perturber measures only blocks of ``b^s`` values.  Write ``a_k = u_k / b^s`` for the
per-value mean of block ``k``'s noisy, consistent sum ``u_k`` (k = 1, 2, ...), and
``a_0 = theta / 2`` for the prior (Algorithm 1 starts with ``u = b^s theta / 2``).  The values
of block ``k + 1`` arrive before ``u_{k+1}`` exists, so a smoother predicts them from the
history ``a_0 .. a_k`` (Algorithm 1 uses the previous block's ``u``; Appendix D's index
``t = ceil(i / b^s)`` would need the current block's sum, which is not known online).

* Recent: ``a_k``.
* Mean: the mean of ``a_0 .. a_k`` (Appendix D writes ``1/(b^s t) sum_{j=0}^{t} u_j``: t + 1
  terms over t; we take the mean it describes in words).
* Median: the median of ``a_1 .. a_k`` (``a_0`` before any block is measured).
* Moving average (window w): the mean of the last ``min(w, k + 1)`` of ``a_0 .. a_k``.
* Exponential (alpha): ``e_0 = a_0``, ``e_k = alpha a_k + (1 - alpha) e_{k-1}``.

Privacy
-------
Post-processing only: no randomness, no budget.

Each smoother is stateless; its state is an explicit value passed in and returned, so a stream
can be saved, restored and replayed.  ``step(state, observations)`` returns the prediction after
each observation and the new state, and feeding observations one at a time or all at once gives
bit-identical predictions (tested).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpstream._checks import check_choice, check_positive_int, check_probability

__all__ = [
    "SMOOTHERS",
    "ExponentialSmoother",
    "MeanSmoother",
    "MedianSmoother",
    "MovingAverageSmoother",
    "RecentSmoother",
    "Smoother",
    "make_smoother",
]


class Smoother(Protocol):
    """What the perturber needs from a smoother."""

    name: str

    def init(self, prior: float) -> Any:
        """State before any block is measured, with ``prior`` = a_0."""

    def predict(self, state: Any) -> float:
        """Prediction for each value of the next block."""

    def step(self, state: Any, observations: np.ndarray) -> tuple[np.ndarray, Any]:
        """Feed block means in order; return the prediction after each one and the new state."""


@dataclass(frozen=True, kw_only=True)
class RecentSmoother:
    """Predict the most recent block mean (the paper's default).

    >>> s = RecentSmoother(); state = s.init(5.0)
    >>> predictions, state = s.step(state, np.array([1.0, 3.0]))
    >>> predictions.tolist(), s.predict(state)
    ([1.0, 3.0], 3.0)
    """

    name: str = "recent"

    def init(self, prior: float) -> float:
        return float(prior)

    def predict(self, state: float) -> float:
        return state

    def step(self, state: float, observations: np.ndarray) -> tuple[np.ndarray, float]:
        observations = np.asarray(observations, dtype=np.float64)
        return observations.copy(), (float(observations[-1]) if observations.size else state)


@dataclass(frozen=True, kw_only=True)
class MeanSmoother:
    """Predict the mean of all block means so far, the prior included.

    >>> s = MeanSmoother(); predictions, _ = s.step(s.init(3.0), np.array([1.0, 5.0]))
    >>> predictions.tolist()
    [2.0, 3.0]
    """

    name: str = "mean"

    def init(self, prior: float) -> tuple[float, int]:
        return float(prior), 1

    def predict(self, state: tuple[float, int]) -> float:
        total, count = state
        return total / count

    def step(self, state: tuple[float, int], observations: np.ndarray) -> tuple[np.ndarray, tuple[float, int]]:
        total, count = state
        observations = np.asarray(observations, dtype=np.float64)
        totals = np.cumsum(np.concatenate(([total], observations)))[1:]
        counts = count + np.arange(1, observations.size + 1)
        if observations.size == 0:
            return np.empty(0), state
        return totals / counts, (float(totals[-1]), int(counts[-1]))


@dataclass(frozen=True, kw_only=True)
class MovingAverageSmoother:
    """Predict the mean of the last ``window`` block means (fewer at the start, prior included).

    >>> s = MovingAverageSmoother(window=2); predictions, _ = s.step(s.init(0.0), np.array([2.0, 4.0, 6.0]))
    >>> predictions.tolist()
    [1.0, 3.0, 5.0]
    """

    window: int = 8
    name: str = "moving_average"

    def __post_init__(self) -> None:
        check_positive_int(self.window, "window")

    def init(self, prior: float) -> tuple[float, ...]:
        # Running totals C_{-1} = 0 and C_0 = a_0; the state keeps the last window + 1 of them.
        return (0.0, float(prior))

    def predict(self, state: tuple[float, ...]) -> float:
        count = min(self.window, len(state) - 1)
        return (state[-1] - state[-1 - count]) / count

    def step(self, state: tuple[float, ...], observations: np.ndarray) -> tuple[np.ndarray, tuple[float, ...]]:
        observations = np.asarray(observations, dtype=np.float64)
        if observations.size == 0:
            return np.empty(0), state
        totals = np.concatenate((state, np.cumsum(np.concatenate(([state[-1]], observations)))[1:]))
        n_old = len(state)
        ends = np.arange(n_old, totals.size)
        # The state is a suffix of all totals, complete while it is shorter than window + 1; so
        # index e in ``totals`` has at least min(window, e) totals before it.
        history = np.minimum(ends, self.window)
        predictions = (totals[ends] - totals[ends - history]) / history
        return predictions, tuple(totals[-(self.window + 1) :].tolist())


@dataclass(frozen=True, kw_only=True)
class ExponentialSmoother:
    """Predict ``e_k = alpha a_k + (1 - alpha) e_{k-1}`` with ``e_0`` the prior.

    >>> s = ExponentialSmoother(alpha=0.5); predictions, _ = s.step(s.init(0.0), np.array([4.0, 4.0]))
    >>> predictions.tolist()
    [2.0, 3.0]
    """

    alpha: float = 0.6
    name: str = "exponential"

    def __post_init__(self) -> None:
        check_probability(self.alpha, "alpha")

    def init(self, prior: float) -> float:
        return float(prior)

    def predict(self, state: float) -> float:
        return state

    def step(self, state: float, observations: np.ndarray) -> tuple[np.ndarray, float]:
        alpha, keep = self.alpha, 1.0 - self.alpha
        out = []
        for value in np.asarray(observations, dtype=np.float64).tolist():
            state = alpha * value + keep * state
            out.append(state)
        return np.array(out, dtype=np.float64), state


@dataclass(frozen=True, kw_only=True)
class MedianSmoother:
    """Predict the median of all measured block means (the prior until one exists).

    Its state grows with the stream by one number per block (two heaps), which is why it is
    not the default.

    >>> s = MedianSmoother(); predictions, _ = s.step(s.init(9.0), np.array([1.0, 5.0, 2.0]))
    >>> predictions.tolist()
    [1.0, 3.0, 2.0]
    """

    name: str = "median"

    def init(self, prior: float) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
        # (prior, max-heap of the lower half as negatives, min-heap of the upper half)
        return float(prior), (), ()

    def predict(self, state: tuple[float, tuple[float, ...], tuple[float, ...]]) -> float:
        prior, low, high = state
        if not low:
            return prior
        if len(low) > len(high):
            return -low[0]
        return (-low[0] + high[0]) / 2.0

    def step(self, state, observations):
        prior, low_t, high_t = state
        low, high = list(low_t), list(high_t)
        out = []
        for value in np.asarray(observations, dtype=np.float64).tolist():
            if low and value > -low[0]:
                heapq.heappush(high, value)
            else:
                heapq.heappush(low, -value)
            if len(low) > len(high) + 1:
                heapq.heappush(high, -heapq.heappop(low))
            elif len(high) > len(low):
                heapq.heappush(low, -heapq.heappop(high))
            out.append(-low[0] if len(low) > len(high) else (-low[0] + high[0]) / 2.0)
        return np.array(out, dtype=np.float64), (prior, tuple(low), tuple(high))


#: Smoother names accepted by :func:`make_smoother`, the CLI and the evaluation harness.
SMOOTHERS: dict[str, type] = {
    "recent": RecentSmoother,
    "mean": MeanSmoother,
    "median": MedianSmoother,
    "moving_average": MovingAverageSmoother,
    "exponential": ExponentialSmoother,
}


def make_smoother(name: str | Smoother = "recent", **params: Any) -> Smoother:
    """Build a smoother by name (``window`` for moving_average, ``alpha`` for exponential).

    >>> make_smoother("moving_average", window=4)
    MovingAverageSmoother(window=4, name='moving_average')
    """
    if not isinstance(name, str):
        if not all(callable(getattr(name, method, None)) for method in ("init", "predict", "step")):
            raise TypeError(
                f"smoother must be a name ({', '.join(SMOOTHERS)}) or an object with init, predict "
                f"and step methods, got {name!r}."
            )
        if params:
            raise ValueError(
                f"smoother parameters {sorted(params)} apply to smoothers given by name; the smoother "
                f"{name!r} is already built."
            )
        return name
    check_choice(name, "smoother", tuple(SMOOTHERS))
    allowed = {"moving_average": {"window"}, "exponential": {"alpha"}}.get(name, set())
    unknown = set(params) - allowed
    if unknown:
        key = sorted(unknown)[0]
        raise ValueError(
            f"smoother {name!r} takes no parameter {key!r} (it takes {sorted(allowed) or 'none'}), "
            f"got {key}={params[key]!r}."
        )
    return SMOOTHERS[name](**params)
