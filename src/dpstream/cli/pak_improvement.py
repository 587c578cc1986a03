"""``dpstream pak-improvement``: PAK's improvement over the binary tree (its Section VII-A) on a dataset."""

from __future__ import annotations

import json

import click

from dpstream.cli._app import cli, progress_bar, say
from dpstream.cli._outputs import output_directory, prepare_output, write_csv
from dpstream.cli._text import say_above_bar, text_table
from dpstream.datasets import load_dataset


@cli.command("pak-improvement")
@click.option("--dataset", default="pos", show_default=True, help="Built-in name (pos) or a stream file.")
@click.option("--column", default=None, help="Column to read from a dataset file with several.")
@click.option("--upper-bound", type=float, default=None, help="Public bound B (built-in datasets know theirs).")
@click.option("--epsilon", type=float, default=1.0, show_default=True)
@click.option("--hold", type=int, default=50_000, show_default=True, help="PAK's time lag m.")
@click.option("--delta", type=float, default=2.0**-20, show_default=True)
@click.option("--beta", type=float, default=0.02, show_default=True, help="Total failure probability of Eq. 16.")
@click.option("--rounds", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--clip", is_flag=True, help="Clip values outside [0, B] into it instead of failing.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for results.")
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
def pak_improvement(dataset: str, column: str | None, upper_bound: float | None, epsilon: float, hold: int,
                    delta: float, beta: float, rounds: int, seed: int, clip: bool, out_dir: str, force: bool) -> None:
    """PAK's improvement factor over the binary tree with bound B (error of the sum at the last step).

    Writes to --out the summary (one row per method: mean threshold, mean and median absolute
    error in the stream's units, improvement factor), every round's error, a JSON record and a
    plot of the errors' densities.
    """
    from dpstream.evaluation.pak_analysis import last_step_errors, last_step_summary, plot_last_step_errors

    if rounds < 1:
        raise click.BadParameter(f"must be >= 1, got {rounds}.", param_hint="'--rounds'")
    data = load_dataset(dataset, upper_bound=upper_bound, column=column, clip=clip)
    stem = f"pak-improvement-{data.name}"
    paths = prepare_output(out_dir, force=force, inputs=[dataset],
                           files={"summary": f"{stem}.csv", "json": f"{stem}.json", "csv": f"{stem}-errors.csv",
                                  "plot": f"{stem}.png"})
    with progress_bar(desc="pak-improvement", unit="round") as progress:
        result = last_step_errors(data.values, data.upper_bound, epsilon=epsilon, hold=hold, delta=delta, beta=beta,
                                  rounds=rounds, seed=seed, progress=progress,
                                  log=say_above_bar)
    summary = last_step_summary(result)
    errors = result.pop("errors")
    with output_directory(paths) as staged:  # all four files, or none
        write_csv(staged["summary"], summary)
        staged["json"].write_text(json.dumps({"dataset": data.name, "upper_bound": data.upper_bound, "seed": seed,
                                              "clip": clip, **result, "summary": summary}, indent=2))
        write_csv(staged["csv"], [dict(zip(errors, row, strict=True)) for row in zip(*errors.values(), strict=True)])
        plot_last_step_errors(errors, staged["plot"], title=f"{data.name}: error of the sum after all "
                              f"{result['n']:,} values, ε = {epsilon:g}, {rounds:,} rounds")
    click.echo(text_table(
        ["method", "mean tau", "mean |error|", "improvement factor over BT-bound"],
        [[row["method"], f"{data.upper_bound if row['mean_threshold'] is None else row['mean_threshold']:,.1f}",
          f"{row['mean_abs_error']:,.0f}", f"{row['improvement_factor']:.3g}"] for row in summary],
        title=f"error of the released sum at the last step, in the stream's units ({rounds:,} rounds)"))
    say("wrote " + ", ".join(str(path) for path in paths.values()))

