"""Exactly once: ``release --engine spark-streaming`` killed with SIGKILL at a random point (the driver and its own
JVM, not the test runner's session), then run again from its checkpoint while files keep arriving; the sink equals
the local engine's output for the same secret: nothing lost, nothing published twice, no value changed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from dpstream.durable.keys import seed_key
from dpstream.release import BinaryTreeCounter
from dpstream.spark.streaming import read_sink
from dpstream.spark.streaming_rows import release_files
from streaming_helpers import kill_at_random, write_source

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
    where, env = kill_at_random(_command(tmp_path), tmp_path / "sink", tmp_path / "first.log")
    before = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    assert before
    paths += [write_source(tmp_path / "source", index, rng) for index in range(8, 10)]  # files keep arriving
    again = subprocess.run(_command(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "\tat org.apache" not in again.stderr  # no stack trace
    assert "values released (batch-" in again.stderr and "micro-batches to" in again.stderr
    after = {path.name: path.read_bytes() for path in (tmp_path / "sink").glob("batch-*.csv")}
    assert all(after[name] == data for name, data in before.items()), f"a published batch changed ({where})"
    assert len(after) == len(paths)  # one batch per file, each written once under its id
    sink = read_sink(tmp_path / "sink")  # raises if a key's position was published twice
    local = release_files(paths, key_column="meter", time_column="time", value_column="kwh", build=_bt,
                          secret=seed_key(SEED))
    assert sink.equals(local), where
