"""Post-processing of private count streams under temporal correlations (Cao et al., DBSec 2023).

:mod:`~dpstream.postprocess.markov` holds the public Markov model and the synthetic users,
:mod:`~dpstream.postprocess.mechanism` the per-step Laplace release, and
:mod:`~dpstream.postprocess.estimators` the MAP and MLE post-processing.  The synthetic
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

__all__ = [
    "COUNT_SENSITIVITY",
    "FIG3_MATRIX",
    "FORMS",
    "METHODS",
    "PRIORS",
    "Estimate",
    "LaplaceCounts",
    "check_transition",
    "empirical_transitions",
    "kkt_residual",
    "laplace_scale",
    "map_estimate",
    "map_objective",
    "map_solve",
    "mle_estimate",
    "postprocess",
    "prior_marginals",
    "propagate",
    "round_counts",
    "simulate_counts",
    "smoothed_transition",
]
