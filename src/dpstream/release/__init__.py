"""Release pipelines: threshold optimizer -> perturber -> smoother, batch or one value at a time."""

from dpstream._deprecation import moved_names
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.contract import StreamRelease
from dpstream.release.pak import PAK
from dpstream.release.perturber import HierarchicalPerturber, PerturberState, optimal_smoothed_levels
from dpstream.release.registry import REGISTRY, Mechanism, register
from dpstream.release.topl import ToPL, ToPLCollector
from dpstream.release.topl_randomizer import Report, ReportBatch, ToPLRandomizer
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
    "ToPLCollector",
    "ToPLRandomizer",
    "ToPS",
    "optimal_smoothed_levels",
    "register",
]

#: ToPL's client side was renamed ``ToPLRandomizer`` (``dpstream.client.ToPLClient`` is the service's HTTP client).
__getattr__ = moved_names(__name__, {"ToPLClient": "dpstream.release.topl_randomizer:ToPLRandomizer"})
