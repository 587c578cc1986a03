"""Faults injected into a durable release run in the test process: a SIGKILL at a chosen write or save.

The property tests (``test_commit_property*.py``) patch ``dpstream.durable.release._write_all`` with
:meth:`Faults.write_all` and ``StreamState.save`` with :meth:`Faults.save`; each records what the
output published at each byte and checks that no byte is ever published twice with another value.
"""

from __future__ import annotations

import os

import numpy as np

from dpstream.durable import StreamState
from dpstream.durable import release as durable_release


class Killed(BaseException):
    """The process dies here (SIGKILL): nothing more of it runs, the kernel drops its locks."""


class Faults:
    """What a stream's output published at each byte, and the kill to come (``kill_in`` writes and saves on)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.published = bytearray()
        self.kill_in: int | None = None  # writes and saves to let through before the kill
        self.dead = False

    def _tick(self) -> bool:
        if self.kill_in is None:
            return False
        self.kill_in -= 1
        return self.kill_in < 0

    def write_all(self, descriptor: int, data: bytes) -> None:
        """The output's write, cut at a random byte when the kill comes; every byte checked against the last."""
        offset = os.fstat(descriptor).st_size  # the output is opened for appending
        cut = int(self.rng.integers(0, len(data) + 1)) if self._tick() else None
        data = data if cut is None else data[:cut]
        end = min(len(self.published), offset + len(data))
        assert bytes(self.published[offset:end]) == data[: max(0, end - offset)], "a byte published twice, differently"
        self.published[end:] = data[end - offset:]
        os.write(descriptor, data)
        if cut is not None:
            self.dead = True
            raise Killed

    def save(self, original):
        """``StreamState.save``, killed before or after the state is written when the kill comes."""
        def save(state) -> None:
            if self._tick():
                if self.rng.random() < 0.5:
                    original(state)
                self.dead = True
                raise Killed
            original(state)

        return save

    def run_until_finished(self, run, *, tries: int):
        """Call ``run()`` killed at a random write (cut at a random byte) or save, again and again until a call
        finishes (at most ``tries``): that call's result and how many calls were killed; no kill afterwards."""
        kills = 0
        for _ in range(tries):
            self.kill_in = int(self.rng.integers(0, 4))
            try:
                result = run()
            except Killed:
                kills += 1
                continue
            self.kill_in = None
            return result, kills
        raise AssertionError(f"no run finished in {tries} tries")


def killed_until_finished(monkeypatch, run, *, seed: int, tries: int):
    """Patch the durable release's output writes and state saves with :class:`Faults` of ``seed`` and call ``run()``
    killed at random ones until a call finishes: :meth:`Faults.run_until_finished`'s result and kills."""
    faults = Faults(np.random.default_rng(seed))
    monkeypatch.setattr(durable_release, "_write_all", faults.write_all)
    monkeypatch.setattr(StreamState, "save", faults.save(StreamState.save))
    return faults.run_until_finished(run, tries=tries)


def repair(world, *, after: bytes, outcome: str, action: str, before_state: bytes | None, copies: list[bytes]) -> None:
    """Repair what a step broke, as its operator would: the output as published, the newest state (kept in
    ``copies``, from which a later step may restore an older one). ``world`` has ``out``, ``state`` and
    ``published``."""
    if after != bytes(world.published[: len(after)]) or len(after) < len(world.published):
        if outcome != "done":
            world.out.write_bytes(bytes(world.published))
    if action == "older" and outcome == "refused" and before_state is not None:
        world.state.write_bytes(before_state)
    if world.state.exists():
        copies.append(world.state.read_bytes())
