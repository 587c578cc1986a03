"""Exactly once: ``release --engine spark-streaming`` killed with SIGKILL at a random point (the driver and its own
JVM, not the test runner's session), then run again from its checkpoint while files keep arriving; the sink equals
the local engine's output for the same secret: nothing lost, nothing published twice, no value changed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

from dpstream.durable.keys import seed_key
from dpstream.release import BinaryTreeCounter
from dpstream.spark.streaming import read_sink
from dpstream.spark.streaming_rows import release_files
from streaming_helpers import write_source

SEED = 8


def _bt(key):
    return BinaryTreeCounter(epsilon=1.0, upper_bound=5.0, max_range=64, key=key)


def _command(root):
    return [sys.executable, "-m", "dpstream.cli", "release", str(root / "source"), "-o", str(root / "sink"),
            "--engine", "spark-streaming", "--spark-checkpoint", str(root / "checkpoint"), "--seed", str(SEED),
            "--method", "bt", "--epsilon", "1", "--upper-bound", "5", "--max-range", "64", "--key-column", "meter",
            "--time-column", "time", "--column", "kwh", "--files-per-batch", "1", "--available-now",
            "--spark-master", "local[2]", "--spark-conf", "spark.ui.enabled=false"]


def test_a_killed_query_continues_exactly_once(tmp_path):
    rng = np.random.default_rng(21)
    (tmp_path / "source").mkdir()
    paths = [write_source(tmp_path / "source", index, rng, late=index == 4) for index in range(8)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([p for p in sys.path if p]), PYSPARK_PYTHON=sys.executable)
    log = (tmp_path / "first.log").open("wb")
    driver = subprocess.Popen(_command(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=log,
                              start_new_session=True)  # its own process group: the driver, its JVM, its workers
    chance = random.Random()
    batches, delay = chance.randint(1, 5), chance.uniform(0.0, 1.0)  # killed after this many batches and seconds
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "sink").glob("batch-*.csv"))) < batches and driver.poll() is None:
        assert time.monotonic() < deadline, f"the query wrote fewer than {batches} batches in 120 s"
        time.sleep(0.1)
    time.sleep(delay)
    assert driver.poll() is None, (tmp_path / "first.log").read_text()  # killed while it runs, not after
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    log.close()
    before = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    assert before
    paths += [write_source(tmp_path / "source", index, rng) for index in range(8, 10)]  # files keep arriving
    again = subprocess.run(_command(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "\tat org.apache" not in again.stderr  # no stack trace
    assert "values released (batch-" in again.stderr and "micro-batches to" in again.stderr
    after = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    where = f"kill after {batches} batches and {delay:.2f} s"
    assert all(after[name] == data for name, data in before.items()), f"a published batch changed ({where})"
    assert len(after) == len(paths)  # one batch per file, each written once under its id
    sink = read_sink(tmp_path / "sink")  # raises if a key's position was published twice
    local = release_files(paths, key_column="meter", time_column="time", value_column="kwh", build=_bt,
                          secret=seed_key(SEED))
    assert sink.equals(local), where
