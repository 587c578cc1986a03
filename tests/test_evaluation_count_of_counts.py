"""The count-of-counts study (``dpstream.evaluation.count_of_counts``): the earth-mover's
distance (Lemma 1) against scipy's transport cost, the omniscient reference, the comparison runner."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from dpstream.count_of_counts import BottomUpCountOfCounts, CountOfCountsData, LevelHistograms, TopDownCountOfCounts
from dpstream.evaluation.count_of_counts import (
    OMNISCIENT_LABEL,
    emd_per_region,
    level_errors,
    omniscient_error,
    plot_level_errors,
    plot_region_histograms,
    run_comparison,
    summarize,
)


def test_emd_is_the_transport_cost():
    rng = np.random.default_rng(26)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        x, y = rng.integers(0, 30, n), rng.integers(0, 30, n)
        a = LevelHistograms.from_groups(np.zeros(n), x, 2)
        b = LevelHistograms.from_groups(np.zeros(n), y, 2)
        emd = emd_per_region(a, b)
        assert emd[1] == 0
        assert emd[0] == pytest.approx(n * wasserstein_distance(x, y))
        assert emd[0] == np.abs(np.sort(x) - np.sort(y)).sum()  # Lemma 1: L1 of Hg


def test_omniscient_reference_formula():
    data = CountOfCountsData.from_leaf_sizes([("r", "a"), ("r", "b")], {"a": [1, 1, 3], "b": [2]})
    # root: 3 distinct sizes; leaves: 2 and 1 on average 1.5; epsilon/(L+1) = 0.5
    assert omniscient_error(data, 1.0) == pytest.approx([3 * math.sqrt(2) / 0.5, 1.5 * math.sqrt(2) / 0.5])


def test_comparison_shares_estimates_only_between_merges_and_summarizes_per_level(tmp_path):
    data = CountOfCountsData.from_leaf_sizes([("r", "a"), ("r", "b")], {"a": [1, 1, 3, 7], "b": [2, 2]})
    strategies = {
        "hc": lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=20, seed=seed),
        "hc-average": lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=20, merge="average", seed=seed),
    }
    rows = run_comparison(data, strategies, runs=3, seed=5)
    assert len(rows) == 2 * 3 * data.tree.levels
    # run r of a strategy is its release with seed 5 + r, shared estimates or not
    for row in rows:
        release = strategies[row["strategy"]](5 + row["run"]).release(data)
        assert row["emd"] == level_errors(data, release)[row["level"]]
    summary = summarize(rows)
    assert [(row["strategy"], row["level"]) for row in summary] == [
        (name, level) for name in strategies for level in range(data.tree.levels)
    ]
    for row in summary:
        values = np.array([r["emd"] for r in rows if (r["strategy"], r["level"]) == (row["strategy"], row["level"])])
        assert row["emd_mean"] == pytest.approx(values.mean())
        assert row["emd_sem"] == pytest.approx(values.std(ddof=1) / math.sqrt(3))
    assert plot_level_errors(summary, tmp_path / "levels.png").stat().st_size > 1000


def test_emd_needs_the_same_groups():
    a = LevelHistograms.from_groups(np.zeros(2), np.array([1, 2]), 1)
    b = LevelHistograms.from_groups(np.zeros(3), np.array([1, 2, 3]), 1)
    with pytest.raises(ValueError, match="same numbers of groups"):
        emd_per_region(a, b)


def test_comparison_reports_the_regions_estimated_through_one_callback():
    """Regions of every level per top-down run, leaves per bottom-up run; shared estimates count at once."""
    data = CountOfCountsData.from_leaf_sizes([("r", "a"), ("r", "b"), ("r", "c")], {"a": [1, 2], "b": [3], "c": [1]})
    strategies = {
        "hc": lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=10, seed=seed),
        "hc-average": lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=10, merge="average", seed=seed),
        "bu": lambda seed: BottomUpCountOfCounts(epsilon=1.0, max_size=10, seed=seed),
    }
    calls = []
    rows = run_comparison(data, strategies, runs=2, seed=0, progress=lambda done, total: calls.append((done, total)))
    total = 2 * (4 + 4 + 3)  # 1 + 3 regions for each top-down strategy, 3 leaves for bottom-up
    assert calls[0] == (0, total) and calls[-1] == (total, total) and {of for _, of in calls} == {total}
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert rows == run_comparison(data, strategies, runs=2, seed=0)  # reporting changes nothing


def test_the_omniscient_reference_is_labelled_as_a_rule_of_thumb(monkeypatch, tmp_path):
    import dpstream.evaluation.count_of_counts as study

    drawn = []
    monkeypatch.setattr(study, "save_figure", lambda path, panels, **options: drawn.append(panels) or path)
    summary = [{"strategy": s, "level": level, "runs": 3 if s == "bu" else 0, "emd_mean": 5.0 + level, "emd_sem": 1.0}
               for s in ("bu", "omniscient") for level in (0, 1)]
    plot_level_errors(summary, tmp_path / "levels.png")
    (panel,) = drawn[0]
    bu, omniscient = panel.series
    assert omniscient.label == OMNISCIENT_LABEL and "not a lower bound" in omniscient.label and omniscient.reference
    assert omniscient.spread is None and list(bu.spread) == [1.0, 1.0]
    assert "standard error" in panel.legend_title and "3 runs" in panel.legend_title
    assert panel.legend == "outside" and "level" in panel.xlabel and "earth-mover" in panel.ylabel


def test_region_histograms_are_shares_of_each_regions_groups(monkeypatch, tmp_path):
    data = CountOfCountsData.from_leaf_sizes([("r", "a"), ("r", "b")], {"a": [0, 1, 1, 30], "b": [2, 2, 2, 2, 40]})
    release = TopDownCountOfCounts(epsilon=1e9, max_size=30, seed=0).release(data)  # exact: the truth capped at 30
    drawn = {}
    monkeypatch.setattr("dpstream.evaluation.count_of_counts.save_figure",
                        lambda path, panels: drawn.setdefault("panels", panels) and path)
    plot_region_histograms(release, [(0, 0), (1, 1)], tmp_path / "h.png", title="t")
    bulk, tail = drawn["panels"]
    assert [s.label for s in bulk.series] == ["r (level 0, 9 groups)", "b (level 1, 5 groups)"]
    root = bulk.series[0]
    # the 99% quantile of the plotted sizes is the largest, 30 (= K): bins 0..30
    assert root.steps and list(root.x) == list(np.arange(32) - 0.5) and root.y[30] == pytest.approx(2 / 9)
    assert root.y[0] == pytest.approx(1 / 9) and root.y[2] == pytest.approx(4 / 9) and root.y[1] == pytest.approx(2 / 9)
    # the tail: share of groups of size >= s at every released size s > 0; 30 is "30 or more"
    assert list(tail.series[1].x) == [2, 30] and list(tail.series[1].y) == pytest.approx([1.0, 0.2])
    assert tail.xlog and tail.ylog and "K = 30: size K means K or more" in tail.xlabel
    monkeypatch.undo()
    path = plot_region_histograms(release, [(0, 0)], tmp_path / "real.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="at least one"):
        plot_region_histograms(release, [], tmp_path / "none.png")
