"""``dpstream evaluate``: a study of the ToPS paper's Section 5 on one stream, written to --out."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import click

from dpstream._checks import MAX_MAGNITUDE, check_percentile
from dpstream.cli._app import cli, progress_bar, quote, usage_errors
from dpstream.cli._options import floats
from dpstream.cli._outputs import output_directory, prepare_output, write_csv
from dpstream.cli._text import say_above_bar, text_table
from dpstream.datasets import load_dataset
from dpstream.evaluation import STUDIES, ExperimentConfig, run_study, summarize
from dpstream.evaluation.plots import counted
from dpstream.release.tops import THRESHOLD_METHODS

#: The largest worst-case sum (bound B times length) of a dataset: the studies square their errors, which
#: must stay within the magnitude a release accepts.
_LARGEST_SUM = math.sqrt(MAX_MAGNITUDE)


@cli.command()
@click.option("--dataset", default="pos", show_default=True,
              help="Built-in name (pos, smart-meter, taxi-fares, bursty-counts) or a stream file.")
@click.option("--column", default=None, help="Column to read from a dataset file with several.")
@click.option("--upper-bound", type=float, default=None,
              help="Public bound B (built-in datasets know theirs; files default to their maximum).")
@click.option("--study", type=click.Choice(list(STUDIES)), default="end-to-end", show_default=True)
@click.option("--methods", default=None, help="Comma-separated methods of the study (default: all).")
@click.option("--epsilons", default="0.01,0.02,0.03,0.04,0.05,0.06,0.07,0.08,0.09,0.1", show_default=True,
              help="Comma-separated budgets; what each is depends on the study (the plot's x axis says).")
@click.option("--rounds", type=int, default=10, show_default=True,
              help="Rounds, each with fresh noise and fresh queries.")
@click.option("--queries", type=int, default=200, show_default=True, help="Queries per round.")
@click.option("--query-length", type=int, default=None,
              help="Length L of every query (default: random ranges, both ends uniform over the released values).")
@click.option("--period", type=int, default=None,
              help="end-to-end and baselines studies: ToPS measures one leaf per period of this many values "
                   "(as release --period).")
@click.option("--threshold-method", type=click.Choice(THRESHOLD_METHODS), default="nm-e", show_default=True,
              help="How ToPS chooses its threshold in the end-to-end and baselines studies: nm-e, the paper's "
                   "(what Section 5 measures), or model, the library's default (as release runs it).")
@click.option("--hold", type=int, default=65536, show_default=True,
              help="Held-out values m that choose the threshold.")
@click.option("--max-range", type=int, default=2**20, show_default=True,
              help="Largest query range r (the stream studied has m + r values).")
@click.option("--percentile", type=float, default=95.0, show_default=True,
              help="Oracle threshold of the hierarchy study (non-private).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the experiment.")
@click.option("--stream-epsilon", type=float, default=1.0, show_default=True,
              help="topl study: budget of the stream reports (--epsilons then sets the threshold reports').")
@click.option("--clip", is_flag=True, help="Clip values outside [0, B] into it instead of failing.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for results.")
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
def evaluate(dataset: str, column: str | None, upper_bound: float | None, study: str, methods: str | None,
             epsilons: str, rounds: int, queries: int, query_length: int | None, period: int | None,
             threshold_method: str, hold: int, max_range: int, percentile: float, seed: int, clip: bool, out_dir: str,
             force: bool, stream_epsilon: float) -> None:
    """Run a study of the paper's Section 5 and write CSV, JSON and a PNG plot to --out.

    Every round draws fresh noise and --queries fresh range queries (random ranges, or all of
    length --query-length); the summary gives the mean, standard deviation and 10th/90th
    percentiles over rounds of every metric, and the plot the mean with the 10-90% band.  The
    end-to-end and baselines studies run ToPS with the paper's NM-E threshold unless
    --threshold-method model asks for the library's default; the table, the plot and the JSON say which.
    """
    if min(hold, max_range, rounds, queries) < 1:
        raise click.UsageError(
            f"--hold, --max-range, --rounds and --queries must be >= 1, got {hold}, {max_range}, {rounds}, {queries}."
        )
    if query_length is not None and query_length < 1:
        raise click.BadParameter(f"must be >= 1, got {query_length}.", param_hint="'--query-length'")
    if period is not None and period < 1:
        raise click.BadParameter(f"must be >= 1, got {period}.", param_hint="'--period'")
    if period is not None and "ToPS" not in STUDIES[study].methods:
        raise click.UsageError(f"--period applies to the ToPS of the end-to-end and baselines studies, got --study "
                               f"{study}.")
    tops = "ToPS" in STUDIES[study].methods
    if threshold_method != "nm-e" and not tops:
        raise click.UsageError(f"--threshold-method applies to the ToPS of the end-to-end and baselines studies, got "
                               f"--study {study}.")
    with usage_errors():
        check_percentile(percentile)
    method_list = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [name for name in method_list or () if name not in STUDIES[study].methods]
    if unknown:
        raise click.BadParameter(f"study {study!r} has no method {quote(unknown[0])}; it has "
                                 f"{', '.join(STUDIES[study].methods)}.", param_hint="'--methods'")
    data = load_dataset(dataset, upper_bound=upper_bound, column=column, clip=clip)
    largest = data.upper_bound * data.values.size
    if not largest <= _LARGEST_SUM:  # values near the largest float: one line, not numpy's overflow warnings
        raise click.ClickException(
            f"{data.name}: {data.values.size:,} values up to B = {data.upper_bound:g} may sum to {largest:g}, beyond "
            f"{_LARGEST_SUM:g}: the squared errors of the studies would overflow float64; scale the values down, "
            "or give a smaller --upper-bound with --clip.")
    config = ExperimentConfig(hold=hold, max_range=max_range, rounds=rounds, queries=queries, percentile=percentile,
                              stream_epsilon=stream_epsilon, query_length=query_length, period=period,
                              threshold_method=threshold_method)
    stem = f"{study}-{data.name}"
    paths = prepare_output(out_dir, force=force, inputs=[dataset], files={
        "rounds": f"{stem}-rounds.csv", "summary": f"{stem}.csv", "json": f"{stem}.json", "plot": f"{stem}-mse.png"})
    with progress_bar(desc=f"{study} on {data.name}", unit="run") as progress:
        records = run_study(study, data.values, data.upper_bound, epsilons=floats(epsilons), methods=method_list,
                            config=config, seed=seed, dataset=data.name, progress=progress, log=say_above_bar)
    rows = summarize(records)
    from dpstream.evaluation.streams import plot_metric

    lengths = "random ranges" if query_length is None else f"length {query_length:,}"
    asked = "1 query" if queries == 1 else f"{queries:,} queries"
    held = "" if hold == ExperimentConfig().hold else f", m = {hold:,}"  # the paper's m goes without saying
    chosen = f", {_THRESHOLD_NAMES[threshold_method]}" if tops else ""
    with output_directory(paths) as staged:  # all four files, or none
        write_csv(staged["rounds"], records)
        write_csv(staged["summary"], rows)
        staged["json"].write_text(json.dumps({"study": study, "dataset": data.name, "upper_bound": data.upper_bound,
                                              "seed": seed, "clip": clip, "config": dataclasses.asdict(config),
                                              "summary": rows}, indent=2))
        plot_metric(rows, staged["plot"], config=config,
                    title=f"{study} on {data.name}{held}{chosen}: {counted(rounds, 'round')} of {asked} ({lengths})")
    click.echo(_table(rows, title="MSE (mean over rounds" + (f"; {_THRESHOLD_NAMES[threshold_method]})" if tops
                                                            else ")")))
    say_above_bar("wrote " + ", ".join(str(path) for path in paths.values()))


#: How a study's output names ToPS's threshold method.
_THRESHOLD_NAMES = {"nm-e": "ToPS's θ: NM-E, the paper's", "model": "ToPS's θ: the model, the library's default"}


def _table(rows: list[dict[str, Any]], *, title: str) -> str:
    """Mean MSE: one line per method, one column per epsilon."""
    epsilons = sorted({row["epsilon"] for row in rows})
    methods = list(dict.fromkeys(row["method"] for row in rows))
    cell = {(row["method"], row["epsilon"]): row["mse_mean"] for row in rows}
    return text_table(["method", *(f"eps={e:g}" for e in epsilons)],
                      [[method, *(f"{cell[(method, e)]:.3g}" for e in epsilons)] for method in methods],
                      title=title)
