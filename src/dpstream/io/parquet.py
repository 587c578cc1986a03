"""Reading Parquet streams with pyarrow, one record batch at a time, under the rules of
:mod:`dpstream.io`: the value column must be numeric (integer, floating point or decimal); a
null or NaN is missing; an infinity is an error; time and key values are cast to text, a null
giving ``""``.  Rows count from 1.  pyarrow is imported only when a Parquet file is opened."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dpstream.io.records import Batch, InputError, ReadStats, _quote, resolve_columns

_NUMERIC = "integer, floating point or decimal"


class _ParquetStream:
    """A Parquet file read one record batch at a time, under the rules of the text reader."""

    def __init__(self, path: Path, source: str, column: str | None, time_column: str | None,
                 key_column: str | None, missing: str, stats: ReadStats) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.source, self.missing, self.stats = source, missing, stats
        stats.unit = "row"
        try:
            self.file = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"{source} is not a readable Parquet file ({error}).") from None
        schema = self.file.schema_arrow
        self.names = list(schema.names)
        try:
            value, time, key = resolve_columns(self.names, source, column=column, time_column=time_column,
                                               key_column=key_column)
            kind = schema.field(value).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
                raise InputError(f"{source} column {_quote(self.names[value])} holds {kind} values, not numbers; "
                                 f"the value column must be numeric ({_NUMERIC}).")
            for index in (time, key):
                if index is not None:
                    try:
                        pa.array([], type=schema.field(index).type).cast(pa.string())
                    except pa.ArrowException:
                        raise InputError(f"{source} column {_quote(self.names[index])} holds "
                                         f"{schema.field(index).type} values, which cannot be read as text.") from None
        except InputError:
            self.file.close()
            raise
        self.value, self.time, self.key = value, time, key

    def batches(self, size: int) -> Iterator[Batch]:
        import pyarrow as pa

        columns = [self.names[i] for i in (self.value, self.time, self.key) if i is not None]
        row = 1
        try:
            for record_batch in self.file.iter_batches(batch_size=size, columns=columns):
                batch = self._batch(record_batch, row)
                row += record_batch.num_rows
                if len(batch):
                    yield batch
        except pa.ArrowException as error:
            raise InputError(f"{self.source} cannot be read as Parquet near row {row} ({error}).") from None

    def _batch(self, record_batch: object, row: int) -> Batch:
        import pyarrow as pa

        count = record_batch.num_rows
        column = record_batch.column(self.names[self.value])
        values = np.array(column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)
        lines = np.arange(row, row + count, dtype=np.int64)
        times = self._texts(record_batch, self.time)
        keys = self._texts(record_batch, self.key)
        bad = ~np.isfinite(values)
        if bad.any():
            missing = np.isnan(values)
            stop = bad if self.missing == "error" else bad & ~missing
            if stop.any():
                self._fail(int(np.argmax(stop)), values, row)
            self.stats._met_missing(row + int(np.argmax(missing)), int(missing.sum()))
            if self.missing == "zero":
                values[missing] = 0.0
                self.stats.replaced += int(missing.sum())
            else:
                keep = ~missing
                self.stats.skipped += int(missing.sum())
                values, lines = values[keep], lines[keep]
                times = None if times is None else list(itertools.compress(times, keep))
                keys = None if keys is None else list(itertools.compress(keys, keep))
        self.stats.values += values.size
        return Batch(values, lines, times, keys)

    def _texts(self, record_batch: object, index: int | None) -> list[str] | None:
        import pyarrow as pa

        if index is None:
            return None
        return record_batch.column(self.names[index]).cast(pa.string()).fill_null("").to_pylist()

    def _fail(self, index: int, values: np.ndarray, row: int) -> None:
        where = f"{self.source} row {row + index}, column {_quote(self.names[self.value])},"
        if np.isnan(values[index]):
            self.stats._met_missing(row + index)
            raise InputError(f"{where} is missing (null or NaN); missing values are errors unless the missing "
                             "policy is zero or skip.")
        raise InputError(f"{where} holds {float(values[index])!r}; infinities are not stream values.")

    def close(self) -> None:
        self.file.close()
