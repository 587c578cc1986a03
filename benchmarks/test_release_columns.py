"""``dpstream release --time-column --key-column --missing skip`` on a 2-million-row smart-meter CSV.

Run with ``make bench`` (``pytest benchmarks --benchmark-only``).  The CSV (time, meter, kWh;
20 meters reading once a minute, 0.1% of readings ``NA``) is generated here, piped through
stdin to stdout (the live path: each row released as it arrives) and read as a file (the batch
path: each key's rows of a 65,536-row batch released in one call).  ``extra_info`` reports rows
per second and the child's peak resident set (VmHWM); the peak of the 2-million-row run is
checked against a run with half the rows: it must not grow with the rows.  (From a file the peak
settles over the first ten batches or so, as pyarrow's and Python's allocators reach their sizes:
the smaller run has fifteen.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROWS, METERS, BOUND = 2_000_000, 20, 5.0
#: The rows of the smaller run.
SMALL = ROWS // 2

_CHILD = """import atexit, sys
peak = sys.argv.pop(1)
atexit.register(lambda: open(peak, "w").write(open("/proc/self/status").read()))
from dpstream.cli import main
main()
"""


def _smart_meter_csv(path: Path, rows: int) -> Path:
    rng = np.random.default_rng(rows)
    start = np.datetime64("2026-01-01T00:00")
    with open(path, "w") as handle:
        handle.write("time,meter,kWh\n")
        for first in range(0, rows, 100_000):
            index = np.arange(first, min(rows, first + 100_000))
            times = (start + (index // METERS) * np.timedelta64(1, "m")).astype(str)
            meter = np.char.add("meter-", (index % METERS).astype(str))
            kwh = np.round(rng.gamma(2.0, 0.4, index.size).clip(0, BOUND), 3).astype(str).astype(object)
            kwh[rng.random(index.size) < 0.001] = "NA"
            handle.write("".join(f"{t},{m},{v}\n" for t, m, v in zip(times.tolist(), meter.tolist(), kwh.tolist())))
    return path


@pytest.fixture(scope="module")
def meters(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("meters")
    return {rows: _smart_meter_csv(root / f"{rows}.csv", rows) for rows in (SMALL, ROWS)}


def _release(source: Path, *, stdin: bool, hold: int) -> int:
    """Run one release; return its peak resident set in kB."""
    status = source.with_suffix(f".{stdin}.status")
    command = [sys.executable, "-c", _CHILD, str(status), "release", "-" if stdin else str(source), "-o", "-",
               "--time-column", "time", "--key-column", "meter", "--missing", "skip", "--epsilon", "1",
               "--upper-bound", str(BOUND), "--hold", str(hold), "--seed", "1"]
    with open(source) as handle:
        subprocess.run(command, stdin=handle if stdin else subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(SRC)}, check=True)
    line = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1])


@pytest.mark.parametrize("stdin", [True, False], ids=["stdin", "file"])
def test_smart_meter_release(benchmark, meters, stdin):
    hold = 4096  # each meter completes its hold-out in both runs (50,000 and 100,000 rows per meter)
    small = _release(meters[SMALL], stdin=stdin, hold=hold)
    peak = benchmark.pedantic(lambda: _release(meters[ROWS], stdin=stdin, hold=hold), rounds=1, iterations=1)
    benchmark.extra_info.update(rows_per_second=ROWS / benchmark.stats.stats.median, peak_kb=peak,
                                peak_kb_half_rows=small)
    assert peak - small < 8 * 1024  # constant in the rows (8 MiB of allocator noise)
