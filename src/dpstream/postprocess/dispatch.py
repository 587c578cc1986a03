"""One entry point to every post-processing method: :func:`postprocess` and its :data:`METHODS`.

The methods live in their own modules (``map`` and ``mle`` in
:mod:`~dpstream.postprocess.estimators` and :mod:`~dpstream.postprocess.estimate`, ``mean`` in
:mod:`~dpstream.postprocess.posterior`, ``kalman`` and ``smooth`` in
:mod:`~dpstream.postprocess.temporal`); this module, which none of them imports, chooses one by
name for the CLI and the experiments.
"""

from __future__ import annotations

from dpstream._checks import check_choice
from dpstream.postprocess.estimate import Estimate, mle_estimate
from dpstream.postprocess.estimators import map_estimate
from dpstream.postprocess.mechanism import COUNT_SENSITIVITY, laplace_scale
from dpstream.postprocess.posterior import posterior_mean
from dpstream.postprocess.temporal import kalman_smooth, temporal_mean

__all__ = ["METHODS", "postprocess"]

#: ``map`` / ``mle`` (:mod:`~dpstream.postprocess.estimators`), ``mean``
#: (:mod:`~dpstream.postprocess.posterior`), ``kalman`` and ``smooth`` (:mod:`~dpstream.postprocess.temporal`).
METHODS = ("map", "mle", "mean", "kalman", "smooth")


def postprocess(noisy: object, transition: object, *, users: int, epsilon: float, method: str = "map",
                prior: str = "frequency", form: str = "exact", sensitivity: float = COUNT_SENSITIVITY,
                likelihood: str | None = None) -> Estimate:
    """One entry point for the CLI and the experiments; ``method`` is one of :data:`METHODS`:
    ``map`` (Cao et al.), ``mle`` (no prior), ``mean`` (posterior mean per step), ``kalman``
    (linear smoother over all steps), ``smooth`` (exact per step with the other steps' evidence).

    ``epsilon`` and ``sensitivity`` describe the release (noise of scale ``sensitivity / epsilon``
    per cell); the MLE does not depend on them.  ``likelihood`` (``laplace`` or
    ``discrete_laplace``; None: what ``LaplaceCounts`` declares) is the release's noise law; the
    posterior-mean methods use it, the MAP's continuous relaxation is the same for both and ``form``
    is the MAP's only."""
    method = check_choice(method, "method", METHODS)
    laplace_scale(epsilon, sensitivity)  # validates both
    if method == "mle":
        return mle_estimate(noisy, users=users)
    if method == "mean":
        return posterior_mean(noisy, transition, users=users, epsilon=epsilon, prior=prior, sensitivity=sensitivity,
                              likelihood=likelihood)
    if method in ("kalman", "smooth"):
        function = kalman_smooth if method == "kalman" else temporal_mean
        return function(noisy, transition, users=users, epsilon=epsilon, prior=prior, sensitivity=sensitivity,
                        likelihood=likelihood)
    return map_estimate(noisy, transition, users=users, epsilon=epsilon, prior=prior, form=form,
                        sensitivity=sensitivity)
