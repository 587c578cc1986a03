"""zCDP against pure-DP composition for the unit-level aggregate over 30 days, at equal (epsilon, delta = 1e-6).

A publisher protects each household's readings in each UTC day and releases every day for 30
days.  Pure DP: each day is epsilon_d-DP (discrete Laplace of scale d C / epsilon_d on each of the
d levels of the day's hierarchy), 30 days are (30 epsilon_d, 0)-DP by composition.  zCDP: the
30 days together get the rho whose (epsilon, delta) is (30 epsilon_d, 1e-6)
(:func:`~dpstream.accounting.rho_for`), each day a thirtieth of it (discrete Gaussian of
sigma^2 = d C^2 / (2 rho_d) on each level, L2 sensitivity sqrt(d) C); so both modes are
(30 epsilon_d, 1e-6)-DP over the 30 days, and the Laplace one even with delta = 0.

The data are those of ``benchmarks/units_study.py`` (200 households, half-hourly readings, C = 30
kWh per household-day), 30 days, generated once with seed 0.  The error is the noise's alone: each
release is compared with the same release on ``ZeroNoise`` (the bounded truth), so bounding, which
both modes share, is left out.  Per configuration: the exact MSE of a released bucket
(:meth:`~dpstream.release.aggregate.UnitAggregate.standard_error` squared) and the empirical MSE of the
buckets and of the daily totals over ``--runs`` seeded runs; the hierarchy of a day is the default
(d = 2: the 48 buckets and the day) or four levels of fan-out 4 (48 -> 12 -> 3 -> 1).

Run::

    PYTHONPATH=src python benchmarks/zcdp_study.py [--runs 10] [--households 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from dpstream.accounting import rho_for, zcdp_epsilon  # noqa: E402
from dpstream.noise.sampler import ZeroNoise  # noqa: E402
from dpstream.release.aggregate import UnitAggregate  # noqa: E402
from units_study import BOUND, HALF_HOURS, START, generate  # noqa: E402

DAYS, DELTA = 30, 1e-6
HIERARCHIES = {"d = 2 (buckets, day)": {}, "d = 4 (fan-out 4)": {"levels": 4, "fanout": 4}}


def _rows(households: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, truth = generate(households, DAYS, seed=0)
    times = (START + (np.arange(DAYS * HALF_HOURS) * 30).astype("timedelta64[m]")).astype("datetime64[ns]")
    meters = np.array([f"m{h:04d}" for h in range(households)])
    return (np.repeat(times.astype(np.int64), households), np.tile(meters, DAYS * HALF_HOURS), truth.ravel())


def _release(rows: tuple[np.ndarray, np.ndarray, np.ndarray], **params: object) -> np.ndarray:
    agg = UnitAggregate(bucket=1800, window=86400, unit_bound=BOUND, upper_bound=BOUND, unit="household", **params)
    out = agg.release(*rows)
    return np.concatenate((out.values, agg.flush().values))


def study(households: int, runs: int) -> list[tuple[str, float, str, float, float, float, float]]:
    """Rows: (hierarchy, epsilon per day, mode, exact bucket MSE, bucket MSE, daily-total MSE, total epsilon)."""
    rows = _rows(households)
    out = []
    for name, shape in HIERARCHIES.items():
        truth = _release(rows, epsilon=1.0, noise=ZeroNoise(), **shape)
        for per_day in (1.0, 0.1):
            rho_day = rho_for(DAYS * per_day, DELTA) / DAYS
            for mode, budget in (("pure DP", {"epsilon": per_day}), ("zCDP", {"rho": rho_day})):
                exact = UnitAggregate(bucket=1800, window=86400, unit_bound=BOUND, seed=0, **budget,
                                      **shape).standard_error() ** 2
                errors = np.stack([_release(rows, seed=seed, **budget, **shape) - truth for seed in range(runs)])
                daily = errors.reshape(runs, DAYS, HALF_HOURS).sum(axis=2)
                total = DAYS * per_day if mode == "pure DP" else zcdp_epsilon(rho_day * DAYS, DELTA)
                out.append((name, per_day, mode, exact, float(np.mean(errors**2)), float(np.mean(daily**2)), total))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--households", type=int, default=200)
    args = parser.parse_args(argv)
    results = study(args.households, args.runs)
    print(f"{'hierarchy':<22} {'eps/day':>7} {'mode':<8} {'30-day (eps, delta)':<20} {'bucket MSE exact':>16} "
          f"{'bucket MSE':>11} {'day MSE':>11} {'gain (bucket, day)':>19}")
    for i, (name, per_day, mode, exact, bucket, daily, total) in enumerate(results):
        gain = "" if mode == "pure DP" else f"{results[i - 1][4] / bucket:.2f}x, {results[i - 1][5] / daily:.2f}x"
        delta = "0" if mode == "pure DP" else f"{DELTA:g}"
        print(f"{name:<22} {per_day:>7g} {mode:<8} {f'({total:.4g}, {delta})':<20} {exact:>16.4g} {bucket:>11.4g} "
              f"{daily:>11.4g} {gain:>19}")


if __name__ == "__main__":
    main()
