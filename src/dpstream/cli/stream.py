"""Stream commands: ``release`` (continual release of one stream), ``evaluate``, ``demo`` and
``topl-demo``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import click
import numpy as np

from dpstream.cli._common import SEED_HELP, cli, floats, output_file, refuse_overwrite, say, write_csv
from dpstream.datasets import load_dataset
from dpstream.evaluation import METRICS, STUDIES, ExperimentConfig, run_study, summarize
from dpstream.evaluation.metrics import error_metrics, prefix_range_sums, random_queries
from dpstream.io import iter_chunks, iter_values, open_input
from dpstream.release import PAK, BinaryTreeCounter, ToPL, ToPS
from dpstream.release.pak import PAK_MULTIPLIER, PAK_THRESHOLD_FRACTION
from dpstream.rng import make_rng
from dpstream.smoothers import SMOOTHERS

#: Batch size for file input; stdin is released value by value.
_CHUNK = 65536


# -- release -------------------------------------------------------------------------------


def _build_tops(options: dict[str, Any]) -> ToPS:
    return ToPS(epsilon=options["epsilon"], upper_bound=options["upper_bound"], hold=options["hold"],
                max_range=options["max_range"], fanout=options["fanout"], smoother=options["smoother"],
                window=options["window"], alpha=options["alpha"], threshold_epsilon=options["threshold_epsilon"],
                threshold_step=options["threshold_step"], clip=options["clip"], seed=options["seed"])


def _describe_tops(tops: ToPS) -> str:
    return (f"threshold theta = {tops.threshold:g} (NM-E), smoothed levels s = {tops.smoothed_levels} "
            f"of h = {tops.levels}")


def _build_pak(options: dict[str, Any], capped: bool = True) -> PAK:
    return PAK(epsilon=options["epsilon"], upper_bound=options["upper_bound"], hold=options["hold"],
               max_range=options["max_range"], threshold_fraction=options["threshold_fraction"], delta=options["delta"],
               multiplier=options["multiplier"], noise=options["noise"], capped=capped, clip=options["clip"],
               seed=options["seed"])


def _describe_pak(pak: PAK) -> str:
    kind = "capped at B" if pak.capped else "UNCAPPED, as in the ToPS paper"
    return (f"threshold tau = {pak.threshold:g} (S-PAK {kind}; before the cap {pak.raw_threshold:g}); "
            f"noisy sum of the first {pak.hold:,} values = {pak.held_sum:.6g}")


def _build_bt(options: dict[str, Any]) -> BinaryTreeCounter:
    return BinaryTreeCounter(epsilon=options["epsilon"], upper_bound=options["upper_bound"],
                             max_range=options["max_range"], clip=options["clip"], seed=options["seed"])


def _describe_bt(counter: BinaryTreeCounter) -> str:
    return f"binary tree with bound B = {counter.upper_bound:g}, {counter.levels} levels, no hold-out"


def _build_topl(options: dict[str, Any]) -> ToPL:
    return ToPL(epsilon=options["epsilon"], upper_bound=options["upper_bound"], hold=options["hold"],
                max_range=options["max_range"], threshold_epsilon=options["threshold_epsilon"], clip=options["clip"],
                seed=options["seed"])


def _describe_topl(topl: ToPL) -> str:
    return (f"threshold theta = {topl.threshold:g} (Square Wave reports + Eq. 8, {topl.collector.variant}); "
            f"every later value is one Hybrid-mechanism report, released as its unbiased estimate")


@dataclass(frozen=True)
class _Method:
    """How ``release --method NAME`` builds its releaser and which of the options it reads.

    A releaser has ``release(values) -> np.ndarray``, ``release_one(value) -> float | None``,
    ``threshold`` (None until published), ``position``, ``hold`` and ``privacy()``.
    """

    build: Callable[[dict[str, Any]], Any]
    describe: Callable[[Any], str]
    #: Method-specific options; setting any other one is an error rather than silently ignored.
    options: frozenset[str] = frozenset()


_TOPS_OPTIONS = frozenset({"hold", "fanout", "smoother", "window", "alpha", "threshold_epsilon", "threshold_step"})
_PAK_OPTIONS = frozenset({"hold", "delta", "threshold_fraction", "multiplier", "noise"})

RELEASE_METHODS: dict[str, _Method] = {
    "tops": _Method(_build_tops, _describe_tops, _TOPS_OPTIONS),
    "pak": _Method(_build_pak, _describe_pak, _PAK_OPTIONS),
    "pak-uncapped": _Method(lambda options: _build_pak(options, capped=False), _describe_pak, _PAK_OPTIONS),
    "bt": _Method(_build_bt, _describe_bt),
    "topl": _Method(_build_topl, _describe_topl, frozenset({"hold", "threshold_epsilon"})),
}
_SPECIFIC_OPTIONS = frozenset().union(*(method.options for method in RELEASE_METHODS.values()))


@cli.command()
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Where the released values go, one per line ('-' is stdout).")
@click.option("--method", type=click.Choice(list(RELEASE_METHODS)), default="tops", show_default=True,
              help="Release mechanism.")
@click.option("--epsilon", type=float, required=True, help="Privacy budget of the release.")
@click.option("--upper-bound", type=float, required=True, help="Public bound B: values lie in [0, B].")
@click.option("--hold", type=int, default=65536, show_default=True,
              help="Leading values used to choose the threshold; not released.")
@click.option("--max-range", type=int, default=2**20, show_default=True,
              help="Largest query range r; a fresh hierarchy every r values.")
@click.option("--fanout", type=int, default=16, show_default=True, help="Fan-out b of the hierarchy.")
@click.option("--smoother", type=click.Choice(list(SMOOTHERS)), default="recent", show_default=True)
@click.option("--window", type=int, default=None, help="Window of the moving_average smoother.")
@click.option("--alpha", type=float, default=None, help="Weight of the exponential smoother.")
@click.option("--threshold-epsilon", type=float, default=None,
              help="Budget of the threshold optimizer (default: --epsilon).")
@click.option("--column", default=None, help="Column to read when INPUT has several.")
@click.option("--threshold-step", type=float, default=1.0, show_default=True,
              help="Spacing of the candidate thresholds step, 2 step, ..., B (use < 1 for B below 1).")
@click.option("--delta", type=float, default=None,
              help="pak: delta of the threshold (default 1/n^2 with n = hold + max-range).")
@click.option("--threshold-fraction", type=float, default=PAK_THRESHOLD_FRACTION, show_default=True,
              help="pak: eps1/eps, the share of the budget for the threshold (the rest for the held-out sum).")
@click.option("--multiplier", type=float, default=PAK_MULTIPLIER, show_default=True,
              help="pak: the multiplier r of PAK's Eq. 15.")
@click.option("--noise", type=click.Choice(["laplace", "gaussian"]), default="laplace", show_default=True,
              help="pak: noise of the smooth-sensitivity threshold.")
@click.option("--seed", type=int, default=None,
              help=SEED_HELP)
@click.option("--clip", is_flag=True, help="Clip values outside [0, B] instead of failing (recommended: "
              "failing stops the output at the bad value, which tells a reader where it was).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def release(input_path: str, output_path: str, method: str, column: str | None, seed: int | None,
            hold: int, force: bool, **options: Any) -> None:
    """Release the stream in INPUT under event-level DP; ToPS (epsilon-DP) by default.

    INPUT is CSV or text with one value per line (optional header, .gz allowed, '-' is
    stdin).  From stdin, each value is released as soon as it arrives.  pak and pak-uncapped
    are (epsilon, delta)-DP, topl is epsilon-LDP per value; the guarantee is printed on stderr.
    """
    chosen = RELEASE_METHODS[method]
    context = click.get_current_context()
    for name in sorted(_SPECIFIC_OPTIONS - chosen.options):
        if context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(f"--{name.replace('_', '-')} does not apply to --method {method}.")
    describe = chosen.describe
    releaser = chosen.build({**options, "hold": hold, "seed": seed})
    if releaser.threshold is not None:  # methods without a hold-out know their bound from the start
        _announce(releaser, describe)
    if seed is not None:
        say("warning: --seed makes the noise recomputable by anyone who knows it; this release is for testing only.")
    target = None if output_path == "-" else Path(output_path)
    if target is not None:
        if input_path != "-" and Path(input_path).exists() and target.exists() and target.samefile(input_path):
            raise click.ClickException(f"--output {output_path} is the input file; choose another output.")
        refuse_overwrite([target], force)
        if not target.parent.is_dir():
            raise click.ClickException(f"the directory of --output, {str(target.parent)!r}, does not exist.")
    source = open_input(input_path)
    values = iter_values(source, column, source="stdin" if input_path == "-" else input_path)
    name = "stdin" if input_path == "-" else input_path
    try:
        with output_file(target) as sink:  # a failed release leaves no file and destroys none
            if input_path == "-":
                released = _release_live(releaser, values, sink, describe)
            else:
                released = _release_batches(releaser, iter_chunks(values, _CHUNK), sink, describe)
            if releaser.position == 0:
                raise click.ClickException(f"{name} holds no values.")
            if releaser.threshold is None:
                raise click.ClickException(
                    f"{name} ended after {releaser.position:,} values, before the hold-out of {releaser.hold:,} "
                    "was complete: nothing was released (lower --hold or give a longer stream)."
                )
    finally:
        if source is not sys.stdin:
            source.close()
    say(f"released {released:,} values after holding out {releaser.hold:,}.")


def _announce(releaser: Any, describe: Callable[[Any], str] = _describe_tops) -> None:
    say(describe(releaser))
    say(f"privacy: {releaser.privacy()}")


def _release_live(releaser: Any, values: Iterator[float], sink: TextIO, describe: Callable[[Any], str]) -> int:
    released = 0
    for value in values:
        out = releaser.release_one(value)
        if out is None:
            if releaser.threshold is not None:
                _announce(releaser, describe)
            continue
        sink.write(f"{out!r}\n")
        sink.flush()
        released += 1
    return released


def _release_batches(releaser: Any, chunks: Iterator[np.ndarray], sink: TextIO,
                     describe: Callable[[Any], str]) -> int:
    released = 0
    for chunk in chunks:
        had_threshold = releaser.threshold is not None
        out = releaser.release(chunk)
        if not had_threshold and releaser.threshold is not None:
            _announce(releaser, describe)
        if out.size:
            sink.write("\n".join(map(repr, out.tolist())) + "\n")
            released += out.size
    return released


# -- evaluate ------------------------------------------------------------------------------


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
    data = load_dataset(dataset, upper_bound=upper_bound, column=column)
    config = ExperimentConfig(hold=hold, max_range=max_range, rounds=rounds, queries=queries, percentile=percentile,
                              stream_epsilon=stream_epsilon)
    if min(hold, max_range, rounds, queries) < 1:
        raise click.ClickException(
            f"--hold, --max-range, --rounds and --queries must be >= 1, got {hold}, {max_range}, {rounds}, {queries}."
        )
    out = Path(out_dir)
    stem = f"{study}-{data.name}"
    paths = {kind: out / f"{stem}{suffix}" for kind, suffix in
             (("rounds", "-rounds.csv"), ("summary", ".csv"), ("json", ".json"), ("plot", "-mse.png"))}
    refuse_overwrite(list(paths.values()), force)
    method_list = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    records = run_study(study, data.values, data.upper_bound, epsilons=floats(epsilons), methods=method_list,
                        config=config, seed=seed, dataset=data.name, log=say)
    rows = summarize(records)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(paths["rounds"], records)
    write_csv(paths["summary"], rows)
    paths["json"].write_text(json.dumps({"study": study, "dataset": data.name, "upper_bound": data.upper_bound,
                                         "seed": seed, "config": config.__dict__, "summary": rows}, indent=2))
    from dpstream.evaluation.streams import plot_metric

    plot_metric(rows, paths["plot"], title=f"{study} on {data.name} ({rounds} rounds, {queries} queries)")
    click.echo(_table(rows))
    say("wrote " + ", ".join(str(path) for path in paths.values()))


def _table(rows: list[dict[str, Any]]) -> str:
    epsilons = sorted({row["epsilon"] for row in rows})
    methods = list(dict.fromkeys(row["method"] for row in rows))
    cell = {(row["method"], row["epsilon"]): row["mse_mean"] for row in rows}
    width = max(len(method) for method in ["method", *methods]) + 2
    lines = ["MSE (mean over rounds)", "method".ljust(width) + "".join(f"eps={e:<10g}" for e in epsilons)]
    for method in methods:
        lines.append(method.ljust(width) + "".join(f"{cell[(method, e)]:<14.3g}" for e in epsilons))
    return "\n".join(lines)


# -- demo ----------------------------------------------------------------------------------


@cli.command()
@click.option("--epsilon", type=float, default=0.05, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite the plot if it exists.")
def demo(epsilon: float, seed: int, out_dir: str, force: bool) -> None:
    """Release the built-in POS stream with ToPS and plot it against the truth.

    The demo is seeded so that it can be replayed: it shows utility, it is not a private release.
    """
    plot_path = Path(out_dir) / "pos-moving-average.png"
    refuse_overwrite([plot_path], force)
    data = load_dataset("pos")
    say(f"dataset: {data.description}; B = {data.upper_bound:g}")
    tops = ToPS(epsilon=epsilon, upper_bound=data.upper_bound, seed=seed)
    released = tops.release(data.values)
    _announce(tops)
    report_demo(data.values[tops.hold:], released, hold=tops.hold, seed=seed, plot_path=plot_path,
                title=f"ToPS on POS, epsilon = {epsilon:g} (theta = {tops.threshold:g})")


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
    topl = ToPL(epsilon=epsilon, upper_bound=data.upper_bound, threshold_epsilon=threshold_epsilon, seed=seed)
    # every plotted point is the mean of at least one released value
    released_count = max(data.values.size - topl.hold, 0)
    if not 1 <= intervals <= released_count:
        raise click.BadParameter(f"must be between 1 and the number of released values, {released_count:,}; "
                                 f"got {intervals:,}.", param_hint="'--intervals'")
    plot_path = Path(out_dir) / f"topl-pos-eps{epsilon:g}-moving-average.png"
    refuse_overwrite([plot_path], force)
    say(f"dataset: {data.description}; B = {data.upper_bound:g}")
    released = topl.release(data.values)
    _announce(topl, _describe_topl)
    report_demo(data.values[topl.hold:], released, hold=topl.hold, seed=seed, plot_path=plot_path, intervals=intervals,
                title=f"ToPL on POS, epsilon = {epsilon:g} (theta = {topl.threshold:g})")


def report_demo(truth: np.ndarray, released: np.ndarray, *, hold: int, seed: int, plot_path: Path, title: str,
                intervals: int = 120) -> None:
    """What every demo prints (errors of 200 random range queries, totals) and its moving-average plot."""
    queries = random_queries(make_rng(seed), truth.size, 200)
    metrics = error_metrics(prefix_range_sums(released, queries), prefix_range_sums(truth, queries), queries)
    click.echo(f"released {released.size:,} values (positions {hold:,} onwards)")
    click.echo("200 random range queries (mean length {:,.0f}): ".format(float(np.mean(queries.lengths)))
               + ", ".join(f"{name.upper()} {metrics[name]:.4g}" for name in METRICS))
    click.echo(f"true total {truth.sum():,.0f}, released total {released.sum():,.0f}")
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    from dpstream.evaluation.streams import plot_moving_average

    path = plot_moving_average(truth, released, plot_path, intervals=intervals, title=title)
    click.echo(f"plot: {path}")

