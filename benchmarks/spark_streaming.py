"""Time the streaming keyed release (``dpstream.spark.streaming``) in local mode: rows per second and state size.

Writes ``--keys`` meters x ``--values`` readings as ``--files`` CSV files (file f holds every
meter's readings of the f-th slice of time, so every micro-batch touches every key), then runs
the streaming query over them (``--files-per-batch`` files a micro-batch, ``availableNow``) with
ToPS per key at a public threshold (no hold-out: 100 readings are too few to choose one from;
a tree of 128 leaves), and reports wall time, rows per second, the checkpoint's size on disk
(its state store's share) and the size of one key's stored snapshot after all its values.

    python benchmarks/spark_streaming.py --keys 10000 --values 100 --files 10
    python benchmarks/spark_streaming.py --keys 100000 --values 100 --files 10   # the issue's size
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from dpstream.durable.keys import seed_key
from dpstream.release import ToPS
from dpstream.release.by_key import key_secret
from dpstream.spark.streaming_rows import save_stream

UPPER_BOUND = 5.0
FIRST = 1_704_067_200  # 2024-01-01T00:00:00Z


def build(key: bytes) -> ToPS:
    return ToPS(epsilon=1.0, upper_bound=UPPER_BOUND, threshold=2.0, max_range=128, key=key)


def generate(folder: Path, keys: int, values: int, files: int, seed: int = 0) -> float:
    """``files`` CSV files of ``meter,time,kwh``, rows of a file in time order, quarter-hour readings."""
    if folder.exists():
        return 0.0
    start = time.perf_counter()
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    names = np.array([f"meter-{k:06d}" for k in range(keys)], dtype=object)
    level = rng.uniform(0.2, 2.0, keys)
    per_file = -(-values // files)
    for index in range(files):
        steps = range(index * per_file, min(values, (index + 1) * per_file))
        times = np.repeat([FIRST + 900 * step for step in steps], keys)
        kwh = np.clip(np.round(np.tile(level, len(steps)) + rng.normal(0, 0.3, keys * len(steps)), 3), 0, UPPER_BOUND)
        lines = "\n".join(f"{m},{t},{v}" for m, t, v in zip(np.tile(names, len(steps)), times, kwh))
        hidden = folder / f".part-{index:04d}.csv"
        hidden.write_text("meter,time,kwh\n" + lines + "\n")
        os.utime(hidden, (FIRST + index, FIRST + index))
        hidden.rename(folder / f"part-{index:04d}.csv")
    return time.perf_counter() - start


def size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--values", type=int, default=100)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--files-per-batch", type=int, default=1)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)
    root = args.data or Path(f"benchmark-streaming-{args.keys}x{args.values}")
    report = {"keys": args.keys, "values_per_key": args.values, "files": args.files,
              "files_per_batch": args.files_per_batch, "rows": args.keys * args.values,
              "generate_s": round(generate(root / "source", args.keys, args.values, args.files), 1)}
    secret = seed_key(0)  # a benchmark: not published
    for name in ("sink", "checkpoint"):
        shutil.rmtree(root / name, ignore_errors=True)
    from dpstream.spark import make_session
    from dpstream.spark.streaming import read_sink, start_release, streaming_conf

    start = time.perf_counter()
    spark = make_session(args.master, streaming_conf({"spark.ui.enabled": "false", "spark.driver.memory": "2g"}))
    report["spark_session_s"] = round(time.perf_counter() - start, 1)
    batches: list[tuple[int, int, float]] = []
    start = time.perf_counter()
    query = start_release(spark, root / "source", sink=root / "sink", checkpoint=root / "checkpoint",
                          key_column="meter", time_column="time", value_column="kwh",
                          build=build, secret=secret,
                          files_per_batch=args.files_per_batch,
                          on_batch=lambda batch, rows: batches.append((batch, rows, time.perf_counter() - start)))
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = [event for event in query.recentProgress if event.get("numInputRows")]
    report["spark_ms"] = [{name: event["durationMs"].get(name) for name in ("addBatch", "walCommit", "commitOffsets",
                                                                              "queryPlanning", "triggerExecution")}
                          for event in progress]
    report["state_operator"] = [{name: event["stateOperators"][0].get(name) for name in (
        "numRowsTotal", "numRowsUpdated", "allUpdatesTimeMs", "commitTimeMs", "memoryUsedBytes")}
        for event in progress if event.get("stateOperators")]
    spark.stop()
    report.update(query_s=round(seconds, 1), rows_per_s=round(args.keys * args.values / seconds),
                  micro_batches=len(batches), released=read_sink(root / "sink").num_rows,
                  checkpoint_bytes=size(root / "checkpoint"), state_bytes=size(root / "checkpoint" / "state"),
                  batch_seconds=[round(b - a, 1) for a, b in zip([0.0, *[t for *_, t in batches]],
                                                                 [t for *_, t in batches])])
    # a key's stored snapshot after all its values (what the state store holds per key, before compression)
    stream = build(key_secret(secret, "meter-000000"))
    stream.release(np.clip(np.random.default_rng(1).normal(1.0, 0.3, args.values), 0, UPPER_BOUND))
    report["snapshot_bytes"] = len(json.dumps(save_stream(stream), separators=(",", ":")))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
