"""dpstream: differentially private continual release of data streams.

The main entry point is :class:`ToPS` (Wang et al., CCS 2021): a threshold optimizer, an
online consistent hierarchy and a smoother, releasing each value of a stream as it arrives
under event-level epsilon-DP.
"""

from dpstream.datasets import load_dataset
from dpstream.privacy import PrivacyGuarantee
from dpstream.release import HierarchicalPerturber, ToPS

__all__ = ["HierarchicalPerturber", "PrivacyGuarantee", "ToPS", "load_dataset", "__version__"]
__version__ = "0.1.0"
