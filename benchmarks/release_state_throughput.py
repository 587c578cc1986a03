"""Release throughput of ``dpstream release`` with ``--state FILE`` against without it.

Target: with ``--state`` (a checkpoint per batch of 65,536 values: the output flushed and
fsync'ed, then the state saved atomically) the release runs within 20% of the same release
without it.  Both use the secure default (no ``--seed``): the OS CSPRNG without ``--state``, the
keyed ChaCha20 source of the state's secret key with it.

Each command runs in this process (``dpstream``'s command group, no interpreter start-up) on a
text file of ``--values`` values, ``--rounds`` times, the two variants alternating; the median
wall-clock time of each is reported with the throughput in values per second, and the median CPU
time (on a busy machine the wall clock varies by more than the difference measured; the CPU time
leaves out the waits for fsync, which the wall clock includes).

Run::

    PYTHONPATH=src python benchmarks/release_state_throughput.py --values 2000000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from dpstream.cli import cli

METHODS = {
    "tops": ["--method", "tops"],
    "bt": ["--method", "bt"],
    "pak": ["--method", "pak"],
}


def run(args: list[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one command."""
    start, cpu = time.perf_counter(), time.process_time()
    cli.main([str(arg) for arg in args], standalone_mode=False)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--checkpoint-seconds", default=None, help="passed to release (default: its own)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        source = root / "in.txt"
        values = np.random.default_rng(1).gamma(2.0, 6.0, size=arguments.values).clip(0, 100).round(2)
        source.write_text("\n".join(f"{v:g}" for v in values) + "\n")
        print(f"{arguments.values:,} values, {arguments.rounds} rounds each, median seconds")
        print(f"{'method':8} {'plain s':>8} {'state s':>8} {'plain v/s':>12} {'state v/s':>12} {'slowdown':>9} "
              f"{'plain cpu':>9} {'state cpu':>9} {'cpu diff':>9}")
        extra = [] if arguments.checkpoint_seconds is None else ["--checkpoint-seconds", arguments.checkpoint_seconds]
        for method in arguments.methods.split(","):
            common = [source, "--epsilon", 1, "--upper-bound", 100, *METHODS[method]]
            plain, durable = [], []
            for round_ in range(arguments.rounds):
                name = f"{method}{round_}"
                plain.append(run(["release", *common, "-o", root / f"plain-{name}.txt"]))
                durable.append(run(["release", *common, "-o", root / f"durable-{name}.txt", "--state",
                                    root / f"state-{name}", *extra]))
            a, b = (statistics.median(wall for wall, _ in runs) for runs in (plain, durable))
            c, d = (statistics.median(cpu for _, cpu in runs) for runs in (plain, durable))
            print(f"{method:8} {a:8.2f} {b:8.2f} {arguments.values / a:12,.0f} {arguments.values / b:12,.0f} "
                  f"{b / a - 1:+9.1%} {c:9.2f} {d:9.2f} {d / c - 1:+9.1%}")


if __name__ == "__main__":
    main()
