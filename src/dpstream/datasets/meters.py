"""Synthetic per-key meter readings: many households' 15-minute kWh with missing values (``release --key-column``).

:func:`meter_readings` gives ``meters`` households over ``days`` days of 96 quarter-hours each, as
the rows a utility's export holds: ``meter,time,kWh``, time-major (every meter's reading of one
quarter-hour, then the next), readings missing at random (``missing``, default 1%) and, for one
meter in ten, an outage of up to a day of consecutive missing readings.  Each household is the
one-minute power of :func:`~dpstream.datasets.synthetic.smart_meter` (its own seed: daily and
weekly cycles, appliances, a fridge) scaled by a log-normal household size (median 1, sd 0.4),
summed into kWh per quarter-hour (a mean near 0.1 kWh, about 10 kWh a day).  The public bound of
one reading is :data:`METER_BOUND` = 5 kWh (20 kW for 15 minutes, above any household connection
of the generator but the largest households' rare peaks, which a release clips).

From the command line (the README's per-key example)::

    python -m dpstream.datasets.meters meters.csv --meters 200 --days 30
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpstream._checks import check_nonnegative_int, check_positive_int, check_probability
from dpstream.datasets.synthetic import smart_meter

__all__ = ["METER_BOUND", "READINGS_PER_DAY", "MeterReadings", "main", "meter_readings"]

#: Readings per meter and day (quarter-hours).
READINGS_PER_DAY = 96
#: The public bound B of one quarter-hour reading, in kWh.
METER_BOUND = 5.0
#: Share of the meters with one outage (consecutive missing readings, up to a day).
OUTAGE_SHARE = 0.1


@dataclass(frozen=True)
class MeterReadings:
    """Rows of ``meters x days x 96`` readings, time-major; ``kwh`` is NaN where the reading is missing."""

    meter: np.ndarray  # str, "M0000", ...
    step: np.ndarray  # int64: the quarter-hour since the first midnight
    kwh: np.ndarray  # float64, 3 decimals, NaN = missing

    def by_meter(self) -> np.ndarray:
        """The readings as a ``(meters, readings)`` array (NaN = missing), meters in the order of their names."""
        names = np.unique(self.meter)
        grid = np.full((names.size, int(self.step.max()) + 1), np.nan)
        grid[np.searchsorted(names, self.meter), self.step] = self.kwh
        return grid

    def write_csv(self, path: str | Path) -> None:
        """Write ``meter,time,kWh`` (ISO times from 2024-01-01T00:00, missing readings as ``NA``)."""
        day, quarter = np.divmod(self.step, READINGS_PER_DAY)
        times = (np.datetime64("2024-01-01T00:00") + day.astype("timedelta64[D]")
                 + (quarter * 15).astype("timedelta64[m]")).astype(str)
        values = np.where(np.isnan(self.kwh), "NA", np.char.mod("%.3f", np.nan_to_num(self.kwh)))
        lines = np.char.add(np.char.add(np.char.add(np.char.add(self.meter, ","), times), ","), values)
        Path(path).write_text("meter,time,kWh\n" + "\n".join(lines.tolist()) + "\n")


def meter_readings(meters: int = 200, days: int = 30, *, seed: int = 0, missing: float = 0.01) -> MeterReadings:
    """``meters`` households' 15-minute kWh over ``days`` days (see the module docstring); a function of its arguments.

    >>> readings = meter_readings(3, 2, seed=1)
    >>> readings.kwh.size, readings.by_meter().shape, bool(np.nanmin(readings.kwh) >= 0)
    (576, (3, 192), True)
    >>> bool(np.array_equal(readings.kwh, meter_readings(3, 2, seed=1).kwh, equal_nan=True))
    True
    """
    meters, days = check_positive_int(meters, "meters"), check_positive_int(days, "days")
    rng = np.random.default_rng(check_nonnegative_int(seed, "seed"))
    missing = check_probability(missing, "missing")
    steps = days * READINGS_PER_DAY
    seeds = rng.integers(0, 2**31, meters)
    sizes = np.exp(0.4 * rng.standard_normal(meters))
    kwh = np.empty((meters, steps))
    for index in range(meters):  # one household at a time: its minutes summed into quarter-hours
        watts = smart_meter(steps * 15, seed=int(seeds[index])).reshape(steps, 15).mean(axis=1)
        kwh[index] = np.round(watts * sizes[index] * 0.25 / 1000.0, 3)
    kwh[rng.random((meters, steps)) < missing] = np.nan
    for index in np.flatnonzero(rng.random(meters) < OUTAGE_SHARE):
        start, length = rng.integers(0, steps), rng.integers(1, READINGS_PER_DAY + 1)
        kwh[index, start:start + length] = np.nan
    names = np.array([f"M{index:04d}" for index in range(meters)])
    return MeterReadings(meter=np.tile(names, steps), step=np.repeat(np.arange(steps), meters), kwh=kwh.T.ravel())


def main(argv: list[str] | None = None) -> None:
    """``python -m dpstream.datasets.meters FILE [--meters N] [--days D] [--seed S] [--missing P]``."""
    parser = argparse.ArgumentParser(prog="python -m dpstream.datasets.meters", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="the CSV file to write (meter,time,kWh)")
    parser.add_argument("--meters", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--missing", type=float, default=0.01, help="share of readings missing at random")
    args = parser.parse_args(argv)
    meter_readings(args.meters, args.days, seed=args.seed, missing=args.missing).write_csv(args.path)


if __name__ == "__main__":
    main()
