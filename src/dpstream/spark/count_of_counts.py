"""Count-of-counts on Spark: the same release as the local engine, computed by a cluster.

Spark reads Entities, Groups and Hierarchy (Parquet or CSV, the columns of
:func:`~dpstream.count_of_counts.read_tables`), counts the entities of every group and the
groups of every (region, size) with its own group-bys, and runs the noise and the top-down
consistency one level at a time, in parallel over the parent regions of the level
(``groupBy(parent).cogroup(...).applyInPandas``): a parent's task estimates its children with
:func:`~dpstream.count_of_counts.estimate_level` and matches and merges them with its own
consistent groups by :func:`~dpstream.count_of_counts.consistency.consistent_children`, the
functions the local engine runs.  Only the Hierarchy (public, small) and the released leaf
histograms reach the driver; the parents above the leaves are the sums of the leaves there.

Determinism.  Every region draws its noise from ``KeyedBits(key, ("count-of-counts", level,
region))`` (:func:`~dpstream.count_of_counts.consistency.release_source`), and every task sorts
its inputs before it computes, so a task's output is a function of the key and the data
alone: retried or speculative tasks recompute the same values, and the release equals the
local engine's, bit for bit, for the same key.

Privacy
-------
The same as the local mechanism's (:meth:`~dpstream.count_of_counts.TopDownCountOfCounts.privacy`).
The key travels to the executors inside the tasks: on a shared cluster turn on Spark's RPC
encryption and authentication (``spark.authenticate``, ``spark.network.crypto.enabled``,
``spark.io.encryption.enabled``), as for the private Entities table itself.
"""

from __future__ import annotations

import os
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream.count_of_counts.consistency import (
    BottomUpCountOfCounts,
    CountOfCountsRelease,
    TopDownCountOfCounts,
    back_substitute,
    consistent_children,
    estimate_groups,
    groups_to_histograms,
)
from dpstream.count_of_counts.data import (
    Hierarchy,
    empty_values,
    missing_columns,
    missing_table,
    read_hierarchy,
    repeated_entity,
    repeated_group,
    table_format,
    unknown_group,
    unknown_region,
)
from dpstream.count_of_counts.estimators import estimate_level
from dpstream.count_of_counts.histograms import LevelHistograms
from dpstream.noise.source import NoiseSource
from dpstream.spark.session import require_spark

__all__ = ["release_count_of_counts"]

Mechanism = TopDownCountOfCounts | BottomUpCountOfCounts
#: Columns of the consistent groups of a level, run-length encoded in their order.
RUNS_SCHEMA = "region long, run long, value double, variance double, count long"
#: Columns of the released leaf histograms.
HIST_SCHEMA = "region long, size long, count long"


def release_count_of_counts(
    spark: Any,
    mechanism: Mechanism,
    entities: str | os.PathLike[str],
    groups: str | os.PathLike[str],
    hierarchy: str | os.PathLike[str],
    *,
    timings: dict[str, float] | None = None,
    fault_marker: str | None = None,
) -> CountOfCountsRelease:
    """The release of ``mechanism`` on the three tables, computed by ``spark``.

    ``mechanism`` is a :class:`~dpstream.count_of_counts.TopDownCountOfCounts` or
    :class:`~dpstream.count_of_counts.BottomUpCountOfCounts` with keyed noise (a ``seed`` or
    ``key``, or neither for a fresh key; not a ``noise=`` sampler); the result equals
    ``mechanism.release(read_tables(entities, groups, hierarchy))`` for the same key.  It is one
    release of ``mechanism``: it spends the mechanism's noise (its ``take_noise()``) once the
    tables are checked, as the local engine does, so a mechanism whose given key was spent is
    refused.  Input errors are the local engine's; the checks of the table schemas run before
    any Spark job.

    ``timings``, if given, receives the seconds spent reading and checking, in the group-bys,
    and on each level's noise and consistency (each stage is then materialized on its own).
    ``fault_marker`` is for the retry test only: the first noise task that finds no file there
    creates it and fails, and Spark must retry it.
    """
    require_spark()
    if not isinstance(mechanism, (TopDownCountOfCounts, BottomUpCountOfCounts)):
        raise TypeError(f"mechanism must be a TopDownCountOfCounts or BottomUpCountOfCounts, got {mechanism!r}.")
    if not mechanism.noise.keyed:  # a spent key is refused here too, before any Spark job
        raise ValueError(
            "the Spark engine needs keyed noise (a seed or a key, or neither for a fresh key), got a noise sampler: "
            f"{mechanism.noise!r}."
        )
    clock = _Clock(timings)
    hier = read_hierarchy(hierarchy)
    tree = hier.tree
    ent = _read(spark, entities, ["entity_id", "group_id"], "Entities")
    grp = _read(spark, groups, ["group_id", "region_id"], "Groups")
    leaf_sizes, largest = _group_sizes(spark, ent, grp, hier, entities, groups, clock)
    source = mechanism.take_noise()  # the release's own noise, as the local engine's release takes it
    methods, max_size = mechanism.plan(tree, largest, source)
    if isinstance(mechanism, TopDownCountOfCounts):
        leaves = _top_down(spark, mechanism, tree, leaf_sizes, methods, max_size, source, clock, fault_marker)
    else:
        leaves = _bottom_up(spark, mechanism, tree, leaf_sizes, max_size, source, clock, fault_marker)
    table = leaves.toArrow()
    clock.lap("collect the leaves")
    order = np.lexsort((table["size"].to_numpy(), table["region"].to_numpy()))
    histograms = LevelHistograms.from_sorted(
        table["region"].to_numpy()[order].astype(np.int64),
        table["size"].to_numpy()[order].astype(np.int64),
        table["count"].to_numpy()[order].astype(np.int64),
        tree.size(tree.levels - 1),
    )
    for frame in [leaf_sizes, *clock.cached]:
        frame.unpersist()
    return CountOfCountsRelease(tree=tree, levels=back_substitute(tree, histograms), max_size=max_size)


class _Clock:
    """Seconds per stage, when asked for (``timings``)."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.start = time.perf_counter()
        self.cached: list[Any] = []  # frames materialized for their own times, dropped at the end

    @property
    def on(self) -> bool:
        return self.timings is not None

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + now - self.start
        self.start = now


# ---------------------------------------------------------------------------- reading and checking


def _read(spark: Any, path: str | os.PathLike[str], columns: list[str], what: str) -> Any:
    """A table as a DataFrame, its columns checked from the schema (no Spark job for Parquet).

    A local path must be a file (or a Parquet dataset's directory); a URI (``hdfs://``, ``s3a://``)
    is Spark's to find.
    """
    location = str(path)
    remote = "://" in location
    path = Path(path)
    if not remote and not (path.is_file() or (path.is_dir() and table_format(path) == "parquet")):
        raise missing_table(path, what)
    try:
        if table_format(path) == "parquet":
            frame = spark.read.parquet(location)
        else:  # as the local engine: every column as text, only an empty field is missing
            frame = spark.read.options(header=True, inferSchema=False, nullValue="", emptyValue="").csv(location)
    except Exception as error:  # AnalysisException and friends: unreadable input
        raise missing_table(path, what) if "PATH_NOT_FOUND" in str(error) else _unreadable(path, what, error) from None
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        raise missing_columns(path, what, missing, list(frame.columns))
    return frame


def _unreadable(path: Path, what: str, error: Exception) -> ValueError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ValueError(f"cannot read the {what} table {str(path)!r}: {first}")


def _key_type(*types: Any) -> str:
    """The type ids are compared as: bigint if every column is an integer, else string (as locally)."""
    from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType

    integers = (ByteType, ShortType, IntegerType, LongType)
    return "bigint" if all(isinstance(kind, integers) for kind in types) else "string"


def _group_sizes(
    spark: Any, ent: Any, grp: Any, hier: Hierarchy, entities: Any, groups: Any, clock: _Clock
) -> tuple[Any, int]:
    """The leaf-level truth (region, size, count) as a cached DataFrame, and the largest group size."""
    from pyspark.sql import functions as F

    hier_type = "bigint" if pa.types.is_integer(hier.region_id.type) else "string"
    region_type = _key_type(grp.schema["region_id"].dataType) if hier_type == "bigint" else "string"
    region_type = "bigint" if region_type == hier_type == "bigint" else "string"
    group_type = _key_type(grp.schema["group_id"].dataType, ent.schema["group_id"].dataType)
    grp = grp.select(F.col("group_id").cast(group_type).alias("group_id"), F.col("region_id").cast(region_type))
    ent_ids = ent.select("entity_id", F.col("group_id").cast(group_type).alias("group_id"))
    clock.lap("read")
    # checks (one job per table): empty values, repeated ids; then the unknown regions and groups
    # with the group-bys
    g = grp.agg(
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct("group_id").alias("distinct"),
        F.sum(F.col("group_id").isNull().cast("long")).alias("null_group"),
        F.sum(F.col("region_id").isNull().cast("long")).alias("null_region"),
    ).first()
    if g["null_group"]:
        raise empty_values(groups, "Groups", "group_id")
    if g["null_region"]:
        raise empty_values(groups, "Groups", "region_id")
    e = ent_ids.agg(
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct("entity_id").alias("distinct"),
        F.sum(F.col("entity_id").isNull().cast("long")).alias("null_entity"),
        F.sum(F.col("group_id").isNull().cast("long")).alias("null_group"),
    ).first()
    if e["null_entity"]:
        raise empty_values(entities, "Entities", "entity_id")
    if e["null_group"]:
        raise empty_values(entities, "Entities", "group_id")
    if e["distinct"] != e["rows"]:
        raise repeated_entity()
    if g["distinct"] != g["rows"]:
        raise repeated_group()
    clock.lap("check repeated ids")
    names = hier.region_id.cast(pa.int64() if region_type == "bigint" else pa.string()).to_pylist()
    regions = spark.createDataFrame(
        [(name, int(leaf)) for name, leaf in zip(names, hier.leaf.tolist())], f"region_id {region_type}, leaf long"
    )
    placed = grp.join(F.broadcast(regions), "region_id", "left")
    counts = ent_ids.groupBy("group_id").agg(F.count(F.lit(1)).alias("size"))
    # One pass over the group counts: a group outside the Hierarchy (no leaf) and entities of a
    # group outside Groups (no group row) fall into rows without a region, looked into only if any.
    joined = placed.join(counts, "group_id", "full_outer")
    truth = (
        joined.groupBy(F.col("leaf").alias("region"), F.coalesce("size", F.lit(0)).alias("size"))
        .agg(F.count(F.lit(1)).alias("count"))
        .persist()
    )
    clock.cached.append(truth)
    if truth.filter(F.col("region").isNull()).first() is not None:
        stray = placed.filter(F.col("leaf").isNull()).select("region_id").first()
        if stray is not None:
            raise unknown_region(stray["region_id"])
        orphan = counts.join(grp.select("group_id"), "group_id", "left_anti").select("group_id").first()
        raise unknown_group(orphan["group_id"])
    clock.lap("check and group-by")
    truth = truth.filter(F.col("region").isNotNull())
    largest = truth.agg(F.max("size")).first()[0]
    return truth, int(largest or 0)


# ---------------------------------------------------------------------------- levels


def _level_truth(spark: Any, tree: Any, leaf_truth: Any, level: int) -> Any:
    """The truth of ``level`` as (parent, region, size, count): sums of the leaves' (exact, integer)."""
    from pyspark.sql import functions as F

    bottom = tree.levels - 1
    ancestor = tree.leaf_ancestor(level)
    parent = tree.parents[level][ancestor] if level else np.full(ancestor.size, -1, dtype=np.int64)
    mapping = spark.createDataFrame(
        [(int(leaf), int(a), int(p)) for leaf, (a, p) in enumerate(zip(ancestor.tolist(), parent.tolist()))],
        "region long, node long, parent long",
    )
    if level == bottom:
        return leaf_truth.join(F.broadcast(mapping), "region").select("parent", "region", "size", "count")
    return (
        leaf_truth.join(F.broadcast(mapping), "region")
        .groupBy("parent", "node", "size")
        .agg(F.sum("count").alias("count"))
        .withColumnRenamed("node", "region")
    )


def _children(tree: Any, level: int, parent: int) -> np.ndarray:
    """The indices of ``parent``'s children in ``level`` (consecutive: regions are sorted by parent)."""
    if level == 0:
        return np.zeros(1, dtype=np.int64)
    lo, hi = np.searchsorted(tree.parents[level], [parent, parent + 1])
    return np.arange(lo, hi, dtype=np.int64)


def _estimate_children(
    truth: Any, tree: Any, level: int, parent: int, settings: dict[str, Any], source: NoiseSource
) -> tuple[Any, np.ndarray]:
    """The noisy estimate of ``parent``'s children (all of them, with or without groups), and their indices."""
    children = _children(tree, level, parent)
    region = truth["region"].to_numpy(dtype=np.int64)
    size = truth["size"].to_numpy(dtype=np.int64)
    count = truth["count"].to_numpy(dtype=np.int64)
    order = np.lexsort((size, region))  # the rows arrive in any order: sort first
    local = LevelHistograms.from_sorted(region[order] - children[0], size[order], count[order], children.size)
    estimate = estimate_level(local, noise=source.child(level), regions=children, **settings)
    return estimate, children


def _fail_once(marker: str | None) -> None:
    if marker is not None and not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError(f"injected task failure (marker {marker})")


def _runs_frame(groups: tuple[np.ndarray, np.ndarray, np.ndarray], children: np.ndarray) -> Any:
    """Consistent groups in order as runs of equal (region, value, variance)."""
    import pandas as pd

    node, value, variance = groups
    if node.size == 0:
        return pd.DataFrame({"region": [], "run": [], "value": [], "variance": [], "count": []}).astype(
            {"region": "int64", "run": "int64", "value": "float64", "variance": "float64", "count": "int64"}
        )
    new = np.ones(node.size, dtype=bool)
    new[1:] = (node[1:] != node[:-1]) | (value[1:] != value[:-1]) | (variance[1:] != variance[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, node.size))
    return pd.DataFrame(
        {
            "region": children[node[starts]],
            "run": np.arange(starts.size, dtype=np.int64),
            "value": value[starts],
            "variance": variance[starts],
            "count": counts.astype(np.int64),
        }
    )


def _hist_frame(hist: LevelHistograms, children: np.ndarray) -> Any:
    import pandas as pd

    return pd.DataFrame({"region": children[hist.node], "size": hist.size, "count": hist.count})


def _settings(mechanism: Mechanism, method: str, epsilon: Fraction, max_size: int | None) -> dict[str, Any]:
    return {"method": method, "epsilon": epsilon, "max_size": max_size, "isotonic": mechanism.isotonic}


def _top_down(
    spark: Any, mechanism: TopDownCountOfCounts, tree: Any, leaf_truth: Any, methods: tuple[str, ...],
    max_size: int | None, source: NoiseSource, clock: _Clock, fault_marker: str | None,
) -> Any:
    per_level = Fraction(mechanism.epsilon) / tree.levels
    merge = mechanism.merge
    bottom = tree.levels - 1

    def root(truth: Any) -> Any:
        _fail_once(fault_marker)
        settings = _settings(mechanism, methods[0], per_level, max_size)
        estimate, children = _estimate_children(truth, tree, 0, -1, settings, source)
        groups = estimate_groups(estimate)
        if bottom == 0:
            return _hist_frame(groups_to_histograms(groups, 1), children)
        return _runs_frame(groups, children)

    runs = (
        _level_truth(spark, tree, leaf_truth, 0)
        .groupBy("parent")
        .applyInPandas(root, HIST_SCHEMA if bottom == 0 else RUNS_SCHEMA)
    )
    runs = _materialize(runs, clock, "level 0: noise and consistency")
    for level in range(1, tree.levels):
        runs = _materialize(
            _level_step(spark, tree, leaf_truth, runs, level, methods[level], per_level, max_size, merge,
                        mechanism, source, fault_marker),
            clock, f"level {level}: noise and consistency",
        )
    return runs


def _level_step(
    spark: Any, tree: Any, leaf_truth: Any, parent_runs: Any, level: int, method: str, epsilon: Fraction,
    max_size: int | None, merge: str, mechanism: Mechanism, source: NoiseSource, fault_marker: str | None,
) -> Any:
    """The consistent groups of ``level`` (runs, or the leaf histograms), one task per parent."""
    leaf = level == tree.levels - 1
    settings = _settings(mechanism, method, epsilon, max_size)

    def step(parent_frame: Any, truth: Any) -> Any:
        _fail_once(fault_marker)
        parent = int(parent_frame["region"].iloc[0]) if len(parent_frame) else int(truth["parent"].iloc[0])
        estimate, children = _estimate_children(truth, tree, level, parent, settings, source)
        ordered = parent_frame.sort_values("run")
        counts = ordered["count"].to_numpy(dtype=np.int64)
        values = np.repeat(ordered["value"].to_numpy(dtype=np.float64), counts)
        variance = np.repeat(ordered["variance"].to_numpy(dtype=np.float64), counts)
        parents = (np.zeros(values.size, dtype=np.int64), values, variance)
        groups = consistent_children(parents, estimate, np.zeros(children.size, dtype=np.int64), merge)
        if leaf:
            return _hist_frame(groups_to_histograms(groups, children.size), children)
        return _runs_frame(groups, children)

    truth = _level_truth(spark, tree, leaf_truth, level)
    return (
        parent_runs.groupBy("region")
        .cogroup(truth.groupBy("parent"))
        .applyInPandas(step, HIST_SCHEMA if leaf else RUNS_SCHEMA)
    )


def _bottom_up(
    spark: Any, mechanism: BottomUpCountOfCounts, tree: Any, leaf_truth: Any, max_size: int | None,
    source: NoiseSource, clock: _Clock, fault_marker: str | None,
) -> Any:
    level = tree.levels - 1
    settings = _settings(mechanism, mechanism.method, Fraction(mechanism.epsilon), max_size)
    # the local engine estimates the leaves at epsilon itself (a float), not a Fraction of it
    settings["epsilon"] = mechanism.epsilon

    def leaves(truth: Any) -> Any:
        _fail_once(fault_marker)
        parent = int(truth["parent"].iloc[0])
        estimate, children = _estimate_children(truth, tree, level, parent, settings, source)
        return _hist_frame(estimate.histograms, children)

    frame = _level_truth(spark, tree, leaf_truth, level).groupBy("parent").applyInPandas(leaves, HIST_SCHEMA)
    return _materialize(frame, clock, f"level {level}: noise")


def _materialize(frame: Any, clock: _Clock, stage: str) -> Any:
    """With timings on, compute ``frame`` now (cached) so that its stage has its own time."""
    if not clock.on:
        return frame
    frame = frame.persist()
    frame.count()
    clock.cached.append(frame)
    clock.lap(stage)
    return frame

