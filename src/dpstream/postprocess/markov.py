"""The public correlation model of Cao et al. (DBSec 2023), Sections 4-6: users moving between
``m`` locations by a Markov transition matrix.

* :func:`check_transition` validates a row-stochastic matrix (it lives in :mod:`dpstream._checks`
  with :func:`check_distribution`, and is re-exported here),
* :func:`smoothed_transition` is the family of Eq. 11 (Laplacian smoothing with level ``s``),
* :data:`FIG3_MATRIX` is the 3-location matrix of Fig. 3 (also the base of Figs. 4-6),
* :func:`propagate` is Eq. 7, ``P^t = P^{t-1} T``,
* :func:`simulate_counts` moves ``n`` independent users and returns the true counts ``R``,
* :func:`empirical_transitions` counts the moves a simulation made (for checking it).
"""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_distribution, check_nonnegative_int, check_positive_int, check_transition
from dpstream.rng import Seed, make_rng

__all__ = [
    "FIG3_MATRIX",
    "check_transition",
    "check_distribution",
    "smoothed_transition",
    "propagate",
    "simulate_counts",
    "empirical_transitions",
]

#: The 3-location transition matrix of Fig. 3 and Section 6.2 (row = from, column = to).
FIG3_MATRIX = np.array([[0.0, 0.0, 1.0], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])


def smoothed_transition(base: object, s: float) -> np.ndarray:
    """Eq. 11: ``p_ij <- (p_ij + s) / sum_j (p_ij + s)``; smaller ``s`` = stronger correlation.

    ``s = 0`` keeps ``base``; ``s -> infinity`` gives the uniform matrix.  The paper's default
    "strongest" base is the identity; Figs. 4-6 smooth :data:`FIG3_MATRIX`.

    >>> smoothed_transition(np.eye(2), 1.0).tolist()
    [[0.6666666666666666, 0.3333333333333333], [0.3333333333333333, 0.6666666666666666]]
    """
    matrix = check_transition(base, "base")
    if not (isinstance(s, (int, float, np.floating)) and np.isfinite(s) and s >= 0):
        raise ValueError(f"smoothing level s must be a finite number >= 0, got {s!r}.")
    smoothed = matrix + float(s)
    return smoothed / smoothed.sum(axis=1, keepdims=True)


def propagate(initial: np.ndarray, transition: np.ndarray, steps: int) -> np.ndarray:
    """Eq. 7: the ``steps x m`` marginals ``P^1 = initial``, ``P^t = P^{t-1} T``."""
    transition = check_transition(transition)
    initial = check_distribution(initial, transition.shape[0])
    steps = check_positive_int(steps, "steps")
    marginals = np.empty((steps, transition.shape[0]))
    marginals[0] = initial
    for t in range(1, steps):  # a chain of T small vector-matrix products; each depends on the last
        marginals[t] = marginals[t - 1] @ transition
    np.clip(marginals, 0.0, None, out=marginals)
    return marginals / marginals.sum(axis=1, keepdims=True)


def simulate_counts(
    transition: object,
    *,
    users: int,
    steps: int,
    initial: object | None = None,
    seed: Seed = None,
    return_locations: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """True counts ``R`` (``steps x m`` integers) of ``users`` independent Markov walkers.

    Each user starts at a location drawn from ``initial`` (uniform by default; the paper
    does not say how users start) and then moves by ``transition`` at every step,
    independently of the others (Section 5.2.2).  With ``return_locations`` the
    ``steps x users`` location indices are returned too.

    >>> counts = simulate_counts(FIG3_MATRIX, users=5, steps=4, seed=0)
    >>> counts.shape, counts.sum(axis=1).tolist()
    ((4, 3), [5, 5, 5, 5])
    """
    matrix = check_transition(transition)
    m = matrix.shape[0]
    users = check_positive_int(users, "users")
    steps = check_positive_int(steps, "steps")
    start = np.full(m, 1.0 / m) if initial is None else check_distribution(initial, m)
    rng = make_rng(seed)
    cumulative = np.cumsum(matrix, axis=1)
    cumulative[:, -1] = 1.0  # guard against rounding: every uniform draw falls in some column
    locations = np.empty((steps, users), dtype=np.int64)
    locations[0] = rng.choice(m, size=users, p=start)
    for t in range(1, steps):  # inverse-CDF sampling of all users at once, one step at a time
        draws = rng.random(users)
        rows = cumulative[locations[t - 1]]
        locations[t] = (draws[:, None] >= rows).sum(axis=1)
    counts = np.zeros((steps, m), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(steps), users), locations.ravel()), 1)
    return (counts, locations) if return_locations else counts


def empirical_transitions(locations: np.ndarray, m: int) -> np.ndarray:
    """``m x m`` matrix of how many moves went from location i to location j."""
    locations = np.asarray(locations)
    m = check_nonnegative_int(m, "m")
    moves = np.zeros((m, m), dtype=np.int64)
    np.add.at(moves, (locations[:-1].ravel(), locations[1:].ravel()), 1)
    return moves
