"""Location counts from raw trajectories: the MSE of the raw noisy counts against each post-processing method.

The data are generated once from a fixed seed and not tuned on: ``--users`` users (default 1,000)
on the ``--locations``-location Markov chain of :func:`dpstream.datasets.trajectories.markov_chain`
(default 20; stay with 0.5, else a Dirichlet(0.3) row), ``--steps`` hourly steps (default 200),
users starting uniformly.  The release is :class:`~dpstream.release.locations.LocationCounts` (what
``dpstream release-locations`` runs) with ``--w-event 24`` at epsilon = 1: any 24 consecutive
steps of a user at epsilon = 1, each step at 1/24 (a whole trajectory of 200 steps: 8.33), under
bounded neighbours (``n`` public, a user moves: noise scale 48 per cell) and unbounded ones (a
user's rows added or removed: scale 24; ``n`` estimated from the released counts).  Each
estimator of :mod:`dpstream.postprocess` reads the release's own noise model
(``LocationCounts.noise_model``: the scale drawn, the discrete Laplace law) and the public
matrix. The last row, ``prior alone``, is what the public knowledge gives without the release: ``n
P^t`` from a uniform ``P^1`` (with the release's estimate of ``n`` when unbounded): the data's
contribution is the gap between it and the estimators. MSE per cell against the true counts, mean
over ``--rounds`` noise draws (default 5, seeds 1..R) and the half-width of its 95 % t interval.

Run::

    PYTHONPATH=src python benchmarks/locations_study.py [--users 1000] [--locations 20] [--steps 200] [--rounds 5]
        [--epsilon 1] [--w-event 24] [--prior frequency|uniform]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from dpstream.datasets.trajectories import trajectories
from dpstream.postprocess import postprocess, prior_marginals
from dpstream.release.locations import LocationCounts, released_users

METHODS = ("mle", "map", "mean", "kalman", "smooth")


def release(data, neighbours: str, *, epsilon: float, window: int, seed: int) -> tuple[np.ndarray, LocationCounts]:
    """The noisy counts of every step, released from the rows (time, user, location) of ``data``."""
    steps, users = data.path.shape
    counts = LocationCounts(epsilon=epsilon, locations=data.locations, step=3600, neighbours=neighbours,
                            users=users if neighbours == "bounded" else None, w_event=window, seed=seed)
    times = np.repeat(np.arange(steps, dtype=np.int64) * 3600 * 10**9, users)
    out = counts.release(times, np.tile(data.users, steps), np.array(data.locations)[data.path].ravel())
    return np.concatenate((out.counts, counts.flush().counts)).astype(np.float64), counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--locations", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--w-event", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prior", choices=("frequency", "uniform"), default="frequency",
                        help="P^1 of the estimators (release-locations --prior; default its default)")
    args = parser.parse_args()
    data = trajectories(args.users, args.locations, args.steps, seed=0)
    truth = data.counts()
    results: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, float] = {}
    for neighbours in ("bounded", "unbounded"):
        for round_ in range(1, args.rounds + 1):
            noisy, counts = release(data, neighbours, epsilon=args.epsilon, window=args.w_event, seed=round_)
            results.setdefault(("raw", neighbours), []).append(float(np.mean((noisy - truth) ** 2)))
            users = counts.users if counts.bounded else released_users(noisy)
            alone = users * prior_marginals(noisy, data.matrix, "uniform")  # public knowledge only, no data
            results.setdefault(("prior alone", neighbours), []).append(float(np.mean((alone - truth) ** 2)))
            for method in METHODS:
                start = time.perf_counter()
                estimate = postprocess(noisy, data.matrix, users=users, method=method, prior=args.prior,
                                      **counts.noise_model())
                seconds[method] = seconds.get(method, 0.0) + time.perf_counter() - start
                results.setdefault((method, neighbours), []).append(float(np.mean((estimate.counts - truth) ** 2)))
    print(f"{args.users:,} users, {args.locations} locations, {args.steps} steps; w-event {args.w_event} at "
          f"epsilon = {args.epsilon:g} (each step {args.epsilon / args.w_event:.4g}); {args.prior} prior; "
          f"{args.rounds} rounds; "
          f"mean count per cell {truth.mean():.1f}")
    scales = {name: LocationCounts(epsilon=args.epsilon, locations=data.locations, step=3600, neighbours=name,
                                   users=args.users if name == "bounded" else None, w_event=args.w_event,
                                   seed=0).scale for name in ("bounded", "unbounded")}
    print(f"noise scale per cell: bounded {scales['bounded']:g}, unbounded {scales['unbounded']:g}")
    print("| method | MSE, bounded (n public) | MSE, unbounded (n estimated) | seconds per run |")
    print("|---|---|---|---|")
    for method in ("raw", *METHODS, "prior alone"):
        cells = []
        for neighbours in ("bounded", "unbounded"):
            values = np.array(results[method, neighbours])
            half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size) \
                if values.size > 1 else float("nan")
            cells.append(f"{values.mean():.1f} ± {half:.1f}")
        took = f"{seconds[method] / (2 * args.rounds):.2f}" if method in seconds else ""
        print(f"| {method} | {cells[0]} | {cells[1]} | {took} |")


if __name__ == "__main__":
    main()
