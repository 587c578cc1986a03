"""The consistency steps of Algorithm 1 (Kuo et al., Section 5): match, merge, back-substitute.

Top-down, the groups of every parent are matched to its children's groups (Algorithm 2,
:func:`match_level`), the two size estimates of every matched group are merged by
inverse-variance weighting (Eq. 5-6, :func:`merge_estimates`) and rounded, and finally every
parent is rebuilt as the sum of its children (:func:`back_substitute`).  All of it is
post-processing of the noisy level estimates of :mod:`dpstream.count_of_counts.estimators`;
:mod:`dpstream.count_of_counts.consistency` runs it in its mechanisms.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpstream._checks import check_choice
from dpstream.count_of_counts.data import RegionTree
from dpstream.count_of_counts.estimators import LevelEstimate
from dpstream.count_of_counts.histograms import LevelHistograms

__all__ = [
    "MERGES",
    "Groups",
    "back_substitute",
    "consistent_children",
    "estimate_groups",
    "groups_to_histograms",
    "match_groups",
    "match_level",
    "merge_estimates",
    "top_down",
]

MERGES = ("weighted", "average")


# ---------------------------------------------------------------------------- Algorithm 2


def _tie_key(hist: LevelHistograms) -> np.ndarray:
    """For every group of ``hist`` (in row order): ``(k + 1/2) / n`` for the ``k``-th of ``n`` groups of its row."""
    first = np.repeat(np.cumsum(hist.count) - hist.count, hist.count)
    return (np.arange(first.size) - first + 0.5) / np.repeat(hist.count, hist.count)


def match_level(children: LevelHistograms, parent_of_child: np.ndarray) -> np.ndarray:
    """Algorithm 2 for every parent of a level at once.

    Returns ``order`` such that the ``i``-th group of the children's level (in row order of
    ``children``, i.e. by child and size) matched to position ``i`` of the parents' groups
    sorted by ``(parent, size)`` is ``order[i]``.  The algorithm matches the smallest unmatched
    parent group to the smallest unmatched child group, which is a merge of the two sorted
    lists: sorting the children's groups by ``(parent, size)`` and pairing positionally.  When a
    run of equal parent sizes ends inside a run of equal child sizes spread over several
    children (line 15), the cut must split proportionally to the children's counts; ordering the
    tied child groups by ``(k + 1/2) / n_c`` (the ``k``-th of child ``c``'s ``n_c`` tied groups) makes
    every cut proportional up to rounding by one group per child.  (The paper rounds each cut by
    largest remainders; this stationary rounding keeps the matching one ``O(G log G)`` sort.
    The matching cost is the same for any tie order.)

    >>> kids = LevelHistograms.from_groups(np.array([0, 0, 1, 1]), np.array([1, 5, 1, 2]), 2)
    >>> match_level(kids, np.array([0, 0])).tolist()
    [0, 2, 3, 1]
    """
    parent = np.asarray(parent_of_child, dtype=np.int64)[np.repeat(children.node, children.count)]
    values = np.repeat(children.size, children.count)
    return np.lexsort((_tie_key(children), values, parent))


def match_groups(parent_sizes: np.ndarray, children_sizes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 for one parent: the child and the index (into the child's sorted sizes) of
    the group matched to each of the parent's groups in increasing order of size.

    >>> child, index = match_groups(np.array([2, 1, 9]), [np.array([8]), np.array([1, 3])])
    >>> child.tolist(), index.tolist()
    ([1, 1, 0], [0, 1, 0])
    """
    parent_sizes = np.asarray(parent_sizes, dtype=np.int64)
    if parent_sizes.size != sum(len(sizes) for sizes in children_sizes):
        raise ValueError(
            f"a parent must have as many groups as its children, got {parent_sizes.size} and "
            f"{sum(len(sizes) for sizes in children_sizes)}."
        )
    node = np.concatenate(
        [np.full(len(sizes), c, dtype=np.int64) for c, sizes in enumerate(children_sizes)] + [np.zeros(0, np.int64)]
    )
    sizes = np.concatenate([np.asarray(s, dtype=np.int64) for s in children_sizes] + [np.zeros(0, np.int64)])
    children = LevelHistograms.from_groups(node, sizes, len(children_sizes))
    order = match_level(children, np.zeros(len(children_sizes), dtype=np.int64))
    group_child = np.repeat(children.node, children.count)
    starts = np.concatenate(([0], np.cumsum(np.bincount(group_child, minlength=len(children_sizes)))[:-1]))
    return group_child[order], (order - starts[group_child[order]])


# ---------------------------------------------------------------------------- Eq. 5-6


def merge_estimates(
    parent: np.ndarray, parent_var: np.ndarray, child: np.ndarray, child_var: np.ndarray, merge: str = "weighted"
) -> tuple[np.ndarray, np.ndarray]:
    """Merged size and variance of matched groups (Section 5.3).

    "weighted": inverse-variance weighting, Eq. 5 (size) and Eq. 6 (variance).  "average": the
    plain mean, with the variance of a mean of two independent estimates.

    >>> [a.tolist() for a in merge_estimates(np.array([10.0]), np.array([1.0]), np.array([4.0]), np.array([2.0]))]
    [[8.0], [0.6666666666666666]]
    """
    merge = check_choice(merge, "merge", MERGES)
    if merge == "average":
        return (parent + child) / 2.0, (parent_var + child_var) / 4.0
    parent_weight, child_weight = 1.0 / parent_var, 1.0 / child_var
    total = parent_weight + child_weight
    return (parent * parent_weight + child * child_weight) / total, 1.0 / total


#: A level's groups in order (by region, then merged size): region, size (float64, integral) and variance.
Groups = tuple[np.ndarray, np.ndarray, np.ndarray]


def estimate_groups(estimate: LevelEstimate) -> Groups:
    """Every group of ``estimate`` in row order: its region, estimated size and variance (line 7 of Algorithm 1)."""
    hist = estimate.histograms
    return (
        np.repeat(hist.node, hist.count),
        np.repeat(hist.size, hist.count).astype(np.float64),
        np.repeat(estimate.variance, hist.count),
    )


def consistent_children(
    parents: Groups, children: LevelEstimate, parent_of_child: np.ndarray, merge: str = "weighted"
) -> Groups:
    """Lines 8-15 of Algorithm 1 for one level: match every parent's groups to its children's
    groups (Algorithm 2), merge the matched sizes (Eq. 5-6) and round.

    ``parents`` are the consistent groups of the parents' level (:data:`Groups`, parents numbered
    as in ``parent_of_child``), ``children`` the noisy estimate of their children.  Each parent's
    result depends on its own groups and children only, so any set of parents (renumbered in
    order) gives the same children's groups as the whole level: the Spark engine runs this per
    parent.  Post-processing: no randomness, no privacy cost.
    """
    merge = check_choice(merge, "merge", MERGES)
    _, values, variance = parents
    child_node, child_values, child_var = estimate_groups(children)
    if child_node.size != values.size:
        raise ValueError(f"the children have {child_node.size} groups but their parents have {values.size}.")
    order = match_level(children.histograms, parent_of_child)
    merged, merged_var = merge_estimates(values, variance, child_values[order], child_var[order], merge)
    child_values[order] = np.rint(merged)
    child_var[order] = merged_var
    resort = np.lexsort((child_values, child_node))
    return child_node[resort], child_values[resort], child_var[resort]


def groups_to_histograms(groups: Groups, n_nodes: int) -> LevelHistograms:
    """The histograms of consistent groups (their sizes are integral)."""
    node, values, _ = groups
    return LevelHistograms.from_sorted(node, values.astype(np.int64), np.ones(node.size, dtype=np.int64), n_nodes)


def top_down(
    tree: RegionTree, estimates: Sequence[LevelEstimate], merge: str = "weighted"
) -> tuple[LevelHistograms, ...]:
    """Lines 7-18 of Algorithm 1 on per-level estimates (post-processing only)."""
    merge = check_choice(merge, "merge", MERGES)
    groups = estimate_groups(estimates[0])
    for level in range(1, tree.levels):
        if estimates[level].histograms.count.sum() != groups[0].size:
            raise ValueError(
                f"level {level} has {int(estimates[level].histograms.count.sum())} groups but level {level - 1} "
                f"has {groups[0].size}."
            )
        groups = consistent_children(groups, estimates[level], tree.parents[level], merge)
    return back_substitute(tree, groups_to_histograms(groups, tree.size(tree.levels - 1)))


def back_substitute(tree: RegionTree, leaves: LevelHistograms) -> tuple[LevelHistograms, ...]:
    """Every level as sums of the leaves (lines 16-18 of Algorithm 1)."""
    levels = [leaves]
    for level in range(tree.levels - 1, 0, -1):
        levels.append(levels[-1].aggregate(tree.parents[level], tree.size(level - 1)))
    return tuple(reversed(levels))
