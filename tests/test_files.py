"""The one mechanism for files replaced whole (``dpstream.durable.files``): what the state file and
the command line's outputs now share -- one temporary name, one stale-temporary rule, one lock,
one directory fsync policy."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import subprocess
import sys
import warnings

import pytest

from dpstream.durable import StreamState
from dpstream.durable import files as files_module
from dpstream.durable import format as state_format
from dpstream.durable.files import (
    create_temporary_file,
    fsync_directory,
    remove_stale_temporaries,
    temporary_name,
    try_lock,
    write_atomic,
)

PARAMS = {"method": "tops", "epsilon": 1.0}
#: The documented name of every temporary: ``.NAME.dpstream-PID-RANDOM.tmp``.
TEMPORARY = re.compile(r"^\.(?P<stem>.*)\.dpstream-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")


@pytest.fixture
def dead_pid():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its number now belongs to no process
    return dead.pid


def test_the_temporary_name_is_the_documented_one_and_fits_a_file_name(tmp_path):
    short = temporary_name(tmp_path / "state")
    assert short.parent == tmp_path
    found = TEMPORARY.match(short.name)
    assert found and found["stem"] == "state" and int(found["pid"]) == os.getpid()
    long = temporary_name(tmp_path / ("s" * 255))
    assert len(long.name.encode()) <= 255 and TEMPORARY.match(long.name)
    assert temporary_name(tmp_path / "state") != short  # random: two writers of one process do not collide


def test_a_state_with_a_long_name_saves_and_leaves_no_temporary(tmp_path):
    path = tmp_path / ("s" * 240)
    with StreamState.create(path, params=PARAMS) as state:
        state.mechanism = {"n": 1}
        state.save()
    with StreamState.open(path) as state:
        assert state.mechanism == {"n": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, path.name + ".lock"])


def test_opening_a_state_removes_a_dead_writers_temporary_only(tmp_path, dead_pid):
    path = tmp_path / "state"
    StreamState.create(path, params=PARAMS).close()
    stale = tmp_path / f".state.dpstream-{dead_pid}-0123abcd.tmp"
    stale.write_bytes(b"a killed save")
    live = tmp_path / f".state.dpstream-{os.getppid()}-0123abcd.tmp"
    live.write_bytes(b"a running process's")
    link = tmp_path / f".state.dpstream-{dead_pid}-4567abcd.tmp"
    link.symlink_to(tmp_path / "elsewhere")
    StreamState.open(path).close()
    assert not stale.exists() and live.exists() and link.is_symlink()


def test_a_dead_writers_temporary_of_the_older_name_is_removed_too(tmp_path, dead_pid):
    path = tmp_path / "state"
    StreamState.create(path, params=PARAMS).close()
    older = tmp_path / f".state.{dead_pid}.0123456789ab.tmp"
    older.write_bytes(b"a killed save of an older release")
    live = tmp_path / f".state.{os.getppid()}.0123456789ab.tmp"
    live.write_bytes(b"a running process's")
    other = tmp_path / f".state2.{dead_pid}.0123456789ab.tmp"
    other.write_bytes(b"another file's")
    StreamState.open(path).close()
    assert not older.exists() and live.exists() and other.exists()


def test_a_locked_temporary_is_kept_whatever_its_number(tmp_path, dead_pid):
    # a writer in another process namespace may carry any number: its lock says that it lives
    path = tmp_path / "out.csv"
    temporary = tmp_path / f".out.csv.dpstream-{dead_pid}-0123abcd.tmp"
    temporary.write_text("being written")
    descriptor = os.open(temporary, os.O_RDONLY)
    try:
        assert try_lock(descriptor)
        assert remove_stale_temporaries(path) == []
    finally:
        os.close(descriptor)  # the writer dies: its lock goes with it
    assert remove_stale_temporaries(path) == [temporary]


def test_a_new_temporary_is_locked_and_keeps_the_targets_permissions(tmp_path):
    target = tmp_path / "private.csv"
    target.write_text("old")
    target.chmod(0o600)
    temporary = temporary_name(target)
    descriptor = create_temporary_file(temporary, target)
    try:
        assert stat.S_IMODE(os.fstat(descriptor).st_mode) == 0o600
        other = os.open(temporary, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(descriptor)


class _DirectorySyncFails:
    """The ``os`` module as the files module sees it, with fsync of a directory failing with ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def fsync(self, descriptor: int) -> None:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            raise OSError(self.code, os.strerror(self.code))
        os.fsync(descriptor)

    def __getattr__(self, name):
        return getattr(os, name)


def test_a_filesystem_that_cannot_sync_a_directory_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setattr(files_module, "os", _DirectorySyncFails(errno.EINVAL))
    write_atomic(tmp_path / "state", b"new")
    fsync_directory(tmp_path)
    assert (tmp_path / "state").read_bytes() == b"new"


def test_a_failed_directory_sync_is_raised_and_nothing_is_left_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(files_module, "os", _DirectorySyncFails(errno.EIO))
    with pytest.raises(OSError) as raised:
        write_atomic(tmp_path / "state", b"new")
    assert raised.value.errno == errno.EIO
    assert [p.name for p in tmp_path.iterdir()] == ["state"]  # renamed, not known to be on the disk
    fsync_directory(tmp_path / "no-such-directory")  # what cannot be opened is passed over


@pytest.mark.parametrize("name", ["FORMAT", "VERSION", "StateDamagedError", "dump_state", "parse_state"])
def test_the_format_names_still_import_from_files_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=f"dpstream.durable.format.{name}"):
        moved = getattr(files_module, name)
    assert moved is getattr(state_format, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert files_module.StateInUseError is state_format.StateInUseError  # used here: no warning
    with pytest.raises(AttributeError):
        files_module.no_such_name  # noqa: B018
