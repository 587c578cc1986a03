"""The banded square-root factorization against the binary tree and the chunked square-root factorization on a
long horizon, under the same rho: exact variances per query family, real releases, speed and memory.

Continual counting at event level (values in [0, 1]) over ``T`` values, Gaussian noise at the same rho:

* ``bt-zcdp``: the binary tree over the horizon (``max_range = T``; no consistency step);
* ``sqrt-zcdp n``: the square-root factorization on chunks of ``n`` values (a fresh one per chunk);
* ``banded-zcdp b``: the banded factorization with band ``b``, one measurement of the whole stream.

Query families (``--queries`` of each, positions uniform over the horizon): prefix sums from the start;
random ranges of length uniform in [1, 4096] and in [1, T]; windows of 64 and of 1,024 values.  The
variances are the mechanisms' own exact standard errors squared (vectorised), averaged over the queries;
``--runs`` releases of a stream of zeros measure the mean squared error of the same queries (the noise's
own error, no clipping).  Speed: values released per second (one batch of ``T``); memory: the peak of
the Python heap while releasing in batches of 4,096 with a key (tracemalloc), and the size of a keyed JSON
snapshot taken inside a block.

``--plot FILE`` draws the mean exact standard deviation of a range's noise against its length (log-log,
``--queries`` random starts per length), one line per mechanism.

``--stability`` prints the inverse series' tail of the banded encoder with strictly decreasing integer
coefficients and with ties (fewer bits), the check behind the stability rule of
:mod:`dpstream.release.banded`.

Run::

    PYTHONPATH=src python benchmarks/banded_study.py [--horizon 262144] [--queries 2000] [--runs 3] [--stability]
        [--plot banded_study.png]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np

from dpstream.durable.encoding import encode
from dpstream.release.banded import BandedFactorization, inverse_series
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.factorization import SqrtFactorization, integer_coefficients

RHO = 0.5


def mechanisms(horizon: int) -> dict[str, object]:
    """Each compared mechanism by name, built from its noise keywords (seed= or key=)."""
    return {
        "bt-zcdp": lambda **noise: BinaryTreeCounter(rho=RHO, upper_bound=1.0, max_range=horizon, **noise),
        "sqrt-zcdp 4096": lambda **noise: SqrtFactorization(rho=RHO, upper_bound=1.0, max_range=4096, **noise),
        "sqrt-zcdp 65536": lambda **noise: SqrtFactorization(rho=RHO, upper_bound=1.0, max_range=65536, **noise),
        "banded-zcdp 1024": lambda **noise: BandedFactorization(rho=RHO, upper_bound=1.0, max_range=1024, **noise),
        "banded-zcdp 4096": lambda **noise: BandedFactorization(rho=RHO, upper_bound=1.0, max_range=4096, **noise),
        "banded-zcdp 16384": lambda **noise: BandedFactorization(rho=RHO, upper_bound=1.0, max_range=16384, **noise),
    }


def queries(horizon: int, count: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The query families as ``(starts, stops)``."""
    def ranges(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = (rng.random(count) * (horizon - lengths + 1)).astype(np.int64)
        return starts, starts + lengths

    return {
        "prefix sums": (np.zeros(count, dtype=np.int64), rng.integers(1, horizon + 1, count)),
        "ranges <= 4096": ranges(rng.integers(1, 4097, count)),
        "ranges <= T": ranges(rng.integers(1, horizon + 1, count)),
        "windows of 64": ranges(np.full(count, 64)),
        "windows of 1024": ranges(np.full(count, 1024)),
    }


def exact_variances(mechanism: object, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The exact variance of each range's noise (the tree's ranges one by one, the factorizations vectorised)."""
    if isinstance(mechanism, BinaryTreeCounter) and not hasattr(mechanism, "range_standard_errors"):
        return np.array([mechanism.range_standard_error(int(a), int(c)) ** 2 for a, c in zip(starts, stops)])
    return mechanism.range_standard_errors(starts, stops) ** 2


def measured(make, families, horizon: int, runs: int) -> dict[str, float]:
    """The mean squared error of each family over ``runs`` releases of zeros."""
    errors = {name: 0.0 for name in families}
    for seed in range(runs):
        prefix = np.concatenate(([0.0], np.cumsum(make(seed=seed).release(np.zeros(horizon)))))
        for name, (starts, stops) in families.items():
            errors[name] += float(np.mean((prefix[stops] - prefix[starts]) ** 2)) / runs
    return errors


def cost(make, horizon: int) -> tuple[float, float, int]:
    """Values per second (one batch, seeded), the heap's peak in MiB releasing in batches of 4,096 (keyed, as durable
    releases run), and the bytes of a keyed snapshot taken inside a block or chunk."""
    mechanism = make(seed=0)
    start = time.perf_counter()
    mechanism.release(np.zeros(horizon))
    speed = horizon / (time.perf_counter() - start)
    mechanism = make(key=bytes(32))
    zeros = np.zeros(4096)
    tracemalloc.start()
    for _ in range(min(horizon, 1 << 16) // 4096):
        mechanism.release(zeros)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    mechanism.release(zeros[:1000])
    return speed, peak, len(json.dumps(encode(mechanism.state, "state")))


def stability() -> None:
    """The inverse series' tail (max |s D_k| per range of k) with strictly decreasing coefficients and with ties."""
    print("band  bits  coefficients          max |s D_k| for k in [2^10,2^12) [2^14,2^16) [2^16,2^18) [2^18,2^20)")
    for band, bits in ((1024, 17), (1024, 12), (4096, 20), (4096, 15), (4096, 13), (16384, 23), (16384, 18)):
        c = integer_coefficients(band, bits).astype(np.float64)
        d = np.abs(inverse_series(c, 1 << 20)) * c[0]
        tails = [np.max(d[lo:hi]) for lo, hi in ((1 << 10, 1 << 12), (1 << 14, 1 << 16), (1 << 16, 1 << 18),
                                                 (1 << 18, 1 << 20))]
        strict = "strictly decreasing" if np.all(np.diff(c) < 0) else f"{int(np.sum(np.diff(c) == 0))} ties"
        print(f"{band:5d} {bits:5d}  {strict:20s}  " + "  ".join(f"{t:.2e}" for t in tails)
              + f"   sum s^2 D^2 = {np.sum(d**2):.4f}")


def plot(path: str, makers: dict[str, object], horizon: int, count: int, rng: np.random.Generator) -> None:
    """The mean exact standard deviation of a range's noise against the range's length, per mechanism."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = np.unique(np.geomspace(1, horizon, 28).astype(np.int64))
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for name, make in makers.items():
        mechanism = make(seed=0)
        sd = []
        for length in lengths:
            starts = (rng.random(count) * (horizon - length + 1)).astype(np.int64)
            sd.append(float(np.sqrt(np.mean(exact_variances(mechanism, starts, starts + length)))))
        axes.plot(lengths, sd, marker="o", markersize=3, label=name, linestyle="--" if name == "bt-zcdp" else "-")
    axes.set(xscale="log", yscale="log", xlabel="range length (values)",
             ylabel="standard deviation of the range's noise",
             title=f"Ranges at a random place in {horizon:,} values, rho = {RHO}, values in [0, 1]")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1 << 18)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stability", action="store_true")
    parser.add_argument("--plot", default=None, help="draw each mechanism's range error against the range's length")
    args = parser.parse_args(argv)
    if args.stability:
        stability()
        return
    horizon, rng = args.horizon, np.random.default_rng(0)
    families = queries(horizon, args.queries, rng)
    makers = mechanisms(horizon)
    if args.plot:
        plot(args.plot, makers, horizon, min(args.queries, 50), rng)
        return
    table: dict[str, dict[str, float]] = {}
    for name, make in makers.items():
        mechanism = make(seed=0)
        table[name] = {family: float(np.mean(exact_variances(mechanism, *q))) for family, q in families.items()}
    tree = table["bt-zcdp"]
    print(f"T = {horizon:,}, rho = {RHO}, values in [0, 1]; mean exact variance per query family "
          f"({args.queries} queries each), and the tree's variance over it (x)")
    print(f"{'mechanism':18s}" + "".join(f"{family:>24s}" for family in families))
    for name, row in table.items():
        print(f"{name:18s}" + "".join(f"{row[f]:13.4g} ({tree[f] / row[f]:5.2f}x)" for f in families))
    if args.runs:
        print(f"\nmeasured / exact over {args.runs} releases of zeros")
        for name, make in makers.items():
            got = measured(make, families, horizon, args.runs)
            print(f"{name:18s}" + "".join(f"{got[f] / table[name][f]:24.3f}" for f in families))
    print("\nspeed and memory")
    for name, make in makers.items():
        speed, peak, snapshot = cost(make, horizon)
        print(f"{name:18s} {speed:12,.0f} values/s   heap peak {peak:7.2f} MiB   snapshot {snapshot:9,d} bytes")


if __name__ == "__main__":
    main()
