"""Release pipelines: threshold optimizer -> perturber -> smoother, batch or one value at a time."""

from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.contract import StreamRelease
from dpstream.release.pak import PAK
from dpstream.release.perturber import HierarchicalPerturber, PerturberState, optimal_smoothed_levels
from dpstream.release.registry import REGISTRY, Mechanism, register
from dpstream.release.topl import Report, ReportBatch, ToPL, ToPLClient, ToPLCollector
from dpstream.release.tops import ToPS

__all__ = [
    "PAK",
    "REGISTRY",
    "BinaryTreeCounter",
    "HierarchicalPerturber",
    "Mechanism",
    "PerturberState",
    "Report",
    "ReportBatch",
    "StreamRelease",
    "ToPL",
    "ToPLClient",
    "ToPLCollector",
    "ToPS",
    "optimal_smoothed_levels",
    "register",
]
