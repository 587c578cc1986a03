"""Beyond the paper: the model threshold against the paper's ToPS, on POS and on held-out streams.

Every round releases each stream once per method and budget, with fresh noise, and measures

* ``mse`` -- the paper's metric: the mean squared error of ``queries`` random range queries
  (Eq. 9; the same queries for every method of a round);
* ``mse_all`` -- the same expectation over *all* random queries, computed exactly from the
  prefix errors ``e`` of the release (two uniform endpoints err by ``e(j) - e(i)``, whose mean
  square is ``2 Var(e)``): no query sampling noise, so ratios need fewer rounds;
* ``window_mse`` -- with ``window`` set, the mean squared error of every window of that length;
* ``window_error`` -- with ``window`` set, the median relative error of the sums of the
  consecutive aligned windows (daily sums for ``window=1440`` minutes);
* ``aligned_mse`` -- with ``window`` set, the mean squared error of those aligned sums.

Methods (:data:`METHODS`): ``paper`` is ToPS as the paper runs it (NM-E, s by Eq. 7, prior
theta / 2); ``model`` chooses theta, s and the prior with
:func:`~dpstream.thresholds.model.model_threshold` (permute-and-flip);
``model-rnm`` / ``model-exponential`` change only the selection mechanism; ``model-window``
tells the model the study's ``window`` (``query_length``); ``model-period`` also measures one leaf
per window (``period``, :class:`~dpstream.release.periodic.PeriodicPerturber`), ``model-period-profile``
with a private profile of the period of 24 bins (``profile_bins=24``), ``model-period-quarter`` with leaves of a
quarter of the window (``period = window // 4``).  Both budgets are epsilon (the
paper's setting): the whole release is epsilon-DP.

Ratios of mean errors to the ``paper`` method come with a 95% confidence interval from a
paired bootstrap over rounds (:func:`ratio_table`).

Window trade-off: :func:`window_curves` measures the mean squared error of windows of several
lengths for a few settings (the paper's ToPS, the model for random queries, the model told the
window, and fixed s), and :func:`plot_windows` draws them.

Run from the shell (writes CSV and JSON to ``--out``; see ``--help``)::

    python -m dpstream.evaluation.accuracy --dataset pos --rounds 100 --out results/accuracy

Noise: the studies run the float path (``noise=FloatNoise(rng)``: numpy's Laplace from the round's
generator, NOT for publication) for the hierarchy and NM-E, as every study of the project does;
the model's private steps use the exact samplers on bits of the same generator.  The synthetic streams of
:mod:`dpstream.datasets.synthetic` were not used to choose anything in the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpstream.datasets import load_dataset
from dpstream.datasets.synthetic import SYNTHETIC
from dpstream.evaluation.metrics import random_queries
from dpstream.evaluation.plots import Panel, Series, save_figure
from dpstream.evaluation.streams import extend_stream
from dpstream.noise.sampler import FloatNoise
from dpstream.release import ToPS
from dpstream.rng import Seed, make_rng

__all__ = [
    "DATASETS",
    "METHODS",
    "AccuracyConfig",
    "load_stream",
    "main",
    "plot_windows",
    "ratio_table",
    "release_errors",
    "run_accuracy",
    "window_curves",
    "window_errors",
    "window_settings",
]


@dataclass(frozen=True)
class AccuracyConfig:
    """The paper's setting: m = 65,536 held out, r = 2^20 released, 200 queries per round."""

    hold: int = 65536
    max_range: int = 2**20
    rounds: int = 100
    queries: int = 200
    window: int | None = None


#: Streams of the study: POS (tuned on) and the synthetic streams (not tuned on).
DATASETS = ("pos", *SYNTHETIC)

Method = Callable[[np.ndarray, float, float, AccuracyConfig, np.random.Generator], tuple[np.ndarray, dict]]


def _tops(**options: Any) -> Method:
    def run(values: np.ndarray, bound: float, epsilon: float, config: AccuracyConfig, rng: np.random.Generator):
        extra = dict(options)
        if extra.pop("window_length", False):
            extra["query_length"] = config.window
        if extra.pop("window_period", False):
            extra["period"] = config.window
        if divisor := extra.pop("window_period_divisor", None):
            extra["period"] = max(1, config.window // divisor)
        tops = ToPS(epsilon=epsilon, upper_bound=bound, hold=config.hold, max_range=config.max_range,
                    noise=FloatNoise(rng=rng), **extra)
        tops.release(values[: config.hold])
        released = tops.release(values[config.hold :])
        info = {"threshold": tops.threshold, "smoothed_levels": tops.smoothed_levels}
        if tops.model_choice is not None:
            info["prior"] = tops.model_choice.prior
        return released, info

    return run


#: name -> method.
METHODS: dict[str, Method] = {
    "paper": _tops(threshold_method="nm-e"),
    "model": _tops(threshold_method="model"),
    "model-rnm": _tops(threshold_method="model", selection="report-noisy-max"),
    "model-exponential": _tops(threshold_method="model", selection="exponential"),
    "model-window": _tops(threshold_method="model", window_length=True),
    "model-period": _tops(threshold_method="model", window_length=True, window_period=True),
    "model-period-quarter": _tops(threshold_method="model", window_length=True, window_period_divisor=4),
    "model-period-profile": _tops(threshold_method="model", window_length=True, window_period=True,
                                  profile_bins=24),
}


def load_stream(name: str, config: AccuracyConfig) -> tuple[np.ndarray, float]:
    """``hold + max_range`` values of a dataset and its public bound.

    POS is extended as the paper's code does (:func:`~dpstream.evaluation.streams.extend_stream`);
    a synthetic stream is generated at that length with seed 0.
    """
    length = config.hold + config.max_range
    if name in SYNTHETIC:
        generator, bound, _ = SYNTHETIC[name]
        return generator(length, seed=0), bound
    data = load_dataset(name)
    return extend_stream(data.values, length)[0], data.upper_bound


def window_errors(errors: np.ndarray, truth: np.ndarray, window: int, offset: int = 0) -> tuple[float, float]:
    """(mean squared error of every window, median relative error of the aligned windows).

    ``errors`` are released minus true values; aligned windows start at positions
    ``offset, offset + window, ...`` (e.g. the first midnight).

    >>> mse, median = window_errors(np.array([1.0, -1.0, 2.0, 0.0]), np.array([2.0, 2.0, 2.0, 2.0]), 2)
    >>> round(mse, 3), median  # windows err by 0, 1, 2; the aligned ones miss 0 of 4 and 2 of 4
    (1.667, 0.25)
    """
    prefix = np.concatenate(([0.0], np.cumsum(errors)))
    all_windows = float(np.mean((prefix[window:] - prefix[:-window]) ** 2))
    count = (errors.size - offset) // window
    if count < 1:
        return all_windows, float("nan")
    cut = slice(offset, offset + count * window)
    sums = truth[cut].reshape(count, window).sum(axis=1)
    misses = errors[cut].reshape(count, window).sum(axis=1)
    relative = np.abs(misses) / np.maximum(np.abs(sums), 1e-12)
    return all_windows, float(np.median(relative))


def release_errors(released: np.ndarray, truth: np.ndarray, rng: np.random.Generator, config: AccuracyConfig,
                   queries=None) -> dict[str, float]:
    """The metrics of one release (see the module docstring)."""
    errors = released - truth
    prefix = np.concatenate(([0.0], np.cumsum(errors)))
    queries = queries if queries is not None else random_queries(rng, truth.size, config.queries)
    estimate = prefix[queries.stops] - prefix[queries.starts]
    out = {
        "mse": float(np.mean(estimate**2)),
        "mse_all": float(2.0 * prefix[:-1].var()),
    }
    if config.window is not None:
        offset = (-config.hold) % config.window
        out["window_mse"], out["window_error"] = window_errors(errors, truth, config.window, offset)
        count = (errors.size - offset) // config.window
        misses = errors[offset : offset + count * config.window].reshape(count, config.window).sum(axis=1)
        out["aligned_mse"] = float(np.mean(misses**2)) if count else float("nan")
    return out


def run_accuracy(
    dataset: str,
    *,
    epsilons: Sequence[float],
    methods: Sequence[str] = ("paper", "model"),
    config: AccuracyConfig = AccuracyConfig(),
    seed: Seed = 0,
    progress: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """One record per (round, epsilon, method): the metrics and what the method chose."""
    unknown = [name for name in methods if name not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; the methods are {', '.join(METHODS)}.")
    values, bound = load_stream(dataset, config)
    truth = values[config.hold :]
    rng = make_rng(seed)
    records = []
    for round_index in range(config.rounds):
        queries = random_queries(rng, truth.size, config.queries)  # the same for every method of the round
        for epsilon in epsilons:
            for name in methods:
                released, info = METHODS[name](values, bound, float(epsilon), config, rng)
                record = {"dataset": dataset, "method": name, "epsilon": float(epsilon), "round": round_index, **info}
                record.update(release_errors(released, truth, rng, config, queries))
                records.append(record)
        progress(f"{dataset}: round {round_index + 1}/{config.rounds}")
    return records


def _bootstrap_ratio(numerator: np.ndarray, denominator: np.ndarray, rng: np.random.Generator,
                     resamples: int = 2000) -> tuple[float, float, float]:
    """Ratio of means and its 95% paired-bootstrap percentile interval."""
    index = rng.integers(0, numerator.size, size=(resamples, numerator.size))
    ratios = numerator[index].mean(axis=1) / denominator[index].mean(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(numerator.mean() / denominator.mean()), float(low), float(high)


def ratio_table(records: list[dict[str, Any]], *, baseline: str = "paper",
                metrics: Sequence[str] = ("mse", "mse_all")) -> list[dict[str, Any]]:
    """Per (dataset, epsilon, method): mean metrics, and ratios to ``baseline`` with 95% intervals.

    Rounds are paired by index (a method and the baseline answered the same queries).
    """
    rng = np.random.default_rng(12345)
    groups: dict[tuple, dict[int, dict]] = {}
    for record in records:
        groups.setdefault((record["dataset"], record["epsilon"], record["method"]), {})[record["round"]] = record
    rows = []
    for (dataset, epsilon, method), by_round in groups.items():
        base = groups.get((dataset, epsilon, baseline), {})
        rounds = sorted(set(by_round) & set(base))
        row: dict[str, Any] = {"dataset": dataset, "epsilon": epsilon, "method": method, "rounds": len(by_round)}
        chosen = [r.get("threshold") for r in by_round.values()]
        row["threshold_median"] = float(np.median(chosen))
        levels = [r.get("smoothed_levels") for r in by_round.values()]
        row["smoothed_levels"] = {("period" if s is None else int(s)): levels.count(s)
                                  for s in sorted(set(levels), key=lambda s: -1 if s is None else s)}
        for metric in metrics:
            if metric not in next(iter(by_round.values())):
                continue
            column = np.array([by_round[r][metric] for r in sorted(by_round)])
            row[f"{metric}_mean"] = float(np.mean(column))
            if rounds and method != baseline:
                mine = np.array([by_round[r][metric] for r in rounds])
                theirs = np.array([base[r][metric] for r in rounds])
                ratio, low, high = _bootstrap_ratio(mine, theirs, rng)
                row[f"{metric}_ratio"], row[f"{metric}_low"], row[f"{metric}_high"] = ratio, low, high
        rows.append(row)
    return rows


def plot_windows(errors_by_setting: dict[str, tuple[Sequence[int], Sequence[float]]], path: Path, *,
                 title: str = "", ylabel: str = "mean squared error of a window") -> Path:
    """Error against window length: one line per setting (log-log)."""
    series = [Series(label=label, x=list(x), y=list(y)) for label, (x, y) in errors_by_setting.items()]
    panel = Panel(series=series, xlabel="window length (values)", ylabel=ylabel, title=title, ylog=True, xlog=True)
    return save_figure(path, [panel])


def window_curves(
    dataset: str,
    *,
    epsilon: float,
    lengths: Sequence[int],
    settings: dict[str, dict[str, Any]],
    config: AccuracyConfig = AccuracyConfig(),
    seed: Seed = 0,
) -> dict[str, tuple[list[int], list[float]]]:
    """Mean squared error of every window of each length, for each setting of ToPS, over rounds.

    ``settings`` maps a label to ToPS keyword arguments; the value ``"window"`` of
    ``query_length`` stands for each length in turn (one release per length), any other
    setting is released once per round and measured at every length.
    """
    values, bound = load_stream(dataset, config)
    truth = values[config.hold :]
    rng = make_rng(seed)
    curves: dict[str, list[float]] = {label: [0.0] * len(lengths) for label in settings}
    for _ in range(config.rounds):
        for label, options in settings.items():
            per_length = options.get("query_length") == "window"
            released = None
            for i, length in enumerate(lengths):
                if released is None or per_length:
                    kwargs = dict(options, query_length=length) if per_length else dict(options)
                    tops = ToPS(epsilon=epsilon, upper_bound=bound, hold=config.hold, max_range=config.max_range,
                                noise=FloatNoise(rng=rng), **kwargs)
                    tops.release(values[: config.hold])
                    released = tops.release(values[config.hold :])
                prefix = np.concatenate(([0.0], np.cumsum(released - truth)))
                curves[label][i] += float(np.mean((prefix[length:] - prefix[:-length]) ** 2)) / config.rounds
    return {label: (list(lengths), errors) for label, errors in curves.items()}


def window_settings(period: int) -> dict[str, dict[str, Any]]:
    """The settings of the window plot: the paper's ToPS, the model for random queries and told the
    window, the model's theta at fixed s, and one leaf per ``period``."""
    settings: dict[str, dict[str, Any]] = {
        "paper (NM-E, Eq. 7)": {"threshold_method": "nm-e"},
        "model, random queries": {"threshold_method": "model"},
        "model, told the window": {"threshold_method": "model", "query_length": "window"},
    }
    for s in (1, 2, 3):
        settings[f"model theta, s = {s}"] = {"threshold_method": "model", "smoothed_levels": s}
    settings[f"model, period = {period}"] = {"threshold_method": "model", "period": period}
    return settings


def _curves_main(args: Any) -> None:
    import json

    lengths = [int(x) for x in args.curves.split(",")]
    epsilon = float(args.epsilons.split(",")[0])
    config = AccuracyConfig(rounds=args.rounds)
    curves = window_curves(args.dataset, epsilon=epsilon, lengths=lengths, settings=window_settings(args.period),
                           config=config, seed=args.seed)
    values, _ = load_stream(args.dataset, config)
    mean = float(values[config.hold :].mean())
    relative = {label: (x, [float(np.sqrt(e)) / (length * mean) for e, length in zip(errors, x, strict=True)])
                for label, (x, errors) in curves.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"accuracy-windows-{args.dataset}.json").write_text(json.dumps(
        {"epsilon": epsilon, "rounds": args.rounds, "lengths": lengths,
         "relative_rmse": {label: y for label, (_, y) in relative.items()}}, indent=2))
    plot_windows(relative, out / f"accuracy-windows-{args.dataset}.png", ylabel="relative RMSE of a window",
                 title=f"{args.dataset}, eps = {epsilon:g}, {args.rounds} rounds")
    for label, (x, y) in relative.items():
        print(f"{label}: " + ", ".join(f"{length}: {value:.3g}" for length, value in zip(x, y, strict=True)))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dpstream.evaluation.accuracy``: run the study, print the ratio table, write results."""
    import argparse
    import csv
    import json

    parser = argparse.ArgumentParser(prog="python -m dpstream.evaluation.accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="pos", choices=list(DATASETS))
    parser.add_argument("--epsilons", default="0.01,0.02,0.05,0.1")
    parser.add_argument("--methods", default="paper,model")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--window", type=int, default=None, help="also measure windows of this length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="directory for the records (CSV) and the ratio table (JSON)")
    parser.add_argument("--curves", default=None, help="instead: error against these window lengths (comma-separated) "
                        "at the first epsilon, for the settings of WINDOW_SETTINGS, plotted")
    parser.add_argument("--period", type=int, default=1440, help="with --curves: the period of the periodic setting")
    args = parser.parse_args(argv)
    if args.curves:
        _curves_main(args)
        return
    config = AccuracyConfig(rounds=args.rounds, queries=args.queries, window=args.window)
    records = run_accuracy(args.dataset, epsilons=[float(e) for e in args.epsilons.split(",")],
                           methods=args.methods.split(","), config=config, seed=args.seed,
                           progress=lambda message: print(message, flush=True))
    metrics = ("mse", "mse_all") + (("window_mse", "window_error", "aligned_mse") if args.window else ())
    rows = ratio_table(records, metrics=metrics)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"accuracy-{args.dataset}" + (f"-window{args.window}" if args.window else "")
    with open(out / f"{stem}-rounds.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(key for r in records for key in r)), restval="")
        writer.writeheader()
        writer.writerows(records)
    (out / f"{stem}.json").write_text(json.dumps({"config": config.__dict__, "seed": args.seed, "rows": rows},
                                                 indent=2, default=str))
    for row in rows:
        cells = [f"{m} {row[m + '_mean']:.3g}" + (f" ratio {row[m + '_ratio']:.2f} [{row[m + '_low']:.2f}, "
                                                     f"{row[m + '_high']:.2f}]" if m + "_ratio" in row else "")
                 for m in metrics if m + "_mean" in row]
        print(f"{row['dataset']} eps={row['epsilon']:g} {row['method']}: theta~{row['threshold_median']:g} "
              f"s={row['smoothed_levels']} " + "; ".join(cells))


if __name__ == "__main__":  # pragma: no cover
    main()
