"""``dpstream count-of-counts`` and ``dpstream evaluate-count-of-counts`` (Kuo et al.)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.csv as pa_csv

from dpstream.cli._common import (
    SEED_HELP,
    cli,
    epsilon_option,
    output_file,
    prepare_output,
    progress_bar,
    say,
    warn_if_seeded,
    write_csv,
)
from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsData,
    TopDownCountOfCounts,
    housing_data,
    read_tables,
    taxi_data,
)
from dpstream.count_of_counts.estimators import METHODS
from dpstream.evaluation.count_of_counts import omniscient_error, plot_level_errors, run_comparison, summarize

__all__ = ["STRATEGIES"]


def _methods(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    bad = [name for name in names if name not in METHODS]
    if not names or bad:
        raise click.BadParameter(
            f"expected one of {', '.join(METHODS)} (or one per level, comma-separated), got {text!r}."
        )
    return names


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
@click.option("--epsilon", type=float, required=True, help="Total privacy budget (split evenly over the levels).")
@click.option(
    "--method", default="hc", show_default=True, help="hc, hg or naive; or one per level, root first, e.g. hg,hc,hc."
)
@click.option("--max-size", type=int, default=None, help="Public bound K on group sizes (hc and naive).")
@click.option(
    "--max-size-epsilon",
    type=float,
    default=1e-4,
    show_default=True,
    help="Without --max-size: budget spent to estimate K (added to --epsilon).",
)
@click.option(
    "--isotonic",
    type=click.Choice(["l1", "l2"]),
    default=None,
    help="Isotonic regression (default: l1 for hc, l2 for hg).",
)
@click.option("--merge", type=click.Choice(["weighted", "average"]), default="weighted", show_default=True)
@click.option("--seed", type=int, default=None, help=SEED_HELP)
@click.option(
    "-o",
    "--output",
    "output_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="CSV: region, level, size, count ('-' is stdout).",
)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def count_of_counts(
    entities: str,
    groups: str,
    hierarchy: str,
    epsilon: float,
    method: str,
    max_size: int | None,
    max_size_epsilon: float,
    isotonic: str | None,
    merge: str,
    seed: int | None,
    output_path: str,
    force: bool,
) -> None:
    """Release consistent count-of-counts histograms of every region (top-down, Algorithm 1)."""
    target = prepare_output(output_path, force=force, inputs=[entities, groups, hierarchy])
    mechanism = TopDownCountOfCounts(
        epsilon=epsilon,
        methods=_methods(method),
        max_size=max_size,
        max_size_epsilon=max_size_epsilon,
        isotonic=isotonic,
        merge=merge,
        seed=seed,
    )
    warn_if_seeded(seed)
    data = read_tables(entities, groups, hierarchy)
    say(
        f"read {data.n_groups:,} groups in {data.tree.size(data.tree.levels - 1):,} leaf regions, "
        f"{data.tree.levels} levels."
    )
    with progress_bar(desc="regions", unit="region", leave=False) as progress:
        release = mechanism.release(data, progress=progress)
    region, level, size, count = zip(*release.rows()) if data.n_groups else ((), (), (), ())
    table = pa.table(
        {
            "region": pa.array(region, pa.string()),
            "level": pa.array(level, pa.int64()),
            "size": pa.array(size, pa.int64()),
            "count": pa.array(count, pa.int64()),
        }
    )
    buffer = pa.BufferOutputStream()
    pa_csv.write_csv(table, buffer)
    with output_file(target) as out:
        out.write(buffer.getvalue().to_pybytes().decode("utf-8"))
    say(f"privacy: {mechanism.privacy(data.tree.levels)}")
    say(f"wrote {len(region):,} non-zero counts to {'stdout' if target is None else target}")


def _hc(eps: float, k: int, **extra: Any) -> Any:
    return lambda seed: TopDownCountOfCounts(epsilon=eps, methods="hc", max_size=k, seed=seed, **extra)


#: Named strategies of the evaluation: factories (epsilon, K) -> (seed -> mechanism).
STRATEGIES: dict[str, Any] = {
    "hc": lambda eps, k: _hc(eps, k),
    "hc-average": lambda eps, k: _hc(eps, k, merge="average"),
    "hc-l2": lambda eps, k: _hc(eps, k, isotonic="l2"),
    "hg": lambda eps, k: lambda seed: TopDownCountOfCounts(epsilon=eps, methods="hg", seed=seed),
    "hg-average": lambda eps, k: (
        lambda seed: TopDownCountOfCounts(epsilon=eps, methods="hg", merge="average", seed=seed)
    ),
    "bu": lambda eps, k: lambda seed: BottomUpCountOfCounts(epsilon=eps, method="hc", max_size=k, seed=seed),
    "naive": lambda eps, k: lambda seed: TopDownCountOfCounts(epsilon=eps, methods="naive", max_size=k, seed=seed),
}


def _strategies(ctx: click.Context, param: click.Parameter, text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in STRATEGIES]
    if not names or bad:
        problem = f"unknown strategies {bad}" if bad else f"no strategy in {text!r}"
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
    factories = {name: STRATEGIES[name](epsilon, max_size) for name in strategies}
    with progress_bar(desc="evaluate-count-of-counts", unit="region") as progress:
        rows = run_comparison(data, factories, runs=runs, seed=seed, progress=progress)
    summary = summarize(rows)
    summary += [
        {"strategy": "omniscient", "level": level, "runs": 0, "emd_mean": error, "emd_sem": 0.0}
        for level, error in enumerate(omniscient_error(data, epsilon))
    ]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    write_csv(paths["runs"], rows)
    write_csv(paths["summary"], summary)
    config = {
        "dataset": "tables" if entities else dataset,
        "n_groups": data.n_groups,
        "epsilon": epsilon,
        "max_size": max_size,
        "runs": runs,
        "seed": seed,
        "regions_per_level": [data.tree.size(level) for level in range(data.tree.levels)],
    }
    paths["json"].write_text(json.dumps({"config": config, "summary": summary}, indent=2))
    plot_level_errors(summary, paths["plot"], title=f"{config['dataset']}, epsilon={epsilon:g} total, {runs} runs")
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
