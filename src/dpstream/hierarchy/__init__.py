"""Hierarchies (trees of partial sums) over a stream: shape, noise, consistency, range queries."""

from dpstream.hierarchy.plain import PlainHierarchy
from dpstream.hierarchy.tree import (
    aggregate_levels,
    decomposed_range_sums,
    draw_noise_levels,
    level_sizes,
    make_consistent,
    num_levels,
)

__all__ = [
    "PlainHierarchy",
    "aggregate_levels",
    "decomposed_range_sums",
    "draw_noise_levels",
    "level_sizes",
    "make_consistent",
    "num_levels",
]
