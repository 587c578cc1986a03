"""Commit latency of ``dpstream release - --state FILE`` on stdin, and its throughput against without ``--state``.

With ``--state`` a value read from stdin is published (written to the output) only once the
state that covers it is saved: at the first commit after it, at most ``--checkpoint-seconds``
after the previous commit plus the time of a save, even if stdin pauses.  This measures that
bound: a producer writes one value every ``--gap`` seconds (a slow stream: each value waits for
the commit thread) and then ``--burst`` values at once (a fast one: grouped commits); for every
value, the time from its write into the pipe to the moment its line is in the output file
(polled every millisecond).  Then ``--values`` values are piped through the release with and
without ``--state`` (``--method bt``: every value gives a line).

Run::

    PYTHONPATH=src python benchmarks/commit_latency.py [--checkpoint-seconds 1] [--values 2000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPTIONS = ["--method", "bt", "--epsilon", "1", "--upper-bound", "100", "--max-range", "4096"]


def _command(*args: object) -> list[str]:
    return [sys.executable, "-m", "dpstream.cli", "release", *[str(arg) for arg in args]]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def latencies(folder: Path, *, checkpoint: str, slow: int, gap: float, burst: int) -> list[float]:
    """Seconds from each value's write to its line in the output."""
    out = folder / "latency.txt"
    run = subprocess.Popen(_command("-", "-o", out, "--state", folder / "latency.state", *OPTIONS,
                                    "--checkpoint-seconds", checkpoint),
                           stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    waits = []
    try:
        for index in range(slow):
            sent = time.perf_counter()
            run.stdin.write(f"{index % 100}\n".encode())
            run.stdin.flush()
            while _lines(out) <= index:
                time.sleep(0.001)
            waits.append(time.perf_counter() - sent)
            time.sleep(gap)
        sent = time.perf_counter()
        run.stdin.write("".join(f"{index % 100}\n" for index in range(burst)).encode())
        run.stdin.flush()
        while _lines(out) < slow + burst:
            time.sleep(0.001)
        waits.append(time.perf_counter() - sent)
    finally:
        run.stdin.close()
        run.wait(timeout=600)
    return waits


def throughput(folder: Path, values: int, *, state: bool) -> float:
    """Seconds to release ``values`` values piped on stdin."""
    data = "".join(f"{index % 100}\n" for index in range(values)).encode()
    out = folder / f"through-{state}.txt"
    extra = ["--state", folder / "through.state"] if state else ["--force"]
    start = time.perf_counter()
    subprocess.run(_command("-", "-o", out, *OPTIONS, *extra), input=data, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-seconds", default="1")
    parser.add_argument("--slow", type=int, default=21)
    parser.add_argument("--gap", type=float, default=0.3)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--values", type=int, default=2_000_000)
    arguments = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1] / "src"))
    with tempfile.TemporaryDirectory() as folder:
        waits = latencies(Path(folder), checkpoint=arguments.checkpoint_seconds, slow=arguments.slow,
                          gap=arguments.gap, burst=arguments.burst)
        slow = waits[1:-1]  # the first value waits for the interpreter to start too
        print(f"--checkpoint-seconds {arguments.checkpoint_seconds}: one value every {arguments.gap} s: latency "
              f"median {statistics.median(slow):.3f} s, max {max(slow):.3f} s; a burst of {arguments.burst:,} "
              f"values: all out after {waits[-1]:.3f} s")
        plain = throughput(Path(folder), arguments.values, state=False)
        durable = throughput(Path(folder), arguments.values, state=True)
        print(f"stdin, {arguments.values:,} values: {plain:.2f} s without --state, {durable:.2f} s with "
              f"({durable / plain - 1:+.1%})")


if __name__ == "__main__":
    main()
