"""What a checkpoint of ``release --state --key-column`` costs with many keys.

A keyed state holds every key's mechanism snapshot (each key in ``key=`` mode: the snapshot
leaves the tree noise out, a restored key recomputes it), so its size grows with the keys.  For
``--keys`` keys (default 1,000) fed ``--rows`` rows in one batch, this reports per method the
time to take the snapshot (:func:`dpstream.durable.snapshots.keyless`), to save the state
(:meth:`StreamState.save`: encode, write, fsync, rename), the file's size, the time to open it
again and to restore every key's mechanism from it (what a resumed run does first); once after
every key's hold-out (``--hold``, small) and once for ToPS inside the default hold-out of 65,536
values, where each key keeps its raw held-out values (8 bytes each).

``release`` checkpoints at most once per batch of 65,536 rows and at most once every
``--checkpoint-seconds`` (default 1 s), so a save of t seconds costs at most t per second of run.

Run::

    PYTHONPATH=src python benchmarks/keyed_state_checkpoint.py --keys 1000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from dpstream.durable import Progress, StreamState
from dpstream.durable.keys import seed_key
from dpstream.durable.release import per_key, restore
from dpstream.durable.snapshots import keyless
from dpstream.noise.bits import KeyedBits
from dpstream.release import PAK, BinaryTreeCounter, ToPL, ToPS


def builders(hold: int) -> dict[str, object]:
    common = {"epsilon": 1.0, "upper_bound": 100.0, "max_range": 65536}
    return {
        "tops": lambda key: ToPS(**common, hold=hold, key=key),
        "bt": lambda key: BinaryTreeCounter(**common, key=key),
        "pak": lambda key: PAK(**common, hold=hold, key=key),
        "topl": lambda key: ToPL(**common, hold=hold, seed=KeyedBits(key=key, identity=("topl",))),
    }


def measure(name: str, build, *, keys: int, rows: int, rounds: int = 3) -> str:
    rng = np.random.default_rng(0)
    streams = per_key(build, keys)(seed_key(1))
    names = [f"meter-{k}" for k in rng.permutation(np.arange(rows) % keys)]
    streams.release(rng.gamma(2.0, 6.0, rows).clip(0, 100), names)
    folder = tempfile.mkdtemp()
    snapshot_times, save_times = [], []
    with StreamState.create(f"{folder}/state", params={"method": name}) as state:
        for round_ in range(rounds):
            start = time.perf_counter()
            state.mechanism = keyless(streams.state)
            taken = time.perf_counter()
            state.progress = Progress(consumed=round_ + 1)
            state.save()
            snapshot_times.append(taken - start)
            save_times.append(time.perf_counter() - taken)
    size = os.path.getsize(f"{folder}/state")
    start = time.perf_counter()
    with StreamState.open(f"{folder}/state") as state:
        opened = time.perf_counter()
        restored = restore(state.mechanism, seed_key(1), per_key(build, keys)(seed_key(1)))
        done = time.perf_counter()
    assert restored.position == rows
    return (f"{name:<22} {len(streams):>6,} keys {rows:>10,} rows: snapshot {min(snapshot_times) * 1e3:6.1f} ms, "
            f"save {min(save_times) * 1e3:6.1f} ms, file {size / 1e6:6.2f} MB, open {(opened - start) * 1e3:6.1f} ms, "
            f"restore {(done - opened) * 1e3:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--hold", type=int, default=200, help="hold-out of each key (after it: the small state)")
    parser.add_argument("--methods", nargs="+", default=["tops", "bt", "pak", "topl"])
    args = parser.parse_args()
    rows = 400 * args.keys
    for name, build in builders(args.hold).items():
        if name in args.methods:
            print(measure(f"{name} after hold-out", build, keys=args.keys, rows=rows))
    print(measure("tops within 65,536", builders(65536)["tops"], keys=args.keys, rows=2000 * args.keys))


if __name__ == "__main__":
    main()
