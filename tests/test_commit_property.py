"""Random sequences of runs, kills, output edits, input changes and restored states of a durable release.

A seeded loop (bounded in time) drives :class:`~dpstream.durable.DurableRelease`: each step may kill the
run at a random write or save (the bytes of a write cut at a random point), edit the output (cut it, grow
it, insert a line), change a value of the input, cut or extend the input, or restore an older copy of the
state.  Whatever happens, no byte of the output is ever published with two different values (so no
position with two values), a value consumed by the state is never fed changed, and no run removes a
published byte.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import dpstream.durable.release as durable_release
from dpstream.durable import DurableRelease, StateError, StreamState
from dpstream.release import ToPS
from durable_faults import Faults, Killed, repair

PARAMS = {"method": "tops", "epsilon": 1.0}
VALUES = np.random.default_rng(5).integers(0, 50, 3000).astype(float)
SECONDS = 14




def build(key: bytes) -> ToPS:
    return ToPS(epsilon=1.0, upper_bound=50, hold=60, max_range=256, key=key)


class World(Faults):
    """The files, what was published at each byte of the output, and the kill to come."""

    def __init__(self, folder, rng: np.random.Generator) -> None:
        super().__init__(rng)
        self.folder = folder
        self.out, self.state = folder / "out", folder / "state"
        self.outcomes = {"done": 0, "refused": 0, "killed": 0}
        #: The stream's input: a changed value consumed at a position never consumed before is its value there.
        self.truth = VALUES.copy()


    def run(self, values: np.ndarray) -> str:
        """One run over ``values`` in random chunks: "done", "refused" or "killed"."""
        try:
            release = DurableRelease.start(self.state, method="tops", params=PARAMS, seed=3, build=build,
                                           output=lambda resumed: self.out, source=str(self.folder / "in"),
                                           checkpoint_seconds=0.0)
        except StateError:
            return "refused"
        except Killed:
            return "killed"
        size = int(self.rng.integers(1, 400))
        try:
            with release.output() as sink:
                chunks = (values[start : start + size] for start in range(0, values.size, size))
                for chunk in release.feed_chunks(chunks):
                    out = release.releaser.release(chunk)
                    sink.write("".join(f"{value!r}\n" for value in out.tolist()))
                    release.checkpoint(sink)
                release.finish(sink)
            return "done"
        except StateError:
            return "refused"
        except Killed:
            return "killed"
        finally:
            release.close()


def _step(world: World, copies: list[bytes]) -> None:
    rng = world.rng
    before = StreamState.read(world.state).progress.consumed if world.state.exists() else 0
    length = before + int(rng.integers(-100, 600))  # mostly more input than consumed, sometimes less
    values = world.truth[: max(0, min(VALUES.size, length))].copy()
    action = rng.choice(["plain", "kill", "cut", "grow", "insert", "change", "older"])
    before_state = world.state.read_bytes() if world.state.exists() else None
    if action == "kill":
        world.kill_in = int(rng.integers(0, 6))
    elif action in ("cut", "grow", "insert") and world.out.exists():
        data = world.out.read_bytes()
        if action == "cut":
            world.out.write_bytes(data[: int(rng.integers(0, len(data) + 1))])
        elif action == "grow":
            world.out.write_bytes(data + b"HELLO\n")
        else:
            at = data.find(b"\n", int(rng.integers(0, len(data) + 1))) + 1
            world.out.write_bytes(data[:at] + b"HELLO\n" + data[at:])
    elif action == "change" and values.size:
        at = int(rng.integers(0, values.size))
        values[at] = (values[at] + 1 + int(rng.integers(0, 48))) % 50
    elif action == "older" and copies and before_state is not None:
        world.state.write_bytes(copies[int(rng.integers(0, len(copies)))])
    edited = world.out.read_bytes() if world.out.exists() else b""
    consumed = StreamState.read(world.state).progress.consumed if world.state.exists() else 0
    outcome = world.run(values)
    world.outcomes[outcome] += 1
    world.kill_in = None
    after = world.out.read_bytes() if world.out.exists() else b""
    assert after.startswith(edited), "a run removed bytes of the output"
    now = StreamState.read(world.state).progress.consumed if world.state.exists() else 0
    if now > consumed:  # the run committed: it was fed the consumed values unchanged
        changed = np.flatnonzero(values[:consumed] != world.truth[:consumed])
        assert not changed.size, "a consumed value was fed changed"
    world.truth[consumed:now] = values[consumed:now]
    if action in ("grow", "insert") and edited and world.state.exists():
        assert outcome != "done", "an output edited by hand was appended to"
    repair(world, after=after, outcome=outcome, action=action, before_state=before_state, copies=copies)


def test_no_sequence_publishes_a_position_twice(tmp_path, monkeypatch):
    world = World(tmp_path, np.random.default_rng(2026))
    save = StreamState.save
    monkeypatch.setattr(durable_release, "_write_all", world.write_all)
    monkeypatch.setattr(StreamState, "save", world.save(save))
    copies: list[bytes] = []
    deadline, steps, streams = time.monotonic() + SECONDS, 0, 0
    while time.monotonic() < deadline and steps < 1500:
        _step(world, copies)
        steps += 1
        if world.state.exists() and StreamState.read(world.state).progress.consumed == VALUES.size:
            assert world.run(world.truth) == "done"  # writes what a kill after the last commit left unwritten
            _check_published(world)  # a stream released whole: the next one in a new folder
            streams += 1
            folder = tmp_path / f"stream{streams}"
            folder.mkdir()
            outcomes, world = world.outcomes, World(folder, world.rng)
            world.outcomes, copies = outcomes, []
            monkeypatch.setattr(durable_release, "_write_all", world.write_all)
            monkeypatch.setattr(StreamState, "save", world.save(save))
    assert steps >= 100 and streams >= 1
    assert min(world.outcomes.values()) >= 20, world.outcomes


def _check_published(world: World) -> None:
    """The output, as published, is one line per released position, and the output holds it whole."""
    lines = bytes(world.published).split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == VALUES.size - 60
    assert all(np.isfinite(float(line)) for line in lines[:-1])
    assert world.out.read_bytes() == bytes(world.published)


@pytest.mark.parametrize("seed", [1, 2])
def test_short_sequences(tmp_path, monkeypatch, seed):
    world = World(tmp_path, np.random.default_rng(seed))
    monkeypatch.setattr(durable_release, "_write_all", world.write_all)
    monkeypatch.setattr(StreamState, "save", world.save(StreamState.save))
    copies: list[bytes] = []
    for _ in range(40):
        _step(world, copies)
