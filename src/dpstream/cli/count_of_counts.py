"""``dpstream count-of-counts`` and ``dpstream evaluate-count-of-counts`` (Kuo et al.)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from click.core import ParameterSource

from dpstream.cli._app import cli, progress_bar, quote, say, warn_if_seeded
from dpstream.cli._options import SEED_HELP, epsilon_option
from dpstream.cli._outputs import output_directory, output_file, prepare_output, write_csv
from dpstream.cli._spark import ENGINES, spark_conf_option, spark_session
from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsData,
    CountOfCountsRelease,
    RegionTree,
    TopDownCountOfCounts,
    housing_data,
    read_hierarchy,
    read_tables,
    taxi_data,
    write_tables,
)
from dpstream.count_of_counts.estimators import BYTES_PER_CELL, METHODS, dense_memory, format_bytes
from dpstream.evaluation.count_of_counts import (
    omniscient_error,
    plot_level_errors,
    plot_region_histograms,
    run_comparison,
    summarize,
)
from dpstream.noise import FloatNoise
from dpstream.spark.session import DEFAULT_MASTER

__all__ = ["STRATEGIES"]


#: What ``--method`` accepts besides the Section 4 methods: the bottom-up release (hc on the leaves).
BOTTOM_UP = "bu"
#: Default of ``--memory-limit``.
DEFAULT_MEMORY_LIMIT = "4GiB"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _methods(ctx: click.Context, param: click.Parameter, text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    bad = [name for name in names if name not in METHODS]
    if names == [BOTTOM_UP]:
        return names
    if not names or bad:
        raise click.BadParameter(
            f"expected one of {', '.join(METHODS)} (or one per level, comma-separated) or {BOTTOM_UP} "
            f"(bottom-up), got {quote(text)}."
        )
    return names


def _memory(ctx: click.Context, param: click.Parameter, text: str) -> int:
    """``--memory-limit``: bytes, with an optional binary unit (``512MiB``, ``4G``, ``8GiB``)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, flags=re.IGNORECASE)
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(f"expected a positive size such as 4GiB, 512MiB or 1000000000, got {text!r}.")
    return max(1, int(float(match.group(1)) * _UNITS[match.group(2).lower()]))


def _plot_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and Path(value).suffix.lower() != ".png":
        raise click.BadParameter(f"the plot is a PNG file: its name must end in .png, got {value!r}.")
    return value


def _release_table(release: CountOfCountsRelease) -> pa.Table:
    """The output CSV's columns: region, level, size, count, and ``size_label`` (``K or more`` on size K)."""
    rows = release.rows()
    region, level, size, count = zip(*rows) if rows else ((), (), (), ())
    k = release.max_size
    label = [f"{k} or more" if k is not None and value == k else "" for value in size]
    return pa.table(
        {
            "region": pa.array(region, pa.string()),
            "level": pa.array(level, pa.int64()),
            "size": pa.array(size, pa.int64()),
            "count": pa.array(count, pa.int64()),
            "size_label": pa.array(label, pa.string()),
        }
    )


def _plotted_regions(
    tree: RegionTree, level_groups: np.ndarray | None, names: str | None
) -> list[tuple[int, int]]:
    """``(level, index)`` of the regions to plot: the named ones, or the root and up to three of the
    level-1 regions with the most groups (``level_groups``: the public numbers of groups of level 1)."""
    if names is None:
        chosen = [(0, 0)]
        if tree.levels > 1 and level_groups is not None:
            groups = level_groups
            chosen += [(1, int(i)) for i in np.argsort(-groups, kind="stable")[:3]]
        return chosen
    chosen = []
    for name in [part.strip() for part in names.split(",") if part.strip()]:
        found = [(level, int(np.flatnonzero(tree.names[level] == name)[0]))
                 for level in range(tree.levels) if name in tree.names[level]]
        if not found:
            raise click.BadParameter(f"no region is called {name!r}.", param_hint="'--plot-regions'")
        chosen.append(found[0])
    if not chosen:
        raise click.BadParameter(f"expected region names, got {names!r}.", param_hint="'--plot-regions'")
    return chosen


def _check_options(*, engine: str, spark_master: str | None, spark_conf: dict[str, str], method: list[str],
                   merge: str | None, plot_path: str | None, plot_regions: str | None, max_size: int | None,
                   memory_limit: int) -> None:
    """The usage errors of ``count-of-counts`` across options, before the outputs are looked at."""
    if engine != "spark" and (spark_master is not None or spark_conf):
        flag = "--spark-master" if spark_master is not None else "--spark-conf"
        raise click.BadParameter("applies to --engine spark only.", param_hint=f"'{flag}'")
    bottom_up = method == [BOTTOM_UP]
    if bottom_up and merge is not None:
        raise click.BadParameter("merging applies to the top-down release only, not to bu.", param_hint="'--merge'")
    if plot_regions is not None and plot_path is None:
        raise click.BadParameter("needs --plot FILE.", param_hint="'--plot-regions'")
    dense = bottom_up or any(name != "hg" for name in method)
    if max_size is not None and dense:
        need = dense_memory(sys.maxsize, max_size)  # at least one region's rows, whatever the data
        if need > memory_limit:
            raise click.BadParameter(
                f"{max_size} needs about {format_bytes(need)} of memory (dense rows of K + 1 cells at "
                f"{BYTES_PER_CELL} bytes a cell), more than --memory-limit {format_bytes(memory_limit)}; "
                "lower --max-size or raise --memory-limit (nothing was read or written).",
                param_hint="'--max-size'",
            )


def _check_levels(method: list[str], levels: int, hierarchy: str) -> None:
    """``--method`` with one method per level names as many methods as the hierarchy has levels (a usage error)."""
    if len(method) != levels:
        raise click.BadParameter(
            f"{','.join(method)} names {len(method)} levels, but the hierarchy {hierarchy} has {levels} (level0 to "
            f"level{levels - 1}): give one method for every level, or one per level, root first.",
            param_hint="'--method'")


def _write_plot(release: CountOfCountsRelease, chosen: list[tuple[int, int]], target: Path, *, title: str) -> None:
    """Draw the released histograms of the ``chosen`` regions into ``target``: the whole picture, or none."""
    partial = target.with_name(f".{target.stem}.partial{target.suffix}")  # the suffix tells the format
    try:
        plot_region_histograms(release, chosen, partial, title=title)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    say(f"wrote the histograms of {len(chosen)} region(s) to {target}")


@cli.command("count-of-counts")
@click.option(
    "--entities",
    required=True,
    type=click.Path(dir_okay=False),
    help="Entities(entity_id, group_id), CSV or Parquet (private).",
)
@click.option("--groups", required=True, type=click.Path(dir_okay=False), help="Groups(group_id, region_id) (public).")
@click.option(
    "--hierarchy",
    required=True,
    type=click.Path(dir_okay=False),
    help="Hierarchy(region_id, level0, ..., levelL) (public).",
)
@click.option(
    "--epsilon",
    type=float,
    required=True,
    callback=epsilon_option,
    help="Total privacy budget (top-down: split evenly over the levels; bu: all on the leaves).",
)
@click.option(
    "--method",
    default="hc",
    show_default=True,
    callback=_methods,
    help="hc, hg or naive (top-down, Algorithm 1); or one per level, root first, e.g. hg,hc,hc; "
    "or bu: bottom-up, the whole budget on the leaves (hc) and every region above as the sum of its leaves.",
)
@click.option(
    "--max-size",
    type=click.IntRange(min=1),
    default=None,
    help="Public bound K on group sizes, for every method: larger groups count as size K ('K or more').",
)
@click.option(
    "--max-size-epsilon",
    type=float,
    default=1e-4,
    show_default=True,
    callback=epsilon_option,
    help="Without --max-size: budget spent to estimate K when a method needs it (added to --epsilon).",
)
@click.option(
    "--memory-limit",
    default=DEFAULT_MEMORY_LIMIT,
    show_default=True,
    callback=_memory,
    help="Largest working memory of the dense rows of K + 1 cells (hc, naive): a K that needs more is refused "
    "before any work. Bytes, or with a unit: 512MiB, 8GiB.",
)
@click.option(
    "--isotonic",
    type=click.Choice(["l1", "l2"]),
    default=None,
    help="Isotonic regression (default: l1 for hc, l2 for hg).",
)
@click.option(
    "--merge",
    type=click.Choice(["weighted", "average"]),
    default=None,
    help="How the top-down release merges a parent's and a child's estimates  [default: weighted].",
)
@click.option("--seed", type=int, default=None, help=SEED_HELP)
@click.option(
    "-o",
    "--output",
    "output_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="CSV: region, level, size, count, size_label ('K or more' on the rows of size K) ('-' is stdout).",
)
@click.option(
    "--plot",
    "plot_path",
    default=None,
    type=click.Path(dir_okay=False),
    callback=_plot_path,
    help="Also draw the released histograms of a few regions against each other (PNG).",
)
@click.option(
    "--plot-regions",
    default=None,
    help="Regions drawn by --plot, comma-separated names (default: the root and the three level-1 regions "
    "with the most groups).",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="local",
    show_default=True,
    help="local: this process; spark: PySpark (pip install 'dpstream[spark]', Java 17+), the same release "
    "bit for bit for the same key or seed.",
)
@click.option(
    "--spark-master",
    default=None,
    help=f"With --engine spark: the Spark master URL  [default: {DEFAULT_MASTER}, or spark-submit's --master].",
)
@click.option(
    "--spark-conf",
    multiple=True,
    callback=spark_conf_option,
    metavar="KEY=VALUE",
    help="With --engine spark: a Spark configuration property (repeatable), e.g. spark.driver.memory=8g.",
)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT (and the --plot file) if they exist.")
def count_of_counts(
    entities: str,
    groups: str,
    hierarchy: str,
    epsilon: float,
    method: list[str],
    max_size: int | None,
    max_size_epsilon: float,
    memory_limit: int,
    isotonic: str | None,
    merge: str | None,
    seed: int | None,
    output_path: str,
    plot_path: str | None,
    plot_regions: str | None,
    engine: str,
    spark_master: str | None,
    spark_conf: dict[str, str],
    force: bool,
) -> None:
    """Release consistent count-of-counts histograms of every region (top-down, Algorithm 1, or bottom-up).

    The noise is exact discrete Laplace, every region's from a keyed stream of a fresh secret key
    (derived from --seed for a replayable test), so --engine local and --engine spark release the
    same table for the same seed.  Exit status 2 for a usage error, 1 for a failure.
    """
    _check_options(engine=engine, spark_master=spark_master, spark_conf=spark_conf, method=method, merge=merge,
                   plot_path=plot_path, plot_regions=plot_regions, max_size=max_size, memory_limit=memory_limit)
    context = click.get_current_context()
    if max_size is not None and context.get_parameter_source("max_size_epsilon") is not ParameterSource.DEFAULT:
        raise click.UsageError("--max-size and --max-size-epsilon exclude each other: give the bound K "
                               "(--max-size), or the budget that estimates it (--max-size-epsilon).")
    bottom_up = method == [BOTTOM_UP]
    if len(method) > 1:  # one method per level: the hierarchy's depth, read before any other work
        _check_levels(method, read_hierarchy(hierarchy).tree.levels, hierarchy)
    target = prepare_output(output_path, force=force, inputs=[entities, groups, hierarchy])
    plot_target = None
    if plot_path is not None:
        if target is not None and Path(plot_path).resolve() == target.resolve():
            raise click.BadParameter("must differ from --output.", param_hint="'--plot'")
        plot_target = prepare_output(plot_path, force=force, inputs=[entities, groups, hierarchy])
    options = dict(max_size=max_size, max_size_epsilon=max_size_epsilon, isotonic=isotonic, seed=seed,
                   memory_limit=memory_limit)
    try:
        mechanism: TopDownCountOfCounts | BottomUpCountOfCounts = (
            BottomUpCountOfCounts(epsilon=epsilon, method="hc", **options)  # type: ignore[arg-type]
            if bottom_up
            else TopDownCountOfCounts(epsilon=epsilon, method=method, merge=merge or "weighted", **options)  # type: ignore[arg-type]
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    warn_if_seeded(seed)
    if engine == "spark":
        if plot_target is not None and plot_regions is not None:  # bad names fail before any work
            _plotted_regions(read_hierarchy(hierarchy).tree, None, plot_regions)
        release = _release_on_spark(mechanism, entities, groups, hierarchy, spark_master, spark_conf)
        tree = release.tree
        level_groups = release.levels[1].groups() if tree.levels > 1 else None
        chosen = _plotted_regions(tree, level_groups, plot_regions) if plot_target is not None else []
    else:
        data = read_tables(entities, groups, hierarchy)
        tree = data.tree
        say(f"read {data.n_groups:,} groups in {tree.size(tree.levels - 1):,} leaf regions, {tree.levels} levels.")
        level_groups = data.groups(1) if tree.levels > 1 else None
        chosen = _plotted_regions(tree, level_groups, plot_regions) if plot_target is not None else []
        with progress_bar(desc="regions", unit="region", leave=False) as progress:
            release = mechanism.release(data, progress=progress)
    if max_size is None and release.max_size is not None:
        say(f"estimated K = {release.max_size:,} (the noisy largest group size plus a margin, from "
            f"--max-size-epsilon {max_size_epsilon:g}); groups of K or more are released as size K.")
    table = _release_table(release)
    buffer = pa.BufferOutputStream()
    pa_csv.write_csv(table, buffer)
    with output_file(target) as out:
        out.write(buffer.getvalue().to_pybytes().decode("utf-8"))
    label = "bottom-up (hc on the leaves)" if bottom_up else f"top-down ({','.join(method)})"
    say(f"privacy: {mechanism.privacy(tree.levels)}")
    say(f"wrote {table.num_rows:,} non-zero counts to {'stdout' if target is None else target}")
    if plot_target is not None:
        _write_plot(release, chosen, plot_target, title=f"{label}, epsilon = {epsilon:g}")


def _release_on_spark(
    mechanism: TopDownCountOfCounts | BottomUpCountOfCounts, entities: str, groups: str, hierarchy: str,
    master: str | None, conf: dict[str, str],
) -> CountOfCountsRelease:
    """The release computed by Spark; a missing PySpark or Java is one line saying how to install it."""
    from dpstream.spark import release_count_of_counts

    with spark_session(master, conf) as spark:
        release = release_count_of_counts(spark, mechanism, entities, groups, hierarchy)
    tree = release.tree
    say(
        f"Spark read {int(release.levels[0].count.sum()):,} groups in {tree.size(tree.levels - 1):,} leaf regions, "
        f"{tree.levels} levels."
    )
    return release


#: How the studies draw their noise: ``float`` is numpy's float geometric sampler (fast, not exact,
#: the numbers are never published), ``exact`` the release's exact sampler on seeded bits.
STUDY_NOISE: dict[str, Any] = {
    "float": lambda seed: {"noise": FloatNoise(rng=seed)},
    "exact": lambda seed: {"seed": seed},
}


def _hc(eps: float, k: int, noise: Any, **extra: Any) -> Any:
    return lambda seed: TopDownCountOfCounts(epsilon=eps, method="hc", max_size=k, **noise(seed), **extra)


#: Named strategies of the evaluation: factories (epsilon, K, noise) -> (seed -> mechanism), where
#: ``noise`` is a value of :data:`STUDY_NOISE`.
STRATEGIES: dict[str, Any] = {
    "hc": lambda eps, k, noise: _hc(eps, k, noise),
    "hc-average": lambda eps, k, noise: _hc(eps, k, noise, merge="average"),
    "hc-l2": lambda eps, k, noise: _hc(eps, k, noise, isotonic="l2"),
    "hg": lambda eps, k, noise: lambda seed: TopDownCountOfCounts(epsilon=eps, method="hg", **noise(seed)),
    "hg-average": lambda eps, k, noise: (
        lambda seed: TopDownCountOfCounts(epsilon=eps, method="hg", merge="average", **noise(seed))
    ),
    "bu": lambda eps, k, noise: (
        lambda seed: BottomUpCountOfCounts(epsilon=eps, method="hc", max_size=k, **noise(seed))
    ),
    "naive": lambda eps, k, noise: (
        lambda seed: TopDownCountOfCounts(epsilon=eps, method="naive", max_size=k, **noise(seed))
    ),
}


def _strategies(ctx: click.Context, param: click.Parameter, text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in STRATEGIES]
    if not names or bad:
        problem = f"unknown strategy {quote(bad[0])}" if bad else f"no strategy in {quote(text)}"
        raise click.BadParameter(f"{problem}; choose from {', '.join(STRATEGIES)}.")
    return names


def _load(
    dataset: str, n_groups: int, states: int, counties: int, seed: int, tables: tuple[str | None, ...]
) -> CountOfCountsData:
    if any(tables):
        return read_tables(*tables)  # type: ignore[arg-type]
    if dataset == "housing":
        return housing_data(n_groups, n_states=states, n_counties=counties, seed=seed)
    return taxi_data(seed=seed)


@cli.command("evaluate-count-of-counts")
@click.option(
    "--dataset",
    type=click.Choice(["housing", "taxi"]),
    default="housing",
    show_default=True,
    help="A generated dataset (ignored when the three tables are given).",
)
@click.option("--entities", default=None, type=click.Path(dir_okay=False))
@click.option("--groups", default=None, type=click.Path(dir_okay=False))
@click.option("--hierarchy", default=None, type=click.Path(dir_okay=False))
@click.option(
    "--n-groups", type=click.IntRange(min=1), default=1_000_000, show_default=True, help="Scale of the housing data."
)
@click.option("--states", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--counties", type=click.IntRange(min=1), default=3000, show_default=True, help="At least --states.")
@click.option(
    "--epsilon",
    type=float,
    default=1.0,
    show_default=True,
    callback=epsilon_option,
    help="Total budget of every strategy.",
)
@click.option("--max-size", type=click.IntRange(min=1), default=100_000, show_default=True, help="Public bound K.")
@click.option(
    "--strategies",
    default="hc,hc-average,hg,bu,naive",
    show_default=True,
    callback=_strategies,
    help=f"Comma-separated, from: {', '.join(STRATEGIES)}.",
)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--noise",
    type=click.Choice(sorted(STUDY_NOISE)),
    default="float",
    show_default=True,
    help="float: numpy's float geometric sampler, about twice as fast, not exact (a study publishes only errors); "
    "exact: the release's exact discrete Laplace sampler on seeded bits (the same law).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the experiment.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for results.")
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
def evaluate_count_of_counts(
    dataset: str,
    entities: str | None,
    groups: str | None,
    hierarchy: str | None,
    n_groups: int,
    states: int,
    counties: int,
    epsilon: float,
    max_size: int,
    strategies: list[str],
    runs: int,
    noise: str,
    seed: int,
    out_dir: str,
    force: bool,
) -> None:
    """Per-level earth-mover's errors of count-of-counts strategies (Section 6.2): CSV, JSON, PNG."""
    # The options were checked by their types and callbacks; what remains are checks across
    # options, all before the outputs are looked at and before any work.
    tables = (entities, groups, hierarchy)
    if any(tables) and not all(tables):
        raise click.UsageError("--entities, --groups and --hierarchy go together.")
    if not any(tables) and dataset == "housing" and counties < states:
        raise click.BadParameter(f"must be >= --states ({states}), got {counties}.", param_hint="'--counties'")
    stem = "count-of-counts-" + ("tables" if entities else dataset)
    paths = prepare_output(
        out_dir,
        force=force,
        inputs=tables,
        files={
            "runs": f"{stem}-runs.csv",
            "summary": f"{stem}.csv",
            "json": f"{stem}.json",
            "plot": f"{stem}-levels.png",
        },
    )
    data = _load(dataset, n_groups, states, counties, seed, tables)
    # the number of groups and the regions are public; the largest group size of real tables is not
    largest = "" if entities else f", largest {int(data.size.max(initial=0)):,}"
    say(
        f"{data.n_groups:,} groups{largest}; "
        f"regions per level {[data.tree.size(level) for level in range(data.tree.levels)]}"
    )
    factories = {name: STRATEGIES[name](epsilon, max_size, STUDY_NOISE[noise]) for name in strategies}
    with progress_bar(desc="evaluate-count-of-counts", unit="region") as progress:
        rows = run_comparison(data, factories, runs=runs, seed=seed, progress=progress)
    summary = summarize(rows)
    summary += [
        {"strategy": "omniscient", "level": level, "runs": 0, "emd_mean": error, "emd_sem": 0.0}
        for level, error in enumerate(omniscient_error(data, epsilon))
    ]
    config = {
        "dataset": "tables" if entities else dataset,
        "n_groups": data.n_groups,
        "epsilon": epsilon,
        "max_size": max_size,
        "runs": runs,
        "noise": noise,
        "seed": seed,
        "regions_per_level": [data.tree.size(level) for level in range(data.tree.levels)],
    }
    with output_directory(paths) as staged:  # all four files, or none
        write_csv(staged["runs"], rows)
        write_csv(staged["summary"], summary)
        staged["json"].write_text(json.dumps({"config": config, "summary": summary}, indent=2))
        title = f"{config['dataset']}, epsilon={epsilon:g} total, {runs} runs, {noise} noise"
        plot_level_errors(summary, staged["plot"], title=title)
    click.echo(_table(summary))
    say("wrote " + ", ".join(str(path) for path in paths.values()))


def _table(summary: list[dict[str, Any]]) -> str:
    levels = sorted({row["level"] for row in summary})
    cell = {(row["strategy"], row["level"]): row for row in summary}
    lines = [
        "mean EMD per region (+- standard error)",
        "strategy".ljust(14) + "".join(f"level {lv:<18}" for lv in levels),
    ]
    for strategy in dict.fromkeys(row["strategy"] for row in summary):
        parts = [
            f"{cell[(strategy, lv)]['emd_mean']:<12.6g}+-{cell[(strategy, lv)]['emd_sem']:<10.3g}" for lv in levels
        ]
        lines.append(strategy.ljust(14) + "".join(parts))
    return "\n".join(lines)


@cli.command("generate-housing")
@click.option(
    "--n-groups",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="About how many households (groups); about 2.5 persons (entities) each. The national case: 40000000.",
)
@click.option("--states", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--counties", type=click.IntRange(min=1), default=3000, show_default=True, help="At least --states.")
@click.option("--max-outlier", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Largest size of the 50 outlier groups (group quarters).")
@click.option("--format", "form", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the synthetic data.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for the tables.")
@click.option("--force", is_flag=True, help="Overwrite tables already in --out.")
def generate_housing(
    n_groups: int, states: int, counties: int, max_outlier: int, form: str, seed: int, out_dir: str, force: bool
) -> None:
    """Write a synthetic national housing dataset: entities, groups and hierarchy (nation / state / county).

    Households per state and household-size shares follow the library's
    dpstream.count_of_counts.housing_data (the shape of the count-of-counts paper's housing data).  The tables
    are the inputs of count-of-counts.
    """
    if counties < states:
        raise click.BadParameter(f"must be >= --states ({states}), got {counties}.", param_hint="'--counties'")
    suffix = "parquet" if form == "parquet" else "csv"
    paths = prepare_output(
        out_dir, force=force, files={name: f"{name}.{suffix}" for name in ("entities", "groups", "hierarchy")}
    )
    data = housing_data(n_groups, n_states=states, n_counties=counties, max_outlier=max_outlier, seed=seed)
    with output_directory(paths) as staged:
        write_tables(data, staged["entities"].parent, parquet=form == "parquet")
    say(
        f"wrote {int(data.size.sum()):,} entities in {data.n_groups:,} groups, "
        f"{data.tree.size(data.tree.levels - 1):,} counties in {data.tree.size(1):,} states: "
        + ", ".join(str(path) for path in paths.values())
    )
