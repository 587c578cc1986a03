"""Kill and resume: ``release --state`` killed by SIGKILL at random points and run again loses nothing.

For ToPS, the binary tree, PAK and ToPL, a release of 200,000 values is killed 20 times with SIGKILL
-- at points drawn over the whole run: while it starts and holds out, and at random amounts of
output -- and run again each time with the same command.  Under ``--seed`` the final output is
the uninterrupted run's, bit for bit; under the secure default every line published before each
kill is still there, unchanged, at the end.  ``benchmarks/resume_2m.py`` runs the same test on
2 million values.

The command runs in a forked child of the test process (``dpstream``'s own entry point, with
its argument vector), which spares each of the ~60 runs the interpreter's start-up; SIGKILL
reaches it as it would any process.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpstream.durable import StreamState

N = 200_000
KILLS = 20
TIMEOUT = 120.0
METHODS = {
    "tops": ["--method", "tops", "--hold", "20000", "--max-range", "65536"],
    "bt": ["--method", "bt", "--max-range", "65536"],
    "pak": ["--method", "pak", "--hold", "20000", "--max-range", "65536"],
    "topl": ["--method", "topl", "--hold", "20000", "--max-range", "65536"],
}
HOLD = {"tops": 20000, "bt": 0, "pak": 20000, "topl": 20000}
SEEDS = {"tops": 1, "bt": 2, "pak": 3, "topl": 4}


def write_stream(path: Path, n: int = N, seed: int = 3) -> np.ndarray:
    values = np.random.default_rng(seed).gamma(2.0, 6.0, size=n).clip(0, 100).round(2)
    path.write_text("\n".join(f"{v:g}" for v in values) + "\n")
    return values


def spawn(args: list[str], stdin_path: Path | None = None) -> int:
    """Run ``dpstream ARGS`` in a forked child; return its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:  # the child: dpstream's entry point, its output and errors to /dev/null
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(os.open(stdin_path, os.O_RDONLY) if stdin_path else null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's own standard streams
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
        from dpstream.cli import main

        sys.argv = ["dpstream", *args]
        main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    finally:
        os._exit(code)


def wait(pid: int) -> int | None:
    """The exit code of a finished child, or None while it runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        return None
    return os.waitstatus_to_exitcode(status)


def run_to_end(args: list[str], stdin_path: Path | None = None) -> int:
    pid = spawn(args, stdin_path)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def timed_run(args: list[str], stdin_path: Path | None = None) -> float:
    """Run to the end (it must succeed); return how long it took."""
    start = time.monotonic()
    assert run_to_end(args, stdin_path) == 0
    return time.monotonic() - start


def complete_lines(path: Path) -> bytes:
    """What a reader sees published in the output: its complete lines."""
    if not path.exists():
        return b""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def kill_and_resume(args: list[str], out: Path, *, kills: int, final_size: int, duration: float,
                    rng: np.random.Generator, stdin_rest=None) -> tuple[list[bytes], int]:
    """Kill ``release ARGS`` at ``kills`` random points, running it again each time; finish it.

    Each kill point is drawn over the whole run: a quarter at a random delay into a run (start-up,
    reading the state, the hold-out; up to half the ``duration`` of an uninterrupted run), the
    rest once the output reaches a random size (sorted, up to ``final_size``).  Returns the
    published lines seen after each kill and how many kills stopped a running release.
    ``stdin_rest()``: for a stdin input, write the file of the values after those the state
    consumed (the producer continues from there) and return its path.
    """
    seen, killed = [], 0
    sizes = np.sort(rng.uniform(0, final_size, size=kills))
    for kill in range(kills):
        source = None if stdin_rest is None else stdin_rest()
        pid = spawn(args, source)
        deadline = time.monotonic() + TIMEOUT
        code = None
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, duration / 2))
        else:
            while (not out.exists() or out.stat().st_size < sizes[kill]) and (code := wait(pid)) is None:
                assert time.monotonic() < deadline, "the release made no progress"
                time.sleep(0.002)
        if code is None:
            os.kill(pid, signal.SIGKILL)  # the child is not reaped yet, so the pid is still its own
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        assert code in (0, -signal.SIGKILL), f"run {kill} ended with {code}"
        killed += code == -signal.SIGKILL
        seen.append(complete_lines(out))
    source = None if stdin_rest is None else stdin_rest()
    assert run_to_end(args, source) == 0
    return seen, killed


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "in.txt"
    write_stream(path)
    return path


def release_args(source: Path | str, out: Path, state: Path, method: str, *extra: str) -> list[str]:
    """The command; a checkpoint after every batch of 65,536 values (the default waits a second between
    checkpoints, longer than most of these runs), so that runs resume from every point of the stream."""
    return ["release", str(source), "-o", str(out), "--state", str(state), "--epsilon", "1", "--upper-bound", "100",
            "--checkpoint-seconds", "0", *METHODS[method], *extra]


@pytest.mark.parametrize("method", list(METHODS))
def test_killed_and_resumed_seeded_release_equals_the_uninterrupted_one(tmp_path, stream_file, method):
    reference = tmp_path / "reference.txt"
    duration = timed_run(release_args(stream_file, reference, tmp_path / "reference.state", method, "--seed", "9"))
    want = reference.read_bytes()
    assert want.count(b"\n") == N - HOLD[method]
    out = tmp_path / "out.txt"
    rng = np.random.default_rng(SEEDS[method])
    seen, killed = kill_and_resume(release_args(stream_file, out, tmp_path / "state", method, "--seed", "9"), out,
                                   kills=KILLS, final_size=len(want), duration=duration, rng=rng)
    assert out.read_bytes() == want
    assert all(want.startswith(published) for published in seen)
    # the kills were spread over the run: most stopped a running release, at more than one length of the
    # output (a committed batch of 65,536 lines is published in one write, so the lengths seen are few)
    assert killed >= KILLS // 2 and len({len(published) for published in seen}) >= 2
    state = StreamState.read(tmp_path / "state")
    assert state.progress.consumed == N and state.progress.output_bytes == len(want)
    entries = state.ledger
    assert entries[0].first == 0 and entries[-1].last == N
    assert all(a.last == b.first for a, b in zip(entries, entries[1:]))  # each position spent once


@pytest.mark.parametrize("method", list(METHODS))
def test_killed_and_resumed_secure_release_never_changes_a_published_line(tmp_path, stream_file, method):
    out = tmp_path / "out.txt"
    rng = np.random.default_rng(SEEDS[method] + 100)
    timing = tmp_path / "timing.txt"  # an uninterrupted release (its own key) sizes the kill points
    duration = timed_run(release_args(stream_file, timing, tmp_path / "timing.state", method))
    seen, killed = kill_and_resume(release_args(stream_file, out, tmp_path / "state", method), out, kills=KILLS,
                                   final_size=timing.stat().st_size, duration=duration, rng=rng)
    final = out.read_bytes()
    assert final.count(b"\n") == N - HOLD[method]
    for kill, published in enumerate(seen):
        assert final.startswith(published), f"a line published before kill {kill} changed"
    assert killed >= KILLS // 2 and len({len(published) for published in seen}) >= 2  # as above


def test_a_stdin_release_resumes_when_the_producer_continues_from_the_consumed_count(tmp_path, stream_file):
    values = stream_file.read_text().splitlines()[:100_000]
    reference = tmp_path / "reference.txt"
    whole = tmp_path / "whole.txt"
    whole.write_text("\n".join(values) + "\n")
    duration = timed_run(release_args("-", reference, tmp_path / "reference.state", "bt", "--seed", "4",
                                      "--checkpoint-seconds", "0.2"), whole)
    out, state = tmp_path / "out.txt", tmp_path / "state"

    def rest() -> Path:  # the producer asks the state how far the release came, and sends the rest
        consumed = StreamState.read(state).progress.consumed if state.exists() else 0
        path = tmp_path / "rest.txt"
        path.write_text("".join(f"{v}\n" for v in values[consumed:]))
        return path

    # stdin checkpoints at most once a value: every 0.2 s here, not after every value
    kill_and_resume(release_args("-", out, state, "bt", "--seed", "4", "--checkpoint-seconds", "0.2"), out, kills=5,
                    final_size=reference.stat().st_size, duration=duration, rng=np.random.default_rng(5),
                    stdin_rest=rest)
    assert out.read_bytes() == reference.read_bytes()


def test_sigterm_stops_at_once_and_the_same_command_continues(tmp_path, stream_file):
    """SIGTERM (and SIGHUP) end the run with 128 + N after saying how to continue; nothing is saved past
    the last checkpoint, and the next run ends the release as if it had not stopped."""
    reference = tmp_path / "reference.txt"
    timed_run(release_args(stream_file, reference, tmp_path / "reference.state", "tops", "--seed", "6"))
    out = tmp_path / "out.txt"
    args = release_args(stream_file, out, tmp_path / "state", "tops", "--seed", "6")
    pid = spawn(args)
    deadline = time.monotonic() + TIMEOUT
    while not (out.exists() and out.stat().st_size > 0) and wait(pid) is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) in (0, 128 + signal.SIGTERM)
    assert run_to_end(args) == 0
    assert out.read_bytes() == reference.read_bytes()
