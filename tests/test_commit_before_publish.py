"""Commit before publishing: no run, kill, output edit, link trick or input change publishes a second
value for a position, and no failed run removes a published line (the reproducers of each finding)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.durable import DurableRelease, StreamState
from dpstream.durable.format import dump_state, parse_state
from dpstream.release import ToPS

SOURCE = Path(__file__).resolve().parents[1] / "src"
R = ["--epsilon", "1", "--upper-bound", "100", "--hold", "1000", "--max-range", "4096"]
TIMEOUT = 60


def _run(*args, input=None):
    return CliRunner().invoke(cli, [str(arg) for arg in args], input=input)


def _values(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 100, n).astype(float)


def _write(path: Path, values: np.ndarray) -> Path:
    path.write_text("".join(f"{v:g}\n" for v in values))
    return path


def _release(tmp_path, source, *extra, input=None, out="out.txt", state="s.state"):
    return _run("release", source, "-o", tmp_path / out, "--state", tmp_path / state, *R, *extra, input=input)


def _command(*args):
    return [sys.executable, "-m", "dpstream.cli", *[str(arg) for arg in args]]


def _wait_for(predicate, what):
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_killed_stdin_run_keeps_its_lines_and_a_changed_input_is_refused(tmp_path):
    """The issue's first reproducer: killed by SIGKILL after publishing, resumed with an empty input, then with
    an input changed at a published position: refused, and every published line is still there."""
    a, b = _values(2000), _values(2000)
    b[1500] = 99.0 if a[1500] != 99.0 else 98.0
    _write(tmp_path / "a.txt", a)
    _write(tmp_path / "b.txt", b)
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    run = subprocess.Popen(_command("release", "-", "-o", out, "--state", tmp_path / "s.state", *R,
                                    "--checkpoint-seconds", "0.1"),
                           stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        run.stdin.write((tmp_path / "a.txt").read_bytes())  # and no end of input: the run waits for more
        run.stdin.flush()
        _wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") == 1000, "1,000 published lines")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=TIMEOUT)
    finally:
        run.kill()
        run.stdin.close()
        run.stderr.close()
    seen = out.read_bytes()
    assert StreamState.read(tmp_path / "s.state").progress.consumed == 2000  # committed before published

    empty = _release(tmp_path, "-", input="")
    assert empty.exit_code == 0 and "nothing new on stdin" in empty.output
    assert out.read_bytes() == seen
    changed = _release(tmp_path, tmp_path / "b.txt")
    assert changed.exit_code == 1 and "the input differs from the one the state consumed" in changed.output
    assert out.read_bytes() == seen
    more = _write(tmp_path / "more.txt", np.concatenate([a, _values(500, seed=2)]))
    resumed = _release(tmp_path, more)
    assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes().startswith(seen) and out.read_bytes().count(b"\n") == 1500


def test_the_threshold_is_said_only_once_the_state_covers_the_hold_out(tmp_path):
    """theta and the prior on stderr are published too: held until the commit that records the hold-out."""
    told = []
    run = DurableRelease.start(tmp_path / "state", method="tops", params={}, seed=1,
                               build=lambda key: ToPS(epsilon=1, upper_bound=100, hold=100, max_range=256, key=key),
                               output=lambda resumed: tmp_path / "out", checkpoint_seconds=1000)
    try:
        for chunk in run.feed_chunks([_values(150)]):
            run.releaser.release(chunk)
        run.later(lambda: told.append(StreamState.read(tmp_path / "state").progress.consumed))
        run.checkpoint()
        assert told == []  # not due yet: not said
        run.checkpoint(force=True)
        assert told == [150]
    finally:
        run.close()


def test_a_hard_link_to_the_state_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(1500))
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    os.link(tmp_path / "s.state", tmp_path / "other.state")
    refused = _release(tmp_path, tmp_path / "in.txt", state="other.state")
    assert refused.exit_code == 1 and "hard links" in refused.output
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 1


@pytest.mark.parametrize("same", ["output", "input"])
def test_the_state_cannot_be_the_output_or_the_input(tmp_path, same):
    _write(tmp_path / "in.txt", _values(1500))
    state = "out.txt" if same == "output" else "in.txt"
    before = (tmp_path / "in.txt").read_bytes()
    refused = _release(tmp_path, tmp_path / "in.txt", state=state)
    assert refused.exit_code == 2 and "must be three different files" in refused.output
    assert (tmp_path / "in.txt").read_bytes() == before and not (tmp_path / "out.txt").exists()


def test_an_output_grown_by_hand_is_refused_and_never_glued(tmp_path):
    """sed -i '1000i HELLO' out.txt, a resume with nothing new, a resume with new input: refused, not cut."""
    values = _values(3000)
    _write(tmp_path / "in.txt", values[:2000])
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    out = tmp_path / "out.txt"
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:500] + ["HELLO\n"] + lines[500:]))
    edited = out.read_bytes()
    nothing = _release(tmp_path, tmp_path / "in.txt")
    assert nothing.exit_code == 1 and "more than the" in nothing.output
    _write(tmp_path / "in.txt", values)
    refused = _release(tmp_path, tmp_path / "in.txt")
    assert refused.exit_code == 1 and "more than the" in refused.output and out.read_bytes() == edited
    out.write_text("".join(lines))  # the edit undone: the release continues
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    assert all(line.count(".") <= 1 for line in out.read_text().splitlines())
    assert out.read_text().startswith("".join(lines)) and out.read_text().count("\n") == 2000


def test_an_output_edited_in_its_last_lines_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(2000))
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    out = tmp_path / "out.txt"
    text = out.read_bytes()
    out.write_bytes(text[:-2] + b"X\n")  # the same length, the last value changed
    refused = _release(tmp_path, tmp_path / "in.txt")
    assert refused.exit_code == 1 and "was edited" in refused.output


def test_a_stream_read_from_a_file_is_not_continued_from_stdin(tmp_path):
    values = _values(3000)
    _write(tmp_path / "in.txt", values[:2000])
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    published = (tmp_path / "out.txt").read_bytes()
    again = _release(tmp_path, "-", input="".join(f"{v:g}\n" for v in values))  # the file re-sent on stdin
    assert again.exit_code == 1 and "stdin cannot be checked to continue it" in again.output
    assert "position 2,000" in again.output and (tmp_path / "out.txt").read_bytes() == published
    _write(tmp_path / "in.txt", values)
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0  # a file holding the whole stream continues it


def test_a_stream_read_from_stdin_continues_from_a_file_holding_the_whole_stream(tmp_path):
    values = _values(3000)
    assert _release(tmp_path, "-", "--seed", 3, input="".join(f"{v:g}\n" for v in values[:2000])).exit_code == 0
    changed = values.copy()
    changed[10] = 100 - changed[10] if changed[10] != 50 else 1
    refused = _release(tmp_path, _write(tmp_path / "bad.txt", changed), "--seed", 3)
    assert refused.exit_code == 1 and "positions [0, 2,000)" in refused.output
    assert _release(tmp_path, _write(tmp_path / "all.txt", values), "--seed", 3).exit_code == 0
    whole = _run("release", tmp_path / "all.txt", "-o", tmp_path / "whole.txt", "--state", tmp_path / "w.state",
                 *R, "--seed", 3)
    assert whole.exit_code == 0
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()


def test_a_forged_consumed_count_is_refused_before_anything_is_published(tmp_path):
    """Lowering progress.consumed with a recomputed checksum: the ledger refuses the positions again, and
    nothing is appended (the entry would have to be durable first)."""
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    path = tmp_path / "s.state"
    body = parse_state(path.read_bytes(), path)
    body["progress"]["consumed"] = 1000
    body.pop("commitment")  # as a forger who drops what would tell
    path.write_bytes(dump_state(body))
    published = (tmp_path / "out.txt").read_bytes()
    refused = _release(tmp_path, tmp_path / "in.txt")
    assert refused.exit_code != 0 and (tmp_path / "out.txt").read_bytes() == published


def test_a_restored_older_state_is_refused_while_the_output_holds_more(tmp_path):
    values = _values(4000)
    _write(tmp_path / "in.txt", values[:2000])
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    shutil.copy(tmp_path / "s.state", tmp_path / "backup")
    _write(tmp_path / "in.txt", values[:3000])
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    published = (tmp_path / "out.txt").read_bytes()
    shutil.copy(tmp_path / "backup", tmp_path / "s.state")
    changed = values.copy()
    changed[2500] = 100 - changed[2500] if changed[2500] != 50 else 1
    _write(tmp_path / "in.txt", changed)
    refused = _release(tmp_path, tmp_path / "in.txt")
    assert refused.exit_code == 1 and "the state is an older copy" in refused.output and "truncate -s" in refused.output
    assert (tmp_path / "out.txt").read_bytes() == published


def test_a_kill_between_the_commit_and_the_write_is_completed_from_the_state(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    out = tmp_path / "out.txt"
    whole = out.read_bytes()
    out.write_bytes(whole[: len(whole) // 2])  # the write of the last committed group stopped midway
    result = _release(tmp_path, tmp_path / "in.txt")
    assert result.exit_code == 0 and "were written from the state" in result.output
    assert out.read_bytes() == whole


def test_two_state_runs_on_one_output_are_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(1500))
    assert _release(tmp_path, tmp_path / "in.txt").exit_code == 0
    with open(tmp_path / "out.txt", "rb") as held:
        import fcntl

        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running release holds it
        second = _release(tmp_path, tmp_path / "in.txt", "--force", state="other.state")
        plain = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--force", *R)
    assert second.exit_code == 1 and "being written by another process" in second.output
    assert plain.exit_code == 1 and "being written by another dpstream process" in plain.output


def test_a_library_caller_that_skips_the_feed_is_told(tmp_path):
    run = DurableRelease.start(tmp_path / "state", method="tops", params={}, seed=1,
                               build=lambda key: ToPS(epsilon=1, upper_bound=100, hold=10, max_range=256, key=key),
                               output=lambda resumed: tmp_path / "out", checkpoint_seconds=0)
    try:
        run.releaser.release(_values(20))
        with pytest.raises(RuntimeError, match="feed_chunks"):
            run.checkpoint(force=True)
    finally:
        run.close()
    assert not (tmp_path / "out").read_bytes()


def test_an_older_states_lines_replayed_in_part_are_committed_and_continue(tmp_path):
    """A state of an older dpstream whose killed run wrote lines after its checkpoint: a run that replays only
    part of them commits that part, and the next run checks and replays the rest."""
    values = _values(4000)
    _write(tmp_path / "all.txt", values)
    assert _run("release", tmp_path / "all.txt", "-o", tmp_path / "reference.txt", "--state", tmp_path / "ref",
                *R, "--seed", 4).exit_code == 0
    reference = (tmp_path / "reference.txt").read_bytes()
    _write(tmp_path / "in.txt", values[:2000])
    assert _release(tmp_path, tmp_path / "in.txt", "--seed", 4).exit_code == 0
    with StreamState.open(tmp_path / "s.state") as state:  # as an older dpstream left it: no commitment
        state.commitment = None
        state.save()
    checkpointed = (tmp_path / "out.txt").read_bytes()
    (tmp_path / "out.txt").write_bytes(reference[: len(checkpointed) + 30_000])  # written after the checkpoint
    _write(tmp_path / "in.txt", values[:2500])  # replays part of what was written
    assert _release(tmp_path, tmp_path / "in.txt", "--seed", 4).exit_code == 0
    assert (tmp_path / "out.txt").read_bytes() == reference[: len(checkpointed) + 30_000]
    _write(tmp_path / "in.txt", values)
    assert _release(tmp_path, tmp_path / "in.txt", "--seed", 4).exit_code == 0
    assert (tmp_path / "out.txt").read_bytes() == reference
