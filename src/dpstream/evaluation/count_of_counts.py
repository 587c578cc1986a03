"""The count-of-counts study (Kuo et al., Section 6.2) behind docs/count-of-counts.md: errors
of releases per level, the omniscient reference, the comparison of strategies and its figure.

The error of a region is the earth-mover's distance between its true and released histograms,
which for histograms with the same number of groups is the L1 distance of the cumulative
histograms (Lemma 1): the least number of entities to add or remove to turn one into the other.
It is averaged over the regions of a level.

The omniscient reference is the paper's rule of thumb for reading these errors (Section 6.2,
"Interpreting error"), not a lower bound: see :func:`omniscient_error`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpstream._progress import Progress, notify, shifted
from dpstream.count_of_counts.consistency import (
    BottomUpCountOfCounts,
    CountOfCountsRelease,
    TopDownCountOfCounts,
    top_down,
)
from dpstream.count_of_counts.data import CountOfCountsData
from dpstream.count_of_counts.histograms import LevelHistograms
from dpstream.evaluation.plots import Panel, Series, counted, save_figure

__all__ = [
    "OMNISCIENT_LABEL",
    "emd_per_region",
    "level_errors",
    "omniscient_error",
    "plot_level_errors",
    "plot_region_histograms",
    "run_comparison",
    "summarize",
]

#: How plots name the omniscient reference: what it is, and that it bounds nothing.
OMNISCIENT_LABEL = "omniscient rule of thumb (Kuo et al. 6.2),\nnot a lower bound"

#: What the command line's strategies are, as plot legends say.
STRATEGY_LABELS = {
    "hc": "hc: Hc at every level, weighted merge",
    "hc-average": "hc-average: Hc, plain averaging",
    "hc-l2": "hc-l2: Hc, L2 isotonic regression",
    "hg": "hg: Hg at every level, weighted merge",
    "hg-average": "hg-average: Hg, plain averaging",
    "bu": "bu: bottom-up, all of ε on the leaves",
    "naive": "naive at every level",
}


def emd_per_region(truth: LevelHistograms, estimate: LevelHistograms) -> np.ndarray:
    """``||Hc - Hc_hat||_1`` for every region (Lemma 1), computed on the sparse rows.

    >>> a = LevelHistograms.from_groups(np.zeros(3), np.array([1, 1, 1]), 1)
    >>> b = LevelHistograms.from_groups(np.zeros(3), np.array([2, 2, 5]), 1)
    >>> emd_per_region(a, b).tolist()
    [6]
    """
    if truth.n_nodes != estimate.n_nodes or not np.array_equal(truth.groups(), estimate.groups()):
        raise ValueError("the earth-mover's distance needs the same regions with the same numbers of groups.")
    node = np.concatenate((truth.node, estimate.node))
    size = np.concatenate((truth.size, estimate.size))
    delta = np.concatenate((truth.count, -estimate.count))
    order = np.lexsort((size, node))
    node, size, delta = node[order], size[order], delta[order]
    running = np.cumsum(delta)  # returns to 0 at the end of every region, as both have G groups
    gap = np.zeros(size.size, dtype=np.int64)
    same = node[1:] == node[:-1]
    gap[:-1] = np.where(same, size[1:] - size[:-1], 0)
    return np.bincount(node, weights=np.abs(running) * gap, minlength=truth.n_nodes).astype(np.int64)


def level_errors(data: CountOfCountsData, release: CountOfCountsRelease) -> list[float]:
    """Mean earth-mover's distance per region, for every level (root first)."""
    return [float(emd_per_region(data.truth(level), hist).mean()) for level, hist in enumerate(release.levels)]


def omniscient_error(data: CountOfCountsData, epsilon: float) -> list[float]:
    """The omniscient reference of Section 6.2 per level: mean over regions of
    ``#distinct sizes * sqrt(2) / (epsilon / (L + 1))``.

    The paper's yardstick for "what is a good error": an algorithm that knows which group sizes
    exist in every region, splits epsilon over the L + 1 levels and adds ``Lap((L + 1) / epsilon)``
    (standard deviation ``sqrt(2) (L + 1) / epsilon``) to the count of each existing size; the
    formula adds up those standard deviations.  It is a rule of thumb, NOT a lower bound:

    * it assumes the budget is split over the levels, so a strategy that spends all of epsilon
      on one level (bottom-up, on the leaves) faces a third of the noise there and can beat it;
    * it counts per-size noise, while the error is the earth-mover's distance between
      cumulative histograms, a different measure (Lemma 1).
    """
    per_level = epsilon / data.tree.levels
    return [float(data.truth(level).distinct_sizes().mean() * math.sqrt(2.0) / per_level)
            for level in range(data.tree.levels)]


def run_comparison(
    data: CountOfCountsData,
    strategies: dict[str, Callable[[int], Any]],
    *,
    runs: int,
    seed: int,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """One row per (strategy, run, level): the mean per-region error.

    ``strategies`` maps a name to a factory taking a seed and returning a mechanism with
    ``release(data)``; run ``r`` of every strategy uses seed ``seed + r``.  Top-down strategies
    that differ only in their merge share the noisy estimates of a run (the same seed gives
    the same estimates, so this only saves time).

    ``progress`` is called with the regions estimated out of all regions every run of every
    strategy estimates (the protocol of :mod:`dpstream._progress`): a top-down strategy
    estimates the regions of every level, bottom-up the leaves, any other mechanism counts as
    one region; estimates shared with an earlier strategy count as done at once.
    """
    def work(mechanism: Any) -> int:
        if isinstance(mechanism, TopDownCountOfCounts):
            return sum(data.tree.size(level) for level in range(data.tree.levels))
        if isinstance(mechanism, BottomUpCountOfCounts):
            return data.tree.size(data.tree.levels - 1)
        return 1

    total = runs * sum(work(factory(seed)) for factory in strategies.values())
    notify(progress, 0, total)
    done = 0
    rows = []
    for run in range(runs):
        shared: dict[tuple[Any, ...], list[Any]] = {}
        for name, factory in strategies.items():
            mechanism = factory(seed + run)
            part = shifted(progress, done, total)
            if isinstance(mechanism, TopDownCountOfCounts):
                key = (mechanism.methods, mechanism.isotonic, mechanism.max_size, mechanism.max_size_epsilon,
                       mechanism.epsilon)
                if key not in shared:
                    shared[key] = mechanism.estimates(data, progress=part)
                release = CountOfCountsRelease(tree=data.tree, levels=top_down(data.tree, shared[key], mechanism.merge))
            elif isinstance(mechanism, BottomUpCountOfCounts):
                release = mechanism.release(data, progress=part)
            else:
                release = mechanism.release(data)
            done += work(mechanism)
            notify(progress, done, total)
            errors = level_errors(data, release)
            rows.extend({"strategy": name, "run": run, "level": level, "emd": error}
                        for level, error in enumerate(errors))
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard error of the mean (std / sqrt(runs)) per (strategy, level)."""
    out = []
    keys = list(dict.fromkeys((row["strategy"], row["level"]) for row in rows))
    for strategy, level in keys:
        values = np.array([row["emd"] for row in rows if row["strategy"] == strategy and row["level"] == level])
        sem = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
        out.append({"strategy": strategy, "level": level, "runs": int(values.size), "emd_mean": float(values.mean()),
                    "emd_sem": sem})
    return out


def plot_level_errors(summary: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Mean per-region EMD against level, one line per strategy (log scale, error bars of one
    standard error of the mean over runs); ``omniscient`` is the dashed reference, labelled as
    the rule of thumb it is (:data:`OMNISCIENT_LABEL`), and the legend sits beside the axes."""
    series = []
    for strategy in dict.fromkeys(row["strategy"] for row in summary):
        mine = sorted((row for row in summary if row["strategy"] == strategy), key=lambda row: row["level"])
        omniscient = strategy == "omniscient"
        label = OMNISCIENT_LABEL if omniscient else STRATEGY_LABELS.get(strategy, strategy)
        series.append(Series(label=label, x=[r["level"] for r in mine],
                             y=[r["emd_mean"] for r in mine],
                             spread=None if omniscient else [r["emd_sem"] for r in mine], reference=omniscient))
    runs = max(row["runs"] for row in summary)
    panel = Panel(series=series, xlabel="level of the hierarchy (0 = root, the last = leaves)",
                  ylabel="earth-mover's distance per region (mean over the level)", title=title, ylog=True,
                  xticks=sorted({row["level"] for row in summary}), legend="outside",
                  legend_title=f"point: mean of {counted(runs, 'run')}\nbars: ± 1 standard error of that mean")
    return save_figure(path, [panel], panel_size=(10.0, 4.8))


def plot_region_histograms(
    release: CountOfCountsRelease, regions: Sequence[tuple[int, int]], path: Path, *, title: str = ""
) -> Path:
    """The released histograms of a few regions against each other, as shares of each region's groups.

    ``regions`` are ``(level, index)`` pairs.  Left: the share of the region's groups of every
    size up to the size below which 99% of the plotted groups lie (at least 10).  Right: the
    share of groups of size ``s`` or more, on log-log axes, which shows the tail.  With a public
    bound ``K`` (``release.max_size``), size ``K`` means "``K`` or more" and the axis says so.
    Post-processing of the release only: nothing private is read.
    """
    if not regions:
        raise ValueError("regions must name at least one (level, index) pair, got none.")
    histograms = []
    for level, index in regions:
        sizes, counts = release.levels[level].region(index)
        name = str(release.tree.names[level][index])
        histograms.append((f"{name} (level {level}, {int(counts.sum()):,} groups)", sizes, counts))
    everything = np.concatenate([np.repeat(sizes, counts) for _, sizes, counts in histograms])
    cutoff = max(10, int(np.quantile(everything, 0.99))) if everything.size else 10
    if release.max_size is not None:
        cutoff = min(cutoff, release.max_size)
    edges = np.arange(cutoff + 2) - 0.5
    bulk, tail = [], []
    for label, sizes, counts in histograms:
        total = max(int(counts.sum()), 1)
        dense = np.bincount(sizes[sizes <= cutoff], weights=counts[sizes <= cutoff], minlength=cutoff + 1)
        bulk.append(Series(label=label, x=edges, y=dense / total, steps=True, linewidth=1.5))
        positive = sizes > 0
        at_least = (counts.sum() - np.cumsum(counts) + counts) / total  # share of groups of size >= s
        if positive.any():
            tail.append(Series(label=label, x=sizes[positive], y=at_least[positive], marker=".", markersize=4))
    k = release.max_size
    bound = f" (K = {k:,}: size K means K or more)" if k is not None else ""
    panels = [
        Panel(series=bulk, xlabel=f"group size (0 to {cutoff}: at least 99% of the plotted groups)",
              ylabel="share of the region's groups", title=title),
        Panel(series=tail, xlabel=f"group size s{bound}", ylabel="share of the region's groups of size \u2265 s",
              title="the tail: groups of size s or more (log-log)", xlog=True, ylog=True),
    ]
    return save_figure(path, [panel for panel in panels if panel.series])
