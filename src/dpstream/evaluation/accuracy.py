"""Beyond the paper: the model threshold against the paper's ToPS, on POS and on held-out streams.

Every round releases each stream once per method and budget, with fresh noise, and measures

* ``mse`` -- the paper's metric: the mean squared error of ``queries`` random range queries
  (Eq. 9; the same queries for every method of a round);
* ``mse_all`` -- the same expectation over *all* random queries, computed exactly from the
  prefix errors ``e`` of the release (two uniform endpoints err by ``e(j) - e(i)``, whose mean
  square is ``2 Var(e)``): no query sampling noise, so ratios need fewer rounds;
* ``window_mse`` -- with ``window`` set, the mean squared error of every window of that length;
* ``window_error`` -- with ``window`` set, the median relative error of the sums of the
  consecutive aligned windows (daily sums for ``window=1440`` minutes).

Methods (:data:`METHODS`): ``paper`` is ToPS as the paper runs it (NM-E, s by Eq. 7, prior
theta / 2); ``model`` chooses theta, s and the prior with
:func:`~dpstream.thresholds.model.model_threshold` (permute-and-flip);
``model-rnm`` / ``model-exponential`` change only the selection mechanism; ``model-window``
tells the model the study's ``window`` (``query_length``).  Both budgets are epsilon (the
paper's setting): the whole release is epsilon-DP.

Ratios of mean errors to the ``paper`` method come with a 95% confidence interval from a
paired bootstrap over rounds (:func:`ratio_table`).

Noise: the studies run the float path (numpy's Laplace via the round's generator) for the
hierarchy, as every study of the project does; the model's private steps use the exact
samplers on bits of the same generator.  The synthetic streams of
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
from dpstream.release import ToPS
from dpstream.rng import Seed, make_rng

__all__ = [
    "DATASETS",
    "METHODS",
    "AccuracyConfig",
    "load_stream",
    "plot_windows",
    "ratio_table",
    "release_errors",
    "run_accuracy",
    "window_errors",
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
        tops = ToPS(epsilon=epsilon, upper_bound=bound, hold=config.hold, max_range=config.max_range, seed=rng,
                    **extra)
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
        row["smoothed_levels"] = {int(s): levels.count(s) for s in sorted(set(levels))}
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
                 title: str = "") -> Path:
    """Error against window length: one line per setting (log-log)."""
    series = [Series(label=label, x=list(x), y=list(y)) for label, (x, y) in errors_by_setting.items()]
    panel = Panel(series=series, xlabel="window length (values)", ylabel="mean squared error of a window",
                  title=title, ylog=True, xlog=True)
    return save_figure(path, [panel])
