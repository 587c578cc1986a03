"""Reading rows of named columns -- time, unit, value and an optional partition -- in record batches.

What ``dpstream aggregate`` reads: CSV (a header line naming the columns; ``.gz`` allowed, ``-``
is stdin) or Parquet, parsed by pyarrow a block at a time (no Python loop per row), so memory is
constant in the rows.  The value column is read as float64: an empty field and ``NA``, ``NaN``
and ``null`` in any letter case are missing (the ``missing`` policy decides: ``error`` stops at
the first, ``zero`` reads it as 0, ``skip`` drops its row from the release, though it still
counts as a row of the input); the time, unit and partition fields are text, and an empty one is
an error.  Rows are numbered from 1, the header not counted ("row 3").  Errors are
:class:`~dpstream.io.InputError`, one line.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from dpstream.io.records import MISSING_POLICIES, MISSING_TOKENS, InputError, _quote
from dpstream.io.text import _existing

__all__ = ["RowBatch", "read_rows"]

#: Bytes of CSV parsed per batch: pyarrow reads a few blocks ahead, so this bounds the reader's memory (about
#: 140 MiB of peak RSS whatever the length of the input; 8 MiB blocks peak near 300 MiB at the same speed).
_BLOCK = 1 << 20
#: Every letter case of the missing-value tokens, as pyarrow's CSV reader matches them (exactly).
_NULLS = sorted({"".join(chars) for token in MISSING_TOKENS
                 for chars in itertools.product(*[(c.lower(), c.upper()) for c in token])} | {""})


@dataclass(frozen=True)
class RowBatch:
    """Consecutive rows: the time texts, unit and partition names (None without a partition column), values.

    ``first_row`` is the 1-based number of the first row; ``missing`` marks rows whose value was
    missing (``missing="skip"``: to be dropped; ``zero``: read as 0).
    """

    times: pa.Array
    units: pa.Array
    values: np.ndarray
    partitions: pa.Array | None
    first_row: int
    missing: np.ndarray

    def __len__(self) -> int:
        return int(self.values.size)

    def slice(self, start: int) -> RowBatch:
        """The rows from index ``start`` on."""
        return RowBatch(self.times[start:], self.units[start:], self.values[start:],
                        None if self.partitions is None else self.partitions[start:], self.first_row + start,
                        self.missing[start:])


def read_rows(path: str, *, time_column: str, unit_column: str, column: str | None,
              partition_column: str | None = None, missing: str = "error",
              batch_rows: int = 1 << 20) -> Iterator[RowBatch]:
    """The rows of ``path`` (CSV, ``.gz``, ``-`` or Parquet) in batches: a Parquet file ``batch_rows`` at a time, a
    CSV one block of :data:`_BLOCK` bytes at a time.  ``column=None``: rows without a value (``values`` all 0)."""
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}.")
    names = {"time": time_column, "unit": unit_column}
    if column is not None:
        names["value"] = column
    if partition_column is not None:
        names["partition"] = partition_column
    if len(set(names.values())) != len(names):
        raise ValueError(f"the columns must be distinct, got {', '.join(f'{k} {v!r}' for k, v in names.items())}.")
    source = "stdin" if path == "-" else path
    row = 1
    for table in _tables(path, source, names, batch_rows):
        yield _batch(table, names, source, row, missing)
        row += table.num_rows


def _tables(path: str, source: str, names: dict[str, str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    columns = list(names.values())
    if path != "-" and (path.endswith(".parquet") or _is_parquet(Path(path))):
        import pyarrow.parquet as pq

        try:
            file = pq.ParquetFile(_existing(path))
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"{source} is not a readable Parquet file ({error}).") from None
        _check_names(file.schema_arrow.names, columns, source)
        yield from file.iter_batches(batch_size=batch_rows, columns=columns)
        return
    handle = sys.stdin.buffer if path == "-" else (
        gzip.open(_existing(path), "rb") if path.endswith(".gz") else open(_existing(path), "rb", buffering=_PEEK))
    try:
        header = _header(handle)
    except _GZIP_ERRORS as error:
        raise InputError(_gzip_message(source, error)) from None
    if header is not None:  # checked here: pyarrow reads the first of two columns of one name, and says less
        _check_names(header, columns, source)
    types = {name: pa.string() for name in columns}
    if "value" in names:
        types[names["value"]] = pa.float64()
    try:
        reader = pcsv.open_csv(handle, read_options=pcsv.ReadOptions(block_size=_BLOCK),
                               convert_options=pcsv.ConvertOptions(column_types=types, include_columns=columns,
                                                                   null_values=_NULLS, strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowKeyError) as error:  # a bad file, or a column it lacks
        raise InputError(_message(source, error, names.get("value"))) from None
    except _GZIP_ERRORS as error:
        raise InputError(_gzip_message(source, error)) from None
    _check_names(reader.schema.names, columns, source)
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, pa.ArrowKeyError) as error:
            raise InputError(_message(source, error, names.get("value"))) from None
        except _GZIP_ERRORS as error:
            raise InputError(_gzip_message(source, error)) from None
        yield batch


#: Bytes of the input looked at for its header line (without consuming them).
_PEEK = 1 << 16
#: What a damaged .gz raises as it is read (an EOFError would otherwise become click's "aborted").
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
_NOT_A_NUMBER = re.compile(r"CSV conversion error to double: invalid value (.*)$")
_NOT_PARSED = re.compile(r"Failed to parse string: (.*) as a scalar of type")


def _header(handle: object) -> list[str] | None:
    """The names of the header line, read ahead without consuming it; None when that cannot be done (pyarrow then
    checks the names as it reads)."""
    try:
        ahead = handle.peek(_PEEK)  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if b"\n" not in ahead:
        return None
    line = ahead.split(b"\n", 1)[0].decode("utf-8-sig", errors="replace").rstrip("\r")
    return next(csv.reader([line]), [])


def _gzip_message(source: str, error: BaseException) -> str:
    return f"{source} is not a readable gzip file ({' '.join(str(error).split())[:120] or type(error).__name__})."


def _message(source: str, error: Exception, value_column: str | None = None) -> str:
    text = " ".join(str(error).split())
    found = _NOT_A_NUMBER.search(text)
    if found is not None and value_column is not None:  # the one column read as numbers
        return f"{source}: the value column {_quote(value_column)} holds {found.group(1)[:80]}, not a number."
    return f"{source}: {text[:200]}"


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PAR1"
    except OSError:
        return False


def _check_names(found: list[str], wanted: list[str], source: str) -> None:
    lacking = [name for name in wanted if name not in found]
    if lacking:
        raise InputError(f"{source} has no column {_quote(lacking[0])}; its columns are "
                         f"{', '.join(_quote(name) for name in found[:12])}.")
    twice = [name for name in wanted if found.count(name) > 1]
    if twice:
        raise InputError(f"{source} has {found.count(twice[0])} columns named {_quote(twice[0])}: which one is meant "
                         "is ambiguous; rename the others.")


def _batch(table: pa.RecordBatch, names: dict[str, str], source: str, row: int, missing: str) -> RowBatch:
    texts = {}
    for role in ("time", "unit", "partition"):
        if role in names:
            column = _cast(table.column(names[role]), pa.string(), source, names[role], "text")
            empty = np.asarray(pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(column)), 0), True))
            if empty.any():
                raise InputError(f"{source} row {row + int(np.flatnonzero(empty)[0])}: the {role} "
                                 f"({_quote(names[role])}) is missing.")
            texts[role] = column
    if "value" not in names:
        values = np.zeros(table.num_rows)
    else:
        values = np.asarray(_cast(table.column(names["value"]), pa.float64(), source, names["value"], "numbers")
                            .to_numpy(zero_copy_only=False), dtype=np.float64)
    absent = np.isnan(values)
    if absent.any():
        if missing == "error":
            raise InputError(f"{source} row {row + int(np.flatnonzero(absent)[0])}: the value is missing "
                             "(--missing zero reads it as 0, --missing skip drops the row).")
        values = np.where(absent, 0.0, values)
    if np.isinf(values).any():
        raise InputError(f"{source} row {row + int(np.flatnonzero(np.isinf(values))[0])}: the value is infinite.")
    partitions = texts.get("partition")
    return RowBatch(times=texts["time"], units=_strings(texts["unit"]), values=values,
                    partitions=None if partitions is None else _strings(partitions), first_row=row,
                    missing=absent if missing == "skip" else np.zeros(values.size, dtype=bool))


def _cast(column: pa.Array, target: pa.DataType, source: str, name: str, wanted: str) -> pa.Array:
    """A Parquet column as text or numbers; a value or a type that does not convert is a one-line error."""
    try:
        return column.cast(target)
    except pa.ArrowNotImplementedError:
        raise InputError(f"{source}: the column {_quote(name)} is of type {column.type}, not {wanted}.") from None
    except pa.ArrowInvalid as error:
        found = _NOT_PARSED.search(" ".join(str(error).split()))
        holds = f"holds {found.group(1)[:80]}" if found else f"does not convert ({str(error)[:120]})"
        raise InputError(f"{source}: the column {_quote(name)} {holds}, not {wanted}.") from None


def _strings(column: pa.Array) -> pa.Array:
    return pc.utf8_trim_whitespace(column)
