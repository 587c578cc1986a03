"""``dpstream demo`` and ``dpstream topl-demo``: the built-in POS stream released with ToPS or
ToPL (seeded, to show utility) and plotted against the truth."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dpstream.cli._app import announce, cli, say, usage_errors
from dpstream.cli._outputs import output_directory, prepare_output
from dpstream.datasets import load_dataset
from dpstream.evaluation import METRICS
from dpstream.evaluation.metrics import error_metrics, prefix_range_sums, random_queries
from dpstream.release import REGISTRY, ToPL, ToPS
from dpstream.rng import make_rng


@cli.command()
@click.option("--epsilon", type=float, default=0.05, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite the plot if it exists.")
def demo(epsilon: float, seed: int, out_dir: str, force: bool) -> None:
    """Release the built-in POS stream with ToPS and plot it against the truth.

    The demo is seeded so that it can be replayed: it shows utility, it is not a private release.
    """
    paths = prepare_output(out_dir, force=force, files={"plot": "pos-moving-average.png"})
    data = load_dataset("pos")
    say(f"dataset: {data.description}; B = {data.upper_bound:g}")
    with usage_errors():
        tops = ToPS(epsilon=epsilon, upper_bound=data.upper_bound, seed=seed)
    released = tops.release(data.values)
    announce(tops, REGISTRY["tops"].describe)
    report_demo(data.values[tops.hold:], released, hold=tops.hold, seed=seed, paths=paths,
                title=f"ToPS on POS: ε = {epsilon:g}, threshold θ = {tops.threshold:.4g}")


@cli.command("topl-demo")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Budget of each stream report.")
@click.option("--threshold-epsilon", type=float, default=None,
              help="Budget of each threshold report (default: --epsilon).")
@click.option("--intervals", type=int, default=120, show_default=True,
              help="Points of the moving-average plot (at most the number of released values).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite the plot if it exists.")
def topl_demo(epsilon: float, threshold_epsilon: float | None, intervals: int, seed: int, out_dir: str,
              force: bool) -> None:
    """Release the built-in POS stream with ToPL (local DP) and plot it against the truth.

    Simulates one client per value and runs the collector.  Seeded so that it can be replayed:
    it shows utility, it is not a private release.
    """
    data = load_dataset("pos")
    with usage_errors():
        topl = ToPL(epsilon=epsilon, upper_bound=data.upper_bound, threshold_epsilon=threshold_epsilon, seed=seed)
    # every plotted point is the mean of at least one released value
    released_count = max(data.values.size - topl.hold, 0)
    if not 1 <= intervals <= released_count:
        raise click.BadParameter(f"must be between 1 and the number of released values, {released_count:,}; "
                                 f"got {intervals:,}.", param_hint="'--intervals'")
    plot_name = f"topl-pos-eps{epsilon:g}-moving-average.png"
    paths = prepare_output(out_dir, force=force, files={"plot": plot_name})
    say(f"dataset: {data.description}; B = {data.upper_bound:g}")
    released = topl.release(data.values)
    announce(topl, REGISTRY["topl"].describe)
    report_demo(data.values[topl.hold:], released, hold=topl.hold, seed=seed, paths=paths,
                intervals=intervals,
                title=f"ToPL on POS: ε = {epsilon:g} per stream report, threshold θ = {topl.threshold:.4g}")


def report_demo(truth: np.ndarray, released: np.ndarray, *, hold: int, seed: int, paths: dict[str, Path], title: str,
                intervals: int = 120) -> None:
    """What every demo prints (errors of 200 random range queries, totals) and its moving-average plot,
    ``paths["plot"]`` (from :func:`~dpstream.cli._outputs.prepare_output`)."""
    queries = random_queries(make_rng(seed), truth.size, 200)
    metrics = error_metrics(prefix_range_sums(released, queries), prefix_range_sums(truth, queries), queries)
    click.echo(f"released {released.size:,} values (positions {hold:,} onwards)")
    click.echo(f"200 random range queries (mean length {float(np.mean(queries.lengths)):,.0f}): "
               + ", ".join(f"{name.upper()} {metrics[name]:.4g}" for name in METRICS))
    click.echo(f"true total {truth.sum():,.0f}, released total {released.sum():,.0f}")
    from dpstream.evaluation.streams import plot_moving_average

    with output_directory(paths) as staged:
        plot_moving_average(truth, released, staged["plot"], intervals=intervals, title=title)
    click.echo(f"plot: {paths['plot']}")
