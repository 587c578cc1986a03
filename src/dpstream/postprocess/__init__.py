"""Post-processing of private count streams under temporal correlations (Cao et al., DBSec 2023).

:mod:`~dpstream.postprocess.markov` holds the public Markov model and the synthetic users,
:mod:`~dpstream.postprocess.mechanism` the per-step Laplace release,
:mod:`~dpstream.postprocess.estimators` the MAP and MLE post-processing,
:mod:`~dpstream.postprocess.posterior` the per-step posterior mean, and
:mod:`~dpstream.postprocess.temporal` the estimators that use the whole series.  The synthetic
studies of Section 6 and their metrics are in :mod:`dpstream.evaluation.postprocess`.
"""

from dpstream.postprocess.estimators import (
    FORMS,
    METHODS,
    PRIORS,
    Estimate,
    kkt_residual,
    map_estimate,
    map_objective,
    map_solve,
    mle_estimate,
    postprocess,
    prior_marginals,
    round_counts,
)
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
