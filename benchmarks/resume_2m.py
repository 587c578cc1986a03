"""Kill and resume on 2 million values: the full-size version of ``tests/test_resume.py``.

For ToPS, the binary tree and PAK with their default hold-out and range (65,536 and 2^20), a
release of 2,000,000 values with ``--state`` is killed by SIGKILL at 20 points spread over the
run and run again each time.  Under ``--seed`` the final output must equal the uninterrupted
run's bit for bit; under the secure default every line published before a kill must still be
there, unchanged, at the end.  Prints one line per method and mode with the time it took.

Run::

    PYTHONPATH=src python benchmarks/resume_2m.py [--values 2000000] [--kills 20] [--checkpoint-seconds 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_resume import complete_lines, kill_and_resume, timed_run, write_stream  # noqa: E402

METHODS = {"tops": ["--method", "tops"], "bt": ["--method", "bt"], "pak": ["--method", "pak"]}
HOLD = {"tops": 65536, "bt": 0, "pak": 65536}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=2_000_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--checkpoint-seconds", default="1")
    parser.add_argument("--methods", default=",".join(METHODS))
    arguments = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        source = root / "in.txt"
        write_stream(source, arguments.values)
        for method in arguments.methods.split(","):
            for mode, extra in (("seeded", ["--seed", "9"]), ("secure", [])):
                options = ["--epsilon", "1", "--upper-bound", "100", "--checkpoint-seconds",
                           arguments.checkpoint_seconds, *METHODS[method], *extra]

                def args(out: Path, state: Path, options: list[str] = options) -> list[str]:
                    return ["release", str(source), "-o", str(out), "--state", str(state), *options]

                start = time.perf_counter()
                reference = root / f"{method}-{mode}-reference.txt"
                duration = timed_run(args(reference, root / f"{method}-{mode}-reference.state"))
                want = reference.read_bytes()
                out = root / f"{method}-{mode}.txt"
                seen, killed = kill_and_resume(args(out, root / f"{method}-{mode}.state"), out, kills=arguments.kills,
                                               final_size=len(want), duration=duration,
                                               rng=np.random.default_rng(len(method) + len(mode)))
                final = out.read_bytes()
                lines = final.count(b"\n") == arguments.values - HOLD[method]
                prefixes = all(final.startswith(published) for published in seen)
                same = final == want if mode == "seeded" else None
                ok = lines and prefixes and same is not False and killed >= arguments.kills // 2
                failures += not ok
                sizes = {len(complete_lines(out))} | {len(published) for published in seen}
                print(f"{method:5} {mode:6} kills={arguments.kills} (stopped a running release: {killed}) "
                      f"lines ok={lines} published lines kept={prefixes} equal to uninterrupted={same} "
                      f"distinct published lengths at kills={len(sizes)} time={time.perf_counter() - start:.1f}s",
                      flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
