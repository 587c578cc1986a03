"""``dpstream release --state FILE``: what a first run writes, how a run continues, and what is refused."""

from __future__ import annotations

import csv
import io
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
from dpstream.noise.bits import KeyedBits
from dpstream.release import PAK, BinaryTreeCounter, ToPL, ToPS
from dpstream.release.by_key import ByKey, key_secret

OPTIONS = ["--epsilon", "1", "--upper-bound", "50"]
METHOD_OPTIONS = {
    "tops": ["--method", "tops", "--hold", "500", "--max-range", "4096"],
    "bt": ["--method", "bt", "--max-range", "4096"],
    "pak": ["--method", "pak", "--hold", "500", "--max-range", "4096"],
}
TOPL_OPTIONS = ["--method", "topl", "--hold", "500", "--max-range", "4096"]


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
    _write(tmp_path / "in.txt", _values(1500))
    assert _release(tmp_path, "bt").exit_code == 0
    _write(tmp_path / "in.txt", _values(3000))
    assert _release(tmp_path, "bt").exit_code == 0  # the cut below is before the last group committed
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
    # a run killed after writing but before its checkpoint: the state one batch behind, two lines and a
    # torn third one at the end
    (tmp_path / "state").unlink()
    (tmp_path / "out.txt").unlink()
    _write(tmp_path / "in.txt", _values(3000)[:2000])
    assert _release(tmp_path, "bt", "--seed", 1).exit_code == 0
    _as_older_state(tmp_path / "state")
    recorded = (tmp_path / "out.txt").stat().st_size
    lines = want[recorded:].split(b"\n")
    tail = lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:3]
    with open(tmp_path / "out.txt", "ab") as handle:
        handle.write(tail)  # beyond the recorded length
    _write(tmp_path / "in.txt", _values(3000))
    result = _release(tmp_path, "bt", "--seed", 1)
    assert result.exit_code == 0 and f"the {len(tail)} bytes written after the last checkpoint" in result.output
    assert (tmp_path / "out.txt").read_bytes() == want


def _as_older_state(path):
    """The state as an older dpstream left it: no commitment (it wrote its lines before checkpointing)."""
    with StreamState.open(path) as state:
        state.commitment = None
        state.save()


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


# -- with --time-column and --key-column ---------------------------------------------------------------------------


def _write_meters(path, rows: int, *, keys: int = 4, seed: int = 1) -> tuple[np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(seed)
    values = _values(rows, seed)
    names = [f"m{k}" for k in rng.integers(0, keys, size=rows)]
    times = [f"t{i}" for i in range(rows)]
    path.write_text("time,meter,kWh\n" + "".join(f"{t},{k},{v:g}\n" for t, k, v in zip(times, names, values)))
    return values, names, times


def _columns(tmp_path, method="tops", *extra, keyed=True, **where):
    return _release(tmp_path, method, "--time-column", "time", "--column", "kWh",
                    *(["--key-column", "meter"] if keyed else []), *extra, **where)


@pytest.mark.parametrize("method", list(METHOD_OPTIONS))
def test_a_seeded_keyed_state_release_gives_each_key_the_mechanism_of_its_own_key(tmp_path, method):
    """Key k's rows are released by the method's mechanism with key=key_secret(seed_key(seed), k)."""
    values, names, times = _write_meters(tmp_path / "in.txt", 6000)
    result = _columns(tmp_path, method, "--seed", 9)
    assert result.exit_code == 0, result.output
    build = {
        "tops": lambda key: ToPS(epsilon=1, upper_bound=50, hold=500, max_range=4096, key=key),
        "bt": lambda key: BinaryTreeCounter(epsilon=1, upper_bound=50, max_range=4096, key=key),
        "pak": lambda key: PAK(epsilon=1, upper_bound=50, hold=500, max_range=4096, key=key),
    }[method]
    got = ByKey(build=lambda name: build(key_secret(seed_key(9), name))).release(values, names)
    want = io.StringIO()
    writer = csv.writer(want, lineterminator="\n")
    writer.writerow(["key", "position", "time", "value"])
    writer.writerows(zip(got.keys, got.positions.tolist(), [times[row] for row in got.rows], got.values.tolist()))
    assert (tmp_path / "out.txt").read_text() == want.getvalue()
    state = StreamState.read(tmp_path / "state")
    assert state.key == seed_key(9) and state.progress.released == got.values.size
    assert state.mechanism["keys"] and sorted(state.mechanism["keys"]) == sorted(set(names))
    # the file keeps one secret, its key; each key's own key is derived from it, never stored
    assert all("key" not in stream["noise"] for stream in state.mechanism["streams"])


@pytest.mark.parametrize(("method", "keyed"), [("tops", True), ("tops", False), ("topl", True)],
                         ids=["keys", "time", "topl-keys"])
def test_a_grown_csv_input_continues_with_one_header(tmp_path, method, keyed):
    _write_meters(tmp_path / "all.txt", 9000)
    extra = ["--seed", 2, *(TOPL_OPTIONS if method == "topl" else [])]
    whole = _columns(tmp_path, "tops", *extra, keyed=keyed, source=tmp_path / "all.txt",
                     out=tmp_path / "whole.txt", state=tmp_path / "whole.state")
    assert whole.exit_code == 0, whole.output
    lines = (tmp_path / "all.txt").read_text().splitlines(keepends=True)
    for stop in (300, 2500, 6000, 9000):  # the first inside every hold-out: a header only, nothing released
        (tmp_path / "in.txt").write_text("".join(lines[: stop + 1]))
        result = _columns(tmp_path, "tops", *extra, keyed=keyed)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()
    assert (tmp_path / "out.txt").read_text().count("value") == 1
    assert StreamState.read(tmp_path / "state").params["method"] == method


def test_a_keyed_state_refuses_other_columns_and_fewer_keys_than_it_holds(tmp_path):
    _write_meters(tmp_path / "in.txt", 3000, keys=5)
    assert _columns(tmp_path, "bt").exit_code == 0
    output = (tmp_path / "out.txt").read_bytes()
    unkeyed = _columns(tmp_path, "bt", keyed=False)
    assert unkeyed.exit_code == 2 and "was made with key_column = 'meter'" in unkeyed.output
    untimed = _release(tmp_path, "bt", "--column", "kWh", "--key-column", "meter")
    assert untimed.exit_code == 2 and "was made with time_column = 'time'" in untimed.output
    fewer = _columns(tmp_path, "bt", "--max-keys", 4)
    assert fewer.exit_code == 2 and "the state holds 5 keys, more than --max-keys 4" in fewer.output
    assert (tmp_path / "out.txt").read_bytes() == output


def test_the_budget_of_a_keyed_state_is_per_key_with_its_count_of_keys(tmp_path):
    _write_meters(tmp_path / "in.txt", 3000, keys=3)
    assert _columns(tmp_path, "tops").exit_code == 0
    _write_meters(tmp_path / "in.txt", 5000, keys=3)
    assert _columns(tmp_path, "tops").exit_code == 0
    entries = StreamState.read(tmp_path / "state").ledger
    assert [(e.stream, e.first, e.last, e.keys, e.epsilon) for e in entries] == [
        ("per key", 0, 3000, 3, 1.0), ("per key", 3000, 5000, 3, 1.0)]
    assert entries[0].neighbours.startswith("per key (event level")
    shown = _run("budget", tmp_path / "state")
    assert shown.exit_code == 0, shown.output
    assert "keys" in shown.output.splitlines()[4] and "epsilon and delta are each key's" in shown.output


# -- ToPL ------------------------------------------------------------------------------------------------------------


def test_a_topl_state_release_draws_its_clients_bits_from_the_state_key_and_continues_them(tmp_path):
    """ToPL has no key= mode: its simulated clients read one keyed stream, KeyedBits(key, ("topl",)), whose
    position the state records; a grown input continues it as one uninterrupted run would."""
    values = _values(6000)
    _write(tmp_path / "all.txt", values)
    args = ["--seed", 9, "--epsilon", "1", "--upper-bound", "50", *TOPL_OPTIONS]
    whole = _run("release", tmp_path / "all.txt", "-o", tmp_path / "whole.txt", "--state", tmp_path / "whole.state",
                 *args)
    assert whole.exit_code == 0, whole.output
    bits = KeyedBits(key=seed_key(9), identity=("topl",))
    topl = ToPL(epsilon=1, upper_bound=50, hold=500, max_range=4096, seed=bits)
    assert (tmp_path / "whole.txt").read_text() == "".join(f"{v!r}\n" for v in topl.release(values).tolist())
    for stop in (300, 3000, 6000):
        _write(tmp_path / "in.txt", values[:stop])
        result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--state", tmp_path / "state", *args)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()
    state = StreamState.read(tmp_path / "state")
    assert "key" not in state.mechanism["bits"] and state.ledger[-1].neighbours.startswith("local DP")


@pytest.mark.parametrize("method", ["tops", "bt"])
def test_lines_written_after_the_last_checkpoint_are_checked_when_released_again(tmp_path, method):
    """Bytes written after the last checkpoint may have been read: the resumed run must write the same
    bytes, and a changed input (whose new values, under the recomputed noise, would reveal the change
    exactly) is refused with the output left as it was."""
    values = _values(9000)
    _write(tmp_path / "all.txt", values)
    assert _run("release", tmp_path / "all.txt", "-o", tmp_path / "reference.txt", "--state", tmp_path / "ref",
                *OPTIONS, *METHOD_OPTIONS[method], "--seed", 4).exit_code == 0
    reference = (tmp_path / "reference.txt").read_bytes()
    _write(tmp_path / "in.txt", values[:6000])
    assert _release(tmp_path, method, "--seed", 4).exit_code == 0
    _as_older_state(tmp_path / "state")
    checkpointed = (tmp_path / "out.txt").read_bytes()
    assert reference.startswith(checkpointed)
    tail = reference[len(checkpointed):][:20_000]  # written by an interrupted run, never checkpointed
    (tmp_path / "out.txt").write_bytes(checkpointed + tail)

    changed = values.copy()
    changed[6100] = min(50.0, changed[6100] + 7)
    _write(tmp_path / "in.txt", changed)
    refused = _release(tmp_path, method, "--seed", 4)
    assert refused.exit_code == 1 and "the input differs from the one that produced the lines" in refused.output
    assert (tmp_path / "out.txt").read_bytes() == checkpointed + tail  # nothing published was changed

    _write(tmp_path / "in.txt", values)
    resumed = _release(tmp_path, method, "--seed", 4)
    assert resumed.exit_code == 0, resumed.output
    assert (tmp_path / "out.txt").read_bytes() == reference


def test_a_new_state_that_consumed_and_wrote_nothing_is_not_left_behind(tmp_path):
    """A typo in a column name or an empty input: no state and no output stay bound to the failed command."""
    (tmp_path / "in.csv").write_text("v,k\n" + "".join(f"{v:g},a\n" for v in _values(3000)))
    typo = _run("release", tmp_path / "in.csv", "-o", tmp_path / "out.txt", "--state", tmp_path / "state",
                *OPTIONS, "--column", "vv")
    assert typo.exit_code == 1 and "no column 'vv'" in typo.output
    assert not (tmp_path / "state").exists() and not (tmp_path / "out.txt").exists()
    fixed = _run("release", tmp_path / "in.csv", "-o", tmp_path / "out.txt", "--state", tmp_path / "state",
                 *OPTIONS, "--column", "v", "--hold", "500")
    assert fixed.exit_code == 0, fixed.output
    (tmp_path / "empty.txt").write_text("")
    empty = _run("release", tmp_path / "empty.txt", "-o", tmp_path / "e.txt", "--state", tmp_path / "e", *OPTIONS)
    assert empty.exit_code == 1 and "the input holds no values" in empty.output
    assert not (tmp_path / "e").exists() and not (tmp_path / "e.txt").exists()


@pytest.mark.parametrize("keyed", [False, True])
def test_the_ledger_of_a_run_that_skips_missing_rows_states_the_rows_kept_relation(tmp_path, keyed):
    rows = ["meter,value"] + [f"M{i % 2},{'NA' if i == 7 else i % 40}" for i in range(300)]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    keys = ["--key-column", "meter"] if keyed else []
    result = _run("release", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--state",
                  str(tmp_path / "s.state"), "--column", "value", *keys, "--missing", "skip", "--method", "bt",
                  "--epsilon", "1", "--upper-bound", "40", "--max-range", "64", "--seed", "1")
    assert result.exit_code == 0, result.output
    [entry] = StreamState.read(tmp_path / "s.state").ledger
    assert "on the stream of the rows kept" in str(entry.neighbours)
