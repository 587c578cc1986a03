"""What a durable release commits to before it publishes: its input (:class:`InputLog`) and its output.

A release publishes a value only after its state records, durably, a commitment to the input
positions the value derives from and to the bytes it publishes (:mod:`dpstream.durable.release`).
The ``commitment`` section of the state holds:

* ``inputs`` -- the input consumed so far as segments ``{"first", "last", "source", "mac"}``:
  positions ``[first, last)`` were read from ``source`` (``"stdin"``, a file's absolute path, or
  None in a state written before segments were kept) and ``mac`` is an HMAC-SHA256, under the
  state's key, of their values (float64, little-endian) followed by an HMAC of their key and time
  texts.  A resumed run reading a file checks every segment against the values it skips: a file
  that is not the one consumed is refused before anything is written.  A run reading stdin
  cannot see what it skips (the producer continues from the consumed count), so it opens a new
  segment; a stream read from a file is not continued from stdin (:meth:`InputLog.check_source`).
* ``tail`` -- the text of the last group of lines committed, written to the output only after the
  state holding it is saved: a run killed between the save and the write leaves an output that
  lacks part of it, and the next run writes the rest (the write-ahead), and a run finds the output
  edited when its committed end is not this text.
* ``replay_to`` -- the output's length up to which it holds lines written by a release of an
  older dpstream after its last checkpoint (when it wrote before committing): they were
  published, and a resumed run must release them again identically (checked, never rewritten).

The MAC is keyed so that the state does not tell the input's values to whoever reads only its
public parts; like the state's checksum it protects against accidents (a wrong or changed input
file, an edited output), not against forgery: whoever holds the state holds its key.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import numpy as np

from dpstream.durable.format import StateError

__all__ = ["InputLog", "ResumeError", "check_output"]


class ResumeError(StateError):
    """The output or the input is not what the state recorded (nothing is written), or a replayed byte differs."""


class _Segment:
    """One segment of the input log, with the HMACs of what it has absorbed."""

    def __init__(self, key: bytes, first: int, last: int | None, source: str | None, mac: str | None) -> None:
        self.first, self.last, self.source, self.mac = first, last, source, mac
        self.values = hmac.new(key, digestmod=hashlib.sha256)
        self.texts = hmac.new(key, digestmod=hashlib.sha256)

    def digest(self) -> str:
        return self.values.hexdigest() + self.texts.hexdigest()

    def to_json(self, last: int) -> dict[str, Any]:
        return {"first": self.first, "last": last, "source": self.source, "mac": self.digest()}


class InputLog:
    """The commitment to the input of one run: checks the committed segments, MACs the new values.

    ``update(values, texts)`` absorbs the next rows of the input, in order, from position 0 of a
    file (the rows a resumed run skips are checked against their segments) or from the consumed
    count on stdin; :meth:`segments` is what a checkpoint stores.  ``counts=False``: a refusal does not
    say which positions differ (how many rows were consumed is data under a unit-level relation).
    """

    def __init__(self, key: bytes, stored: list[dict[str, Any]] | None, *, consumed: int, source: str,
                 counts: bool = True) -> None:
        self._key, self.source, self.consumed, self.counts = key, source, consumed, counts
        if stored is None:  # a state of an older dpstream: what it consumed cannot be checked
            stored = [{"first": 0, "last": consumed, "source": None, "mac": None}] if consumed else []
        self._committed = [_Segment(key, int(s["first"]), int(s["last"]), s["source"], s["mac"]) for s in stored]
        self._index = 0
        self._open: _Segment | None = None
        self.position = 0

    @property
    def stdin(self) -> bool:
        return self.source == "stdin"

    def check_source(self, path: Path) -> None:
        """Refuse to continue from stdin a stream read from a file: stdin's rows cannot be checked, and
        re-reading the file through it would release its values again at new positions."""
        last = self._committed[-1] if self._committed else None
        if not self.stdin or last is None or last.source in (None, "stdin"):
            return
        raise ResumeError(
            f"the state {path} has consumed {self.consumed:,} input values, read from the file {last.source}; stdin "
            f"cannot be checked to continue it (it would have to start at the value at position {self.consumed:,}, "
            "0-based, of that stream). Continue with a file that holds the whole stream from its first value "
            "(nothing was written).")

    def start(self) -> None:
        """Start absorbing: at the consumed count on stdin, at position 0 (checking) from a file."""
        if self.stdin:
            self.position = self.consumed
            self._index = len(self._committed)
        self._advance()

    def _advance(self) -> None:
        """Past the segments whose end is reached: check each, then open the run's own segment."""
        while self._index < len(self._committed) and self.position >= self._committed[self._index].last:
            segment = self._committed[self._index]
            if segment.mac is not None and not self.stdin and not hmac.compare_digest(segment.digest(), segment.mac):
                where = f"the file {segment.source}" if segment.source not in (None, "stdin") else segment.source
                at = f" at positions [{segment.first:,}, {segment.last:,})" if self.counts else ""
                raise ResumeError(
                    f"the input differs from the one the state consumed{at} (read from {where}): is it the same "
                    "input? A changed value there would be released under the noise of values already published "
                    "(nothing was written).")
            self._index += 1
            last = self._index == len(self._committed)
            if last and segment.mac is not None and segment.source == self.source and not self.stdin:
                self._committed.pop()  # the run extends the segment it checked
                self._index -= 1
                segment.last = None
                self._open = segment
        if self._index == len(self._committed) and self._open is None and self.position >= self.consumed:
            self._open = _Segment(self._key, self.position, None, self.source, None)

    def update(self, values: np.ndarray, texts: list[str] | None) -> None:
        """Absorb the next rows: their float64 values and, with key or time columns, one text per row."""
        done, count = 0, len(values)
        while done < count:
            if self._index < len(self._committed):
                segment = self._committed[self._index]
                end = min(count, done + segment.last - self.position)
            else:
                segment, end = self._open, count
            assert segment is not None
            segment.values.update(np.ascontiguousarray(values[done:end], dtype="<f8").tobytes())
            if texts is not None:
                segment.texts.update("".join(text + "\x1e" for text in texts[done:end]).encode("utf-8"))
            self.position += end - done
            done = end
            self._advance()

    def segments(self) -> list[dict[str, Any]]:
        """The segments to store once the input up to :attr:`position` is committed."""
        stored = [{"first": s.first, "last": s.last, "source": s.source, "mac": s.mac} for s in self._committed]
        if self._open is not None and self.position > self._open.first:
            stored.append(self._open.to_json(self.position))
        return stored


def row_texts(keys: list[str] | None, times: list[str] | None) -> list[str] | None:
    """One text per row of the key and time columns (None without them), as the input log absorbs them."""
    if keys is None and times is None:
        return None
    if keys is None:
        return list(times)  # type: ignore[arg-type]
    if times is None:
        return list(keys)
    return [f"{key}\x1f{time}" for key, time in zip(keys, times)]


def check_output(path: Path, size: int | None, *, recorded: int, commitment: dict[str, Any] | None,
                 state_path: Path) -> tuple[bytes, bytes]:
    """Check the output of a resumed run against what the state committed; nothing is changed.

    Returns ``(missing, replay)``: the committed bytes the output lacks (a run killed between
    saving the state and writing them: written before anything else), and the bytes an older
    dpstream wrote after its last checkpoint (to be released again identically).  Raises
    :class:`ResumeError` when the output holds less than was committed or more than it may.
    """
    tail = (commitment or {}).get("tail", "").encode("utf-8")
    replay_to = recorded if commitment is None else max(recorded, int(commitment.get("replay_to", 0)))
    if commitment is None and size is not None and size > recorded:
        replay_to = size  # a state of an older dpstream: what its killed run wrote after the checkpoint
    if size is None and recorded:
        raise ResumeError(f"the output {path} is missing, but the state {state_path} records {recorded:,} bytes of "
                          "it; restore the output (nothing was written).")
    size = size or 0
    if size > replay_to:
        raise ResumeError(
            f"the output {path} holds {size:,} bytes, more than the {replay_to:,} the state {state_path} committed: "
            "it was edited, or the state is an older copy. If the state is a restored copy, use the newest copy "
            "instead: the lines after its commit were published and a changed input would publish second values "
            f"for their positions. Only if those lines were never published, cut them (truncate -s {replay_to} "
            f"{path}) and run again (nothing was written).")
    start = recorded - len(tail)
    end = min(size, recorded)
    held = b""
    if tail and end > start:
        with open(path, "rb") as output:
            output.seek(start)
            held = output.read(end - start)
    if tail and held != tail[: len(held)]:
        raise ResumeError(f"the output {path} was edited: its lines before byte {recorded:,} are not those the "
                          f"state {state_path} committed; restore it (nothing was written).")
    if size < start or (size < recorded and replay_to > recorded):
        raise ResumeError(f"the output {path} holds {size:,} bytes, fewer than the {recorded:,} the state "
                          f"{state_path} records; it was changed since: restore it (nothing was written).")
    replay = b""
    if replay_to > recorded:
        with open(path, "rb") as output:
            output.seek(recorded)
            replay = output.read()
    return tail[max(0, size - start):] if size < recorded else b"", replay
