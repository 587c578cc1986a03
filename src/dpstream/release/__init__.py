"""Release pipelines: threshold optimizer -> perturber -> smoother, batch or one value at a time."""

from dpstream.release.perturber import HierarchicalPerturber, PerturberState, optimal_smoothed_levels
from dpstream.release.tops import ToPS, ToPSState
from dpstream.release.topl import Report, ToPL, ToPLClient, ToPLCollector

__all__ = [
    "HierarchicalPerturber",
    "PerturberState",
    "Report",
    "ToPL",
    "ToPLClient",
    "ToPLCollector",
    "ToPS",
    "ToPSState",
    "optimal_smoothed_levels",
]
