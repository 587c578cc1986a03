"""The utility metrics of Section 6.1 of Cao et al.: MSE, and the probability that the
released counts of one step follow from those of the step before under the public model."""

from __future__ import annotations

import numpy as np

from dpstream.postprocess.markov import check_transition

__all__ = ["mse", "transition_probability", "step_probabilities", "IMPOSSIBLE"]

#: Section 6.1's cut-off: a transition less likely than this counts as an impossible event.
IMPOSSIBLE = 1e-10

#: Largest table (product of ``count + 1`` over locations) :func:`transition_probability` builds.
_MAX_CELLS = 2_000_000


def mse(estimate: object, truth: object) -> float:
    """Mean squared error over all cells of two ``T x m`` arrays.

    >>> mse([[1.0, 3.0]], [[0.0, 3.0]])
    0.5
    """
    a, b = np.asarray(estimate, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"estimate and truth must have the same shape, got {a.shape} and {b.shape}.")
    return float(np.mean((a - b) ** 2))


def transition_probability(previous: object, current: object, transition: object) -> float:
    """``Pr(R^t = current | R^{t-1} = previous)`` for integer count vectors of independent users.

    Each of the ``previous[i]`` users at location ``i`` moves to ``j`` with probability
    ``T[i, j]``; the result is the coefficient of ``x^current`` in
    ``prod_i (sum_j T[i, j] x_j)^previous[i]``, computed exactly by dynamic programming over a
    table truncated at ``current`` (so only for small user numbers).  With one user it is
    ``T[i, j]``, the quantity Fig. 3(b) plots.

    >>> transition_probability([0, 1, 0], [1, 0, 0], [[0, 0, 1], [.5, 0, .5], [0, 1, 0]])
    0.5
    """
    matrix = check_transition(transition)
    a = np.asarray(previous)
    b = np.asarray(current)
    m = matrix.shape[0]
    for name, vec in (("previous", a), ("current", b)):
        if vec.shape != (m,) or not np.issubdtype(vec.dtype, np.integer) or np.any(vec < 0):
            raise ValueError(f"{name} must be {m} non-negative integer counts, got {vec.tolist()!r}.")
    if a.sum() != b.sum():
        return 0.0
    shape = tuple(int(k) + 1 for k in b)
    if int(np.prod(shape)) > _MAX_CELLS:
        raise ValueError(f"too many users for the exact transition probability (table of {np.prod(shape)} cells).")
    table = np.zeros(shape)
    table[(0,) * m] = 1.0
    for source in np.repeat(np.arange(m), a):  # one user at a time: multiply by sum_j T[source, j] x_j
        moved = np.zeros(shape)
        for j in np.flatnonzero(matrix[source]):
            target = [slice(None)] * m
            origin = [slice(None)] * m
            target[j], origin[j] = slice(1, None), slice(None, -1)
            moved[tuple(target)] += matrix[source, j] * table[tuple(origin)]
        table = moved
    return float(table[tuple(b)])


def step_probabilities(counts: object, transition: object) -> np.ndarray:
    """:func:`transition_probability` of every step ``t >= 2`` of an integer ``T x m`` series."""
    series = np.asarray(counts)
    return np.array([transition_probability(series[t - 1], series[t], transition) for t in range(1, len(series))])
