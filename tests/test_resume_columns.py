"""Kill and resume with ``--time-column`` and ``--key-column``: a CSV release under ``--state`` loses nothing.

A smart-meter-style CSV of 200,000 rows (time, meter, kWh; 20 meters) is released with
``--state`` and killed with SIGKILL at 20 random points spread over the run, and run again each
time.  Under ``--seed`` the final output is the uninterrupted run's, bit for bit (one header
line, every row once); under the secure default every line published before each kill is still
there, unchanged, at the end.  The helpers (a forked ``dpstream`` per run, the kill points) are
those of ``test_resume.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpstream.durable import StreamState
from test_resume import complete_lines, kill_and_resume, run_to_end, timed_run

ROWS = 200_000
METERS = 20
KILLS = 20
HOLD = 2000
MECHANISM = ["--method", "tops", "--hold", str(HOLD), "--max-range", "4096"]


def write_meters(path: Path, rows: int = ROWS, seed: int = 4) -> None:
    rng = np.random.default_rng(seed)
    meters = rng.integers(0, METERS, size=rows)
    values = rng.gamma(2.0, 6.0, size=rows).clip(0, 100).round(2)
    seconds = np.arange(rows)
    lines = [f"2026-01-{1 + s // 86400:02d}T{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d},meter-{m},{v:g}\n"
             for s, m, v in zip(seconds.tolist(), meters.tolist(), values.tolist())]
    path.write_text("time,meter,kWh\n" + "".join(lines))


@pytest.fixture(scope="module")
def meters_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("meters") / "meters.csv"
    write_meters(path)
    return path


def release_args(source: Path | str, out: Path, state: Path, *extra: str, keyed: bool = True) -> list[str]:
    """The command, with a checkpoint after every batch (see ``test_resume.release_args``)."""
    columns = ["--time-column", "time", "--column", "kWh", *(["--key-column", "meter"] if keyed else [])]
    return ["release", str(source), "-o", str(out), "--state", str(state), "--epsilon", "1", "--upper-bound", "100",
            "--checkpoint-seconds", "0", *MECHANISM, *columns, *extra]


def _rows_per_key(csv_bytes: bytes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in csv_bytes.decode().splitlines()[1:]:
        key = line.split(",", 1)[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("keyed", [True, False], ids=["key-and-time", "time"])
def test_killed_and_resumed_seeded_csv_release_equals_the_uninterrupted_one(tmp_path, meters_file, keyed):
    reference = tmp_path / "reference.csv"
    duration = timed_run(release_args(meters_file, reference, tmp_path / "reference.state", "--seed", "9",
                                      keyed=keyed))
    want = reference.read_bytes()
    want_header = b"key,position,time,value\n" if keyed else b"time,value\n"
    assert want.startswith(want_header) and want.count(b"\n") == 1 + ROWS - (METERS if keyed else 1) * HOLD
    out = tmp_path / "out.csv"
    rng = np.random.default_rng(11 if keyed else 12)
    seen, killed = kill_and_resume(release_args(meters_file, out, tmp_path / "state", "--seed", "9", keyed=keyed),
                                   out, kills=KILLS if keyed else KILLS // 2, final_size=len(want),
                                   duration=duration, rng=rng)
    assert out.read_bytes() == want  # one header, every row once, the same noise
    assert all(want.startswith(published) for published in seen)
    assert killed >= len(seen) // 2 and len({len(published) for published in seen}) >= 3
    state = StreamState.read(tmp_path / "state")
    assert state.progress.consumed == ROWS and state.progress.output_bytes == len(want)
    entries = state.ledger
    assert entries[0].first == 0 and entries[-1].last == ROWS
    assert all(a.last == b.first for a, b in zip(entries, entries[1:]))  # each row spent once
    if keyed:
        assert {entry.stream for entry in entries} == {"per key"} and entries[-1].keys == METERS
        assert state.progress.released == ROWS - METERS * HOLD == sum(_rows_per_key(want).values())


def test_killed_and_resumed_secure_keyed_release_never_changes_a_published_line(tmp_path, meters_file):
    out = tmp_path / "out.csv"
    timing = tmp_path / "timing.csv"  # an uninterrupted release (its own secret) sizes the kill points
    duration = timed_run(release_args(meters_file, timing, tmp_path / "timing.state"))
    seen, killed = kill_and_resume(release_args(meters_file, out, tmp_path / "state"), out, kills=KILLS,
                                   final_size=timing.stat().st_size, duration=duration,
                                   rng=np.random.default_rng(13))
    final = out.read_bytes()
    assert final.count(b"key,position") == 1 and final.count(b"\n") == 1 + ROWS - METERS * HOLD
    for kill, published in enumerate(seen):
        assert final.startswith(published), f"a line published before kill {kill} changed"
    assert killed >= KILLS // 2 and len({len(published) for published in seen}) >= 3
    # each key's positions run from its hold-out on, once each, in order
    positions: dict[str, list[int]] = {}
    for line in final.decode().splitlines()[1:]:
        key, position, _ = line.split(",", 2)
        positions.setdefault(key, []).append(int(position))
    assert len(positions) == METERS
    assert all(got == list(range(HOLD, HOLD + len(got))) for got in positions.values())


def test_a_keyed_stdin_release_resumes_when_the_producer_sends_the_header_and_the_rest(tmp_path, meters_file):
    lines = meters_file.read_text().splitlines(keepends=True)
    header, rows = lines[0], lines[1 : 50_001]
    whole = tmp_path / "whole.csv"
    whole.write_text(header + "".join(rows))
    reference = tmp_path / "reference.csv"
    args = ["--seed", "4", "--checkpoint-seconds", "0.2"]
    duration = timed_run(release_args("-", reference, tmp_path / "reference.state", *args), whole)
    out, state = tmp_path / "out.csv", tmp_path / "state"

    def rest() -> Path:  # the producer asks the state how many rows were consumed, and sends the header and the rest
        consumed = StreamState.read(state).progress.consumed if state.exists() else 0
        path = tmp_path / "rest.csv"
        path.write_text(header + "".join(rows[consumed:]))
        return path

    kill_and_resume(release_args("-", out, state, *args), out, kills=5, final_size=reference.stat().st_size,
                    duration=duration, rng=np.random.default_rng(14), stdin_rest=rest)
    assert out.read_bytes() == reference.read_bytes()
    assert complete_lines(out) == out.read_bytes()
    assert run_to_end(release_args("-", out, state, *args), rest()) == 0  # the header alone: nothing new, no change
    assert out.read_bytes() == reference.read_bytes()
