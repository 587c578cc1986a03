"""Adapters of the private selections the model threshold runs (:mod:`dpstream.thresholds.select`), each
released on its own: two candidates whose scores move by the sensitivity, so that the winner changes.

The model threshold releases two choices made by permute-and-flip: the median (step 1, rank scores
``-|#{v <= t} - m/2|``, sensitivity 1, not monotone) and theta (step 3, sensitivity 1, monotone).
The end-to-end adapter ``tops-model`` runs them on a hold-out, where at their small shares of the
budget their worst-case ratios show on rare outputs only; here each selection runs at the audit's
whole budget on its worst-case pair of scores, where the law of the choice is known exactly
(:func:`~dpstream.thresholds.select.selection_probabilities`).  The selection's law depends on
its budget alone, so this checks the exponent every share of the model is spent through.

Scores ``(d, 0)`` on input A and ``(d - 1, 0)`` (monotone: one score moves by the sensitivity) or
``(d - 1, 1)`` (not monotone: both move, in opposite directions) on input B, ``d = 2^-12`` a
fraction of a grid step: the grid scores tie on A (candidate 0, the true best, wins with
probability 1/2) and candidate 0 is the true worst on B; its coin there has probability
``exp(-eps 1024 / 1025)``, so the event "candidate 0" has the ratio ``e^(eps 1024 / 1025)`` at
probability 1/2 on A: the bound comes near the claim with few runs.  A selection that takes the
best true score picks candidate 0 on A and 1 on B every time.

The model's theta can also be chosen by report-noisy-max or the exponential mechanism
(``selection=``): on two candidates their laws show less of their budget (``e^0.593`` and
``e^0.619`` at eps = 1, the adapter's ``spends``, from the exact law), so those adapters see a
broken selection, not a slightly generous one.
"""

from __future__ import annotations

import numpy as np

from dpstream.audit.core import MechanismAdapter
from dpstream.noise.bits import KeyedBits
from dpstream.thresholds.select import SELECTIONS, select, selection_epsilon, selection_probabilities

__all__ = ["Selection"]

#: A fraction of one grid step of the scores (``SCORE_BITS = 10``): candidate 0 is the true best on A.
_NUDGE = 2.0**-12


class Selection(MechanismAdapter):
    """One private selection of :mod:`dpstream.thresholds.select` on two candidates, drawing its bits from a
    keyed source as the model does (``KeyedBits``, a fresh secret per input); the output is the index chosen.

    Parameters
    ----------
    name : str
        The experiment's name.
    mechanism : str
        A key of :data:`~dpstream.thresholds.select.SELECTIONS` (the model's default: permute-and-flip).
    monotone : bool
        Monotone scores (theta's, step 3) or not (the median's rank scores, step 1).
    """

    statistic_name = "the candidate chosen (0: the true best on input A, the true worst on B)"

    def __init__(self, name: str, *, mechanism: str = "permute-and-flip", monotone: bool = True,
                 epsilon: float = 1.0, samples: int = 32_000) -> None:
        if mechanism not in SELECTIONS:
            raise ValueError(f"mechanism must be one of {', '.join(SELECTIONS)}, got {mechanism!r}.")
        self.name, self.mechanism, self.monotone, self.epsilon = name, mechanism, bool(monotone), float(epsilon)
        self.claimed_epsilon, self.claimed_delta = selection_epsilon(mechanism, epsilon, monotone=monotone), 0.0
        moved = np.array([_NUDGE - 1.0, 0.0 if monotone else 1.0])
        self.neighbours, self.samples = (np.array([_NUDGE, 0.0]), moved), samples
        laws = [self.law(x) for x in self.neighbours]
        self.spends = float(np.abs(np.log(laws[0] / laws[1])).max())  # the choice's exact law, both ways

    def law(self, scores: np.ndarray) -> np.ndarray:
        """The exact law of the index chosen on ``scores`` (float)."""
        return selection_probabilities(self.mechanism, scores, epsilon=self.epsilon, monotone=self.monotone)

    def sample(self, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        bits = KeyedBits(key=rng.bytes(32), identity=("audit", self.name))
        return np.array([select(self.mechanism, x, epsilon=self.epsilon, monotone=self.monotone, seed=bits)
                         for _ in range(n)], dtype=np.float64)

    def possible_under(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        valid = np.isin(outputs, (0.0, 1.0))
        return valid & (self.law(x)[np.where(valid, outputs, 0).astype(np.int64)] > 0)
