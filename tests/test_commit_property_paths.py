"""Random sequences of ``release --state`` runs on the command's durable paths: values, keys, times, ToPL.

A seeded loop (bounded in time) runs the command in this process, over a file or stdin, and
between runs: kills it at a random write or save (SIGKILL: the bytes of a write cut at a random
point, no clean-up), stops it at a random line of dpstream's code (SIGTERM, whose handler raises
:class:`~dpstream.cli._app.Stopped`), edits the output (cut, grown, a line inserted), changes a
value, key or time of the input, puts a value outside ``[0, B]`` in it, cuts or extends it,
switches between the file and stdin, restores an older copy of the state, and tries link tricks
(a second hard link to the state, an output that is the input or the state, or a link to them).
Whatever happens: no output position -- per (key, position) with keys -- is published twice, a
row consumed by the state is never fed changed from a file, no run removes a published byte, and
a stream says one threshold.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.cli.release as release_command
import dpstream.durable.release as durable_release
from dpstream.cli import cli
from dpstream.cli._app import Stopped
from dpstream.durable import StreamState
from durable_faults import Faults, Killed, repair

SECONDS = 8
KEYS = ("a", "b", "c")
ROWS = 700
HOLD = 15




class World(Faults):
    """One stream's files, what was published at each byte of its output, and the kill or stop to come."""

    def __init__(self, folder, rng: np.random.Generator, path: str) -> None:
        super().__init__(rng)
        self.folder, self.path = folder, path
        self.out, self.state = folder / "out", folder / "state"
        self.input = folder / ("in.csv" if path in ("keys", "times") else "in.txt")
        self.outcomes = {"done": 0, "refused": 0, "killed": 0, "stopped": 0}
        values = rng.integers(0, 50, ROWS).astype(float)
        self.truth = values
        self.keys = rng.choice(list(KEYS), ROWS)
        self.times = np.arange(ROWS)  # the time text of the row at each position: t<number>
        #: The threshold lines said on stderr (one stream says one threshold, however many runs say it).
        self.thresholds: set[str] = set()
        #: (key, position) -> the value published there.
        self.seen: dict[tuple[str, int], str] = {}

    # -- the injected faults ------------------------------------------------------------------


    def abandon(self, original):
        def abandon(run) -> None:
            if not self.dead:  # a killed process cleans nothing up
                original(run)

        return abandon

    # -- one run ------------------------------------------------------------------------------

    def text(self, rows: np.ndarray, *, header: bool) -> str:
        """The input rows ``rows`` (indices into the truth), as the path reads them."""
        if self.path in ("keys", "times"):
            lines = [f"t{self.current_times[i]},{self.current_keys[i]},{self.current[i]:g}\n" for i in rows.tolist()]
            return ("time,key,v\n" if header else "") + "".join(lines)
        return "".join(f"{self.current[i]:g}\n" for i in rows.tolist())

    def args(self, source: str, *, state=None, out=None) -> list[str]:
        common = ["release", source, "-o", str(out or self.out), "--state", str(state or self.state), "--epsilon", "1",
                  "--upper-bound", "50", "--hold", str(HOLD), "--checkpoint-seconds", "0", "--seed", "3"]
        if self.path in ("keys", "times"):
            common += ["--max-range", "256", "--column", "v", "--time-column", "time"]
            common += ["--key-column", "key"] if self.path == "keys" else []
        else:
            common += ["--method", "topl"] if self.path == "topl" else ["--max-range", "256"]
        if not self.published and not self.state.exists():
            common.append("--force")  # a new stream over what an abandoned first run left
        return common

    def run(self, args: list[str], stdin: str | None, term_at: int | None) -> str:
        """One run of the command: "done", "refused", "killed" or "stopped"."""
        self.dead = False
        runner = CliRunner()
        trace = _stopper(term_at) if term_at is not None else None
        try:
            if trace is not None:
                sys.settrace(trace)
            result = runner.invoke(cli, args, input=stdin, catch_exceptions=False)
        except Killed:
            return "killed"
        except Stopped:  # after the command's own handlers: the process ends with a traceback
            return "stopped"
        finally:
            sys.settrace(None)
            self._exit()
        self.thresholds.update(line for line in result.output.splitlines() if line.startswith("threshold theta"))
        assert len(self.thresholds) <= 1, f"a stream said two thresholds: {self.thresholds}"
        if result.exit_code == 0:
            return "done"
        if result.exit_code == 128 + signal.SIGTERM:
            return "stopped"
        assert result.exit_code in (1, 2), (result.exit_code, result.output)
        return "refused"

    def _exit(self) -> None:
        """Close what a run stopped halfway left open in this folder (its locks): the end of its process does."""
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}").startswith(str(self.folder)):
                    os.close(int(name))

    def check_output(self) -> None:
        """Every published row has its (key, position) once, with one value."""
        lines = bytes(self.published).decode().split("\n")[:-1]  # the complete lines
        if self.path == "keys":
            rows = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
            assert not lines or lines[0] == "key,position,time,value"
            places = [(row[0], int(row[1])) for row in rows if len(row) == 4]
            values = [row[3] for row in rows if len(row) == 4]
        elif self.path == "times":
            assert not lines or lines[0] == "time,value"
            places, values = [("", at) for at in range(len(lines[1:]))], lines[1:]
        else:
            places, values = [("", at) for at in range(len(lines))], lines
        assert len(set(places)) == len(places), "a position published twice"
        for place, value in zip(places, values):
            assert self.seen.setdefault(place, value) == value, f"{place} published with two values"


def _stopper(at: int):
    """A trace function that raises SIGTERM's :class:`Stopped` at the ``at``-th line run in dpstream's code."""
    left = [at]

    def trace(frame, event, arg):
        if "/dpstream/" not in frame.f_code.co_filename:
            return None
        if event == "line":
            left[0] -= 1
            if left[0] == 0:
                sys.settrace(None)
                raise Stopped(signal.SIGTERM)
        return trace

    return trace


def _consumed(world: World) -> int:
    return StreamState.read(world.state).progress.consumed if world.state.exists() else 0


ACTIONS = ["plain", "plain", "kill", "term", "cut", "grow", "insert", "change", "bad", "older", "stdin", "restart",
           "link", "same"]


def _step(world: World, copies: list[bytes]) -> None:
    rng = world.rng
    before = _consumed(world)
    length = max(0, min(ROWS, before + int(rng.integers(-60, 250))))
    world.current = world.truth.copy()
    world.current_keys, world.current_times = world.keys.copy(), world.times.copy()
    action = str(rng.choice(ACTIONS))
    before_state = world.state.read_bytes() if world.state.exists() else None
    term_at = None
    source, stdin = str(world.input), None
    rows = np.arange(length)
    if action == "kill":
        world.kill_in = int(rng.integers(0, 6))
    elif action == "term":
        term_at = int(np.exp(rng.uniform(0, np.log(300_000))))  # early and late lines alike
    elif action in ("cut", "grow", "insert") and world.out.exists():
        data = world.out.read_bytes()
        if action == "cut":
            world.out.write_bytes(data[: int(rng.integers(0, len(data) + 1))])
        elif action == "grow":
            world.out.write_bytes(data + b"HELLO\n")
        else:
            at = data.find(b"\n", int(rng.integers(0, len(data) + 1))) + 1
            world.out.write_bytes(data[:at] + b"HELLO\n" + data[at:])
    elif action == "change" and length:
        at, what = int(rng.integers(0, length)), rng.random()
        if world.path == "keys" and what < 0.2:  # the row's key
            world.current_keys[at] = KEYS[(KEYS.index(world.current_keys[at]) + 1) % len(KEYS)]
        elif world.path in ("keys", "times") and what < 0.4:  # the row's time text
            world.current_times[at] += ROWS
        else:
            world.current[at] = (world.current[at] + 1 + int(rng.integers(0, 48))) % 50
    elif action == "bad" and length > before:  # a value outside [0, B] among those not consumed: refused there
        world.current[int(rng.integers(before, length))] = float(rng.choice([99.0, -1.0]))
    elif action == "older" and copies and before_state is not None:
        world.state.write_bytes(copies[int(rng.integers(0, len(copies)))])
    elif action in ("stdin", "restart"):  # stdin continues from the consumed count, or starts the stream again
        first = before if action == "stdin" else 0
        rows = np.arange(first, first + min(int(rng.integers(0, 60)), ROWS - before))
        source = "-"
        if action == "stdin" and rows.size:  # a changed value among those not consumed yet is just new input
            world.current[rows] = world.truth[rows]
        if rows.size and rng.random() < 0.2:  # a value outside [0, B]: refused there
            world.current[int(rng.choice(rows))] = 99.0
    world.input.write_text(world.text(np.arange(length), header=True))
    stdin = world.text(rows, header=True) if source == "-" else None
    edited = world.out.read_bytes() if world.out.exists() else b""
    input_before = world.input.read_bytes()
    consumed = _consumed(world)
    if action == "link" and world.state.exists():
        twin = world.folder / "twin"
        os.link(world.state, twin)
        try:
            outcomes = [world.run(world.args(source, state=name), None, None) for name in (twin, world.state)]
        finally:
            twin.unlink()
        assert outcomes == ["refused", "refused"], "a state with a second hard link was used"
        outcome = "refused"
    elif action == "same":
        tricks = [world.args(source, out=world.input), world.args(source, out=world.state)]
        os.link(world.input, world.folder / "inlink")
        tricks.append(world.args(source, out=world.folder / "inlink"))
        os.symlink(world.state, world.folder / "statelink")
        tricks.append(world.args(source, out=world.folder / "statelink"))
        if world.state.exists():
            os.link(world.state, world.folder / "statetwin")
            tricks.append(world.args(source, out=world.folder / "statetwin"))
        outcomes = [world.run(args, None, None) for args in tricks]
        for name in ("inlink", "statelink", "statetwin"):
            (world.folder / name).unlink(missing_ok=True)
        assert set(outcomes) == {"refused"}, outcomes
        assert world.input.read_bytes() == input_before, "a run wrote into its input"
        assert not world.state.exists() or StreamState.read(world.state), "a run wrote into its state"
        outcome = "refused"
    else:
        outcome = world.run(world.args(source), stdin, term_at)
    world.outcomes[outcome] += 1
    world.kill_in = None
    after = world.out.read_bytes() if world.out.exists() else b""
    assert after.startswith(edited), "a run removed bytes of the output"
    now = _consumed(world)
    if now > consumed:  # the run committed
        if source == "-":  # the stdin rows are the positions after those consumed
            fed = rows[: now - consumed]
            world.truth[consumed:now], world.keys[consumed:now] = world.current[fed], world.current_keys[fed]
            world.times[consumed:now] = world.current_times[fed]
        else:
            changed = world.current[:consumed] != world.truth[:consumed]
            if world.path in ("keys", "times"):  # the rows' key and time texts are read too
                changed |= world.current_keys[:consumed] != world.keys[:consumed]
                changed |= world.current_times[:consumed] != world.times[:consumed]
            assert not changed.any(), "a consumed row was fed changed"
            assert ((world.current[consumed:now] >= 0) & (world.current[consumed:now] <= 50)).all(), "a bad value"
            world.truth[consumed:now] = world.current[consumed:now]
            world.keys[consumed:now] = world.current_keys[consumed:now]
            world.times[consumed:now] = world.current_times[consumed:now]
    world.check_output()
    if action in ("grow", "insert") and edited and world.state.exists():
        assert outcome != "done", "an output edited by hand was appended to"
    repair(world, after=after, outcome=outcome, action=action, before_state=before_state, copies=copies)


def _patch(monkeypatch, world: World, save, abandon) -> None:
    monkeypatch.setattr(durable_release, "_write_all", world.write_all)
    monkeypatch.setattr(StreamState, "save", world.save(save))
    monkeypatch.setattr(durable_release.DurableRelease, "abandon", world.abandon(abandon))


@pytest.mark.parametrize("path", ["values", "keys", "times", "topl"])
def test_no_sequence_publishes_a_position_twice(tmp_path, monkeypatch, path):
    rng = np.random.default_rng({"values": 2025, "keys": 2026, "times": 2027, "topl": 2028}[path])
    monkeypatch.setattr(release_command, "_CHUNK", 64)  # several commits per file run
    save, abandon = StreamState.save, durable_release.DurableRelease.abandon
    world = World(tmp_path, rng, path)
    _patch(monkeypatch, world, save, abandon)
    copies: list[bytes] = []
    deadline, steps, streams = time.monotonic() + SECONDS, 0, 0
    while time.monotonic() < deadline and steps < 1500:
        _step(world, copies)
        steps += 1
        if _consumed(world) >= ROWS:  # a stream released whole: the next one in a new folder
            streams += 1
            folder = tmp_path / f"stream{streams}"
            folder.mkdir()
            outcomes, world = world.outcomes, World(folder, rng, path)
            world.outcomes, copies = outcomes, []
            _patch(monkeypatch, world, save, abandon)
    assert steps >= 60, steps
    assert streams >= 2 and min(world.outcomes.values()) >= 10, world.outcomes
