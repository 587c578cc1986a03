"""Household-day privacy for a population load curve: ``aggregate`` against per-meter releases summed.

The data are generated here, once, from a fixed seed, and not tuned on afterwards: ``--households``
meters (default 200) with heterogeneous loads (each household's mean daily total log-normal with
sigma 0.5 across households, median 10 kWh), a weekday/weekend and a seasonal shape (winter
higher), a day-to-day factor (log-normal, sigma 0.2), a within-day profile with a morning and an
evening peak (later mornings at weekends), half-hourly readings (gamma noise around the profile,
values clipped to B = 5 kWh), ``--days`` days (default 90) and 1% of readings missing (NA, read
as 0 by both releases).

Both releases protect each household's readings in each UTC day at epsilon = 1:

* ``dpstream aggregate`` with the unit bound C = 30 kWh per household-day (the bound of the
  command's example, a public figure a utility knows from tariffs; households above it are
  scaled down to it, which counts as error here);
* today's best: ``dpstream release --key-column meter --period 48 --threshold 5`` at epsilon/48
  per reading (48 readings of a day compose to epsilon = 1 for the household-day), one stream per
  meter with a public threshold (no hold-out), the released values summed over the meters.

Errors, against the true population values of the data (readings clipped to B, missing as 0):
the median relative error of the daily total, and of the 30-minute load; for ``aggregate`` also
the 30-minute load spread from each day's released total by the mean released within-day profile
of the previous 28 days of the same day type (weekday/weekend), post-processing of released
values only, and ``aggregate --revised`` (each closed day's released total spread by the mean
released profile of the previous 28 days, whatever their type: the command's default).  Then the
throughput of ``aggregate`` end to end (a CSV of ``--units`` meters x
``--buckets`` half-hours, default 10,000 x 480 = 4.8 M rows: ten days), wall and CPU time of the process
(the CPU of pyarrow's reading threads included; the start of Python too, about 0.7 s).

Run::

    PYTHONPATH=src python benchmarks/units_study.py [--households 200] [--days 90] [--units 10000] [--buckets 480]
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

EPSILON, BOUND, UPPER = 1.0, 30.0, 5.0
HALF_HOURS = 48
START = np.datetime64("2024-01-01T00:00:00")


def _profile(weekend: bool) -> np.ndarray:
    hours = (np.arange(HALF_HOURS) + 0.5) / 2
    morning = 9.0 if weekend else 7.5
    shape = (0.35 + 0.8 * np.exp(-0.5 * ((hours - morning) / 1.5) ** 2)
             + 1.3 * np.exp(-0.5 * ((hours - 19) / 2) ** 2))
    return shape / shape.sum()


def generate(households: int, days: int, seed: int) -> tuple[pa.Table, np.ndarray]:
    """The readings (time, meter, kWh text with NA) and the true values, shape (days * 48, households)."""
    rng = np.random.default_rng(seed)
    level = 10.0 * np.exp(rng.normal(0.0, 0.5, households))  # mean daily kWh, sigma 0.5 across households
    day = np.arange(days)
    weekend = ((day + 0) % 7) >= 5  # 2024-01-01 is a Monday
    season = 1.0 + 0.25 * np.cos(2 * np.pi * (day + 10) / 365.0)
    factor = season * np.where(weekend, 1.1, 1.0)
    totals = level[None, :] * factor[:, None] * np.exp(rng.normal(0.0, 0.2, (days, households)))
    shapes = np.stack([_profile(bool(w)) for w in weekend])  # (days, 48)
    mean = totals[:, None, :] * shapes[:, :, None]  # (days, 48, households)
    readings = rng.gamma(4.0, mean / 4.0)
    readings = np.minimum(np.round(readings, 3), UPPER).reshape(days * HALF_HOURS, households)
    missing = rng.random(readings.shape) < 0.01
    truth = np.where(missing, 0.0, readings)
    times = START + (np.arange(days * HALF_HOURS) * 30).astype("timedelta64[m]")
    stamp = np.repeat(np.char.add(np.datetime_as_string(times, unit="s"), "Z"), households)
    text = np.where(missing, "NA", np.char.mod("%.3f", readings)).ravel()
    meters = np.tile(np.array([f"m{h:04d}" for h in range(households)]), days * HALF_HOURS)
    return pa.table({"time": stamp, "meter": meters, "kWh": text}), truth


#: Runs the command and writes its own peak RSS (KiB) to the file named by DPSTREAM_PEAK at exit (the children's
#: peak of ``getrusage`` would count the pages of this process at the fork).
_PEAK = ("import atexit, os, resource, sys; atexit.register(lambda: open(os.environ['DPSTREAM_PEAK'], 'w').write("
         "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); sys.argv[0] = 'dpstream'; "
         "from dpstream.cli import main; main()")


def _dpstream(*args: object) -> tuple[float, float, float]:
    """Run a dpstream command; its wall and CPU seconds and its peak RSS in MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.NamedTemporaryFile() as peak:
        subprocess.run([sys.executable, "-c", _PEAK, *map(str, args)], check=True, stderr=subprocess.DEVNULL,
                       env={**os.environ, "DPSTREAM_PEAK": peak.name})
        rss = int(Path(peak.name).read_text() or 0) / 1024
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            rss)


def _aggregate_args(data: Path, out: Path) -> list[object]:
    return ["aggregate", data, "-o", out, "--time-column", "time", "--unit-column", "meter", "--column", "kWh",
            "--bucket", "30m", "--unit-window", "1d", "--unit-bound", BOUND, "--epsilon", EPSILON, "--upper-bound",
            UPPER, "--clip", "--missing", "zero", "--force"]


def _released_column(path: Path, name: str = "value") -> np.ndarray:
    with open(path) as handle:
        return np.array([float(row[name]) for row in csv.DictReader(handle)])


def _per_meter(path: Path, slots: int, households: int) -> np.ndarray:
    out = np.zeros((slots, households))
    with open(path) as handle:
        for row in csv.DictReader(handle):
            out[int(row["position"]), int(row["key"][1:])] = float(row["value"])
    return out


def _spread(daily: np.ndarray, leaves: np.ndarray, weekend: np.ndarray, history: int = 28) -> np.ndarray:
    """Each day's released total spread by the mean released profile of the previous days of its type."""
    out = np.empty_like(leaves)
    for d in range(daily.size):
        same = [k for k in range(max(0, d - history), d) if weekend[k] == weekend[d]]
        profile = np.clip(leaves[same].mean(axis=0), 1e-9, None) if same else np.ones(HALF_HOURS)
        out[d] = daily[d] * profile / profile.sum()
    return out


def _median_relative(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(np.median(np.abs(estimate - truth) / truth))


def study(folder: Path, households: int, days: int, seed: int) -> dict[str, dict[str, float]]:
    table, truth = generate(households, days, seed)
    data = folder / "meters.csv"
    pcsv.write_csv(table, data)
    true_load = truth.sum(axis=1)  # per half-hour
    true_daily = true_load.reshape(days, HALF_HOURS).sum(axis=1)
    weekend = (np.arange(days) % 7) >= 5
    results: dict[str, dict[str, float]] = {}

    _dpstream(*_aggregate_args(data, folder / "aggregate.csv"), "--seed", seed + 1,
              "--revised", folder / "revised.csv")  # (wall, CPU, peak) unused
    load = _released_column(folder / "aggregate.csv")
    revised = _released_column(folder / "revised.csv", "revised")
    daily = load.reshape(days, HALF_HOURS).sum(axis=1)
    spread = _spread(daily, load.reshape(days, HALF_HOURS), weekend).ravel()
    results["aggregate (C = 30 kWh)"] = {"daily": _median_relative(daily, true_daily),
                                         "half-hour": _median_relative(load, true_load),
                                         "half-hour, spread by the profile": _median_relative(spread, true_load),
                                         "half-hour, --revised": _median_relative(revised, true_load)}

    _dpstream("release", data, "-o", folder / "per_meter.csv", "--key-column", "meter", "--time-column", "time",
              "--column", "kWh", "--period", HALF_HOURS, "--threshold", UPPER, "--epsilon", EPSILON / HALF_HOURS,
              "--upper-bound", UPPER, "--clip", "--missing", "zero", "--force", "--seed", seed + 2)
    summed = _per_meter(folder / "per_meter.csv", days * HALF_HOURS, households).sum(axis=1)
    results["per-meter release summed (eps/48)"] = {
        "daily": _median_relative(summed.reshape(days, HALF_HOURS).sum(axis=1), true_daily),
        "half-hour": _median_relative(summed, true_load), "half-hour, spread by the profile": float("nan"),
        "half-hour, --revised": float("nan")}
    return results


def write_rows(data: Path, units: int, buckets: int) -> None:
    """The throughput's input: ``units`` meters x ``buckets`` half-hours, time by time."""
    rng = np.random.default_rng(1)
    times = START + (np.arange(buckets) * 30).astype("timedelta64[m]")
    table = pa.table({"time": np.repeat(np.char.add(np.datetime_as_string(times, unit="s"), "Z"), units),
                      "meter": np.tile(np.array([f"m{u}" for u in range(units)]), buckets),
                      "kWh": np.round(rng.gamma(2.0, 0.15, units * buckets), 3)})
    pcsv.write_csv(table, data)


def throughput(folder: Path, units: int, buckets: int) -> tuple[int, float, float, float]:
    """Rows, wall and CPU seconds, and the peak RSS (MiB) of the run.  The input is written by another process:
    a process's peak RSS keeps what it held when it was forked (this one holds the study's data)."""
    data = folder / "throughput.csv"
    subprocess.run([sys.executable, __file__, "--write-rows", str(data), str(units), str(buckets)], check=True)
    wall, cpu, peak = _dpstream(*_aggregate_args(data, folder / "throughput_out.csv"))
    data.unlink()
    return units * buckets, wall, cpu, peak


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--households", type=int, default=200)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--buckets", type=int, default=480)
    parser.add_argument("--throughput-only", action="store_true", help="Skip the accuracy study.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-rows", nargs=3, metavar=("PATH", "UNITS", "BUCKETS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_rows:
        write_rows(Path(args.write_rows[0]), int(args.write_rows[1]), int(args.write_rows[2]))
        return
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        if not args.throughput_only:
            results = study(folder, args.households, args.days, args.seed)
            print(f"{args.households} households, {args.days} days, half-hourly, household-day epsilon = {EPSILON:g}")
            print("| release | daily total, median rel. error | 30-min load | 30-min load, spread by the profile "
                  "of its day type | 30-min load, --revised |")
            print("|---|---|---|---|---|")
            for method, errors in results.items():
                cells = " | ".join("—" if np.isnan(v) else f"{100 * v:.1f}%" for v in errors.values())
                print(f"| {method} | {cells} |")
        for units, buckets in ((args.units // 10, args.buckets), (args.units, args.buckets // 4),
                               (args.units, args.buckets)):  # peak memory: in rows, then in units
            rows, wall, cpu, peak = throughput(folder, units, buckets)
            print(f"{rows:,} rows of {units:,} units: {wall:.2f} s wall ({rows / wall / 1e6:.2f} M rows/s), "
                  f"{cpu:.2f} s CPU ({rows / cpu / 1e6:.2f} M rows/s per CPU second), peak RSS {peak:.0f} MiB; "
                  f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
