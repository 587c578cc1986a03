"""Time count-of-counts on the local engine and on Spark, and say where the time goes.

Generates (once, into ``--data``) the synthetic national housing tables of ``dpstream
generate-housing`` -- 1 nation, 50 states, 3,000 counties, about 2.5 persons per household --
then releases them with the top-down hc method at bound ``K`` on the engine asked for, and
prints the seconds of each stage and the peak memory of this process tree (this process, and
for Spark the JVM and its Python workers: the sum of their resident sets, sampled every 0.2 s
from ``/proc``).

    python benchmarks/count_of_counts_engines.py --engine local --n-groups 4000000
    python benchmarks/count_of_counts_engines.py --engine spark --n-groups 4000000 --master 'local[2]'
    # the issue's national case (100 M persons, 40 M households, K = 100,000): opt in with --full
    python benchmarks/count_of_counts_engines.py --engine local --full

Stages.  local: ``read`` (Parquet in batches, per-group counts: the group-by), ``truth`` (the
per-region histograms of every level), ``noise`` (the per-level estimates: keyed exact noise,
isotonic regression), ``consistency`` (matching, merging, back-substitution), ``write``.
spark: ``read``, ``check repeated ids``, ``check and group-by`` (the group counts, the
per-region histograms and the unknown groups and regions in one pass), ``level l: noise and
consistency`` (one task per parent region; the noise dominates), ``collect the leaves``.
Both engines release the same table for the same seed; the script checks it when both ran
into the same ``--data`` with ``--compare``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpstream.count_of_counts import TopDownCountOfCounts, housing_data, read_tables, write_tables
from dpstream.count_of_counts.consistency import CountOfCountsRelease, top_down

FULL = {"n_groups": 40_000_000, "max_size": 100_000}


class TreeMemory(threading.Thread):
    """Samples the summed resident memory of this process and all its descendants (Linux ``/proc``)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    @staticmethod
    def _sample() -> int:
        parent, rss = {}, {}
        page = os.sysconf("SC_PAGE_SIZE")
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * page
        mine, total = {os.getpid()}, 0
        changed = True
        while changed:
            changed = False
            for pid, ppid in parent.items():
                if ppid in mine and pid not in mine:
                    mine.add(pid)
                    changed = True
        for pid in mine:
            total += rss.get(pid, 0)
        return total

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, self._sample())


def _generate(folder: Path, n_groups: int, seed: int) -> float:
    if (folder / "entities.parquet").exists():
        return 0.0
    start = time.perf_counter()
    write_tables(housing_data(n_groups, seed=seed), folder, parquet=True)
    return time.perf_counter() - start


def _write(release: CountOfCountsRelease, path: Path) -> None:
    rows = release.rows()
    region, level, size, count = zip(*rows) if rows else ((), (), (), ())
    pa_csv.write_csv(pa.table({"region": region, "level": level, "size": size, "count": count}), path)


def _local(paths: list[Path], mechanism: TopDownCountOfCounts, out: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    start = time.perf_counter()
    data = read_tables(*paths)
    times["read (batches, per-group counts)"] = time.perf_counter() - start
    start = time.perf_counter()
    for level in range(data.tree.levels):
        data.truth(level)
    times["truth (per-region histograms)"] = time.perf_counter() - start
    start = time.perf_counter()
    estimates = mechanism.estimates(data)
    times["noise (estimates of every level)"] = time.perf_counter() - start
    start = time.perf_counter()
    release = CountOfCountsRelease(tree=data.tree, levels=top_down(data.tree, estimates, mechanism.merge),
                                   max_size=mechanism.max_size)
    times["consistency"] = time.perf_counter() - start
    start = time.perf_counter()
    _write(release, out)
    times["write"] = time.perf_counter() - start
    return times


def _spark(paths: list[Path], mechanism: TopDownCountOfCounts, out: Path, master: str, conf: dict[str, str]):
    from dpstream.spark import make_session, release_count_of_counts

    start = time.perf_counter()
    spark = make_session(master, {"spark.ui.enabled": "false", **conf})
    times = {"session start": time.perf_counter() - start}
    try:
        stages: dict[str, float] = {}
        release = release_count_of_counts(spark, mechanism, *paths, timings=stages)
        times.update(stages)
        start = time.perf_counter()
        _write(release, out)
        times["write"] = time.perf_counter() - start
    finally:
        spark.stop()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["local", "spark"], required=True)
    parser.add_argument("--n-groups", type=int, default=1_000_000)
    parser.add_argument("--max-size", type=int, default=100_000, help="public bound K")
    parser.add_argument("--full", action="store_true", help="the national case: 40 M households, K = 100,000")
    parser.add_argument("--data", type=Path, default=None, help="where the tables are (generated once)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true", help="check the other engine's output file is the same")
    args = parser.parse_args(argv)
    n_groups, max_size = (FULL["n_groups"], FULL["max_size"]) if args.full else (args.n_groups, args.max_size)
    folder = args.data or Path(f"benchmark-housing-{n_groups}")
    generated = _generate(folder, n_groups, args.seed)
    paths = [folder / f"{name}.parquet" for name in ("entities", "groups", "hierarchy")]
    mechanism = TopDownCountOfCounts(epsilon=1.0, max_size=max_size, seed=args.seed)  # a benchmark: not published
    out = folder / f"release-{args.engine}.csv"
    memory = TreeMemory()
    memory.start()
    start = time.perf_counter()
    if args.engine == "local":
        times = _local(paths, mechanism, out)
    else:
        conf = dict(item.split("=", 1) for item in args.conf)
        times = _spark(paths, mechanism, out, args.master, conf)
    total = time.perf_counter() - start
    memory.stop.set()
    memory.join()
    entities = pq.ParquetFile(paths[0]).metadata.num_rows
    report = {
        "engine": args.engine, "n_groups": n_groups, "max_size": max_size, "generate_s": round(generated, 1),
        "total_s": round(total, 1), "peak_rss_gib": round(memory.peak / 2**30, 2),
        "stages_s": {name: round(seconds, 2) for name, seconds in times.items()}, "entities": entities,
    }
    print(json.dumps(report, indent=2))
    other = folder / f"release-{'spark' if args.engine == 'local' else 'local'}.csv"
    if args.compare and other.exists():
        same = other.read_bytes() == out.read_bytes()
        print(f"same output as {other}: {same}")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
