"""The durable state (``dpstream.durable``): encoding, file format, atomic saves, the lock, the ledger, ``budget``.

Bit-exactness is checked on bytes (``tobytes``, ``struct``), not with ``==``, so that -0.0
against 0.0 or two NaNs would be told apart.  The lock is tested with a second real process
(subprocess) and with SIGKILL of the holder; torn saves with processes killed (SIGKILL) in the
middle of a loop of saves.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpstream.cli import cli
from dpstream.durable import (
    BudgetError,
    LedgerEntry,
    Progress,
    StateDamagedError,
    StateError,
    StateInUseError,
    StateMismatchError,
    StreamState,
    format_ledger,
)
from dpstream.durable import files as files_module
from dpstream.durable.encoding import decode, encode
from dpstream.durable.files import remove_stale_temporaries, write_atomic
from dpstream.durable.format import dump_state, parse_state
from dpstream.privacy import EVENT_LEVEL

PARAMS = {"method": "tops", "epsilon": 1.0, "upper_bound": 100.0, "hold": 65536, "seed": None}


def identical(a, b) -> bool:
    """Equal in type and bits: -0.0 differs from 0.0, NaN equals NaN, arrays by dtype, shape and bytes."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    return a == b


def through_json(value):
    return decode(json.loads(json.dumps(encode(value), allow_nan=False)))


# -- encoding -------------------------------------------------------------------------------

ARRAY_DTYPES = st.sampled_from([np.int64, np.float64, np.float32, np.uint64, np.int8, np.bool_, np.complex128])


@settings(max_examples=150, deadline=None)
@given(hnp.arrays(dtype=ARRAY_DTYPES, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)))
def test_arrays_round_trip_bit_for_bit(array):
    back = through_json(array)
    assert identical(back, array) and back.flags.writeable


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(dtype=np.float64, shape=st.integers(0, 40),
                  elements=st.floats(allow_nan=False, allow_infinity=True, allow_subnormal=True)))
def test_float64_arrays_with_infinities_and_subnormals(array):
    assert identical(through_json(array), array)


def test_special_floats_bit_for_bit():
    array = np.array([-0.0, 0.0, 5e-324, -2.2250738585072014e-308, np.inf, -np.inf, np.nan, 1.7976931348623157e308])
    assert identical(through_json(array), array)
    for value in (-0.0, 5e-324, math.inf, -math.inf, 0.1, 1e308):
        assert identical(through_json(value), value)
    assert math.isnan(through_json(math.nan))
    assert identical(through_json({"x": [np.float64(-0.0), np.float32(np.inf)]}), {"x": [np.float64(-0.0),
                                                                                          np.float32(np.inf)]})


def test_big_endian_arrays_come_back_native_with_the_same_values():
    array = np.arange(5, dtype=">i8") - 2**62
    back = through_json(array)
    assert back.dtype == np.dtype(np.int64) and back.tolist() == array.tolist()


@pytest.mark.parametrize("value", [2**53, 2**53 + 1, -(2**53) - 1, 2**64, -(2**200), 10**400])
def test_big_integers_as_decimal_strings(value):
    encoded = encode(value)
    if abs(value) > 2**53:
        assert encoded == {"$int": str(value)}
    assert through_json(value) == value and type(through_json(value)) is int


JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3) | st.integers() | st.sampled_from(["$int", "$x", "a"]), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(JSON_LIKE)
def test_python_values_round_trip(value):
    assert identical(through_json(value), value)


def test_generator_state_round_trips_and_continues_the_stream():
    rng = np.random.default_rng(7)
    rng.standard_normal(3)
    state = through_json(rng.bit_generator.state)
    assert state == rng.bit_generator.state
    resumed = np.random.default_rng()
    resumed.bit_generator.state = state
    assert rng.standard_normal(5).tobytes() == resumed.standard_normal(5).tobytes()


@pytest.mark.parametrize("value, where", [
    ({"rng": np.random.default_rng(0)}, "value['rng']: cannot store a value of type Generator"),
    ([1, {2, 3}], "value[1]: cannot store a value of type set"),
    ({"a": np.array(["x"])}, "value['a']: cannot store a numpy array of dtype <U1"),
    (np.array([object()]), "value: cannot store a numpy array of dtype object"),
])
def test_unstorable_values_are_refused_with_their_path(value, where):
    with pytest.raises(TypeError, match=r"^" + where.replace("[", r"\[").replace("]", r"\]")):
        encode(value)


@pytest.mark.parametrize("data", [
    {"$int": "1_000"}, {"$int": 3}, {"$float": "Infinity"}, {"$bytes": "!!"}, {"$tuple": 1}, {"$dict": [[1]]},
    {"$ndarray": {"dtype": "<f8", "data": "AAAA", "shape": [1]}},
    {"$ndarray": {"dtype": "O", "data": "", "shape": [0]}},
    {"$ndarray": {"dtype": "<f8", "data": "", "shape": [-1]}}, {"$what": 1}, {"$int": "1", "b": 2},
    {"$dict": [[[1], 2]]},
])
def test_malformed_tagged_values_are_refused(data):
    with pytest.raises(ValueError, match=r"^value"):
        decode(data)


# -- the file: format, checksum, atomic writes, mode ----------------------------------------


def test_header_names_format_version_and_checksum(tmp_path):
    path = tmp_path / "state"
    StreamState.create(path, params=PARAMS).close()
    header, body, end = path.read_bytes().split(b"\n")
    fields = json.loads(header)
    assert fields["format"] == "dpstream-state" and fields["version"] == 1 and end == b""
    assert fields["body_bytes"] == len(body)
    import hashlib

    assert fields["sha256"] == hashlib.sha256(body).hexdigest()


def test_every_truncation_is_refused():
    data = dump_state({"params": {"epsilon": 1.0}, "values": encode(np.arange(4.0))})
    for cut in range(len(data)):
        with pytest.raises(StateDamagedError, match="(not a dpstream state file|is damaged)"):
            parse_state(data[:cut], "s")
    with pytest.raises(StateDamagedError, match="is damaged"):
        parse_state(data + b"x", "s")


def test_a_changed_byte_fails_the_checksum(tmp_path):
    path = tmp_path / "state"
    with StreamState.create(path, params=PARAMS) as state:
        state.progress = Progress(consumed=12345)
        state.save()
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"consumed":12345', b'"consumed":12346'))
    with pytest.raises(StateDamagedError, match="checksum does not match.*do not start a new state"):
        StreamState.open(path)
    with pytest.raises(StateDamagedError, match="checksum"):
        StreamState.read(path)


def test_other_files_and_versions_are_refused(tmp_path):
    path = tmp_path / "state"
    path.write_text("value\n1\n2\n")
    with pytest.raises(StateDamagedError, match="is not a dpstream state file"):
        StreamState.open(path)
    path.write_bytes(dump_state({}).replace(b'"version": 1', b'"version": 2'))
    with pytest.raises(StateDamagedError, match="format version 2; this dpstream reads version 1 only"):
        StreamState.open(path)
    path.write_bytes(dump_state({"params": {}}))
    with pytest.raises(StateDamagedError, match="malformed: expected the sections"):
        StreamState.open(path)


def test_state_and_lock_files_are_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        with StreamState.create(tmp_path / "state", params=PARAMS) as state:
            state.save()
    finally:
        os.umask(old)
    for name in ("state", "state.lock"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def os_with(**replaced):
    """The ``os`` module as the state files see it, with some functions replaced (for them only)."""

    class Os:
        def __getattr__(self, name):
            return replaced.get(name, getattr(os, name))

    return Os()


def test_the_temporary_file_is_0600_before_it_holds_a_byte(tmp_path, monkeypatch):
    modes = []
    real_write = os.write

    def spy(fd, data):
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(files_module, "os", os_with(write=spy))
    old = os.umask(0)
    try:
        write_atomic(tmp_path / "state", b"secret")
    finally:
        os.umask(old)
    assert modes and set(modes) == {0o600}


def test_a_failed_write_leaves_the_old_state_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "state"
    with StreamState.create(path, params=PARAMS) as state:
        state.mechanism = {"values": np.arange(1000.0)}
        state.save()
        before = path.read_bytes()
        real_write = os.write

        def torn(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(files_module, "os", os_with(write=torn))
        state.mechanism = {"values": np.arange(2000.0)}
        with pytest.raises(OSError, match="No space left"):
            state.save()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "state.lock"]


def _save_forever(path: Path, size: int, ready: int, *, hang_in_fsync: bool = False) -> None:
    """In a forked child: keep saving states whose content is a function of their save count.

    Writes a byte to the pipe ``ready`` once it holds the lock; with ``hang_in_fsync``, writes
    one more and hangs in its first fsync (the temporary file then holds the whole new state).
    """
    try:
        if hang_in_fsync:
            def hang(fd: int) -> None:
                os.write(ready, b"f")
                time.sleep(60)

            os.fsync = hang  # this process only: it is a fork
        with StreamState.open(path) as state:
            os.write(ready, b"r")
            while True:
                state.mechanism = {"values": np.full(size, float(state.saves + 1)), "saves": state.saves + 1}
                state.progress = Progress(consumed=state.saves)
                state.save()
    finally:
        os._exit(1)


def _kill_a_saver(path: Path, size: int, *, delay: float = 0.0, hang_in_fsync: bool = False) -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _save_forever(path, size, write, hang_in_fsync=hang_in_fsync)
    os.close(write)
    try:
        assert os.read(read, 1) == b"r"
        if hang_in_fsync:
            assert os.read(read, 1) == b"f"
        time.sleep(delay)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)


def _check_whole(path: Path, size: int) -> int:
    with StreamState.open(path) as state:  # the lock died with the child; no torn file loads
        saves = state.mechanism["saves"]
        assert saves == state.saves == state.progress.consumed + 1
        assert identical(state.mechanism["values"], np.full(size, float(saves)))
    assert sorted(p.name for p in path.parent.iterdir()) == ["state", "state.lock"]  # stale temporaries removed
    return saves


def test_kill_during_saves_leaves_the_old_or_the_new_state(tmp_path):
    path, size = tmp_path / "state", 100_000
    StreamState.create(path, params=PARAMS, mechanism={"values": np.full(size, 1.0), "saves": 1}).close()
    _kill_a_saver(path, size, hang_in_fsync=True)  # killed with a complete temporary file not yet renamed
    assert len(list(tmp_path.glob(".state.*.tmp"))) == 1
    assert _check_whole(path, size) == 1  # the old state
    last = 1
    for delay in np.random.default_rng(2024).uniform(0.0, 0.12, size=8):  # killed at any point of the loop
        _kill_a_saver(path, size, delay=delay)
        saves = _check_whole(path, size)
        assert saves >= last
        last = saves
    assert last > 1


def test_only_this_files_own_stale_temporaries_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its number now belongs to no process
    path = tmp_path / "state"
    stale = tmp_path / f".state.dpstream-{dead.pid}-0123abcd.tmp"
    keep = [tmp_path / ".state.backup.tmp", tmp_path / f".other.dpstream-{dead.pid}-0123abcd.tmp",
            tmp_path / "state.tmp"]
    for file in (stale, *keep):
        file.write_text("x")
    assert remove_stale_temporaries(path) == [stale]
    assert all(file.exists() for file in keep) and not stale.exists()


# -- the lock ----------------------------------------------------------------------------------

HOLDER = """
import sys, time
from dpstream.durable import StreamState
state = StreamState.open(sys.argv[1])
print("holding", flush=True)
time.sleep(120)
"""


def test_a_second_process_is_refused_and_sigkill_frees_the_lock(tmp_path):
    path = tmp_path / "state"
    with StreamState.create(path, params=PARAMS) as state:
        state.spend(epsilon=1.0, neighbours=EVENT_LEVEL, method="tops", first=0, last=10)
        state.save()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(StateInUseError, match=rf"^state {path} is in use by another process \(pid {holder.pid}\)"):
            StreamState.open(path)
        assert (tmp_path / "state.lock").read_text() == f"{holder.pid}\n"
        result = CliRunner().invoke(cli, ["budget", str(path)])  # reading needs no lock
        assert result.exit_code == 0 and "[0, 10)" in result.stdout
    finally:
        holder.kill()  # SIGKILL: no handler runs, the lock goes with the process
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    with StreamState.open(path) as state:
        assert state.ledger[0].last == 10


def test_a_second_handle_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "state"
    with StreamState.create(path, params=PARAMS):
        with pytest.raises(StateInUseError, match="already open in this process"):
            StreamState.open(path)
    with StreamState.open(path):  # closed: free again
        pass


def test_a_state_has_one_lock_whatever_name_opens_it(tmp_path):
    path, link = tmp_path / "state", tmp_path / "link"
    (tmp_path / "folder").symlink_to(tmp_path)
    link.symlink_to(path)
    with StreamState.create(tmp_path / "folder" / "state", params={}):
        with pytest.raises(StateInUseError, match="already open"):
            StreamState.open(link)
    with StreamState.open(link) as state:
        state.progress = Progress(consumed=5)
        state.save()
    assert link.is_symlink() and StreamState.read(path).progress.consumed == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "link", "state", "state.lock"]


def test_create_refuses_an_existing_file_and_a_missing_directory(tmp_path):
    path = tmp_path / "state"
    StreamState.create(path, params=PARAMS).close()
    with pytest.raises(StateError, match="exists; continue with it"):
        StreamState.create(path, params=PARAMS)
    with pytest.raises(StateError, match="directory .*nowhere of the state file does not exist"):
        StreamState.create(tmp_path / "nowhere" / "state", params=PARAMS)
    with pytest.raises(StateError, match="there is no state file"):
        StreamState.open(tmp_path / "missing")
    with StreamState.open(path):  # the refused create released the lock
        pass


def test_closed_and_read_only_states_refuse_changes(tmp_path):
    path = tmp_path / "state"
    state = StreamState.create(path, params=PARAMS)
    state.close()
    with pytest.raises(StateError, match="is closed"):
        state.save()
    snapshot = StreamState.read(path)
    with pytest.raises(StateError, match="read-only"):
        snapshot.save()
    with pytest.raises(StateError, match="read-only"):
        snapshot.spend(epsilon=1.0, neighbours=EVENT_LEVEL, method="tops", first=0, last=1)


# -- the contents --------------------------------------------------------------------------


def test_every_field_round_trips_bit_for_bit(tmp_path):
    path, key = tmp_path / "state", bytes(range(32))
    mechanism = {
        "held": np.array([0.0, -0.0, 5e-324, np.inf, 1e308]),
        "noise": np.random.default_rng(1).laplace(size=(4, 16)),
        "counts": np.array([-(2**63), 2**63 - 1, 0], dtype=np.int64),
        "rng_state": np.random.default_rng(3).bit_generator.state,
        "threshold": None, "position": 2**40, "identity": ("tree", 3, b"\x00"), "levels": [np.int64(5)],
    }
    with StreamState.create(path, params=PARAMS, key=key, mechanism=mechanism) as state:
        state.progress = Progress(consumed=70000, released=4464, output_bytes=81234)
        state.save()
    with StreamState.open(path) as state:
        assert state.key == key and identical(state.mechanism, mechanism)
        assert state.progress == Progress(consumed=70000, released=4464, output_bytes=81234)
        assert identical(state.params, PARAMS) and state.saves == 2


@settings(max_examples=20, deadline=None)
@given(hnp.arrays(dtype=st.sampled_from([np.int64, np.float64]), shape=st.integers(0, 300)))
def test_arrays_round_trip_through_the_file(array):
    with tempfile.TemporaryDirectory() as folder:
        with StreamState.create(Path(folder) / "state", params={}, mechanism={"a": array}):
            pass
        assert identical(StreamState.read(Path(folder) / "state").mechanism["a"], array)


def test_keys_are_fresh_random_32_bytes_or_given(tmp_path):
    a = StreamState.create(tmp_path / "a", params={})
    b = StreamState.create(tmp_path / "b", params={})
    assert len(a.key) == len(b.key) == 32 and a.key != b.key
    with pytest.raises(ValueError, match="key must be at least 16 bytes"):
        StreamState.create(tmp_path / "c", params={}, key=b"short")
    with pytest.raises(TypeError, match="key must be bytes"):
        StreamState.create(tmp_path / "c", params={}, key="0" * 32)
    assert not (tmp_path / "c").exists()


def test_check_params_names_the_first_difference(tmp_path):
    with StreamState.create(tmp_path / "state", params=PARAMS) as state:
        state.check_params(dict(PARAMS, epsilon=1, hold=65536.0))  # the same numbers
        with pytest.raises(StateMismatchError, match=r"was made with epsilon = 1.0; this command has epsilon = 0.5\."):
            state.check_params(dict(PARAMS, epsilon=0.5, hold=2))
        with pytest.raises(StateMismatchError, match="was made with seed = None; this command has seed = 3"):
            state.check_params(dict(PARAMS, seed=3))
        with pytest.raises(StateMismatchError, match="this command has no hold"):
            state.check_params({k: v for k, v in PARAMS.items() if k != "hold"})
        with pytest.raises(StateMismatchError, match="was made without clip; this command has clip = True"):
            state.check_params(dict(PARAMS, clip=True))
        with pytest.raises(StateMismatchError, match="method = 'tops'; this command has method = 'pak'"):
            state.check_params(dict(PARAMS, method="pak"))


def test_progress_only_grows_and_is_checked(tmp_path):
    with StreamState.create(tmp_path / "state", params={}) as state:
        state.progress = Progress(consumed=10, released=5, output_bytes=40)
        with pytest.raises(ValueError, match="progress.released must not decrease, got 4 after 5"):
            state.progress = Progress(consumed=11, released=4, output_bytes=40)
        with pytest.raises(ValueError, match="consumed must be an integer >= 0"):
            Progress(consumed=-1)
        with pytest.raises(TypeError, match="progress must be a Progress"):
            state.progress = {"consumed": 11}


def test_an_unstorable_mechanism_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "state"
    with StreamState.create(path, params={}) as state:
        before = path.read_bytes()
        state.mechanism = {"perturber": {"rng": np.random.default_rng(0)}}
        with pytest.raises(TypeError, match=r"mechanism\['perturber'\]\['rng'\]: cannot store"):
            state.save()
        state.mechanism = [1, 2]
        with pytest.raises(TypeError, match="mechanism must be a dict or None, got list"):
            state.save()
    assert path.read_bytes() == before


# -- the ledger ----------------------------------------------------------------------------


def spend(state, first, last, stream="stream", epsilon=1.0, method="tops"):
    return state.spend(epsilon=epsilon, neighbours=EVENT_LEVEL, method=method, first=first, last=last, stream=stream)


@pytest.mark.parametrize("first, last", [(0, 100), (50, 60), (99, 200), (0, 1), (10, 150)])
def test_the_ledger_refuses_overlapping_positions_of_a_stream(tmp_path, first, last):
    with StreamState.create(tmp_path / "state", params={}) as state:
        spend(state, 0, 100)
        with pytest.raises(BudgetError, match=rf"input positions \[{first}, {last}\) of stream 'stream' were already "
                                              r"released under this state \(ledger entry 1: positions \[0, 100\)"):
            spend(state, first, last)
        spend(state, 0, 100, stream="other")  # another stream's positions
        assert len(state.ledger) == 2


def test_the_ledger_persists_and_keeps_one_entry_per_run(tmp_path):
    path = tmp_path / "state"
    with StreamState.create(path, params={}) as state:
        for start in range(0, 300, 100):  # a run records each chunk: one entry
            spend(state, start, start + 100)
        state.save()
    with StreamState.open(path) as state:
        with pytest.raises(BudgetError, match=r"\[250, 400\)"):
            spend(state, 250, 400)
        spend(state, 300, 350)  # the resumed run: a new entry
        spend(state, 350, 400)
        spend(state, 400, 450, epsilon=0.5)  # other terms: a new entry
        state.save()
    ledger = StreamState.read(path).ledger
    assert [(e.first, e.last, e.epsilon) for e in ledger] == [(0, 300, 1.0), (300, 400, 1.0), (400, 450, 0.5)]
    assert all(e.neighbours == str(EVENT_LEVEL) and e.method == "tops" for e in ledger)
    assert all(len(e.time) == 20 and e.time.endswith("Z") and e.time[10] == "T" for e in ledger)


@pytest.mark.parametrize("changes, message", [
    ({"first": 5, "last": 5}, "last must be > first"),
    ({"epsilon": 0.0}, "epsilon must be"),
    ({"epsilon": math.inf}, "epsilon must be a finite number"),
    ({"delta": 1.5}, r"delta must be in \[0, 1\]"),
    ({"first": -1}, "first must be an integer >= 0"),
    ({"method": " "}, "method must not be empty"),
])
def test_bad_ledger_entries_are_refused(changes, message):
    fields = dict(stream="s", first=0, last=10, epsilon=1.0, delta=0.0, neighbours="event level", method="tops",
                  time="2025-01-01T00:00:00Z")
    with pytest.raises(ValueError, match=message):
        LedgerEntry(**{**fields, **changes})


# -- dpstream budget ---------------------------------------------------------------------------


def test_budget_prints_the_ledger_and_totals_never_the_secrets(tmp_path):
    path, key = tmp_path / "state", bytes(range(100, 132))
    held = np.array([12345.678, 98765.4321])
    with StreamState.create(path, params=PARAMS, key=key, mechanism={"held": held}) as state:
        spend(state, 0, 65536, stream="meter-a")
        spend(state, 0, 1000, stream="meter-b", epsilon=0.5)
        state.spend(epsilon=0.25, delta=1e-6, neighbours="a user's whole stream", method="pak", first=0, last=10,
                    stream="meter-c")
        state.progress = Progress(consumed=65536, released=64536, output_bytes=1234567)
        state.save()
    result = CliRunner().invoke(cli, ["budget", str(path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out == format_ledger(path) + "\n"
    assert "65,536 input values consumed, 64,536 positions released, output 1,234,567 bytes" in out
    assert "method='tops', epsilon=1.0" in out
    assert "meter-a  [0, 65,536)".replace("  ", " ") in " ".join(out.split())
    assert f"[1] {EVENT_LEVEL}; [2] a user's whole stream" in out
    assert "all 2 streams under [1]: epsilon 1.5, delta 0.0 if one individual's data can lie in every stream" in out
    assert "epsilon 1.0, delta 0.0 if each individual's data lies in one stream" in out
    assert "meter-c 1 10 0.25 1e-06 [2]" in " ".join(out.split())
    import base64

    for secret in (key.hex(), base64.b64encode(key).decode(), "12345.678", base64.b64encode(held.tobytes()).decode()):
        assert secret not in out


def test_budget_of_an_empty_ledger_and_its_errors(tmp_path):
    path = tmp_path / "state"
    StreamState.create(path, params={}).close()
    runner = CliRunner()
    assert "the ledger is empty" in runner.invoke(cli, ["budget", str(path)]).stdout
    missing = runner.invoke(cli, ["budget", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "there is no state file" in missing.stderr
    path.write_bytes(path.read_bytes()[:-10])
    damaged = runner.invoke(cli, ["budget", str(path)])
    assert damaged.exit_code == 1 and "is damaged" in damaged.stderr and "Traceback" not in damaged.output
