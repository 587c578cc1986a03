"""Reading a stream file of either format: :class:`StreamReader` opens a path (text, gzipped
text, stdin or Parquet) and reads it by values, records or batches; :func:`read_values` reads a
whole file into an array; :func:`iter_chunks` groups values read one by one into arrays."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

from dpstream._checks import check_choice, check_positive_int
from dpstream.io.parquet import _ParquetStream
from dpstream.io.records import MISSING_POLICIES, Batch, ReadStats, Record, _check_names
from dpstream.io.text import _existing, iter_batches, iter_records, iter_values, open_input

__all__ = ["StreamReader", "iter_chunks", "read_values"]

#: Rows per record batch when Parquet is read value by value, and values per batch of :func:`read_values`.
_CHUNK = 65536

_PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")


def _is_parquet(path: str | os.PathLike[str]) -> bool:
    if str(path) == "-":
        return False
    path = _existing(path)
    if path.suffix.lower() in _PARQUET_SUFFIXES:
        return True
    if not path.is_file():  # a pipe (such as <(zcat ...)) cannot be peeked at without losing bytes
        return False
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


class StreamReader:
    """A stream file, text or Parquet, read by values, records or batches.

    Parameters
    ----------
    path : str or path-like
        ``-`` is stdin (text); ``*.gz`` is gzipped text; ``*.parquet`` (or a file that starts
        with Parquet's magic bytes) is Parquet; anything else is text.
    column, time_column, key_column : str, optional
        Names of the value, time and key columns (see :mod:`dpstream.io`).
    missing : {"error", "zero", "skip"}
        What a missing value does.
    stats : ReadStats, optional
        Where to count what is read (a fresh one by default).

    Attributes
    ----------
    source : str
        The name used in messages (``stdin`` for ``-``).
    stats : ReadStats
        Filled in while reading, for a report after the loop.

    A reader is read once, by one of :meth:`values`, :meth:`records` or :meth:`batches`.  Use
    it as a context manager (or call :meth:`close`); stdin is never closed.  A missing file, a
    Parquet file without the columns asked for or with a non-numeric value column is an error
    here already, before anything is read.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "meter.csv"
    >>> _ = path.write_text("time,kWh\\n08:00,1.5\\n09:00,NA\\n10:00,2\\n")
    >>> with StreamReader(path, time_column="time", missing="skip") as reader:
    ...     [(batch.values.tolist(), batch.times) for batch in reader.batches(1000)]
    [([1.5, 2.0], ['08:00', '10:00'])]
    >>> reader.stats.skipped, reader.stats.first_missing
    (1, 3)
    """

    def __init__(self, path: str | os.PathLike[str], *, column: str | None = None, time_column: str | None = None,
                 key_column: str | None = None, missing: str = "error", stats: ReadStats | None = None) -> None:
        _check_names(column, time_column, key_column)
        self.missing = check_choice(missing, "missing", MISSING_POLICIES)
        self.source = "stdin" if str(path) == "-" else str(path)
        self.columns = (column, time_column, key_column)
        self.stats = ReadStats() if stats is None else stats
        self._used = False
        self._handle: TextIO | None = None
        self._parquet: _ParquetStream | None = None
        if _is_parquet(path):
            self._parquet = _ParquetStream(Path(path), self.source, *self.columns, self.missing, self.stats)
        else:
            self._handle = open_input(path)

    @property
    def format(self) -> str:
        """``"parquet"`` or ``"text"``."""
        return "text" if self._parquet is None else "parquet"

    def _start(self) -> None:
        if self._used:
            raise RuntimeError(f"{self.source} has been read already; open a new StreamReader to read it again.")
        self._used = True

    def values(self) -> Iterator[float]:
        """The values one at a time; from text, each as soon as its line arrives."""
        self._start()
        if self._parquet is not None:
            return itertools.chain.from_iterable(batch.values.tolist() for batch in self._parquet.batches(_CHUNK))
        return iter_values(self._handle, self.columns[0], self.source, missing=self.missing, stats=self.stats)

    def records(self) -> Iterator[Record]:
        """:class:`Record` s one at a time; from text, each as soon as its line arrives."""
        self._start()
        if self._parquet is not None:
            return itertools.chain.from_iterable(batch.records() for batch in self._parquet.batches(_CHUNK))
        column, time_column, key_column = self.columns
        return iter_records(self._handle, column, self.source, time_column=time_column, key_column=key_column,
                            missing=self.missing, stats=self.stats)

    def batches(self, size: int = 65536) -> Iterator[Batch]:
        """:class:`Batch` es of at most ``size`` values (the fast path for files)."""
        size = check_positive_int(size, "size")
        self._start()
        if self._parquet is not None:
            return self._parquet.batches(size)
        column, time_column, key_column = self.columns
        return iter_batches(self._handle, size, column, self.source, time_column=time_column,
                            key_column=key_column, missing=self.missing, stats=self.stats)

    def close(self) -> None:
        """Close the file (never stdin)."""
        if self._handle is not None and self._handle is not sys.stdin:
            self._handle.close()
        if self._parquet is not None:
            self._parquet.close()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

def read_values(path: str | os.PathLike[str], column: str | None = None, *, missing: str = "error",
                stats: ReadStats | None = None) -> np.ndarray:
    """Read a whole stream file (text or Parquet) into a float64 array.

    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> _ = tmp.write_text("time,value\\n1,4\\n2,3.5\\n")
    >>> read_values(tmp, column="value").tolist()
    [4.0, 3.5]
    """
    with StreamReader(path, column=column, missing=missing, stats=stats) as reader:
        chunks = [batch.values for batch in reader.batches(_CHUNK)]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.float64)


def iter_chunks(values: Iterable[float], size: int) -> Iterator[np.ndarray]:
    """Group an iterator of values into float64 arrays of at most ``size`` values."""
    iterator = iter(values)
    while (chunk := np.fromiter(itertools.islice(iterator, size), dtype=np.float64)).size:
        yield chunk

