"""The state file on disk: a versioned, checksummed format, atomic replacement and an advisory lock.

Format (version 1): two lines of UTF-8 JSON.  The first is the header, e.g.
``{"format": "dpstream-state", "version": 1, "sha256": "...", "body_bytes": 1234}``; the second
is the body (``body_bytes`` bytes before the final newline, whose SHA-256 is ``sha256``).  A
file cut short, extended or edited fails the check and is refused; nothing of it is used.

Writes are atomic: the new content goes to a temporary file of a unique name beside the target
(created with mode 0600, so it is never readable by others, not even briefly), is flushed and
fsync-ed, renamed onto the target, and the directory is fsync-ed so the rename survives a power
loss.  Whatever the moment a process dies, the target holds either the old or the new content.
A process killed during a write can leave its temporary file behind (``.NAME.PID.HEX.tmp``); the
next process that takes the lock removes such files.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``NAME.lock`` beside the state (a separate file:
the rename gives the state a new inode at every save, so its own descriptor could not carry a
lasting lock).  The kernel drops the lock when its process ends, however it ends, SIGKILL
included, so a lock is never stale; the lock file itself stays (deleting it would let two
processes lock two different files of the same name).  flock is advisory: it keeps out other
dpstream processes, not a user who edits the file.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT", "VERSION", "StateDamagedError", "StateError", "StateInUseError", "StateLock", "dump_state",
    "parse_state", "remove_stale_temporaries", "write_atomic",
]

#: The ``format`` of every state file's header.
FORMAT = "dpstream-state"
#: The version this dpstream writes and reads.
VERSION = 1


class StateError(ValueError):
    """A state file cannot be used as asked (missing, exists, read-only, mismatched, ...)."""


class StateDamagedError(StateError):
    """A state file is not a complete, unedited dpstream state file of a known version."""


class StateInUseError(StateError):
    """Another process (or another handle in this one) holds the state's lock."""


def dump_state(body: dict[str, Any]) -> bytes:
    """The file's bytes for a body of plain JSON data (see :mod:`dpstream.durable.encoding`).

    >>> dump_state({"a": 1}).decode()  # doctest: +NORMALIZE_WHITESPACE
    '{"format": "dpstream-state", "version": 1,
      "sha256": "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862", "body_bytes": 7}\\n{"a":1}\\n'
    """
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")
    header = {"format": FORMAT, "version": VERSION, "sha256": hashlib.sha256(payload).hexdigest(),
              "body_bytes": len(payload)}
    return json.dumps(header).encode("ascii") + b"\n" + payload + b"\n"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_state(data: bytes, path: Path | str) -> dict[str, Any]:
    """The body of a state file's bytes, after checking the header, the length and the checksum.

    Raises
    ------
    StateDamagedError
        If ``data`` is not a dpstream state file, is of another version, or fails its checks.

    Examples
    --------
    >>> parse_state(dump_state({"a": 1}), "s.json")
    {'a': 1}
    >>> parse_state(dump_state({"a": 1})[:-4], "s.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    dpstream.durable.files.StateDamagedError: state file s.json is damaged: its body is 4 bytes, its header says 7; ...
    """
    line, newline, rest = data.partition(b"\n")
    try:
        header = json.loads(line, parse_constant=_refuse_constant) if newline else None
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateDamagedError(f"{path} is not a dpstream state file (its first line is not a {FORMAT} header).")
    if header.get("version") != VERSION:
        raise StateDamagedError(f"state file {path} has format version {header.get('version')!r}; this dpstream "
                                f"reads version {VERSION} only.")
    advice = ("it was cut short or edited, and is not used. Restore it from a copy; do not start a new state for "
              "this stream, which would draw new noise for positions already released.")
    size, digest = header.get("body_bytes"), header.get("sha256")
    body = rest[:-1] if rest.endswith(b"\n") else None
    if body is None or len(body) != size:
        got = len(rest) if body is None else len(body)
        raise StateDamagedError(f"state file {path} is damaged: its body is {got} bytes, its header says {size!r}; "
                                f"{advice}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise StateDamagedError(f"state file {path} is damaged: its checksum does not match; {advice}")
    try:
        content = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise StateDamagedError(f"state file {path} is damaged: its body is not JSON ({error}).") from None
    if not isinstance(content, dict):
        raise StateDamagedError(f"state file {path} is damaged: its body is not a JSON object.")
    return content


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably, with mode 0600 (see the module docstring).

    On any failure (an error, a signal turned into an exception) the temporary file is removed
    and ``path`` is untouched.
    """
    temporary = _temporary_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(path.parent)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files that killed writers of ``path`` left behind; return them.

    Call it only while holding ``path``'s lock: then no other process is writing one.
    """
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[0-9]+\.[0-9a-f]{{12}}\.tmp")
    removed = []
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if pattern.fullmatch(candidate.name) and candidate.is_file() and not candidate.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()
                removed.append(candidate)
    return removed


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
        import fcntl  # POSIX only; imported here so that the rest of dpstream imports everywhere

        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.lock_path, flags, 0o600)
        except FileNotFoundError:
            raise StateError(f"the directory {path.parent} of the state file does not exist.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if holder == str(os.getpid()):
                raise StateInUseError(f"state {path} is already open in this process.") from None
            raise StateInUseError(
                f"state {path} is in use by another process (pid {holder or 'unknown'}); two processes must never "
                "drive one stream. Wait for it to end or stop it (its lock goes with it, even if it is killed)."
            ) from None
        except BaseException:
            os.close(fd)
            raise
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
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no pid left behind to name a process that no longer holds it
            os.close(fd)  # closing the last descriptor of the open file releases the flock
