"""The files of a SQLite database (itself, its ``-wal`` and ``-shm``): created with mode 0600, refused when others
can read or write them, for they hold the secret keys and states."""

from __future__ import annotations

import errno
import os
import stat

from dpstream.service.schema import StorageError

__all__ = ["secure_file"]


def secure_file(name: str, path: str) -> None:
    """Create the file ``name`` of the database ``path`` (itself, or its ``-wal`` or ``-shm``) with mode 0600, or
    refuse an existing one that others can read or write.

    An existing file is only looked at, never opened: closing a descriptor of a file would drop the locks
    SQLite holds on it for another connection of this process.
    """
    while True:
        try:
            os.close(os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            return
        except FileExistsError:
            pass
        except OSError as error:
            raise StorageError(f"database {path}: cannot open {'it' if name == path else name} "
                               f"({error.strerror}).") from None
        try:
            status = os.stat(name)
            break
        except FileNotFoundError:  # removed meanwhile (another process closed the database last): create it
            continue
    refused = (errno.EISDIR if stat.S_ISDIR(status.st_mode)
               else None if os.access(name, os.R_OK | os.W_OK) else errno.EACCES)
    if refused is not None:
        raise StorageError(f"database {path}: cannot open {'it' if name == path else name} "
                           f"({os.strerror(refused)}).")
    mode = stat.S_IMODE(status.st_mode)
    if mode & 0o077:
        holds = "secret keys" if name == path else "pages of the database and its secret keys"
        raise StorageError(f"database {'' if name == path else 'file '}{name} has mode {mode:04o}: it holds {holds}, "
                           f"so no other user may read it; run chmod 600 {name}.")
