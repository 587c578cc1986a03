"""Revised values against the first release on meter-like data: error per quarter-hour, negative aggregates.

Generates ``--meters`` meters x ``--days`` days x 96 quarter-hour readings in kWh (household
levels log-normal with sigma 0.5, a day factor of sd ~0.2, a morning and an evening peak, gamma
noise, clipped at B = 5, 1% missing read as 0 as ``--missing zero`` does), releases every meter
as its own stream (as ``release --key-column meter`` does: one ToPS per meter, its own noise)
and compares, per configuration:

* the RMSE per quarter-hour of one meter's values, and of the aggregate (the sum over meters at
  each quarter-hour), against the true readings, for the first release and the revised values
  (:meth:`~dpstream.release.holdout.HoldOutRelease.revised`);
  (also without the first released day, which starts from the smoother's prior);
* the fraction of aggregate quarter-hours below 0, and the lowest aggregate value;
* the RMSE of daily totals (the same for both: revision keeps every closed day's total).

Configurations: a public threshold with ``--period 96`` (flat shape: each day's total spread
evenly), a hold-out of ``--hold-days`` days with ``--period 96 --profile-bins 24`` (the private
profile shapes the predictions and the revision), and windows of a day without a period
(``--query-length 96``: the model's leaves).  Only released positions count.

Run::

    PYTHONPATH=src python benchmarks/revised_values.py [--meters 200] [--days 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpstream.release.tops import ToPS

PER_DAY = 96
BOUND = 5.0


def meters(count: int, days: int, seed: int) -> np.ndarray:
    """``count`` x ``days * 96`` readings in [0, B], 1% of them missing (0)."""
    rng = np.random.default_rng(seed)
    t = np.arange(PER_DAY)
    profile = 0.5 + 0.6 * np.exp(-(((t - 30) / 6.0) ** 2)) + 1.2 * np.exp(-(((t - 76) / 8.0) ** 2))
    profile /= profile.mean()
    level = rng.lognormal(np.log(0.25), 0.5, size=count)
    day = rng.lognormal(0.0, 0.2, size=(count, days))
    values = level[:, None, None] * day[:, :, None] * profile * rng.gamma(4.0, 0.25, size=(count, days, PER_DAY))
    values = np.minimum(values, BOUND).reshape(count, days * PER_DAY).round(3)
    values[rng.random(values.shape) < 0.01] = 0.0
    return values


CONFIGURATIONS = {
    "public threshold 2, --period 96": dict(threshold=2.0, period=PER_DAY),
    "hold-out, --period 96 --profile-bins 24": dict(period=PER_DAY, profile_bins=24),
    "hold-out, --query-length 96 (window leaves)": dict(query_length=PER_DAY),
}


def release(values: np.ndarray, *, epsilon: float, hold: int, options: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """First release and revised values of every meter (rows), from the first released position on."""
    first, revised = [], []
    for index, stream in enumerate(values):
        tops = ToPS(epsilon=epsilon, upper_bound=BOUND, seed=index, **({} if "threshold" in options
                                                                       else {"hold": hold}), **options)
        out = tops.release(stream)
        first.append(out)
        revised.append(tops.revised(out))
    leaves = tops.leaf or tops.period or tops._stream.block_size
    return np.array(first), np.array(revised), f"leaves of {leaves}"


def measure(truth: np.ndarray, first: np.ndarray, revised: np.ndarray) -> dict[str, float]:
    days = truth.shape[1] // PER_DAY
    daily = lambda x: x[:, : days * PER_DAY].reshape(x.shape[0], days, PER_DAY).sum(axis=2)  # noqa: E731
    rmse = lambda a, b: float(np.sqrt(np.mean((a - b) ** 2)))  # noqa: E731
    total, first_total, revised_total = truth.sum(axis=0), first.sum(axis=0), revised.sum(axis=0)
    return {
        "meter rmse first": rmse(first, truth), "meter rmse revised": rmse(revised, truth),
        "aggregate rmse first": rmse(first_total, total), "aggregate rmse revised": rmse(revised_total, total),
        "negative first": float(np.mean(first_total < 0)), "negative revised": float(np.mean(revised_total < 0)),
        "lowest first": float(first_total.min()), "lowest revised": float(revised_total.min()),
        "daily rmse first": rmse(daily(first), daily(truth)), "daily rmse revised": rmse(daily(revised), daily(truth)),
        "later rmse first": rmse(first_total[PER_DAY:], total[PER_DAY:]),
        "later rmse revised": rmse(revised_total[PER_DAY:], total[PER_DAY:]),
        "mean aggregate": float(total.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meters", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--hold-days", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    values = meters(args.meters, args.days, args.seed)
    print(f"{args.meters} meters x {args.days} days x {PER_DAY} readings, epsilon {args.epsilon} per meter, "
          f"B = {BOUND:g}; a hold-out is {args.hold_days} days")
    for name, options in CONFIGURATIONS.items():
        start = time.perf_counter()
        hold = args.hold_days * PER_DAY
        first, revised, leaves = release(values, epsilon=args.epsilon, hold=hold, options=options)
        truth = values[:, values.shape[1] - first.shape[1]:]
        seconds = time.perf_counter() - start
        got = measure(truth, first, revised)
        print(f"\n{name} ({leaves}; {first.shape[1]:,} released values per meter, {seconds:.1f} s)")
        print(f"  RMSE per quarter-hour, one meter:      first {got['meter rmse first']:9.3f}   "
              f"revised {got['meter rmse revised']:9.3f} kWh")
        print(f"  RMSE per quarter-hour, sum of meters:  first {got['aggregate rmse first']:9.3f}   "
              f"revised {got['aggregate rmse revised']:9.3f} kWh (mean {got['mean aggregate']:.2f})")
        print(f"  ... the same after the first day:       first {got['later rmse first']:9.3f}   "
              f"revised {got['later rmse revised']:9.3f} kWh (the first day starts from the prior)")
        print(f"  aggregate quarter-hours below 0:       first {got['negative first']:9.2%}   "
              f"revised {got['negative revised']:9.2%}")
        print(f"  lowest aggregate quarter-hour:         first {got['lowest first']:9.2f}   "
              f"revised {got['lowest revised']:9.2f} kWh")
        print(f"  RMSE of a meter's daily total:         first {got['daily rmse first']:9.3f}   "
              f"revised {got['daily rmse revised']:9.3f} kWh")


if __name__ == "__main__":
    main()
