"""``dpstream evaluate``: a study of the ToPS paper's Section 5 on one stream, written to --out."""

from __future__ import annotations

import json
from typing import Any

import click

from dpstream._checks import check_percentile
from dpstream.cli._common import cli, floats, output_directory, prepare_output, quote, say, usage_errors, write_csv
from dpstream.datasets import load_dataset
from dpstream.evaluation import STUDIES, ExperimentConfig, run_study, summarize


@cli.command()
@click.option("--dataset", default="pos", show_default=True, help="Built-in name (pos) or a stream file.")
@click.option("--column", default=None, help="Column to read from a dataset file with several.")
@click.option("--upper-bound", type=float, default=None,
              help="Public bound B (built-in datasets know theirs; files default to their maximum).")
@click.option("--study", type=click.Choice(list(STUDIES)), default="end-to-end", show_default=True)
@click.option("--methods", default=None, help="Comma-separated methods of the study (default: all).")
@click.option("--epsilons", default="0.01,0.02,0.03,0.04,0.05,0.06,0.07,0.08,0.09,0.1", show_default=True)
@click.option("--rounds", type=int, default=10, show_default=True)
@click.option("--queries", type=int, default=200, show_default=True)
@click.option("--hold", type=int, default=65536, show_default=True)
@click.option("--max-range", type=int, default=2**20, show_default=True)
@click.option("--percentile", type=float, default=95.0, show_default=True,
              help="Oracle threshold of the hierarchy study (non-private).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--stream-epsilon", type=float, default=1.0, show_default=True,
              help="topl study: budget of the stream reports (--epsilons then sets the threshold reports').")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for results.")
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
def evaluate(dataset: str, column: str | None, upper_bound: float | None, study: str, methods: str | None,
             epsilons: str, rounds: int, queries: int, hold: int, max_range: int, percentile: float,
             seed: int, out_dir: str, force: bool, stream_epsilon: float) -> None:
    """Run a study of the paper's Section 5 and write CSV, JSON and a PNG plot to --out."""
    if min(hold, max_range, rounds, queries) < 1:
        raise click.UsageError(
            f"--hold, --max-range, --rounds and --queries must be >= 1, got {hold}, {max_range}, {rounds}, {queries}."
        )
    with usage_errors():
        check_percentile(percentile)
    method_list = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [name for name in method_list or () if name not in STUDIES[study].methods]
    if unknown:
        raise click.BadParameter(f"study {study!r} has no method {quote(unknown[0])}; it has "
                                 f"{', '.join(STUDIES[study].methods)}.", param_hint="'--methods'")
    data = load_dataset(dataset, upper_bound=upper_bound, column=column)
    config = ExperimentConfig(hold=hold, max_range=max_range, rounds=rounds, queries=queries, percentile=percentile,
                              stream_epsilon=stream_epsilon)
    stem = f"{study}-{data.name}"
    paths = prepare_output(out_dir, force=force, inputs=[dataset], files={
        "rounds": f"{stem}-rounds.csv", "summary": f"{stem}.csv", "json": f"{stem}.json", "plot": f"{stem}-mse.png"})
    records = run_study(study, data.values, data.upper_bound, epsilons=floats(epsilons), methods=method_list,
                        config=config, seed=seed, dataset=data.name, log=say)
    rows = summarize(records)
    from dpstream.evaluation.streams import plot_metric

    with output_directory(paths) as staged:  # all four files, or none
        write_csv(staged["rounds"], records)
        write_csv(staged["summary"], rows)
        staged["json"].write_text(json.dumps({"study": study, "dataset": data.name, "upper_bound": data.upper_bound,
                                              "seed": seed, "config": config.__dict__, "summary": rows}, indent=2))
        plot_metric(rows, staged["plot"], title=f"{study} on {data.name} ({rounds} rounds, {queries} queries)")
    click.echo(_table(rows))
    say("wrote " + ", ".join(str(path) for path in paths.values()))


def _table(rows: list[dict[str, Any]]) -> str:
    """Mean MSE: one line per method, one column per epsilon."""
    epsilons = sorted({row["epsilon"] for row in rows})
    methods = list(dict.fromkeys(row["method"] for row in rows))
    cell = {(row["method"], row["epsilon"]): row["mse_mean"] for row in rows}
    width = max(len(method) for method in ["method", *methods]) + 2
    lines = ["MSE (mean over rounds)", "method".ljust(width) + "".join(f"eps={e:<10g}" for e in epsilons)]
    for method in methods:
        lines.append(method.ljust(width) + "".join(f"{cell[(method, e)]:<14.3g}" for e in epsilons))
    return "\n".join(lines)
