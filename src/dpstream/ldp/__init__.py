"""Local differential privacy: client-side randomizers and their collector-side estimators.

Every randomizer reports an integer index on a finite public grid, with exact probabilities
(multiples of 2^-62) drawn from a bit source; the collector's estimates are unbiased for the
discretized mechanisms.

* :mod:`dpstream.ldp.grid` -- the finite window randomizer behind all of them, its exact privacy
  ratio, estimator and variance, and the certified lower bound on e^eps.
* :mod:`dpstream.ldp.mean` -- SR, PM and HM on [-1, 1] (Appendix E.2), unbiased mean estimation.
* :mod:`dpstream.ldp.square_wave` -- Square Wave on [0, 1] and density estimation by EM / EMS
  (Appendix E.1).
"""

from dpstream.ldp.grid import WindowRandomizer, exp_lower_bound
from dpstream.ldp.mean import (
    HM_PM_THRESHOLD,
    HybridMechanism,
    PiecewiseMechanism,
    StochasticRounding,
    default_pm_grid,
)
from dpstream.ldp.square_wave import DensityEstimate, SquareWave, estimate_density

__all__ = [
    "HM_PM_THRESHOLD",
    "DensityEstimate",
    "HybridMechanism",
    "PiecewiseMechanism",
    "SquareWave",
    "StochasticRounding",
    "WindowRandomizer",
    "default_pm_grid",
    "estimate_density",
    "exp_lower_bound",
]
