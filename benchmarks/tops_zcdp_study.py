"""ToPS under zCDP against ToPS under pure DP over 30 releases, at equal (epsilon, delta = 1e-6).

A publisher releases 30 streams (one a day) that all read the protected unit -- the same
participant's value in every day's stream, or the same positions republished -- so the 30
releases compose sequentially.  Pure DP: each day is ToPS at epsilon_d (discrete Laplace on the
hierarchy, the model threshold at epsilon_d), 30 days are (30 epsilon_d, 0)-DP.  zCDP: the 30 days
together get the rho whose (epsilon, delta) is (30 epsilon_d, 1e-6)
(:func:`~dpstream.accounting.rho_for`), each day a thirtieth of it: ``ToPS(rho=rho_d)`` (discrete
Gaussian on every measured level, L2 sensitivity theta sqrt(levels); the model threshold at the
epsilon whose square half is rho_d, :mod:`dpstream.release.tops_zcdp`); so both modes are (30
epsilon_d, 1e-6)-DP over the horizon, the Laplace one even with delta = 0.

Each day is a slice of ``--length`` consecutive values of a stream (POS, the shipped ToPS dataset, and
the synthetic smart-meter and taxi-fare streams of :mod:`dpstream.datasets.synthetic`, with their
public bounds B), released by ToPS with ``expected_length`` set to the slice (its fitted hold-out,
hierarchy and candidate grid).  The error is that of ``--queries`` random range queries per day
(start and length uniform over the released values), released sums against the true sums, so it
holds every part of ToPS's error (noise, truncation, smoothing, the prior); MSE over the 30 days and
``--runs`` seeded runs.  The table says the per-day budget, both modes' MSE, their ratio, and the
mean number of measured levels the model chose (where zCDP gains: Laplace noise pays variance
``levels^2``, Gaussian ``levels``), and the exact ratio of one node's noise variance at d = 2 levels,
``2 (theta d / eps_d)^2`` over ``theta^2 d / (2 rho_d)`` = ``4 rho_d d / eps_d^2``: the gain if noise were the
whole error and the threshold choice the same in both modes (it is not: under zCDP the model
threshold runs at ``sqrt(2 rho_d)``, and truncation and smoothing errors are shared).

Run::

    PYTHONPATH=src python benchmarks/tops_zcdp_study.py [--runs 3] [--length 16384] [--queries 2000]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from dpstream.accounting import rho_for, zcdp_epsilon
from dpstream.datasets import load_dataset
from dpstream.release import ToPS
from dpstream.release.tops_defaults import ReleaseWarning

DAYS, DELTA = 30, 1e-6
STREAMS = ("pos", "smart-meter", "taxi-fares")
EPSILONS_PER_DAY = (1.0, 0.1)


def _days(name: str, length: int) -> tuple[np.ndarray, float]:
    """The first 30 slices of ``length`` values of a stream, and its public bound B."""
    dataset = load_dataset(name, **({} if name == "pos" else {"length": DAYS * length}))
    return dataset.values[: DAYS * length].reshape(DAYS, length), dataset.upper_bound


def _range_errors(released: np.ndarray, truth: np.ndarray, queries: int, rng: np.random.Generator) -> np.ndarray:
    """Squared errors of ``queries`` random ranges (start and length uniform) of the released values."""
    n = released.size
    starts = rng.integers(0, n, size=queries)
    stops = starts + 1 + rng.integers(0, n - starts)
    out_sums = np.concatenate(([0.0], np.cumsum(released)))
    true_sums = np.concatenate(([0.0], np.cumsum(truth)))
    return ((out_sums[stops] - out_sums[starts]) - (true_sums[stops] - true_sums[starts])) ** 2


def _mode(days: np.ndarray, bound: float, budget: dict, *, runs: int, queries: int) -> tuple[float, float]:
    """MSE of random ranges over the days and runs of ToPS at ``budget`` per day, and the mean measured levels."""
    errors, levels = [], []
    for run in range(runs):
        rng = np.random.default_rng([run, 1])
        for day, values in enumerate(days):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ReleaseWarning)
                tops = ToPS(**budget, upper_bound=bound, expected_length=values.size, seed=1000 * run + day)
            released = tops.release(values)
            errors.append(_range_errors(released, values[tops.hold:], queries, rng))
            levels.append(tops._stream.measured_levels)
    return float(np.mean(np.concatenate(errors))), float(np.mean(levels))


def study(*, runs: int, length: int, queries: int) -> list[dict]:
    rows = []
    for name in STREAMS:
        days, bound = _days(name, length)
        for per_day in EPSILONS_PER_DAY:
            total = DAYS * per_day
            rho_day = rho_for(total, DELTA) / DAYS
            pure, pure_levels = _mode(days, bound, {"epsilon": per_day}, runs=runs, queries=queries)
            zcdp, zcdp_levels = _mode(days, bound, {"rho": rho_day}, runs=runs, queries=queries)
            rows.append(dict(stream=name, per_day=per_day, total=total, rho_day=rho_day, pure=pure, zcdp=zcdp,
                             pure_levels=pure_levels, zcdp_levels=zcdp_levels,
                             check=zcdp_epsilon(rho_day * DAYS, DELTA)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", type=int, default=16384, help="values per day")
    parser.add_argument("--queries", type=int, default=2000, help="random range queries per day and run")
    args = parser.parse_args()
    rows = study(runs=args.runs, length=args.length, queries=args.queries)
    print(f"30 releases of {args.length:,} values each, (30 eps_d, delta = {DELTA:g})-DP in both modes; "
          f"{args.runs} runs, {args.queries} random ranges per day")
    print("| stream | eps per day (pure) | rho per day (zCDP) | range MSE, pure DP | range MSE, zCDP | gain "
          "| measured levels (pure / zCDP) | node variance ratio at d = 2 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        assert row["check"] <= row["total"]  # the zCDP horizon meets the same (epsilon, delta)
        print(f"| {row['stream']} | {row['per_day']:g} | {row['rho_day']:.4g} | {row['pure']:.4g} | "
              f"{row['zcdp']:.4g} | {row['pure'] / row['zcdp']:.2f}x | {row['pure_levels']:.2f} / "
              f"{row['zcdp_levels']:.2f} | {4 * row['rho_day'] * 2 / row['per_day'] ** 2:.2f}x |")


if __name__ == "__main__":
    main()
