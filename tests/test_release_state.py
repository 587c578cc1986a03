"""``dpstream release --state FILE``: what a first run writes, how a run continues, and what is refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._durable import seed_key
from dpstream.durable import StreamState
from dpstream.release import PAK, BinaryTreeCounter, ToPS

OPTIONS = ["--epsilon", "1", "--upper-bound", "50"]
METHOD_OPTIONS = {
    "tops": ["--method", "tops", "--hold", "500", "--max-range", "4096"],
    "bt": ["--method", "bt", "--max-range", "4096"],
    "pak": ["--method", "pak", "--hold", "500", "--max-range", "4096"],
}


def _run(*args, input=None):
    return CliRunner().invoke(cli, [str(arg) for arg in args], input=input)


def _values(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).gamma(2.0, 4.0, size=n).clip(0, 50).round(2)


def _write(path, values) -> None:
    path.write_text("".join(f"{v:g}\n" for v in values))


def _release(tmp_path, method="tops", *extra, source=None, out=None, state=None, input=None):
    return _run("release", source or tmp_path / "in.txt", "-o", out or tmp_path / "out.txt", "--state",
                state or tmp_path / "state", *OPTIONS, *METHOD_OPTIONS[method], *extra, input=input)


@pytest.mark.parametrize("method", list(METHOD_OPTIONS))
def test_a_seeded_state_release_is_the_keyed_mechanism_of_the_seeds_key(tmp_path, method):
    """The output is the library's release with key=seed_key(seed), one repr per line, no header."""
    values = _values(6000)
    _write(tmp_path / "in.txt", values)
    result = _release(tmp_path, method, "--seed", 9)
    assert result.exit_code == 0, result.output
    key = seed_key(9)
    mechanism = {
        "tops": lambda: ToPS(epsilon=1, upper_bound=50, hold=500, max_range=4096, key=key),
        "bt": lambda: BinaryTreeCounter(epsilon=1, upper_bound=50, max_range=4096, key=key),
        "pak": lambda: PAK(epsilon=1, upper_bound=50, hold=500, max_range=4096, key=key),
    }[method]()
    want = "".join(f"{v!r}\n" for v in mechanism.release(values).tolist())
    assert (tmp_path / "out.txt").read_text() == want
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o600
    assert "--seed makes the noise recomputable" in result.output
    state = StreamState.read(tmp_path / "state")
    assert state.progress.consumed == 6000 and state.progress.output_bytes == len(want)
    assert state.key == key


def test_a_grown_input_continues_where_the_last_run_ended(tmp_path):
    values = _values(9000)
    _write(tmp_path / "all.txt", values)
    assert _release(tmp_path, "tops", "--seed", 2, source=tmp_path / "all.txt", out=tmp_path / "whole.txt",
                    state=tmp_path / "whole.state").exit_code == 0
    _write(tmp_path / "in.txt", values[:300])  # inside the hold-out: nothing released yet
    first = _release(tmp_path, "tops", "--seed", 2)
    assert first.exit_code == 0, first.output
    assert "the hold-out has 300 of its 500 values" in first.output
    for stop in (4000, 9000):
        _write(tmp_path / "in.txt", values[:stop])
        result = _release(tmp_path, "tops", "--seed", 2)
        assert result.exit_code == 0, result.output
        assert "resumed" in result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()
    ledger = StreamState.read(tmp_path / "state").ledger
    assert [(entry.first, entry.last) for entry in ledger][-1][1] == 9000
    assert all(a.last == b.first for a, b in zip(ledger, ledger[1:]))


def test_a_completed_stream_run_again_does_nothing_and_says_so(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0
    before = (tmp_path / "out.txt").read_bytes(), StreamState.read(tmp_path / "state").ledger
    again = _release(tmp_path, "bt")
    assert again.exit_code == 0, again.output
    assert "nothing new" in again.output and "nothing was released or spent" in again.output
    assert ((tmp_path / "out.txt").read_bytes(), StreamState.read(tmp_path / "state").ledger) == before


def test_other_parameters_are_refused_with_a_usage_error(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "tops").exit_code == 0
    output = (tmp_path / "out.txt").read_bytes()
    for extra, named in ((["--epsilon", "0.5"], "epsilon"), (["--seed", "3"], "seed"),
                         (["--clip"], "clip")):
        result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--state", tmp_path / "state",
                      *METHOD_OPTIONS["tops"], "--upper-bound", "50", *(extra if extra[0] == "--epsilon" else
                                                                       ["--epsilon", "1", *extra]))
        assert result.exit_code == 2, result.output
        assert f"was made with {named}" in result.output or f"was made without {named}" in result.output
    moved = _release(tmp_path, "tops", out=tmp_path / "elsewhere.txt")
    assert moved.exit_code == 2 and "output" in moved.output.splitlines()[-1]
    assert (tmp_path / "out.txt").read_bytes() == output and not (tmp_path / "elsewhere.txt").exists()


def test_an_output_that_lost_published_bytes_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0
    out = tmp_path / "out.txt"
    out.write_bytes(out.read_bytes()[:100])
    result = _release(tmp_path, "bt")
    assert result.exit_code == 1 and "fewer than the" in result.output
    out.unlink()
    result = _release(tmp_path, "bt")
    assert result.exit_code == 1 and "is missing" in result.output


def test_an_input_shorter_than_what_was_consumed_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0
    _write(tmp_path / "in.txt", _values(1000))
    result = _release(tmp_path, "bt")
    assert result.exit_code == 1 and "holds 1,000 values, but the state" in result.output


def test_bytes_written_after_the_last_checkpoint_are_dropped_and_released_again(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt", "--seed", 1).exit_code == 0
    want = (tmp_path / "out.txt").read_bytes()
    # a run killed after writing but before its checkpoint: the state one batch behind, junk at the end
    (tmp_path / "state").unlink()
    (tmp_path / "out.txt").unlink()
    _write(tmp_path / "in.txt", _values(3000)[:2000])
    assert _release(tmp_path, "bt", "--seed", 1).exit_code == 0
    with open(tmp_path / "out.txt", "ab") as handle:
        handle.write(b"12.5\n3.25\n7")  # beyond the recorded length
    _write(tmp_path / "in.txt", _values(3000))
    result = _release(tmp_path, "bt", "--seed", 1)
    assert result.exit_code == 0 and "dropped the 11 bytes" in result.output
    assert (tmp_path / "out.txt").read_bytes() == want


def test_a_second_release_of_spent_positions_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0
    with StreamState.open(tmp_path / "state") as state:  # a ledger that already covers positions to come
        state.spend(epsilon=1.0, neighbours="event level", method="bt", first=3000, last=3500)
        state.save()
    _write(tmp_path / "in.txt", _values(4000))
    before = (tmp_path / "out.txt").read_bytes()
    result = _release(tmp_path, "bt")
    assert result.exit_code == 1 and "already released" in result.output
    assert StreamState.read(tmp_path / "state").progress.consumed == 3000
    assert (tmp_path / "out.txt").read_bytes()[: len(before)] == before


def test_a_state_in_use_is_refused(tmp_path):
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0
    holder = subprocess.Popen(  # another process drives the stream
        [sys.executable, "-c", "import sys; from dpstream.durable import StreamState; "
         "s = StreamState.open(sys.argv[1]); print('locked', flush=True); sys.stdin.read()", tmp_path / "state"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline() == b"locked\n"
        result = _release(tmp_path, "bt")
    finally:
        holder.communicate(b"", timeout=60)
    assert result.exit_code == 1 and "in use" in result.output, result.output


def test_what_state_refuses_up_front(tmp_path):
    _write(tmp_path / "in.txt", _values(100))
    to_stdout = _run("release", tmp_path / "in.txt", "-o", "-", "--state", tmp_path / "state", *OPTIONS)
    assert to_stdout.exit_code == 2 and "--state needs -o FILE" in to_stdout.output
    topl = _release(tmp_path, "bt", "--method", "topl")
    assert topl.exit_code == 2 and "--state applies to --method tops, pak, pak-uncapped, bt" in topl.output
    columns = _release(tmp_path, "bt", "--time-column", "time")
    assert columns.exit_code == 2 and "--state does not work with --time-column" in columns.output
    bad = _release(tmp_path, "bt", "--epsilon", "-1")
    assert bad.exit_code == 2
    assert not (tmp_path / "state").exists() and not (tmp_path / "out.txt").exists()
    (tmp_path / "out.txt").write_text("mine\n")
    exists = _release(tmp_path, "bt")
    assert exists.exit_code == 1 and "pass --force" in exists.output and not (tmp_path / "state").exists()
    forced = _release(tmp_path, "bt", "--force")
    assert forced.exit_code == 0 and "spends the privacy budget again" in forced.output
    assert "mine" not in (tmp_path / "out.txt").read_text()


def test_without_state_an_existing_output_warns_that_the_budget_is_spent_again(tmp_path):
    _write(tmp_path / "in.txt", _values(100))
    (tmp_path / "out.txt").write_text("an earlier release\n")
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--force", *OPTIONS, "--method", "bt")
    assert result.exit_code == 0
    assert "spends the privacy budget again" in result.output and "--state" in result.output
    fresh = _run("release", tmp_path / "in.txt", "-o", tmp_path / "new.txt", *OPTIONS, "--method", "bt")
    assert "budget again" not in fresh.output


def test_stdin_continues_from_the_consumed_count(tmp_path):
    values = _values(5000)
    _write(tmp_path / "in.txt", values)
    assert _release(tmp_path, "tops", "--seed", 4, out=tmp_path / "whole.txt", state=tmp_path / "whole.state"
                    ).exit_code == 0
    first = _release(tmp_path, "tops", "--seed", 4, source="-", input="".join(f"{v:g}\n" for v in values[:2500]))
    assert first.exit_code == 0, first.output
    consumed = StreamState.read(tmp_path / "state").progress.consumed
    assert consumed == 2500
    rest = _release(tmp_path, "tops", "--seed", 4, source="-", input="".join(f"{v:g}\n" for v in values[consumed:]))
    assert rest.exit_code == 0, rest.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()
    nothing = _release(tmp_path, "tops", "--seed", 4, source="-", input="")
    assert nothing.exit_code == 0 and "nothing new on stdin" in nothing.output


def test_a_bad_value_stops_the_run_and_the_fixed_input_continues_it(tmp_path):
    values = _values(200_000, seed=3)
    _write(tmp_path / "good.txt", values)
    assert _release(tmp_path, "tops", "--seed", 5, source=tmp_path / "good.txt", out=tmp_path / "whole.txt",
                    state=tmp_path / "whole.state").exit_code == 0
    lines = [f"{v:g}\n" for v in values]
    lines[150_000] = "-7\n"  # out of [0, B]: the run stops there
    (tmp_path / "in.txt").write_text("".join(lines))
    stopped = _release(tmp_path, "tops", "--seed", 5, "--checkpoint-seconds", 0)
    assert stopped.exit_code == 1 and "position 150000" in stopped.output
    consumed = StreamState.read(tmp_path / "state").progress.consumed
    assert 0 < consumed <= 150_000
    _write(tmp_path / "in.txt", values)  # the value fixed
    resumed = _release(tmp_path, "tops", "--seed", 5, "--checkpoint-seconds", 0)
    assert resumed.exit_code == 0, resumed.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()
