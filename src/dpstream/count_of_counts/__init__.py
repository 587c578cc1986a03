"""Hierarchical count-of-counts histograms under differential privacy (Kuo et al., VLDB 2018).

For every region of a public hierarchy, how many groups have exactly ``j`` members, released
with epsilon-DP at the entity level, integral, non-negative, with the public number of groups
per region, and consistent across levels.

The errors of releases (earth-mover's distance per region, the omniscient reference) and the
comparison of strategies are a study: :mod:`dpstream.evaluation.count_of_counts`.
"""

from dpstream.count_of_counts.consistency import (
    BottomUpCountOfCounts,
    CountOfCountsRelease,
    TopDownCountOfCounts,
    match_groups,
    match_level,
    merge_estimates,
)
from dpstream.count_of_counts.data import (
    CountOfCountsData,
    RegionTree,
    housing_data,
    read_hierarchy,
    read_tables,
    taxi_data,
    write_tables,
)
from dpstream.count_of_counts.estimators import LevelEstimate, estimate_level, estimate_max_size
from dpstream.count_of_counts.histograms import LevelHistograms, isotonic_l1, isotonic_l2

__all__ = [
    "BottomUpCountOfCounts",
    "CountOfCountsData",
    "CountOfCountsRelease",
    "LevelEstimate",
    "LevelHistograms",
    "RegionTree",
    "TopDownCountOfCounts",
    "estimate_level",
    "estimate_max_size",
    "housing_data",
    "isotonic_l1",
    "isotonic_l2",
    "match_groups",
    "match_level",
    "merge_estimates",
    "read_hierarchy",
    "read_tables",
    "taxi_data",
    "write_tables",
]
