"""Source files of the streaming tests: keyed meter readings, a file at a time, with increasing modification times."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: The modification time of file 0; file i is ten seconds later per i (the order the query takes them in).
FIRST_MTIME = 1_700_000_000


def write_source(folder: Path, index: int, rng: np.random.Generator, *, rows: int = 120, keys: int = 6,
                 late: bool = False) -> Path:
    """File ``index`` of a source: ``meter,time,kwh`` rows whose epoch-second times lie in ``[1000 index, 1000 index
    + 100)``, shuffled (the query must sort them); repeated times (ties broken by the value) on purpose.  ``late``
    adds a row of meter m0 timed at the start of the previous file's range: late, since m0 had rows there."""
    meters = rng.integers(0, keys, rows)
    times = 1000 * index + rng.integers(0, 100, rows)
    values = np.round(rng.uniform(0, 5, rows), 2)
    lines = ["meter,time,kwh", *(f"m{m},{t},{v}" for m, t, v in zip(meters, times, values))]
    if late:
        lines.insert(1 + rows // 2, f"m0,{1000 * (index - 1)},4.5")
    target = folder / f"part-{index:03d}.csv"
    hidden = folder / f".part-{index:03d}.csv.tmp"  # written under a hidden name, then renamed into place
    hidden.write_text("\n".join(lines) + "\n")
    mtime = FIRST_MTIME + 10 * index
    os.utime(hidden, (mtime, mtime))
    hidden.rename(target)
    return target


def kill_at_random(command: list[str], sink: Path, log_path: Path) -> tuple[str, dict[str, str]]:
    """Run ``command`` (a streaming query's driver) in its own process group, wait for a random number (1-5) of the
    sink's batch files and a random delay, and kill it with SIGKILL (the driver, its JVM, its workers) while it runs.
    Returns where it was killed (for messages) and the environment a restart runs with."""
    import random
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([p for p in sys.path if p]), PYSPARK_PYTHON=sys.executable)
    with log_path.open("wb") as log:
        driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        chance = random.Random()
        batches, delay = chance.randint(1, 5), chance.uniform(0.0, 1.0)  # killed after this many batches and seconds
        deadline = time.monotonic() + 120
        while len(list(sink.glob("batch-*.csv"))) < batches and driver.poll() is None:
            assert time.monotonic() < deadline, f"the query wrote fewer than {batches} batches in 120 s"
            time.sleep(0.1)
        time.sleep(delay)
        assert driver.poll() is None, log_path.read_text()  # killed while it runs, not after
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    return f"kill after {batches} batches and {delay:.2f} s", env
