"""Time many keyed streams on Spark (``dpstream.spark.release_by_key``) against the local ``ByKey``.

Writes (once, into ``--data``) a Parquet table of ``--keys`` meters reporting ``--values`` readings
each, interleaved in time order (every meter's t-th reading before any meter's (t+1)-th), then
releases every meter's stream with ToPS (``--hold 1000 --max-range 8192`` as in the issue) on
Spark, and with ``--local`` also with the local keyed release, checking both give the same values.

    python benchmarks/keyed_streams_spark.py --keys 1000 --values 10000 --master 'local[2]' --local
    python benchmarks/keyed_streams_spark.py --keys 10000 --values 10000 --master 'local[2]'   # the issue's size
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from dpstream.release import ToPS
from dpstream.release.by_key import ByKey, key_bits, seed_secret

UPPER_BOUND = 100.0


def build(bits):
    return ToPS(epsilon=1.0, upper_bound=UPPER_BOUND, hold=1000, max_range=8192, seed=bits)


def generate(path: Path, keys: int, values: int, seed: int = 0) -> float:
    if path.exists():
        return 0.0
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    names = np.array([f"meter-{k:05d}" for k in range(keys)], dtype=object)
    level = rng.uniform(10, 60, keys)
    steps = max(1, (1 << 20) // keys)
    schema = pa.schema([("meter", pa.string()), ("kwh", pa.float64())])
    with pq.ParquetWriter(path, schema) as writer:
        for t in range(0, values, steps):
            n = min(steps, values - t)
            kwh = np.clip(np.round(np.tile(level, n) + rng.normal(0, 5, keys * n), 2), 0, UPPER_BOUND)
            writer.write_table(pa.table({"meter": np.tile(names, n), "kwh": kwh}, schema=schema))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--values", type=int, default=10_000)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--local", action="store_true", help="also run the local keyed release and compare")
    args = parser.parse_args(argv)
    path = args.data or Path(f"benchmark-keyed-{args.keys}x{args.values}.parquet")
    report = {"keys": args.keys, "values_per_key": args.values, "generate_s": round(generate(path, args.keys,
                                                                                                  args.values), 1)}
    secret = seed_secret(0)  # a benchmark: not published
    from dpstream.spark import make_session
    from dpstream.spark.by_key import release_by_key

    start = time.perf_counter()
    spark = make_session(args.master, {"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    report["spark_session_s"] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()
    target = path.with_name(path.stem + "-released")
    shutil.rmtree(target, ignore_errors=True)
    release_by_key(spark, path, key_column="meter", value_column="kwh", build=build, secret=secret, output=target)
    report["spark_release_s"] = round(time.perf_counter() - start, 1)
    spark.stop()
    out = ds.dataset(target).to_table().sort_by([("key", "ascending"), ("position", "ascending")])
    report["released"] = out.num_rows
    if args.local:
        start = time.perf_counter()
        streams = ByKey(build=lambda key: build(key_bits(secret, key)), max_keys=args.keys)
        parts = []
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 16):
            parts.append(streams.release(batch.column("kwh").to_numpy(), batch.column("meter").to_pylist()))
        report["local_release_s"] = round(time.perf_counter() - start, 1)
        keys = [key for part in parts for key in part.keys]
        positions = np.concatenate([part.positions for part in parts])
        values = np.concatenate([part.values for part in parts])
        order = sorted(range(len(keys)), key=lambda i: (keys[i], positions[i]))
        report["same_as_local"] = bool(np.array_equal(out["value"].to_numpy(), values[order]))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
