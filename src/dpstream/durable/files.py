"""Files that appear whole or not at all: temporary names, stale temporaries, locks and fsync.

One mechanism for every file dpstream writes in place of another: the state file
(:func:`write_atomic`), the command line's ``-o`` outputs and its ``--out`` directories
(:mod:`dpstream.cli._outputs`).

* **Temporary names.**  What will replace ``NAME`` is written beside it, into
  ``.NAME.dpstream-PID-RANDOM.tmp`` (:func:`temporary_name`: the writer's process number and 8
  random hexadecimal digits; NAME cut to 180 characters, so that the name stays below the
  255-byte limit of a file name).  It is created exclusively (``O_EXCL``, never following a
  symbolic link), locked (``flock``) for as long as its writer lives, flushed and fsync-ed,
  renamed onto NAME, and the directory is fsync-ed so the rename survives a power loss
  (:func:`publish`).  Whatever the moment a process dies, NAME holds either the old or the new
  content.
* **Stale temporaries.**  A process killed during a write (SIGKILL cannot be caught) leaves its
  temporary behind; the next writer of NAME removes it (:func:`remove_stale_temporaries`), and
  only it: a name of exactly that pattern, owned by this user, a regular file or a directory
  (never a symbolic link), of a process that no longer exists and not locked (a live writer's
  lock, which the kernel drops when the writer dies, whatever its process namespace).
* **Locks.**  ``flock(LOCK_EX | LOCK_NB)`` (:func:`try_lock`), on a temporary while it is
  written and on ``NAME.lock`` beside a state (:class:`StateLock`; a separate file: the rename
  gives the state a new inode at every save, so its own descriptor could not carry a lasting
  lock).  The kernel drops a lock when its process ends, however it ends, SIGKILL included, so
  a lock is never stale; the lock file itself stays (deleting it would let two processes lock
  two different files of the same name).  flock is advisory: it keeps out other dpstream
  processes, not a user who edits the file.
* **fsync of a directory** (:func:`fsync_directory`), with one error policy for every caller:
  see there.

The state file's own format and errors are in :mod:`dpstream.durable.format`; it is written
with mode 0600 from its first byte, so it is never readable by others, not even briefly.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
import warnings
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from dpstream.durable.format import StateError, StateInUseError

__all__ = [
    "StateLock", "create_temporary_directory", "create_temporary_file", "discard", "fsync_directory", "publish",
    "other_writers", "remove_stale_temporaries", "same_file", "temporary_name", "try_lock", "write_atomic",
]

#: Every temporary is named ``.NAME.dpstream-PID-RANDOM.tmp``; nothing else is ever removed as stale.
_TEMPORARY = re.compile(r"^\.(?P<stem>.*)\.dpstream-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
#: The name state files' temporaries had before (``.NAME.PID.HEX12.tmp``, NAME whole): still removed when stale,
#: since a killed writer of an older release may have left one, holding secret state.
_OLDER_TEMPORARY = re.compile(r"^\.(?P<stem>.*)\.(?P<pid>\d+)\.[0-9a-f]{12}\.tmp$")
#: The part of a name kept in its temporary's name (which must stay below NAME_MAX, 255 bytes).
_STEM_LIMIT = 180
#: Errors of fsync on a directory that say only that its filesystem cannot sync a directory.
_NO_DIRECTORY_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _stem(name: str) -> str:
    return name[:_STEM_LIMIT] or "output"


def temporary_name(path: Path) -> Path:
    """A new temporary's path for what will replace ``path``: ``.NAME.dpstream-PID-RANDOM.tmp`` beside it.

    >>> name = temporary_name(Path("out") / "released.csv")
    >>> name.parent.as_posix(), bool(_TEMPORARY.match(name.name)), _TEMPORARY.match(name.name)["stem"]
    ('out', True, 'released.csv')
    """
    return path.with_name(f".{_stem(path.name)}.dpstream-{os.getpid()}-{secrets.token_hex(4)}.tmp")


def try_lock(descriptor: int) -> bool:
    """Take an exclusive ``flock`` on ``descriptor`` without waiting; False if another open file holds it.

    Other errors (a filesystem without locks) are raised.
    """
    import fcntl  # POSIX only; imported here so that the rest of dpstream imports everywhere

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def same_file(first: os.stat_result, second: os.stat_result) -> bool:
    """Whether two ``stat`` results are of one file (device and inode)."""
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def fsync_directory(directory: Path) -> None:
    """fsync ``directory``, so that a rename in it survives a power loss.

    The error policy, the same for every file dpstream writes: the rename is done when this runs,
    so an error only says whether it has reached the disk.  A directory this process cannot open
    (write and search permission without read) or whose filesystem cannot sync a directory
    (EINVAL, ENOTSUP) is passed over: nothing more can be done there, and refusing would refuse
    every write into it.  An error of the sync itself (EIO: the disk failed) is raised: the
    renamed file may be lost in a power cut, and its writer must not report it safe.
    """
    try:
        descriptor = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(descriptor)


def create_temporary_file(temporary: Path, target: Path, *, mode: int | None = None) -> int:
    """Create ``temporary`` (from :func:`temporary_name`) for what will replace ``target``, locked; return
    its descriptor, open for writing.

    With ``mode``, the file has exactly that mode from before its first byte, whatever the
    umask; without, it takes the permissions of an existing ``target`` (a private output stays
    private), else 0666 under the umask.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
    descriptor = os.open(temporary, flags, 0o666 if mode is None else mode)
    try:
        with suppress(OSError):  # no lock on this filesystem: its stale copy is then told by its pid alone
            try_lock(descriptor)
        if mode is not None:
            os.fchmod(descriptor, mode)
        else:
            with suppress(OSError):
                os.fchmod(descriptor, stat.S_IMODE(os.stat(target).st_mode))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def create_temporary_directory(temporary: Path) -> int:
    """Create the directory ``temporary`` (from :func:`temporary_name`), locked; return its descriptor."""
    os.mkdir(temporary, 0o777)
    descriptor = os.open(temporary, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    with suppress(OSError):
        try_lock(descriptor)
    return descriptor


def publish(temporary: Path, target: Path) -> None:
    """Rename the complete ``temporary`` onto ``target`` and make the rename durable."""
    os.replace(temporary, target)
    fsync_directory(target.parent)


def discard(temporary: Path) -> None:
    """Remove ``temporary`` (a file or a directory tree) if it is still there: after a failure, or
    nothing to do after :func:`publish`."""
    if temporary.is_dir() and not temporary.is_symlink():
        shutil.rmtree(temporary, ignore_errors=True)
    else:
        with suppress(OSError):
            os.unlink(temporary)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably, with mode 0600 (see the module docstring).

    On any failure (an error, a signal turned into an exception) the temporary file is removed
    and ``path`` is untouched.
    """
    temporary = temporary_name(path)
    try:  # from before the file exists: a failure at any point leaves nothing behind
        descriptor = create_temporary_file(temporary, path, mode=0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view):]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        publish(temporary, path)
    finally:
        discard(temporary)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number no process has): leave its file alone
    return True


def _temporaries(path: Path) -> Iterator[tuple[os.DirEntry[str], int]]:
    """The entries beside ``path`` named as its temporaries, with the pid their name holds."""
    stem = _stem(path.name)
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in entries:
        found = _TEMPORARY.match(entry.name)
        older = None if found else _OLDER_TEMPORARY.match(entry.name)
        if found is not None and found["stem"] == stem:
            yield entry, int(found["pid"])
        elif older is not None and older["stem"] == path.name:
            yield entry, int(older["pid"])


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries that killed writers of ``path`` left beside it; return them.

    Only what matches ``.NAME.dpstream-PID-RANDOM.tmp`` for ``path``'s NAME exactly (or the older
    ``.NAME.PID.HEX12.tmp`` of state files), is owned by
    this user, is a regular file or a directory (never a symbolic link), belongs to a process
    that no longer exists and is not locked is removed (see the module docstring).
    """
    removed: list[Path] = []
    for entry, pid in _temporaries(path):
        if _pid_alive(pid):
            continue
        try:
            status = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(status.st_mode)
            if status.st_uid != os.geteuid() or not (is_dir or stat.S_ISREG(status.st_mode)):
                continue
            descriptor = os.open(entry.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (_DIRECTORY if is_dir else 0))
        except OSError:
            continue
        try:
            if not try_lock(descriptor) or not same_file(os.fstat(descriptor), status):
                continue
            if is_dir:
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
        finally:
            os.close(descriptor)
    return removed


def other_writers(path: Path, own: Path) -> list[int]:
    """The pids of the live processes writing a temporary for ``path`` other than ``own`` (this process's):
    those whose temporary is locked.  Two writers of one output at once: the later one refuses (both may,
    if they start within the same instant; never neither)."""
    writers = []
    for entry, pid in _temporaries(path):
        if entry.name == own.name or entry.is_symlink():
            continue
        try:
            descriptor = os.open(entry.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (_DIRECTORY if entry.is_dir() else 0))
        except OSError:
            continue
        try:
            if not try_lock(descriptor):
                writers.append(pid)
        except OSError:
            continue
        finally:
            os.close(descriptor)
    return writers


class StateLock:
    """The exclusive advisory lock of a state file, held until :meth:`release` or the process ends.

    Parameters
    ----------
    path : pathlib.Path
        The state file; the lock is taken on ``path`` + ``.lock`` (created with mode 0600).

    Raises
    ------
    StateInUseError
        If another process holds it (the message names its pid), or another handle of this one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC | _NOFOLLOW, 0o600)
        except FileNotFoundError:
            raise StateError(f"the directory {path.parent} of the state file does not exist.") from None
        try:
            locked = try_lock(fd)
        except BaseException:
            os.close(fd)
            raise
        if not locked:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if holder == str(os.getpid()):
                raise StateInUseError(f"state {path} is already open in this process.")
            raise StateInUseError(
                f"state {path} is in use by another process (pid {holder or 'unknown'}); two processes must never "
                "drive one stream. Wait for it to end or stop it (its lock goes with it, even if it is killed)."
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Release the lock (the lock file stays); calling it again does nothing."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with suppress(OSError):
                os.ftruncate(fd, 0)  # no pid left behind to name a process that no longer holds it
            os.close(fd)  # closing the last descriptor of the open file releases the flock


#: Names that moved to :mod:`dpstream.durable.format` (the state file's format), kept here for one release.
_MOVED = ("FORMAT", "VERSION", "StateDamagedError", "dump_state", "parse_state")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from dpstream.durable import format as state_format

        warnings.warn(f"dpstream.durable.files.{name} is deprecated; use dpstream.durable.format.{name} (or "
                      "dpstream.durable).", DeprecationWarning, stacklevel=2)
        return getattr(state_format, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
