"""The state file's format: a versioned, checksummed body of plain JSON data, and its errors.

Format (version 1): two lines of UTF-8 JSON.  The first is the header, e.g.
``{"format": "dpstream-state", "version": 1, "sha256": "...", "body_bytes": 1234}``; the second
is the body (``body_bytes`` bytes before the final newline, whose SHA-256 is ``sha256``).  A
file cut short, extended or edited by accident (a torn copy, a stray edit, a disk error) fails
the check and is refused; nothing of it is used.  The checksum is no protection against forgery:
anyone who can write the file can recompute it (and a keyed checksum would not help, since
whoever holds the state holds its key).  A forged state is its holder's release; what a release
commits before it publishes (:mod:`dpstream.durable.commitment`) keeps accidents from publishing
a position twice.

How the bytes reach the disk (atomically, with mode 0600) and the lock that keeps a second
process out are in :mod:`dpstream.durable.files`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "VERSION", "StateDamagedError", "StateError", "StateInUseError", "dump_state", "parse_state"]

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
    dpstream.durable.format.StateDamagedError: state file s.json is damaged: its body is 4 bytes, its header says 7; ...
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
