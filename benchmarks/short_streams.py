"""Per-key short streams: what ``release --key-column`` gives on a month of 15-minute meter readings.

Generates ``--meters`` households (default 200) over ``--days`` days (default 30) of 96 readings
(:func:`dpstream.datasets.meters.meter_readings`: 1% missing at random, outages, B = 5 kWh), writes
them as the CSV of the README's example, and runs ``dpstream release`` on it per configuration:
the README's command as written (ToPS fitted to ``--expected-length 2880`` with daily leaves,
``--period 96``, epsilon 1 per meter), without the period, at epsilon 0.05, the issue's
configuration (``--hold 96 --epsilon 0.05``, no expected length) and the public-threshold mode
(``--threshold``).  Options not named are the README's (epsilon 1, ``--upper-bound 5 --clip
--missing zero``).

For every meter-day whose 96 readings were all released it compares the released daily total
with the true one (missing readings as 0, as ``--missing zero`` reads them; unclipped, so
truncation counts as error) and prints: the share of values released, the daily error's mean,
median and 90th percentile in kWh and relative to the mean daily total, the range of the
released values, the share exactly 0, the meters whose released values are all 0, and whether
the command warned.

Run::

    PYTHONPATH=src python benchmarks/short_streams.py            # 200 meters x 30 days: about a minute
    PYTHONPATH=src python benchmarks/short_streams.py --meters 20
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
from dpstream.datasets.meters import METER_BOUND, READINGS_PER_DAY, meter_readings

#: The README's per-key command (its options after INPUT and -o), then the configurations compared with it.
README = ["--column", "kWh", "--time-column", "time", "--key-column", "meter", "--missing", "zero",
          "--epsilon", "1", "--upper-bound", "5", "--clip", "--expected-length", "2880", "--period", "96"]
BASE = ["--column", "kWh", "--time-column", "time", "--key-column", "meter", "--missing", "zero", "--upper-bound", "5",
        "--clip"]
CONFIGURATIONS = {
    "README: --expected-length 2880 --period 96": README,
    "--expected-length 2880 (no period)": [*BASE, "--epsilon", "1", "--expected-length", "2880"],
    "--expected-length 2880 --period 96, eps 0.05": [*BASE, "--epsilon", "0.05", "--expected-length", "2880",
                                                     "--period", "96"],
    "--expected-length 2880, eps 0.05": [*BASE, "--epsilon", "0.05", "--expected-length", "2880"],
    "issue's: --hold 96, eps 0.05": [*BASE, "--epsilon", "0.05", "--hold", "96"],
    "public --threshold 1 --period 96": [*BASE, "--epsilon", "1", "--threshold", "1", "--period", "96"],
    "public --threshold 1 --period 96 --exp.-len.": [*BASE, "--epsilon", "1", "--threshold", "1", "--period", "96",
                                                     "--expected-length", "2880"],
    "public --threshold 1": [*BASE, "--epsilon", "1", "--threshold", "1"],
    "public --threshold 2": [*BASE, "--epsilon", "1", "--threshold", "2"],
}


def released_grid(path: Path, names: np.ndarray, steps: int) -> np.ndarray:
    """The released values as a ``(meters, steps)`` array, NaN where nothing was released (the hold-out)."""
    grid = np.full((names.size, steps), np.nan)
    with open(path, newline="") as file:
        rows = list(csv.reader(file))[1:]
    if rows:
        keys = np.searchsorted(names, [row[0] for row in rows])
        grid[keys, np.array([int(row[1]) for row in rows])] = np.array([float(row[-1]) for row in rows])
    return grid


def measure(grid: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """The errors of the released daily totals, over the meter-days released whole, and the released values' range."""
    meters, steps = truth.shape
    days = steps // READINGS_PER_DAY
    released = grid.reshape(meters, days, READINGS_PER_DAY)
    whole = ~np.isnan(released).any(axis=2)
    errors = np.abs(released.sum(axis=2) - truth.reshape(meters, days, READINGS_PER_DAY).sum(axis=2))[whole]
    mean_total = truth.sum() / (meters * days)
    values = grid[~np.isnan(grid)]
    zero_meters = int(sum(1 for row in grid if row[~np.isnan(row)].size and not row[~np.isnan(row)].any()))
    if not errors.size:
        return {"released": values.size / truth.size, "mean_total": mean_total}
    return {
        "released": values.size / truth.size, "mean_total": mean_total,
        "mean": errors.mean(), "median": float(np.median(errors)), "p90": float(np.percentile(errors, 90)),
        "low": values.min(), "high": values.max(), "zeros": float(np.mean(values == 0.0)), "zero_meters": zero_meters,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--meters", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1, help="the releases' --seed (the data's seed is 0)")
    args = parser.parse_args(argv)
    readings = meter_readings(args.meters, args.days, seed=0)
    truth = np.nan_to_num(readings.by_meter())
    names = np.unique(readings.meter)
    daily = truth.sum() / truth.shape[0] / args.days
    print(f"{args.meters} meters x {args.days} days x {READINGS_PER_DAY} readings, B = {METER_BOUND:g} kWh, "
          f"{np.isnan(readings.kwh).mean():.2%} missing, mean daily total {daily:.2f} kWh")
    print("daily error = |released - true daily total| over the meter-days released whole, in kWh and / mean total")
    header = (f"{'configuration':44} {'released':>8} {'mean':>7} {'median':>7} {'p90':>7} {'mean/tot':>8} "
              f"{'p90/tot':>8} {'min':>9} {'max':>9} {'zeros':>6} {'0-meters':>8} {'warned':>6} {'secs':>5}")
    print(header)
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "meters.csv"
        readings.write_csv(data)
        for name, options in CONFIGURATIONS.items():
            out = Path(folder) / "out.csv"
            started = time.perf_counter()
            result = CliRunner().invoke(cli, ["release", str(data), "-o", str(out), "--force", "--seed",
                                              str(args.seed), *options])
            seconds = time.perf_counter() - started
            warned = any(line.startswith("warning: ") and "--seed" not in line and "exists" not in line
                         for line in result.stderr.splitlines())
            if result.exit_code != 0:
                print(f"{name:44} failed: {result.stderr.strip().splitlines()[-1]}")
                continue
            m = measure(released_grid(out, names, truth.shape[1]), truth)
            total = m["mean_total"]
            print(f"{name:44} {m['released']:8.1%} {m['mean']:7.2f} {m['median']:7.2f} {m['p90']:7.2f} "
                  f"{m['mean'] / total:8.2f} {m['p90'] / total:8.2f} {m['low']:9.3g} {m['high']:9.3g} "
                  f"{m['zeros']:6.1%} {m['zero_meters']:8d} {'yes' if warned else 'no':>6} {seconds:5.1f}")


if __name__ == "__main__":
    main()
