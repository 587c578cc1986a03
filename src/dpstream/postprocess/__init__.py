"""Post-processing of private count streams under temporal correlations (Cao et al., DBSec 2023).

:mod:`~dpstream.postprocess.markov` holds the public Markov model and the synthetic users,
:mod:`~dpstream.postprocess.mechanism` the per-step Laplace release,
:mod:`~dpstream.postprocess.estimate` what every estimator shares (the :class:`Estimate` result,
input checks, the priors of Eq. 7 and the MLE), :mod:`~dpstream.postprocess.estimators` the MAP,
:mod:`~dpstream.postprocess.posterior` the per-step posterior mean (its exact method in
:mod:`~dpstream.postprocess.exact_posterior`), :mod:`~dpstream.postprocess.temporal` the
estimators that use the whole series, and :mod:`~dpstream.postprocess.dispatch` the one entry
point :func:`postprocess` that chooses among them.  The synthetic
studies of Section 6 and their metrics are in :mod:`dpstream.evaluation.postprocess`.
"""

from dpstream.postprocess.dispatch import METHODS, postprocess
from dpstream.postprocess.estimate import PRIORS, Estimate, mle_estimate, prior_marginals
from dpstream.postprocess.estimators import FORMS, kkt_residual, map_estimate, map_objective, map_solve, round_counts
from dpstream.postprocess.markov import (
    FIG3_MATRIX,
    check_transition,
    empirical_transitions,
    propagate,
    simulate_counts,
    smoothed_transition,
)
from dpstream.postprocess.mechanism import COUNT_SENSITIVITY, LaplaceCounts, laplace_scale
from dpstream.postprocess.posterior import (
    EXACT_MAX_COST,
    LIKELIHOODS,
    noise_variance,
    posterior_mean,
    posterior_mean_solve,
)
from dpstream.postprocess.temporal import kalman_smooth, temporal_mean

__all__ = [
    "COUNT_SENSITIVITY",
    "EXACT_MAX_COST",
    "FIG3_MATRIX",
    "FORMS",
    "LIKELIHOODS",
    "METHODS",
    "PRIORS",
    "Estimate",
    "LaplaceCounts",
    "check_transition",
    "empirical_transitions",
    "kalman_smooth",
    "kkt_residual",
    "laplace_scale",
    "map_estimate",
    "map_objective",
    "map_solve",
    "mle_estimate",
    "noise_variance",
    "posterior_mean",
    "posterior_mean_solve",
    "postprocess",
    "prior_marginals",
    "propagate",
    "round_counts",
    "simulate_counts",
    "smoothed_transition",
    "temporal_mean",
]
