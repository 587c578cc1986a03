"""Release pipelines: threshold optimizer -> perturber -> smoother, batch or one value at a time."""

from dpstream.release.perturber import HierarchicalPerturber, PerturberState, optimal_smoothed_levels
from dpstream.release.tops import ToPS, ToPSState
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.pak import PAK

__all__ = ["HierarchicalPerturber", "PerturberState", "ToPS", "ToPSState", "optimal_smoothed_levels"]
__all__ += ["BinaryTreeCounter", "PAK"]
