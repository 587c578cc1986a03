"""What every post-processing estimator shares: its result, its input checks, the priors and the MLE.

:class:`Estimate` is the result of every method (:mod:`~dpstream.postprocess.estimators`,
:mod:`~dpstream.postprocess.posterior`, :mod:`~dpstream.postprocess.temporal`);
:func:`check_noisy` and :func:`check_marginals` check their inputs; :func:`prior_marginals` gives
the marginals ``P^t`` of Eq. 7 from one of Section 5.2.2's two initial distributions; and
:func:`mle_estimate` is the MLE baseline, which the other methods also use as the projection onto
``{r >= 0, sum r = n}``.

The MLE baseline (Lee et al., KDD 2015: the same problem without the prior) minimises
``sum_l |r_l - r~_l|`` subject to the same constraints.  Its minimisers are not unique; we
return the Euclidean projection of ``r~`` onto ``{r >= 0, sum r = n}``, which is always one
of them (it lowers only counts above 0 when ``sum max(r~, 0) >= n`` and raises counts only
otherwise), the closest in the Euclidean sense among them, and deterministic.

Everything here is post-processing: no randomness, no privacy budget spent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpstream._checks import check_choice, check_positive_int
from dpstream.postprocess.markov import check_transition, propagate

__all__ = ["PRIORS", "Estimate", "check_marginals", "check_noisy", "mle_estimate", "prior_marginals"]

PRIORS = ("frequency", "uniform")


@dataclass(frozen=True)
class Estimate:
    """Post-processed counts with the certificate of how well they solve their problem.

    Attributes
    ----------
    counts : ndarray
        ``T x m`` estimates, ``>= 0``, every row summing to ``n`` (to rounding).
    multipliers : ndarray or None
        MAP: the ``T`` Lagrange multipliers ``mu`` of the sum constraints; posterior mean: the
        ``T`` tilts ``theta`` (the multiplier's counterpart); MLE and temporal: None.
    kkt_residual : float
        MAP: largest violation of the stationarity conditions (in units of the objective's
        slope, nats per count).  MLE: ``||r - r~||_1`` minus its lower bound (the optimality gap).
        Posterior mean: the tilt search's largest ``|sum - n|``.  Temporal: 0 (no optimisation).
    sum_residual : float
        Largest ``|sum_l r_l - n|`` over the steps.
    iterations : int
        Outer iterations of the multiplier search (0 for the MLE).
    unconverged : int
        MAP: steps still open when the iteration limit was reached (their counts are the
        best bracket interpolation and their ``kkt_residual`` shows how far off they are);
        0 for the MLE.
    """

    counts: np.ndarray
    multipliers: np.ndarray | None
    kkt_residual: float
    sum_residual: float
    iterations: int
    unconverged: int = 0


# -- input checks ----------------------------------------------------------------------------


def check_noisy(noisy: object) -> np.ndarray:
    try:
        array = np.array(noisy, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"noisy counts must be a T x m array of numbers, got {noisy!r:.80}.") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"noisy counts must be a non-empty T x m array, got shape {array.shape}.")
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        row, col = bad[0]
        raise ValueError(f"noisy counts must be finite; row {row + 1}, column {col + 1} is {float(array[row, col])!r}.")
    return array


def check_marginals(marginals: object, shape: tuple[int, int]) -> np.ndarray:
    array = np.asarray(marginals, dtype=np.float64)
    if array.shape != shape:
        raise ValueError(f"marginals must have the noisy counts' shape {shape}, got {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array.sum(axis=1) <= 0):
        raise ValueError("marginals must be finite, >= 0, with a positive sum in every row.")
    return array / array.sum(axis=1, keepdims=True)


# -- the prior and the MLE --------------------------------------------------------------------


def prior_marginals(noisy: object, transition: object, prior: str = "frequency") -> np.ndarray:
    """The marginals ``P^t`` of Eq. 7 from one of Section 5.2.2's two initial distributions.

    ``frequency``: ``P^1`` = the first noisy count vector with negative counts set to 0,
    normalised (uniform if nothing is left); ``uniform``: ``P^1 = 1/m``.  Both use only the
    released counts and public knowledge.
    """
    y = check_noisy(noisy)
    matrix = check_transition(transition)
    if matrix.shape[0] != y.shape[1]:
        raise ValueError(
            f"transition is {matrix.shape[0]} x {matrix.shape[0]} but the counts have {y.shape[1]} columns."
        )
    prior = check_choice(prior, "prior", PRIORS)
    m = y.shape[1]
    first = np.maximum(y[0], 0.0)
    if prior == "uniform" or first.sum() <= 0:
        initial = np.full(m, 1.0 / m)
    else:
        initial = first / first.sum()
    return propagate(initial, matrix, y.shape[0])


def mle_estimate(noisy: object, *, users: int) -> Estimate:
    """MLE baseline: the Euclidean projection of each row onto ``{r >= 0, sum r = n}``.

    >>> mle_estimate([[5.0, -1.0, 7.0]], users=10).counts.tolist()
    [[4.0, 0.0, 6.0]]
    """
    y = check_noisy(noisy)
    n = check_positive_int(users, "users")
    m = y.shape[1]
    ordered = -np.sort(-y, axis=1)
    cumulative = np.cumsum(ordered, axis=1) - n
    index = np.arange(1, m + 1)
    support = (ordered - cumulative / index) > 0
    last = m - 1 - np.argmax(support[:, ::-1], axis=1)  # support is a prefix; its last True
    tau = cumulative[np.arange(y.shape[0]), last] / (last + 1)
    counts = np.maximum(y - tau[:, None], 0.0)
    sums = counts.sum(axis=1)
    y_plus = np.maximum(y, 0.0)
    bound = np.maximum(-y, 0.0).sum(axis=1) + np.abs(y_plus.sum(axis=1) - n)
    gap = np.abs(counts - y).sum(axis=1) - bound
    return Estimate(
        counts=counts,
        multipliers=None,
        kkt_residual=float(np.max(np.abs(gap))),
        sum_residual=float(np.max(np.abs(sums - n))),
        iterations=0,
    )
