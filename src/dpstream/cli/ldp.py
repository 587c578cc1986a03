"""Local-DP commands: ``topl-demo`` (ToPL on the built-in POS stream, Figure 9 style).

``dpstream release --method topl`` and ``dpstream evaluate --study topl`` live with the other
stream commands (:mod:`dpstream.cli.stream`).
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dpstream.cli._common import cli, refuse_overwrite, say
from dpstream.datasets import load_dataset
from dpstream.evaluation.metrics import METRICS, error_metrics, prefix_range_sums, random_queries
from dpstream.release import ToPL


@cli.command("topl-demo")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Budget of each stream report.")
@click.option("--threshold-epsilon", type=float, default=None, help="Budget of each threshold report (default: --epsilon).")
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
    topl = ToPL(epsilon, data.upper_bound, threshold_epsilon=threshold_epsilon, seed=seed)
    # every plotted point is the mean of at least one released value
    released_count = max(data.values.size - topl.hold, 0)
    if not 1 <= intervals <= released_count:
        raise click.BadParameter(f"must be between 1 and the number of released values, {released_count:,}; "
                                 f"got {intervals:,}.", param_hint="'--intervals'")
    plot_path = Path(out_dir) / f"topl-pos-eps{epsilon:g}-moving-average.png"
    refuse_overwrite([plot_path], force)
    say(f"dataset: {data.description}; B = {data.upper_bound:g}")
    released = topl.release(data.values)
    truth = data.values[topl.hold:]
    say(f"threshold theta = {topl.threshold:g} (Square Wave + Eq. 8, {topl.collector.variant})")
    say(f"privacy: {topl.privacy()}")
    rng = np.random.default_rng(seed)
    queries = random_queries(rng, truth.size, 200)
    metrics = error_metrics(prefix_range_sums(released, queries), prefix_range_sums(truth, queries), queries)
    click.echo(f"released {released.size:,} values (positions {topl.hold:,} onwards)")
    click.echo("200 random range queries (mean length {:,.0f}): ".format(float(np.mean(queries.lengths)))
               + ", ".join(f"{name.upper()} {metrics[name]:.4g}" for name in METRICS))
    click.echo(f"true total {truth.sum():,.0f}, released total {released.sum():,.0f}")
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    from dpstream.evaluation.plots import plot_moving_average

    path = plot_moving_average(truth, released, plot_path, intervals=intervals,
                               title=f"ToPL on POS, epsilon = {epsilon:g} (theta = {topl.threshold:g})")
    click.echo(f"plot: {path}")
