"""Hierarchical count-of-counts (``dpstream.count_of_counts``): Problem 1's four desiderata,
Algorithm 2's optimality, Eq. 5-6, the inputs and the mechanisms' contracts (the error metric
is tested in test_evaluation_count_of_counts.py).

Reference solvers share no code with the implementation: the matching is checked against
``scipy.optimize.linear_sum_assignment`` on the full |size difference| cost matrix.
"""

from __future__ import annotations

import csv

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy.optimize import linear_sum_assignment

from dpstream.cli import cli
from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsData,
    LevelHistograms,
    RegionTree,
    TopDownCountOfCounts,
    estimators,
    housing_data,
    match_groups,
    match_level,
    merge_estimates,
    read_tables,
    taxi_data,
    write_tables,
)
from dpstream.evaluation.count_of_counts import level_errors
from dpstream.privacy import ENTITY_ROW


def random_data(rng: np.random.Generator) -> CountOfCountsData:
    """A random hierarchy of 1-4 levels with random fan-outs, empty leaves, zero-size and huge groups."""
    depth = int(rng.integers(1, 5))
    paths = [("root",)]
    for _ in range(1, depth):
        paths = [path + (f"{path[-1]}.{child}",) for path in paths for child in range(int(rng.integers(1, 4)))]
    sizes = {}
    for path in paths:
        if rng.random() < 0.8:
            n = int(rng.integers(0, 60))
            values = rng.geometric(rng.uniform(0.1, 0.9), n) - (rng.random(n) < 0.1)
            values[rng.random(n) < 0.02] = rng.integers(50, 500)
            sizes[path[-1]] = values
    return CountOfCountsData.from_leaf_sizes(paths, sizes)


def assert_desiderata(data: CountOfCountsData, release) -> None:
    """Problem 1: integral, non-negative, G groups per region, children sum to their parent."""
    tree = data.tree
    assert len(release.levels) == tree.levels
    for level, hist in enumerate(release.levels):
        assert hist.count.dtype.kind == "i" and hist.size.dtype.kind == "i"
        assert np.all(hist.count > 0) and np.all(hist.size >= 0)
        assert np.array_equal(hist.groups(), data.groups(level))
        if level:
            summed = hist.aggregate(tree.parents[level], tree.size(level - 1))
            parent = release.levels[level - 1]
            for column in ("node", "size", "count"):
                assert np.array_equal(getattr(summed, column), getattr(parent, column))


MECHANISMS = [
    lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=300, seed=seed),
    lambda seed: TopDownCountOfCounts(epsilon=0.3, method="hg", seed=seed),
    lambda seed: TopDownCountOfCounts(epsilon=2.0, method="naive", max_size=80, seed=seed),
    lambda seed: TopDownCountOfCounts(epsilon=1.0, max_size=300, isotonic="l2", merge="average", seed=seed),
    lambda seed: TopDownCountOfCounts(epsilon=0.5, method="hg", isotonic="l1", max_size_epsilon=0.1, seed=seed),
    lambda seed: BottomUpCountOfCounts(epsilon=1.0, max_size=300, seed=seed),
    lambda seed: BottomUpCountOfCounts(epsilon=1.0, method="hg", seed=seed),
]


@pytest.mark.parametrize("make", MECHANISMS)
def test_every_release_meets_the_four_desiderata(make):
    rng = np.random.default_rng(20)
    for trial in range(12):
        data = random_data(rng)
        assert_desiderata(data, make(trial).release(data))


def test_mixed_methods_per_level_and_the_generators():
    rng = np.random.default_rng(21)
    data = housing_data(5000, n_states=3, n_counties=8, seed=rng)
    release = TopDownCountOfCounts(epsilon=1.0, method=("hg", "hc", "naive"), max_size=20_000, seed=1).release(data)
    assert_desiderata(data, release)
    taxis = taxi_data(30, seed=2)
    assert_desiderata(taxis, TopDownCountOfCounts(epsilon=1.0, max_size=5000, seed=3).release(taxis))
    with pytest.raises(ValueError, match="one per level"):
        TopDownCountOfCounts(epsilon=1.0, method=("hg", "hc"), max_size=10).release(data)


def test_with_no_noise_the_release_is_the_truth():
    data = random_data(np.random.default_rng(22))
    for mechanism in (TopDownCountOfCounts(epsilon=1e9, max_size=10_000, seed=0),
                      TopDownCountOfCounts(epsilon=1e9, method="hg", seed=0),
                      BottomUpCountOfCounts(epsilon=1e9, max_size=10_000, seed=0)):
        assert level_errors(data, mechanism.release(data)) == [0.0] * data.tree.levels


def test_same_seed_same_release():
    data = random_data(np.random.default_rng(23))
    one = TopDownCountOfCounts(epsilon=1.0, max_size=500, seed=9).release(data)
    two = TopDownCountOfCounts(epsilon=1.0, max_size=500, seed=9).release(data)
    assert one.rows() == two.rows()


@pytest.mark.parametrize("make", MECHANISMS)
def test_progress_reports_the_regions_done_and_changes_nothing(make, monkeypatch):
    monkeypatch.setattr(estimators, "CHUNK_CELLS", 700)  # a few regions per block: reports inside a level
    data = housing_data(3000, n_states=3, n_counties=14, seed=5)
    calls: list[tuple[int, int]] = []
    release = make(4).release(data, progress=lambda done, total: calls.append((done, total)))
    assert release.rows() == make(4).release(data).rows()
    mechanism = make(0)
    levels = [data.tree.levels - 1] if isinstance(mechanism, BottomUpCountOfCounts) else range(data.tree.levels)
    total = sum(data.tree.size(level) for level in levels)
    done = [d for d, _ in calls]
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(t == total for _, t in calls) and done == sorted(done)
    methods = {getattr(mechanism, "method", None), *getattr(mechanism, "methods", ())}
    if methods & {"hc", "naive"}:  # chunked methods report inside a level, not only at its ends
        ends = {sum(data.tree.size(level) for level in levels if level < stop) for stop in range(data.tree.levels + 1)}
        assert set(done) - ends


def test_algorithm_2_finds_a_least_cost_matching():
    rng = np.random.default_rng(24)
    for _ in range(300):
        n_children = int(rng.integers(1, 5))
        children = [np.sort(rng.integers(0, 6, int(rng.integers(0, 7)))) for _ in range(n_children)]
        total = sum(child.size for child in children)
        parent = rng.integers(0, 8, total)
        child, index = match_groups(parent, children)
        # a perfect matching: every child group used once
        pairs = sorted(zip(child.tolist(), index.tolist()))
        assert pairs == sorted((c, i) for c, kid in enumerate(children) for i in range(kid.size))
        if total == 0:
            continue
        matched = np.array([children[c][i] for c, i in zip(child, index)])
        cost = np.abs(np.sort(parent) - matched).sum()
        flat = np.concatenate(children)
        rows, cols = linear_sum_assignment(np.abs(parent[:, None] - flat[None, :]))
        assert cost == np.abs(parent[rows] - flat[cols]).sum()


def test_algorithm_2_splits_ties_in_proportion():
    # line 15: 30 parent groups of size 1 against 200 + 100 + 100 children groups of size 1
    children = [np.ones(200, int), np.ones(100, int), np.ones(100, int)]
    child, _ = match_groups(np.r_[np.ones(300, int), np.full(100, 2)], children)
    first = np.bincount(child[:300], minlength=3)
    assert np.all(np.abs(first - np.array([150, 75, 75])) <= 1)
    cut = np.bincount(child[:30], minlength=3)
    assert np.all(np.abs(cut - np.array([15, 7.5, 7.5])) <= 1)


def test_match_level_handles_many_parents_at_once():
    kids = LevelHistograms.from_groups(np.array([0, 0, 1, 2, 2]), np.array([3, 1, 2, 9, 4]), 3)
    order = match_level(kids, np.array([0, 0, 1]))
    groups = np.repeat(kids.size, kids.count)
    # parent 0 owns children 0 and 1 (3 groups), parent 1 owns child 2 (2 groups)
    assert groups[order].tolist() == [1, 2, 3, 4, 9]


def test_merge_is_inverse_variance_weighting():
    rng = np.random.default_rng(25)
    a, b = rng.normal(10, 3, 50), rng.normal(10, 3, 50)
    va, vb = rng.uniform(0.1, 5, 50), rng.uniform(0.1, 5, 50)
    merged, variance = merge_estimates(a, va, b, vb)
    assert np.allclose(merged, (a / va + b / vb) / (1 / va + 1 / vb))  # Eq. 5
    assert np.allclose(variance, 1 / (1 / va + 1 / vb))  # Eq. 6
    assert np.all(variance <= np.minimum(va, vb))
    plain, _ = merge_estimates(a, va, b, vb, "average")
    assert np.allclose(plain, (a + b) / 2)
    with pytest.raises(ValueError, match="merge"):
        merge_estimates(a, va, b, vb, "median")


@pytest.mark.parametrize("parquet", [False, True])
def test_tables_round_trip(tmp_path, parquet):
    data = housing_data(3000, n_states=2, n_counties=5, seed=4)
    write_tables(data, tmp_path, parquet=parquet)
    suffix = "parquet" if parquet else "csv"
    back = read_tables(*(tmp_path / f"{name}.{suffix}" for name in ("entities", "groups", "hierarchy")))
    for level in range(3):
        for column in ("node", "size", "count"):
            assert np.array_equal(getattr(back.truth(level), column), getattr(data.truth(level), column))


def test_tables_with_string_ids_and_empty_groups(tmp_path):
    (tmp_path / "h.csv").write_text("region_id,level0,level1\nx,top,x\ny,top,y\n")
    (tmp_path / "g.csv").write_text("group_id,region_id\ng1,x\ng2,x\ng3,y\n")
    (tmp_path / "e.csv").write_text("entity_id,group_id\np1,g1\np2,g1\np3,g3\n")
    data = read_tables(tmp_path / "e.csv", tmp_path / "g.csv", tmp_path / "h.csv")
    assert data.truth(0).size.tolist() == [0, 1, 2] and data.groups(1).tolist() == [2, 1]
    (tmp_path / "e.csv").write_text("entity_id,group_id\np1,g1\np1,g3\n")
    with pytest.raises(ValueError, match="entity_id more than once"):
        read_tables(tmp_path / "e.csv", tmp_path / "g.csv", tmp_path / "h.csv")
    (tmp_path / "e.csv").write_text("entity_id,group_id\np1,g9\n")
    with pytest.raises(ValueError, match="g9"):
        read_tables(tmp_path / "e.csv", tmp_path / "g.csv", tmp_path / "h.csv")
    (tmp_path / "g2.csv").write_text("group_id,region_id\ng1,z\n")
    with pytest.raises(ValueError, match="'z'"):
        read_tables(tmp_path / "e.csv", tmp_path / "g2.csv", tmp_path / "h.csv")
    (tmp_path / "h2.csv").write_text("region_id,level1\nx,x\n")
    with pytest.raises(ValueError, match="level0"):
        read_tables(tmp_path / "e.csv", tmp_path / "g.csv", tmp_path / "h2.csv")
    with pytest.raises(ValueError, match="does not exist"):
        read_tables(tmp_path / "none.csv", tmp_path / "g.csv", tmp_path / "h.csv")


def test_bad_hierarchies_and_inputs():
    with pytest.raises(ValueError, match="single root"):
        CountOfCountsData.from_leaf_sizes([("a", "x"), ("b", "y")], {})
    with pytest.raises(ValueError, match="two parents"):
        CountOfCountsData.from_leaf_sizes([("r", "a", "x"), ("r", "b", "x")], {})
    with pytest.raises(ValueError, match="not leaves"):
        CountOfCountsData.from_leaf_sizes([("r", "a")], {"q": [1]})
    with pytest.raises(ValueError, match=">= 0"):
        CountOfCountsData.from_leaf_sizes([("r", "a")], {"a": [1, -1]})
    with pytest.raises(ValueError, match="integers"):
        CountOfCountsData.from_leaf_sizes([("r", "a")], {"a": [1.5]})
    with pytest.raises(ValueError, match="max_size"):
        TopDownCountOfCounts(epsilon=1.0).release(CountOfCountsData.from_leaf_sizes([("r", "a")], {"a": [1]}))
    with pytest.raises(ValueError, match="epsilon"):
        TopDownCountOfCounts(epsilon=-1.0)
    with pytest.raises(ValueError, match="method"):
        TopDownCountOfCounts(epsilon=1.0, method="hx")


def test_privacy_guarantees():
    top = TopDownCountOfCounts(epsilon=0.9, max_size=10).privacy(3)
    assert (top.epsilon, top.delta) == (0.9, 0.0) and "0.3 per level" in top.composition
    assert top.neighbours is ENTITY_ROW
    estimated = TopDownCountOfCounts(epsilon=0.9, max_size_epsilon=0.01).privacy(3)
    assert estimated.epsilon == pytest.approx(0.91) and "estimate K" in estimated.composition
    assert TopDownCountOfCounts(epsilon=0.9, method="hg", max_size_epsilon=0.01).privacy().epsilon == 0.9
    bottom = BottomUpCountOfCounts(epsilon=1.0, max_size=10).privacy()
    assert bottom.epsilon == 1.0 and "leaves" in bottom.composition and bottom.neighbours is ENTITY_ROW


def _write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def numeric_looking(tmp_path):
    """Region codes that type inference would turn into numbers: 06 and 6 are two states."""
    hierarchy = _write(tmp_path / "h.csv", "region_id,level0,level1,level2\n"
                                           "06001,1,06,06001\n6001,1,6,6001\n1e3,1,6,1e3\nNA,1,NA,NA\n")
    groups = _write(tmp_path / "g.csv", "group_id,region_id\n01,06001\n1,06001\n2,6001\n3,1e3\n4,NA\n")
    entities = _write(tmp_path / "e.csv", "entity_id,group_id\n1,01\n01,01\n001,1\n2,2\n3,3\n4,3\n5,4\n")
    return entities, groups, hierarchy


def test_csv_ids_and_names_are_read_as_written(numeric_looking):
    data = read_tables(*numeric_looking)
    assert [names.tolist() for names in data.tree.names] == [["1"], ["06", "6", "NA"], ["06001", "1e3", "6001", "NA"]]
    # group ids 01 and 1 are two groups, entity ids 1, 01 and 001 three entities
    assert data.n_groups == 5
    assert data.groups(1).tolist() == [2, 2, 1]
    leaf_name = data.tree.names[2][data.leaf]
    assert {name: sorted(data.size[leaf_name == name].tolist()) for name in data.tree.names[2]} == {
        "06001": [1, 2], "1e3": [2], "6001": [1], "NA": [1]}


def test_released_region_names_are_the_input_names(numeric_looking, tmp_path):
    entities, groups, hierarchy = numeric_looking
    out = tmp_path / "out.csv"
    result = CliRunner().invoke(cli, ["count-of-counts", "--entities", str(entities), "--groups", str(groups),
                                      "--hierarchy", str(hierarchy), "--epsilon", "1", "--max-size", "10",
                                      "--seed", "0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    with open(out, newline="") as handle:
        regions = {(row["region"], row["level"]) for row in csv.DictReader(handle)}
    assert regions == {("1", "0"), ("06", "1"), ("6", "1"), ("NA", "1"),
                       ("06001", "2"), ("6001", "2"), ("1e3", "2"), ("NA", "2")}


def test_an_empty_csv_field_is_still_missing(tmp_path):
    hierarchy = _write(tmp_path / "h.csv", "region_id,level0,level1\na,r,a\nb,r,\n")
    groups = _write(tmp_path / "g.csv", "group_id,region_id\n1,a\n")
    entities = _write(tmp_path / "e.csv", "entity_id,group_id\n1,1\n")
    with pytest.raises(ValueError, match="empty values in column 'level1'"):
        read_tables(entities, groups, hierarchy)


def test_parquet_ids_compare_as_text_when_the_types_differ(tmp_path):
    # integer region ids in the hierarchy, text in the groups: compared as text, exactly
    hierarchy = pa.table({"region_id": [6001, 6002], "level0": ["US", "US"], "level1": [6001, 6002]})
    pq.write_table(hierarchy, tmp_path / "h.parquet")
    pq.write_table(pa.table({"group_id": [1, 2], "region_id": ["6001", "6002"]}), tmp_path / "g.parquet")
    pq.write_table(pa.table({"entity_id": [1, 2, 3], "group_id": [1, 1, 2]}), tmp_path / "e.parquet")
    data = read_tables(tmp_path / "e.parquet", tmp_path / "g.parquet", tmp_path / "h.parquet")
    assert data.tree.names[1].tolist() == ["6001", "6002"] and sorted(data.size.tolist()) == [1, 2]
    pq.write_table(pa.table({"group_id": [1, 2], "region_id": ["06001", "6002"]}), tmp_path / "g.parquet")
    with pytest.raises(ValueError, match="'06001'"):
        read_tables(tmp_path / "e.parquet", tmp_path / "g.parquet", tmp_path / "h.parquet")


@pytest.fixture
def two_leaves():
    tree, _ = RegionTree.from_paths([("r", "a"), ("r", "b")])
    return tree


@pytest.mark.parametrize(
    ("leaf", "size", "message"),
    [
        ([0, -1], [1, 1], r"leaf\[1\] .* \[0, 2\), got -1"),
        ([0, 2], [1, 1], r"leaf\[1\] .* \[0, 2\), got 2"),
        ([0.5, 1], [1, 1], r"leaf\[0\] .*, got 0.5"),
        ([0, 1], [2.7, 1.0], r"size\[0\] must be an integer >= 0, got 2.7"),
        ([0, 1], [1, -3], r"size\[1\] must be an integer >= 0, got -3"),
        ([0, 1], [1.0, np.nan], r"size\[1\] .*, got nan"),
        ([0, 1, 1], [1, 1], "one entry per group"),
    ],
)
def test_group_leaves_and_sizes_are_validated(two_leaves, leaf, size, message):
    with pytest.raises(ValueError, match=message):
        CountOfCountsData(tree=two_leaves, leaf=np.array(leaf), size=np.array(size))


def test_integer_valued_floats_are_accepted_as_integers(two_leaves):
    data = CountOfCountsData(tree=two_leaves, leaf=np.array([0.0, 1.0, 1.0]), size=np.array([2.0, 0.0, 5.0]))
    assert data.leaf.dtype == np.int64 and data.size.dtype == np.int64
    assert data.truth(1).size.tolist() == [2, 0, 5] and data.groups(1).tolist() == [1, 2]


def test_hierarchy_errors_show_plain_names():
    with pytest.raises(ValueError, match=r"single root region, got \['UK', 'US'\]\.$"):
        CountOfCountsData.from_leaf_sizes([("US", "A"), ("UK", "B")], {})
    with pytest.raises(ValueError, match=r"^region 'C' appears under two parents at level 2"):
        CountOfCountsData.from_leaf_sizes([("US", "A", "C"), ("US", "B", "C")], {})
