"""Utility of exact noise against the float path, measured: ToPS's hierarchy on POS over many rounds.

Run from the repository root (about 20 s per 100 rounds on one core)::

    PYTHONPATH=src python benchmarks/exact_noise_utility.py --rounds 200

Setting: the first 2^20 values after a hold-out of 65,536 POS values, theta the true 95th
percentile of the hold-out (fixed, so that only the hierarchy's noise differs), r = 2^20, b = 16,
s of Eq. 7.  Each round releases the same stream twice, with exact noise on the default grid
(2^-10 for B = 1657; seeded, one seed per round) and with the float path (``FloatNoise``), and
answers the same 2,000 random range queries from both.  Printed per epsilon: the mean squared
error of each path over the rounds, their ratio with a 95% confidence interval (delta method on
two independent means), and the analytic ratio of ``tests/test_tops.py`` (discrete Laplace
variance of the rounded-up scale plus the rounding of values, over the float Laplace variance).
The empirical ratio should contain the analytic one.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from dpstream import HierarchicalPerturber, load_dataset
from dpstream.evaluation import extend_stream
from dpstream.evaluation.metrics import prefix_range_sums, random_queries
from dpstream.noise import FloatNoise
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.thresholds import true_percentile

HOLD, RANGE = 65536, 2**20


def leaf_variance_factor(fanout: int, levels: int) -> float:
    """[(X^T X)^-1]_jj of a full tree of ``levels`` measured levels (see tests/test_tops.py)."""
    inverse = [(fanout - 1) / (fanout ** (m + 1) - 1) for m in range(levels)]
    return sum((inverse[m] - (inverse[m - 1] if m else 0.0)) / fanout**m for m in range(levels))


def analytic_ratio(perturber: HierarchicalPerturber, theta: float, epsilon: float) -> float:
    g, measured = perturber.granularity, perturber.measured_levels
    v = leaf_variance_factor(perturber.fanout, measured)
    exact = v * laplace_units_variance(perturber.noise_scale_units) * g**2 + perturber.block_size * g**2 / 12
    return exact / (v * 2 * (theta * measured / epsilon) ** 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    args = parser.parse_args(argv)
    data = load_dataset("pos")
    values, _ = extend_stream(data.values, HOLD + RANGE)
    theta = true_percentile(values[:HOLD], 95.0)
    stream = np.minimum(values[HOLD:], theta)
    print(f"POS, B = {data.upper_bound:g}, theta = p95 of the hold-out = {theta:g}, r = 2^20, "
          f"{args.rounds} rounds x {args.queries} range queries")
    print(f"{'eps':>5} {'s':>2} {'MSE exact':>12} {'MSE float':>12} {'ratio':>7} {'95% CI':>17} {'analytic':>9} "
          f"{'inside':>6} {'seconds':>7}")
    inside_all = True
    for epsilon in args.epsilons:
        start = time.perf_counter()
        rng = np.random.default_rng(1)
        exact_mse, float_mse = [], []
        for round_index in range(args.rounds):
            queries = random_queries(rng, stream.size, args.queries)
            truth = prefix_range_sums(stream, queries)
            exact = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=RANGE, seed=10_000 + round_index)
            floats = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=RANGE, noise=FloatNoise(rng=rng))
            exact_mse.append(float(np.mean((prefix_range_sums(exact.release(stream), queries) - truth) ** 2)))
            float_mse.append(float(np.mean((prefix_range_sums(floats.release(stream), queries) - truth) ** 2)))
        e, f = np.array(exact_mse), np.array(float_mse)
        ratio = e.mean() / f.mean()
        spread = ratio * math.sqrt(e.var(ddof=1) / (e.size * e.mean() ** 2) + f.var(ddof=1) / (f.size * f.mean() ** 2))
        low, high = ratio - 1.96 * spread, ratio + 1.96 * spread
        predicted = analytic_ratio(exact, theta, epsilon)
        inside = low <= predicted <= high
        inside_all &= inside
        print(f"{epsilon:>5g} {exact.smoothed_levels:>2} {e.mean():>12.5g} {f.mean():>12.5g} {ratio:>7.4f} "
              f"[{low:.4f}, {high:.4f}] {predicted:>9.6f} {str(inside):>6} {time.perf_counter() - start:>7.1f}")
    return 0 if inside_all else 1


if __name__ == "__main__":
    sys.exit(main())
