"""ToPS under rho-zCDP: exact discrete Gaussian noise on the grid for every measured level, the
threshold's private choice counted in the same accounting, and :class:`ZcdpToPS`, the release at the
rho of an (epsilon, delta) target (``release --method tops-zcdp --epsilon E --delta D``).

The hierarchy (:class:`~dpstream.release.perturber.HierarchicalPerturber` and
:class:`~dpstream.release.periodic.PeriodicPerturber` with ``rho=``) puts discrete Gaussian noise
of variance parameter ``sigma^2 = theta_units^2 d / (2 rho)`` grid units^2 (rounded up,
:class:`~dpstream.noise.grid_gaussian.GridGaussian`) on every node of its ``d`` measured levels
(``d = h - s`` for blocks of ``b^s`` values).

L2 sensitivity ``theta_units sqrt(d)``.  Let two streams differ in the value at one position
``p`` (event level), both values in ``[0, theta]`` (ToPS truncates at theta first).  Rounding to
the grid is a function of each value alone, to integers in ``[0, theta_units]`` (the grid's
rounding never exceeds the rounded-up theta), so the grid units of position ``p`` move by
``|Delta| <= theta_units`` and no other position moves.  Position ``p`` lies in one chunk (chunks
are disjoint, the other chunks' measurements do not move) and in exactly one leaf of it: a block of
``b^s`` values, or a period (or a fraction of the window) counted from the public phase; a partial
first leaf holds only positions of the stream, and the zero leaves that pad the last tree hold none.
Every measured node is the sum of the leaves below it, so on each of the ``d`` measured levels
exactly one node -- the leaf's ancestor on that level -- moves, by ``Delta``: the vector of all
measured node sums moves by ``Delta`` on ``d`` coordinates, an L2 change of ``|Delta| sqrt(d) <=
theta_units sqrt(d)``, reached when the value moves from 0 to theta (``tests/test_tops_zcdp.py``
checks both by brute force over every allowed change of every position of small hierarchies).  The
discrete Gaussian on integer queries of L2 sensitivity ``Delta_2`` is ``Delta_2^2 / (2
sigma^2)``-zCDP (Canonne, Kamath and Steinke 2020, Theorem 14), hence ``spent_rho = theta_units^2 d
/ (2 sigma^2) <= rho``, recomputed from the rounded-up sigma^2.

The rest touches nothing more.  The online consistency adds to a block's true sum the consistent
share of the noise alone, which equals the least-squares leaf of the noisy measurements (the true
sums are consistent already): post-processing.  The smoother and the last-value rule are functions
of released estimates and of the prior; a periodic profile and the prior come from the hold-out,
paid by the threshold's budget; the phase, the period, ``s`` and ``d`` are public or chosen by the
threshold step.  Chunks read disjoint positions: parallel composition, the largest rho (the same for
every chunk).  Laplace noise pays for the ``d`` levels with a scale ``d`` times one node's (variance
``d^2``), Gaussian noise with ``sqrt(d)`` in sigma (variance ``d``): the more levels, the more zCDP
gains.

The threshold.  The model threshold's four steps (:mod:`dpstream.thresholds.model`) stay pure
``epsilon_theta``-DP, which is ``epsilon_theta^2 / 2``-zCDP; they read the hold-out, disjoint from
the released positions, so the release is ``max(epsilon_theta^2 / 2, spent_rho)``-zCDP
(:func:`~dpstream.release.tops_privacy.tops_privacy`).  By default ``epsilon_theta`` is the largest
with ``epsilon_theta^2 / 2 <= rho`` (:func:`~dpstream.release.tops_privacy.zcdp_threshold_epsilon`),
and the model scores the structures with the Gaussian node variance ``theta^2 d / (2 rho)``
(:meth:`~dpstream.thresholds.error_model.ErrorModel.node_variance`).  NM-E (tuned to Laplace noise)
and w-event windows are refused under zCDP.
"""

from __future__ import annotations

import inspect
from typing import Any

from dpstream._checks import check_epsilon
from dpstream.accounting import rho_for
from dpstream.release.tops import ToPS

__all__ = ["ZcdpToPS"]


class ZcdpToPS(ToPS):
    """ToPS under zCDP at the largest rho whose (epsilon, delta) is the target's
    (:func:`~dpstream.accounting.rho_for`): ``release --method tops-zcdp --epsilon E --delta D``.

    It takes ToPS's parameters, ``delta`` instead of ``rho`` (and neither ``w_event`` nor ``period_bound``);
    ``epsilon`` and ``delta`` are the target the whole release (threshold and hierarchy) meets.  Its snapshots
    are ToPS's at that rho (:meth:`from_state` gives a :class:`~dpstream.release.tops.ToPS`, which continues
    it exactly).

    >>> import numpy as np
    >>> tops = ZcdpToPS(epsilon=1.0, delta=1e-6, upper_bound=100, hold=1000, max_range=4096, seed=42)
    >>> round(tops.rho, 6), tops.release(np.full(2000, 7.0)).shape, tops.privacy(1e-6).epsilon <= 1.0
    (0.024356, (1000,), True)
    """

    def __init__(self, *, epsilon: float, delta: float | None, **options: Any) -> None:
        if delta is None:
            raise ValueError("ToPS under zCDP needs delta (--delta): the delta of its (epsilon, delta) target, "
                             "e.g. 1e-6.")
        for name in ("rho", "w_event", "period_bound"):
            if options.get(name) is not None:
                raise ValueError(f"tops-zcdp spends the rho of its (epsilon, delta) target and takes no {name}.")
        super().__init__(rho=rho_for(check_epsilon(epsilon), delta), **options)

    @classmethod
    def from_state(cls, state: dict) -> ToPS:
        """The ToPS (at this rho) a :attr:`state` snapshot describes, continuing where it was taken."""
        return ToPS.from_state(state)


def _signature() -> inspect.Signature:
    """ToPS's keywords with ``delta`` for ``rho`` and no w-event ones: what :meth:`ZcdpToPS.get_params` and its
    ``repr`` read (the constructor passes them on as ``**options``)."""
    skip = {"rho", "w_event", "period_bound"}
    parameters = [p for p in inspect.signature(inspect.unwrap(ToPS.__init__)).parameters.values() if p.name not in skip]
    epsilon = next(i for i, p in enumerate(parameters) if p.name == "epsilon")
    parameters[epsilon] = parameters[epsilon].replace(default=inspect.Parameter.empty, annotation="float")
    delta = inspect.Parameter("delta", inspect.Parameter.KEYWORD_ONLY, annotation="float | None")
    return inspect.Signature([*parameters[: epsilon + 1], delta, *parameters[epsilon + 1:]])


inspect.unwrap(ZcdpToPS.__init__).__signature__ = _signature()  # type: ignore[attr-defined]
