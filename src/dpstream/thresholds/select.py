"""Private selection of the best candidate from scores: three mechanisms, sampled exactly.

Each takes float scores ``q_1 .. q_K`` of sensitivity ``Delta`` (one neighbouring change moves
every score by at most ``Delta``; *monotone* when all move in the same direction) and returns
an index.  None of them releases a score.

* :func:`report_noisy_max_scores` -- the index of the largest ``q_i + Z_i``, ``Z_i`` discrete
  Laplace (Dwork and Roth, Section 3.3), on real scores floored to a grid (the budget counts one
  more grid step for ties); :func:`dpstream.noise.laplace.report_noisy_max_counts` is the same
  selection on integer counts, with public offsets.
* :func:`permute_and_flip` -- McKenna and Sheldon (NeurIPS 2020): visit the candidates in a
  uniformly random order and stop at the first ``i`` whose coin, of probability
  ``exp(-eps (q* - q_i) / (c Delta))`` with ``q*`` the largest score, comes up heads (``c = 1``
  for monotone scores, 2 otherwise).  Its expected score is never below the exponential
  mechanism's.
* :func:`exponential_mechanism` -- McSherry and Talwar: ``P(i)`` proportional to
  ``exp(eps q_i / (c Delta))``, sampled by exact rejection (propose ``i`` uniformly, accept
  with probability ``exp(-eps (q* - q_i) / (c Delta))``; the accepted index has exactly the
  exponential mechanism's law).  Gumbel-max sampling in floating point would not be exact.

Exactness.  The scores are first put on a grid: ``u_i = floor(2^k q_i / Delta)`` (``k =``
:data:`SCORE_BITS`), integers whose sensitivity is at most ``2^k + 1`` grid steps (``2^k`` for
the change of ``q``, one more for the floor and the float rounding of a score).  Every random
decision is then made on integers by the exact samplers of :mod:`dpstream.noise`: the coins
by :func:`~dpstream.noise.exact_primitives.bernoulli_exp` on rational exponents, the order by a
Fisher-Yates shuffle of exact uniform integers, the noise by
:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace` of a rational scale rounded up.  The budget a
call spends is returned by :func:`selection_epsilon` (at most the ``epsilon`` asked).

Privacy
-------
Each mechanism is ``epsilon``-DP for scores of sensitivity ``Delta``, monotone or not as
declared (the monotone case saves the factor 2).  For report-noisy-max with discrete noise of
scale ``t`` grid steps and ties broken by the lowest index the bound is ``(D + 1) / t``
(monotone) or ``(2 D + 1) / t`` (general) for a grid sensitivity ``D``: the ``+ 1`` accounts for
ties (a tie is a strict win on one side and a loss on the other).  Permute-and-flip and the
exponential mechanism use ``exp(-eps gap / (c D))``, exactly their published form on the grid.
The running time depends on the scores (how soon a coin comes up heads); the number of random
words drawn is not hidden.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpstream._checks import check_bool, check_bound, check_epsilon
from dpstream._deprecation import moved_names
from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.noise.discrete_laplace_law import discrete_laplace
from dpstream.noise.exact_primitives import bernoulli_exp, uniform_below

__all__ = [
    "SCORE_BITS",
    "SELECTIONS",
    "exponential_mechanism",
    "permute_and_flip",
    "report_noisy_max_scores",
    "select",
    "selection_epsilon",
    "selection_probabilities",
]

#: Scores are floored to multiples of ``Delta / 2^SCORE_BITS`` before any random decision.
SCORE_BITS = 10

#: ``report_noisy_max`` was renamed :func:`report_noisy_max_scores` (scores, not counts).
__getattr__ = moved_names(__name__, {"report_noisy_max": "dpstream.thresholds.select:report_noisy_max_scores"})

_GRID = 1 << SCORE_BITS
_SENSITIVITY_UNITS = _GRID + 1  # the change of a score, plus one step for the floor and float rounding
_EPSILON_BITS = 30  # epsilon is rounded down to a multiple of 2^-30 (relative change < 1e-9 / epsilon)
_MAX_UNITS = 1 << 52


def _grid_scores(scores: object, sensitivity: float) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}.")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite numbers.")
    units = np.floor(scores * (_GRID / sensitivity))
    if np.abs(units).max() >= _MAX_UNITS:
        raise ValueError(
            f"scores / sensitivity must stay below {_MAX_UNITS / _GRID:g} in absolute value, "
            f"got {float(np.abs(scores).max() / sensitivity):g}."
        )
    units = units.astype(np.int64)
    return units - units.max()  # gaps below the best are what matters; the best is 0


def _epsilon_down(epsilon: float) -> Fraction:
    """epsilon rounded down to a multiple of 2^-30 (never above the budget asked)."""
    numerator = math.floor(Fraction(epsilon) * (1 << _EPSILON_BITS))
    if numerator < 1:
        raise ValueError(f"epsilon must be at least 2^-{_EPSILON_BITS} for exact selection, got {epsilon!r}.")
    return Fraction(numerator, 1 << _EPSILON_BITS)


def _factor(monotone: bool) -> int:
    return 1 if monotone else 2


def _laplace_scale(epsilon: float, monotone: bool) -> Fraction:
    """Scale ``t >= (c D + 1) / epsilon`` grid steps, rounded UP to a dyadic rational."""
    exact = Fraction(_factor(monotone) * _SENSITIVITY_UNITS + 1) / Fraction(epsilon)
    # a dyadic denominator as fine as the 2^40 bound on the numerator allows
    shift = max(0, 39 - exact.numerator.bit_length() + exact.denominator.bit_length())
    return Fraction(math.ceil(exact * (1 << shift)), 1 << shift)


def selection_epsilon(mechanism: str, epsilon: float, *, monotone: bool = False) -> float:
    """The budget a selection spends: at most ``epsilon``, a hair below after rounding.

    >>> selection_epsilon("permute-and-flip", 0.5) <= 0.5
    True
    """
    mechanism = _check_mechanism(mechanism)
    epsilon = check_epsilon(epsilon)
    if mechanism == "report-noisy-max":
        return float(Fraction(_factor(monotone) * _SENSITIVITY_UNITS + 1) / _laplace_scale(epsilon, monotone))
    return float(_epsilon_down(epsilon))


def _coins(bits, gaps: np.ndarray, epsilon: Fraction, divisor: int) -> np.ndarray:
    """Bernoulli(exp(-epsilon * gap / divisor)) for integer gaps >= 0, exactly."""
    numerator = epsilon.numerator * gaps.astype(object)
    denominator = epsilon.denominator * divisor
    small = numerator < (1 << 64)
    out = np.empty(gaps.size, dtype=bool)
    if small.all():
        return bernoulli_exp(bits, numerator.astype(np.uint64), denominator, gaps.size)
    for i in range(gaps.size):  # a huge gap: the scalar path takes Python integers of any size
        out[i] = bernoulli_exp(bits, int(numerator[i]), denominator, 1)[0]
    return out


def report_noisy_max_scores(scores: object, *, epsilon: float, sensitivity: float = 1.0, monotone: bool = False,
                            seed: BitsSeed = None) -> int:
    """Index of the largest score plus exact discrete Laplace noise (ties: the lowest index).

    Parameters
    ----------
    scores : 1-D array of float
    epsilon : float
        Budget of the selection.
    sensitivity : float
        Delta, the most one neighbouring change moves any score.
    monotone : bool
        True when every score moves in the same direction under a neighbouring change.
    seed : None, int, Generator or bit source
        Random bits (None: the operating system's CSPRNG).

    Privacy
    -------
    ``selection_epsilon("report-noisy-max", epsilon, monotone=monotone)``-DP (at most epsilon);
    see the module docstring.

    >>> report_noisy_max_scores([0.0, 50.0, 0.0], epsilon=1.0, seed=1)
    1
    """
    epsilon, sensitivity, monotone = _check(epsilon, sensitivity, monotone)
    units = _grid_scores(scores, sensitivity)
    scale = _laplace_scale(epsilon, monotone)
    noise = discrete_laplace(make_bits(seed), scale.numerator, scale.denominator, units.size)
    return int(np.argmax(units + noise))


def permute_and_flip(scores: object, *, epsilon: float, sensitivity: float = 1.0, monotone: bool = False,
                     seed: BitsSeed = None) -> int:
    """Permute-and-flip (McKenna and Sheldon, 2020), sampled exactly.

    Parameters are those of :func:`report_noisy_max_scores`.

    Privacy
    -------
    epsilon-DP (epsilon rounded down to a multiple of 2^-30): the coin of candidate ``i`` has
    probability ``exp(-eps (u* - u_i) / (c D))`` on the grid scores (``c = 1`` monotone, 2 not).

    >>> permute_and_flip([0.0, 50.0, 0.0], epsilon=1.0, seed=1)
    1
    """
    epsilon, sensitivity, monotone = _check(epsilon, sensitivity, monotone)
    gaps = -_grid_scores(scores, sensitivity)
    bits = make_bits(seed)
    order = _shuffle(bits, gaps.size)
    eps = _epsilon_down(epsilon)
    divisor = _factor(monotone) * _SENSITIVITY_UNITS
    chunk = 64
    for start in range(0, order.size, chunk):
        block = order[start : start + chunk]
        heads = np.flatnonzero(_coins(bits, gaps[block], eps, divisor))
        if heads.size:
            return int(block[heads[0]])
        chunk = min(chunk * 4, 1 << 14)
    raise AssertionError("unreachable: the best candidate's coin always comes up heads")  # pragma: no cover


def exponential_mechanism(scores: object, *, epsilon: float, sensitivity: float = 1.0, monotone: bool = False,
                          seed: BitsSeed = None) -> int:
    """The exponential mechanism, sampled exactly by rejection.

    Parameters are those of :func:`report_noisy_max_scores`.

    Privacy
    -------
    epsilon-DP (epsilon rounded down to a multiple of 2^-30): ``P(i)`` is proportional to
    ``exp(eps u_i / (c D))`` on the grid scores (``c = 1`` monotone, 2 not).

    >>> exponential_mechanism([0.0, 50.0, 0.0], epsilon=1.0, seed=1)
    1
    """
    epsilon, sensitivity, monotone = _check(epsilon, sensitivity, monotone)
    gaps = -_grid_scores(scores, sensitivity)
    bits = make_bits(seed)
    eps = _epsilon_down(epsilon)
    divisor = _factor(monotone) * _SENSITIVITY_UNITS
    batch = 64
    while True:
        proposals = uniform_below(bits, gaps.size, batch)
        accepted = np.flatnonzero(_coins(bits, gaps[proposals], eps, divisor))
        if accepted.size:
            return int(proposals[accepted[0]])
        batch = min(batch * 4, 1 << 14)


def _shuffle(bits, n: int) -> np.ndarray:
    """A uniformly random permutation of 0..n-1 (Fisher-Yates on exact uniform integers)."""
    order = np.arange(n)
    if n > 1:
        picks = uniform_below(bits, np.arange(n, 1, -1), n - 1)  # pick j in [0, i] for i = n-1 .. 1
        for step, j in enumerate(picks.tolist()):
            i = n - 1 - step
            order[i], order[j] = order[j], order[i]
    return order


def _check_mechanism(mechanism: object) -> str:
    if mechanism not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}, got {mechanism!r}.")
    return mechanism  # type: ignore[return-value]


def _check(epsilon: object, sensitivity: object, monotone: object) -> tuple[float, float, bool]:
    return check_epsilon(epsilon), check_bound(sensitivity, "sensitivity"), check_bool(monotone, "monotone")


#: name -> sampler, in the order the studies report them.
SELECTIONS = {
    "report-noisy-max": report_noisy_max_scores,
    "permute-and-flip": permute_and_flip,
    "exponential": exponential_mechanism,
}


def select(mechanism: str, scores: object, *, epsilon: float, sensitivity: float = 1.0, monotone: bool = False,
           seed: BitsSeed = None) -> int:
    """Run the selection named ``mechanism`` (a key of :data:`SELECTIONS`)."""
    return SELECTIONS[_check_mechanism(mechanism)](
        scores, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone, seed=seed
    )


def selection_probabilities(mechanism: str, scores: object, *, epsilon: float, sensitivity: float = 1.0,
                            monotone: bool = False) -> np.ndarray:
    """The exact law of a selection on these scores, in float (for tests and plots).

    Computed from the grid scores the samplers use: the exponential mechanism's softmax;
    permute-and-flip by summing over the orders (``P(i) = p_i E[prod of (1 - p_j) over the j
    visited before i]``, by a recursion over subsets: at most 16 candidates); report-noisy-max
    by summing the discrete Laplace law of the winner's noise (ties to the lowest index).

    >>> p = selection_probabilities("exponential", [0.0, 1.0], epsilon=1.0, monotone=True)
    >>> round(float(p[1] / p[0]), 3)  # exp(1024 / 1025): a score of 1 is 1024 grid steps of 1 + 1/1024
    2.716
    """
    mechanism = _check_mechanism(mechanism)
    epsilon, sensitivity, monotone = _check(epsilon, sensitivity, monotone)
    units = _grid_scores(scores, sensitivity).astype(np.float64)
    k = units.size
    divisor = _factor(monotone) * _SENSITIVITY_UNITS
    if mechanism == "exponential":
        weights = np.exp(float(_epsilon_down(epsilon)) * units / divisor)
        return weights / weights.sum()
    if mechanism == "permute-and-flip":
        if k > 16:
            raise ValueError(f"exact permute-and-flip probabilities need at most 16 candidates, got {k}.")
        coin = np.exp(float(_epsilon_down(epsilon)) * units / divisor)
        # reach[S]: probability that the walk has visited exactly the set S (all tails so far)
        reach = np.zeros(1 << k)
        reach[0] = 1.0
        out = np.zeros(k)
        for subset in range(1 << k):
            if reach[subset] == 0.0:
                continue
            remaining = [i for i in range(k) if not subset >> i & 1]
            share = reach[subset] / len(remaining)
            for i in remaining:
                out[i] += share * coin[i]
                reach[subset | 1 << i] += share * (1.0 - coin[i])
        return out
    scale = _laplace_scale(epsilon, monotone)
    rate = 1.0 / float(scale)
    span = int(60.0 * float(scale)) + 1
    z = np.arange(-span, span + 1, dtype=np.float64)
    pmf = np.exp(-np.abs(z) * rate) * math.tanh(rate / 2.0)
    cdf = np.cumsum(pmf)

    def below(value: np.ndarray) -> np.ndarray:  # P[Z < value] for integer values
        index = np.clip(value + span - 1, -1, z.size - 1).astype(np.int64)
        return np.where(index < 0, 0.0, cdf[np.maximum(index, 0)])

    out = np.zeros(k)
    for i in range(k):
        total = units[i] + z  # the winner's noisy score
        prob = pmf.copy()
        for j in range(k):
            if j == i:
                continue
            # j < i must be strictly below (ties go to j); j > i may tie
            bound = total - units[j] + (0 if j < i else 1)
            prob = prob * below(bound)
        out[i] = prob.sum()
    return out
