"""``dpstream release`` end to end against pyarrow reading and writing the same data, before and after a change.

Run from the repository: ``python benchmarks/text_io_speed.py --before REV`` (REV a commit, such as the one
before the vectorized text I/O; without it only the working tree is measured).  It writes into a temporary
directory (``--dir`` to keep the files):

* a one-column CSV of ``--values`` readings (two decimals) and a CSV ``time,meter,kWh`` of ``--rows`` rows
  over ``--keys`` meters, one reading a minute each;
* pyarrow's time to read each file (``pyarrow.csv.read_csv``, the texts as strings) and to write a table of
  the release's shape (``value``; ``key,position,time,value``) with ``pyarrow.csv.write_csv``: the reference;
* the wall time and peak resident set of ``dpstream release`` (one stream, ``--hold 65536``; keyed with
  ``--key-column meter --time-column time --hold 512``; ``--seed 1``) with the source of REV and of the
  working tree, checking that both write the same bytes;
* tracemalloc's memory per key of ToPS on 2,880 values (a month of 15-minute readings, ``--hold 96``),
  with and without ``query_length=96``.

The targets: one stream within 3x, keyed within 5x the pyarrow reference.  The machine's other load
shows in wall times: run it on a quiet machine, and compare the rounds (``--rounds``, best of).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

_MEMORY = """
import sys, tracemalloc
import numpy as np
from dpstream import ToPS
keys, query_length = int(sys.argv[1]), None if sys.argv[2] == "none" else int(sys.argv[2])
rng = np.random.default_rng(0)
streams = [rng.gamma(2.0, 0.4, 2880).clip(0, 5) for _ in range(keys)]
ToPS(epsilon=0.05, upper_bound=5.0, hold=96, query_length=query_length, seed=keys).release(streams[0])  # imports
tracemalloc.start()
kept = []
for key, values in enumerate(streams):
    tops = ToPS(epsilon=0.05, upper_bound=5.0, hold=96, query_length=query_length, seed=key)
    tops.release(values)
    kept.append(tops)
print(tracemalloc.get_traced_memory()[0] / keys / 2**20)
"""


def _write_inputs(directory: Path, values: int, rows: int, keys: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    single, keyed = directory / "single.csv", directory / "keyed.csv"
    with open(single, "w") as handle:
        handle.write("value\n")
        for start in range(0, values, 1_000_000):
            chunk = np.round(rng.gamma(2.0, 300.0, min(1_000_000, values - start)).clip(0, 1657), 2)
            handle.write("\n".join(map(repr, chunk.tolist())) + "\n")
    begin = np.datetime64("2026-01-01T00:00")
    with open(keyed, "w") as handle:
        handle.write("time,meter,kWh\n")
        for start in range(0, rows, 500_000):
            index = np.arange(start, min(rows, start + 500_000))
            times = (begin + (index // keys) * np.timedelta64(1, "m")).astype(str).tolist()
            meters = np.char.add("meter-", (index % keys).astype(str)).tolist()
            kwh = np.round(rng.gamma(2.0, 0.4, index.size).clip(0, 5), 3).tolist()
            handle.write("".join(f"{t},{m},{v!r}\n" for t, m, v in zip(times, meters, kwh)))
    return single, keyed


def _pyarrow_reference(single: Path, keyed: Path, out: Path) -> dict[str, float]:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    noise = np.random.default_rng(1)
    start = time.perf_counter()
    table = pa_csv.read_csv(single)
    values = table.column("value").to_numpy() + noise.normal(0, 3, table.num_rows)
    pa_csv.write_csv(pa.table({"value": values}), out)
    one = time.perf_counter() - start
    start = time.perf_counter()
    types = pa_csv.ConvertOptions(column_types={"time": pa.string(), "meter": pa.string(), "kWh": pa.float64()})
    table = pa_csv.read_csv(keyed, convert_options=types)
    values = table.column("kWh").to_numpy() + noise.normal(0, 3, table.num_rows)
    pa_csv.write_csv(pa.table({"key": table.column("meter"), "position": np.arange(table.num_rows),
                               "time": table.column("time"), "value": values}), out)
    return {"single": one, "keyed": time.perf_counter() - start}


#: The command, telling its peak resident set (VmHWM, reset by exec: not the benchmark's own) into a file.
_CHILD = """import atexit, sys
peak = sys.argv.pop(1)
atexit.register(lambda: open(peak, "w").write(open("/proc/self/status").read()))
from dpstream.cli import main
main()
"""


def _run(source: Path, arguments: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one ``dpstream release`` run on the source tree ``source``."""
    status = Path(tempfile.mktemp(suffix=".status"))
    command = [sys.executable, "-c", _CHILD, str(status), "release", *arguments]
    start = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(source)}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-2000:]}")
    peak = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    status.unlink()
    return seconds, int(peak.split()[1]) / 1024


def _memory_per_key(source: Path, query_length: str, keys: int = 20) -> float:
    result = subprocess.run([sys.executable, "-c", _MEMORY, str(keys), query_length], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(source)}, check=True)
    return float(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="a commit to compare with (its src/ is exported with git archive)")
    parser.add_argument("--values", type=int, default=20_000_000)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None)
    options = parser.parse_args()
    directory = options.dir or Path(tempfile.mkdtemp(prefix="dpstream-io-"))
    directory.mkdir(parents=True, exist_ok=True)
    single, keyed = directory / "single.csv", directory / "keyed.csv"
    if not (single.exists() and keyed.exists()):
        _write_inputs(directory, options.values, options.rows, options.keys)
    trees = {"after": ROOT / "src"}
    if options.before:
        export = directory / "before"
        export.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", options.before, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(export)], input=archive, check=True)
        trees = {"before": export / "src", **trees}
    common = ["--epsilon", "1", "--seed", "1", "--force"]
    cases = {
        "single": [str(single), "--upper-bound", "1657", "--hold", "65536", *common],
        "keyed": [str(keyed), "--key-column", "meter", "--time-column", "time", "--column", "kWh", "--upper-bound",
                  "5", "--hold", "512", *common],
    }
    reference = min((_pyarrow_reference(single, keyed, directory / "pyarrow.csv") for _ in range(options.rounds)),
                    key=lambda found: sum(found.values()))
    targets = {"single": 3, "keyed": 5}
    print(f"{'case':8} {'pyarrow s':>10} " + " ".join(f"{name + ' s':>10} {name + ' MB':>10} {'x pyarrow':>9}"
                                                       for name in trees) + "  target")
    for case, arguments in cases.items():
        cells, outputs = [], []
        for name, source in trees.items():
            out = directory / f"{case}-{name}.csv"
            runs = [_run(source, [*arguments, "-o", str(out)]) for _ in range(options.rounds)]
            seconds, peak = min(runs)
            cells.append(f"{seconds:10.2f} {peak:10.0f} {seconds / reference[case]:9.2f}")
            outputs.append(out.read_bytes())
        same = "" if len(outputs) == 1 else ("  same bytes" if outputs[0] == outputs[1] else "  BYTES DIFFER")
        print(f"{case:8} {reference[case]:10.2f} " + " ".join(cells) + f"  {targets[case]}x{same}")
    print("\nToPS memory per key (MB, tracemalloc; 2,880 values, hold 96, B = 5, epsilon 0.05):")
    for query_length in ("none", "96"):
        cells = " ".join(f"{name}: {_memory_per_key(source, query_length):.3f}" for name, source in trees.items())
        print(f"  query_length {query_length:>4}  {cells}")


if __name__ == "__main__":
    main()
