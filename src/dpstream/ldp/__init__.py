"""Local differential privacy: client-side randomizers and their collector-side estimators.

* :mod:`dpstream.ldp.mean` -- SR, PM and HM on [-1, 1] (Appendix E.2), unbiased mean estimation.
* :mod:`dpstream.ldp.square_wave` -- Square Wave on [0, 1] and density estimation by EM / EMS
  (Appendix E.1).
"""

from dpstream.ldp.mean import HM_PM_THRESHOLD, HybridMechanism, PiecewiseMechanism, StochasticRounding
from dpstream.ldp.square_wave import DensityEstimate, SquareWave, estimate_density

__all__ = [
    "HM_PM_THRESHOLD",
    "DensityEstimate",
    "HybridMechanism",
    "PiecewiseMechanism",
    "SquareWave",
    "StochasticRounding",
    "estimate_density",
]
