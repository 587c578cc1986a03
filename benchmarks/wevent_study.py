"""Per-key w-event on half-hourly meters: ``release --w-event 48`` against the manual route (eps/48 per reading).

Generates ``--meters`` households (default 100) over ``--days`` days (default 30) with
:func:`dpstream.datasets.meters.meter_readings` (quarter-hours, 1% missing, outages) summed into
half-hours (48 a day; a half-hour with both quarters missing is ``NA``, read as 0), and releases
every meter's stream at the same guarantee, **any 48 consecutive readings of a meter (a day):
epsilon = 1** (``WEvent(48)``), by two routes:

* the manual route: ``--epsilon 1/48`` per reading at event level (group privacy over 48
  readings), ``--period 48`` (one leaf per day), a public ``--threshold`` theta;
* ``--w-event 48`` with the same ``--period 48 --threshold``, with and without ``--period-bound C``
  (each day's total bounded at C).

For every meter-day it compares the released daily total (the sum of the day's released values)
with the true one (unclipped; missing readings as 0) and prints the mean, median and 90th
percentile of the absolute error in kWh, the mean relative to the mean daily total, and the
noise's mean absolute value ``d S / eps`` that the sensitivity predicts (d = 1 measured level:
the days; S = 48 theta without a bound, the most a window moves the bounded days with one).

Run::

    PYTHONPATH=src python benchmarks/wevent_study.py            # 100 meters x 30 days: about a minute
    PYTHONPATH=src python benchmarks/wevent_study.py --meters 20 --days 10
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.datasets.meters import meter_readings
from dpstream.release.wevent import window_sensitivity

#: Half-hours a day: the window of the guarantee and the period of the leaves.
DAY = 48
BASE = ["--column", "kWh", "--time-column", "time", "--key-column", "meter", "--missing", "zero", "--upper-bound",
        "5", "--clip", "--period", str(DAY), "--seed", "1"]


def configurations() -> dict[str, tuple[list[str], float, float | None]]:
    """Name -> (options, theta, C): the manual route at three public thresholds, then --w-event."""
    manual = {f"manual: eps 1/48 per reading, theta {theta:g}": (["--epsilon", repr(1 / DAY), "--threshold",
                                                                  f"{theta:g}"], theta, None)
              for theta in (5.0, 2.0, 1.0, 0.5, 0.25)}
    wevent = {}
    for theta, bound in ((5.0, None), (5.0, 30.0), (5.0, 24.0), (5.0, 15.0), (2.0, 24.0), (2.0, 12.0), (1.0, 15.0),
                         (1.0, 10.0), (1.0, 6.0)):
        name = f"--w-event 48, theta {theta:g}" + ("" if bound is None else f", --period-bound {bound:g}")
        options = ["--epsilon", "1", "--w-event", str(DAY), "--threshold", f"{theta:g}"]
        wevent[name] = (options + ([] if bound is None else ["--period-bound", f"{bound:g}"]), theta, bound)
    return {**manual, **wevent}


def write_half_hours(path: Path, meters: int, days: int) -> np.ndarray:
    """Write ``meter,time,kWh`` half-hourly (time-major); return the true readings ``(meters, days * 48)`` (0 where
    missing, as ``--missing zero`` reads them)."""
    quarters = meter_readings(meters, days, seed=0).by_meter()
    pairs = quarters.reshape(meters, -1, 2)
    half = np.where(np.isnan(pairs).all(axis=2), np.nan, np.nansum(pairs, axis=2))
    names = [f"M{index:04d}" for index in range(meters)]
    start = np.datetime64("2024-01-01T00:00")
    with path.open("w", newline="") as sink:
        writer = csv.writer(sink)
        writer.writerow(["meter", "time", "kWh"])
        for step in range(half.shape[1]):
            time_text = str(start + np.timedelta64(30 * step, "m"))
            writer.writerows([name, time_text, "NA" if np.isnan(v) else f"{v:.3f}"]
                             for name, v in zip(names, half[:, step].tolist()))
    return np.nan_to_num(half)


def daily_errors(output: Path, truth: np.ndarray) -> np.ndarray:
    """|released - true| daily total of every meter-day (every value is released: the thresholds are public)."""
    released = np.zeros_like(truth)
    with output.open() as source:
        rows = csv.reader(source)
        next(rows)
        for key, position, _, value in rows:
            released[int(key[1:]), int(position)] = float(value)
    meters, steps = truth.shape
    days = steps // DAY
    return np.abs(released.reshape(meters, days, DAY).sum(axis=2) - truth.reshape(meters, days, DAY).sum(axis=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--meters", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args(argv)
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "meters.csv"
        truth = write_half_hours(source, args.meters, args.days)
        mean_total = truth.sum() / (args.meters * args.days)
        print(f"{args.meters} meters x {args.days} days x {DAY} half-hours; mean daily total {mean_total:.2f} kWh; "
              "guarantee of every row: any 48 consecutive readings of a meter, epsilon = 1")
        print(f"| release | noise d S / eps | mean | median | p90 | mean / total | seconds |\n|{'---|' * 7}")
        zeros = truth.reshape(args.meters, args.days, DAY).sum(axis=2)
        print(f"| release 0 for every day (no data) | 0 | {zeros.mean():.1f} | {np.median(zeros):.1f} | "
              f"{np.percentile(zeros, 90):.1f} | 1.00 | - |")
        for name, (options, theta, bound) in configurations().items():
            started = time.perf_counter()
            result = runner.invoke(cli, ["release", str(source), "-o", str(Path(tmp) / "out.csv"), *BASE, *options,
                                         "--force"])
            seconds = time.perf_counter() - started
            if result.exit_code != 0:
                raise SystemExit(f"{name}: {result.output}")
            if "w-event (w = 48)" not in result.output and "--w-event" in name:
                raise SystemExit(f"{name}: no w-event guarantee stated")
            errors = daily_errors(Path(tmp) / "out.csv", truth)
            scale = window_sensitivity(DAY, DAY, theta, bound)  # d = 1, eps = 1 per window
            print(f"| {name} | {scale:g} | {errors.mean():.1f} | {np.median(errors):.1f} | "
                  f"{np.percentile(errors, 90):.1f} | {errors.mean() / mean_total:.2f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
